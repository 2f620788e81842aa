/// @file
/// int8 host moments as docs/primitives.md ("Fewer bytes per parameter") documents them, written
/// from that page in float64 for the reference (tests/support/zenflow_reference.hpp): per block of
/// 64 elements of a row, m on 127 signed steps of its absmax, u = sqrt(v) on 255 steps of its
/// absmax, v's code at least 1 where m's is not 0; after a host update stochastically (the
/// documented hash's top 24 bits are the threshold), a row coming home from the device to nearest.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "support/bf16_moments_reference.hpp"

namespace zf_test {

/// Row `len` of moments m, v (element `index0` first) replaced by what the host stores of them.
inline void host_row_int8(
    double* m, double* v, std::int64_t len, std::uint64_t index0, std::uint32_t count, bool stochastic) {
  for (std::int64_t lo = 0; lo < len; lo += 64) {
    const std::int64_t hi = std::min<std::int64_t>(len, lo + 64);
    double am = 0, au = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      am = std::max(am, std::fabs(m[i]));
      au = std::max(au, std::sqrt(v[i]));
    }
    auto code = [&](double q, std::uint64_t e, std::uint32_t which, double lo_code, double hi_code) {
      double r;
      if (stochastic) {
        const double f = std::floor(q);
        const double th = static_cast<double>(documented_moment_hash(e, count, which) >> 8) / 16777216.0;
        r = f + (q - f > th ? 1.0 : 0.0);
      } else {
        r = std::nearbyint(q);
      }
      return std::clamp(r, lo_code, hi_code);
    };
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::uint64_t e = index0 + static_cast<std::uint64_t>(i);
      const double cm = am > 0 ? code(m[i] * 127.0 / am, e, 0, -127.0, 127.0) : 0.0;
      double cu = au > 0 ? code(std::sqrt(v[i]) * 255.0 / au, e, 1, 0.0, 255.0) : 0.0;
      cu = (cm != 0.0 && cu == 0.0 && au > 0) ? 1.0 : cu;
      m[i] = cm * (am / 127.0);
      v[i] = std::pow(cu * (au / 255.0), 2.0);
    }
  }
}

} // namespace zf_test
