/// @file
/// The rows of one host-side matrix that this rank keeps on the host (data parallel: its block of
/// the owner partition, docs/data-parallel-design.md; every channel with one rank), and where they sit in
/// the matrix's host set. A value: the host state holds one per parameter, the D2H stream sends
/// its positions, the window job updates and uploads them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

struct row_shard {
  std::int64_t first = 0;    ///< its first channel
  std::int64_t channels = 0; ///< its channel count: the host rows hold channels [first, first + channels)
  /// Its host-set channels are positions [pos, end()) of the host set (blocks are contiguous and
  /// in rank order), `rows` those channels minus `first`.
  std::int64_t pos = 0;
  std::vector<std::int32_t> rows;
  /// The whole matrix's index of the parameter's channel 0: a sharded engine's shard's first
  /// channel (0 otherwise), so that the host moments' stochastic rounding hashes the whole
  /// matrix's element indices (one rank's bits).
  std::int64_t origin = 0;

  [[nodiscard]] std::int64_t end() const noexcept { return pos + static_cast<std::int64_t>(rows.size()); }
  /// True when this rank keeps every channel of a matrix of `total` channels (one rank, a vector).
  [[nodiscard]] bool whole(std::int64_t total) const noexcept { return channels == total; }

  /// The host set became `host_set` (ascending): this shard's positions and rows follow.
  void follow(const std::vector<std::int32_t>& host_set) {
    const auto lo = std::lower_bound(host_set.begin(), host_set.end(), first);
    const auto hi = std::lower_bound(lo, host_set.end(), first + channels);
    pos = lo - host_set.begin();
    rows.resize(static_cast<std::size_t>(hi - lo));
    std::transform(lo, hi, rows.begin(),
                   [&](std::int32_t c) { return static_cast<std::int32_t>(c - first); });
  }
};

} // namespace detail
ZF_NAMESPACE_END
