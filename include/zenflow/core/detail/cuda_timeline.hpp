/// @file
/// The CUDA backend's record of its streams' work for the engine's pipeline trace
/// (engine::start_trace / write_trace), timed by CUDA events: while on, every operation the engine
/// enqueues through the backend (a launch of the plan, a copy, a memset, a copy of the D2H ring)
/// is bracketed by two timing events on its stream, and trace() turns each pair into a span on the
/// host's steady clock, against a reference event whose host time was read when tracing began.
/// The records are the emulated device's type (device_op), so the trace writes both alike.
///
/// Off (the default) an operation costs one relaxed atomic load. On, two cudaEventRecord per
/// operation and events made as needed (reused once trace() has read them): leave it off in
/// production runs. trace() waits for every recorded operation to end: call it between steps,
/// after engine::flush(), as write_trace asks. Only the CUDA runtime API: compiles with the host
/// compiler.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/device_op.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One stream operation of the timeline: the emulated device's type (core/device_op.hpp).
using timeline_op = device_op;

class cuda_timeline {
public:
  cuda_timeline() = default;
  cuda_timeline(const cuda_timeline&) = delete;
  cuda_timeline& operator=(const cuda_timeline&) = delete;
  ~cuda_timeline() {
    for (const pending& p : pending_) {
      (void)cudaEventDestroy(p.begin);
      (void)cudaEventDestroy(p.end);
    }
    for (const cudaEvent_t e : free_) {
      (void)cudaEventDestroy(e);
    }
    if (reference_ != nullptr) {
      (void)cudaEventDestroy(reference_);
    }
  }

  /// From now on, bracket every operation (on), or stop (off). Turning it on records the reference
  /// event on the legacy stream of the current device and waits for it: call it from a thread
  /// whose current device is the engine's, between steps.
  void set_tracing(bool on) {
    std::lock_guard lock(mutex_);
    if (on && !on_.load(std::memory_order_relaxed)) {
      if (reference_ == nullptr) {
        check(cudaEventCreate(&reference_), "zenflow::cuda_backend: cudaEventCreate (trace reference)");
      }
      check(cudaEventRecord(reference_, nullptr), "zenflow::cuda_backend: cudaEventRecord (trace reference)");
      check(cudaEventSynchronize(reference_),
            "zenflow::cuda_backend: cudaEventSynchronize (trace reference)");
      reference_ns_ = now_ns();
    }
    on_.store(on, std::memory_order_relaxed);
  }
  [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_relaxed); }

  /// `enqueue()` (which puts the operation on `s`), bracketed by two timing events while on.
  /// `name` may be null: the trace then names the operation by its kind.
  template <class Enqueue>
  void bracket(
      cudaStream_t s, timeline_op::kind what, const char* name, std::size_t bytes, Enqueue&& enqueue) const {
    if (!on()) {
      std::forward<Enqueue>(enqueue)();
      return;
    }
    pending p{take_event(), nullptr, s, what, bytes, name == nullptr ? "" : name};
    try {
      check(cudaEventRecord(p.begin, s), "zenflow::cuda_backend: cudaEventRecord (trace)");
      std::forward<Enqueue>(enqueue)();
      p.end = take_event();
      check(cudaEventRecord(p.end, s), "zenflow::cuda_backend: cudaEventRecord (trace)");
    } catch (...) {
      give_back(p.begin);
      give_back(p.end);
      throw;
    }
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(p));
  }

  /// Every operation recorded so far, in the order they were enqueued. Waits for the ones not
  /// read yet to end (between steps, after flush()).
  [[nodiscard]] std::vector<timeline_op> trace() const {
    std::lock_guard lock(mutex_);
    for (pending& p : pending_) {
      check(cudaEventSynchronize(p.end), "zenflow::cuda_backend: cudaEventSynchronize (trace)");
      float begin_ms = 0.0f;
      float end_ms = 0.0f;
      check(cudaEventElapsedTime(&begin_ms, reference_, p.begin),
            "zenflow::cuda_backend: cudaEventElapsedTime");
      check(cudaEventElapsedTime(&end_ms, reference_, p.end), "zenflow::cuda_backend: cudaEventElapsedTime");
      timeline_op op;
      op.what = p.what;
      op.stream = stream_index(p.stream);
      op.bytes = p.bytes;
      op.start_ns = reference_ns_ + static_cast<std::int64_t>(static_cast<double>(begin_ms) * 1e6);
      op.end_ns = reference_ns_ + static_cast<std::int64_t>(static_cast<double>(end_ms) * 1e6);
      op.name = std::move(p.name);
      read_.push_back(std::move(op));
      free_.push_back(p.begin);
      free_.push_back(p.end);
    }
    pending_.clear();
    return read_;
  }

  /// The host's steady clock, on which the spans are placed.
  [[nodiscard]] static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

private:
  struct pending {
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    cudaStream_t stream = nullptr;
    timeline_op::kind what = timeline_op::kind::kernel;
    std::size_t bytes = 0;
    std::string name;
  };

  cudaEvent_t take_event() const {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        const cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "zenflow::cuda_backend: cudaEventCreate (trace)");
    return e;
  }
  void give_back(cudaEvent_t e) const noexcept {
    if (e != nullptr) {
      std::lock_guard lock(mutex_);
      free_.push_back(e);
    }
  }
  /// The stream's index in order of first use (under the lock).
  int stream_index(cudaStream_t s) const {
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i] == s) {
        return static_cast<int>(i);
      }
    }
    streams_.push_back(s);
    return static_cast<int>(streams_.size() - 1);
  }

  std::atomic<bool> on_{false};
  mutable std::mutex mutex_;
  cudaEvent_t reference_ = nullptr;
  std::int64_t reference_ns_ = 0;
  mutable std::vector<pending> pending_;
  mutable std::vector<timeline_op> read_;
  mutable std::vector<cudaEvent_t> free_;
  mutable std::vector<cudaStream_t> streams_;
};

} // namespace detail
ZF_NAMESPACE_END
