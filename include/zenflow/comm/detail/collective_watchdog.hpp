/// @file
/// `collective_watchdog<Probe>`: bounds the time a stream-ordered collective may take, from a
/// thread of its own, for a device communicator whose collectives the caller never waits for
/// (nccl_communicator). Each collective, once enqueued, is marked by a token (a CUDA event recorded
/// after it); the thread polls the pending tokens and the transport's asynchronous error. A token
/// still pending `bound` after its collective was enqueued, or an asynchronous error, makes the
/// watchdog stop the transport once (ncclCommRevoke: the collective's kernels end, so every wait
/// on the stream returns) and keep the reason, which the communicator's next call throws.
///
/// Why a thread: a rank that fails leaves the others' collectives spinning on the device, and
/// whatever waits for that stream (the engine's consumer thread, a cudaStreamSynchronize) waits
/// with it; nothing on those threads can time it out. PyTorch's NCCL watchdog is the same design.
///
/// Probe (host-only in the tests, CUDA + NCCL in nccl_communicator):
///   using token = ...;                          // copyable, owned by the caller
///   void enter_thread();                        // on the watchdog's thread, before any poll
///   watch_state poll(token) ;                   // pending, complete, or failed (with a reason)
///   std::string async_error();                  // "" while the transport is healthy
///   void stop_transport();                      // at most once, on the watchdog's thread
///
/// poll_released: the communicator's own bounded poll of an NCCL call in progress, its lock
/// released between polls (so that the watchdog's revoke is not held up by it).
///
/// Locks: the watchdog polls the tokens under its own lock (poll() must not take the transport's
/// lock), and calls async_error() and stop_transport(), which may take the transport's lock
/// (nccl_communicator's, held around each NCCL call), after releasing its own: a revoke that
/// blocks (on that lock, or inside NCCL) never blocks watch(), reason() or pending(), which every
/// communicator call takes. Mark a collective after releasing the transport's lock all the same.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

struct watch_state {
  enum kind_t { pending, complete, failed } kind = pending;
  std::string reason; // with failed
};

