/// @file
/// The fused host window on one row with int8 moments (core/detail/moment_q8.hpp): per block of
/// 64, dequantize m and v, run zenflow::adam_update on each element in fp32, and requantize with
/// the block's fresh absmax (stochastic rounding). One code for every SIMD path: it calls the
/// scalar arithmetic of math/adam.hpp, so the bits depend on no path and no thread count (the
/// window's chunks are whole rows, hence whole blocks).
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN
namespace detail::cpu {

/// window_span (cpu_simd_body.hpp) on one whole row of `n` elements with int8 moments at the
/// row's start: acc += coef * slot (slot nullable), AdamW with acc times `scale` as the gradient,
/// new weights to `out`, acc zeroed unless `keep_acc`. `index0` is the row's first whole-matrix
/// element index and `count` this update's count (the rounding hash's inputs).
template <class S, class T>
void window_row_q8(float* acc,
                   const S* slot,
                   float coef,
                   float* master,
                   q8_ptr m,
                   q8_ptr v,
                   T* out,
                   std::int64_t n,
                   const adam_constants& c,
                   float scale,
                   std::int64_t index0,
                   std::uint32_t count,
                   bool keep_acc) {
  float mf[q8_block], vf[q8_block];
  for (std::int64_t b = 0; b * q8_block < n; ++b) {
    const std::int64_t o = b * q8_block;
    const int nb = static_cast<int>(n - o < q8_block ? n - o : q8_block);
    const float sm = q8_step(m.scale[b], q8_m_levels), su = q8_step(v.scale[b], q8_u_levels);
    for (int j = 0; j < nb; ++j) {
      const std::int64_t i = o + j;
      float g = acc[i];
      if (slot != nullptr) {
        g = accumulate_value(g, coef, to_float(slot[i]));
      }
      mf[j] = q8_m_value(m.code[i], sm);
      const float u = q8_u_value(v.code[i], su);
      vf[j] = mul_f(u, u);
      out[i] = from_float<T>(adam_update(master[i], mf[j], vf[j], g, scale, c));
      if (!keep_acc) {
        acc[i] = 0.0f;
      }
    }
    q8_store_block(mf, vf, nb, m.code + o, m.scale[b], v.code + o, v.scale[b], true,
                   static_cast<std::uint64_t>(index0 + o), count);
  }
}

} // namespace detail::cpu
ZF_NAMESPACE_END
