/// @file
/// Kernels of the radix top-k (see `<zenflow/select/topk.cuh>`).
///
/// Large n (AIR top-k's structure, our code): the input is read three times.
///   1. `topk_hist0_kernel`: histogram of the top 11-bit digit of every composite key.
///   2. `topk_pass1_kernel`: keys in the chosen top bucket are copied to a candidate buffer while
///      the next digit is histogrammed; each 4096-element tile also counts its keys in higher
///      buckets (all selected).
///   3. `topk_cand_kernel` (passes 2..5) and `topk_cand_count_kernel` read only the candidates.
///   4. `topk_scan_kernel` turns per-tile counts into offsets; `topk_write_kernel` rereads the
///      input and writes every key >= the threshold at its offset: ascending indices, no atomics
///      on the output, deterministic.
/// The bucket choice after each histogram is fused into the last block to finish (a ticket
/// counter), and every pass stops early once the threshold is known.
///
/// Small n and segmented top-k: `topk_block_kernel`, one block per segment, everything in
/// shared memory except the (L2-resident) input.
///
/// Segments with `topk_item::wide`: then `topk_wide_kernel`, one block per segment (radix_math.hpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/select/detail/radix_math.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int topk_block = 256;
inline constexpr int topk_items = 16;
inline constexpr std::int64_t topk_tile = topk_block * topk_items; // 4096 elements per tile
inline constexpr int topk_segment_block = 1024;
inline constexpr int topk_segment_batch_max = 32;

/// Device-side state of one large selection (lives at the start of the scratch).
struct topk_device_state {
  topk_radix_state s;
  std::uint32_t ticket;     ///< blocks finished in the current histogram pass
  std::uint32_t cand_count; ///< candidates gathered by pass 1
};

ZF_DEVICE ZF_FORCEINLINE std::uint64_t key_of(const float* scores, std::int64_t i) {
  return topk_composite(topk_value_key(scores[i]), static_cast<std::uint32_t>(i));
}

ZF_DEVICE ZF_FORCEINLINE std::uint32_t index_of(std::uint64_t composite) {
  return 0xffffffffu - static_cast<std::uint32_t>(composite & 0xffffffffu);
}

/// Finds the bucket of the k-th largest candidate in `hist` (2048 bins, shared or global memory
/// read through L2) with all `Block` threads, and advances `*s` (shared memory) past pass `p`.
/// Same answer as `topk_find_bucket`. Ends with a barrier.
template <int Block, bool Global>
ZF_DEVICE void block_choose(const std::uint32_t* hist, topk_radix_state* s, int p) {
  constexpr int per = topk_bins / Block;
  using scan_t = block_scan<std::uint32_t, Block>;
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  const int t = static_cast<int>(threadIdx.x);
  std::uint32_t local[per];
  std::uint32_t sum = 0;
  ZF_UNROLL
  for (int j = 0; j < per; ++j) {
    const int d = topk_bins - 1 - (t * per + j); // thread 0 owns the top digits
    if constexpr (Global) {
      local[j] = __ldcg(hist + d);
    } else {
      local[j] = hist[d];
    }
    sum += local[j];
  }
  const std::uint64_t k = s->k_remaining; // read before the scan's barriers; written after
  std::uint32_t above = 0;
  scan_t(scan_tmp).ExclusiveSum(sum, above);
  std::uint64_t run = above;
  ZF_UNROLL
  for (int j = 0; j < per; ++j) {
    if (run < k && run + local[j] >= k) {
      topk_bucket b;
      b.digit = static_cast<std::uint32_t>(topk_bins - 1 - (t * per + j));
      b.above = run;
      b.count = local[j];
      topk_advance(*s, p, b);
    }
    run += local[j];
  }
  __syncthreads();
}

/// Adds a block's shared histogram into the global one, then lets the last block to finish
/// choose the bucket, update the state, and clear the global histogram for the next pass.
/// `seed_k != 0` (pass 0 only) sets k_remaining first: the state starts zeroed by a memset.
ZF_DEVICE inline void finish_histogram_pass(const std::uint32_t* sh_hist,
                                            std::uint32_t* g_hist,
                                            topk_device_state* st,
                                            int p,
                                            std::uint64_t seed_k = 0) {
  ZF_SHARED(is_last, bool);
  ZF_SHARED(s, topk_radix_state);
  for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_block) {
    if (sh_hist[d] != 0) {
      atomicAdd(g_hist + d, sh_hist[d]);
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicAdd(&st->ticket, 1u) == gridDim.x - 1;
    if (is_last) {
      s = st->s;
      if (seed_k != 0) {
        s.k_remaining = seed_k;
      }
    }
  }
  __syncthreads();
  if (!is_last) {
    return;
  }
  __threadfence();
  block_choose<topk_block, true>(g_hist, &s, p);
  for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_block) {
    g_hist[d] = 0;
  }
  if (threadIdx.x == 0) {
    st->s = s;
    st->ticket = 0;
  }
}

