/// @file
/// The one AdamW update of zenflow, shared by every path (GPU dense, GPU selective, CPU SIMD,
/// the fused host window), so that all of them compute the same bits.
///
/// The update, for fp32 master `p`, fp32 moments `m`, `v`, gradient `grad` (any working type,
/// widened exactly to float), gradient scale `s` and update count `t` (the number of updates
/// these moments have seen, this one included):
///
///     g  = grad * s
///     g  = fma(wd, p, g)                       (Adam with L2 only: decoupled == false)
///     m  = fma(beta1, m, (1 - beta1) * g)
///     v  = fma((1 - beta2) * g, g, beta2 * v)
///     d  = fma(sqrt(v), 1 / sqrt(1 - beta2^t), eps)
///     p  = fma(-lr / (1 - beta1^t), m / d, p * (1 - lr * wd))   (decoupled; the factor is 1 with L2)
///
/// Every product that could be contracted is written as an explicit fma, and every remaining
/// operation (mul, div, sqrt) is correctly rounded in IEEE fp32 on both the host and the device,
/// so the CPU paths (scalar, AVX2, AVX-512) and the kernels agree bit for bit. The bias
/// corrections are computed in double by exact repeated squaring (no `pow`, whose last bit
/// differs between libm and CUDA) and rounded once to float.
///
/// This is `torch.optim.AdamW` (and `torch.optim.Adam` with `weight_decay` when `decoupled` is
/// false) up to the rounding of fp32 operations (torch computes `m` with lerp and the
/// denominator with a division); tests/optim checks agreement with exported torch vectors.
///
/// NaN/Inf: the arithmetic is plain IEEE. A non-finite gradient makes `m`, `v` and the master of
/// the elements it touches NaN (Inf for an infinite gradient in `v`) and nothing else; the
/// engine detects such steps beforehand and skips them (`skip` flag), so a skipped step changes
/// nothing. A primitive never hides or clamps a non-finite value.
#pragma once

#include <cmath>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/fp.hpp>

ZF_NAMESPACE_BEGIN

/// Hyper-parameters of one AdamW step (the same for every element of a call).
struct adamw_hparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  /// true: AdamW (decoupled weight decay); false: Adam with L2 (wd * p added to the gradient).
  bool decoupled = true;
};

/// The per-count constants of one update, computed once per tensor / channel.
struct adam_constants {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float neg_step_size; ///< -lr / (1 - beta1^t)
  float inv_sqrt_bc2;  ///< 1 / sqrt(1 - beta2^t)
  float decay;         ///< 1 - lr * wd with decoupled decay, else 1
  float l2;            ///< wd with L2 (decoupled == false), else 0
};

namespace detail {
/// base^n for n >= 0 by repeated squaring in double: the same operations on host and device.
ZF_HOST_DEVICE inline double pow_int(double base, std::int32_t n) {
  double result = 1.0;
  auto e = static_cast<std::uint32_t>(n);
  while (e != 0) {
    if ((e & 1u) != 0) {
      result = mul_d(result, base);
    }
    base = mul_d(base, base);
    e >>= 1;
  }
  return result;
}
} // namespace detail

/// Constants for the update whose count (this update included) is `count` (>= 1; a count
/// <= 0 is treated as 1).
ZF_HOST_DEVICE inline adam_constants make_adam_constants(const adamw_hparams& hp, std::int32_t count) {
  const std::int32_t t = count < 1 ? 1 : count;
  // The conversions as f32_to_f64 / f64_to_f32 (inline PTX on the device): a plain cast is
  // cvt.ftz under -ftz=true, and float(1.0 - double(b)) may be folded into sub.ftz.f32 there.
  const double bc1 = 1.0 - detail::pow_int(detail::f32_to_f64(hp.beta1), t);
  const double bc2 = 1.0 - detail::pow_int(detail::f32_to_f64(hp.beta2), t);
  adam_constants c{};
  c.beta1 = hp.beta1;
  c.one_minus_beta1 = detail::f64_to_f32(1.0 - detail::f32_to_f64(hp.beta1));
  c.beta2 = hp.beta2;
  c.one_minus_beta2 = detail::f64_to_f32(1.0 - detail::f32_to_f64(hp.beta2));
  c.eps = hp.eps;
  c.neg_step_size = detail::f64_to_f32(-detail::f32_to_f64(hp.lr) / bc1);
  c.inv_sqrt_bc2 = detail::f64_to_f32(detail::div_d(1.0, detail::sqrt_d(bc2)));
  c.decay = hp.decoupled ? detail::f64_to_f32(1.0 - detail::mul_d(detail::f32_to_f64(hp.lr),
                                                                  detail::f32_to_f64(hp.weight_decay)))
                         : 1.0f;
  c.l2 = hp.decoupled ? 0.0f : hp.weight_decay;
  return c;
}

