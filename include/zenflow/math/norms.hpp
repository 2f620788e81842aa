/// @file
/// Per-element arithmetic of the channel-norm reducers, shared by the kernels and the host
/// backend: the norm term, fp32 accumulation and the NaN/Inf test on raw working-type bits; and
/// the engine's fp64 squared global norm over the fp32 scores (overflow-safe, same order on both).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/fp.hpp>

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

/// `acc` plus the contribution of `x` to a channel's score (fp32 accumulation). The square is
/// rounded before it is added (math/fp.hpp: never contracted into an fma) and subnormals are kept
/// (inline PTX on the device, whatever the consumer's flags), as the host's loops do: the same bits
/// on both (select/detail/norm_order.hpp).
template <channel_norm Norm>
ZF_HOST_DEVICE ZF_FORCEINLINE float norm_accumulate(float acc, float x) {
  // |x| as a bit clear: fabsf would be abs.ftz.f32 under -ftz=true.
  return add_f(acc, Norm == channel_norm::sq_l2 ? mul_f(x, x) : abs_f32(x));
}

/// a + b, correctly rounded, subnormals kept on the device whatever the consumer's flags (the
/// folds of the score's partial sums).
ZF_HOST_DEVICE ZF_FORCEINLINE float norm_add(float a, float b) {
  return add_f(a, b);
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

/// Lanes of the engine's overflow-safe squared global norm (`sq_total_lane`, `sum_lanes`): one
/// block of this many threads per tensor on the device, the same lane loop on the host.
inline constexpr int sq_total_lanes = 256;

/// Squared L2 norm of one channel in fp64, its elements in order. A float's square is exact in
/// fp64 (24 + 24 < 53 mantissa bits), so even an fma would give the same bits, and no finite
/// element can overflow it (FLT_MAX^2 ~ 1.2e77).
template <class T>
ZF_HOST_DEVICE double channel_sq_f64(const T* first, std::int64_t len, std::int64_t stride) {
  double s = 0.0;
  for (std::int64_t i = 0; i < len; ++i) {
    const double x = f32_to_f64(to_float(first[i * stride])); // cvt without .ftz
    s = add_d(s, mul_d(x, x)); // an fma would give these bits too (exact square): pinned for the checks
  }
  return s;
}

/// Channel `c`'s fp64 squared norm where its fp32 score is not finite (an fp32 sum that
/// overflowed, or a NaN/Inf element), else 0: the rescan `sq_total_lane` does for such channels.
/// Data parallel computes it on the rank that holds the channel's mean gradient, and the ranks sum
/// it with zeros from the others, which is exact (device_owner_reduction.hpp).
template <class T>
ZF_HOST_DEVICE double sq_rescan_channel(channel_matrix<const T> grad, const float* scores, std::int64_t c) {
  if (is_finite(scores[c])) {
    return 0.0;
  }
  const bool contiguous = grad.layout == channel_layout::contiguous;
  return channel_sq_f64(grad.data + grad.offset(c, 0), grad.channel_len, contiguous ? 1 : grad.ld);
}

/// One lane's share of a tensor's squared norm: channels lane, lane + sq_total_lanes, ... of the
/// fp32 `scores`, in order, in fp64. A score that is not finite (an fp32 sum that overflowed, or a
/// NaN/Inf element) is recomputed from the gradient in fp64 (`sq_rescan_channel`), so that a
/// finite gradient's norm never overflows; the rescan runs only on such channels. `rescan`
/// (nullable): those rescans computed already (rescan[c], for every channel whose score is not
/// finite), the gradient not read.
template <class T>
ZF_HOST_DEVICE double
sq_total_lane(channel_matrix<const T> grad, const float* scores, int lane, const double* rescan = nullptr) {
  double s = 0.0;
  for (std::int64_t c = lane; c < grad.channels; c += sq_total_lanes) {
    const float score = scores[c];
    if (is_finite(score)) {
      s += f32_to_f64(score); // a subnormal score kept under -ftz=true
    } else {
      s += rescan != nullptr ? rescan[c] : sq_rescan_channel(grad, scores, c);
    }
  }
  return s;
}

/// The sum of the lanes, in lane order (both sides: the device's block reduction is this loop).
ZF_HOST_DEVICE inline double sum_lanes(const double* lanes) {
  double s = 0.0;
  for (int j = 0; j < sq_total_lanes; ++j) {
    s += lanes[j];
  }
  return s;
}

} // namespace detail

ZF_NAMESPACE_END
