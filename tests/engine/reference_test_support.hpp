// Helpers of the float64 reference's self-checks (reference_test.cpp,
// reference_selection_test.cpp): a small model of three parameters, seeded skewed gradients, a
// plain float64 AdamW over whole tensors, and state comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/random.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_reference_test {

using zenflow::config;
using zenflow::dtype;
using zf_test::round_to_dtype;
using zf_test::zenflow_reference;
using grads_t = std::vector<std::vector<float>>;

struct param_shape {
  bool matrix;
  std::int64_t channels; // 1 for a vector
  std::int64_t len;
  dtype dt;
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(channels * len); }
};

// Two matrices of different precision and a vector: enough to exercise every path.
inline const std::vector<param_shape> model = {
    {true, 12, 5, dtype::f32}, {true, 20, 3, dtype::bf16}, {false, 1, 7, dtype::f16}};

/// Seeded gradients with a skewed channel structure (channel j scaled by exp(-j / 4), so the
/// selection is meaningful and mostly stable), rounded to each parameter's dtype.
class grad_source {
public:
  explicit grad_source(std::uint64_t seed, const std::vector<param_shape>& shapes = model)
      : gen_(seed), shapes_(shapes) {}
  grads_t next() {
    grads_t g;
    for (const param_shape& s : shapes_) {
      std::vector<float> v(s.size());
      for (std::int64_t j = 0; j < s.channels; ++j) {
        const double scale = s.matrix ? std::exp(-static_cast<double>(j) / 4.0) : 1.0;
        for (std::int64_t e = 0; e < s.len; ++e) {
          v[static_cast<std::size_t>(j * s.len + e)] =
              static_cast<float>(round_to_dtype(dist_(gen_) * scale * 0.1, s.dt));
        }
      }
      g.push_back(std::move(v));
    }
    return g;
  }

private:
  std::mt19937_64 gen_;
  std::normal_distribution<double> dist_{0.0, 1.0};
  std::vector<param_shape> shapes_;
};

inline std::vector<std::vector<float>> initial_weights(std::uint64_t seed,
                                                       const std::vector<param_shape>& shapes = model) {
  std::vector<std::vector<float>> w;
  std::uint64_t s = seed;
  for (const param_shape& p : shapes) {
    w.push_back(zf_test::random_values<float>(p.size(), ++s, 0.5f));
  }
  return w;
}

inline void add_model(zenflow_reference& ref,
                      const std::vector<std::vector<float>>& init,
                      const std::vector<param_shape>& shapes = model) {
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].matrix) {
      ref.add_matrix(shapes[i].channels, shapes[i].len, shapes[i].dt, init[i]);
    } else {
      ref.add_vector(shapes[i].len, shapes[i].dt, init[i]);
    }
  }
}

inline double lr_at(std::int64_t t) {
  return 1e-2 * (1.0 + 0.5 * std::cos(0.3 * static_cast<double>(t)));
}

/// Plain float64 AdamW over whole tensors (one count per tensor), written the textbook way:
/// m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd p).
class plain_adamw {
public:
  plain_adamw(const config& cfg,
              const std::vector<std::vector<float>>& init,
              const std::vector<param_shape>& shapes)
      : cfg_(cfg), shapes_(shapes) {
    for (std::size_t i = 0; i < init.size(); ++i) {
      std::vector<double> p(init[i].size());
      for (std::size_t e = 0; e < p.size(); ++e) {
        p[e] = round_to_dtype(init[i][e], shapes[i].dt);
      }
      p_.push_back(p);
      m_.emplace_back(p.size(), 0.0);
      v_.emplace_back(p.size(), 0.0);
    }
  }
  void step(const grads_t& g, double lr) {
    double sq = 0.0;
    for (const auto& x : g) {
      for (const float y : x) {
        if (!std::isfinite(y)) {
          return;
        }
        sq += static_cast<double>(y) * y;
      }
    }
    const double ls = cfg_.loss_scale;
    double coef = 1.0 / ls;
    if (cfg_.gradient_clipping > 0.0f) {
      const double norm = std::sqrt(sq) / ls;
      if (norm + 1e-6 > cfg_.gradient_clipping) {
        coef = cfg_.gradient_clipping / (norm + 1e-6) / ls;
      }
    }
    ++count_;
    const double b1 = cfg_.adam.beta1;
    const double b2 = cfg_.adam.beta2;
    const double wd = cfg_.adam.weight_decay;
    for (std::size_t i = 0; i < p_.size(); ++i) {
      for (std::size_t e = 0; e < p_[i].size(); ++e) {
        double gr = coef * g[i][e];
        double& p = p_[i][e];
        if (!cfg_.adam.decoupled) {
          gr += wd * p;
        }
        m_[i][e] = b1 * m_[i][e] + (1.0 - b1) * gr;
        v_[i][e] = b2 * v_[i][e] + (1.0 - b2) * gr * gr;
        const double mh = m_[i][e] / (1.0 - std::pow(b1, count_));
        const double vh = v_[i][e] / (1.0 - std::pow(b2, count_));
        p -= lr * (mh / (std::sqrt(vh) + cfg_.adam.eps) + (cfg_.adam.decoupled ? wd * p : 0.0));
      }
    }
  }
  [[nodiscard]] const std::vector<double>& master(std::size_t i) const { return p_[i]; }
  [[nodiscard]] double weight(std::size_t i, std::size_t e) const {
    return round_to_dtype(p_[i][e], shapes_[i].dt);
  }

private:
  config cfg_;
  std::vector<param_shape> shapes_;
  std::vector<std::vector<double>> p_, m_, v_;
  int count_ = 0;
};

inline void
expect_matches_plain(const zenflow_reference& ref, const plain_adamw& plain, const std::string& where) {
  SCOPED_TRACE(where);
  for (std::size_t i = 0; i < ref.num_params(); ++i) {
    for (std::size_t e = 0; e < ref.masters(i).size(); ++e) {
      ASSERT_NEAR(ref.masters(i)[e], plain.master(i)[e], 1e-12) << "param " << i << " elem " << e;
      ASSERT_EQ(ref.weights(i)[e], plain.weight(i, e)) << "param " << i << " elem " << e;
    }
  }
}

/// Bitwise equality of everything two references hold.
inline void
expect_same_state(const zenflow_reference& a, const zenflow_reference& b, const std::string& where) {
  SCOPED_TRACE(where);
  for (std::size_t i = 0; i < a.num_params(); ++i) {
    ASSERT_EQ(a.weights(i), b.weights(i)) << "weights of param " << i;
    ASSERT_EQ(a.masters(i), b.masters(i)) << "masters of param " << i;
    ASSERT_EQ(a.exp_avg(i), b.exp_avg(i)) << "m of param " << i;
    ASSERT_EQ(a.exp_avg_sq(i), b.exp_avg_sq(i)) << "v of param " << i;
    ASSERT_EQ(a.counts(i), b.counts(i)) << "counts of param " << i;
  }
}

inline config
zen_config(double topk, std::int64_t select_interval, std::int64_t update_interval, bool overlap) {
  config c;
  c.topk_ratio = topk;
  c.select = zenflow::select_strategy::step;
  c.select_interval = select_interval;
  c.update_interval = update_interval;
  c.overlap_step = overlap;
  c.adam.weight_decay = 0.01f;
  // fp32 host moments (the library's default is bf16): these tests hold the reference to plain
  // AdamW and to itself in float64; its bf16 rounding has its own cases (reference_cases.hpp).
  c.host_moments = zenflow::moment_precision::fp32;
  c.validate();
  return c;
}

} // namespace zf_reference_test
