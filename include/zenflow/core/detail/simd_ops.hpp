/// @file
/// The register operations every vectorised host loop is written in (CPU AdamW, host channel
/// norms), once per SIMD path: `detail::simd_scalar::ops`, `detail::simd_avx2::ops` (AVX2 + FMA +
/// F16C) and `detail::simd_avx512::ops`. A loop body is written once against `ops` and compiled
/// per path inside that path's ZF_SIMD_TARGET region (<zenflow/core/cpu_simd.hpp> picks the
/// path at run time).
///
/// Same bits on every path: loads widen fp16/bf16 exactly, stores round to nearest even like
/// `zenflow::from_float`, and `mul` keeps its product rounded (an empty `asm` hides it from the
/// optimiser, as math/fp.hpp's mul_f does for scalars), so a `mul` followed by an `add` is never
/// contracted into an FMA whatever `-ffp-contract` and `-march` say; a loop that wants an FMA
/// says `fma`.
#pragma once

#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/detail/fp.hpp>
#include <zenflow/core/detail/moment_rounding.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::simd_scalar {
struct ops {
  using reg = float;
  static constexpr int width = 1;
  static ZF_FORCEINLINE reg zero() { return 0.0f; }
  static ZF_FORCEINLINE reg set1(float a) { return a; }
  static ZF_FORCEINLINE reg load(const float* p) { return *p; }
  static ZF_FORCEINLINE reg load(const half* p) { return to_float(*p); }
  static ZF_FORCEINLINE reg load(const bfloat16* p) { return to_float(*p); }
  /// Bytes widened exactly: read as int8 (load_i8) or uint8 (load_u8) (int8 moments' codes).
  static ZF_FORCEINLINE reg load_i8(const std::uint8_t* p) {
    return static_cast<float>(static_cast<std::int8_t>(*p));
  }
  static ZF_FORCEINLINE reg load_u8(const std::uint8_t* p) { return static_cast<float>(*p); }
  static ZF_FORCEINLINE void store(float* p, reg x) { *p = x; }
  static ZF_FORCEINLINE void store(half* p, reg x) { *p = from_float<half>(x); }
  static ZF_FORCEINLINE void store(bfloat16* p, reg x) { *p = from_float<bfloat16>(x); }
  /// bf16 with the stochastic rounding of core/detail/moment_rounding.hpp, lane j hashed from
  /// (lo + j) ^ key.
  static ZF_FORCEINLINE void store_stochastic(bfloat16* p, reg x, std::uint32_t lo, std::uint32_t key) {
    *p = from_raw_bits<bfloat16>(float_to_bf16_bits_stochastic(float_bits(x), moment_hash_mix(lo ^ key)));
  }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return a + b; }
  static ZF_FORCEINLINE reg mul(reg a, reg b) { return mul_f(a, b); }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return a / b; }
  static ZF_FORCEINLINE reg sqrt(reg a) { return std::sqrt(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return std::fma(a, b, c); }
  static ZF_FORCEINLINE reg abs(reg a) { return std::fabs(a); }
  /// a > b ? a : b, lane by lane (b where either is NaN, as maxps).
  static ZF_FORCEINLINE reg max(reg a, reg b) { return a > b ? a : b; }
  static ZF_FORCEINLINE reg sub(reg a, reg b) { return a - b; }
  static ZF_FORCEINLINE reg floor(reg a) { return std::floor(a); }
  /// a + 1 where x > t (false for NaN), else a.
  static ZF_FORCEINLINE reg add_one_if_greater(reg a, reg x, reg t) { return x > t ? a + 1.0f : a; }
};
} // namespace detail::simd_scalar

#if ZF_CPU_X86_DISPATCH
ZF_SIMD_TARGET_AVX2_BEGIN
namespace detail::simd_avx2 {
struct ops {
  using reg = __m256;
  static constexpr int width = 8;
  static ZF_FORCEINLINE reg zero() { return _mm256_setzero_ps(); }
  static ZF_FORCEINLINE reg set1(float a) { return _mm256_set1_ps(a); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm256_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE reg load_i8(const std::uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static ZF_FORCEINLINE reg load_u8(const std::uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
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
  static ZF_FORCEINLINE void store_stochastic(bfloat16* p, reg x, std::uint32_t lo, std::uint32_t key) {
    __m256i h = _mm256_xor_si256(
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(lo)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        _mm256_set1_epi32(static_cast<int>(key)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(moment_hash_mul1)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(moment_hash_mul2)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    const __m256i u = _mm256_castps_si256(x);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_and_si256(h, _mm256_set1_epi32(0xffff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) {
    reg r = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(r)); // stays rounded: no FMA contraction
    return r;
  }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static ZF_FORCEINLINE reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static ZF_FORCEINLINE reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static ZF_FORCEINLINE reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static ZF_FORCEINLINE reg floor(reg a) { return _mm256_floor_ps(a); }
  static ZF_FORCEINLINE reg add_one_if_greater(reg a, reg x, reg t) {
    return _mm256_add_ps(a, _mm256_and_ps(_mm256_cmp_ps(x, t, _CMP_GT_OQ), _mm256_set1_ps(1.0f)));
  }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  }
};
} // namespace detail::simd_avx2
ZF_SIMD_TARGET_AVX2_END

ZF_SIMD_TARGET_AVX512_BEGIN
namespace detail::simd_avx512 {
struct ops {
  using reg = __m512;
  static constexpr int width = 16;
  static ZF_FORCEINLINE reg zero() { return _mm512_setzero_ps(); }
  static ZF_FORCEINLINE reg set1(float a) { return _mm512_set1_ps(a); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm512_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE reg load_i8(const std::uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static ZF_FORCEINLINE reg load_u8(const std::uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
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
  static ZF_FORCEINLINE void store_stochastic(bfloat16* p, reg x, std::uint32_t lo, std::uint32_t key) {
    __m512i h = _mm512_xor_si512(
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(lo)),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
        _mm512_set1_epi32(static_cast<int>(key)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(moment_hash_mul1)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(moment_hash_mul2)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    const __m512i u = _mm512_castps_si512(x);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_and_si512(h, _mm512_set1_epi32(0xffff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) {
    reg r = _mm512_mul_ps(a, b);
    __asm__("" : "+v"(r)); // stays rounded: no FMA contraction
    return r;
  }
  static ZF_FORCEINLINE reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static ZF_FORCEINLINE reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  static ZF_FORCEINLINE reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static ZF_FORCEINLINE reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static ZF_FORCEINLINE reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static ZF_FORCEINLINE reg floor(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  static ZF_FORCEINLINE reg add_one_if_greater(reg a, reg x, reg t) {
    return _mm512_mask_add_ps(a, _mm512_cmp_ps_mask(x, t, _CMP_GT_OQ), a, _mm512_set1_ps(1.0f));
  }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
  }
};
} // namespace detail::simd_avx512
ZF_SIMD_TARGET_AVX512_END
#endif

ZF_NAMESPACE_END
