/// @file
/// Run-time choice of the host SIMD path (AVX-512, AVX2 + FMA + F16C, or scalar), shared by every
/// vectorised host loop (CPU AdamW, host channel norms).
///
/// Each path's code is compiled with a function-level target (ZF_SIMD_TARGET_*_BEGIN around it), so
/// consumers never need `-march=native`; the best path this CPU supports is picked at run time
/// (`__builtin_cpu_supports`). Every path computes the same bits, so the choice changes speed
/// only; tests force each path with `host::force_simd_path`.
#pragma once

#include <atomic>
#include <cstdint>

#include <zenflow/core/config.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) // GCC and clang
#  define ZF_CPU_X86_DISPATCH 1
#  include <cpuid.h>
#  include <immintrin.h>
#else
#  define ZF_CPU_X86_DISPATCH 0
#endif

// A region of code compiled for one path's ISA (ZF_SIMD_TARGET_AVX2_BEGIN ... ZF_SIMD_TARGET_END):
// GCC's target pragmas; clang's equivalent applies the target attribute to every function
// declared in the region. GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own
// "undefined" registers (GCC bug 105593): silenced inside the AVX-512 regions only.
#if ZF_CPU_X86_DISPATCH && defined(__clang__)
#  define ZF_SIMD_TARGET_AVX2_BEGIN                                                                          \
    _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#  define ZF_SIMD_TARGET_AVX512_BEGIN                                                                        \
    _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx2,fma,f16c\"))), apply_to = function)")
#  define ZF_SIMD_TARGET_AVX2_END _Pragma("clang attribute pop")
#  define ZF_SIMD_TARGET_AVX512_END _Pragma("clang attribute pop")
#elif ZF_CPU_X86_DISPATCH
#  define ZF_SIMD_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#  define ZF_SIMD_TARGET_AVX512_BEGIN                                                                        \
    _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx2,fma,f16c\")")                             \
        _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#  define ZF_SIMD_TARGET_AVX2_END _Pragma("GCC pop_options")
#  define ZF_SIMD_TARGET_AVX512_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif

ZF_NAMESPACE_BEGIN

namespace detail {
#if ZF_CPU_X86_DISPATCH
/// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c"). The OS's
/// saving of the AVX registers is what __builtin_cpu_supports("avx2") checks beside it.
inline bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

inline std::atomic<int>& forced_simd_path() {
  static std::atomic<int> forced{-1};
  return forced;
}
} // namespace detail

namespace host {

/// The host SIMD paths.
enum class simd_path : std::uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };

[[nodiscard]] inline const char* simd_path_name(simd_path p) {
  return p == simd_path::avx512 ? "avx512" : (p == simd_path::avx2 ? "avx2" : "scalar");
}

/// True when this CPU (and this build) can run path `p`.
[[nodiscard]] inline bool simd_path_supported(simd_path p) {
  switch (p) {
  case simd_path::scalar:
    return true;
#if ZF_CPU_X86_DISPATCH
  case simd_path::avx2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           ::zenflow::detail::cpu_has_f16c();
  case simd_path::avx512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && ::zenflow::detail::cpu_has_f16c();
#endif
  default:
    return false;
  }
}

/// The fastest supported path.
[[nodiscard]] inline simd_path best_simd_path() {
  static const simd_path best =
      simd_path_supported(simd_path::avx512)
          ? simd_path::avx512
          : (simd_path_supported(simd_path::avx2) ? simd_path::avx2 : simd_path::scalar);
  return best;
}

/// Forces every later vectorised host call of the process onto path `p` (tests, benchmarks).
/// Returns false (and changes nothing) when `p` is not supported here.
inline bool force_simd_path(simd_path p) {
  if (!simd_path_supported(p)) {
    return false;
  }
  ::zenflow::detail::forced_simd_path().store(static_cast<int>(p), std::memory_order_relaxed);
  return true;
}

/// Back to automatic choice (the best supported path).
inline void reset_simd_path() {
  ::zenflow::detail::forced_simd_path().store(-1, std::memory_order_relaxed);
}

/// The path vectorised host calls take now.
[[nodiscard]] inline simd_path active_simd_path() {
  const int f = ::zenflow::detail::forced_simd_path().load(std::memory_order_relaxed);
  return f < 0 ? best_simd_path() : static_cast<simd_path>(f);
}

} // namespace host

ZF_NAMESPACE_END
