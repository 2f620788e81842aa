/// @file
/// How the host optimizer loops are cut into chunks: sizes only, never the thread count, so that
/// results do not depend on how many threads ran them.
#pragma once

#include <algorithm>
#include <cstdint>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// Elements per chunk of the flat CPU loops (fixed: chunking never depends on the thread count).
/// 32K elements is ~0.9 MB of AdamW traffic: a few microseconds from cache, tens from DRAM, so
/// a chunk outweighs the pool's fork/join; smaller calls stay on the calling thread.
inline constexpr std::int64_t cpu_grain = std::int64_t{1} << 15;

/// Rows per chunk for row-wise loops: about cpu_grain elements.
[[nodiscard]] inline std::int64_t rows_per_chunk(std::int64_t row_len) {
  return std::max<std::int64_t>(1, cpu_grain / std::max<std::int64_t>(row_len, 1));
}

} // namespace detail

ZF_NAMESPACE_END
