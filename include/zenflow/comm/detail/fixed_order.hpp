/// @file
/// The deterministic reduction of the host communicators: every rank holds the same gathered
/// blocks (rank-major: rank 0's n values, then rank 1's, ...) and folds them in rank order, in
/// float64, rounding once at the end. Same inputs, same code, same order: the same bits on every
/// rank and in every run, whatever the transport's own reduction order would have been.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

/// out[i] = T(sum over r = 0..ranks-1, in that order, of double(gathered[r * n + i])), divided by
/// `ranks` (in float64, before the one rounding) when `mean` is set.
template <class T>
void fold_rank_order(const T* gathered, std::size_t n, int ranks, bool mean, T* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    double acc = 0.0;
    for (int r = 0; r < ranks; ++r) {
      acc += static_cast<double>(gathered[static_cast<std::size_t>(r) * n + i]);
    }
    if (mean) {
      acc /= static_cast<double>(ranks);
    }
    out[i] = static_cast<T>(acc);
  }
}

/// out[i] = max or bitwise or over the ranks (exact: the order does not matter).
inline void
fold_u32(const std::uint32_t* gathered, std::size_t n, int ranks, bool use_or, std::uint32_t* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t acc = gathered[i];
    for (int r = 1; r < ranks; ++r) {
      const std::uint32_t v = gathered[static_cast<std::size_t>(r) * n + i];
      acc = use_or ? (acc | v) : (v > acc ? v : acc);
    }
    out[i] = acc;
  }
}

} // namespace detail::comm

ZF_NAMESPACE_END
