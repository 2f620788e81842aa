/// @file
/// A fixed pool of host threads with a deterministic parallel-for.
///
/// Chunk boundaries depend only on the range and the grain, never on the number of threads or
/// on timing, so a reduction that combines per-chunk results in chunk order is bit-identical
/// whatever the thread count. Idle threads sleep on a condition variable (no busy-waiting).
///
/// Optional CPU affinity: like DeepSpeed's `pt_reserved_cores_perc`, a share of the cores the
/// process may use is left to the training thread (which launches the kernels and must not
/// wait for a core), and the pool's threads are pinned to the others (Linux; elsewhere the
/// pinning is reported as not applied and everything else works).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

#if defined(__linux__)
#  include <pthread.h>
#  include <sched.h>
#endif

ZF_NAMESPACE_BEGIN

/// The cores of the process split between the training thread and the host workers.
struct core_split {
  std::vector<int> training; ///< left to the training thread (kernel launches, the CUDA driver)
  std::vector<int> workers;  ///< for the host optimizer's threads
};

/// Splits `cores` (CPU ids) as DeepSpeed's `pt_reserved_cores_perc` does: the first
/// `round(reserved_perc * n)` cores in ascending order go to the training thread (at least one
/// when `reserved_perc > 0`, at most `n - 1`), the others to the workers. With a single core
/// (or `reserved_perc == 0`) both sides get every core.
/// @throws invalid_argument unless `0 <= reserved_perc < 1`.
[[nodiscard]] inline core_split split_cores(std::span<const int> cores, double reserved_perc) {
  if (!(reserved_perc >= 0.0 && reserved_perc < 1.0)) {
    throw invalid_argument("zenflow::split_cores: argument 'reserved_cores_perc' must be in [0, 1) (got " +
                           std::to_string(reserved_perc) + ")");
  }
  std::vector<int> sorted(cores.begin(), cores.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const auto n = static_cast<std::int64_t>(sorted.size());
  auto reserved = static_cast<std::int64_t>(std::llround(reserved_perc * static_cast<double>(n)));
  if (reserved_perc > 0.0) {
    reserved = std::max<std::int64_t>(reserved, 1);
  }
  reserved = std::min<std::int64_t>(reserved, n - 1);
  if (reserved <= 0) {
    return core_split{sorted, sorted};
  }
  core_split out;
  out.training.assign(sorted.begin(), sorted.begin() + reserved);
  out.workers.assign(sorted.begin() + reserved, sorted.end());
  return out;
}

/// CPU ids the calling thread may run on, ascending (Linux: its affinity mask; elsewhere
/// `0 .. hardware_concurrency - 1`).
[[nodiscard]] inline std::vector<int> allowed_cores() {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        out.push_back(c);
      }
    }
  }
#endif
  if (out.empty()) {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned c = 0; c < n; ++c) {
      out.push_back(static_cast<int>(c));
    }
  }
  return out;
}

namespace detail {
#if defined(__linux__)
inline bool set_thread_affinity(pthread_t thread, std::span<const int> cores) {
  if (cores.empty()) {
    return false;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return false;
    }
    CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(thread, sizeof(set), &set) == 0;
}
inline std::vector<int> get_thread_affinity(pthread_t thread) {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(thread, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        out.push_back(c);
      }
    }
  }
  return out;
}
#endif
} // namespace detail

/// Pins the calling thread to `cores`. Returns false (nothing changed) when the system refuses,
/// a core id is invalid, or the platform has no thread affinity.
inline bool pin_current_thread(std::span<const int> cores) {
#if defined(__linux__)
  return detail::set_thread_affinity(pthread_self(), cores);
#else
  (void)cores;
  return false;
#endif
}

/// The CPU ids the calling thread may run on (empty where the platform cannot tell).
[[nodiscard]] inline std::vector<int> current_thread_affinity() {
#if defined(__linux__)
  return detail::get_thread_affinity(pthread_self());
#else
  return {};
#endif
}

/// How a `worker_pool` places its threads.
struct worker_pool_options {
  /// Threads that run a parallel_for, the caller included; 0: one per worker core.
  unsigned threads = 0;
  /// Share of the allowed cores left to the training thread, in [0, 1) (DeepSpeed's
  /// `pt_reserved_cores_perc`; its ZenFlow default is 0.5).
  double reserved_cores_perc = 0.0;
  /// Pin worker thread i to worker core (i + 1) mod n. Worker core 0 is meant for the thread that
  /// calls parallel_for (`pin_caller()`); the training thread pins itself with
  /// `pin_current_thread(pool.training_cores())`.
  bool pin_threads = false;
};

class worker_pool {
public:
  /// Starts `threads - 1` workers (the calling thread is the last one). `threads == 0` means
  /// `std::thread::hardware_concurrency()`.
  explicit worker_pool(unsigned threads = 0) {
    const std::vector<int> cores = allowed_cores();
    split_ = core_split{cores, cores};
    start(threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : threads);
  }

