/// @file
/// Run-time SIMD dispatch of the host channel-norm loops: AVX-512, AVX2 (+F16C) and scalar.
///
/// Each path is compiled with a function-level target (`#pragma GCC target` around its code), so
/// consumers never need `-march=native`; the best path the CPU supports is picked at run time
/// (`host::active_simd_path()` in <zenflow/core/cpu_simd.hpp>, shared with the CPU AdamW). Every product
/// goes through an empty `asm` that keeps it rounded (no contraction into an FMA, whatever
/// `-ffp-contract` says), so every path computes the same bits (see `norm_simd_body.hpp`).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Partial sums of one contiguous channel (the same on every path).
inline constexpr int norm_lanes = 64;

/// `x`, opaque to the optimiser: a product passed through it is rounded to fp32 before it is
/// added, never fused into an FMA (which `-ffp-contract=fast`, GCC's default outside ISO mode,
/// would do inside the AVX-512 region and in consumers built with `-mfma`).
ZF_FORCEINLINE float no_contract(float x) {
#if ZF_CPU_X86_DISPATCH
  __asm__("" : "+x"(x));
#endif
  return x;
}

} // namespace detail

namespace detail::norm_scalar {
struct ops {
  using reg = float;
  static constexpr int width = 1;
  static ZF_FORCEINLINE reg zero() { return 0.0f; }
  static ZF_FORCEINLINE reg load(const float* p) { return *p; }
  static ZF_FORCEINLINE reg load(const half* p) { return to_float(*p); }
  static ZF_FORCEINLINE reg load(const bfloat16* p) { return to_float(*p); }
  static ZF_FORCEINLINE void store(float* p, reg x) { *p = x; }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return a + b; }
  static ZF_FORCEINLINE reg mul(reg a, reg b) { return no_contract(a * b); }
  static ZF_FORCEINLINE reg abs(reg a) { return std::fabs(a); }
};
#define ZF_NORM_SIMD_BODY 1
#include <zenflow/select/detail/norm_simd_body.hpp>
#undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_scalar

#if ZF_CPU_X86_DISPATCH
#  pragma GCC push_options
#  pragma GCC target("avx2,f16c")
namespace detail::norm_avx2 {
struct ops {
  using reg = __m256;
  static constexpr int width = 8;
  static ZF_FORCEINLINE reg zero() { return _mm256_setzero_ps(); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm256_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) {
    reg r = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(r)); // keeps the product rounded: no FMA contraction (see the file comment)
    return r;
  }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  }
};
#  define ZF_NORM_SIMD_BODY 1
#  include <zenflow/select/detail/norm_simd_body.hpp>
#  undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_avx2
#  pragma GCC pop_options

#  pragma GCC push_options
#  pragma GCC target("avx512f,avx2,f16c")
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own "undefined" registers (GCC
// bug 105593); silence it for this block only.
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace detail::norm_avx512 {
struct ops {
  using reg = __m512;
  static constexpr int width = 16;
  static ZF_FORCEINLINE reg zero() { return _mm512_setzero_ps(); }
  static ZF_FORCEINLINE reg load(const float* p) { return _mm512_loadu_ps(p); }
  static ZF_FORCEINLINE reg load(const half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static ZF_FORCEINLINE reg load(const bfloat16* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static ZF_FORCEINLINE void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static ZF_FORCEINLINE reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static ZF_FORCEINLINE reg mul(reg a, reg b) {
    reg r = _mm512_mul_ps(a, b);
    __asm__("" : "+v"(r)); // keeps the product rounded: no FMA contraction (see the file comment)
    return r;
  }
  static ZF_FORCEINLINE reg abs(reg a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
  }
};
#  define ZF_NORM_SIMD_BODY 1
#  include <zenflow/select/detail/norm_simd_body.hpp>
#  undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_avx512
#  pragma GCC diagnostic pop
#  pragma GCC pop_options
#endif

namespace detail {

#if ZF_CPU_X86_DISPATCH
#  define ZF_NORM_DISPATCH(path, ...)                                                                        \
    switch (path) {                                                                                          \
    case host::simd_path::avx512:                                                                            \
      return norm_avx512::__VA_ARGS__;                                                                       \
    case host::simd_path::avx2:                                                                              \
      return norm_avx2::__VA_ARGS__;                                                                         \
    default:                                                                                                 \
      return norm_scalar::__VA_ARGS__;                                                                       \
    }
#else
#  define ZF_NORM_DISPATCH(path, ...) return norm_scalar::__VA_ARGS__;
#endif

/// Score of one contiguous channel on `path`.
template <channel_norm Norm, class T>
float norm_contiguous_score(host::simd_path path, const T* p, std::int64_t len) {
  ZF_NORM_DISPATCH(path, contiguous_score<Norm>(p, len))
}

/// Adds `rows` rows of `w` columns into `acc` on `path` (see `norm_simd_body.hpp`).
template <channel_norm Norm, class T>
void norm_strided_accumulate(
    host::simd_path path, const T* p, std::int64_t ld, std::int64_t rows, std::int64_t w, float* acc) {
  ZF_NORM_DISPATCH(path, strided_accumulate<Norm>(p, ld, rows, w, acc))
}

#undef ZF_NORM_DISPATCH

} // namespace detail
ZF_NAMESPACE_END
