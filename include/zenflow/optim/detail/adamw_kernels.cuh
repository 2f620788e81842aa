/// @file
/// Kernels of the device optimizer launchers (optim/adamw.cuh). The arithmetic is
/// math/adam.hpp's, shared with the host twins.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::optim {

inline constexpr int block_threads = 256;
/// Elements one block handles in the row / flat kernels (4 per thread per pass, 4 passes).
inline constexpr std::int64_t block_elems = 4096;
/// Tensors per dense launch: the descriptors travel in the kernel parameters (< 4 KiB).
inline constexpr int dense_max_tensors = 48;
/// Blocks per launch at most (a larger call is split into several launches).
inline constexpr std::int64_t max_blocks_per_launch = std::int64_t{1} << 30;
/// Tile of the strided-layout kernels: 32 channels x 32 elements, block 32 x 8.
inline constexpr int tile = 32;
inline constexpr int tile_rows = 8;

template <class T>
struct dense_launch {
  adamw_tensor<T> tensors[dense_max_tensors];
  std::int64_t block_start[dense_max_tensors + 1]; // prefix sum of blocks per tensor
  std::uint64_t vector_ok;                         // bit t: tensor t takes the 16-byte path
  int count;                                       // tensors in this launch
  int first;                                       // index of tensors[0] in the call (for d_counts)
  adamw_hparams hp;
};

/// Four consecutive elements widened to float (16-byte or 8-byte load; the caller checked alignment).
template <class T>
__device__ ZF_FORCEINLINE float4 load4(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    return make_float4(to_float(detail::from_raw_bits<T>(static_cast<std::uint16_t>(u.x & 0xffffu))),
                       to_float(detail::from_raw_bits<T>(static_cast<std::uint16_t>(u.x >> 16))),
                       to_float(detail::from_raw_bits<T>(static_cast<std::uint16_t>(u.y & 0xffffu))),
                       to_float(detail::from_raw_bits<T>(static_cast<std::uint16_t>(u.y >> 16))));
  }
}

template <class T>
__device__ ZF_FORCEINLINE void store4(T* p, float4 x) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = x;
  } else {
    uint2 u;
    u.x = detail::raw_bits(from_float<T>(x.x)) |
          (static_cast<std::uint32_t>(detail::raw_bits(from_float<T>(x.y))) << 16);
    u.y = detail::raw_bits(from_float<T>(x.z)) |
          (static_cast<std::uint32_t>(detail::raw_bits(from_float<T>(x.w))) << 16);
    *reinterpret_cast<uint2*>(p) = u;
  }
}

__host__ __device__ ZF_FORCEINLINE bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

__device__ ZF_FORCEINLINE float abs_f(float x) {
  return fabsf(x);
}

/// The 4-lane version of adam_update (same operations per lane).
__device__ ZF_FORCEINLINE void
update4(float4& p, float4& m, float4& v, float4 g, float s, const adam_constants& c) {
  adam_update(p.x, m.x, v.x, g.x, s, c);
  adam_update(p.y, m.y, v.y, g.y, s, c);
  adam_update(p.z, m.z, v.z, g.z, s, c);
  adam_update(p.w, m.w, v.w, g.w, s, c);
}