/// Pass 0 over the whole input.
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block) topk_hist0_kernel(
    const float* scores, std::int64_t n, std::uint64_t k, std::uint32_t* g_hist, topk_device_state* st) {
  ZF_SHARED(hist, std::uint32_t[topk_bins]);
  for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_block) {
    hist[d] = 0;
  }
  __syncthreads();
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * topk_tile;
  float v[topk_items];
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    v[j] = i < n ? __ldg(scores + i) : 0.0f;
  }
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    if (i < n) {
      // The top digit is bits 63..53 of the composite: the value key alone decides it.
      atomicAdd(hist + (topk_value_key(v[j]) >> 21), 1u);
    }
  }
  __syncthreads();
  finish_histogram_pass(hist, g_hist, st, 0, k);
}

/// Pass 1 over the whole input: per-tile count of keys above the chosen top bucket, gather of
/// the keys inside it, histogram of their second digit. If pass 0 already fixed the threshold,
/// only the per-tile count of selected keys is computed.
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block) topk_pass1_kernel(const float* scores,
                                                               std::int64_t n,
                                                               std::uint32_t* g_hist,
                                                               topk_device_state* st,
                                                               std::uint64_t* cand,
                                                               std::uint32_t* tile_count) {
  using scan_t = block_scan<std::uint32_t, topk_block>;
  ZF_SHARED(hist, std::uint32_t[topk_bins]);
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  ZF_SHARED(cand_base, std::uint32_t);
  const topk_radix_state s = st->s;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * topk_tile;
  float v[topk_items];
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    v[j] = i < n ? __ldg(scores + i) : 0.0f;
  }
  if (s.done != 0) {
    std::uint32_t m = 0;
    ZF_UNROLL
    for (int j = 0; j < topk_items; ++j) {
      const std::int64_t i = base + j * topk_block + threadIdx.x;
      m += (i < n && topk_composite(topk_value_key(v[j]), static_cast<std::uint32_t>(i)) >= s.prefix) ? 1u
                                                                                                      : 0u;
    }
    std::uint32_t off = 0, total = 0;
    scan_t(scan_tmp).ExclusiveSum(m, off, total);
    if (threadIdx.x == 0) {
      tile_count[blockIdx.x] = total;
    }
    return;
  }
  for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_block) {
    hist[d] = 0;
  }
  __syncthreads();
  const std::uint64_t mask = topk_known_mask(1);
  std::uint32_t above = 0, mine = 0;
  std::uint64_t key[topk_items];
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    key[j] = i < n ? topk_composite(topk_value_key(v[j]), static_cast<std::uint32_t>(i)) : 0ull;
    const std::uint64_t top = key[j] & mask;
    if (i < n && top > s.prefix) {
      ++above;
    } else if (i < n && top == s.prefix) {
      ++mine;
      atomicAdd(hist + topk_digit(key[j], 1), 1u);
    }
  }
  // One global atomic per block reserves the block's candidate slots.
  std::uint32_t off = 0, total = 0;
  scan_t(scan_tmp).ExclusiveSum(mine, off, total);
  if (threadIdx.x == 0) {
    cand_base = total != 0 ? atomicAdd(&st->cand_count, total) : 0u;
  }
  __syncthreads();
  std::uint32_t o = cand_base + off;
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    if (i < n && (key[j] & mask) == s.prefix) {
      cand[o++] = key[j];
    }
  }
  std::uint32_t above_total = 0;
  scan_t(scan_tmp).ExclusiveSum(above, off, above_total);
  if (threadIdx.x == 0) {
    tile_count[blockIdx.x] = above_total;
  }
  __syncthreads();
  finish_histogram_pass(hist, g_hist, st, 1);
}

