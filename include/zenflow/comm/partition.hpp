/// @file
/// The ZeRO-2 channel partition: which rank owns the host optimizer state of which channels.
///
/// Rule: the channels of every matrix are split into size() contiguous blocks, block r owned by
/// rank r (so blocks appear in rank order inside each matrix). The unit is a whole channel, so
/// no channel ever straddles two owners (DeepSpeed splits a flat buffer by elements, and a column
/// cut by a partition boundary can never be selected). Each rank gets floor(C / N) or
/// ceil(C / N) channels of a C-channel matrix; the C mod N extra channels of a matrix go to the
/// ranks that own the fewest bytes so far (ties: the lower rank), walking the matrices in
/// order. The owned bytes of any two ranks then differ by at most the largest channel's bytes.
///
/// Pure integer arithmetic on the parameter list: every rank computes the same partition.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// One matrix of the parameter list, as the partition sees it.
struct partition_matrix {
  std::int64_t channels = 0;       ///< number of channels (>= 0)
  std::uint64_t channel_bytes = 0; ///< bytes of host state per channel (> 0), e.g. channel_len x 12
};

/// The owner blocks of every matrix; see the file comment for the rule.
class channel_partition {
public:
  channel_partition() = default;
  channel_partition(int ranks, std::vector<std::int64_t> bounds, std::vector<std::uint64_t> rank_bytes)
      : ranks_(ranks), bounds_(std::move(bounds)), rank_bytes_(std::move(rank_bytes)) {}

  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::size_t matrices() const noexcept {
    return ranks_ > 0 ? bounds_.size() / static_cast<std::size_t>(ranks_ + 1) : 0;
  }
  /// First channel of matrix m owned by rank r.
  [[nodiscard]] std::int64_t begin(std::size_t m, int r) const noexcept { return bounds_[index(m, r)]; }
  /// One past the last channel of matrix m owned by rank r.
  [[nodiscard]] std::int64_t end(std::size_t m, int r) const noexcept { return bounds_[index(m, r) + 1]; }
  [[nodiscard]] std::int64_t count(std::size_t m, int r) const noexcept { return end(m, r) - begin(m, r); }
  /// The rank that owns channel c of matrix m (0 <= c < channels).
  [[nodiscard]] int owner(std::size_t m, std::int64_t c) const noexcept {
    const auto first = bounds_.begin() + static_cast<std::ptrdiff_t>(index(m, 0));
    const auto it = std::upper_bound(first, first + ranks_ + 1, c);
    return static_cast<int>(it - first) - 1;
  }
  /// Host-state bytes owned by rank r over the whole list.
  [[nodiscard]] std::uint64_t bytes(int r) const noexcept { return rank_bytes_[static_cast<std::size_t>(r)]; }

private:
  [[nodiscard]] std::size_t index(std::size_t m, int r) const noexcept {
    return m * static_cast<std::size_t>(ranks_ + 1) + static_cast<std::size_t>(r);
  }
  int ranks_ = 0;
  std::vector<std::int64_t> bounds_;      // matrices x (ranks + 1)
  std::vector<std::uint64_t> rank_bytes_; // ranks
};

/// Splits every matrix's channels into `ranks` contiguous owner blocks, balanced by bytes across
/// the whole list (see the file comment).
/// @param matrices the parameter list's matrices, in the engine's order
/// @param ranks    the number of ranks (>= 1)
/// @throws invalid_argument naming the offending argument (nothing is computed)
[[nodiscard]] inline channel_partition partition_channels(std::span<const partition_matrix> matrices,
                                                          int ranks) {
  constexpr const char* fn = "zenflow::partition_channels";
  if (ranks < 1) {
    detail::comm::bad_argument(fn, "ranks", "is " + std::to_string(ranks) + "; it must be at least 1");
  }
  for (std::size_t m = 0; m < matrices.size(); ++m) {
    const std::string arg = "matrices[" + std::to_string(m) + "]";
    if (matrices[m].channels < 0) {
      detail::comm::bad_argument(fn, arg + ".channels", "is negative");
    }
    if (matrices[m].channel_bytes == 0) {
      detail::comm::bad_argument(fn, arg + ".channel_bytes", "is 0");
    }
  }
  const std::size_t n = static_cast<std::size_t>(ranks);
  std::vector<std::int64_t> bounds;
  bounds.reserve(matrices.size() * (n + 1));
  std::vector<std::uint64_t> owned(n, 0);
  std::vector<std::int64_t> take(n);
  std::vector<std::size_t> order(n);
  for (const partition_matrix& mat : matrices) {
    const std::int64_t base = mat.channels / ranks;
    const std::int64_t extra = mat.channels % ranks;
    // The extra channels go to the lightest ranks so far (stable: ties keep the lower rank).
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return owned[a] < owned[b]; });
    std::fill(take.begin(), take.end(), base);
    for (std::int64_t i = 0; i < extra; ++i) {
      take[order[static_cast<std::size_t>(i)]] += 1;
    }
    std::int64_t at = 0;
    for (std::size_t r = 0; r < n; ++r) {
      bounds.push_back(at);
      at += take[r];
      owned[r] += static_cast<std::uint64_t>(take[r]) * mat.channel_bytes;
    }
    bounds.push_back(at);
  }
  return channel_partition(ranks, std::move(bounds), std::move(owned));
}

ZF_NAMESPACE_END
