/// @file
/// The pieces the float64 ZenFlow reference (zenflow_reference.hpp) builds on: the working-dtype
/// rounding, the AdamW update in double, and the channel top-k by brute force; written from the
/// AdamW paper's update and docs/primitives.md, not from zenflow's kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/math/adam.hpp>

#include "select/reference.hpp"

namespace zf_test {

/// `x` as the engine would store it in a working weight of type `dt`: double -> float -> dtype.
inline double round_to_dtype(double x, zenflow::dtype dt) {
  const float f = static_cast<float>(x);
  switch (dt) {
  case zenflow::dtype::f32:
    return f;
  case zenflow::dtype::f16:
    return zenflow::to_float(zenflow::from_float<zenflow::half>(f));
  case zenflow::dtype::bf16:
    return zenflow::to_float(zenflow::from_float<zenflow::bfloat16>(f));
  }
  return f;
}

/// One AdamW (or Adam + L2) update in double; `count` is the update count including this one.
/// `steps` > 1: the update stands for that many steps of gradient g (a host window with
/// host_moments_per_step): the moments forget as `steps` updates would, b^steps, and `count`
/// counts steps.
inline void reference_adam(double& p,
                           double& m,
                           double& v,
                           double g,
                           double lr,
                           std::int32_t count,
                           const zenflow::adamw_hparams& h,
                           std::int32_t steps = 1) {
  const double b1 = h.beta1;
  const double b2 = h.beta2;
  const double wd = h.weight_decay;
  if (!h.decoupled) {
    g += wd * p;
  }
  const double d1 = std::pow(b1, steps);
  const double d2 = std::pow(b2, steps);
  m = d1 * m + (1.0 - d1) * g;
  v = d2 * v + (1.0 - d2) * g * g;
  const double bc1 = 1.0 - std::pow(b1, count);
  const double bc2 = 1.0 - std::pow(b2, count);
  const double denom = std::sqrt(v) / std::sqrt(bc2) + static_cast<double>(h.eps);
  if (h.decoupled) {
    p *= 1.0 - lr * wd;
  }
  p -= lr / bc1 * m / denom;
}

/// The `k` channels of the row-major `channels` x `len` gradient `g` with the largest importance
/// (the double sum of x^2, or of |x| with "l1"), ties to the lower index, ascending: a full sort.
inline std::vector<std::int32_t> reference_topk_channels(const std::vector<float>& g,
                                                         std::int64_t channels,
                                                         std::int64_t len,
                                                         std::int64_t k,
                                                         zenflow::channel_norm kind) {
  const std::vector<double> score =
      reference_norms(g.data(), channels, len, len, zenflow::channel_layout::contiguous, kind);
  std::vector<std::int32_t> order(static_cast<std::size_t>(channels));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
  });
  std::vector<std::int32_t> sel(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(sel.begin(), sel.end());
  return sel;
}

} // namespace zf_test
