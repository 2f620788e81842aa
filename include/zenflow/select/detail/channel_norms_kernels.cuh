/// @file
/// Kernels of the channel-norm reducers (see `<zenflow/select/channel_norms.cuh>`), adding each
/// score's terms in the order `norm_order.hpp` defines, which the host loops follow too: the
/// scores are the host backend's bits.
///
/// Contiguous channels: one warp per channel (64 lanes, two per thread). Strided channels: a
/// 32 x 8 block covers 32 x V adjacent columns (V elements per 16-byte load when rows are
/// 16-byte aligned; the order does not depend on V) and a chunk of rows; each warp reads whole
/// row segments (coalesced), partial sums per row chunk go to scratch and a second kernel adds
/// them in chunk order. The per-item totals (norm_total_kernel) are a float tree: deterministic,
/// not the host's float64 sum.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/select/detail/norm_order.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int norm_block = 256;
inline constexpr int norm_batch_max = 32; // items per launch: kernel parameters stay under 4 KiB

/// One item as a kernel sees it.
template <class T>
struct norm_launch_item {
  const T* grad;
  float* out; ///< scores (contiguous) or row-chunk partials (strided)
  std::int64_t ld;
  std::int64_t len;         ///< channel_len
  std::int64_t block_begin; ///< first block of the item in this launch
  std::uint32_t* flag;      ///< NaN/Inf flag to OR into, or nullptr (no check)
  std::int32_t channels;
  std::int32_t group;          ///< contiguous: threads per channel (32); strided: columns per thread
  std::int32_t rows_per_chunk; ///< strided only
  std::int32_t col_blocks;     ///< strided only
};

template <class T>
struct norm_launch {
  norm_launch_item<T> item[norm_batch_max];
  int count;
};

struct norm_finish_item {
  const float* partials;
  float* scores;
  std::int64_t block_begin;
  std::int32_t channels;
  std::int32_t chunks;
};

struct norm_finish_launch {
  norm_finish_item item[norm_batch_max];
  int count;
};

struct norm_total_launch {
  const float* scores[norm_batch_max];
  float* total[norm_batch_max];
  std::int32_t channels[norm_batch_max];
  int count;
};

/// The item that block `b` belongs to (items are in block order; at most 32 of them).
template <class L>
ZF_DEVICE ZF_FORCEINLINE int find_item(const L& l, std::int64_t b) {
  int i = 0;
  while (i + 1 < l.count && l.item[i + 1].block_begin <= b) {
    ++i;
  }
  return i;
}

