/// @file
/// The own loop's device half on CUDA (own_loop.hpp's `Side`): device memory from the loop's
/// stream, the CUDA launchers of select/, optim/ and schedule/ on it, pinned host buffers for what
/// comes down and goes up. Compiled by the CUDA build; no line of it has run on a GPU yet
/// (tests/examples/own_loop_gpu_test.cu compares it with the host engine where one is present).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/optim/channels.cuh>
#include <zenflow/schedule/l1_mass.cuh>
#include <zenflow/schedule/step_scalars.cuh>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>

#include "own_loop/own_loop.hpp"

namespace own_loop {

/// Everything stream-ordered on `stream`; the loop waits (`wait`) where the host reads what the
/// device wrote: a selection's sets, each step's record and packed gradients.
struct on_cuda {
  template <class U>
  using buffer = zenflow::device_buffer<U>;
  template <class U>
  using host_buffer = zenflow::pinned_buffer<U>;
  cudaStream_t stream = nullptr;
  template <class U>
  [[nodiscard]] buffer<U> make(std::size_t n) const {
    return buffer<U>(n, stream); // allocated in `stream`'s order
  }
  template <class U>
  [[nodiscard]] host_buffer<U> make_host(std::size_t n) const {
    return host_buffer<U>(n);
  }
  [[nodiscard]] cudaStream_t exec() const noexcept { return stream; }
  void copy_up(void* dev, const void* host, std::size_t bytes) const {
    ZF_CUDA_TRY(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
  }
  void copy_down(void* host, const void* dev, std::size_t bytes) const {
    ZF_CUDA_TRY(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  }
  void wait() const { ZF_CUDA_TRY(cudaStreamSynchronize(stream)); }
  OWN_LOOP_PRIMITIVES(device)
};

} // namespace own_loop
