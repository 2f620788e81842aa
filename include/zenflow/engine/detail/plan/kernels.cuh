/// @file
/// The CUDA backend's kernels of the device plan's small operations (detail/plan/step_kernels.hpp
/// holds their bodies, shared with the host loops): the early-mass adoption, an iota, count moves,
/// device accumulation, a table of items run through a functor (for_each_item), the batched row copies
/// (row_copies.hpp) and the pack fused with its Zen-auto mass. The step's scalars and Zen-auto's masses
/// themselves are the schedule layer's launchers (schedule/step_scalars.cuh, schedule/l1_mass.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/plan/step_kernels.hpp>
#include <zenflow/engine/detail/plan/window_sum.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/schedule/detail/l1_mass_kernels.cuh>

ZF_NAMESPACE_BEGIN
namespace detail::engine_kernels {

template <int = 0>
ZF_KERNEL void adopt_early_mass_kernel(float* early, float* rest, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    adopt_early_mass_at(early, rest, i);
  }
}

/// Device accumulation (window_sum.hpp), grid-stride over the elements.
template <class T>
ZF_KERNEL void __launch_bounds__(256) add_window_sum_kernel(window_sum_args a) {
  const auto stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += stride) {
    window_sum_at<T>(a, i);
  }
}

template <int = 0>
ZF_KERNEL void count_window_step_kernel(const float* record, std::uint32_t* steps) {
  window_sum_count(record, steps);
}

template <int = 0>
ZF_KERNEL void iota_kernel(std::int32_t* out, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    out[i] = static_cast<std::int32_t>(i);
  }
}

template <int = 0>
ZF_KERNEL void move_counts_kernel(count_moves m) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < m.n) {
    move_count_at(m, i);
  }
}

/// f(i) a thread per item i of [0, n): a small per-item body a caller of the backend supplies (a
/// ZF_HOST_DEVICE functor, which host_primitives::for_each_item runs in order).
template <class F>
ZF_KERNEL void for_each_item_kernel(F f, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    f(i);
  }
}

/// Block `b` of a batched row copy's item `it` (row_copies.hpp), its packed rows of type `P`
/// (fp32 or T): a contiguous item one row per block, the block's threads along it; a strided
/// item 32 rows, through a 32 x 32 tile so that the matrix's columns (a warp along the channels)
/// and the packed rows (a warp along the elements) are both accessed by whole warps. Every value
/// goes through float, as in the host twins. `__syncthreads` is reached by every thread: the
/// branch and the loop bounds are the block's.
template <class T, class P>
__device__ void row_copy_block(const row_copy_item& it,
                               std::int64_t b,
                               row_copy_direction dir,
                               float (*tile)[row_copy_tile + 1]) {
  const channel_matrix<T> m{static_cast<T*>(it.matrix), it.channels, it.channel_len, it.ld, it.layout};
  const std::int64_t L = it.channel_len;
  const bool gather = dir == row_copy_direction::gather;
  P* const base = static_cast<P*>(it.packed);
  if (it.layout == channel_layout::contiguous) {
    T* row = m.data + static_cast<std::int64_t>(it.idx[b]) * m.ld;
    P* packed = base == nullptr ? nullptr : base + b * L;
    for (std::int64_t i = threadIdx.x; i < L; i += blockDim.x) {
      if (gather) {
        packed[i] = from_float<P>(to_float(row[i]));
      } else {
        row[i] = from_float<T>(packed != nullptr ? to_float(packed[i]) : 0.0f);
      }
    }
    return;
  }
  const int tx = static_cast<int>(threadIdx.x) % static_cast<int>(row_copy_tile);
  const int ty = static_cast<int>(threadIdx.x) / static_cast<int>(row_copy_tile);
  const int rows_step = static_cast<int>(blockDim.x) / static_cast<int>(row_copy_tile);
  const std::int64_t r0 = b * row_copy_tile;
  const bool mine = r0 + tx < it.count; // this thread's channel, along the matrix's row
  const std::int64_t c = mine ? it.idx[r0 + tx] : 0;
  for (std::int64_t i0 = 0; i0 < L; i0 += row_copy_tile) {
    if (gather) {
      for (int k = ty; k < row_copy_tile; k += rows_step) { // element i0 + k of channel tx
        if (mine && i0 + k < L) {
          tile[k][tx] = to_float(m(c, i0 + k));
        }
      }
      __syncthreads();
      for (int k = ty; k < row_copy_tile; k += rows_step) { // row r0 + k, element i0 + tx
        if (r0 + k < it.count && i0 + tx < L) {
          base[(r0 + k) * L + i0 + tx] = from_float<P>(tile[tx][k]);
        }
      }
    } else {
      for (int k = ty; k < row_copy_tile; k += rows_step) {
        if (r0 + k < it.count && i0 + tx < L) {
          tile[tx][k] = base != nullptr ? to_float(base[(r0 + k) * L + i0 + tx]) : 0.0f;
        }
      }
      __syncthreads();
      for (int k = ty; k < row_copy_tile; k += rows_step) {
        if (mine && i0 + k < L) {
          m(c, i0 + k) = from_float<T>(tile[k][tx]);
        }
      }
    }
    __syncthreads(); // the tile is rewritten by the next chunk
  }
}

