/// @file
/// CUDA launchers of the radix top-k (namespace `zenflow::device`); the argument types, the
/// selection order and the host twins are in `<zenflow/select/topk.hpp>`.
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

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/select/detail/topk_kernels.cuh>
#include <zenflow/select/topk.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::int64_t topk_one_block_max_n = std::int64_t{1} << 15;
inline constexpr std::int64_t topk_segment_one_block_max_n = std::int64_t{1} << 17;

[[nodiscard]] constexpr std::int64_t topk_tiles(std::int64_t n) {
  return (n + topk_tile - 1) / topk_tile;
}

/// Scratch of the multi-block path for n scores: state, histogram, tile counts, candidates.
[[nodiscard]] constexpr std::size_t topk_large_temp_bytes(std::int64_t n) {
  return align_up(sizeof(topk_device_state)) + align_up(topk_bins * sizeof(std::uint32_t)) +
         align_up(static_cast<std::size_t>(topk_tiles(n)) * sizeof(std::uint32_t)) +
         align_up(static_cast<std::size_t>(n) * sizeof(std::uint64_t));
}

/// The multi-block selection of one item (k >= 1) with `temp` 256-byte aligned.
[[nodiscard]] inline cudaError_t
dispatch_topk_large(std::byte* temp, const topk_item& it, cudaStream_t stream) {
  auto* st = reinterpret_cast<topk_device_state*>(temp);
  auto* hist = reinterpret_cast<std::uint32_t*>(temp + align_up(sizeof(topk_device_state)));
  auto* tile_count = reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(hist) +
                                                      align_up(topk_bins * sizeof(std::uint32_t)));
  auto* cand = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::byte*>(tile_count) +
                                                align_up(static_cast<std::size_t>(topk_tiles(it.n)) * 4));
  const auto tiles = static_cast<unsigned>(topk_tiles(it.n));
  // Candidate passes: enough blocks to fill the device, never more than the tiles.
  const unsigned cand_blocks = std::min(tiles, 1024u);
  // The state and the histogram start cleared; pass 0 seeds k_remaining = k.
  cudaError_t e = cudaMemsetAsync(temp, 0, align_up(sizeof(topk_device_state)) + topk_bins * 4, stream);
  if (e != cudaSuccess) {
    return e;
  }
  topk_hist0_kernel<<<tiles, topk_block, 0, stream>>>(it.scores, it.n, static_cast<std::uint64_t>(it.k), hist,
                                                      st);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    return e;
  }
  topk_pass1_kernel<<<tiles, topk_block, 0, stream>>>(it.scores, it.n, hist, st, cand, tile_count);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    return e;
  }
  for (int p = 2; p < topk_passes; ++p) {
    topk_cand_kernel<<<cand_blocks, topk_block, 0, stream>>>(hist, st, cand, p);
    if ((e = cudaGetLastError()) != cudaSuccess) {
      return e;
    }
  }
  topk_cand_count_kernel<<<cand_blocks, topk_block, 0, stream>>>(st, cand, tile_count);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    return e;
  }
  topk_scan_kernel<<<1, 1024, 0, stream>>>(tile_count, static_cast<std::int64_t>(tiles));
  if ((e = cudaGetLastError()) != cudaSuccess) {
    return e;
  }
  topk_write_kernel<<<tiles, topk_block, 0, stream>>>(it.scores, it.n, st, tile_count, it.indices, it.values);
  return cudaGetLastError();
}

/// Segments of up to `topk_segment_one_block_max_n` scores, 32 per launch, one block each.
[[nodiscard]] inline cudaError_t
dispatch_topk_small(const topk_item* items, std::int64_t count, std::int64_t max_n, cudaStream_t stream) {
  topk_segment_launch l{};
  int m = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const topk_item& it = items[i];
    if (it.k == 0 || it.n > max_n) {
      continue;
    }
    l.seg[m++] = {it.scores, it.indices, it.values, it.n, it.k};
    if (m == topk_segment_batch_max) {
      topk_block_kernel<<<static_cast<unsigned>(m), topk_segment_block, 0, stream>>>(l);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
        return e;
      }
      m = 0;
    }
  }
  if (m > 0) {
    topk_block_kernel<<<static_cast<unsigned>(m), topk_segment_block, 0, stream>>>(l);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

[[nodiscard]] inline std::byte* align_device_pointer(void* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + 255) / 256 * 256);
}

} // namespace detail

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
  const bool large = n > detail::topk_one_block_max_n;
  const std::size_t need =
      std::max(detail::min_temp_bytes, large ? detail::topk_large_temp_bytes(n) + 256 : 0);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  if (k == 0) {
    return cudaSuccess;
  }
  if (!large) {
    return detail::dispatch_topk_small(&it, 1, detail::topk_one_block_max_n, stream);
  }
  return detail::dispatch_topk_large(detail::align_device_pointer(d_temp), it, stream);
}

/// One independent top-k per item, for the engine's per-matrix selections: segments of up to
/// 131072 scores run 32 per launch, one block each; larger ones run one after the other through
/// the multi-block path (sharing one scratch region).
///
/// @param d_temp      device scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `d_temp` in bytes
/// @param items       `count` segments: a host array of descriptors of device memory
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
  std::int64_t largest = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    if (items[i].n > detail::topk_segment_one_block_max_n) {
      largest = std::max(largest, items[i].n);
    }
  }
  const std::size_t need =
      std::max(detail::min_temp_bytes, largest > 0 ? detail::topk_large_temp_bytes(largest) + 256 : 0);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  if (const cudaError_t e =
          detail::dispatch_topk_small(items, count, detail::topk_segment_one_block_max_n, stream);
      e != cudaSuccess) {
    return e;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    if (items[i].n > detail::topk_segment_one_block_max_n && items[i].k > 0) {
      if (const cudaError_t e =
              detail::dispatch_topk_large(detail::align_device_pointer(d_temp), items[i], stream);
          e != cudaSuccess) {
        return e;
      }
    }
  }
  return cudaSuccess;
}

} // namespace device

ZF_NAMESPACE_END
