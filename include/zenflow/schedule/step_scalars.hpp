/// @file
/// The step's scalars (docs/design.md, "One step", 1): the fp64 squared global norm of a step's
/// gradients from their fp32 channel scores, and from it coef_t (loss-scale unscaling x
/// clipping) and bad_t (a NaN or an Inf anywhere), written into a `step_header` that the
/// optimizer reads through `scalars_of`.
///
/// Three calls, in this order, after `channel_norms_batched<sq_l2>` wrote every tensor's scores
/// and NaN/Inf flag:
/// 1. `sq_norm_totals`: per tensor the fp64 sum of its scores, in a fixed order (256 lanes, then
///    the lanes in order); a score that is not finite (an fp32 sum that overflowed, or a NaN/Inf
///    element) is recomputed from the gradient in fp64, so a finite gradient's norm never
///    overflows;
/// 2. (data parallel only) `sq_norm_rescan`: those recomputations where the rows are, handed to
///    step 1 through `sq_total_item::rescan`;
/// 3. `compute_step_header`: the totals summed in index order, the flags ORed, coef_t and bad_t.
/// The arithmetic is fp64 and correctly rounded on both sides (no contraction, no flush of
/// subnormals whatever the consumer's flags): the device launchers give the host twins' bits.
///
/// This header holds the host twins (namespace `zenflow::host`; `pool`: nullptr runs on the calling
/// thread, the result does not depend on the thread count); the CUDA launchers are in
/// `<zenflow/schedule/step_scalars.cuh>`.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/schedule/detail/checks.hpp>
#include <zenflow/schedule/detail/step_scalars_body.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Host twin of `zenflow::device::sq_norm_totals`: `totals[i]` = the fp64 squared L2 norm of
/// item i's gradient, from its scores (see the file comment).
///
/// @param items   `count` tensors (host memory, as their data)
/// @param count   >= 0
/// @param totals  `count` doubles out
/// @param pool    threads to use (items split over them); nullptr: the calling thread
[[nodiscard]] inline cudaError_t
sq_norm_totals(const sq_total_item* items, std::int64_t count, double* totals, worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::sq_norm_totals";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  ZF_EXPECT_ARG(totals != nullptr || count == 0, fn, "totals", "must not be null");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = detail::check_sq_total_item(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
  }
  detail::host_sq_totals(items, count, totals, pool);
  return cudaSuccess;
}

/// Host twin of `zenflow::device::sq_norm_rescan`: for every item, `out[c]` for c in
/// [first, first + count) = the fp64 squared norm of channel c of `src` where its score is not
/// finite, else 0 (the values `sq_norm_totals` would recompute).
///
/// @param items      `count` items (host memory)
/// @param count      >= 0
/// @param max_count  >= every item's `count` (the device launcher sizes its grid by it)
/// @param pool       threads to use; nullptr: the calling thread
[[nodiscard]] inline cudaError_t sq_norm_rescan(const sq_rescan_item* items,
                                                std::int64_t count,
                                                std::int64_t max_count,
                                                worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::sq_norm_rescan";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  ZF_EXPECT_ARG(max_count >= 0, fn, "max_count", "must be >= 0");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = detail::check_sq_rescan_item(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
    ZF_EXPECT_ARG(items[i].count <= max_count, fn, "max_count", "is smaller than an item's count");
  }
  detail::host_sq_rescan(items, count, pool);
  return cudaSuccess;
}

/// Host twin of `zenflow::device::compute_step_header`: the step's header from the per-tensor
/// squared norms and the NaN/Inf flags.
///
/// - `skip` = 1 when any flag is non-zero, else 0;
/// - `coef` = 1 / loss_scale, times min(1, max_norm / (norm + 1e-6)) where norm =
///   sqrt(sum(totals)) / loss_scale (fp64) when `max_norm` > 0 and the step is not bad;
/// - the squared norm: sum(totals), in index order (fp64).
///
/// @param totals      `tensors` fp64 squared norms (`sq_norm_totals`)
/// @param tensors     >= 0
/// @param flags       `flag_count` NaN/Inf flags (`channel_norm_extras::nonfinite`)
/// @param flag_count  >= 0
/// @param loss_scale  the static loss scale the gradients carry, finite and > 0 (1: none)
/// @param max_norm    clip the unscaled global norm to this, finite and >= 0 (0: no clipping)
/// @param header      the header out
/// @param zero        nullable: `zero_count` floats zeroed in the same call (the step's mass
///                    accumulators, which the L1 masses add into: one launch fewer on the device)
/// @param zero_count  >= 0
/// @param pool        unused (one tensor's worth of work); kept for the launcher shape
/// @param io          nullable loss scale and found-inf where the step runs (step_scale_io)
[[nodiscard]] inline cudaError_t compute_step_header(const double* totals,
                                                     std::int64_t tensors,
                                                     const std::uint32_t* flags,
                                                     std::int64_t flag_count,
                                                     float loss_scale,
                                                     float max_norm,
                                                     step_header* header,
                                                     float* zero = nullptr,
                                                     std::int64_t zero_count = 0,
                                                     worker_pool* pool = nullptr,
                                                     step_scale_io io = {}) {
  constexpr const char* fn = "zenflow::host::compute_step_header";
  (void)pool;
  const detail::step_header_args a{totals,   tensors, flags, flag_count, loss_scale,
                                   max_norm, header,  zero,  zero_count, io};
  if (const cudaError_t e = detail::check_step_header_args(fn, a); e != cudaSuccess) {
    return e;
  }
  detail::host_step_header(a);
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
