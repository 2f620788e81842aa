/// @file
/// The body of <zenflow/math/fp.hpp>, the name users include. It lives in core/ because core's own
/// detail headers (simd_ops.hpp, moment_q8.hpp) compute with it and core stands below math/.
///
/// fp32 and fp64 arithmetic with the same bits on the host and the device, whatever the flags a
/// consumer compiles with: every operation correctly rounded (IEEE round to nearest even),
/// subnormals kept, and never contracted into an FMA. Every bit-exact formula of zenflow (the
/// AdamW update, the step scalars, the L1 masses, the norms' folds, the int8 moments) is written
/// in these, and an FMA is written as `fma_f` / `fma_d` where one is meant.
///
/// Why explicit: compilers fuse `a * b + c` into one FMA (one rounding instead of two) wherever
/// the target has one, and differently per compiler and flag. GCC does it at -O2 and above
/// (`-ffp-contract=fast` is its default in C++, ISO mode included) with any `-march` that has FMA
/// and inside every `target("avx2")` function, also across statements and on vector intrinsics;
/// clang within one expression (`-ffp-contract=on`) and across statements under `=fast`; nvcc by
/// default (`-fmad=true`), and ptxas fuses a `mul.f32` with an `add.f32`. So:
/// - on the device, inline PTX with an explicit rounding mode and no `.ftz` (`mul.rn.f32`, ...):
///   ptxas never fuses a `.rn` operation, and `-ftz=true` / `--use_fast_math` do not turn it into
///   an `.ftz` one (the `__fmul_rn` intrinsics would become `mul.rn.ftz.f32` there);
/// - on the host, each product passes through an empty `asm` (`opaque`) before it is used, so the
///   compiler cannot see that an add follows it. The cost is nil in registers, but a plain loop
///   over these helpers is not auto-vectorised; the hot host loops are written with the SIMD ops
///   (core/detail/simd_ops.hpp), whose `mul` does the same per register.
/// The host branch gives the device branch's bits, so kernels' code compiled by the host compiler
/// (the host twins, an emulator) computes what the GPU computes. Two checks find a product not
/// written this way: scripts/check-fp-contract (the host code's assembly with and without
/// contraction) and scripts/check-ptx-ftz (the kernels' PTX under -fmad=true and false). Not
/// covered: `-ffast-math` / `-Ofast` (they reassociate sums and flush subnormals on the host) and
/// x87 arithmetic (32-bit x86 without SSE).
#pragma once

#include <cmath>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// `x` unchanged, hidden from the host optimiser (no instruction is emitted): a product passed
/// through it is rounded to its type before anything is added to it.
template <class F>
ZF_FORCEINLINE F opaque(F x) {
#if defined(__GNUC__) && defined(__x86_64__)
  __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  volatile F v = x; // other targets: a store and a load, correct if slower
  x = v;
#endif
  return x;
}

ZF_HOST_DEVICE ZF_FORCEINLINE float mul_f(float a, float b) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return opaque(a * b);
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE float add_f(float a, float b) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a + b;
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE float sub_f(float a, float b) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a - b;
#endif
}
/// a * b + c with one rounding.
ZF_HOST_DEVICE ZF_FORCEINLINE float fma_f(float a, float b, float c) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
#else
  return std::fma(a, b, c);
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE float div_f(float a, float b) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE float sqrt_f(float a) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  return std::sqrt(a);
#endif
}

// fp64 has no `.ftz` on the device; the _rn intrinsics are `mul.rn.f64` etc., which ptxas never
// fuses.
ZF_HOST_DEVICE ZF_FORCEINLINE double mul_d(double a, double b) {
#if ZF_DEVICE_COMPILE
  return __dmul_rn(a, b);
#else
  return opaque(a * b);
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE double add_d(double a, double b) {
#if ZF_DEVICE_COMPILE
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE double sub_d(double a, double b) {
#if ZF_DEVICE_COMPILE
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE double fma_d(double a, double b, double c) {
#if ZF_DEVICE_COMPILE
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE double div_d(double a, double b) {
#if ZF_DEVICE_COMPILE
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE double sqrt_d(double a) {
#if ZF_DEVICE_COMPILE
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

} // namespace detail
ZF_NAMESPACE_END
