/// @file
/// The model's pointwise arithmetic, shared by the CUDA kernels and the host backend so that both
/// compute the same function (llm.c's rule: each kernel next to its CPU reference).
#pragma once

#include <cmath>

#include <zenflow/core/config.hpp>

namespace charlm {

/// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class Real>
ZF_HOST_DEVICE inline Real gelu(Real x) {
  using std::tanh;
  const Real k = Real(0.7978845608028654);
  const Real u = k * (x + Real(0.044715) * x * x * x);
  return Real(0.5) * x * (Real(1) + tanh(u));
}

/// d gelu / dx.
template <class Real>
ZF_HOST_DEVICE inline Real gelu_grad(Real x) {
  using std::tanh;
  const Real k = Real(0.7978845608028654);
  const Real u = k * (x + Real(0.044715) * x * x * x);
  const Real t = tanh(u);
  return Real(0.5) * (Real(1) + t) +
         Real(0.5) * x * (Real(1) - t * t) * k * (Real(1) + Real(3 * 0.044715) * x * x);
}

} // namespace charlm
