/// @file
/// The streams of an `emulated_device` (core/emulated_device.hpp): each an in-order executor thread
/// with its queue, its modelled clock (where the last operation ended, what a body took per byte)
/// and its jitter generator; the device's set of them, found by their handles; and the thread flag
/// that tells a call into a device that it comes from a host task. Apart from the device so that
/// the public header holds its interface and the rules it documents.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// True on a stream's thread (inside a host task, a kernel's body, a copy), on every emulated
/// device: set by the stream's loop, read by the device's calls (no CUDA call from a host task).
inline bool& on_emulated_stream_thread() noexcept {
  static thread_local bool on = false;
  return on;
}

/// A stream: its thread runs the tasks pushed on it in order, one at a time.
struct emulated_stream {
  using clock = std::chrono::steady_clock;

  /// Stream `stream_index` of its device (0: the null stream); its jitter generator is seeded
  /// from the device's `jitter_seed` and the index, and draws delays below `jitter_bound`.
  emulated_stream(int stream_index, std::uint64_t jitter_seed, std::chrono::microseconds jitter_bound)
      : index(stream_index), max_jitter(jitter_bound),
        rng(jitter_seed * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(stream_index)) {
    thread = std::thread([this] { loop(); });
  }
  emulated_stream(const emulated_stream&) = delete;
  emulated_stream& operator=(const emulated_stream&) = delete;
  ~emulated_stream() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard lock(mutex);
      tasks.push_back(std::move(task));
      ++enqueued;
    }
    cv.notify_all();
  }
  void drain() {
    std::unique_lock lock(mutex);
    const std::uint64_t target = enqueued;
    cv.wait(lock, [&] { return done >= target; });
  }
  /// Operations enqueued and not run yet.
  std::uint64_t pending() {
    std::lock_guard lock(mutex);
    return enqueued - done;
  }
  void loop() {
    on_emulated_stream_thread() = true;
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !tasks.empty(); });
        if (tasks.empty()) {
          return; // stop requested and everything ran
        }
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
      {
        std::lock_guard lock(mutex);
        ++done;
      }
      cv.notify_all();
    }
  }
  /// The random delay before an operation (`emulated_timing::max_jitter`: one operation in four).
  std::chrono::microseconds jitter() {
    const auto max = max_jitter.count();
    if (max <= 0 || rng() % 4 != 0) {
      return std::chrono::microseconds{0};
    }
    return std::chrono::microseconds(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max)));
  }

  int index;
  std::chrono::microseconds max_jitter; // the device's emulated_timing::max_jitter
  std::mt19937_64 rng;                  // used on the stream's own thread only
  // The stream's modelled clock (its own thread only): an operation that follows the previous
  // one directly (no wait, no idle time between) starts at that one's modelled end, as on a GPU,
  // instead of when this thread woke up; and its body is started early by the time bodies of its
  // kind took per byte on this stream, so that it ends at its modelled end (see
  // emulated_timeline::run()).
  bool chained = false;
  clock::time_point chain_end{};
  double body_ns_per_byte[5] = {0, 0, 0, 0, 0}; // by device_op::kind
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  std::uint64_t enqueued = 0;
  std::uint64_t done = 0;
  bool stop = false;
  std::thread thread; // last: starts after every other member is constructed
};

/// A device's streams: [0] the null stream, then each in creation order (its index); a destroyed
/// stream leaves an empty slot. A stream's handle is its address, opaque to callers.
class emulated_stream_set {
public:
  static cudaStream_t handle(emulated_stream& s) noexcept {
    // The handle is the state's address, opaque to callers and mapped back by find() only.
    return reinterpret_cast<cudaStream_t>(&s);
  }
  /// A new stream, numbered by its place (see emulated_stream's constructor for the rest).
  cudaStream_t add(std::uint64_t jitter_seed, std::chrono::microseconds max_jitter) {
    std::lock_guard lock(mutex_);
    streams_.push_back(
        std::make_unique<emulated_stream>(static_cast<int>(streams_.size()), jitter_seed, max_jitter));
    return handle(*streams_.back());
  }
  /// The stream of handle `s` (nullptr: the null stream); throws naming `stream` for any other.
  emulated_stream& find(cudaStream_t s) {
    std::lock_guard lock(mutex_);
    if (s == nullptr) {
      return *streams_.front();
    }
    for (auto& p : streams_) {
      if (p && handle(*p) == s) {
        return *p;
      }
    }
    fail_argument("zenflow::emulated_device", "stream", "is not a live stream of this device");
  }
  /// Takes stream `s` out of the set (its slot stays, empty); nullptr when `s` is not one of them.
  std::unique_ptr<emulated_stream> take(cudaStream_t s) {
    std::unique_ptr<emulated_stream> gone;
    std::lock_guard lock(mutex_);
    auto it = std::find_if(streams_.begin(), streams_.end(),
                           [&](const std::unique_ptr<emulated_stream>& p) { return p && handle(*p) == s; });
    if (it != streams_.end()) {
      gone = std::move(*it);
      it->reset();
    }
    return gone;
  }
  /// Takes every stream out (the device's end).
  std::vector<std::unique_ptr<emulated_stream>> take_all() {
    std::vector<std::unique_ptr<emulated_stream>> all;
    std::lock_guard lock(mutex_);
    all = std::move(streams_);
    return all;
  }
  /// The streams alive now.
  std::vector<emulated_stream*> live() {
    std::vector<emulated_stream*> all;
    std::lock_guard lock(mutex_);
    for (auto& p : streams_) {
      if (p) {
        all.push_back(p.get());
      }
    }
    return all;
  }
  /// Calls `f(slots)` under the set's lock: no stream is added or taken out meanwhile.
  template <class F>
  void with_streams(F&& f) {
    std::lock_guard lock(mutex_);
    std::forward<F>(f)(streams_);
  }

private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<emulated_stream>> streams_; // [0] = the null stream; destroyed slots are null
};

} // namespace detail

ZF_NAMESPACE_END
