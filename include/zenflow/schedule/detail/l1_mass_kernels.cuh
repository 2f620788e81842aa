/// @file
/// Zen-auto's L1 masses on the device (l1_mass_body.hpp holds the bodies, shared with the host
/// twins): each row's sum apart, then the rows added in order by one thread; no atomics, so the
/// masses have the host twins' bits run to run.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/schedule/detail/l1_mass_body.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::schedule_kernels {

/// 16 rows per block, 16 threads per row in the 16-lane order (a warp reads two rows' 16
/// consecutive elements at a time), or one thread per row in the sequential order. Each row's sum
/// goes to `a.row_l1`.
inline constexpr int l1_rows_per_block = 256 / l1_row_lanes;

/// The rows of call `a` that block `block` takes (l1_rows_kernel's body, also batched, and the
/// engine's pack_mass_kernel's).
__device__ ZF_FORCEINLINE void
l1_rows_block(const l1_mass_item& a, std::int64_t block, float (*lanes)[l1_row_lanes]) {
  if (a.skip != nullptr && *a.skip != 0) {
    return;
  }
  const int sub = static_cast<int>(threadIdx.x) / l1_row_lanes;
  const int lane = static_cast<int>(threadIdx.x) % l1_row_lanes;
  if (!a.lanes) {
    const std::int64_t r = block * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    if (r < a.count) {
      a.row_l1[r] = with_grad_matrix<l1_sequential_op>(a, static_cast<std::int64_t>(a.idx[r]));
    }
    return;
  }
  const std::int64_t r = block * static_cast<std::int64_t>(l1_rows_per_block) + sub;
  if (r < a.count) {
    lanes[sub][lane] = with_grad_matrix<l1_lane_op>(a, static_cast<std::int64_t>(a.idx[r]), lane);
  }
  __syncthreads();
  if (r < a.count && lane == 0) {
    a.row_l1[r] = with_grad_matrix<l1_finish_op>(a, static_cast<std::int64_t>(a.idx[r]),
                                                 static_cast<const float*>(lanes[sub]));
  }
}

template <int = 0>
ZF_KERNEL void __launch_bounds__(256) l1_rows_kernel(l1_mass_item a) {
  ZF_SHARED(lanes, float[l1_rows_per_block][l1_row_lanes]);
  l1_rows_block(a, blockIdx.x, lanes);
}

/// l1_rows_kernel over a table of `n` calls (device memory): blockIdx.y is the call (strided by
/// gridDim.y: a grid has at most 65535 rows), blockIdx.x its block (blocks past a call's rows do
/// nothing). The loop's bounds are the block's, so every thread reaches the barrier.
template <int = 0>
ZF_KERNEL void __launch_bounds__(256) l1_rows_batched_kernel(const l1_mass_item* calls, int n) {
  ZF_SHARED(lanes, float[l1_rows_per_block][l1_row_lanes]);
  for (int y = static_cast<int>(blockIdx.y); y < n; y += static_cast<int>(gridDim.y)) {
    const l1_mass_item a = calls[y];
    if (a.l1 != nullptr) {
      l1_rows_block(a, blockIdx.x, lanes);
    }
    __syncthreads(); // `lanes` is rewritten by the next call
  }
}

/// One thread per call: its rows in order, that sum into its mass (l1_add_rows_kernel's order).
template <int = 0>
ZF_KERNEL void l1_add_rows_batched_kernel(const l1_mass_item* calls, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) {
    return;
  }
  const l1_mass_item& a = calls[i];
  if (a.l1 == nullptr || a.count == 0 || (a.skip != nullptr && *a.skip != 0)) {
    return;
  }
  l1_add_rows(a);
}

/// One thread: the rows in order, that sum into the mass (the host twins' order).
template <int = 0>
ZF_KERNEL void l1_add_rows_kernel(l1_mass_item a) {
  if ((a.skip != nullptr && *a.skip != 0) || threadIdx.x != 0) {
    return;
  }
  l1_add_rows(a);
}

/// Blocks of a call of `count` rows (`lanes`: 16 rows a block, else 256).
inline std::int64_t l1_rows_blocks(std::int64_t count, bool lanes) {
  const std::int64_t per_block = lanes ? l1_rows_per_block : 256;
  return (count + per_block - 1) / per_block;
}

inline cudaError_t launch_l1_mass(const l1_mass_item& a, cudaStream_t s) {
  if (a.l1 == nullptr || a.count == 0) {
    return cudaSuccess;
  }
  ZF_LAUNCH(static_cast<unsigned>(l1_rows_blocks(a.count, a.lanes)), 256, 0, s, l1_rows_kernel)(a);
  if (const cudaError_t e = launch_status(); e != cudaSuccess) {
    return e;
  }
  ZF_LAUNCH(1, 32, 0, s, l1_add_rows_kernel)(a);
  return launch_status();
}

inline cudaError_t launch_l1_add_rows_batched(const l1_mass_item* calls, std::int64_t n, cudaStream_t s) {
  if (n > 0) {
    ZF_LAUNCH(static_cast<unsigned>((n + 31) / 32), 32, 0, s, l1_add_rows_batched_kernel)
    (calls, static_cast<int>(n));
  }
  return launch_status();
}

/// Every row of every call (the grid sized for `max_rows` rows in the 16-lane order, the widest),
/// then each call's rows in order into its mass.
inline cudaError_t
launch_l1_mass_batched(const l1_mass_item* calls, std::int64_t n, std::int64_t max_rows, cudaStream_t s) {
  if (n == 0 || max_rows == 0) {
    return cudaSuccess;
  }
  const dim3 grid(static_cast<unsigned>(l1_rows_blocks(max_rows, true)),
                  static_cast<unsigned>(std::min<std::int64_t>(n, 65535)));
  ZF_LAUNCH(grid, 256, 0, s, l1_rows_batched_kernel)(calls, static_cast<int>(n));
  if (const cudaError_t e = launch_status(); e != cudaSuccess) {
    return e;
  }
  return launch_l1_add_rows_batched(calls, n, s);
}

} // namespace detail::schedule_kernels
ZF_NAMESPACE_END
