/// @file
/// CUDA launchers of the channel-norm reducers (namespace `zenflow::device`); the argument
/// types are in `<zenflow/select/types.hpp>`, the host twins in `<zenflow/select/channel_norms.hpp>`,
/// the planning and dispatch in `detail/channel_norms_dispatch.cuh`.
///
/// Shape (CUB's): a call with `d_temp == nullptr` only writes `temp_bytes` (host arithmetic, no
/// CUDA call); arguments are validated before anything is launched or written; all work is
/// stream-ordered on `stream` (kernels and `cudaMemsetAsync`), with no allocation and no
/// synchronisation, so the calls are safe under CUDA graph capture. Results are deterministic:
/// the scores add their terms in the order `detail/norm_order.hpp` defines, the host loops' too,
/// so they are the host backend's bits (whatever the pointers' alignment or the consumer's
/// fast-math flags); the optional per-item totals are a float tree, deterministic but not the
/// host's float64 sum.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/detail/channel_norms_dispatch.cuh>
#include <zenflow/select/detail/checks.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// Scores every channel of every item in as few launches as possible (one per 32 items and
/// layout), so that many small layers fill the device together.
///
/// @param d_temp      device scratch; nullptr only writes `temp_bytes` (host arithmetic)
/// @param temp_bytes  size of `d_temp` in bytes
/// @param items       `count` matrices: a host array of descriptors of device memory
/// @param count       number of items, >= 0
/// @param extras      optional device arrays of `count` totals and `count` NaN/Inf flags
/// @param stream      stream everything is ordered on
/// Aliasing: scores, totals, flags and `d_temp` must not overlap each other or the gradients.
/// Determinism: bitwise run to run for the same arguments.
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms_batched(void* d_temp,
                                                std::size_t& temp_bytes,
                                                const channel_norm_item<T>* items,
                                                std::int64_t count,
                                                channel_norm_extras extras = {},
                                                cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::channel_norms_batched";
  if (const cudaError_t e = detail::check_norm_batch(fn, "items", items, count); e != cudaSuccess) {
    return e;
  }
  const std::size_t need = detail::norm_temp_bytes(items, count);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  return detail::dispatch_norms<Norm>(d_temp, items, count, extras, stream);
}

/// One score per channel of one matrix (see `channel_norms_batched`).
///
/// @param d_temp       device scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes   size of `d_temp` in bytes
/// @param grad         `channels x channel_len` gradient in device memory, in `layout`, leading dim `ld`
/// @param channels     number of channels, >= 0
/// @param channel_len  elements per channel, >= 0
/// @param ld           >= channel_len (contiguous) or >= channels (strided)
/// @param layout       contiguous or strided channels
/// @param scores       `channels` fp32 scores out (device)
/// @param extras       optional device pointers to one total and one NaN/Inf flag
/// @param stream       stream everything is ordered on
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms(void* d_temp,
                                        std::size_t& temp_bytes,
                                        const T* grad,
                                        std::int64_t channels,
                                        std::int64_t channel_len,
                                        std::int64_t ld,
                                        channel_layout layout,
                                        float* scores,
                                        channel_norm_extras extras = {},
                                        cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::channel_norms";
  const channel_norm_item<T> it{grad, channels, channel_len, ld, layout, scores};
  if (const cudaError_t e = detail::check_norm_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  const std::size_t need = detail::norm_temp_bytes(&it, 1);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  return detail::dispatch_norms<Norm>(d_temp, &it, 1, extras, stream);
}

} // namespace device

ZF_NAMESPACE_END