/// Passes 2..5 over the candidates only; returns at once when the threshold is known.
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block)
    topk_cand_kernel(std::uint32_t* g_hist, topk_device_state* st, const std::uint64_t* cand, int p) {
  ZF_SHARED(hist, std::uint32_t[topk_bins]);
  const topk_radix_state s = st->s;
  if (s.done != 0) {
    return;
  }
  for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_block) {
    hist[d] = 0;
  }
  __syncthreads();
  const std::uint32_t m = st->cand_count;
  const std::uint64_t mask = topk_known_mask(p);
  for (std::uint32_t i = blockIdx.x * topk_block + threadIdx.x; i < m; i += gridDim.x * topk_block) {
    const std::uint64_t key = __ldcg(cand + i);
    if ((key & mask) == s.prefix) {
      atomicAdd(hist + topk_digit(key, p), 1u);
    }
  }
  __syncthreads();
  finish_histogram_pass(hist, g_hist, st, p);
}

/// Adds the selected candidates to their tiles' counts (when candidates were gathered).
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block) topk_cand_count_kernel(const topk_device_state* st,
                                                                    const std::uint64_t* cand,
                                                                    std::uint32_t* tile_count) {
  const topk_radix_state s = st->s;
  if (s.pass < 2) {
    return; // pass 0 fixed the threshold: pass 1 counted everything
  }
  const std::uint32_t m = st->cand_count;
  for (std::uint32_t i = blockIdx.x * topk_block + threadIdx.x; i < m; i += gridDim.x * topk_block) {
    const std::uint64_t key = __ldcg(cand + i);
    if (key >= s.prefix) {
      atomicAdd(tile_count + static_cast<std::int64_t>(index_of(key)) / topk_tile, 1u);
    }
  }
}

/// Exclusive scan of the per-tile counts, in place (one block).
template <int = 0>
ZF_KERNEL void __launch_bounds__(1024) topk_scan_kernel(std::uint32_t* tile_count, std::int64_t tiles) {
  using scan_t = block_scan<std::uint32_t, 1024>;
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  std::uint32_t carry = 0;
  for (std::int64_t b = 0; b < tiles; b += 1024) {
    const std::int64_t i = b + threadIdx.x;
    const std::uint32_t x = i < tiles ? tile_count[i] : 0u;
    std::uint32_t off = 0, total = 0;
    scan_t(scan_tmp).ExclusiveSum(x, off, total);
    if (i < tiles) {
      tile_count[i] = carry + off;
    }
    carry += total;
    __syncthreads();
  }
}

/// Final read of the input: every key >= the threshold goes to its tile's offset plus its rank
/// within the tile, so the output is in ascending index order.
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block) topk_write_kernel(const float* scores,
                                                               std::int64_t n,
                                                               const topk_device_state* st,
                                                               const std::uint32_t* tile_offset,
                                                               std::int32_t* indices,
                                                               float* values) {
  using scan_t = block_scan<std::uint32_t, topk_block>;
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  const std::uint64_t threshold = st->s.prefix;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * topk_tile;
  float v[topk_items];
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    v[j] = i < n ? __ldcs(scores + i) : 0.0f;
  }
  std::uint32_t o = tile_offset[blockIdx.x];
  ZF_UNROLL
  for (int j = 0; j < topk_items; ++j) {
    const std::int64_t i = base + j * topk_block + threadIdx.x;
    const bool sel =
        i < n && topk_composite(topk_value_key(v[j]), static_cast<std::uint32_t>(i)) >= threshold;
    std::uint32_t off = 0, total = 0;
    scan_t(scan_tmp).ExclusiveSum(sel ? 1u : 0u, off, total);
    if (sel) {
      indices[o + off] = static_cast<std::int32_t>(i);
      if (values != nullptr) {
        values[o + off] = v[j];
      }
    }
    o += total;
    __syncthreads();
  }
}

/// One segment of a segmented launch.
struct topk_segment {
  const float* scores;
  std::int32_t* indices;
  float* values;
  std::int64_t n;
  std::int64_t k;
};

struct topk_segment_launch {
  topk_segment seg[topk_segment_batch_max];
};

