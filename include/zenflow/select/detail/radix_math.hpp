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
#include <cstring>

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

// ---- +Inf scores ranked by their fp64 values (topk_item::wide) -----------------------------------
//
// The radix selection above ranks every +Inf score equal (ties to the lower index). With `wide`,
// the scores that are +Inf rank by the 96-bit key (topk_wide_key(wide[i]), ~i) instead: the
// larger fp64 value first, ties to the lower index. This changes the set only when its k-th
// largest score is +Inf (every selected score +Inf, maybe more +Inf left out): then the set is
// the k largest such keys among the +Inf scores; otherwise every +Inf score is selected already.
// Both backends find that set with the bitwise threshold search below (integer counts only, so
// the same set whatever the thread count).

/// True when `v` is +Inf.
ZF_HOST_DEVICE ZF_FORCEINLINE bool topk_is_pos_inf(float v) {
  return float_bits(v) == 0x7f800000u;
}

/// Monotone 64-bit key of an fp64 value: larger value, larger key; -0 -> +0; NaN -> 0 (the lowest).
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint64_t topk_wide_key(double v) {
#if ZF_DEVICE_COMPILE
  std::uint64_t bits = static_cast<std::uint64_t>(__double_as_longlong(v));
#else
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
#endif
  constexpr std::uint64_t sign = 0x8000000000000000ull;
  if ((bits & ~sign) > 0x7ff0000000000000ull) {
    return 0ull; // NaN ranks below everything
  }
  if (bits == sign) {
    bits = 0ull; // -0 ties with +0
  }
  return (bits & sign) != 0 ? ~bits : (bits | sign);
}

/// A 96-bit key of the +Inf ranking: `hi` the value's (topk_wide_key), `lo` = ~index.
struct topk_wide96 {
  std::uint64_t hi = 0;
  std::uint32_t lo = 0;
};

ZF_HOST_DEVICE ZF_FORCEINLINE topk_wide96 topk_wide_composite(double v, std::uint32_t index) {
  return {topk_wide_key(v), 0xffffffffu - index};
}

ZF_HOST_DEVICE ZF_FORCEINLINE bool topk_wide_ge(const topk_wide96& a, const topk_wide96& b) {
  return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}

/// `t` with bit `b` (0..95; 95 the most significant, of `hi`) set: the search's next candidate.
ZF_HOST_DEVICE ZF_FORCEINLINE topk_wide96 topk_wide_with_bit(topk_wide96 t, int b) {
  if (b >= 32) {
    t.hi |= 1ull << (b - 32);
  } else {
    t.lo |= 1u << b;
  }
  return t;
}

/// Number of bits the threshold search walks (most significant first).
inline constexpr int topk_wide_bits = 96;

/// Whether score `i` of a segment is selected once its +Inf scores are re-ranked with threshold
/// `t` (the k-th largest 96-bit key among them).
ZF_HOST_DEVICE ZF_FORCEINLINE bool
topk_wide_selected(const float* scores, const double* wide, std::int64_t i, const topk_wide96& t) {
  return topk_is_pos_inf(scores[i]) &&
         topk_wide_ge(topk_wide_composite(wide[i], static_cast<std::uint32_t>(i)), t);
}

} // namespace detail
ZF_NAMESPACE_END
