/// @file
/// Copy backends: how the transport classes move bytes and learn that a move has completed.
///
/// The rings and copy streams are templates over a small policy so that one class runs with
/// the same synchronisation structure on both backends:
/// - `cuda_copy_backend`: `cudaMemcpyAsync` on a copy stream, completion through CUDA events
///   (created with `cudaEventBlockingSync`, so a host thread waiting on one sleeps instead of
///   spinning against the host optimizer's threads).
/// - `host_copy_backend`: `std::memcpy` on the calling thread; every copy is complete when the
///   call returns, events are empty. The "device" pointers are host pointers. This is what CI
///   runs, with the same acquire / publish / wait / release protocol.
///
/// Both only call the CUDA runtime API, so this header compiles with the host compiler.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/copy_direction.hpp>
#include <zenflow/core/detail/cuda_timeline.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>

ZF_NAMESPACE_BEGIN

/// What a copy backend provides. `event_type` is default-constructible, owned by the caller
/// (one per ring slot) and created/destroyed through the backend. All members may throw
/// (`cuda_error`) except `destroy_event` and `destroy_stream`.
template <class B>
concept copy_backend = std::copy_constructible<B> && std::default_initializable<typename B::event_type> &&
    requires(B b,
             typename B::event_type& e,
             void* dst,
             const void* src,
             std::size_t n,
             cudaStream_t s,
             int priority) {
  { B::is_device } -> std::convertible_to<bool>;
  b.create_event(e);
  b.destroy_event(e);
  b.copy(dst, src, n, copy_direction::device_to_host, s);
  b.record(e, s);
  b.synchronize(e);
  { b.query(e) } -> std::convertible_to<bool>;
  b.stream_wait(s, e);
  { b.create_stream(priority) } -> std::same_as<cudaStream_t>;
  b.destroy_stream(s);
  b.synchronize_stream(s);
};

/// Host backend: copies are `std::memcpy` on the calling thread and complete at once.
struct host_copy_backend {
  static constexpr bool is_device = false;
  struct event_type {};

  void create_event(event_type&) const noexcept {}
  void destroy_event(event_type&) const noexcept {}
  void copy(void* dst, const void* src, std::size_t bytes, copy_direction, cudaStream_t) const noexcept {
    if (bytes > 0) {
      std::memcpy(dst, src, bytes);
    }
  }
  void record(event_type&, cudaStream_t) const noexcept {}
  void synchronize(event_type&) const noexcept {}
  [[nodiscard]] bool query(event_type&) const noexcept { return true; }
  void stream_wait(cudaStream_t, event_type&) const noexcept {}
  [[nodiscard]] cudaStream_t create_stream(int) const noexcept { return nullptr; }
  void destroy_stream(cudaStream_t) const noexcept {}
  void synchronize_stream(cudaStream_t) const noexcept {}
};

/// CUDA backend: stream-ordered `cudaMemcpyAsync` and CUDA events. Host memory should be pinned
/// (`pinned_buffer`) for the copies to be asynchronous and run at full PCIe bandwidth.
struct cuda_copy_backend {
  static constexpr bool is_device = true;
  struct event_type {
    cudaEvent_t handle = nullptr;
  };
  /// The engine's stream timeline (its pipeline trace), or none: the copies are bracketed by
  /// timing events while it is on.
  const detail::cuda_timeline* timeline = nullptr;