/// One contiguous channel of `len` elements at `p` in the host's order (norm_order.hpp): thread
/// `t` of the warp holds lanes t and t + 32, adding elements i = t and i = t + 32 (mod 64) in
/// order; then the fold, lane l += lane l + s for s = 32, 16, ..., 1 (the xor shuffles add the
/// same pairs). Returns the score on thread 0. Loads are of single elements, by index: the order
/// and the bits do not depend on the pointer's alignment; each warp still reads 64 contiguous
/// elements per step, and four steps are in flight per thread.
template <channel_norm Norm, class T>
ZF_DEVICE float contiguous_warp_score(const T* p, std::int64_t len, int t, bool& bad) {
  float lo = 0.0f; // lane t
  float hi = 0.0f; // lane t + 32
  constexpr int unroll = 4;
  std::int64_t i = 0;
  for (; i + unroll * norm_lanes <= len; i += unroll * norm_lanes) {
    T x[2 * unroll];
    ZF_UNROLL
    for (int u = 0; u < unroll; ++u) {
      x[2 * u] = __ldcs(p + i + u * norm_lanes + t);
      x[2 * u + 1] = __ldcs(p + i + u * norm_lanes + 32 + t);
    }
    ZF_UNROLL
    for (int u = 0; u < unroll; ++u) {
      lo = norm_accumulate<Norm>(lo, to_float(x[2 * u]));
      hi = norm_accumulate<Norm>(hi, to_float(x[2 * u + 1]));
      bad |= is_nonfinite(x[2 * u]) | is_nonfinite(x[2 * u + 1]);
    }
  }
  for (; i < len; i += norm_lanes) {
    if (i + t < len) {
      const T x = p[i + t];
      lo = norm_accumulate<Norm>(lo, to_float(x));
      bad |= is_nonfinite(x);
    }
    if (i + 32 + t < len) {
      const T x = p[i + 32 + t];
      hi = norm_accumulate<Norm>(hi, to_float(x));
      bad |= is_nonfinite(x);
    }
  }
  float v = norm_add(lo, hi);
  ZF_UNROLL
  for (int o = 16; o > 0; o >>= 1) {
    v = norm_add(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

/// A warp's sum, a fixed xor tree (the per-item totals).
ZF_DEVICE ZF_FORCEINLINE float warp_sum(float v) {
  ZF_UNROLL
  for (int o = 16; o > 0; o >>= 1) {
    v = norm_add(v, __shfl_xor_sync(0xffffffffu, v, o)); // no add.ftz under -ftz=true
  }
  return v;
}

/// Contiguous channels: one warp per channel, 8 channels per block.
template <channel_norm Norm, class T>
ZF_KERNEL void __launch_bounds__(norm_block)
    contiguous_norms_kernel(const __grid_constant__ norm_launch<T> l) {
  const std::int64_t b = blockIdx.x;
  const auto& it = l.item[find_item(l, b)];
  const std::int64_t local = b - it.block_begin;
  const std::int64_t c = local * (norm_block / 32) + threadIdx.x / 32;
  if (c >= it.channels) {
    return; // whole warp: no block-level synchronisation follows
  }
  const int lane = static_cast<int>(threadIdx.x % 32);
  bool bad = false;
  const float score = contiguous_warp_score<Norm>(it.grad + c * it.ld, it.len, lane, bad);
  if (lane == 0) {
    it.out[c] = score;
  }
  if (it.flag != nullptr && __any_sync(0xffffffffu, bad) && lane == 0) {
    atomicOr(it.flag, 1u);
  }
}

/// Strided channels: block = 32 column lanes x 8 row lanes; writes one partial per column for
/// its chunk of rows.
template <channel_norm Norm, class T>
ZF_KERNEL void __launch_bounds__(norm_block) strided_norms_kernel(const __grid_constant__ norm_launch<T> l) {
  constexpr int V = vec_elems<T>;
  constexpr int rows_per_pass = norm_block / 32;
  static_assert(rows_per_pass == strided_row_lanes, "the row lanes are norm_order.hpp's");
  ZF_SHARED(part, float[rows_per_pass][32 * V]);
  const std::int64_t b = blockIdx.x;
  const auto& it = l.item[find_item(l, b)];
  const std::int64_t local = b - it.block_begin;
  const int vw = it.group; // 1 or V columns per thread
  const std::int64_t col_block = local % it.col_blocks;
  const std::int64_t chunk = local / it.col_blocks;
  const int tx = static_cast<int>(threadIdx.x % 32);
  const int ty = static_cast<int>(threadIdx.x / 32);
  const std::int64_t c0 = col_block * 32 * vw + static_cast<std::int64_t>(tx) * vw;
  const std::int64_t r0 = chunk * it.rows_per_chunk;
  const std::int64_t r1 = r0 + it.rows_per_chunk < it.len ? r0 + it.rows_per_chunk : it.len;
  float acc[V];
  ZF_UNROLL
  for (int j = 0; j < V; ++j) {
    acc[j] = 0.0f;
  }
  bool bad = false;
  if (vw == V && c0 + V <= it.channels) {
    // Rows are 16-byte aligned and the V columns are in range: one 16-byte load per row.
    std::int64_t r = r0 + ty;
    for (; r + 3 * rows_per_pass < r1; r += 4 * rows_per_pass) {
      uint4 v[4];
      ZF_UNROLL
      for (int u = 0; u < 4; ++u) {
        v[u] = __ldcs(reinterpret_cast<const uint4*>(it.grad + (r + u * rows_per_pass) * it.ld + c0));
      }
      ZF_UNROLL
      for (int u = 0; u < 4; ++u) {
        float one[V];
        const std::uint32_t w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        ZF_UNROLL
        for (int q = 0; q < 4; ++q) {
          if constexpr (std::is_same_v<T, float>) {
            one[q] = __uint_as_float(w[q]);
            bad |= is_nonfinite(one[q]);
          } else {
            const T lo = from_raw_bits<T>(static_cast<std::uint16_t>(w[q] & 0xffffu));
            const T hi = from_raw_bits<T>(static_cast<std::uint16_t>(w[q] >> 16));
            one[2 * q] = to_float(lo);
            one[2 * q + 1] = to_float(hi);
            bad |= is_nonfinite(lo) | is_nonfinite(hi);
          }
        }
        ZF_UNROLL
        for (int j = 0; j < V; ++j) {
          acc[j] = norm_accumulate<Norm>(acc[j], one[j]);
        }
      }
    }
    for (; r < r1; r += rows_per_pass) {
      const T* row = it.grad + r * it.ld + c0;
      ZF_UNROLL
      for (int j = 0; j < V; ++j) {
        acc[j] = norm_accumulate<Norm>(acc[j], to_float(row[j]));
        bad |= is_nonfinite(row[j]);
      }
    }
  } else {
    const std::int64_t rem = it.channels - c0;
    const int ncols = rem <= 0 ? 0 : (rem < vw ? static_cast<int>(rem) : vw);
    for (std::int64_t r = r0 + ty; r < r1; r += rows_per_pass) {
      const T* row = it.grad + r * it.ld + c0;
      // Fully unrolled with a guard: a runtime bound on `acc[j]` would put `acc` in local memory
      // (a stack frame for the whole kernel, the 16-byte path included).
      ZF_UNROLL
      for (int j = 0; j < V; ++j) {
        if (j < ncols) {
          const T x = row[j];
          acc[j] = norm_accumulate<Norm>(acc[j], to_float(x));
          bad |= is_nonfinite(x);
        }
      }
    }
  }
  ZF_UNROLL
  for (int j = 0; j < V; ++j) {
    if (j < vw) {
      part[ty][tx * vw + j] = acc[j];
    }
  }
  const int any_bad = __syncthreads_or(bad ? 1 : 0);
  // Each of the first 32*vw threads adds one column over the 8 row lanes, in order.
  const int slot = static_cast<int>(threadIdx.x);
  if (slot < 32 * vw) {
    const std::int64_t c = col_block * 32 * vw + slot;
    if (c < it.channels) {
      float s = 0.0f;
      ZF_UNROLL
      for (int y = 0; y < rows_per_pass; ++y) {
        s = norm_add(s, part[y][slot]);
      }
      it.out[chunk * it.channels + c] = s;
    }
  }
  if (threadIdx.x == 0 && it.flag != nullptr && any_bad != 0) {
    atomicOr(it.flag, 1u);
  }
}

/// Strided channels, second step: score = sum of the row-chunk partials, in chunk order.
template <int = 0>
ZF_KERNEL void __launch_bounds__(norm_block)
    strided_finish_kernel(const __grid_constant__ norm_finish_launch l) {
  const std::int64_t b = blockIdx.x;
  const auto& it = l.item[find_item(l, b)];
  const std::int64_t c = (b - it.block_begin) * norm_block + threadIdx.x;
  if (c >= it.channels) {
    return;
  }
  float s = 0.0f;
  for (std::int32_t k = 0; k < it.chunks; ++k) {
    s = norm_add(s, it.partials[static_cast<std::int64_t>(k) * it.channels + c]);
  }
  it.scores[c] = s;
}

/// Per-item total of the scores: one block per item, a fixed-order tree.
template <int = 0>
ZF_KERNEL void __launch_bounds__(norm_block) norm_total_kernel(const __grid_constant__ norm_total_launch l) {
  ZF_SHARED(warp_acc, float[norm_block / 32]);
  const int i = static_cast<int>(blockIdx.x);
  const float* s = l.scores[i];
  float acc = 0.0f;
  for (std::int64_t c = threadIdx.x; c < l.channels[i]; c += norm_block) {
    acc = norm_add(acc, s[c]);
  }
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) {
    warp_acc[threadIdx.x / 32] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    ZF_UNROLL
    for (int w = 0; w < norm_block / 32; ++w) {
      t = norm_add(t, warp_acc[w]);
    }
    *l.total[i] = t;
  }
}

} // namespace detail
ZF_NAMESPACE_END
