/// @file
/// Adam moments kept in 8 bits (the `host_moments = int8` option): block-wise absmax scaling, one
/// fp32 scale per block of 64 elements of one row (a channel), so that a row moves between the
/// host and the device, or between data-parallel owners, without touching its neighbours' blocks.
///
/// The codes:
/// - m: signed linear on the block's absmax, code in [-127, 127], m = code * (absmax / 127).
/// - v: stored as u = sqrt(v) (what Adam's denominator uses), unsigned linear on the block's
///   absmax of u, code in [0, 255], v = (code * (absmax / 255))^2. The square root halves v's
///   dynamic range, and the denominator's error is then at most half a step of u.
/// - Where m's code is non-zero, v's code is at least 1: an element whose v rounds to zero would
///   divide its momentum by eps alone at the next update.
///
/// Rounding: the window's updates round stochastically (as bf16's, moment_rounding.hpp: one update
/// moves a moment by far less than a step), hashed from the whole-matrix element index, the count
/// and the moment, so the bits depend on neither threads nor SIMD paths. A single conversion (a
/// row coming home from the device) rounds to nearest. The arithmetic is fp32 throughout.
#pragma once

#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_rounding.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN

/// The moment type of `host_moments = int8` (a tag: its storage is `detail::q8_ptr`).
struct int8_moment {};

namespace detail {

/// Elements per scale block (blocks never straddle rows).
inline constexpr std::int64_t q8_block = 64;
inline constexpr float q8_m_levels = 127.0f;
inline constexpr float q8_u_levels = 255.0f;

/// Scale blocks of one row of `row_len` elements.
[[nodiscard]] ZF_HOST_DEVICE constexpr std::int64_t q8_blocks(std::int64_t row_len) noexcept {
  return (row_len + q8_block - 1) / q8_block;
}

/// A row-aligned place in int8 moments: the codes (one byte an element), the scales (one fp32
/// absmax per block of each row) and the row length. `which` says m (signed codes of m) or v
/// (unsigned codes of sqrt(v)).
struct q8_ptr {
  std::uint8_t* code = nullptr;
  float* scale = nullptr;
  std::int64_t row_len = 0;
  std::uint32_t which = moment_m;

  /// `off` elements further on: a whole number of rows.
  friend q8_ptr operator+(q8_ptr p, std::int64_t off) noexcept {
    const std::int64_t rows = p.row_len > 0 ? off / p.row_len : 0;
    p.code += off;
    p.scale += rows * q8_blocks(p.row_len);
    return p;
  }
};

/// The step of one code of a block with absmax `absmax` (`levels` codes above zero).
[[nodiscard]] inline float q8_step(float absmax, float levels) {
  return div_f(absmax, levels);
}
/// Codes per unit of value (0 for an all-zero block).
[[nodiscard]] inline float q8_inverse(float absmax, float levels) {
  return absmax > 0.0f ? div_f(levels, absmax) : 0.0f;
}

/// The value `q` (in steps) as a code in [lo, hi]: to nearest (ties to even) or stochastically
/// (rounds up with probability frac(q), the threshold from the top 24 bits of `hash`).
[[nodiscard]] inline float q8_round(float q, bool stochastic, std::uint32_t hash, float lo, float hi) {
  float r;
  if (stochastic) {
    const float f = std::floor(q);
    const float threshold = static_cast<float>(hash >> 8) * 0x1p-24f;
    r = f + ((q - f) > threshold ? 1.0f : 0.0f);
  } else {
    r = std::nearbyint(q);
  }
  return r < lo ? lo : (r > hi ? hi : r); // NaN stays NaN: the caller's code cast is then 0
}

/// The fp32 m of a code and a step.
[[nodiscard]] inline float q8_m_value(std::uint8_t code, float step) {
  return mul_f(static_cast<float>(static_cast<std::int8_t>(code)), step);
}
/// The fp32 u = sqrt(v) of a code and a step.
[[nodiscard]] inline float q8_u_value(std::uint8_t code, float step) {
  return mul_f(static_cast<float>(code), step);
}

/// Quantizes one block of `n` (<= 64) fp32 moments m[j], v[j] (v, not its root) of elements
/// `index0 + j` after update `count` into codes and the two scales at `mq`, `vq`.
inline void q8_store_block(const float* m,
                           const float* v,
                           int n,
                           std::uint8_t* m_code,
                           float& m_scale,
                           std::uint8_t* v_code,
                           float& v_scale,
                           bool stochastic,
                           std::uint64_t index0,
                           std::uint32_t count) {
  float u[q8_block];
  float am = 0.0f, au = 0.0f;
  for (int j = 0; j < n; ++j) {
    u[j] = sqrt_f(v[j]);
    const float a = std::fabs(m[j]);
    am = a > am ? a : am;
    au = u[j] > au ? u[j] : au;
  }
  m_scale = am;
  v_scale = au;
  const float im = q8_inverse(am, q8_m_levels), iu = q8_inverse(au, q8_u_levels);
  for (int j = 0; j < n; ++j) {
    const std::uint64_t i = index0 + static_cast<std::uint64_t>(j);
    const float cm = q8_round(mul_f(m[j], im), stochastic, stochastic ? moment_hash(i, count, moment_m) : 0u,
                              -q8_m_levels, q8_m_levels);
    float cu = q8_round(mul_f(u[j], iu), stochastic, stochastic ? moment_hash(i, count, moment_v) : 0u, 0.0f,
                        q8_u_levels);
    cu = (cm != 0.0f && cu == 0.0f && au > 0.0f) ? 1.0f : cu;
    m_code[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(cm == cm ? cm : 0.0f));
    v_code[j] = static_cast<std::uint8_t>(cu == cu ? cu : 0.0f);
  }
}

/// Row `n` of fp32 m and v (whole rows of m.row_len) into int8 moments, `index0` the first's
/// whole-matrix element index (the hash's input when `stochastic`).
inline void q8_store_rows(q8_ptr m,
                          q8_ptr v,
                          const float* ms,
                          const float* vs,
                          std::int64_t n,
                          bool stochastic = false,
                          std::uint64_t index0 = 0,
                          std::uint32_t count = 0) {
  const std::int64_t L = m.row_len;
  for (std::int64_t r = 0; L > 0 && r < n / L; ++r) {
    for (std::int64_t b = 0; b < q8_blocks(L); ++b) {
      const std::int64_t o = r * L + b * q8_block;
      const int nb = static_cast<int>(L - b * q8_block < q8_block ? L - b * q8_block : q8_block);
      const std::int64_t s = r * q8_blocks(L) + b;
      q8_store_block(ms + o, vs + o, nb, m.code + o, m.scale[s], v.code + o, v.scale[s], stochastic,
                     index0 + static_cast<std::uint64_t>(o), count);
    }
  }
}

/// `n` elements (whole rows of p.row_len) of one int8 moment widened to fp32 (m, or v = u^2).
inline void q8_load_rows(float* dst, q8_ptr p, std::int64_t n) {
  const std::int64_t L = p.row_len;
  for (std::int64_t r = 0; L > 0 && r < n / L; ++r) {
    for (std::int64_t j = 0; j < L; ++j) {
      const float s = p.scale[r * q8_blocks(L) + j / q8_block];
      const std::uint8_t c = p.code[r * L + j];
      if (p.which == moment_m) {
        dst[r * L + j] = q8_m_value(c, q8_step(s, q8_m_levels));
      } else {
        const float u = q8_u_value(c, q8_step(s, q8_u_levels));
        dst[r * L + j] = mul_f(u, u);
      }
    }
  }
}

} // namespace detail
ZF_NAMESPACE_END
