/// @file
/// Channel copies on the host: gather (pack the listed channels of a matrix into compact rows),
/// scatter (the reverse) and accumulate (add compact rows into a full-size fp32 accumulator).
/// ZenFlow moves the unselected channels with these: it packs their gradients for the
/// device-to-host copy, moves optimizer-state rows when the selection changes, applies uploaded
/// weights, and sums each step's packed gradients into the host window's accumulator.
///
/// gather/scatter are the host twins of the launchers in `<zenflow/optim/channels.cuh>`: same
/// arguments and validation, with a `worker_pool*` (nullptr = the calling thread) instead of a
/// stream and host pointers (named without `d_`) where the launcher takes device pointers. They
/// also check that every channel index is in [0, channels) (a launcher cannot read device memory
/// before launching). They live in optim/, not transport/: they compute (precision conversion
/// with the optimizer's rounding, Zen-auto's L1 mass) on one side of the bus; transport only
/// moves bytes across it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/detail/channels_host.hpp>
#include <zenflow/optim/detail/checks.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Packs the `count` channels `idx` of `src` into compact rows of `dst` (row r = channel
/// idx[r], count x channel_len), converting Tin -> Tout (RNE when narrowing). Used to pack the
/// unselected gradients for the device-to-host copy and to move state rows when the selection
/// changes. `l1_mass` (nullable): sum of |src| over the packed channels is ADDED to it
/// (Zen-auto's "rest"; fixed summation order).
template <class Tin, class Tout>
[[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                          const std::int32_t* idx,
                                          std::int64_t count,
                                          Tout* dst,
                                          float* l1_mass,
                                          worker_pool* pool) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::gather_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "", "src", src, idx, count, dst, "dst");
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, idx, count, src.channels); e != cudaSuccess) {
    return e;
  }
  return detail::host_gather_channels(src, idx, count, dst, l1_mass, pool);
}

/// Unpacks compact rows `src` (count x channel_len, row r = channel idx[r]) into the
/// channels `idx` of `dst`, converting Tin -> Tout (RNE when narrowing). Used to apply an
/// uploaded block of new weights to the unselected channels, and to put state rows back.
template <class Tin, class Tout>
[[nodiscard]] cudaError_t scatter_channels(const Tin* src,
                                           const std::int32_t* idx,
                                           std::int64_t count,
                                           channel_matrix<Tout> dst,
                                           worker_pool* pool) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::scatter_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "", "dst", dst, idx, count, src, "src");
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, idx, count, dst.channels); e != cudaSuccess) {
    return e;
  }
  return detail::host_scatter_channels(src, idx, count, dst, pool);
}

/// acc[idx[r]] += coef * slot[r] for the `count` listed channels.
///
/// @param acc   fp32 accumulator, `channels x channel_len`, row c = channel c.
/// @param slot  packed rows, `count x channel_len`, working precision (row r = channel idx[r]).
/// @param idx   channel indices (distinct, in [0, channels); sorted is the fast order).
/// @param coef  the step's gradient coefficient (loss-scale unscaling x clipping).
/// @param mode  `assign` writes acc[idx[r]] = coef * slot[r] instead (the first step of a window).
/// Rows are independent, so the result does not depend on threads or chunking.
template <class S>
[[nodiscard]] cudaError_t accumulate_channels(float* acc,
                                              std::int64_t channels,
                                              std::int64_t channel_len,
                                              const S* slot,
                                              const std::int32_t* idx,
                                              std::int64_t count,
                                              float coef,
                                              worker_pool* pool,
                                              accumulate_mode mode = accumulate_mode::add) {
  static_assert(is_working_type_v<S>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::accumulate_channels";
  ZF_EXPECT_ARG(channels >= 0, fn, "channels", "must be >= 0");
  ZF_EXPECT_ARG(channel_len >= 0, fn, "channel_len", "must be >= 0");
  ZF_EXPECT_ARG(count >= 0 && count <= channels, fn, "count", "must be in [0, channels]");
  ZF_EXPECT_ARG(acc != nullptr || channels == 0 || channel_len == 0, fn, "acc", "must not be null");
  ZF_EXPECT_ARG(slot != nullptr || count == 0 || channel_len == 0, fn, "slot", "must not be null");
  ZF_EXPECT_ARG(idx != nullptr || count == 0, fn, "idx", "must not be null");
  ZF_EXPECT_ARG(std::isfinite(coef), fn, "coef", "must be finite");
  if (const cudaError_t e = detail::check_indices_host(fn, idx, count, channels); e != cudaSuccess) {
    return e;
  }
  return detail::host_accumulate_channels(acc, channel_len, slot, idx, count, coef, pool, mode);
}

} // namespace host

ZF_NAMESPACE_END
