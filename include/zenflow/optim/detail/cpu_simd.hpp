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
#include <type_traits>

#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/detail/moment_rounding.hpp>
#include <zenflow/core/detail/simd_ops.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::cpu_scalar {
using ops = simd_scalar::ops;
#define ZF_CPU_SIMD_BODY 1
#include <zenflow/optim/detail/cpu_simd_body.hpp>
#undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_scalar

#if ZF_CPU_X86_DISPATCH
ZF_SIMD_TARGET_AVX2_BEGIN
namespace detail::cpu_avx2 {
using ops = simd_avx2::ops;
#  define ZF_CPU_SIMD_BODY 1
#  include <zenflow/optim/detail/cpu_simd_body.hpp>
#  undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_avx2
ZF_SIMD_TARGET_AVX2_END

ZF_SIMD_TARGET_AVX512_BEGIN
namespace detail::cpu_avx512 {
using ops = simd_avx512::ops;
#  define ZF_CPU_SIMD_BODY 1
#  include <zenflow/optim/detail/cpu_simd_body.hpp>
#  undef ZF_CPU_SIMD_BODY
} // namespace detail::cpu_avx512
ZF_SIMD_TARGET_AVX512_END
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

template <class G, class T, class M = float>
void adam_span(float* master,
               M* m,
               M* v,
               const G* grad,
               T* out,
               std::int64_t n,
               const adam_constants& c,
               float scale,
               std::int64_t index0 = 0,
               std::uint32_t count = 0) {
  ZF_CPU_DISPATCH(adam_span<G, T, M>(master, m, v, grad, out, n, c, scale, index0, count))
}

template <class S>
void accumulate_span(float* acc, const S* slot, float coef, std::int64_t n) {
  ZF_CPU_DISPATCH(accumulate_span<S>(acc, slot, coef, n))
}

template <class S, class T, class M = float>
void window_span(float* acc,
                 const S* slot,
                 float coef,
                 float* master,
                 M* m,
                 M* v,
                 T* out,
                 std::int64_t n,
                 const adam_constants& c,
                 float scale,
                 std::int64_t index0 = 0,
                 std::uint32_t count = 0,
                 bool keep_acc = false) {
  ZF_CPU_DISPATCH(
      window_span<S, T, M>(acc, slot, coef, master, m, v, out, n, c, scale, index0, count, keep_acc))
}

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
  ZF_CPU_DISPATCH(
      window_row_q8<S, T>(acc, slot, coef, master, m, v, out, n, c, scale, index0, count, keep_acc))
}

template <class S>
void assign_span(float* acc, const S* slot, float coef, std::int64_t n) {
  ZF_CPU_DISPATCH(assign_span<S>(acc, slot, coef, n))
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
