/// @file
/// The order in which a channel's score adds its terms, one definition for the kernels and the
/// host loops, so that the CUDA and host backends give the same bits (and the engine's selection,
/// which ranks these scores, the same channels):
///
/// - contiguous channel: `norm_lanes` (64) fp32 partial sums, element i going to lane i % 64 in
///   order; then the lanes folded pairwise (lane l += lane l + s for s = 32, 16, ..., 1). The
///   device runs one warp per channel, thread t holding lanes t and t + 32; the host holds the
///   lanes in SIMD registers.
/// - strided channel (a column of a row-major matrix): the rows cut into chunks of
///   `strided_rows_per_chunk` rows (a function of the shape only); in a chunk, row lane y
///   (0..7) adds rows r0 + y, r0 + y + 8, ... in order; the chunk's sum is lane 0 + ... + lane 7;
///   the score is the chunks' sums in chunk order. The device spreads chunks over blocks (so a
///   tall matrix fills the device), the host walks them in order.
/// - every term rounded before it is added (no contraction into an fma), subnormals kept.
#pragma once

#include <algorithm>
#include <cstdint>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int norm_lanes = 64;
inline constexpr int strided_row_lanes = 8;

/// Elements per 16-byte load.
template <class T>
inline constexpr int vec_elems = 16 / static_cast<int>(sizeof(T));

/// Rows per chunk of a strided item of `channels` columns and `channel_len` rows (0 when either
/// is 0): enough chunks that one item fills an H200 (about 1000 resident blocks of 256 threads,
/// each 32 x vec_elems columns wide), none shorter than 32 rows.
template <class T>
[[nodiscard]] constexpr std::int64_t strided_rows_per_chunk(std::int64_t channels, std::int64_t channel_len) {
  if (channels <= 0 || channel_len <= 0) {
    return 0;
  }
  constexpr std::int64_t target_blocks = 1024;
  constexpr std::int64_t min_rows = 32;
  const std::int64_t per_block = 32 * static_cast<std::int64_t>(vec_elems<T>);
  const std::int64_t col_blocks = (channels + per_block - 1) / per_block;
  std::int64_t chunks = std::max<std::int64_t>(1, target_blocks / col_blocks);
  chunks = std::min(chunks, (channel_len + min_rows - 1) / min_rows);
  return (channel_len + chunks - 1) / chunks;
}

} // namespace detail
ZF_NAMESPACE_END
