/// @file
/// Planning and dispatch of the top-k launchers (`<zenflow/select/topk.cuh>`): scratch sizes,
/// the one-block path (small n, and segments) and the multi-block path (large n) over the
/// kernels in `topk_kernels.cuh`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/select/detail/topk_kernels.cuh>
#include <zenflow/select/types.hpp>

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
  cudaError_t e = memset_async(temp, 0, align_up(sizeof(topk_device_state)) + topk_bins * 4, stream);
  if (e != cudaSuccess) {
    return e;
  }
  ZF_LAUNCH(tiles, topk_block, 0, stream, topk_hist0_kernel)
  (it.scores, it.n, static_cast<std::uint64_t>(it.k), hist, st);
  if ((e = launch_status()) != cudaSuccess) {
    return e;
  }
  ZF_LAUNCH(tiles, topk_block, 0, stream, topk_pass1_kernel)(it.scores, it.n, hist, st, cand, tile_count);
  if ((e = launch_status()) != cudaSuccess) {
    return e;
  }
  for (int p = 2; p < topk_passes; ++p) {
    ZF_LAUNCH(cand_blocks, topk_block, 0, stream, topk_cand_kernel)(hist, st, cand, p);
    if ((e = launch_status()) != cudaSuccess) {
      return e;
    }
  }
  ZF_LAUNCH(cand_blocks, topk_block, 0, stream, topk_cand_count_kernel)(st, cand, tile_count);
  if ((e = launch_status()) != cudaSuccess) {
    return e;
  }
  ZF_LAUNCH(1, 1024, 0, stream, topk_scan_kernel)(tile_count, static_cast<std::int64_t>(tiles));
  if ((e = launch_status()) != cudaSuccess) {
    return e;
  }
  ZF_LAUNCH(tiles, topk_block, 0, stream, topk_write_kernel)
  (it.scores, it.n, st, tile_count, it.indices, it.values);
  return launch_status();
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
      ZF_LAUNCH(static_cast<unsigned>(m), topk_segment_block, 0, stream, topk_block_kernel)(l);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
      m = 0;
    }
  }
  if (m > 0) {
    ZF_LAUNCH(static_cast<unsigned>(m), topk_segment_block, 0, stream, topk_block_kernel)(l);
    return launch_status();
  }
  return cudaSuccess;
}

/// After the selections: the +Inf re-ranking of the segments with `wide`, 32 per launch.
[[nodiscard]] inline cudaError_t
dispatch_topk_wide(const topk_item* items, std::int64_t count, cudaStream_t stream) {
  topk_wide_launch l{};
  int m = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const topk_item& it = items[i];
    if (it.k == 0 || it.wide == nullptr) {
      continue;
    }
    l.seg[m++] = {it.scores, it.wide, it.indices, it.values, it.n, it.k};
    if (m == topk_segment_batch_max) {
      ZF_LAUNCH(static_cast<unsigned>(m), topk_block, 0, stream, topk_wide_kernel)(l);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
      m = 0;
    }
  }
  if (m > 0) {
    ZF_LAUNCH(static_cast<unsigned>(m), topk_block, 0, stream, topk_wide_kernel)(l);
    return launch_status();
  }
  return cudaSuccess;
}

/// Scratch of `device::topk` for `n` scores (the one-block path needs none).
[[nodiscard]] inline std::size_t topk_temp_bytes(std::int64_t n) {
  return std::max(min_temp_bytes, n > topk_one_block_max_n ? topk_large_temp_bytes(n) + 256 : 0);
}

/// Scratch of `device::topk_segmented`: one multi-block region for the largest segment that
/// takes that path (they run one after the other).
[[nodiscard]] inline std::size_t topk_segmented_temp_bytes(const topk_item* items, std::int64_t count) {
  std::int64_t largest = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    if (items[i].n > topk_segment_one_block_max_n) {
      largest = std::max(largest, items[i].n);
    }
  }
  return std::max(min_temp_bytes, largest > 0 ? topk_large_temp_bytes(largest) + 256 : 0);
}

/// Every segment: the small ones 32 per launch, then the large ones one after the other, then
/// the +Inf re-ranking of those with `wide`.
[[nodiscard]] inline cudaError_t
dispatch_topk_segmented(void* d_temp, const topk_item* items, std::int64_t count, cudaStream_t stream) {
  if (const cudaError_t e = dispatch_topk_small(items, count, topk_segment_one_block_max_n, stream);
      e != cudaSuccess) {
    return e;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    if (items[i].n > topk_segment_one_block_max_n && items[i].k > 0) {
      if (const cudaError_t e = dispatch_topk_large(align_pointer(d_temp), items[i], stream);
          e != cudaSuccess) {
        return e;
      }
    }
  }
  return dispatch_topk_wide(items, count, stream);
}

} // namespace detail

ZF_NAMESPACE_END