  void create_event(event_type& e) const {
    detail::check(cudaEventCreateWithFlags(&e.handle, cudaEventDisableTiming | cudaEventBlockingSync),
                  "zenflow::cuda_copy_backend: cudaEventCreateWithFlags");
  }
  void destroy_event(event_type& e) const noexcept {
    if (e.handle != nullptr) {
      (void)cudaEventDestroy(e.handle);
      e.handle = nullptr;
    }
  }
  void copy(void* dst, const void* src, std::size_t bytes, copy_direction dir, cudaStream_t s) const {
    if (bytes == 0) {
      return;
    }
    const bool down = dir == copy_direction::device_to_host;
    const auto enqueue = [&] {
      detail::check(
          cudaMemcpyAsync(dst, src, bytes, down ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s),
          "zenflow::cuda_copy_backend: cudaMemcpyAsync");
    };
    if (timeline == nullptr) {
      enqueue();
    } else {
      using kind = detail::timeline_op::kind;
      timeline->bracket(s, down ? kind::copy_d2h : kind::copy_h2d, nullptr, bytes, enqueue); // named by kind
    }
  }
  void record(event_type& e, cudaStream_t s) const {
    detail::check(cudaEventRecord(e.handle, s), "zenflow::cuda_copy_backend: cudaEventRecord");
  }
  void synchronize(event_type& e) const {
    detail::check(cudaEventSynchronize(e.handle), "zenflow::cuda_copy_backend: cudaEventSynchronize");
  }
  [[nodiscard]] bool query(event_type& e) const {
    const cudaError_t s = cudaEventQuery(e.handle);
    if (s == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    detail::check(s, "zenflow::cuda_copy_backend: cudaEventQuery");
    return true;
  }
  void stream_wait(cudaStream_t s, event_type& e) const {
    detail::check(cudaStreamWaitEvent(s, e.handle, 0), "zenflow::cuda_copy_backend: cudaStreamWaitEvent");
  }
  [[nodiscard]] cudaStream_t create_stream(int priority) const {
    cudaStream_t s = nullptr;
    detail::check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority),
                  "zenflow::cuda_copy_backend: cudaStreamCreateWithPriority");
    return s;
  }
  void destroy_stream(cudaStream_t s) const noexcept {
    if (s != nullptr) {
      (void)cudaStreamDestroy(s);
    }
  }
  void synchronize_stream(cudaStream_t s) const {
    detail::check(cudaStreamSynchronize(s), "zenflow::cuda_copy_backend: cudaStreamSynchronize");
  }
};

static_assert(copy_backend<host_copy_backend>);
static_assert(copy_backend<cuda_copy_backend>);

/// A copy stream: a stream of its own for the transfers (CUDA: non-blocking, created with
/// `priority`; host: the null stream, never used) plus an event to order it after another stream.
///
/// Typical use on the producer side: the gradient is written on the compute stream, then
/// `copies.wait_for(compute)` and the D2H copy goes on `copies.get()`, so the copy overlaps the
/// next kernels of the compute stream. Member functions are safe to call from one thread at a time.
template <copy_backend Backend = host_copy_backend>
class copy_stream {
public:
  /// Creates the stream. Throws `cuda_error` on the CUDA backend without a device.
  explicit copy_stream(Backend backend = {}, int priority = 0) : backend_(std::move(backend)) {
    stream_ = backend_.create_stream(priority);
    try {
      backend_.create_event(fork_);
    } catch (...) {
      backend_.destroy_stream(stream_);
      throw;
    }
  }
  copy_stream(const copy_stream&) = delete;
  copy_stream& operator=(const copy_stream&) = delete;
  ~copy_stream() {
    try {
      backend_.synchronize_stream(stream_); // nothing may still read or write what the caller frees next
    } catch (...) {                         // NOLINT(bugprone-empty-catch): a destructor reports nothing
    }
    backend_.destroy_event(fork_);
    backend_.destroy_stream(stream_);
  }

  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; } // NOLINT: used as its handle

  /// Work enqueued on this stream from now on starts after the work already enqueued on
  /// `producer`. Stream-ordered: the host does not wait.
  void wait_for(cudaStream_t producer) {
    backend_.record(fork_, producer);
    backend_.stream_wait(stream_, fork_);
  }
  /// Makes `consumer` wait for the work already enqueued on this stream (the join of wait_for).
  void join_into(cudaStream_t consumer) {
    backend_.record(fork_, stream_);
    backend_.stream_wait(consumer, fork_);
  }
  /// Blocks the calling thread until everything enqueued on this stream has completed.
  void synchronize() { backend_.synchronize_stream(stream_); }

  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }

private:
  Backend backend_;
  cudaStream_t stream_ = nullptr;
  typename Backend::event_type fork_{};
};

ZF_NAMESPACE_END