/// Constants for one update that stands for `steps` (>= 1) steps of gradient, e.g. a host window
/// on the mean of `steps` gradients, where `count` counts steps (this window's included): the
/// moments decay by beta^steps, as `steps` dense updates with that gradient would decay them, so
/// that the moments' memory is the same number of steps on the host as on the device. steps 1 is
/// make_adam_constants(hp, count) exactly.
inline adam_constants make_window_constants(const adamw_hparams& hp, std::int32_t count, std::int32_t steps) {
  adam_constants c = make_adam_constants(hp, count);
  if (steps > 1) {
    const double b1 = detail::pow_int(static_cast<double>(hp.beta1), steps);
    const double b2 = detail::pow_int(static_cast<double>(hp.beta2), steps);
    c.beta1 = static_cast<float>(b1);
    c.one_minus_beta1 = static_cast<float>(1.0 - b1);
    c.beta2 = static_cast<float>(b2);
    c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  }
  return c;
}

/// One element's update on fp32 state; `g` is the widened gradient, `scale` the gradient scale.
/// Returns the new master value (also stored in `master`).
ZF_HOST_DEVICE ZF_FORCEINLINE float
adam_update(float& master, float& m, float& v, float g, float scale, const adam_constants& c) {
  g = detail::mul_f(g, scale);
  g = detail::fma_f(c.l2, master, g);
  const float mn = detail::fma_f(c.beta1, m, detail::mul_f(c.one_minus_beta1, g));
  const float vn = detail::fma_f(detail::mul_f(c.one_minus_beta2, g), g, detail::mul_f(c.beta2, v));
  const float denom = detail::fma_f(detail::sqrt_f(vn), c.inv_sqrt_bc2, c.eps);
  const float pn = detail::fma_f(c.neg_step_size, detail::div_f(mn, denom), detail::mul_f(master, c.decay));
  m = mn;
  v = vn;
  master = pn;
  return pn;
}

/// The same with a working-precision gradient.
template <class G>
ZF_HOST_DEVICE ZF_FORCEINLINE float
adam_update(float& master, float& m, float& v, G grad, float scale, const adam_constants& c) {
  return adam_update(master, m, v, to_float(grad), scale, c);
}

/// The accumulation of the host window: `acc + coef * x` (explicit fma, same bits everywhere).
ZF_HOST_DEVICE ZF_FORCEINLINE float accumulate_value(float acc, float coef, float x) {
  return detail::fma_f(coef, x, acc);
}

/// Validity of hyper-parameters (used by every launcher's argument checks): returns the name of
/// the first bad field, or nullptr.
inline const char* invalid_adamw_hparam(const adamw_hparams& hp) {
  if (!std::isfinite(hp.lr) || hp.lr < 0.0f) {
    return "hp.lr";
  }
  if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f)) {
    return "hp.beta1";
  }
  if (!(hp.beta2 >= 0.0f && hp.beta2 < 1.0f)) {
    return "hp.beta2";
  }
  if (!(hp.eps > 0.0f) || !std::isfinite(hp.eps)) {
    return "hp.eps";
  }
  if (!std::isfinite(hp.weight_decay) || hp.weight_decay < 0.0f) {
    return "hp.weight_decay";
  }
  return nullptr;
}

ZF_NAMESPACE_END
