/// @file
/// Channel copies on the device: gather (pack the listed channels of a matrix into compact rows)
/// and scatter (the reverse), the launchers of ZenFlow's gradient packing, state migration and
/// weight upload. Host twins with the same arguments are in `<zenflow/optim/channels.hpp>`.
///
/// Every launcher validates its arguments before launching (cudaErrorInvalidValue, message in
/// zenflow::last_error_message(), nothing written) and is stream-ordered (no synchronisation, no
/// allocation, safe under CUDA graph capture).
#pragma once

#include <cstdint>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/optim/detail/adamw_dispatch.cuh>
#include <zenflow/optim/detail/checks.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// Packs the `count` channels `d_idx` of `src` into compact rows `d_dst` (count x channel_len,
/// row r = channel d_idx[r]), converting Tin -> Tout (RNE when narrowing). Packs the unselected
/// gradients for the device-to-host copy, and moves state rows when the selection changes.
/// @param d_l1_mass nullable: sum of |src| over the packed channels ADDED to it (Zen-auto's
///                  "rest"; float atomics, last bits may vary by run).
template <class Tin, class Tout>
[[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                          const std::int32_t* d_idx,
                                          std::int64_t count,
                                          Tout* d_dst,
                                          float* d_l1_mass,
                                          cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::gather_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "d_", "src", src, d_idx, count, d_dst, "dst");
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = src.channel_len;
  if (src.layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(count * row_split(L) <= max_blocks_per_launch, fn, "count",
                  "times channel_len is too large");
  }
  return detail::optim::dispatch_gather_channels(src, d_idx, count, d_dst, d_l1_mass, stream);
}

/// Unpacks compact rows `d_src` (count x channel_len, row r = channel d_idx[r]) into the channels
/// `d_idx` of `dst`, converting Tin -> Tout (RNE when narrowing): applies an uploaded block of
/// new weights to the unselected channels, or puts state rows back. `d_src` must not overlap dst.
template <class Tin, class Tout>
[[nodiscard]] cudaError_t scatter_channels(const Tin* d_src,
                                           const std::int32_t* d_idx,
                                           std::int64_t count,
                                           channel_matrix<Tout> dst,
                                           cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::scatter_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "d_", "dst", dst, d_idx, count, d_src, "src");
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = dst.channel_len;
  if (dst.layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(count * row_split(L) <= max_blocks_per_launch, fn, "count",
                  "times channel_len is too large");
  }
  return detail::optim::dispatch_scatter_channels(d_src, d_idx, count, dst, stream);
}

} // namespace device

ZF_NAMESPACE_END
