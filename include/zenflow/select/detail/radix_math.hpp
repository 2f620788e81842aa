/// @file
/// The order that top-k selects in, and the radix-selection arithmetic shared by the kernels and
/// the host backend.
///
/// Every score maps to a 64-bit *composite key*: the high 32 bits order the value (larger value,
/// larger key; -0 equals +0; every NaN is below -Inf), the low 32 bits are `~index` (a lower index
/// is a larger key). Composite keys are unique, so "the k largest composite keys" is one well
/// defined set: the k largest scores, ties broken by the lower index, NaN last. Radix selection
/// finds the k-th largest composite key T digit by digit (six digits of 11/11/10 bits); the
/// selection is then every element whose composite key is >= T.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int topk_radix_bits = 11;
inline constexpr int topk_bins = 1 << topk_radix_bits;
inline constexpr int topk_passes = 6;

/// Monotone 32-bit key of a score: larger score, larger key; -0 -> +0; NaN -> 0 (the lowest).
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint32_t topk_value_key(float v) {
  std::uint32_t bits = float_bits(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return 0u; // NaN ranks below everything (-Inf maps to 0x007fffff)
  }
  if (bits == 0x80000000u) {
    bits = 0u; // -0 ties with +0
  }
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

/// Composite key of the score `v` at `index` (see the file comment).
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint64_t topk_composite(std::uint32_t value_key, std::uint32_t index) {
  return (static_cast<std::uint64_t>(value_key) << 32) | static_cast<std::uint64_t>(0xffffffffu - index);
}

/// Lowest bit of the digit examined by pass `p` (0 = most significant digit).
ZF_HOST_DEVICE constexpr int topk_pass_shift(int p) {
  return p == 0 ? 53 : p == 1 ? 42 : p == 2 ? 32 : p == 3 ? 21 : p == 4 ? 10 : 0;
}

/// The digit of composite key `c` for pass `p` (11, 11, 10, 11, 11, 10 bits).
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint32_t topk_digit(std::uint64_t c, int p) {
  const int bits = (p == 2 || p == 5) ? 10 : 11;
  return static_cast<std::uint32_t>(c >> topk_pass_shift(p)) & ((1u << bits) - 1u);
}

/// The bits of the threshold that are known before pass `p` runs (the digits of passes < p).
ZF_HOST_DEVICE constexpr std::uint64_t topk_known_mask(int p) {
  return p == 0 ? 0ull : (~0ull << topk_pass_shift(p - 1));
}

/// Where the k-th largest key lies within one pass's histogram.
struct topk_bucket {
  std::uint32_t digit = 0; ///< the bucket holding the k-th largest key
  std::uint64_t above = 0; ///< how many candidates lie in higher buckets
  std::uint32_t count = 0; ///< how many candidates lie in the bucket
};

/// Scans a histogram from the top bucket down and returns the bucket that holds the
/// `k_remaining`-th largest candidate (1 <= k_remaining <= total count). The device reaches the
/// same answer with a parallel scan; this is the definition.
ZF_HOST_DEVICE inline topk_bucket topk_find_bucket(const std::uint32_t* hist, std::uint64_t k_remaining) {
  std::uint64_t above = 0;
  for (int d = topk_bins - 1; d >= 0; --d) {
    if (above + hist[d] >= k_remaining) {
      return {static_cast<std::uint32_t>(d), above, hist[d]};
    }
    above += hist[d];
  }
  return {0u, above, hist[0]}; // unreachable when k_remaining <= total
}

/// State of one radix selection between passes.
struct topk_radix_state {
  std::uint64_t prefix = 0;      ///< known high bits of the threshold
  std::uint64_t k_remaining = 0; ///< how many of the candidates matching `prefix` are still to take
  std::uint32_t done = 0;        ///< 1 once `prefix` is the threshold (low bits zero)
  std::uint32_t pass = 0;        ///< the next pass to run
};

/// Advances `s` past pass `p` given the bucket that pass found: after it, either every candidate
/// in the bucket is selected (done: the threshold is the bucket's lowest key) or the next pass
/// narrows the bucket down.
ZF_HOST_DEVICE inline void topk_advance(topk_radix_state& s, int p, const topk_bucket& b) {
  s.prefix |= static_cast<std::uint64_t>(b.digit) << topk_pass_shift(p);
  s.k_remaining -= b.above;
  s.pass = static_cast<std::uint32_t>(p + 1);
  if (s.k_remaining == b.count || p + 1 == topk_passes) {
    s.done = 1;
  }
}

} // namespace detail
ZF_NAMESPACE_END
