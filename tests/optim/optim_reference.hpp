// Independent references for the optimizer tests: a float64 AdamW (torch's formula), and
// helpers shared by the cpu and gpu tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/math/adam.hpp>

namespace zf_optim_test {

/// torch.optim.AdamW / Adam(weight_decay) in float64, one element.
struct ref_state {
  double p = 0, m = 0, v = 0;
};

inline void ref_step(ref_state& s, double grad, double scale, const zenflow::adamw_hparams& hp, int count) {
  double g = grad * scale;
  const double lr = hp.lr, wd = hp.weight_decay, b1 = hp.beta1, b2 = hp.beta2;
  if (!hp.decoupled) {
    g += wd * s.p;
  } else {
    s.p *= 1.0 - lr * wd;
  }
  s.m = b1 * s.m + (1.0 - b1) * g;
  s.v = b2 * s.v + (1.0 - b2) * g * g;
  const double bc1 = 1.0 - std::pow(b1, count);
  const double bc2 = 1.0 - std::pow(b2, count);
  const double denom = std::sqrt(s.v) / std::sqrt(bc2) + static_cast<double>(hp.eps);
  s.p -= lr / bc1 * s.m / denom;
}

/// |a - b| <= atol + rtol * |b|
inline ::testing::AssertionResult near(double a, double b, double atol, double rtol) {
  if (std::isnan(a) && std::isnan(b)) {
    return ::testing::AssertionSuccess();
  }
  if (std::abs(a - b) <= atol + rtol * std::abs(b)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << a << " vs " << b << " (diff " << std::abs(a - b) << ")";
}

template <class T>
std::uint32_t bits(T v) {
  return zenflow::bit_pattern(v);
}

/// Uniform-ish random floats in [-scale, scale] (seeded).
inline std::vector<float> uniform(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> out(n);
  for (auto& x : out) {
    x = d(gen);
  }
  return out;
}

/// Positive random values for v (second moments) so that several-step tests start from a
/// realistic state, not from zeros.
inline std::vector<float> positive(std::size_t n, std::uint64_t seed, float scale = 1e-2f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) {
    x = d(gen);
  }
  return out;
}

template <class T>
std::vector<T> narrow(const std::vector<float>& in) {
  std::vector<T> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    out[i] = zenflow::from_float<T>(in[i]);
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  // An empty vector's data() may be null, which memcmp must not get (even with a zero size).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) {
    return "f32";
  } else if constexpr (std::is_same_v<T, zenflow::half>) {
    return "f16";
  } else {
    return "bf16";
  }
}

} // namespace zf_optim_test
