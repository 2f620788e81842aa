/// @file
/// The engine's CUDA plan on an emulated device: `zenflow::engine<zenflow::emulated_cuda_backend>`.
/// Where `emulated_backend` runs the host twins of the plan's operations on the device's stream
/// threads, this backend runs what `cuda_backend` runs: the device launchers and the kernels of
/// cuda_backend.cuh (detail::device_primitives), their own source compiled by the host compiler
/// and executed by the kernel emulator (<zenflow/emu/emulator.hpp>), block by block with the
/// threads as fibers, on the device's streams, in stream order. Memory, streams, events, copies and
/// host tasks are the emulated device's (core/emulated_device.hpp), as for `emulated_backend`.
///
/// Device buffers hold 0xff bytes when allocated (a float NaN), as `cudaMallocAsync` returns
/// garbage: a plan that read device memory it never wrote would show it. A kernel whose
/// emulation reports a problem (emu::reports(): a barrier not every thread reaches, a lane
/// missing from a shuffle, a launch past an H100's limits) fails, and the device's error turns
/// sticky, seen at the engine's next synchronising call (as an asynchronous CUDA error).
///
/// For a host compiler only (under nvcc use `cuda_backend`).
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/cuda_backend.cuh>
#include <zenflow/engine/emulated_backend.hpp>

ZF_NAMESPACE_BEGIN

/// The CUDA backend's plan on an emulated device (see the file comment). The device must outlive
/// every engine on it; the backend makes it current on the constructing thread.
class emulated_cuda_backend : public emulated_backend {
public:
  template <class T>
  using device_buffer = detail::emulated_garbage_buffer<T>;

  explicit emulated_cuda_backend(emulated_device& device, emulated_backend_counts* counts = nullptr) noexcept
      : emulated_backend(device, counts) {}

  /// An operation of the plan, `op(primitives, stream)`: the CUDA backend's launchers, run later on
  /// `s`'s thread, where each launch runs its grid on the emulator (`op` is copied: it must capture
  /// by value). A failure there makes the device's error sticky.
  template <class Op>
  void run(cudaStream_t s, std::size_t bytes, const char* name, Op&& op) const {
    note_run(name);
    device().launch(s, std::function<void()>([op = std::forward<Op>(op), name, s] {
                      detail::check(op(detail::device_primitives{}, s), name);
                    }),
                    bytes, name);
  }
  /// A host-side query of an operation (temporary storage sizes), answered now.
  template <class Op>
  [[nodiscard]] cudaError_t query(Op&& op) const {
    return std::forward<Op>(op)(detail::device_primitives{}, cudaStream_t{nullptr});
  }
};

static_assert(engine_backend<emulated_cuda_backend>);

ZF_NAMESPACE_END
