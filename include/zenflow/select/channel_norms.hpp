/// @file
/// Channel-norm reducers: one fp32 importance score per gradient channel (squared L2 or L1),
/// optionally with the per-matrix total (for the global gradient norm) and a NaN/Inf flag fused
/// into the same read of the gradient.
///
/// This header holds the host backend (namespace `zenflow::host`), which runs the same
/// per-element arithmetic (`math/norms.hpp`) on host memory, vectorised with run-time SIMD
/// dispatch and split over a `worker_pool` (`detail/channel_norms_host.hpp`). The CUDA launchers
/// are in `<zenflow/select/channel_norms.cuh>` (namespace `zenflow::device`); the argument types
/// in `<zenflow/select/types.hpp>`.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/select/detail/channel_norms_host.hpp>
#include <zenflow/select/detail/checks.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Host twin of `zenflow::device::channel_norms_batched`: scores every channel of every item.
///
/// @param temp        scratch (unused by the host backend, but the two-phase shape is kept):
///                    nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `temp` in bytes
/// @param items       `count` matrices (host array of descriptors; the data is host memory)
/// @param count       number of items, >= 0
/// @param extras      optional per-item totals and NaN/Inf flags (`count` entries each)
/// @param pool        threads to use; nullptr runs on the calling thread
/// Deterministic: the result does not depend on the number of threads. Scores must not alias
/// gradients.
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms_batched(void* temp,
                                                std::size_t& temp_bytes,
                                                const channel_norm_item<T>* items,
                                                std::int64_t count,
                                                channel_norm_extras extras = {},
                                                worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::channel_norms_batched";
  if (const cudaError_t e = detail::check_norm_batch(fn, "items", items, count); e != cudaSuccess) {
    return e;
  }
  if (temp == nullptr) {
    temp_bytes = detail::min_temp_bytes;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= detail::min_temp_bytes, fn, "temp_bytes",
                "is smaller than the size query returned");
  for (std::int64_t i = 0; i < count; ++i) {
    detail::host_norm_item<Norm>(items[i], extras.total ? extras.total + i : nullptr,
                                 extras.nonfinite ? extras.nonfinite + i : nullptr, pool);
  }
  return cudaSuccess;
}

/// Host twin of `zenflow::device::channel_norms`: one score per channel of one matrix.
///
/// @param temp         scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes   size of `temp` in bytes
/// @param grad         `channels x channel_len` gradient (host memory) in `layout`, leading dimension `ld`
/// @param channels     number of channels (scores), >= 0
/// @param channel_len  elements per channel, >= 0
/// @param ld           >= channel_len (contiguous) or >= channels (strided)
/// @param layout       contiguous channels or strided (column) channels
/// @param scores       `channels` fp32 scores out
/// @param extras       optional total (1 float) and NaN/Inf flag (1 word)
/// @param pool         threads to use; nullptr runs on the calling thread
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms(void* temp,
                                        std::size_t& temp_bytes,
                                        const T* grad,
                                        std::int64_t channels,
                                        std::int64_t channel_len,
                                        std::int64_t ld,
                                        channel_layout layout,
                                        float* scores,
                                        channel_norm_extras extras = {},
                                        worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::channel_norms";
  const channel_norm_item<T> it{grad, channels, channel_len, ld, layout, scores};
  if (const cudaError_t e = detail::check_norm_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  if (temp == nullptr) {
    temp_bytes = detail::min_temp_bytes;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= detail::min_temp_bytes, fn, "temp_bytes",
                "is smaller than the size query returned");
  detail::host_norm_item<Norm>(it, extras.total, extras.nonfinite, pool);
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
