/// @file
/// The CUDA backend's own small kernels: the per-tensor fp64 squared-norm totals and the per-step
/// scalars (coef_t, bad_t) from them and the NaN/Inf flags, an iota, and moves of int32 update counts between
/// index lists. Everything heavy is a primitive (select/, optim/).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/detail/step_record.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::engine_kernels {

/// One tensor of the squared-norm totals: its gradient (working type `type`) and its fp32 scores.
struct sq_total_item {
  const void* grad = nullptr;
  const float* scores = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  dtype type = dtype::f32;
};

/// One block of sq_total_lanes threads per tensor: lane j sums its channels in fp64
/// (`sq_total_lane`, which rescans an overflowed channel), then thread 0 adds the lanes in order:
/// the host backend's arithmetic and order, no atomics.
ZF_KERNEL void __launch_bounds__(sq_total_lanes)
    sq_totals_kernel(const sq_total_item* items, double* totals) {
  __shared__ double lanes[sq_total_lanes];
  const sq_total_item it = items[blockIdx.x];
  const int lane = static_cast<int>(threadIdx.x);
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const channel_matrix<const T> g{static_cast<const T*>(it.grad), it.channels, it.channel_len, it.ld,
                                    it.layout};
    lanes[lane] = sq_total_lane<T>(g, it.scores, lane);
  };
  if (it.type == dtype::f16) {
    run(half{});
  } else if (it.type == dtype::bf16) {
    run(bfloat16{});
  } else {
    run(float{});
  }
  __syncthreads();
  if (lane == 0) {
    totals[blockIdx.x] = sum_lanes(lanes);
  }
}

/// One block: sums `n` fp64 totals in index order (deterministic), ORs the `flag_count` flags,
/// writes coef/skip/sum into the record and zeroes its Zen-auto masses.
ZF_KERNEL void finish_scalars_kernel(const double* totals,
                                     int n,
                                     const std::uint32_t* flags,
                                     int flag_count,
                                     float loss_scale,
                                     float max_norm,
                                     float* record,
                                     int mass_words) {
  if (threadIdx.x == 0) {
    double sum = 0.0;
    std::uint32_t bad = 0;
    for (int i = 0; i < n; ++i) {
      sum += totals[i];
    }
    for (int i = 0; i < flag_count; ++i) {
      bad |= flags[i];
    }
    float coef = 1.0f;
    std::uint32_t skip = 0;
    finish_step_scalars(sum, bad, loss_scale, max_norm, &coef, &skip);
    write_step_header(record, coef, skip, sum);
  }
  for (int i = static_cast<int>(threadIdx.x); i < mass_words; i += static_cast<int>(blockDim.x)) {
    record[step_record_layout::header_words + i] = 0.0f;
  }
}

/// After finish_scalars_kernel zeroed the record's masses: rest[i] += early[i] (0 + early: the same
/// bits as packs adding into the record), early[i] = 0 for the next step's early packs.
ZF_KERNEL void adopt_early_mass_kernel(float* early, float* rest, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    rest[i] += early[i];
    early[i] = 0.0f;
  }
}

ZF_KERNEL void iota_kernel(std::int32_t* out, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    out[i] = static_cast<std::int32_t>(i);
  }
}

/// dst[dst_idx[i]] = src[src_idx[i]] (either index list nullable: identity).
ZF_KERNEL void move_counts_kernel(const std::int32_t* src,
                                  const std::int32_t* src_idx,
                                  std::int32_t* dst,
                                  const std::int32_t* dst_idx,
                                  std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    dst[dst_idx != nullptr ? dst_idx[i] : i] = src[src_idx != nullptr ? src_idx[i] : i];
  }
}

} // namespace detail::engine_kernels
ZF_NAMESPACE_END
