/// @file
/// The CPU AdamW loops for each SIMD path (AVX-512, AVX2 + FMA + F16C, scalar); the path is chosen
/// at run time by <zenflow/core/cpu_simd.hpp>.
///
/// Why not Eigen here: Eigen chooses its packet type at compile time from the compiler flags, so
/// its AVX-512 code exists only when the consumer builds with -mavx512f; run-time dispatch needs
/// the explicit intrinsics below. All paths produce the same bits (see cpu_simd_body.hpp).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::cpu_scalar {
struct ops {
  using reg = float;
  static constexpr int width = 1;
  static ZF_FORCEINLINE reg set1(float a) { return a; }
  static ZF_FORCEINLINE reg load(const float* p) { return *p; }
  static ZF_FORCEINLINE reg load(const half* p) { return to_float(*p); }
  static ZF_FORCEINLINE reg load(const bfloat16* p) { return to_float(*p); }
  static ZF_FORCEINLINE void store(float* p, reg x) { *p = x; }
  static ZF_FORCEINLINE void store(half* p, reg x) { *p = from_float<half>(x); }
  static ZF_FORCEINLINE void store(bfloat16* p, reg x) { *p = from_float<bfloat16>(x); }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return a + b; }
  static ZF_FORCEINLINE reg mul(reg a, reg b) { return a * b; }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return a / b; }
  static ZF_FORCEINLINE reg sqrt(reg a) { return std::sqrt(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return std::fma(a, b, c); }
  static ZF_FORCEINLINE reg abs(reg a) { return a < 0.0f ? -a : a; }
};
#define ZF_CPU_SIMD_BODY 1
#include <zenflow/optim/detail/cpu_simd_body.hpp>
#undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_scalar

#if ZF_CPU_X86_DISPATCH
#  pragma GCC push_options
#  pragma GCC target("avx2,fma,f16c")
namespace detail::cpu_avx2 {
struct ops {
  using reg = __m256;
  static constexpr int width = 8;
  static ZF_FORCEINLINE reg set1(float a) { return _mm256_set1_ps(a); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm256_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static ZF_FORCEINLINE void store(half* p, reg x) {
    // NaN lanes -> sign | 0x7fc00000, which the hardware narrows to sign | 0x7e00: the bits of
    // zenflow::from_float<half> (the software RNE conversion).
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 canon = _mm256_or_ps(_mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))),
                                      _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    const __m128i h = _mm256_cvtps_ph(_mm256_blendv_ps(x, canon, nan), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static ZF_FORCEINLINE void store(bfloat16* p, reg x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static ZF_FORCEINLINE reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  }
};
#  define ZF_CPU_SIMD_BODY 1
#  include <zenflow/optim/detail/cpu_simd_body.hpp>
#  undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_avx2
#  pragma GCC pop_options

#  pragma GCC push_options
#  pragma GCC target("avx512f,avx2,fma,f16c")
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own "undefined" registers (GCC
// bug 105593); silence it for this block only.
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace detail::cpu_avx512 {
struct ops {
  using reg = __m512;
  static constexpr int width = 16;
  static ZF_FORCEINLINE reg set1(float a) { return _mm512_set1_ps(a); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm512_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static ZF_FORCEINLINE void store(half* p, reg x) {
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
    const __m512 canon = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000)));
    const __m256i h = _mm512_cvtps_ph(_mm512_mask_blend_ps(nan, x, canon), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
  static ZF_FORCEINLINE void store(bfloat16* p, reg x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static ZF_FORCEINLINE reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
  }
};
#  define ZF_CPU_SIMD_BODY 1
#  include <zenflow/optim/detail/cpu_simd_body.hpp>
#  undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_avx512
#  pragma GCC diagnostic pop
#  pragma GCC pop_options
#endif

namespace detail::cpu {

/// Each dispatcher below calls the active path's version of the same function.
#if ZF_CPU_X86_DISPATCH
#  define ZF_CPU_DISPATCH(...)                                                                               \
    switch (::zenflow::host::active_simd_path()) {                                                           \
    case ::zenflow::host::simd_path::avx512:                                                                 \
      return ::zenflow::detail::cpu_avx512::__VA_ARGS__;                                                     \
    case ::zenflow::host::simd_path::avx2:                                                                   \
      return ::zenflow::detail::cpu_avx2::__VA_ARGS__;                                                       \
    default:                                                                                                 \
      return ::zenflow::detail::cpu_scalar::__VA_ARGS__;                                                     \
    }
#else
#  define ZF_CPU_DISPATCH(...) return ::zenflow::detail::cpu_scalar::__VA_ARGS__;
#endif

template <class G, class T>
void adam_span(float* master,
               float* m,
               float* v,
               const G* grad,
               T* out,
               std::int64_t n,
               const adam_constants& c,
               float scale) {
  ZF_CPU_DISPATCH(adam_span<G, T>(master, m, v, grad, out, n, c, scale))
}

template <class S>
void accumulate_span(float* acc, const S* slot, float coef, std::int64_t n) {
  ZF_CPU_DISPATCH(accumulate_span<S>(acc, slot, coef, n))
}

template <class S, class T>
void window_span(float* acc,
                 const S* slot,
                 float coef,
                 float* master,
                 float* m,
                 float* v,
                 T* out,
                 std::int64_t n,
                 const adam_constants& c,
                 float scale) {
  ZF_CPU_DISPATCH(window_span<S, T>(acc, slot, coef, master, m, v, out, n, c, scale))
}

template <class Tin, class Tout>
float convert_span(const Tin* in, Tout* out, std::int64_t n, bool want_l1) {
  ZF_CPU_DISPATCH(convert_span<Tin, Tout>(in, out, n, want_l1))
}

template <class Tin>
float l1_span(const Tin* in, std::int64_t n) {
  ZF_CPU_DISPATCH(l1_span<Tin>(in, n))
}

#undef ZF_CPU_DISPATCH

} // namespace detail::cpu

ZF_NAMESPACE_END
