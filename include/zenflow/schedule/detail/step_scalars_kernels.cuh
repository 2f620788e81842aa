/// @file
/// The step scalars' kernels and their launches (step_scalars_body.hpp holds their bodies, shared
/// with the host twins): the per-tensor fp64 squared-norm totals, the rescans of the channels whose
/// score is not finite, and the header.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/schedule/detail/step_scalars_body.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::schedule_kernels {

/// One block of sq_total_lanes threads per tensor: lane j sums its channels in fp64
/// (`sq_total_lane`, which rescans an overflowed channel), then thread 0 adds the lanes in order:
/// the host loop's arithmetic and order, no atomics.
template <int = 0>
ZF_KERNEL void __launch_bounds__(sq_total_lanes)
    sq_totals_kernel(const sq_total_item* items, double* totals) {
  ZF_SHARED(lanes, double[sq_total_lanes]);
  const int lane = static_cast<int>(threadIdx.x);
  lanes[lane] = sq_total_item_lane(items[blockIdx.x], lane);
  __syncthreads();
  if (lane == 0) {
    totals[blockIdx.x] = sum_lanes(lanes);
  }
}

/// The rescans of a table of `n` items (device memory): blockIdx.y the item (strided by gridDim.y:
/// a grid has at most 65535 rows), one thread per channel.
template <int = 0>
ZF_KERNEL void sq_rescan_kernel(const sq_rescan_item* items, int n) {
  for (int y = static_cast<int>(blockIdx.y); y < n; y += static_cast<int>(gridDim.y)) {
    const sq_rescan_item& it = items[y];
    const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    if (i < it.count) {
      sq_rescan_at(it, i);
    }
  }
}

/// One block: the header (thread 0, `finish_step_header`) and the floats to zero.
template <int = 0>
ZF_KERNEL void step_header_kernel(step_header_args a) {
  if (threadIdx.x == 0) {
    finish_step_header(a);
  }
  for (std::int64_t i = threadIdx.x; i < a.zero_count; i += blockDim.x) {
    a.zero[i] = 0.0f;
  }
}

/// A grid's rows for a table of `n` items: at most 65535 (CUDA's limit on gridDim.y); the kernels
/// stride over the rest.
inline unsigned grid_rows(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>(n, 65535));
}

inline cudaError_t
launch_sq_totals(const sq_total_item* items, std::int64_t n, double* totals, cudaStream_t s) {
  if (n > 0) { // one block per tensor (n < 2^31: the launcher checked)
    ZF_LAUNCH(static_cast<unsigned>(n), sq_total_lanes, 0, s, sq_totals_kernel)(items, totals);
  }
  return launch_status();
}

inline cudaError_t
launch_sq_rescan(const sq_rescan_item* items, std::int64_t n, std::int64_t max_count, cudaStream_t s) {
  if (n > 0 && max_count > 0) {
    ZF_LAUNCH(dim3(static_cast<unsigned>((max_count + 255) / 256), grid_rows(n)), 256, 0, s, sq_rescan_kernel)
    (items, static_cast<int>(n));
  }
  return launch_status();
}

inline cudaError_t launch_step_header(const step_header_args& a, cudaStream_t s) {
  ZF_LAUNCH(1, 128, 0, s, step_header_kernel)(a);
  return launch_status();
}

} // namespace detail::schedule_kernels
ZF_NAMESPACE_END