  /// A pool placed as `options` says: `threads == 0` starts one thread per worker core.
  /// Pinning that the system refuses is not an error: `pinned()` says whether it was applied.
  /// @throws invalid_argument unless `0 <= options.reserved_cores_perc < 1`.
  explicit worker_pool(const worker_pool_options& options) {
    split_ = split_cores(allowed_cores(), options.reserved_cores_perc);
    start(options.threads == 0 ? static_cast<unsigned>(split_.workers.size()) : options.threads);
    if (options.pin_threads) {
      pinned_ = true;
#if defined(__linux__)
      for (std::size_t i = 0; i < workers_.size(); ++i) {
        const int core = split_.workers[(i + 1) % split_.workers.size()];
        pinned_ = detail::set_thread_affinity(workers_[i].native_handle(), std::span<const int>(&core, 1)) &&
                  pinned_;
      }
#else
      pinned_ = false;
#endif
    }
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    stop_workers();
  }

  /// Threads that run a parallel_for, the caller included.
  [[nodiscard]] unsigned size() const noexcept {
    return static_cast<unsigned>(workers_.size()) + 1;
  }

  /// Cores left to the training thread (every allowed core when nothing was reserved).
  [[nodiscard]] const std::vector<int>& training_cores() const noexcept {
    return split_.training;
  }
  /// Cores for the pool's threads.
  [[nodiscard]] const std::vector<int>& worker_cores() const noexcept {
    return split_.workers;
  }
  /// True when `pin_threads` was asked for and every worker thread was pinned.
  [[nodiscard]] bool pinned() const noexcept {
    return pinned_;
  }
  /// Pins the calling thread (the one that will call parallel_for) to worker core 0.
  bool pin_caller() const {
    return pin_current_thread(std::span<const int>(split_.workers.data(), 1));
  }
  /// The CPU ids worker thread `i` (0 .. size() - 2) may run on, as the system reports them.
  [[nodiscard]] std::vector<int> worker_affinity(unsigned i) {
#if defined(__linux__)
    return i < workers_.size() ? detail::get_thread_affinity(workers_[i].native_handle())
                               : std::vector<int>{};
#else
    (void)i;
    return {};
#endif
  }

  /// Number of chunks `parallel_for(n, grain, ...)` splits into.
  [[nodiscard]] static std::int64_t chunk_count(std::int64_t n, std::int64_t grain) noexcept {
    grain = std::max<std::int64_t>(grain, 1);
    return n <= 0 ? 0 : (n + grain - 1) / grain;
  }

  /// Calls `fn(chunk, begin, end)` for every chunk `[chunk * grain, min(n, (chunk + 1) * grain))`,
  /// on the pool's threads and the caller's, and returns when all are done. The first exception
  /// thrown by `fn` is rethrown here (the remaining chunks are skipped). Not reentrant: one
  /// parallel_for at a time per pool.
  template <class F>
  void parallel_for(std::int64_t n, std::int64_t grain, F&& fn) {
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t chunks = chunk_count(n, grain);
    if (chunks == 0) {
      return;
    }
    if (chunks == 1 || workers_.empty()) {
      for (std::int64_t c = 0; c < chunks; ++c) {
        fn(c, c * grain, std::min(n, (c + 1) * grain));
      }
      return;
    }
    std::function<void(std::int64_t)> body = [&](std::int64_t c) {
      fn(c, c * grain, std::min(n, (c + 1) * grain));
    };
    {
      std::lock_guard lock(mutex_);
      job_ = &body;
      job_chunks_ = chunks;
      next_chunk_.store(0, std::memory_order_relaxed);
      failed_.store(false, std::memory_order_relaxed);
      error_ = nullptr;
      busy_ = static_cast<unsigned>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    run_chunks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    job_ = nullptr;
    if (error_) {
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
  }

private:
  void start(unsigned threads) {
    try {
      workers_.reserve(threads - 1);
      for (unsigned i = 0; i + 1 < threads; ++i) {
        workers_.emplace_back([this] { worker_loop(); });
      }
    } catch (...) { // no thread may outlive a failed constructor
      stop_workers();
      throw;
    }
  }

  void stop_workers() noexcept {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) {
      t.join();
    }
  }

  void run_chunks() {
    const auto& body = *job_;
    for (;;) {
      const std::int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
      if (c >= job_chunks_ || failed_.load(std::memory_order_relaxed)) {
        return;
      }
      std::exception_ptr failure;
      try {
        body(c);
      } catch (...) {
        failure = std::current_exception();
      }
      if (failure) {
        // Outside the handler and moved under the lock: this thread keeps no reference to the
        // exception that the caller rethrows (and frees).
        std::lock_guard lock(mutex_);
        if (!error_) {
          error_ = std::move(failure);
        }
        failure = nullptr;
        failed_.store(true, std::memory_order_relaxed);
      }
    }
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) {
          return;
        }
        seen = generation_;
      }
      run_chunks();
      {
        std::lock_guard lock(mutex_);
        if (--busy_ == 0) {
          done_.notify_one();
        }
      }
    }
  }

  std::vector<std::thread> workers_;
  core_split split_;
  bool pinned_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t)>* job_ = nullptr;
  std::int64_t job_chunks_ = 0;
  std::atomic<std::int64_t> next_chunk_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  unsigned busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

ZF_NAMESPACE_END
