/// @file
/// CUDA launchers of the radix top-k (namespace `zenflow::device`); the argument types, the
/// selection order and the host twins are in `<zenflow/select/topk.hpp>`, the planning and
/// dispatch in `detail/topk_dispatch.cuh`.
///
/// Shape (CUB's): a call with `d_temp == nullptr` only writes `temp_bytes` (host arithmetic, no
/// CUDA call); arguments are validated before anything is launched or written; everything is
/// stream-ordered on `stream` (kernels and one `cudaMemsetAsync`), with no allocation and no
/// synchronisation, so the calls are safe under CUDA graph capture.
///
/// Cost for large n: three reads of the scores (plus the candidates of one top-level bucket,
/// usually a small fraction of n), about ten launches. n <= 32768 (and every segment of up to
/// 131072 scores in `topk_segmented`) runs in one block per selection instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/select/detail/checks.hpp>
#include <zenflow/select/detail/topk_dispatch.cuh>
#include <zenflow/select/topk.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// The indices (and optionally the values) of the `k` largest of `n` scores, in the order and
/// with the tie and NaN rules of `<zenflow/select/topk.hpp>`; the same set as `host::topk`.
///
/// @param d_temp      device scratch; nullptr only writes `temp_bytes` (about 8 bytes per score
///                    for n > 32768, a few hundred bytes below)
/// @param temp_bytes  size of `d_temp` in bytes
/// @param scores      `n` fp32 scores (device)
/// @param n           0 <= n < 2^31
/// @param k           0 <= k <= n; k == 0 launches nothing
/// @param indices     `k` int32 indices out (device); may be null when k == 0
/// @param values      `k` scores out (device), or nullptr
/// @param order       `ascending_index` or `unsorted` (no order promised; today also ascending)
/// @param stream      stream everything is ordered on
/// Aliasing: outputs must not overlap `scores` or `d_temp`. Determinism: the same output, bit for
/// bit, run to run.
[[nodiscard]] inline cudaError_t topk(void* d_temp,
                                      std::size_t& temp_bytes,
                                      const float* scores,
                                      std::int64_t n,
                                      std::int64_t k,
                                      std::int32_t* indices,
                                      float* values = nullptr,
                                      topk_order order = topk_order::ascending_index,
                                      cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::topk";
  const topk_item it{scores, n, k, indices, values};
  if (const cudaError_t e = detail::check_topk_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_topk_order(fn, order); e != cudaSuccess) {
    return e;
  }
  const std::size_t need = detail::topk_temp_bytes(n);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  if (k == 0) {
    return cudaSuccess;
  }
  if (n <= detail::topk_one_block_max_n) {
    return detail::dispatch_topk_small(&it, 1, detail::topk_one_block_max_n, stream);
  }
  return detail::dispatch_topk_large(detail::align_pointer(d_temp), it, stream);
}

/// One independent top-k per item, for the engine's per-matrix selections: segments of up to
/// 131072 scores run 32 per launch, one block each; larger ones run one after the other through
/// the multi-block path (sharing one scratch region).
///
/// @param d_temp      device scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `d_temp` in bytes
/// @param items       `count` segments: a host array of descriptors of device memory; an
///                    item's `wide` ranks its +Inf scores by their fp64 values (types.hpp)
/// @param count       number of items, >= 0
/// @param order       as for `topk`
/// @param stream      stream everything is ordered on
[[nodiscard]] inline cudaError_t topk_segmented(void* d_temp,
                                                std::size_t& temp_bytes,
                                                const topk_item* items,
                                                std::int64_t count,
                                                topk_order order = topk_order::ascending_index,
                                                cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::topk_segmented";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = detail::check_topk_item(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
  }
  if (const cudaError_t e = detail::check_topk_order(fn, order); e != cudaSuccess) {
    return e;
  }
  const std::size_t need = detail::topk_segmented_temp_bytes(items, count);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  return detail::dispatch_topk_segmented(d_temp, items, count, stream);
}

} // namespace device

ZF_NAMESPACE_END
