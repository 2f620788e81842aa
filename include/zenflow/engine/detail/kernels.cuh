/// @file
/// The CUDA backend's launches of the device plan's small operations (detail/step_kernels.hpp
/// holds their bodies, shared with the host loops): the per-tensor fp64 squared-norm totals, the
/// step scalars, the early-mass adoption, an iota and count moves.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/l1_mass.hpp>
#include <zenflow/engine/detail/step_kernels.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::engine_kernels {

/// One block of sq_total_lanes threads per tensor: lane j sums its channels in fp64
/// (`sq_total_lane`, which rescans an overflowed channel), then thread 0 adds the lanes in order:
/// the host loop's arithmetic and order, no atomics.
ZF_KERNEL void __launch_bounds__(sq_total_lanes)
    sq_totals_kernel(const sq_total_item* items, double* totals) {
  __shared__ double lanes[sq_total_lanes];
  const int lane = static_cast<int>(threadIdx.x);
  lanes[lane] = sq_total_item_lane(items[blockIdx.x], lane);
  __syncthreads();
  if (lane == 0) {
    totals[blockIdx.x] = sum_lanes(lanes);
  }
}

/// The rescans of a table of items (device memory): blockIdx.y the item, one thread per channel.
ZF_KERNEL void sq_rescan_kernel(const sq_rescan_item* items) {
  const sq_rescan_item& it = items[blockIdx.y];
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < it.count) {
    sq_rescan_at(it, i);
  }
}

/// One block: the record's header (thread 0, `finish_step_header`) and its crit masses zeroed.
ZF_KERNEL void finish_scalars_kernel(step_scalars_args a) {
  if (threadIdx.x == 0) {
    finish_step_header(a);
  }
  for (int i = static_cast<int>(threadIdx.x); i < a.crit_words; i += static_cast<int>(blockDim.x)) {
    a.record[step_record_layout::header_words + i] = 0.0f;
  }
}

ZF_KERNEL void adopt_early_mass_kernel(float* early, float* rest, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    adopt_early_mass_at(early, rest, i);
  }
}

ZF_KERNEL void iota_kernel(std::int32_t* out, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    out[i] = static_cast<std::int32_t>(i);
  }
}

ZF_KERNEL void move_counts_kernel(count_moves m) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < m.n) {
    move_count_at(m, i);
  }
}

/// Zen-auto's mass, rows apart (detail/l1_mass.hpp): 16 rows per block, 16 threads per row in
/// the 16-lane order (a warp reads two rows' 16 consecutive elements at a time), or one thread
/// per row in the sequential order. Each row's sum goes to `a.row_l1`; no atomics.
inline constexpr int l1_rows_per_block = 256 / l1_row_lanes;

/// The rows of call `a` that block `block` takes (l1_rows_kernel's body, also batched).
__device__ ZF_FORCEINLINE void
l1_rows_block(const l1_mass_args& a, std::int64_t block, float (*lanes)[l1_row_lanes]) {
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

ZF_KERNEL void __launch_bounds__(256) l1_rows_kernel(l1_mass_args a) {
  __shared__ float lanes[l1_rows_per_block][l1_row_lanes];
  l1_rows_block(a, blockIdx.x, lanes);
}

/// l1_rows_kernel over a table of calls (device memory): blockIdx.y is the call, blockIdx.x its
/// block (blocks past a call's rows do nothing).
ZF_KERNEL void __launch_bounds__(256) l1_rows_batched_kernel(const l1_mass_args* calls) {
  __shared__ float lanes[l1_rows_per_block][l1_row_lanes];
  const l1_mass_args a = calls[blockIdx.y];
  if (a.l1 != nullptr) {
    l1_rows_block(a, blockIdx.x, lanes);
  }
}

/// One thread per call: its rows in order, that sum into its mass (l1_add_rows_kernel's order).
ZF_KERNEL void l1_add_rows_batched_kernel(const l1_mass_args* calls, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) {
    return;
  }
  const l1_mass_args& a = calls[i];
  if (a.l1 == nullptr || a.count == 0 || (a.skip != nullptr && *a.skip != 0)) {
    return;
  }
  l1_add_rows(a);
}

/// One thread: the rows in order, that sum into the mass (the host twins' order).
ZF_KERNEL void l1_add_rows_kernel(l1_mass_args a) {
  if ((a.skip != nullptr && *a.skip != 0) || threadIdx.x != 0) {
    return;
  }
  l1_add_rows(a);
}

} // namespace detail::engine_kernels
ZF_NAMESPACE_END
