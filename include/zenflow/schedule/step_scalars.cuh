/// @file
/// CUDA launchers of the step's scalars (namespace `zenflow::device`; the host twins and the
/// description are in `<zenflow/schedule/step_scalars.hpp>`, the kernels in
/// `detail/step_scalars_kernels.cuh`).
///
/// Arguments are validated before anything is launched; the items live in device memory and are
/// not read by the host (what the host can see is checked: counts, the tables' pointers, the
/// scalars). Everything is stream-ordered on `stream`: no allocation, no synchronisation, safe
/// under CUDA graph capture. Deterministic and bit-identical to the host twins: one block per
/// tensor sums its lanes in the host loop's order, no atomics.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/schedule/detail/checks.hpp>
#include <zenflow/schedule/detail/step_scalars_kernels.cuh>
#include <zenflow/schedule/step_scalars.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// `totals[i]` = the fp64 squared L2 norm of item i's gradient, from its scores (see
/// `<zenflow/schedule/step_scalars.hpp>`).
///
/// @param d_items  `count` items: a device array of descriptors of device memory
/// @param count    in [0, 2^31)
/// @param totals   `count` doubles out (device)
/// @param stream   stream everything is ordered on
/// Aliasing: `totals` must not overlap the items, scores, gradients or rescans.
[[nodiscard]] inline cudaError_t sq_norm_totals(const sq_total_item* d_items,
                                                std::int64_t count,
                                                double* totals,
                                                cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::sq_norm_totals";
  ZF_EXPECT_ARG(count >= 0 && count < (std::int64_t{1} << 31), fn, "count", "must be in [0, 2^31)");
  ZF_EXPECT_ARG(d_items != nullptr || count == 0, fn, "d_items", "must not be null");
  ZF_EXPECT_ARG(totals != nullptr || count == 0, fn, "totals", "must not be null");
  return detail::schedule_kernels::launch_sq_totals(d_items, count, totals, stream);
}

/// For every item, `out[c]` for c in [first, first + count) = the fp64 squared norm of channel c
/// of `src` where its score is not finite, else 0.
///
/// @param d_items    `count` items: a device array (unchecked: device memory)
/// @param count      in [0, 2^31)
/// @param max_count  >= every item's `count` (sizes the grid)
/// @param stream     stream everything is ordered on
/// Aliasing: the items' `out` ranges must not overlap each other or the gradients.
[[nodiscard]] inline cudaError_t sq_norm_rescan(const sq_rescan_item* d_items,
                                                std::int64_t count,
                                                std::int64_t max_count,
                                                cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::sq_norm_rescan";
  ZF_EXPECT_ARG(count >= 0 && count < (std::int64_t{1} << 31), fn, "count", "must be in [0, 2^31)");
  ZF_EXPECT_ARG(d_items != nullptr || count == 0, fn, "d_items", "must not be null");
  ZF_EXPECT_ARG(max_count >= 0, fn, "max_count", "must be >= 0");
  return detail::schedule_kernels::launch_sq_rescan(d_items, count, max_count, stream);
}

/// The step's header from the per-tensor squared norms and the NaN/Inf flags, `zero_count` floats
/// at `zero` zeroed in the same launch (see the host twin for the arithmetic). One block.
///
/// @param totals      `tensors` fp64 squared norms (device)
/// @param tensors     >= 0
/// @param flags       `flag_count` NaN/Inf flags (device)
/// @param flag_count  >= 0
/// @param loss_scale  finite, > 0
/// @param max_norm    finite, >= 0 (0: no clipping)
/// @param header      the header out (device)
/// @param zero        nullable: `zero_count` floats (device) zeroed, not overlapping `header`
/// @param zero_count  >= 0
/// @param stream      stream everything is ordered on
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
                                                     cudaStream_t stream = nullptr,
                                                     step_scale_io io = {}) {
  constexpr const char* fn = "zenflow::device::compute_step_header";
  const detail::step_header_args a{totals,   tensors, flags, flag_count, loss_scale,
                                   max_norm, header,  zero,  zero_count, io};
  if (const cudaError_t e = detail::check_step_header_args(fn, a); e != cudaSuccess) {
    return e;
  }
  return detail::schedule_kernels::launch_step_header(a, stream);
}

} // namespace device

ZF_NAMESPACE_END