template <class T>
ZF_KERNEL void __launch_bounds__(block_threads) adamw_dense_kernel(const __grid_constant__ dense_launch<T> L,
                                                                   const std::int32_t* __restrict__ counts,
                                                                   const float* __restrict__ grad_scale,
                                                                   const std::uint32_t* __restrict__ skip) {
  if (skip != nullptr && *skip != 0) {
    return;
  }
  const std::int64_t b = blockIdx.x;
  int lo = 0;
  int hi = L.count - 1;
  while (lo < hi) { // last tensor whose first block is <= b
    const int mid = (lo + hi + 1) / 2;
    if (L.block_start[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const adamw_tensor<T>& d = L.tensors[lo];
  ZF_SHARED(shared_c, adam_constants);
  if (threadIdx.x == 0) {
    shared_c = make_adam_constants(L.hp, counts[L.first + lo] + 1);
  }
  __syncthreads();
  const adam_constants c = shared_c;
  const float s = grad_scale != nullptr ? *grad_scale : 1.0f;
  const std::int64_t begin = (b - L.block_start[lo]) * block_elems;
  const std::int64_t end = begin + block_elems < d.size ? begin + block_elems : d.size;
  std::int64_t scalar_begin = begin;
  if ((L.vector_ok >> lo) & 1u) {
    const std::int64_t vec_end = begin + ((end - begin) / 4) * 4;
    for (std::int64_t i = begin + 4 * threadIdx.x; i < vec_end; i += 4 * block_threads) {
      float4 p = *reinterpret_cast<const float4*>(d.master + i);
      float4 m = *reinterpret_cast<const float4*>(d.m + i);
      float4 v = *reinterpret_cast<const float4*>(d.v + i);
      update4(p, m, v, load4(d.grads + i), s, c);
      *reinterpret_cast<float4*>(d.master + i) = p;
      *reinterpret_cast<float4*>(d.m + i) = m;
      *reinterpret_cast<float4*>(d.v + i) = v;
      if (d.weights != nullptr) {
        store4(d.weights + i, p);
      }
    }
    scalar_begin = vec_end;
  }
  for (std::int64_t i = scalar_begin + threadIdx.x; i < end; i += block_threads) {
    const float p = adam_update(d.master[i], d.m[i], d.v[i], d.grads[i], s, c);
    if (d.weights != nullptr) {
      d.weights[i] = from_float<T>(p);
    }
  }
}

/// counts[i] += 1 for i < n unless the step is skipped (after the update kernels, same stream:
/// a block of the update cannot advance a count that another block of it still has to read).
template <int = 0>
ZF_KERNEL void
advance_counts(std::int32_t* __restrict__ counts, std::int64_t n, const std::uint32_t* __restrict__ skip) {
  if (skip != nullptr && *skip != 0) {
    return;
  }
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    counts[i] += 1;
  }
}

/// Block-wide sum of |grad| added to *l1 (one float atomic per block: the order of the blocks'
/// additions is not fixed, so the last bits of *l1 may vary from run to run).
__device__ ZF_FORCEINLINE void add_block_l1(float partial, float* l1) {
  using reduce = block_reduce<float, block_threads>;
  ZF_SHARED(temp, typename reduce::TempStorage);
  const float sum = reduce(temp).Sum(partial);
  if (threadIdx.x == 0) {
    atomicAdd(l1, sum);
  }
}

/// Selective AdamW, both matrices contiguous: block = (row r, part of the row).
template <class T>
ZF_KERNEL void __launch_bounds__(block_threads)
    adamw_selective_rows_kernel(channel_matrix<T> w,
                                channel_matrix<const T> g,
                                const std::int32_t* __restrict__ idx,
                                std::int64_t split,
                                float* __restrict__ master,
                                float* __restrict__ mom1,
                                float* __restrict__ mom2,
                                const std::int32_t* __restrict__ counts,
                                adamw_hparams hp,
                                const float* __restrict__ grad_scale,
                                const std::uint32_t* __restrict__ skip,
                                float* __restrict__ l1,
                                bool vector_ok) {
  if (skip != nullptr && *skip != 0) {
    return;
  }
  const std::int64_t r = blockIdx.x / split;
  const std::int64_t part = blockIdx.x % split;
  // Every thread computes the row's constants (a few fp64 multiplies) at once instead of thread 0
  // while the block waits at a barrier: the same bits, no serial section.
  const adam_constants c = make_adam_constants(hp, counts[r] + 1);
  const float s = grad_scale != nullptr ? *grad_scale : 1.0f;
  const std::int64_t L = w.channel_len;
  const std::int64_t ch = idx[r];
  const T* gr = g.data + ch * g.ld;
  T* wr = w.data + ch * w.ld;
  float* pr = master + r * L;
  float* mr = mom1 + r * L;
  float* vr = mom2 + r * L;
  const std::int64_t begin = part * block_elems;
  const std::int64_t end = begin + block_elems < L ? begin + block_elems : L;
  float partial = 0.0f;
  if (vector_ok) { // L % 4 == 0 and every row 16-byte aligned: no tail
    for (std::int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * block_threads) {
      const float4 gv = load4(gr + i);
      partial += abs_f(gv.x) + abs_f(gv.y) + abs_f(gv.z) + abs_f(gv.w);
      float4 p = *reinterpret_cast<const float4*>(pr + i);
      float4 m = *reinterpret_cast<const float4*>(mr + i);
      float4 v = *reinterpret_cast<const float4*>(vr + i);
      update4(p, m, v, gv, s, c);
      *reinterpret_cast<float4*>(pr + i) = p;
      *reinterpret_cast<float4*>(mr + i) = m;
      *reinterpret_cast<float4*>(vr + i) = v;
      store4(wr + i, p);
    }
  } else {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += block_threads) {
      const float gv = to_float(gr[i]);
      partial += abs_f(gv);
      wr[i] = from_float<T>(adam_update(pr[i], mr[i], vr[i], gv, s, c));
    }
  }
  if (l1 != nullptr) {
    add_block_l1(partial, l1);
  }
}

/// Selective AdamW, any layout: 32 channels x 32 elements per block, transposed through shared
/// memory so that the strided matrix is read along channels and the compact state along rows.
template <class T>
ZF_KERNEL void __launch_bounds__(tile* tile_rows)
    adamw_selective_tiles_kernel(channel_matrix<T> w,
                                 channel_matrix<const T> g,
                                 const std::int32_t* __restrict__ idx,
                                 std::int64_t k,
                                 float* __restrict__ master,
                                 float* __restrict__ mom1,
                                 float* __restrict__ mom2,
                                 const std::int32_t* __restrict__ counts,
                                 adamw_hparams hp,
                                 const float* __restrict__ grad_scale,
                                 const std::uint32_t* __restrict__ skip,
                                 float* __restrict__ l1) {
  if (skip != nullptr && *skip != 0) {
    return;
  }
  ZF_SHARED(buf, float[tile][tile + 1]); // [element][channel]
  ZF_SHARED(consts, adam_constants[tile]);
  ZF_SHARED(chans, std::int32_t[tile]);
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * tile;
  const std::int64_t L = w.channel_len;
  if (ty == 0 && r0 + tx < k) {
    consts[tx] = make_adam_constants(hp, counts[r0 + tx] + 1);
    chans[tx] = idx[r0 + tx];
  }
  __syncthreads();
  float partial = 0.0f;
  for (int j = ty; j < tile; j += tile_rows) { // read: threads along channels
    const std::int64_t i = i0 + j;
    if (r0 + tx < k && i < L) {
      const float gv = to_float(g(chans[tx], i));
      partial += abs_f(gv);
      buf[j][tx] = gv;
    }
  }
  __syncthreads();
  const float s = grad_scale != nullptr ? *grad_scale : 1.0f;
  for (int j = ty; j < tile; j += tile_rows) { // update: threads along elements
    const std::int64_t r = r0 + j;
    const std::int64_t i = i0 + tx;
    if (r < k && i < L) {
      const std::int64_t o = r * L + i;
      buf[tx][j] = adam_update(master[o], mom1[o], mom2[o], buf[tx][j], s, consts[j]);
    }
  }
  __syncthreads();
  for (int j = ty; j < tile; j += tile_rows) { // write: threads along channels
    const std::int64_t i = i0 + j;
    if (r0 + tx < k && i < L) {
      w(chans[tx], i) = from_float<T>(buf[j][tx]);
    }
  }
  if (l1 != nullptr) {
    using reduce = block_reduce<float, tile, block_reduce_warp_reductions, tile_rows>;
    ZF_SHARED(temp, typename reduce::TempStorage);
    const float sum = reduce(temp).Sum(partial);
    if (tx == 0 && ty == 0) {
      atomicAdd(l1, sum);
    }
  }
}

/// The row update of `adamw_selective_rows_kernel` for one whole row (block-stride over it).
template <class T>
__device__ ZF_FORCEINLINE void selective_row(const T* __restrict__ gr,
                                             T* __restrict__ wr,
                                             float* __restrict__ pr,
                                             float* __restrict__ mr,
                                             float* __restrict__ vr,
                                             std::int64_t L,
                                             float s,
                                             const adam_constants& c,
                                             bool vector_ok) {
  if (vector_ok) {
    for (std::int64_t i = 4 * threadIdx.x; i < L; i += 4 * blockDim.x) {
      float4 p = *reinterpret_cast<const float4*>(pr + i);
      float4 m = *reinterpret_cast<const float4*>(mr + i);
      float4 v = *reinterpret_cast<const float4*>(vr + i);
      update4(p, m, v, load4(gr + i), s, c);
      *reinterpret_cast<float4*>(pr + i) = p;
      *reinterpret_cast<float4*>(mr + i) = m;
      *reinterpret_cast<float4*>(vr + i) = v;
      store4(wr + i, p);
    }
  } else {
    for (std::int64_t i = threadIdx.x; i < L; i += blockDim.x) {
      wr[i] = from_float<T>(adam_update(pr[i], mr[i], vr[i], to_float(gr[i]), s, c));
    }
  }
}

/// Selective AdamW over a table of matrices (`adamw_selective_item`, device memory), one launch:
/// virtual block b (grid-stride) is one row of a contiguous item or 32 rows of a strided one
/// (`adamw_selective_batch_blocks`), whole, so that the block advances its rows' counts itself
/// after every thread has read them (no second launch). The constants: every thread its own
/// (contiguous), one thread per row in parallel (strided). Element-wise: the per-matrix kernels'
/// bits.
template <class T>
ZF_KERNEL void __launch_bounds__(block_threads)
    adamw_selective_batched_kernel(const adamw_selective_item<T>* __restrict__ items,
                                   int count,
                                   std::int64_t blocks,
                                   adamw_hparams hp,
                                   const float* __restrict__ grad_scale,
                                   const std::uint32_t* __restrict__ skip) {
  if (skip != nullptr && *skip != 0) {
    return;
  }
  ZF_SHARED(buf, float[tile][tile + 1]); // strided items: [element][channel]
  ZF_SHARED(consts, adam_constants[tile]);
  ZF_SHARED(chans, std::int32_t[tile]);
  const float s = grad_scale != nullptr ? *grad_scale : 1.0f;
  for (std::int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const adamw_selective_item<T> it = items[item_of_block(items, count, b)];
    const adamw_hparams ihp = item_hparams(hp, it);
    const std::int64_t L = it.weights.channel_len;
    const selected_rows& rows = it.rows;
    if (it.weights.layout == channel_layout::contiguous && it.grads.layout == channel_layout::contiguous) {
      const std::int64_t r = b - it.block_begin;
      const adam_constants c = make_adam_constants(ihp, rows.counts[r] + 1);
      const std::int64_t ch = rows.idx[r];
      const bool vec = it.weights.ld % 4 == 0 && it.grads.ld % 4 == 0 && L % 4 == 0 &&
                       aligned(it.weights.data, 4 * sizeof(T)) && aligned(it.grads.data, 4 * sizeof(T)) &&
                       aligned(rows.master, 16) && aligned(rows.m, 16) && aligned(rows.v, 16);
      selective_row(it.grads.data + ch * it.grads.ld, it.weights.data + ch * it.weights.ld,
                    rows.master + r * L, rows.m + r * L, rows.v + r * L, L, s, c, vec);
      __syncthreads(); // every thread has read counts[r]
      if (threadIdx.x == 0) {
        rows.counts[r] += 1;
      }
      continue;
    }
    const int tx = static_cast<int>(threadIdx.x) % tile;
    const int ty = static_cast<int>(threadIdx.x) / tile;
    const std::int64_t r0 = (b - it.block_begin) * tile;
    const std::int64_t k = rows.count;
    if (ty == 0 && r0 + tx < k) {
      consts[tx] = make_adam_constants(ihp, rows.counts[r0 + tx] + 1);
      chans[tx] = rows.idx[r0 + tx];
    }
    __syncthreads();
    for (std::int64_t i0 = 0; i0 < L; i0 += tile) {
      for (int j = ty; j < tile; j += tile_rows) { // read: threads along channels
        if (r0 + tx < k && i0 + j < L) {
          buf[j][tx] = to_float(it.grads(chans[tx], i0 + j));
        }
      }
      __syncthreads();
      for (int j = ty; j < tile; j += tile_rows) { // update: threads along elements
        const std::int64_t r = r0 + j;
        if (r < k && i0 + tx < L) {
          const std::int64_t o = r * L + i0 + tx;
          buf[tx][j] = adam_update(rows.master[o], rows.m[o], rows.v[o], buf[tx][j], s, consts[j]);
        }
      }
      __syncthreads();
      for (int j = ty; j < tile; j += tile_rows) { // write: threads along channels
        if (r0 + tx < k && i0 + j < L) {
          it.weights(chans[tx], i0 + j) = from_float<T>(buf[j][tx]);
        }
      }
      __syncthreads(); // buf is read again by the next tile
    }
    if (ty == 0 && r0 + tx < k) {
      rows.counts[r0 + tx] += 1; // the constants were read before the first barrier
    }
    __syncthreads(); // consts / chans are rewritten by the next virtual block
  }
}

/// Gather, contiguous source: block = (row r, part of the row).
template <class Tin, class Tout>
ZF_KERNEL void __launch_bounds__(block_threads) gather_rows_kernel(channel_matrix<const Tin> src,
                                                                   const std::int32_t* __restrict__ idx,
                                                                   std::int64_t split,
                                                                   Tout* __restrict__ dst,
                                                                   float* __restrict__ l1,
                                                                   bool vector_ok) {
  const std::int64_t r = blockIdx.x / split;
  const std::int64_t part = blockIdx.x % split;
  const std::int64_t L = src.channel_len;
  const Tin* in = src.data + static_cast<std::int64_t>(idx[r]) * src.ld;
  Tout* out = dst + r * L;
  const std::int64_t begin = part * block_elems;
  const std::int64_t end = begin + block_elems < L ? begin + block_elems : L;
  float partial = 0.0f;
  if (vector_ok) {
    for (std::int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * block_threads) {
      const float4 x = load4(in + i);
      partial += abs_f(x.x) + abs_f(x.y) + abs_f(x.z) + abs_f(x.w);
      store4(out + i, x);
    }
  } else {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += block_threads) {
      const float x = to_float(in[i]);
      partial += abs_f(x);
      out[i] = from_float<Tout>(x);
    }
  }
  if (l1 != nullptr) {
    add_block_l1(partial, l1);
  }
}

