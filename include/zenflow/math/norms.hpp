/// @file
/// Per-element arithmetic of the channel-norm reducers, shared by the kernels and the host
/// backend: the norm term, fp32 accumulation and the NaN/Inf test on raw working-type bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN

/// Which per-channel importance score a reducer computes.
enum class channel_norm : std::uint8_t {
  /// Sum of squares (squared L2 norm): ZenFlow's score. The sum of the scores is the squared
  /// global gradient norm.
  sq_l2,
  /// Sum of absolute values (L1 norm): what DeepSpeed's implementation computes.
  l1,
};

namespace detail {

/// `acc` plus the contribution of `x` to a channel's score (fp32 accumulation).
template <channel_norm Norm>
ZF_HOST_DEVICE ZF_FORCEINLINE float norm_accumulate(float acc, float x) {
  if constexpr (Norm == channel_norm::sq_l2) {
    return acc + x * x;
  } else {
#if ZF_DEVICE_COMPILE
    return acc + fabsf(x);
#else
    return acc + std::fabs(x);
#endif
  }
}

/// True when the working-precision value `v` is NaN or infinite (a test on its raw bits, so that
/// it costs one AND and one compare and never depends on fast-math flags).
template <class T>
ZF_HOST_DEVICE ZF_FORCEINLINE bool is_nonfinite(T v) {
  const std::uint32_t bits = bit_pattern(v);
  if constexpr (std::is_same_v<T, float>) {
    return (bits & 0x7f800000u) == 0x7f800000u;
  } else if constexpr (std::is_same_v<T, half>) {
    return (bits & 0x7c00u) == 0x7c00u;
  } else {
    return (bits & 0x7f80u) == 0x7f80u;
  }
}

} // namespace detail

ZF_NAMESPACE_END