/// Polls `done()` until it answers true (returns true) or `limit` has passed (returns false),
/// backing off from 1 us to 1 ms between polls. `lock` (a BasicLockable, or null for none) is held
/// by the caller on entry and on return, and during each poll only: released while it waits, so
/// that another thread's call under it (the watchdog's ncclCommRevoke) is not held up by this
/// wait for up to `limit`.
template <class Lockable, class Done>
bool poll_released(Lockable* lock, std::chrono::milliseconds limit, Done&& done) {
  using clock = std::chrono::steady_clock;
  struct released { // the lock again on every way out, an exception included
    Lockable* l;
    explicit released(Lockable* x) : l(x) {
      if (l != nullptr) {
        l->unlock();
      }
    }
    released(const released&) = delete;
    released& operator=(const released&) = delete;
    ~released() {
      if (l != nullptr) {
        l->lock();
      }
    }
  };
  const auto deadline = clock::now() + limit;
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    if (done()) {
      return true;
    }
    if (clock::now() >= deadline) {
      return false;
    }
    {
      const released r(lock);
      std::this_thread::sleep_for(pause);
    }
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

template <class Probe>
class collective_watchdog {
public:
  using token = typename Probe::token;
  using clock = std::chrono::steady_clock;

  /// `tokens` is the pool the collectives are marked with (never grown: nothing is allocated per
  /// collective); `bound` > 0; `where` ("rank 1 of 4") goes into the reason.
  collective_watchdog(Probe probe,
                      std::vector<token> tokens,
                      std::chrono::milliseconds bound,
                      std::string where)
      : probe_(std::move(probe)), free_(std::move(tokens)), bound_(bound), where_(std::move(where)),
        thread_([this] { run(); }) {}

  collective_watchdog(const collective_watchdog&) = delete;
  collective_watchdog& operator=(const collective_watchdog&) = delete;

  /// Stops the thread (pending collectives are no longer watched; the caller owns the tokens).
  ~collective_watchdog() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  /// Marks the collective just enqueued, named `what`: `record(token)` records the token after it
  /// (on the caller's thread, under the watchdog's lock). With every token pending, the newest is
  /// recorded again for this collective and its clock restarts: on one stream, where collectives
  /// complete in order, a hang in the earlier one is still caught, one bound after this one.
  template <class Record>
  void watch(std::string_view what, Record&& record) {
    std::lock_guard lk(mu_);
    if (fired_ || stopping_) {
      return;
    }
    if (free_.empty() && pending_.empty()) {
      return; // an empty pool: nothing to watch with
    }
    if (free_.empty()) {
      entry& newest = pending_.back();
      record(newest.mark);
      newest.what.assign(what);
      newest.since = clock::now();
    } else {
      token t = free_.back();
      record(t); // may throw: the token stays free
      free_.pop_back();
      pending_.push_back(entry{t, std::string(what), clock::now()});
    }
    cv_.notify_all();
  }

  /// Why the watchdog stopped the transport; empty while it has not.
  [[nodiscard]] std::string reason() const {
    std::lock_guard lk(mu_);
    return reason_;
  }
  [[nodiscard]] bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }
  /// Collectives marked and not yet seen complete.
  [[nodiscard]] std::size_t pending() const {
    std::lock_guard lk(mu_);
    return pending_.size();
  }

private:
  struct entry {
    token mark;
    std::string what;
    clock::time_point since;
  };

  /// Polls often enough to catch a hang within ~1/16 of the bound, at most every 250 ms.
  [[nodiscard]] std::chrono::milliseconds period() const {
    return std::clamp(bound_ / 16, std::chrono::milliseconds(1), std::chrono::milliseconds(250));
  }

  void run() {
    probe_.enter_thread();
    std::unique_lock lk(mu_);
    while (!stopping_ && !fired_) {
      if (pending_.empty()) {
        cv_.wait(lk, [&] { return stopping_ || !pending_.empty(); });
        continue;
      }
      std::string why = sweep();
      if (why.empty()) {
        // The transport's error without our lock: async_error() may wait for the transport's.
        lk.unlock();
        std::string async = probe_.async_error();
        lk.lock();
        if (!async.empty() && !stopping_) {
          why = "an asynchronous error on " + where_ + ": " + async;
        }
      }
      if (!why.empty()) {
        // Under our lock: a watch() racing this one sees fired_ and marks nothing.
        reason_ = std::move(why);
        fired_.store(true, std::memory_order_release);
        // Not under it: a revoke that blocks must not block the communicator's calls (each takes
        // our lock: watch(), reason()). The destructor still waits for it (it joins the thread).
        lk.unlock();
        probe_.stop_transport();
        return;
      }
      cv_.wait_for(lk, period(), [&] { return stopping_; });
    }
  }

  /// Returns the completed tokens to the pool (any of them: collectives on different streams
  /// complete in any order); a reason to stop the transport ("" while none: the transport's
  /// asynchronous error is asked by run(), without the lock).
  std::string sweep() {
    const auto now = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      watch_state s = probe_.poll(it->mark);
      if (s.kind == watch_state::failed) {
        return it->what + " failed on " + where_ + ": " + s.reason;
      }
      if (s.kind == watch_state::complete) {
        free_.push_back(it->mark);
        it = pending_.erase(it);
        continue;
      }
      if (now - it->since >= bound_) {
        return it->what + " not complete " + std::to_string(bound_.count()) +
               " ms after it was enqueued on " + where_ +
               ": a rank has failed, hangs, or did not make the same call";
      }
      ++it;
    }
    return {};
  }

  Probe probe_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<token> free_;
  std::deque<entry> pending_;
  std::chrono::milliseconds bound_;
  std::string where_;
  bool stopping_ = false;
  std::atomic<bool> fired_{false}; // set once, under mu_, after reason_
  std::string reason_;
  std::thread thread_; // last: starts once every other member is built
};

} // namespace detail::comm

ZF_NAMESPACE_END
