/// @file
/// Working-precision types (float, `__half`, `__nv_bfloat16`) usable from host and device code,
/// with float accumulation and round-to-nearest-even conversion.
///
/// On the device the conversions are the CUDA intrinsics; on the host they are bit-exact
/// software versions of the same rounding, so that the host backend writes the same bits as
/// the kernels (NaN payloads aside: every NaN stays a NaN).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

using half = __half;
using bfloat16 = __nv_bfloat16;

/// Runtime tag of a working precision.
enum class dtype : std::uint8_t { f32, f16, bf16 };

template <class T>
inline constexpr bool is_working_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <class T>
[[nodiscard]] constexpr dtype dtype_of() {
  static_assert(is_working_type_v<T>, "zenflow: working type must be float, __half or __nv_bfloat16");
  if constexpr (std::is_same_v<T, float>) {
    return dtype::f32;
  } else if constexpr (std::is_same_v<T, half>) {
    return dtype::f16;
  } else {
    return dtype::bf16;
  }
}

[[nodiscard]] constexpr std::size_t dtype_size(dtype t) {
  return t == dtype::f32 ? 4 : 2;
}

[[nodiscard]] constexpr std::string_view dtype_name(dtype t) {
  return t == dtype::f32 ? "f32" : (t == dtype::f16 ? "f16" : "bf16");
}

/// Accumulation type for a working type: always float (fp32 accumulation everywhere).
template <class T>
using accum_t = float;

namespace detail {

ZF_HOST_DEVICE ZF_FORCEINLINE std::uint32_t float_bits(float f) {
#if ZF_DEVICE_COMPILE
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ZF_HOST_DEVICE ZF_FORCEINLINE float bits_float(std::uint32_t u) {
#if ZF_DEVICE_COMPILE
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/// |x| by clearing the sign bit: exact, the same bits as std::fabs on the host, and without an
/// `.ftz` form on the device (fabsf compiles to `abs.ftz.f32` under -ftz=true / --use_fast_math,
/// which flushes a subnormal to zero).
ZF_HOST_DEVICE ZF_FORCEINLINE float abs_f32(float x) {
  return bits_float(float_bits(x) & 0x7fffffffu);
}

/// float -> double, exact, a subnormal kept on the device whatever the consumer's flags (inline
/// `cvt.f64.f32`: a plain conversion is `cvt.ftz.f64.f32` under -ftz=true, which flushes it).
ZF_HOST_DEVICE ZF_FORCEINLINE double f32_to_f64(float x) {
#if ZF_DEVICE_COMPILE
  double r;
  asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
  return r;
#else
  return static_cast<double>(x);
#endif
}

/// double -> float, round to nearest even, a subnormal result kept on the device whatever the
/// consumer's flags (inline `cvt.rn.f32.f64`, not `cvt.rn.ftz.f32.f64`).
ZF_HOST_DEVICE ZF_FORCEINLINE float f64_to_f32(double x) {
#if ZF_DEVICE_COMPILE
  float r;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
  return r;
#else
  return static_cast<float>(x);
#endif
}

/// float -> binary16 bits, round to nearest even, overflow to infinity, subnormals kept.
ZF_HOST_DEVICE constexpr std::uint16_t float_to_half_bits_rne(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) { // Inf or NaN (NaN made quiet)
    return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (x >= 0x477ff000u) { // >= 65520 rounds past the largest half
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (x < 0x38800000u) { // below 2^-14: half subnormal (or zero), in units of 2^-24
    const std::uint32_t e = x >> 23;
    const std::uint32_t shift = 126u - e; // >= 14
    if (shift > 31u) {
      return static_cast<std::uint16_t>(sign);
    }
    const std::uint32_t m = (x & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    r += (rem > halfway || (rem == halfway && (r & 1u))) ? 1u : 0u;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t h = ((x - 0x38000000u) >> 13); // rebias exponent 127 -> 15, keep 10 mantissa bits
  const std::uint32_t rem = x & 0x1fffu;
  h += (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | h);
}

/// binary16 bits -> float bits (exact).
ZF_HOST_DEVICE constexpr std::uint32_t half_bits_to_float_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) {
    return sign | 0x7f800000u | (m << 13);
  }
  if (e != 0) {
    return sign | ((e + 112u) << 23) | (m << 13);
  }
  if (m == 0) {
    return sign;
  }
  // Subnormal: normalise.
  std::uint32_t exp = 113u;
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --exp;
  }
  return sign | (exp << 23) | ((m & 0x3ffu) << 13);
}

/// float -> bfloat16 bits, round to nearest even (NaN made quiet).
ZF_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits_rne(std::uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

ZF_HOST_DEVICE ZF_FORCEINLINE std::uint16_t raw_bits(half h) {
  return static_cast<__half_raw>(h).x;
}
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint16_t raw_bits(bfloat16 h) {
  return static_cast<__nv_bfloat16_raw>(h).x;
}

template <class T>
ZF_HOST_DEVICE ZF_FORCEINLINE T from_raw_bits(std::uint16_t bits) {
  if constexpr (std::is_same_v<T, half>) {
    __half_raw r;
    r.x = bits;
    return half(r);
  } else {
    __nv_bfloat16_raw r;
    r.x = bits;
    return bfloat16(r);
  }
}

} // namespace detail

/// Widens a working-precision value to float (exact).
ZF_HOST_DEVICE ZF_FORCEINLINE float to_float(float v) {
  return v;
}
ZF_HOST_DEVICE ZF_FORCEINLINE float to_float(half v) {
#if ZF_DEVICE_COMPILE
  return __half2float(v);
#else
  return detail::bits_float(detail::half_bits_to_float_bits(detail::raw_bits(v)));
#endif
}
ZF_HOST_DEVICE ZF_FORCEINLINE float to_float(bfloat16 v) {
  return detail::bits_float(static_cast<std::uint32_t>(detail::raw_bits(v)) << 16);
}

/// Narrows a float to working precision with round-to-nearest-even.
template <class T>
ZF_HOST_DEVICE ZF_FORCEINLINE T from_float(float v) {
  static_assert(is_working_type_v<T>, "zenflow: working type must be float, __half or __nv_bfloat16");
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, half>) {
#if ZF_DEVICE_COMPILE
    return __float2half_rn(v);
#else
    return detail::from_raw_bits<half>(detail::float_to_half_bits_rne(detail::float_bits(v)));
#endif
  } else {
#if ZF_DEVICE_COMPILE
    return __float2bfloat16_rn(v);
#else
    return detail::from_raw_bits<bfloat16>(detail::float_to_bf16_bits_rne(detail::float_bits(v)));
#endif
  }
}

/// The raw 16/32-bit pattern of a working-precision value (for bit-exact comparisons).
template <class T>
ZF_HOST_DEVICE ZF_FORCEINLINE std::uint32_t bit_pattern(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::float_bits(v);
  } else {
    return detail::raw_bits(v);
  }
}

/// True when `v` is neither NaN nor infinite.
ZF_HOST_DEVICE ZF_FORCEINLINE bool is_finite(float v) {
  return (detail::float_bits(v) & 0x7f800000u) != 0x7f800000u;
}

ZF_NAMESPACE_END
