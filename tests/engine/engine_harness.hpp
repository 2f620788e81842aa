// Shared test harness of the engine tests: a small model (matrices and vectors of one working
// type) with seeded, skewed gradients, driven through the engine and through the float64
// reference side by side. Included by the cpu tests (host backend) and the gpu tests (CUDA
// backend, which copies the buffers to and from the device around each step).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>

#include "support/random.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_engine_test {

struct shape {
  bool matrix = true;
  std::int64_t channels = 1;
  std::int64_t len = 1;
};

/// Parameters of one working type, as host arrays, with a gradient generator whose channel
/// magnitudes are skewed (a few channels carry most of the energy) and drift over time so that
/// re-selections change the set.
template <class T>
struct model {
  std::vector<shape> shapes;
  std::vector<std::vector<T>> w, g;
  std::vector<std::vector<float>> channel_scale;
  std::mt19937_64 gen;
  double drift = 0.3;

  model(std::vector<shape> s, std::uint64_t seed) : shapes(std::move(s)), gen(seed) {
    zf_test::normal_float nd(0.0f, 0.5f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    for (const auto& sh : shapes) {
      const auto n = static_cast<std::size_t>(sh.channels * sh.len);
      std::vector<T> wv(n);
      for (auto& x : wv) {
        x = zenflow::from_float<T>(nd(gen));
      }
      w.push_back(wv);
      g.emplace_back(n);
      std::vector<float> sc(static_cast<std::size_t>(sh.channels));
      for (auto& x : sc) {
        x = std::exp(4.0f * ud(gen)) * 0.05f; // skewed: e^0 .. e^4
      }
      channel_scale.push_back(sc);
    }
  }

  /// Fills the gradients of the next step.
  void next_grads() {
    zf_test::normal_float nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      const auto& sh = shapes[p];
      auto& sc = channel_scale[p];
      for (auto& x : sc) {
        x *= std::exp(static_cast<float>(drift) * (ud(gen) - 0.5f));
      }
      for (std::int64_t c = 0; c < sh.channels; ++c) {
        for (std::int64_t i = 0; i < sh.len; ++i) {
          g[p][static_cast<std::size_t>(c * sh.len + i)] =
              zenflow::from_float<T>(sc[static_cast<std::size_t>(c)] * nd(gen));
        }
      }
    }
  }

  [[nodiscard]] std::vector<std::vector<float>> grads_as_float() const {
    std::vector<std::vector<float>> out;
    for (const auto& v : g) {
      std::vector<float> f(v.size());
      std::transform(v.begin(), v.end(), f.begin(), [](T x) { return zenflow::to_float(x); });
      out.push_back(std::move(f));
    }
    return out;
  }

  [[nodiscard]] std::vector<float> weights_as_float(std::size_t p) const {
    std::vector<float> f(w[p].size());
    std::transform(w[p].begin(), w[p].end(), f.begin(), [](T x) { return zenflow::to_float(x); });
    return f;
  }

  void add_to_reference(zf_test::zenflow_reference& ref) const {
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      const auto& sh = shapes[p];
      if (sh.matrix) {
        ref.add_matrix(sh.channels, sh.len, zenflow::dtype_of<T>(), weights_as_float(p));
      } else {
        ref.add_vector(sh.len, zenflow::dtype_of<T>(), weights_as_float(p));
      }
    }
  }
};

/// Distance in units of the working type's spacing at `r` (1 = one ulp of T).
template <class T>
double ulps(double a, double r) {
  const double eps = std::is_same_v<T, float>           ? std::ldexp(1.0, -23)
                     : std::is_same_v<T, zenflow::half> ? std::ldexp(1.0, -10)
                                                        : std::ldexp(1.0, -7);
  const double scale = std::max(std::fabs(r), 0.1);
  return std::fabs(a - r) / (eps * scale);
}

/// Largest distance between the model's weights and the reference's, in ulps of T (relative to
/// max(|w|, 0.1)), over all parameters.
template <class T>
double max_weight_ulps(const model<T>& m, const zf_test::zenflow_reference& ref) {
  double worst = 0.0;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    const auto& rw = ref.weights(p);
    for (std::size_t i = 0; i < rw.size(); ++i) {
      worst = std::max(worst, ulps<T>(zenflow::to_float(m.w[p][i]), rw[i]));
    }
  }
  return worst;
}

/// The small engine configuration most engine tests start from: re-selection every 8 steps, windows
/// of 2 with overlap, a quarter of the channels on the device, a ring of small slots.
inline zenflow::config small_config(unsigned host_threads = 1) {
  zenflow::config c;
  c.topk_ratio = 0.25;
  c.select = zenflow::select_strategy::step;
  c.select_interval = 8;
  c.update_interval = 2;
  c.overlap_step = true;
  c.adam.lr = 1e-2f;
  c.adam.weight_decay = 0.01f;
  c.ring_slot_bytes = 4096;
  c.ring_slots = 4;
  c.host_threads = host_threads;
  // The scheduled selections only: these cases pin their selection steps (and the golden digests
  // were taken so); select_on_mass_drop has its own cases (reference_cases.hpp, mass_trigger_test).
  c.select_on_mass_drop = 0.0;
  // fp32 host moments (the library's default is bf16): the baselines compare the host's updates
  // with the device's fp32 ones bit for bit, and the golden digests were taken so; bf16 and int8
  // have their own cases (reference_cases.hpp, host_moments_test).
  c.host_moments = zenflow::moment_precision::fp32;
  return c;
}

/// Two matrices and two vectors, odd sizes.
inline const std::vector<shape> kShapes = {{true, 24, 8}, {false, 1, 5}, {true, 13, 16}, {false, 1, 3}};

/// Expects `f` to throw zenflow::invalid_argument whose message contains `names`.
template <class F>
void expect_invalid(F&& f, const std::string& names) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming " << names;
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

} // namespace zf_engine_test
