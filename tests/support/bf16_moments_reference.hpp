/// @file
/// bf16 host moments as docs/primitives.md ("Fewer bytes per parameter") documents them, written
/// from that page for the float64 reference (tests/support/zenflow_reference.hpp): the hash of
/// (element index, update count, moment), the stochastic rounding it drives, and the nearest
/// rounding of rows that come home from the device.
#pragma once

#include <bit>
#include <cstdint>

#include <zenflow/core/dtype.hpp>

namespace zf_test {

/// The documented moment hash (docs/primitives.md): 32 bits from (element index, count, moment).
inline std::uint32_t documented_moment_hash(std::uint64_t index, std::uint32_t count, std::uint32_t which) {
  std::uint32_t x = static_cast<std::uint32_t>(index) ^
                    (static_cast<std::uint32_t>(index >> 32) * 0x9e3779b9u) ^ (count * 0x85ebca6bu) ^
                    (which * 0xc2b2ae35u);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/// A moment `x` after an update on the host stored as bf16: to float (nearest), then add the
/// hash's low 16 bits to the float's bits and truncate to the upper 16 (finite values only).
inline double host_moment_bf16(double x, std::uint64_t index, std::uint32_t count, std::uint32_t which) {
  const auto bits = std::bit_cast<std::uint32_t>(static_cast<float>(x));
  const std::uint32_t r = ((bits + (documented_moment_hash(index, count, which) & 0xffffu)) >> 16) << 16;
  return std::bit_cast<float>(r);
}

/// A moment `x` of a row that leaves the device stored as bf16: float, then nearest bf16.
inline double moment_bf16_nearest(double x) {
  return zenflow::to_float(zenflow::from_float<zenflow::bfloat16>(static_cast<float>(x)));
}

} // namespace zf_test