/// Item `it`'s block with its packed side as `row_copies.hpp` says: fp32, or the matrix's type.
template <class T>
__device__ void row_copy_block_of(const row_copy_item& it,
                                  std::int64_t b,
                                  row_copy_direction dir,
                                  float (*tile)[row_copy_tile + 1]) {
  if (it.packed_type == it.type) {
    row_copy_block<T, T>(it, b, dir, tile);
  } else {
    row_copy_block<T, float>(it, b, dir, tile);
  }
}

/// A pack (rows of one matrix gathered into its working type) with Zen-auto's mass of those rows,
/// in one launch instead of three (the gather, l1_rows_kernel, and l1_add_rows_kernel's single
/// thread): blocks [0, copy_blocks) copy the rows (row_copy_block), the `mass_blocks` after them
/// compute the rows' sums (l1_rows_block, into a.row_l1), and the mass block that finishes last,
/// told by the ticket `ticket` (zero before the launch, zero again after it), adds them in row
/// order into the mass: l1_add_rows' order and bits. The copy is gather_channels' (every value
/// through float), the rows' sums are the schedule's l1_rows_kernel's: the same bits as
/// device::l1_mass, run to run.
template <class T>
ZF_KERNEL void __launch_bounds__(256) pack_mass_kernel(row_copy_item it,
                                                       std::int64_t copy_blocks,
                                                       l1_mass_item a,
                                                       std::uint32_t* ticket,
                                                       std::int64_t mass_blocks) {
  using schedule_kernels::l1_rows_block;
  using schedule_kernels::l1_rows_per_block;
  ZF_SHARED(tile, float[row_copy_tile][row_copy_tile + 1]);
  ZF_SHARED(lanes, float[l1_rows_per_block][l1_row_lanes]);
  ZF_SHARED(last, bool);
  const std::int64_t b = blockIdx.x;
  if (b < copy_blocks) {
    row_copy_block<T, T>(it, b, row_copy_direction::gather, tile);
    return;
  }
  if (a.skip != nullptr && *a.skip != 0) {
    return; // the same for every block: none takes a ticket
  }
  l1_rows_block(a, b - copy_blocks, lanes);
  __threadfence(); // this block's rows visible to the last block before its ticket is taken
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(ticket, 1u) == static_cast<unsigned>(mass_blocks - 1);
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    // l1_add_rows, its loads past L1 (__ldcg: the rows were written by other blocks).
    float s = 0.0f;
    for (std::int64_t r = 0; r < a.count; ++r) {
      s = add_f(s, __ldcg(a.row_l1 + r));
    }
    *a.l1 = add_f(*a.l1, s);
    *ticket = 0; // for the next pack on this stream
  }
}

/// A batched row copy: grid-stride over the launch's blocks, each finding its item by
/// `block_begin` (item_of_block, as adamw_selective_batched_kernel).
template <int = 0>
ZF_KERNEL void __launch_bounds__(256) row_copy_batched_kernel(const row_copy_item* __restrict__ items,
                                                              int n,
                                                              std::int64_t blocks,
                                                              row_copy_direction dir) {
  ZF_SHARED(tile, float[row_copy_tile][row_copy_tile + 1]);
  for (std::int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const row_copy_item it = items[item_of_block(items, n, b)];
    const std::int64_t local = b - it.block_begin;
    if (it.type == dtype::bf16) {
      row_copy_block_of<bfloat16>(it, local, dir, tile);
    } else if (it.type == dtype::f16) {
      row_copy_block_of<half>(it, local, dir, tile);
    } else {
      row_copy_block_of<float>(it, local, dir, tile);
    }
  }
}

} // namespace detail::engine_kernels
ZF_NAMESPACE_END
