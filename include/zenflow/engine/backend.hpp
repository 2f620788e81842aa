/// @file
/// What an engine backend is: memory, streams and events, copies, and the primitive operations,
/// over which the engine's device-side plan (detail/device_plan.hpp) is written once.
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
/// given; the primitive operations mirror the primitives' signatures with the stream last and
/// return their `cudaError_t` (the emulated backend reports a failure of work that ran later
/// through its device's sticky error, at the next synchronising call).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/step_kernels.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// The requirements the device plan places on a backend `B` (beyond the primitive operations,
/// which are templates and are checked where the plan instantiates them):
/// - `B::is_device`: work completes asynchronously (the engine runs its consumer thread);
/// - `B::copy_backend_type` (a `copy_backend`, for the D2H ring) from `copier()`;
/// - `B::device_buffer<T>` / `B::host_buffer<T>` (host buffers are pinned where that matters),
///   from `device_alloc<T>(n)` / `host_alloc<T>(n)`, with `data()` and `size()`;
/// - copies in the three directions, `zero`, `synchronize(stream)`, `synchronize_all()`;
/// - `current_device()` / `bind_device(d)`: the job thread makes the plan's device current;
/// - the plan's small operations (detail/step_kernels.hpp) and the primitives.
template <class B>
concept engine_backend = std::copy_constructible<B> && copy_backend<typename B::copy_backend_type> &&
    requires(const B b,
             void* dst,
             const void* src,
             std::size_t n,
             cudaStream_t s,
             double* totals,
             const std::uint32_t* flags,
             float* record,
             std::int32_t* counts,
             const detail::sq_total_item* items) {
  { B::is_device } -> std::convertible_to<bool>;
  { b.copier() } -> std::same_as<typename B::copy_backend_type>;
  { b.template device_alloc<float>(n).data() } -> std::same_as<float*>;
  { b.template host_alloc<float>(n).data() } -> std::same_as<float*>;
  b.copy_d2h(dst, src, n, s);
  b.copy_h2d(dst, src, n, s);
  b.copy_d2d(dst, src, n, s);
  b.zero(dst, n, s);
  b.synchronize(s);
  b.synchronize_all();
  { b.current_device() } -> std::convertible_to<int>;
  b.bind_device(0);
  b.sq_totals(items, 1, totals, s);
  b.finish_scalars(totals, 1, flags, 1, 1.0f, 0.0f, record, 0, s);
  b.adopt_early_mass(record, record, 1, s);
  b.iota(counts, 1, s);
  b.move_counts(counts, counts, counts, counts, 1, s);
};

ZF_NAMESPACE_END
