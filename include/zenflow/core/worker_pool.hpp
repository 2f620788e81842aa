/// @file
/// A fixed pool of host threads with a deterministic parallel-for.
///
/// Chunk boundaries depend only on the range and the grain, never on the number of threads or
/// on timing, so a reduction that combines per-chunk results in chunk order is bit-identical
/// whatever the thread count.
///
/// Fork/join costs microseconds whatever the workers were doing: the caller publishes the job
/// and drains the chunks itself; a worker joins only if it wakes while chunks are left, and the
/// join waits only for the workers that took part, never for sleeping ones to check in. Work of
/// one chunk (n <= grain) never leaves the calling thread. Each thread starts on its own
/// contiguous run of chunks (the same run call after call, as with a static schedule) and then
/// helps with the others' runs (so a sleeping worker delays nothing). Idle workers spin for a few
/// microseconds (`worker_pool_options::spin_microseconds`), then sleep on a condition variable;
/// the caller pays for a wake-up call only when some worker sleeps.
///
/// Optional CPU affinity: like DeepSpeed's `pt_reserved_cores_perc`, a share of the cores the
/// process may use is left to the training thread (which launches the kernels and must not
/// wait for a core), and the pool's threads are pinned to the others (Linux; elsewhere the
/// pinning is reported as not applied and everything else works).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
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
    detail::fail_argument("zenflow::split_cores", "reserved_cores_perc",
                          "must be in [0, 1) (got " + std::to_string(reserved_perc) + ")");
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
  /// How long an idle worker polls for the next job before it sleeps: back-to-back calls then
  /// start without a wake-up system call. 0: sleep at once.
  unsigned spin_microseconds = 50;
  /// When not empty: every worker thread may run on any of these cores (its affinity is this
  /// set), and `reserved_cores_perc` / `pin_threads` are ignored (the caller made the split, e.g.
  /// `reserve_training_cores`). `threads == 0` then starts one thread per core of the set.
  std::vector<int> confine_to = {};
};

namespace detail {
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// The chunks [next, end) first meant for one participant; others take from it once their own
/// run is empty (on its own cache line: every participant hammers its own counter).
struct alignas(64) chunk_range {
  std::atomic<std::int64_t> next{0};
  std::int64_t end = 0;
};

/// One parallel_for in flight: lives on the caller's stack, reached by workers only between
/// their entry into the pool's gate and their exit from it.
struct pool_job {
  void (*invoke)(void* fn, std::int64_t chunk, std::int64_t begin, std::int64_t end);
  void* fn;
  std::int64_t n;
  std::int64_t grain;
  chunk_range* ranges; // one per participant (the caller is participant 0)
  unsigned participants;
  std::atomic<bool> failed{false};
  std::exception_ptr error; // written once, by the thread whose exchange on `failed` won

  /// Participant `self` takes chunks from its own run first (so that the same thread touches
  /// the same memory call after call, as a static schedule would), then from the others' runs,
  /// until none is left (or one has failed). Which thread runs a chunk never changes its result.
  void drain(unsigned self) noexcept {
    for (unsigned j = 0; j < participants; ++j) {
      chunk_range& r = ranges[(self + j) % participants];
      for (;;) {
        if (failed.load(std::memory_order_relaxed)) {
          return;
        }
        const std::int64_t c = r.next.fetch_add(1, std::memory_order_relaxed);
        if (c >= r.end) {
          break;
        }
        try {
          invoke(fn, c, c * grain, std::min(n, (c + 1) * grain));
        } catch (...) {
          if (!failed.exchange(true, std::memory_order_relaxed)) {
            error = std::current_exception();
          }
        }
      }
    }
  }
};
} // namespace detail

