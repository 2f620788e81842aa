/// @file
/// The staleness-bounded queue between the training thread and the host optimizer.
///
/// The training thread submits one host job per window, in order (window 0, 1, ...); one
/// executor thread runs them in that order. `submit` blocks until at most `bound` jobs are
/// unfinished after it returns, so the device never runs more than `bound` windows ahead of
/// the applied host results: while the device computes window t, every job before t - bound
/// has finished. ZenFlow's overlapped step is `bound == 1` (`wait_applied(w - 1)`, apply,
/// `submit(job w)`). Every moment the training thread blocks is counted as stall time.
///
/// An exception thrown by a job is kept and rethrown to the training thread by its next call
/// (`submit`, `wait_applied`, `drain`, `rethrow_if_failed`, `shutdown`), exactly once; the jobs
/// queued behind the failed one are cancelled (they would apply on top of a failed update).
/// Shutdown, explicit or by the destructor, drains or cancels the queued jobs, lets the
/// running one finish and joins the executor: no thread is left behind.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// What happens to queued (not yet started) jobs at shutdown. The running job always finishes.
enum class shutdown_mode : unsigned char {
  drain, ///< run them
  cancel ///< drop them (counted as cancelled)
};

struct window_queue_stats {
  std::int64_t submitted = 0;     ///< windows submitted
  std::int64_t completed = 0;     ///< windows finished: ran, failed or cancelled
  std::int64_t failed = 0;        ///< jobs that threw
  std::int64_t cancelled = 0;     ///< jobs dropped (behind a failure, or by a cancelling shutdown)
  std::int64_t max_in_flight = 0; ///< most unfinished windows seen right after a submit
  std::uint64_t stall_ns = 0;     ///< time callers blocked in submit / wait_applied / drain
  std::uint64_t stalls = 0;       ///< calls that blocked
};

/// Thrown by calls made after `shutdown`.
class queue_closed : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

class window_queue {
public:
  using job_type = std::function<void(std::int64_t window)>;

  /// Starts the executor thread.
  /// @param bound    how many windows the submitter may run ahead of the applied results, >= 1
  ///                 (a synchronous update needs no queue: run the job inline).
  /// @param on_destroy what the destructor does with queued jobs.
  /// @throws invalid_argument for `bound < 1`.
  explicit window_queue(std::int64_t bound, shutdown_mode on_destroy = shutdown_mode::drain)
      : bound_(checked_bound(bound)), on_destroy_(on_destroy) {
    executor_ = std::thread([this] { run(); });
  }
  window_queue(const window_queue&) = delete;
  window_queue& operator=(const window_queue&) = delete;

  /// Confines the executor thread to `cores` (its affinity becomes that set; Linux). Returns
  /// false, with nothing changed, where the system refuses, a core id is invalid or the platform
  /// has no thread affinity.
  bool confine_executor(std::span<const int> cores) {
#if defined(__linux__)
    return detail::set_thread_affinity(executor_.native_handle(), cores);
#else
    (void)cores;
    return false;
#endif
  }

  /// Shuts down as chosen at construction. A destructor cannot throw: an error nobody collected
  /// is reported through the log hook (core/log.hpp) (call `drain()` or `shutdown()` first to receive it).
  ~window_queue() {
    stop(on_destroy_);
    if (error_) {
      try {
        std::rethrow_exception(error_);
      } catch (const std::exception& e) {
        log(log_level::error,
            std::string("zenflow::window_queue: a host job failed and nobody collected the error: ") +
                e.what());
      } catch (...) {
        log(log_level::error, "zenflow::window_queue: a host job failed and nobody collected the error");
      }
    }
  }

  /// Submits the job of the next window and returns that window's index. First rethrows a
  /// pending job error, then blocks (stall) until at most `bound - 1` earlier windows are
  /// unfinished, so that at most `bound` are once this one is queued. `job` is called as
  /// `job(window)` (or `job()`), on the executor thread.
  /// @throws invalid_argument for an empty job; queue_closed after shutdown; a job's exception.
  template <class F>
  std::int64_t submit(F&& job) {
    job_type fn;
    if constexpr (std::is_invocable_v<F&, std::int64_t>) {
      fn = job_type(std::forward<F>(job));
    } else {
      static_assert(std::is_invocable_v<F&>, "a window job is callable as job(window) or job()");
      fn = [f = std::forward<F>(job)](std::int64_t) mutable { f(); };
    }
    if (!fn) {
      detail::fail_argument("zenflow::window_queue::submit", "job", "is empty");
    }
    check_not_executor("submit");
    std::unique_lock lock(mutex_);
    if (stopping_) {
      throw queue_closed("zenflow::window_queue::submit: the queue is shut down");
    }
    rethrow_locked();
    const std::int64_t w = submitted_;
    wait_locked(lock, w - bound_);
    if (stopping_) {
      throw queue_closed("zenflow::window_queue::submit: the queue is shut down");
    }
    rethrow_locked(); // a job that failed while we waited: report it instead of queueing
    queue_.push_back(entry{w, std::move(fn)});
    ++submitted_;
    max_in_flight_ = std::max(max_in_flight_, submitted_ - completed_);
    lock.unlock();
    work_cv_.notify_one();
    return w;
  }