/// Scatter, contiguous destination: block = (row r, part of the row).
template <class Tin, class Tout>
ZF_KERNEL void __launch_bounds__(block_threads) scatter_rows_kernel(const Tin* __restrict__ src,
                                                                    const std::int32_t* __restrict__ idx,
                                                                    std::int64_t split,
                                                                    channel_matrix<Tout> dst,
                                                                    bool vector_ok) {
  const std::int64_t r = blockIdx.x / split;
  const std::int64_t part = blockIdx.x % split;
  const std::int64_t L = dst.channel_len;
  const Tin* in = src + r * L;
  Tout* out = dst.data + static_cast<std::int64_t>(idx[r]) * dst.ld;
  const std::int64_t begin = part * block_elems;
  const std::int64_t end = begin + block_elems < L ? begin + block_elems : L;
  if (vector_ok) {
    for (std::int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * block_threads) {
      store4(out + i, load4(in + i));
    }
  } else {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += block_threads) {
      out[i] = from_float<Tout>(to_float(in[i]));
    }
  }
}

/// Gather from a strided matrix: read along channels, write compact rows along elements. Blocks
/// stride over the element tiles (gridDim.y is capped at 65535: any channel_len works).
template <class Tin, class Tout>
ZF_KERNEL void __launch_bounds__(tile* tile_rows) gather_tiles_kernel(channel_matrix<const Tin> src,
                                                                      const std::int32_t* __restrict__ idx,
                                                                      std::int64_t count,
                                                                      Tout* __restrict__ dst,
                                                                      float* __restrict__ l1) {
  ZF_SHARED(buf, float[tile][tile + 1]);
  ZF_SHARED(chans, std::int32_t[tile]);
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const std::int64_t L = src.channel_len;
  if (ty == 0 && r0 + tx < count) {
    chans[tx] = idx[r0 + tx];
  }
  __syncthreads();
  float partial = 0.0f;
  for (std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * tile; i0 < L;
       i0 += static_cast<std::int64_t>(gridDim.y) * tile) { // the same trip count for the whole block
    for (int j = ty; j < tile; j += tile_rows) {
      const std::int64_t i = i0 + j;
      if (r0 + tx < count && i < L) {
        const float x = to_float(src(chans[tx], i));
        partial += abs_f(x);
        buf[j][tx] = x;
      }
    }
    __syncthreads();
    for (int j = ty; j < tile; j += tile_rows) {
      const std::int64_t r = r0 + j;
      const std::int64_t i = i0 + tx;
      if (r < count && i < L) {
        dst[r * L + i] = from_float<Tout>(buf[tx][j]);
      }
    }
    __syncthreads(); // buf is written again by the next tile
  }
  if (l1 != nullptr) {
    using reduce = block_reduce<float, tile, block_reduce_warp_reductions, tile_rows>;
    ZF_SHARED(temp, typename reduce::TempStorage);
    const float sum = reduce(temp).Sum(partial);
    if (tx == 0 && ty == 0) {
      atomicAdd(l1, sum);
    }
  }
}

