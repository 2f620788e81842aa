/// @file
/// Run-time SIMD dispatch of the host channel-norm loops: AVX-512, AVX2 (+F16C) and scalar.
///
/// Each path is compiled with a function-level target (ZF_SIMD_TARGET_*_BEGIN around its code), so
/// consumers never need `-march=native`; the best path the CPU supports is picked at run time
/// (`host::active_simd_path()` in <zenflow/core/cpu_simd.hpp>, shared with the CPU AdamW). The
/// register operations are the shared ones of <zenflow/core/detail/simd_ops.hpp>, whose products
/// stay rounded (never contracted into an FMA), so every path computes the same bits.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/detail/simd_ops.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/select/detail/norm_order.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::norm_scalar {
using ops = simd_scalar::ops;
#define ZF_NORM_SIMD_BODY 1
#include <zenflow/select/detail/norm_simd_body.hpp>
#undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_scalar

#if ZF_CPU_X86_DISPATCH
ZF_SIMD_TARGET_AVX2_BEGIN
namespace detail::norm_avx2 {
using ops = simd_avx2::ops;
#  define ZF_NORM_SIMD_BODY 1
#  include <zenflow/select/detail/norm_simd_body.hpp>
#  undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_avx2
ZF_SIMD_TARGET_AVX2_END

ZF_SIMD_TARGET_AVX512_BEGIN
namespace detail::norm_avx512 {
using ops = simd_avx512::ops;
#  define ZF_NORM_SIMD_BODY 1
#  include <zenflow/select/detail/norm_simd_body.hpp>
#  undef ZF_NORM_SIMD_BODY
} // namespace detail::norm_avx512
ZF_SIMD_TARGET_AVX512_END
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
#  define ZF_NORM_DISPATCH(path, ...)                                                                        \
    (void)(path);                                                                                            \
    return norm_scalar::__VA_ARGS__;
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
