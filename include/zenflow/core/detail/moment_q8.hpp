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

#include <bit>
#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/fp.hpp>
#include <zenflow/core/detail/moment_rounding.hpp>

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
[[nodiscard]] ZF_FORCEINLINE float q8_step(float absmax, float levels) {
  return div_f(absmax, levels);
}
/// Codes per unit of value (0 for an all-zero block).
[[nodiscard]] ZF_FORCEINLINE float q8_inverse(float absmax, float levels) {
  return absmax > 0.0f ? div_f(levels, absmax) : 0.0f;
}

/// The fp32 m of a code and a step.
[[nodiscard]] ZF_FORCEINLINE float q8_m_value(std::uint8_t code, float step) {
  return mul_f(static_cast<float>(static_cast<std::int8_t>(code)), step);
}
/// The fp32 u = sqrt(v) of a code and a step.
[[nodiscard]] ZF_FORCEINLINE float q8_u_value(std::uint8_t code, float step) {
  return mul_f(static_cast<float>(code), step);
}

/// Codes from rounded values cm[j] (m's, in steps) and cu[j] (u's): NaN (a NaN moment, or inf x 0)
/// is 0, the rest clamped to the code range, and v's code at least 1 where m's is not 0 (when
/// `any_u`). Integer selects on the values' bits, so that the loop vectorises without fast-math.
ZF_FORCEINLINE void
q8_codes(const float* cm, const float* cu, int n, bool any_u, std::uint8_t* m_code, std::uint8_t* v_code) {
  const std::int32_t one_u = any_u ? 1 : 0;
  for (int j = 0; j < n; ++j) {
    const auto bm = std::bit_cast<std::uint32_t>(cm[j]), bu = std::bit_cast<std::uint32_t>(cu[j]);
    const std::uint32_t am = bm & 0x7fffffffu, au = bu & 0x7fffffffu;
    // |x| >= 128 (m) or 256 (u), inf and NaN: decided on the bits; the rest converts exactly.
    const bool big_m = am >= 0x43000000u, big_u = au >= 0x43800000u;
    const auto im = static_cast<std::int32_t>(std::bit_cast<float>(big_m ? 0u : bm));
    const auto iu = static_cast<std::int32_t>(std::bit_cast<float>(big_u ? 0u : bu));
    const std::int32_t sat_m = am > 0x7f800000u ? 0 : ((bm >> 31) != 0u ? -127 : 127);
    const std::int32_t sat_u = (au > 0x7f800000u || (bu >> 31) != 0u) ? 0 : 255;
    std::int32_t a = big_m ? sat_m : im;
    std::int32_t b = big_u ? sat_u : iu;
    a = a < -127 ? -127 : (a > 127 ? 127 : a);
    b = b < 0 ? 0 : b;
    b = (a != 0 && b == 0) ? one_u : b;
    m_code[j] = static_cast<std::uint8_t>(a & 0xff);
    v_code[j] = static_cast<std::uint8_t>(b);
  }
}

/// The stochastic rounding's thresholds in [0, 1) of elements `index0 + j`, j < n, after update
/// `count`: the top 24 bits of the moment hash (m's in tm, v's in tu). A loop the compiler
/// vectorises (32-bit lanes) when the block shares the index's high 32 bits.
ZF_FORCEINLINE void q8_thresholds(std::uint64_t index0, int n, std::uint32_t count, float* tm, float* tu) {
  const auto lo = static_cast<std::uint32_t>(index0);
  if (lo <= 0xffffffffu - q8_block) {
    const auto hi = static_cast<std::uint32_t>(index0 >> 32);
    const std::uint32_t km = moment_hash_key(hi, count, moment_m), ku = moment_hash_key(hi, count, moment_v);
    for (int j = 0; j < n; ++j) {
      tm[j] = static_cast<float>(static_cast<std::int32_t>(
                  moment_hash_mix((lo + static_cast<std::uint32_t>(j)) ^ km) >> 8)) *
              0x1p-24f;
      tu[j] = static_cast<float>(static_cast<std::int32_t>(
                  moment_hash_mix((lo + static_cast<std::uint32_t>(j)) ^ ku) >> 8)) *
              0x1p-24f;
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const std::uint64_t i = index0 + static_cast<std::uint64_t>(j);
      tm[j] = static_cast<float>(static_cast<std::int32_t>(moment_hash(i, count, moment_m) >> 8)) * 0x1p-24f;
      tu[j] = static_cast<float>(static_cast<std::int32_t>(moment_hash(i, count, moment_v) >> 8)) * 0x1p-24f;
    }
  }
}

/// One value `q` (in steps) rounded stochastically with threshold `t`: floor(q), plus 1 where
/// q - floor(q) > t (the SIMD paths' add_one_if_greater, lane by lane).
[[nodiscard]] ZF_FORCEINLINE float q8_round_stochastic(float q, float t) {
  const float f = std::floor(q);
  return (q - f) > t ? f + 1.0f : f;
}

/// The codes of one block of `n` (<= 64) fp32 values m[j] and u[j] = sqrt(v[j]) whose absmax are
/// `am` and `au` (NaN values ignored), of elements `index0 + j` after update `count`: m on 127
/// signed steps, u on 255, stochastically (q8_thresholds) or to nearest.
ZF_FORCEINLINE void q8_quantize_block(const float* m,
                                      const float* u,
                                      int n,
                                      float am,
                                      float au,
                                      std::uint8_t* m_code,
                                      std::uint8_t* v_code,
                                      bool stochastic,
                                      std::uint64_t index0,
                                      std::uint32_t count) {
  const float im = q8_inverse(am, q8_m_levels), iu = q8_inverse(au, q8_u_levels);
  float cm[q8_block], cu[q8_block];
  if (stochastic) {
    float tm[q8_block], tu[q8_block];
    q8_thresholds(index0, n, count, tm, tu);
    for (int j = 0; j < n; ++j) {
      cm[j] = q8_round_stochastic(mul_f(m[j], im), tm[j]);
      cu[j] = q8_round_stochastic(mul_f(u[j], iu), tu[j]);
    }
  } else {
    for (int j = 0; j < n; ++j) {
      cm[j] = std::nearbyint(mul_f(m[j], im));
      cu[j] = std::nearbyint(mul_f(u[j], iu));
    }
  }
  q8_codes(cm, cu, n, au > 0.0f, m_code, v_code);
}

/// Quantizes one block of `n` (<= 64) fp32 moments m[j], v[j] (v, not its root) of elements
/// `index0 + j` after update `count` into codes and the two scales (their absmax).
ZF_FORCEINLINE void q8_store_block(const float* m,
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
  q8_quantize_block(m, u, n, am, au, m_code, v_code, stochastic, index0, count);
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