  /// Blocks (stall) until windows 0..`window` have finished, then rethrows a pending job error.
  /// A negative window returns at once.
  /// @throws invalid_argument for a window not submitted yet (it would wait forever).
  void wait_applied(std::int64_t window) {
    check_not_executor("wait_applied");
    std::unique_lock lock(mutex_);
    if (window >= submitted_) {
      detail::fail_argument("zenflow::window_queue::wait_applied", "window",
                            "was not submitted yet (" + std::to_string(window) +
                                " >= " + std::to_string(submitted_) + " submitted)");
    }
    wait_locked(lock, window);
    rethrow_locked();
  }

  /// Waits for every submitted window, then rethrows a pending job error.
  void drain() {
    check_not_executor("drain");
    std::unique_lock lock(mutex_);
    wait_locked(lock, submitted_ - 1);
    rethrow_locked();
  }

  /// Rethrows (once) the error of a failed job, if there is one. Never blocks.
  void rethrow_if_failed() {
    std::lock_guard lock(mutex_);
    rethrow_locked();
  }

  /// Stops accepting jobs, drains or cancels the queued ones, waits for the running one and
  /// joins the executor; then rethrows a pending job error. Idempotent.
  void shutdown(shutdown_mode mode = shutdown_mode::drain) {
    check_not_executor("shutdown");
    stop(mode);
    std::lock_guard lock(mutex_);
    rethrow_locked();
  }

  /// True once windows 0..`window` have finished. Never blocks, never throws.
  [[nodiscard]] bool applied(std::int64_t window) const {
    std::lock_guard lock(mutex_);
    return window < completed_;
  }

  [[nodiscard]] std::int64_t bound() const noexcept {
    return bound_;
  }
  /// Windows submitted and not finished yet.
  [[nodiscard]] std::int64_t in_flight() const {
    std::lock_guard lock(mutex_);
    return submitted_ - completed_;
  }
  [[nodiscard]] std::int64_t submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  /// Windows finished (ran, failed or cancelled); they finish in order.
  [[nodiscard]] std::int64_t completed() const {
    std::lock_guard lock(mutex_);
    return completed_;
  }
  [[nodiscard]] window_queue_stats stats() const {
    std::lock_guard lock(mutex_);
    return window_queue_stats{submitted_,     completed_, failed_, cancelled_,
                              max_in_flight_, stall_ns_,  stalls_};
  }

private:
  struct entry {
    std::int64_t window = 0;
    job_type fn;
  };

  static std::int64_t checked_bound(std::int64_t bound) {
    if (bound < 1) {
      detail::fail_argument("zenflow::window_queue", "bound",
                            "must be >= 1 (got " + std::to_string(bound) +
                                "; a synchronous update needs no queue)");
    }
    return bound;
  }

  void check_not_executor(const char* what) const {
    if (std::this_thread::get_id() == executor_id_.load()) {
      throw std::logic_error(std::string("zenflow::window_queue::") + what +
                             ": called from a job (it would wait for itself)");
    }
  }

  // Waits, counting the stall, until every window <= `window` has finished (or shutdown
  // dropped the executor).
  void wait_locked(std::unique_lock<std::mutex>& lock, std::int64_t window) {
    if (window < completed_) {
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return window < completed_ || exited_; });
    stall_ns_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    ++stalls_;
  }

  void rethrow_locked() {
    if (error_) {
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
  }

  // Drops the queued jobs; the caller destroys them after unlocking (their destructors are
  // user code and must not run under our lock).
  std::deque<entry> cancel_queued_locked() {
    std::deque<entry> dropped;
    dropped.swap(queue_);
    const auto n = static_cast<std::int64_t>(dropped.size());
    completed_ += n;
    cancelled_ += n;
    return dropped;
  }

  void stop(shutdown_mode mode) noexcept {
    std::deque<entry> dropped;
    {
      std::lock_guard lock(mutex_);
      if (mode == shutdown_mode::cancel) {
        dropped = cancel_queued_locked();
      }
      stopping_ = true;
    }
    work_cv_.notify_all();
    done_cv_.notify_all();
    if (executor_.joinable()) {
      executor_.join();
    }
  }

  void run() {
    executor_id_.store(std::this_thread::get_id());
    for (;;) {
      entry e;
      {
        std::unique_lock lock(mutex_);
        work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) {
          exited_ = true;
          break;
        }
        e = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr failure;
      try {
        e.fn(e.window);
      } catch (...) {
        failure = std::current_exception();
      }
      e.fn = nullptr; // the job's captures die on this thread, outside the lock
      std::deque<entry> dropped;
      {
        std::lock_guard lock(mutex_);
        ++completed_;
        if (failure) {
          ++failed_;
          if (!error_) {
            // Hand the only reference over under the lock: the exception object must not be
            // released by this thread after the training thread took it (it may be reading it).
            error_ = std::move(failure);
          }
          failure = nullptr;
          dropped = cancel_queued_locked();
        }
      }
      done_cv_.notify_all();
    }
    done_cv_.notify_all();
  }

  const std::int64_t bound_;
  const shutdown_mode on_destroy_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<entry> queue_;
  std::int64_t submitted_ = 0;
  std::int64_t completed_ = 0;
  std::int64_t failed_ = 0;
  std::int64_t cancelled_ = 0;
  std::int64_t max_in_flight_ = 0;
  std::uint64_t stall_ns_ = 0;
  std::uint64_t stalls_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  bool exited_ = false;
  std::atomic<std::thread::id> executor_id_{};
  std::thread executor_; // last: started after every other member exists
};

ZF_NAMESPACE_END