/// Whole selection of one segment in one block of 1024 threads (histograms in shared memory;
/// the input is reread per pass, from L2 for the sizes this path is for).
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_segment_block)
    topk_block_kernel(const __grid_constant__ topk_segment_launch l) {
  using scan_t = block_scan<std::uint32_t, topk_segment_block>;
  ZF_SHARED(hist, std::uint32_t[topk_bins]);
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  ZF_SHARED(s, topk_radix_state);
  const topk_segment g = l.seg[blockIdx.x];
  if (g.k == 0) {
    return;
  }
  if (threadIdx.x == 0) {
    s = topk_radix_state{};
    s.k_remaining = static_cast<std::uint64_t>(g.k);
  }
  for (int p = 0; p < topk_passes; ++p) {
    for (int d = static_cast<int>(threadIdx.x); d < topk_bins; d += topk_segment_block) {
      hist[d] = 0;
    }
    __syncthreads();
    const std::uint64_t mask = topk_known_mask(p);
    const std::uint64_t prefix = s.prefix;
    for (std::int64_t i = threadIdx.x; i < g.n; i += topk_segment_block) {
      const std::uint64_t key = key_of(g.scores, i);
      if ((key & mask) == prefix) {
        atomicAdd(hist + topk_digit(key, p), 1u);
      }
    }
    __syncthreads();
    block_choose<topk_segment_block, false>(hist, &s, p);
    if (s.done != 0) {
      break;
    }
  }
  const std::uint64_t threshold = s.prefix;
  std::uint32_t o = 0;
  for (std::int64_t b = 0; b < g.n; b += topk_segment_block) {
    const std::int64_t i = b + threadIdx.x;
    float v = 0.0f;
    bool sel = false;
    if (i < g.n) {
      v = g.scores[i];
      sel = topk_composite(topk_value_key(v), static_cast<std::uint32_t>(i)) >= threshold;
    }
    std::uint32_t off = 0, total = 0;
    scan_t(scan_tmp).ExclusiveSum(sel ? 1u : 0u, off, total);
    if (sel) {
      g.indices[o + off] = static_cast<std::int32_t>(i);
      if (g.values != nullptr) {
        g.values[o + off] = v;
      }
    }
    o += total;
    __syncthreads();
  }
}

/// One segment of the +Inf re-ranking (topk_item::wide), after its selection was written.
struct topk_wide_segment {
  const float* scores;
  const double* wide;
  std::int32_t* indices;
  float* values;
  std::int64_t n;
  std::int64_t k;
};

struct topk_wide_launch {
  topk_wide_segment seg[topk_segment_batch_max];
};

/// The +Inf scores of each segment re-ranked by their fp64 values when its k-th largest score is
/// +Inf (radix_math.hpp): one block per segment, which returns at once otherwise. The bitwise
/// threshold search counts in integers, the set is written in index order with a block scan:
/// the host's set (host_topk_wide), whatever the block size.
template <int = 0>
ZF_KERNEL void __launch_bounds__(topk_block) topk_wide_kernel(const __grid_constant__ topk_wide_launch l) {
  using scan_t = block_scan<std::uint32_t, topk_block>;
  ZF_SHARED(scan_tmp, typename scan_t::TempStorage);
  ZF_SHARED(count, unsigned long long);
  const topk_wide_segment g = l.seg[blockIdx.x];
  if (g.k == 0 || g.wide == nullptr) {
    return;
  }
  // Whether every selected score is +Inf, voted by the block (not a shared flag many threads
  // clear at once: a data race, found by the kernel emulator under ThreadSanitizer).
  int mine = 1;
  for (std::int64_t o = threadIdx.x; o < g.k; o += topk_block) {
    if (!topk_is_pos_inf(g.scores[g.indices[o]])) {
      mine = 0;
    }
  }
  if (__syncthreads_and(mine) == 0) {
    return; // every +Inf score is selected (the same for every thread)
  }
  topk_wide96 t{};
  for (int b = topk_wide_bits - 1; b >= 0; --b) {
    const topk_wide96 cand = topk_wide_with_bit(t, b);
    if (threadIdx.x == 0) {
      count = 0;
    }
    __syncthreads();
    unsigned long long c = 0;
    for (std::int64_t i = threadIdx.x; i < g.n; i += topk_block) {
      c += topk_wide_selected(g.scores, g.wide, i, cand) ? 1u : 0u;
    }
    if (c != 0) {
      atomicAdd(&count, c);
    }
    __syncthreads();
    if (count >= static_cast<unsigned long long>(g.k)) {
      t = cand;
    }
    __syncthreads(); // every thread has read `count` before it is cleared
  }
  std::uint32_t o = 0;
  for (std::int64_t b = 0; b < g.n; b += topk_block) {
    const std::int64_t i = b + threadIdx.x;
    const bool sel = i < g.n && topk_wide_selected(g.scores, g.wide, i, t);
    std::uint32_t off = 0, total = 0;
    scan_t(scan_tmp).ExclusiveSum(sel ? 1u : 0u, off, total);
    if (sel) {
      g.indices[o + off] = static_cast<std::int32_t>(i);
      if (g.values != nullptr) {
        g.values[o + off] = g.scores[i];
      }
    }
    o += total;
    __syncthreads();
  }
}

} // namespace detail
ZF_NAMESPACE_END
