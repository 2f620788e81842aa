/// @file
/// The CUDA backend's own small kernels: the per-step scalars (coef_t, bad_t) from the norms'
/// totals and flags, an iota, and moves of int32 update counts between index lists. Everything
/// heavy is a primitive (select/, optim/).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/step_record.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::engine_kernels {

/// One block: sums `n` totals in index order (deterministic), ORs the flags, writes coef/skip/sum
/// into the record and zeroes its Zen-auto masses.
ZF_KERNEL void finish_scalars_kernel(const float* totals,
                                     const std::uint32_t* flags,
                                     int n,
                                     float loss_scale,
                                     float max_norm,
                                     float* record,
                                     int mass_words) {
  if (threadIdx.x == 0) {
    double sum = 0.0;
    std::uint32_t bad = 0;
    for (int i = 0; i < n; ++i) {
      sum += static_cast<double>(totals[i]);
      bad |= flags[i];
    }
    float coef = 1.0f;
    std::uint32_t skip = 0;
    finish_step_scalars(static_cast<float>(sum), bad, loss_scale, max_norm, &coef, &skip);
    record[0] = coef;
    reinterpret_cast<std::uint32_t*>(record)[1] = skip;
    record[2] = static_cast<float>(sum);
    record[3] = 0.0f;
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
