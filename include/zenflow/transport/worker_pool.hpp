/// @file
/// A fixed pool of host threads with a deterministic parallel-for.
///
/// Chunk boundaries depend only on the range and the grain, never on the number of threads or
/// on timing, so a reduction that combines per-chunk results in chunk order is bit-identical
/// whatever the thread count. Idle threads sleep on a condition variable (no busy-waiting).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

class worker_pool {
public:
  /// Starts `threads - 1` workers (the calling thread is the last one). `threads == 0` means
  /// `std::thread::hardware_concurrency()`.
  explicit worker_pool(unsigned threads = 0) {
    if (threads == 0) {
      threads = std::max(1u, std::thread::hardware_concurrency());
    }
    workers_.reserve(threads - 1);
    for (unsigned i = 0; i + 1 < threads; ++i) {
      workers_.emplace_back([this] { worker_loop(); });
    }
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) {
      t.join();
    }
  }

  /// Threads that run a parallel_for, the caller included.
  [[nodiscard]] unsigned size() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

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
  void run_chunks() {
    const auto& body = *job_;
    for (;;) {
      const std::int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
      if (c >= job_chunks_ || failed_.load(std::memory_order_relaxed)) {
        return;
      }
      try {
        body(c);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) {
          error_ = std::current_exception();
        }
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