/// Scatter into a strided matrix: read compact rows along elements, write along channels. Blocks
/// stride over the element tiles, as gather_tiles_kernel.
template <class Tin, class Tout>
ZF_KERNEL void __launch_bounds__(tile* tile_rows) scatter_tiles_kernel(const Tin* __restrict__ src,
                                                                       const std::int32_t* __restrict__ idx,
                                                                       std::int64_t count,
                                                                       channel_matrix<Tout> dst) {
  ZF_SHARED(buf, float[tile][tile + 1]); // [element][channel]
  ZF_SHARED(chans, std::int32_t[tile]);
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const std::int64_t L = dst.channel_len;
  if (ty == 0 && r0 + tx < count) {
    chans[tx] = idx[r0 + tx];
  }
  for (std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * tile; i0 < L;
       i0 += static_cast<std::int64_t>(gridDim.y) * tile) { // the same trip count for the whole block
    for (int j = ty; j < tile; j += tile_rows) {
      const std::int64_t r = r0 + j;
      const std::int64_t i = i0 + tx;
      if (r < count && i < L) {
        buf[tx][j] = to_float(src[r * L + i]);
      }
    }
    __syncthreads();
    for (int j = ty; j < tile; j += tile_rows) {
      const std::int64_t i = i0 + j;
      if (r0 + tx < count && i < L) {
        dst(chans[tx], i) = from_float<Tout>(buf[j][tx]);
      }
    }
    __syncthreads(); // buf is written again by the next tile
  }
}

} // namespace detail::optim

ZF_NAMESPACE_END
