/// @file
/// Rounding of Adam moments kept in bfloat16 (the `host_moments = bf16` option): stochastic
/// rounding driven by a counter-based hash of (element index, update count, which moment).
///
/// Why stochastic: with beta2 = 0.999 one update changes v by 0.1% of itself, less than half a
/// bf16 ulp (0.2-0.4%), so round-to-nearest returns the old v whenever the gradient is near its
/// running size: v stops decaying (and m for beta1 > 0.996). Rounding up with a probability equal
/// to the distance keeps each stored moment unbiased, so the moments follow the fp32 recursion in
/// expectation. The random bits depend only on (index, count, moment), never on threads, chunking
/// or timing: same inputs, same bits on every SIMD path and thread count.
#pragma once

#include <bit>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// Which moment a hash is for (m and v get independent bits).
inline constexpr std::uint32_t moment_m = 0;
inline constexpr std::uint32_t moment_v = 1;

inline constexpr std::uint32_t moment_hash_mul1 = 0x7feb352du;
inline constexpr std::uint32_t moment_hash_mul2 = 0x846ca68bu;

/// The hash's mixing step: a 32-bit integer finaliser (two multiply-xorshift rounds; the SIMD
/// paths in simd_ops.hpp repeat it lane by lane).
ZF_FORCEINLINE constexpr std::uint32_t moment_hash_mix(std::uint32_t x) {
  x ^= x >> 16;
  x *= moment_hash_mul1;
  x ^= x >> 15;
  x *= moment_hash_mul2;
  x ^= x >> 16;
  return x;
}

/// What the hash of one element adds to its low index bits: the high index bits, the count and
/// the moment, combined with odd constants.
ZF_FORCEINLINE constexpr std::uint32_t
moment_hash_key(std::uint32_t index_high, std::uint32_t count, std::uint32_t which) {
  return (index_high * 0x9e3779b9u) ^ (count * 0x85ebca6bu) ^ (which * 0xc2b2ae35u);
}

/// 32 well-mixed bits from (element index, update count, moment).
ZF_FORCEINLINE constexpr std::uint32_t
moment_hash(std::uint64_t index, std::uint32_t count, std::uint32_t which) {
  return moment_hash_mix(static_cast<std::uint32_t>(index) ^
                         moment_hash_key(static_cast<std::uint32_t>(index >> 32), count, which));
}

/// fp32 bits -> bf16 bits, stochastically: adds the low 16 bits of `hash` to the magnitude and
/// truncates, so the magnitude rounds up with probability (dropped bits) / 2^16. NaN stays a
/// quiet NaN; values within a bf16 ulp of FLT_MAX may round to infinity (as round-to-nearest does).
ZF_FORCEINLINE constexpr std::uint16_t float_to_bf16_bits_stochastic(std::uint32_t bits, std::uint32_t hash) {
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u; // branch-free, so that loops vectorise
  return static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x0040u) : ((bits + (hash & 0xffffu)) >> 16));
}

/// A moment value `x` of element `index` after update `count`, stored as bf16.
ZF_FORCEINLINE std::uint16_t
round_moment_bf16(float x, std::uint64_t index, std::uint32_t count, std::uint32_t which) {
  return float_to_bf16_bits_stochastic(std::bit_cast<std::uint32_t>(x), moment_hash(index, count, which));
}

} // namespace detail

ZF_NAMESPACE_END
