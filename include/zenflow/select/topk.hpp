/// @file
/// Top-k selection of fp32 scores: the indices (and optionally the values) of the k largest of
/// n scores, by radix selection on a total order (larger score first, ties to the lower index,
/// -0 == +0, NaN below -Inf; see `detail/radix_math.hpp`). The selected *set* is therefore
/// unique and reproducible run to run, on the host and on the device alike.
///
/// This header holds the host backend (namespace `zenflow::host`), which runs the same radix
/// passes with the same arithmetic on host memory over a `worker_pool`
/// (`detail/topk_host.hpp`). The CUDA launchers are in `<zenflow/select/topk.cuh>` (namespace
/// `zenflow::device`); the argument types in `<zenflow/select/types.hpp>`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/select/detail/checks.hpp>
#include <zenflow/select/detail/topk_host.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Host twin of `zenflow::device::topk`: the indices (and values) of the `k` largest of `n`
/// scores, in the order described in `<zenflow/select/topk.hpp>`.
///
/// @param temp        scratch; nullptr only writes `temp_bytes` (about 8 bytes per score)
/// @param temp_bytes  size of `temp` in bytes
/// @param scores      `n` fp32 scores (host memory)
/// @param n           0 <= n < 2^31
/// @param k           0 <= k <= n; k == 0 writes nothing
/// @param indices     `k` int32 indices out; may be null when k == 0
/// @param values      `k` scores out, or nullptr
/// @param order       `ascending_index` or `unsorted` (no order promised)
/// @param pool        threads to use; nullptr runs on the calling thread
/// Deterministic: the same set, in the same order, whatever the thread count. Outputs must not
/// alias `scores` or `temp`.
[[nodiscard]] inline cudaError_t topk(void* temp,
                                      std::size_t& temp_bytes,
                                      const float* scores,
                                      std::int64_t n,
                                      std::int64_t k,
                                      std::int32_t* indices,
                                      float* values = nullptr,
                                      topk_order order = topk_order::ascending_index,
                                      worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::topk";
  const topk_item it{scores, n, k, indices, values};
  if (const cudaError_t e = detail::check_topk_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_topk_order(fn, order); e != cudaSuccess) {
    return e;
  }
  const std::size_t need =
      std::max(detail::min_temp_bytes, detail::host_topk_temp_bytes(n) + detail::host_topk_align);
  if (temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  detail::host_topk_item(it, detail::align_pointer(temp, detail::host_topk_align), pool);
  return cudaSuccess;
}

/// Host twin of `zenflow::device::topk_segmented`: one independent top-k per item.
///
/// @param temp        scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `temp` in bytes
/// @param items       `count` segments (host array of descriptors; the data is host memory);
///                    an item's `wide` ranks its +Inf scores by their fp64 values (types.hpp)
/// @param count       number of items, >= 0
/// @param order       as for `topk`
/// @param pool        threads to use (segments run in parallel); nullptr: the calling thread
[[nodiscard]] inline cudaError_t topk_segmented(void* temp,
                                                std::size_t& temp_bytes,
                                                const topk_item* items,
                                                std::int64_t count,
                                                topk_order order = topk_order::ascending_index,
                                                worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::topk_segmented";
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
  const std::size_t need = std::max(
      detail::host_topk_segmented_temp_bytes(items, count) + detail::host_topk_align, detail::min_temp_bytes);
  if (temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  detail::host_topk_segmented(items, count, detail::align_pointer(temp, detail::host_topk_align), pool);
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