/// A fixed set of host threads that run deterministic parallel-fors (see the file comment).
///
/// One parallel_for runs on a pool at a time. A parallel_for issued while another one runs on
/// the same pool (from inside a chunk, or from another thread) does not wait for it: it runs all
/// its chunks on its own calling thread, with the same chunk boundaries (so the same results).
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
  explicit worker_pool(const worker_pool_options& options) : spin_us_(options.spin_microseconds) {
    if (!options.confine_to.empty()) {
      confine(options);
      return;
    }
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
  /// Stops and joins the workers. Must not run while a parallel_for on this pool is in flight.
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
  /// True when `confine_to` was given and every worker thread was confined to it.
  [[nodiscard]] bool confined() const noexcept {
    return confined_;
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

  /// Calls `fn(chunk, begin, end)` once for every chunk
  /// `[chunk * grain, min(n, (chunk + 1) * grain))`, on the pool's threads and the caller's, and
  /// returns when all are done. `grain` is the smallest piece of work worth a thread: with
  /// `n <= grain` the one chunk runs on the calling thread and no worker is involved. The first
  /// exception thrown by `fn` is rethrown here (chunks not yet started are skipped).
  template <class F>
  void parallel_for(std::int64_t n, std::int64_t grain, F&& fn) {
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t chunks = chunk_count(n, grain);
    if (chunks == 0) {
      return;
    }
    if (chunks == 1 || workers_.empty() || busy_.exchange(true, std::memory_order_acquire)) {
      for (std::int64_t c = 0; c < chunks; ++c) {
        fn(c, c * grain, std::min(n, (c + 1) * grain));
      }
      return;
    }
    using fn_type = std::remove_reference_t<F>;
    detail::pool_job job;
    job.invoke = [](void* f, std::int64_t c, std::int64_t b, std::int64_t e) {
      (*static_cast<fn_type*>(f))(c, b, e);
    };
    job.fn = const_cast<void*>(static_cast<const void*>(std::addressof(fn)));
    job.n = n;
    job.grain = grain;
    job.ranges = ranges_.get();
    job.participants = size();
    for (unsigned k = 0; k < job.participants; ++k) { // contiguous runs, the caller's first
      ranges_[k].next.store(chunks * k / job.participants, std::memory_order_relaxed);
      ranges_[k].end = chunks * (k + 1) / job.participants;
    }
    run(job);
    busy_.store(false, std::memory_order_release);
    if (job.error) {
      std::rethrow_exception(job.error);
    }
  }

private:
  // gate_: bit 31 = a job is open for workers to join, bits 0-30 = workers inside the job.
  static constexpr std::uint32_t gate_open = std::uint32_t{1} << 31;

  void run(detail::pool_job& job) {
    job_ = &job;
#if defined(__linux__)
    caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
#endif
    gate_.store(gate_open, std::memory_order_release);
    // seq_cst on epoch_ and sleepers_ (here and in wait_for_epoch): either this load sees a
    // worker going to sleep, or that worker's next look at epoch_ sees the new job.
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    // One wake-up call per sleep: a worker woken but not yet running (on a virtual machine that
    // can take longer than many short jobs) must not cost every following job a system call.
    if (sleepers_.load(std::memory_order_seq_cst) > 0 &&
        !wake_sent_.exchange(true, std::memory_order_acq_rel)) {
      { std::lock_guard lock(sleep_mutex_); }
      wake_.notify_all();
    }
    job.drain(0);
    // Every chunk is taken: close the gate, then wait only for the workers inside it.
    if ((gate_.fetch_and(~gate_open, std::memory_order_acq_rel) & ~gate_open) != 0) {
      wait_for_workers_to_leave();
    }
    job_ = nullptr;
  }

  void confine(const worker_pool_options& options) {
    split_.workers = options.confine_to;
    std::sort(split_.workers.begin(), split_.workers.end());
    split_.workers.erase(std::unique(split_.workers.begin(), split_.workers.end()), split_.workers.end());
    split_.training = allowed_cores();
    start(options.threads == 0 ? static_cast<unsigned>(split_.workers.size()) : options.threads);
    confined_ = true;
#if defined(__linux__)
    for (auto& w : workers_) {
      confined_ = detail::set_thread_affinity(w.native_handle(), split_.workers) && confined_;
    }
#else
    confined_ = false;
#endif
  }

  void start(unsigned threads) {
    try {
      ranges_ = std::make_unique<detail::chunk_range[]>(threads);
      workers_.reserve(threads - 1);
      for (unsigned i = 0; i + 1 < threads; ++i) {
        workers_.emplace_back([this, i] { worker_loop(i + 1); });
      }
    } catch (...) { // no thread may outlive a failed constructor
      stop_workers();
      throw;
    }
  }

  void stop_workers() noexcept {
    stopping_.store(true, std::memory_order_release);
    {
      std::lock_guard lock(sleep_mutex_);
      epoch_.fetch_add(1, std::memory_order_seq_cst);
    }
    wake_.notify_all();
    for (auto& t : workers_) {
      t.join();
    }
  }

  /// Polls `done` for spin_us_, then sleeps on `cv` until it holds (`flag` counts sleepers,
  /// so that the side that makes `done` true knows whether to notify).
  /// `sent`, when given, is the waker's "a wake-up is on its way" flag, cleared once awake.
  template <class Done>
  void spin_then_sleep(Done&& done,
                       std::condition_variable& cv,
                       std::atomic<unsigned>& flag,
                       std::atomic<bool>* sent = nullptr) {
    if (spin_us_ > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
      for (unsigned i = 1; !done(); ++i) {
        detail::cpu_relax();
        if (i % 64 == 0) {
          if (std::chrono::steady_clock::now() >= until) {
            break;
          }
          // A spinning thread on the same CPU as the one it waits for would keep it from running
          // (seen: a woken worker placed on the caller's CPU stalled every job by its whole spin).
          std::this_thread::yield();
        }
      }
    }
    if (done()) {
      return;
    }
    std::unique_lock lock(sleep_mutex_);
    flag.fetch_add(1, std::memory_order_seq_cst);
    cv.wait(lock, done);
    flag.fetch_sub(1, std::memory_order_relaxed);
    if (sent != nullptr) {
      // A worker that fell asleep after the last wake-up call is woken by the next job's call.
      sent->store(false, std::memory_order_release);
    }
  }

  /// Waits for the epoch to move past `seen` and returns the new one.
  std::uint32_t wait_for_epoch(std::uint32_t seen) {
    spin_then_sleep([&] { return epoch_.load(std::memory_order_seq_cst) != seen; }, wake_, sleepers_,
                    &wake_sent_);
    return epoch_.load(std::memory_order_acquire);
  }

  void wait_for_workers_to_leave() {
    spin_then_sleep([&] { return gate_.load(std::memory_order_seq_cst) == 0; }, left_, caller_sleeping_);
  }

  /// Linux may place a woken worker on the CPU of the thread that woke it, even with another CPU
  /// idle (seen on a 2-vCPU virtual machine: the two then share one CPU for milliseconds, and the
  /// pool runs slower than one thread). An unpinned worker that finds itself on the caller's CPU
  /// narrows its affinity to the pool's other cores: a few microseconds, paid only then. Its
  /// affinity is always the pool's cores less at most one, so it follows a caller that moves.
  void move_off_caller_cpu([[maybe_unused]] unsigned self) {
#if defined(__linux__)
    const int caller = caller_cpu_.load(std::memory_order_relaxed);
    if (pinned_ || split_.workers.size() < 2 || caller < 0 || sched_getcpu() != caller) {
      return;
    }
    std::vector<int> others;
    for (int c : split_.workers) {
      if (c != caller) {
        others.push_back(c);
      }
    }
    if (!others.empty()) {
      (void)detail::set_thread_affinity(pthread_self(), others);
    }
#endif
  }

  void worker_loop(unsigned self) {
    // Not epoch_'s current value: a thread that starts late must still see the stop request.
    std::uint32_t seen = 0;
    for (;;) {
      seen = wait_for_epoch(seen);
      if (stopping_.load(std::memory_order_acquire)) {
        return;
      }
      move_off_caller_cpu(self);
      // Enter only while the gate is open; job_ is read after entering, so a worker that woke
      // for an earlier job and enters a later one works on the later one.
      std::uint32_t g = gate_.load(std::memory_order_relaxed);
      bool entered = false;
      while ((g & gate_open) != 0) {
        if (gate_.compare_exchange_weak(g, g + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
          entered = true;
          break;
        }
      }
      if (!entered) {
        continue;
      }
      job_->drain(self);
      // The last one out of a closed gate wakes the caller (only it waits on gate_).
      if (gate_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard lock(sleep_mutex_); }
        left_.notify_all();
      }
    }
  }

  std::vector<std::thread> workers_;
  core_split split_;
  bool pinned_ = false;
  bool confined_ = false;
  unsigned spin_us_ = worker_pool_options{}.spin_microseconds;
  detail::pool_job* job_ = nullptr;
  std::unique_ptr<detail::chunk_range[]> ranges_; // one per participant, reused by every job
  std::atomic<std::uint32_t> gate_{0};
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> busy_{false};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;       // workers: a new epoch
  std::condition_variable left_;       // the caller: the last worker left the closed gate
  std::atomic<unsigned> sleepers_{0};  // workers asleep on wake_
  std::atomic<int> caller_cpu_{-1};    // the CPU of the last parallel_for's caller (Linux)
  std::atomic<bool> wake_sent_{false}; // wake_ notified, and no woken worker has run since
  std::atomic<unsigned> caller_sleeping_{0};
};

/// `pool->parallel_for(n, grain, fn)`, or the same chunks in order on the calling thread when
/// `pool` is null: the one parallel-for of the host primitives.
template <class F>
void parallel_for(worker_pool* pool, std::int64_t n, std::int64_t grain, F&& fn) {
  if (pool != nullptr) {
    pool->parallel_for(n, grain, std::forward<F>(fn));
    return;
  }
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = worker_pool::chunk_count(n, grain);
  for (std::int64_t c = 0; c < chunks; ++c) {
    fn(c, c * grain, std::min(n, (c + 1) * grain));
  }
}

ZF_NAMESPACE_END
