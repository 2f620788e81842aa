/// @file
/// What an engine backend is: memory, streams and events, copies, and the primitive operations,
/// over which the engine's device-side plan (detail/plan/device_plan.hpp) is written once.
///
/// Three models:
/// - `host_backend` (engine/host_backend.hpp): "device" memory is host memory and every
///   operation runs on the calling thread when it is enqueued; events are empty.
/// - `emulated_backend` (engine/emulated_backend.hpp): "device" memory is host memory, every
///   stream is an executor thread of an `emulated_device`, operations run there later, events
///   complete when their stream reaches them: the engine's real concurrency on a CPU.
/// - `cuda_backend` (engine/cuda_backend.cuh): device memory, CUDA streams and events, the
///   primitives' device launchers.
///
/// A backend is a small copyable value (a policy, like a copy backend); the plan owns every
/// buffer and event it creates through it. Operations are stream-ordered on the stream they are
/// given. The plan writes each primitive call once, as `[=](auto prim, auto on) { return
/// prim.name(args..., on); }`; the backend decides what `prim` and `on` are and when it runs (the
/// emulated backend reports a failure of work that ran later through its device's sticky error,
/// at the next synchronising call).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// The memory of the backends whose "device" is host memory (host, emulated).
struct host_memory {
  template <class T>
  using device_buffer = std::vector<T>;
  template <class T>
  using host_buffer = std::vector<T>;
};

/// An operation that does nothing, for the concept's checks of run() and query().
struct no_op {
  template <class Primitives, class Exec>
  cudaError_t operator()(Primitives, Exec) const noexcept {
    return cudaSuccess;
  }
};
/// Host work that does nothing, for the concept's check of host_task() (a lambda there trips nvcc).
struct no_task {
  void operator()() const noexcept {}
};
} // namespace detail

/// The requirements the device plan places on a backend `B` (beyond the primitive operations,
/// which are templates and are checked where the plan instantiates them):
/// - `B::is_device`: work completes asynchronously (the engine runs its consumer thread);
/// - `B::copy_backend_type` (a `copy_backend`, for the D2H ring) from `copier()`;
/// - `B::device_buffer<T>` / `B::host_buffer<T>` (host buffers are pinned where that matters),
///   owning, constructed from an element count, with `data()` and `size()`;
/// - copies in the three directions, `zero`, `synchronize(stream)`, `synchronize_all()`;
/// - `current_device()` / `bind_device(d)`: the job thread makes the plan's device current;
///   `enter_engine_thread(d)`: first thing on a thread the engine owns (device current, and on
///   CUDA a relaxed stream-capture mode, so that a user's global-mode capture is not broken);
/// - `run(stream, bytes, name, op)`: enqueues `op(primitives, exec)` on `stream`, where
///   `primitives` is the backend's primitive set (`detail::host_primitives`: the host twins;
///   `detail::device_primitives`: the device launchers) and `exec` its last argument (a worker
///   pool, or the stream); `query(op)` calls it now, for temporary-storage sizes.
/// Memory: owning buffers constructed from an element count.
template <class B>
concept engine_backend_memory = requires(std::size_t n) {
  { typename B::template device_buffer<float>(n).data() } -> std::same_as<float*>;
  { typename B::template host_buffer<float>(n).data() } -> std::same_as<float*>;
};

/// Copies, waits and the device of the calling thread.
template <class B>
concept engine_backend_copies =
    requires(const B b, void* dst, const void* src, std::size_t n, cudaStream_t s) {
  { b.copier() } -> std::same_as<typename B::copy_backend_type>;
  b.copy_d2h(dst, src, n, s);
  b.copy_h2d(dst, src, n, s);
  b.copy_d2d(dst, src, n, s);
  b.zero(dst, n, s);
  b.synchronize(s);
  b.synchronize_all();
  { b.current_device() } -> std::convertible_to<int>;
  b.bind_device(0);
  b.enter_engine_thread(0);
};

/// Operations: enqueued (`run`; `host_task`: host work in stream order) or answered now (`query`).
template <class B>
concept engine_backend_operations = requires(const B b, std::size_t n, cudaStream_t s) {
  b.run(s, n, "op", detail::no_op{});
  b.host_task(s, "op", detail::no_task{});
  { b.query(detail::no_op{}) } -> std::same_as<cudaError_t>;
};

template <class B>
concept engine_backend = std::copy_constructible<B> && std::convertible_to<decltype(B::is_device), bool> &&
    copy_backend<typename B::copy_backend_type> && engine_backend_memory<B> && engine_backend_copies<B> &&
    engine_backend_operations<B>;

ZF_NAMESPACE_END
