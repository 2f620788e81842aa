// Self-checks of the float64 ZenFlow reference (tests/support/zenflow_reference.hpp) against
// independent computations: a plain float64 AdamW loop, the synchronous-offload baseline, brute
// force top-k, hand-derived Zen-auto schedules and host_lr_scale step sizes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/random.hpp"
#include "support/zenflow_reference.hpp"

namespace {

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
const std::vector<param_shape> model = {
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

std::vector<std::vector<float>> initial_weights(std::uint64_t seed,
                                                const std::vector<param_shape>& shapes = model) {
  std::vector<std::vector<float>> w;
  std::uint64_t s = seed;
  for (const param_shape& p : shapes) {
    w.push_back(zf_test::random_values<float>(p.size(), ++s, 0.5f));
  }
  return w;
}

void add_model(zenflow_reference& ref,
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

double lr_at(std::int64_t t) {
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

void expect_matches_plain(const zenflow_reference& ref, const plain_adamw& plain, const std::string& where) {
  SCOPED_TRACE(where);
  for (std::size_t i = 0; i < ref.num_params(); ++i) {
    for (std::size_t e = 0; e < ref.masters(i).size(); ++e) {
      ASSERT_NEAR(ref.masters(i)[e], plain.master(i)[e], 1e-12) << "param " << i << " elem " << e;
      ASSERT_EQ(ref.weights(i)[e], plain.weight(i, e)) << "param " << i << " elem " << e;
    }
  }
}

/// Bitwise equality of everything two references hold.
void expect_same_state(const zenflow_reference& a, const zenflow_reference& b, const std::string& where) {
  SCOPED_TRACE(where);
  for (std::size_t i = 0; i < a.num_params(); ++i) {
    ASSERT_EQ(a.weights(i), b.weights(i)) << "weights of param " << i;
    ASSERT_EQ(a.masters(i), b.masters(i)) << "masters of param " << i;
    ASSERT_EQ(a.exp_avg(i), b.exp_avg(i)) << "m of param " << i;
    ASSERT_EQ(a.exp_avg_sq(i), b.exp_avg_sq(i)) << "v of param " << i;
    ASSERT_EQ(a.counts(i), b.counts(i)) << "counts of param " << i;
  }
}

config zen_config(double topk, std::int64_t select_interval, std::int64_t update_interval, bool overlap) {
  config c;
  c.topk_ratio = topk;
  c.select = zenflow::select_strategy::step;
  c.select_interval = select_interval;
  c.update_interval = update_interval;
  c.overlap_step = overlap;
  c.adam.weight_decay = 0.01f;
  c.validate();
  return c;
}

TEST(reference, topk_ratio_one_equals_plain_adamw) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (const bool decoupled : {true, false}) {
    for (const bool overlap : {false, true}) {
      config c = zen_config(1.0, 7, 3, overlap);
      c.adam.decoupled = decoupled;
      c.gradient_clipping = 0.05f; // active on most steps
      c.loss_scale = 4.0f;
      const auto init = initial_weights(seed);
      zenflow_reference ref(c);
      add_model(ref, init);
      plain_adamw plain(c, init, model);
      grad_source src(seed + 17);
      bool clipped = false;
      for (std::int64_t t = 0; t < 30; ++t) {
        const grads_t g = src.next();
        ref.step(g, lr_at(t));
        plain.step(g, lr_at(t));
        clipped = clipped || ref.last_coef() < 1.0 / 4.0;
        expect_matches_plain(ref, plain,
                             "step " + std::to_string(t) + (decoupled ? " AdamW" : " Adam+L2") +
                                 (overlap ? " overlap" : ""));
      }
      EXPECT_TRUE(clipped);
      EXPECT_EQ(ref.stats().selections, 5);     // steps 0, 7, 14, 21, 28
      EXPECT_GT(ref.stats().windows_closed, 5); // windows close, but no channel is left to a job
      EXPECT_EQ(ref.stats().host_jobs, 0);
    }
  }
}

TEST(reference, per_parameter_lr_scale_and_weight_decay_equal_plain_adamw_per_tensor) {
  // Without clipping the tensors are independent: each parameter with {lr_scale, weight_decay}
  // must be a plain AdamW of that tensor alone with that weight decay and lr x lr_scale.
  const std::uint64_t seed = zf_test::base_seed() + 40;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::vector<zf_test::param_hyper> hyper = {{0.5, 0.3}, {2.0, std::nullopt}, {0.25, 0.0}};
  for (const auto mode : {zenflow::optimizer_mode::gpu_adamw, zenflow::optimizer_mode::zenflow}) {
    config c = zen_config(1.0, 7, 3, true);
    c.mode = mode;
    c.loss_scale = 2.0f;
    const auto init = initial_weights(seed);
    zenflow_reference ref(c);
    for (std::size_t i = 0; i < model.size(); ++i) {
      if (model[i].matrix) {
        ref.add_matrix(model[i].channels, model[i].len, model[i].dt, init[i], hyper[i]);
      } else {
        ref.add_vector(model[i].len, model[i].dt, init[i], hyper[i]);
      }
    }
    std::vector<plain_adamw> plain;
    for (std::size_t i = 0; i < model.size(); ++i) {
      config ci = c;
      ci.adam.weight_decay = static_cast<float>(hyper[i].weight_decay.value_or(c.adam.weight_decay));
      plain.emplace_back(ci, std::vector<std::vector<float>>{init[i]}, std::vector<param_shape>{model[i]});
    }
    grad_source src(seed + 1);
    for (std::int64_t t = 0; t < 25; ++t) {
      const grads_t g = src.next();
      ref.step(g, lr_at(t));
      for (std::size_t i = 0; i < model.size(); ++i) {
        plain[i].step({g[i]}, lr_at(t) * hyper[i].lr_scale);
        for (std::size_t e = 0; e < ref.masters(i).size(); ++e) {
          ASSERT_NEAR(ref.masters(i)[e], plain[i].master(0)[e], 1e-12) << "step " << t << " param " << i;
        }
      }
    }
  }
}

TEST(reference, full_warm_up_equals_plain_adamw_then_splits) {
  const std::uint64_t seed = zf_test::base_seed() + 1;
  SCOPED_TRACE(zf_test::seed_note(seed));
  config c = zen_config(0.25, 6, 3, true);
  c.full_warm_up_rounds = 9;
  const auto init = initial_weights(seed);
  zenflow_reference ref(c);
  add_model(ref, init);
  plain_adamw plain(c, init, model);
  grad_source src(seed);
  for (std::int64_t t = 0; t < 9; ++t) {
    const grads_t g = src.next();
    ref.step(g, lr_at(t));
    plain.step(g, lr_at(t));
    expect_matches_plain(ref, plain, "warm-up step " + std::to_string(t));
    EXPECT_TRUE(ref.selected(0).empty());
  }
  EXPECT_EQ(ref.stats().selections, 0);
  EXPECT_EQ(ref.stats().windows_closed, 0);
  // The first step after warm-up selects and starts the first window.
  const grads_t g = src.next();
  ref.step(g, lr_at(9));
  plain.step(g, lr_at(9));
  EXPECT_TRUE(ref.last_step_selected());
  EXPECT_EQ(ref.selected(0).size(), 3u); // floor(0.25 * 12)
  EXPECT_EQ(ref.selected(1).size(), 5u); // floor(0.25 * 20)
  // Selected channels and the vector still follow plain AdamW; the others wait for their window.
  for (const std::int32_t j : ref.selected(0)) {
    for (std::int64_t e = j * 5; e < (j + 1) * 5; ++e) {
      EXPECT_NEAR(ref.masters(0)[static_cast<std::size_t>(e)], plain.master(0)[static_cast<std::size_t>(e)],
                  1e-12);
    }
  }
  for (std::size_t e = 0; e < 7; ++e) {
    EXPECT_NEAR(ref.masters(2)[e], plain.master(2)[e], 1e-12);
  }
  std::size_t differ = 0;
  for (std::size_t e = 0; e < ref.masters(0).size(); ++e) {
    differ += ref.masters(0)[e] != plain.master(0)[e] ? 1 : 0;
  }
  EXPECT_GE(differ, 9u * 5u); // the 9 unselected channels were not updated at step 9
  for (const std::int32_t cnt : ref.counts(0)) {
    EXPECT_TRUE(cnt == 9 || cnt == 10);
  }
}

TEST(reference, update_interval_one_without_overlap_equals_offload_sync) {
  const std::uint64_t seed = zf_test::base_seed() + 2;
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (const auto scale :
       {zenflow::host_lr_scaling::linear, zenflow::host_lr_scaling::sqrt, zenflow::host_lr_scaling::none}) {
    config zc = zen_config(0.25, 5, 1, false);
    zc.gradient_clipping = 0.1f;
    zc.host_lr_scale = scale;
    config oc = zc;
    oc.mode = zenflow::optimizer_mode::offload_sync;
    config gc = zc;
    gc.mode = zenflow::optimizer_mode::gpu_adamw;
    const auto init = initial_weights(seed);
    zenflow_reference zen(zc), off(oc), gpu(gc);
    add_model(zen, init);
    add_model(off, init);
    add_model(gpu, init);
    grad_source src(seed);
    for (std::int64_t t = 0; t < 25; ++t) {
      grads_t g = src.next();
      if (t == 11) {
        g[1][4] = std::numeric_limits<float>::quiet_NaN();
      }
      zen.step(g, lr_at(t));
      off.step(g, lr_at(t));
      gpu.step(g, lr_at(t));
      expect_same_state(zen, off, "zenflow vs offload_sync, step " + std::to_string(t));
      expect_same_state(gpu, off, "gpu_adamw vs offload_sync, step " + std::to_string(t));
    }
    EXPECT_EQ(zen.stats().selections, 5);
    EXPECT_EQ(zen.stats().host_jobs, 24); // one per good step
    EXPECT_EQ(off.stats().skipped_steps, 1);
    EXPECT_EQ(zen.stats().skipped_steps, 1);
  }
}

TEST(reference, nan_or_inf_step_changes_nothing) {
  const std::uint64_t seed = zf_test::base_seed() + 3;
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (const bool overlap : {false, true}) {
    const config c = zen_config(0.25, 8, 4, overlap);
    zenflow_reference ref(c);
    add_model(ref, initial_weights(seed));
    grad_source src(seed);
    for (std::int64_t t = 0; t < 6; ++t) { // windows [0, 3], [4, 7]: step 6 is inside the second
      ref.step(src.next(), lr_at(t));
    }
    const zenflow_reference before = ref;
    for (const float badv :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      zenflow_reference r = before;
      grads_t g = src.next();
      g[2][3] = badv; // one element of the vector parameter
      r.step(g, lr_at(6));
      EXPECT_TRUE(r.last_step_skipped());
      expect_same_state(r, before, "bad step");
      for (std::size_t i = 0; i < r.num_params(); ++i) {
        EXPECT_EQ(r.accumulator(i), before.accumulator(i));
      }
      EXPECT_EQ(r.stats().skipped_steps, 1);
      EXPECT_EQ(r.window_length(), before.window_length() + 1); // it still counts toward the window
      EXPECT_EQ(r.window_good_steps(), before.window_good_steps());
    }
  }
}

TEST(reference, skipped_step_is_left_out_of_the_window_mean) {
  // A window of 4 steps with one skipped equals a window of 3 steps without it.
  const std::uint64_t seed = zf_test::base_seed() + 4;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const auto init = initial_weights(seed);
  zenflow_reference a(zen_config(0.25, 40, 4, false));
  zenflow_reference b(zen_config(0.25, 30, 3, false));
  add_model(a, init);
  add_model(b, init);
  grad_source src(seed);
  const grads_t g0 = src.next(), g1 = src.next(), g3 = src.next();
  grads_t bad = src.next();
  bad[0][0] = -std::numeric_limits<float>::infinity();
  a.step(g0, 0.01);
  a.step(g1, 0.02);
  a.step(bad, 0.03);
  a.step(g3, 0.04);
  b.step(g0, 0.01);
  b.step(g1, 0.02);
  b.step(g3, 0.04);
  ASSERT_TRUE(a.last_step_closed_window());
  ASSERT_TRUE(b.last_step_closed_window());
  EXPECT_EQ(a.stats().window_lengths, std::vector<std::int64_t>{4});
  EXPECT_EQ(b.stats().window_lengths, std::vector<std::int64_t>{3});
  expect_same_state(a, b, "after the first window");
  EXPECT_EQ(a.counts(0), b.counts(0));
}

TEST(reference, host_lr_scale_multiplies_the_window_step) {
  // First host update of a channel: Adam's bias-corrected step is lr * g / (|g| + eps), i.e. almost
  // exactly the learning rate, so the unselected channels move by lr * s(n_w). The window stands
  // for its 4 steps (host_moments_per_step): count 4, m = (1 - b1^4) * mean gradient.
  const std::uint64_t seed = zf_test::base_seed() + 5;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const auto init = initial_weights(seed);
  const double lr = 1e-3;
  std::vector<zenflow_reference> runs;
  for (const auto& [scale, factor] :
       {std::pair{zenflow::host_lr_scaling::linear, 4.0}, std::pair{zenflow::host_lr_scaling::sqrt, 2.0},
        std::pair{zenflow::host_lr_scaling::none, 1.0}}) {
    config c = zen_config(0.25, 100, 4, false);
    c.adam.weight_decay = 0.0f;
    c.host_lr_scale = scale;
    zenflow_reference ref(c);
    add_model(ref, init);
    grad_source src(seed);
    for (int t = 0; t < 4; ++t) {
      ref.step(src.next(), lr);
    }
    ASSERT_TRUE(ref.last_step_closed_window());
    std::size_t checked = 0;
    for (std::size_t i = 0; i < 2; ++i) {
      const auto& sel = ref.selected(i);
      const std::int64_t len = model[i].len;
      for (std::int64_t j = 0; j < model[i].channels; ++j) {
        if (std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(j))) {
          continue;
        }
        EXPECT_EQ(ref.counts(i)[static_cast<std::size_t>(j)], 4);
        for (std::int64_t e = j * len; e < (j + 1) * len; ++e) {
          const auto u = static_cast<std::size_t>(e);
          const double mean_g = ref.exp_avg(i)[u] / (1.0 - std::pow(0.9, 4));
          if (std::fabs(mean_g) < 1e-4) {
            continue; // eps would matter
          }
          const double moved = ref.masters(i)[u] - round_to_dtype(init[i][u], model[i].dt);
          EXPECT_NEAR(moved, -std::copysign(factor * lr, mean_g), factor * lr * 1e-3)
              << "param " << i << " elem " << e;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 40u);
    runs.push_back(ref);
  }
  // The selected channels and the vector do not depend on host_lr_scale.
  for (std::size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].masters(2), runs[0].masters(2));
    EXPECT_EQ(runs[r].selected(0), runs[0].selected(0));
    EXPECT_NE(runs[r].masters(0), runs[0].masters(0));
  }
}

TEST(reference, overlap_is_stale_by_exactly_one_window) {
  const std::uint64_t seed = zf_test::base_seed() + 6;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const auto init = initial_weights(seed);
  zenflow_reference on(zen_config(0.25, 12, 3, true));
  zenflow_reference off(zen_config(0.25, 12, 3, false));
  add_model(on, init);
  add_model(off, init);
  grad_source src(seed);
  zenflow_reference off_before_close = off; // off's state after the step before on's last close
  std::size_t stale_steps = 0;
  for (std::int64_t t = 0; t < 40; ++t) {
    const grads_t g = src.next();
    const zenflow_reference off_prev = off;
    on.step(g, lr_at(t));
    off.step(g, lr_at(t));
    SCOPED_TRACE("step " + std::to_string(t));
    ASSERT_EQ(on.last_step_closed_window(), off.last_step_closed_window());
    if (on.last_step_closed_window()) {
      off_before_close = off_prev;
    }
    for (std::size_t i = 0; i < on.num_params(); ++i) {
      // Host state never lags: masters, moments and counts are identical at every step.
      ASSERT_EQ(on.masters(i), off.masters(i));
      ASSERT_EQ(on.exp_avg_sq(i), off.exp_avg_sq(i));
      ASSERT_EQ(on.counts(i), off.counts(i));
      ASSERT_EQ(on.selected(i), off.selected(i));
      // Working weights: equal, or (while a job is held) equal to off's one window earlier.
      const zenflow_reference& expect = on.job_pending() ? off_before_close : off;
      if (!on.is_matrix(i)) {
        ASSERT_EQ(on.weights(i), off.weights(i));
        continue;
      }
      const auto& sel = on.selected(i);
      const std::int64_t len = model[i].len;
      for (std::int64_t j = 0; j < model[i].channels; ++j) {
        const bool is_sel = std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(j));
        for (std::int64_t e = j * len; e < (j + 1) * len; ++e) {
          const auto u = static_cast<std::size_t>(e);
          ASSERT_EQ(on.weights(i)[u], is_sel ? off.weights(i)[u] : expect.weights(i)[u])
              << "param " << i << " channel " << j << (is_sel ? " (selected)" : " (unselected)");
        }
      }
    }
    if (on.job_pending()) {
      ++stale_steps;
      EXPECT_NE(on.weights(0), off.weights(0)); // the lag is real
    }
  }
  // Windows of 3 closing at 2, 5, 8, 11 (selection at 12), ...: a job is held on most steps.
  EXPECT_GT(stale_steps, 20u);
  EXPECT_EQ(on.stats().drains, 4); // selections at 0, 12, 24, 36
  on.flush();
  off.flush();
  expect_same_state(on, off, "after flush");
}

TEST(reference, flush_does_not_close_the_window) {
  const std::uint64_t seed = zf_test::base_seed() + 7;
  const auto init = initial_weights(seed);
  zenflow_reference a(zen_config(0.25, 100, 5, true)), b(zen_config(0.25, 100, 5, true));
  add_model(a, init);
  add_model(b, init);
  grad_source sa(seed), sb(seed);
  for (std::int64_t t = 0; t < 23; ++t) {
    a.step(sa.next(), lr_at(t));
    b.step(sb.next(), lr_at(t));
    if (t == 7 || t == 12) {
      const auto acc = a.accumulator(0);
      a.flush();
      EXPECT_FALSE(a.job_pending());
      EXPECT_EQ(a.accumulator(0), acc);
      EXPECT_EQ(a.window_length(), b.window_length());
    }
  }
  a.flush();
  b.flush();
  expect_same_state(a, b, "flushed twice vs once");
}

/// Brute-force top-k of a matrix gradient: sort (score desc, index asc), take k, sort indices.
std::vector<std::int32_t>
brute_topk(const std::vector<float>& g, std::int64_t channels, std::int64_t len, std::int64_t k, bool l1) {
  std::vector<std::pair<double, std::int32_t>> s;
  for (std::int64_t j = 0; j < channels; ++j) {
    double acc = 0.0;
    for (std::int64_t e = 0; e < len; ++e) {
      const double x = g[static_cast<std::size_t>(j * len + e)];
      acc += l1 ? std::fabs(x) : x * x;
    }
    s.emplace_back(-acc, static_cast<std::int32_t>(j));
  }
  std::sort(s.begin(), s.end());
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < k; ++i) {
    out.push_back(s[static_cast<std::size_t>(i)].second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(reference, selects_brute_force_topk_at_selection_steps_only) {
  const std::uint64_t seed = zf_test::base_seed() + 8;
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (const bool l1 : {false, true}) {
    config c = zen_config(0.3, 5, 2, true);
    c.full_warm_up_rounds = 2;
    c.importance = l1 ? zenflow::channel_norm::l1 : zenflow::channel_norm::sq_l2;
    zenflow_reference ref(c);
    add_model(ref, initial_weights(seed));
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> dist;
    std::vector<std::int32_t> prev0;
    for (std::int64_t t = 0; t < 23; ++t) {
      grads_t g = {std::vector<float>(60), std::vector<float>(60), std::vector<float>(7)};
      for (auto& v : g) {
        for (float& x : v) {
          x = static_cast<float>(round_to_dtype(dist(gen), dtype::bf16)); // unstructured: the set moves
        }
      }
      if (t == 12) { // exact ties: channels 3, 5, 7, 9 of matrix 0 share the top score
        std::fill(g[0].begin(), g[0].end(), 0.0f);
        for (const int j : {9, 7, 5, 3}) {
          std::fill(g[0].begin() + j * 5, g[0].begin() + (j + 1) * 5, 1.0f);
        }
      }
      ref.step(g, lr_at(t));
      const bool sel_step = t >= 2 && (t - 2) % 5 == 0;
      EXPECT_EQ(ref.last_step_selected(), sel_step) << "step " << t;
      if (sel_step) {
        EXPECT_EQ(ref.selected(0), brute_topk(g[0], 12, 5, 3, l1)) << "step " << t;
        EXPECT_EQ(ref.selected(1), brute_topk(g[1], 20, 3, 6, l1)) << "step " << t;
        if (t == 12) {
          EXPECT_EQ(ref.selected(0), (std::vector<std::int32_t>{3, 5, 7}));
        }
      } else if (t > 2) {
        EXPECT_EQ(ref.selected(0), prev0) << "step " << t;
      }
      prev0 = ref.selected(0);
      EXPECT_TRUE(ref.selected(2).empty());
    }
    EXPECT_EQ(ref.stats().selections, 5); // 2, 7, 12, 17, 22
  }
}

TEST(reference, bad_selection_step_defers_the_selection_to_the_next_good_step) {
  const std::uint64_t seed = zf_test::base_seed() + 9;
  zenflow_reference ref(zen_config(0.25, 6, 3, true));
  add_model(ref, initial_weights(seed));
  grad_source src(seed);
  for (std::int64_t t = 0; t < 6; ++t) {
    ref.step(src.next(), lr_at(t));
  }
  ASSERT_TRUE(ref.job_pending());
  grads_t bad = src.next();
  bad[1][0] = std::numeric_limits<float>::quiet_NaN();
  const auto before = ref.selected(0);
  ref.step(bad, lr_at(6)); // scheduled selection step: drained, but no selection on NaN scores
  EXPECT_FALSE(ref.job_pending());
  EXPECT_FALSE(ref.last_step_selected());
  EXPECT_EQ(ref.selected(0), before);
  EXPECT_EQ(ref.stats().drains, 2);
  grads_t g = src.next();
  ref.step(g, lr_at(7));
  EXPECT_TRUE(ref.last_step_selected());
  EXPECT_EQ(ref.selected(0), brute_topk(g[0], 12, 5, 3, false));
  EXPECT_EQ(ref.selected(1), brute_topk(g[1], 20, 3, 5, false));
  EXPECT_EQ(ref.stats().selections, 2);
  ref.step(src.next(), lr_at(8));
  EXPECT_TRUE(ref.last_step_closed_window()); // the window that started at step 6 has 3 steps
  EXPECT_EQ(ref.stats().window_lengths.back(), 3);
}

TEST(reference, per_channel_update_counts) {
  // count = warm-up steps + good steps while selected + what the host jobs add while unselected at
  // the close: 1 per non-empty job, or the job's good steps with host_moments_per_step (counts in
  // steps). Step 30 is a bad selection step: the new set arrives mid-window at step 31.
  for (const bool per_step : {false, true}) {
    const std::uint64_t seed = zf_test::base_seed() + 10;
    config c = zen_config(0.2, 7, 3, false);
    c.full_warm_up_rounds = 2;
    c.host_moments_per_step = per_step;
    zenflow_reference ref(c);
    add_model(ref, initial_weights(seed));
    grad_source src(seed);
    std::vector<std::int32_t> expect(12, 0);
    std::int32_t good_in_window = 0; // good steps since the last close, counted here
    for (std::int64_t t = 0; t < 40; ++t) {
      grads_t g = src.next();
      const bool bad = t == 17 || t == 30;
      if (bad) {
        g[0][1] = std::numeric_limits<float>::quiet_NaN();
      }
      ref.step(g, lr_at(t));
      good_in_window += t >= 2 && !bad ? 1 : 0;
      const auto& sel = ref.selected(0);
      const bool closed = t >= 2 && ref.last_step_closed_window();
      for (std::int32_t j = 0; j < 12; ++j) {
        const bool is_sel = std::binary_search(sel.begin(), sel.end(), j);
        const bool device_update = t < 2 || (is_sel && !bad);
        const bool host_update = closed && !is_sel && good_in_window > 0;
        expect[static_cast<std::size_t>(j)] +=
            (device_update ? 1 : 0) + (host_update ? (per_step ? good_in_window : 1) : 0);
      }
      if (closed) {
        good_in_window = 0;
      }
      ASSERT_EQ(ref.counts(0), expect) << "step " << t << " per_step " << per_step;
    }
    EXPECT_EQ(ref.stats().selections, 6);                    // 2, 9, 16, 23, 31 (deferred from 30), 37
    EXPECT_EQ(ref.counts(2), std::vector<std::int32_t>{38}); // vector: every good step
  }
}

/// Zen-auto on a gradient with a fixed L1 structure: in matrix m, the first k channels have
/// |g| = 1, the others |g| = rest[m] (random signs).
class zen_auto_fixture : public ::testing::Test {
protected:
  static std::vector<param_shape> shapes() { return {{true, 8, 4, dtype::f32}, {true, 8, 4, dtype::f32}}; }
  static config auto_config(double auto_ratio, std::int64_t min_w, std::int64_t max_w, std::int64_t select) {
    config c;
    c.topk_ratio = 0.25; // k = 2 of 8 (not 0.1: DeepSpeed's normalisation bug would show)
    c.select = zenflow::select_strategy::step;
    c.select_interval = select;
    c.update_interval = 0;
    c.auto_ratio = auto_ratio;
    c.min_update_interval = min_w;
    c.max_update_interval = max_w;
    c.validate();
    return c;
  }
  static std::vector<std::int64_t> run(const config& c,
                                       std::vector<double> rest,
                                       std::int64_t steps,
                                       std::int64_t bad_step = -1,
                                       std::int64_t crit_doubles_at = -1) {
    zenflow_reference ref(c);
    add_model(ref, initial_weights(3, shapes()), shapes());
    std::mt19937_64 gen(11);
    for (std::int64_t t = 0; t < steps; ++t) {
      grads_t g;
      for (std::size_t m = 0; m < 2; ++m) {
        std::vector<float> v(32);
        for (std::size_t e = 0; e < 32; ++e) {
          const float crit = crit_doubles_at >= 0 && t >= crit_doubles_at ? 2.0f : 1.0f;
          const float mag = e < 8 ? crit : static_cast<float>(rest[m]);
          v[e] = (gen() & 1u) != 0 ? mag : -mag;
        }
        g.push_back(v);
      }
      if (t == bad_step) {
        g[0][0] = std::numeric_limits<float>::infinity();
      }
      ref.step(g, 1e-3);
    }
    return ref.stats().window_lengths;
  }
};

TEST_F(zen_auto_fixture, window_length_is_the_mass_ratio_plus_two_steps_of_lag_and_stays_constant) {
  // Per channel: crit / k = 4 per step, rest / (c - k) = 4 * 0.25 = 1 per step: a matrix votes once
  // its window holds 4 steps of data, known at the end of the 6th step (the vote at step t sees
  // steps up to t - 2).
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 1000), {0.25, 0.25}, 40), std::vector<std::int64_t>(6, 6));
  // rest = 0.125: 8 steps of data, windows of 10.
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 1000), {0.125, 0.125}, 50), std::vector<std::int64_t>(5, 10));
}

TEST_F(zen_auto_fixture, voting_share_min_and_max_windows) {
  // Matrix 0 votes at 6 steps, matrix 1 at 10: a share of 0.5 closes with the first, 0.99 with both.
  EXPECT_EQ(run(auto_config(0.5, 1, 64, 1000), {0.25, 0.125}, 24), std::vector<std::int64_t>(4, 6));
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 1000), {0.25, 0.125}, 30), std::vector<std::int64_t>(3, 10));
  EXPECT_EQ(run(auto_config(0.99, 1, 3, 1000), {0.25, 0.25}, 12), std::vector<std::int64_t>(4, 3));
  EXPECT_EQ(run(auto_config(0.99, 7, 64, 1000), {0.25, 0.25}, 21), std::vector<std::int64_t>(3, 7));
  // Nothing unselected ever reaches the mean: the maximum.
  EXPECT_EQ(run(auto_config(0.99, 1, 6, 1000), {0.0, 0.0}, 18), std::vector<std::int64_t>(3, 6));
}

TEST_F(zen_auto_fixture, selection_restarts_the_mean_and_closes_the_window) {
  // Windows 6, 6, then cut at the selection at step 14; the mean restarts there.
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 14), {0.25, 0.25}, 42),
            (std::vector<std::int64_t>{6, 6, 2, 6, 6, 2, 6, 6, 2}));
  // From the selection at step 14 on the selected channels carry twice the mass: the restarted
  // mean is 8 per channel, so windows of 10 (a mean kept across selections would give 8).
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 14), {0.25, 0.25}, 28, -1, 14),
            (std::vector<std::int64_t>{6, 6, 2, 10, 4}));
}

TEST_F(zen_auto_fixture, skipped_step_counts_toward_length_but_brings_no_mass) {
  // Step 2 is skipped: the first window needs one more step (7), the next ones are 6 again.
  EXPECT_EQ(run(auto_config(0.99, 1, 64, 1000), {0.25, 0.25}, 25, 2),
            (std::vector<std::int64_t>{7, 6, 6, 6}));
}

TEST(reference, clipping_and_unscaling_apply_to_both_paths) {
  // loss_scale 8 + clipping vs pre-scaled gradients without either: same trajectory on the
  // selected channels, the unselected ones (after their windows) and the vector.
  const std::uint64_t seed = zf_test::base_seed() + 12;
  SCOPED_TRACE(zf_test::seed_note(seed));
  // A large eps makes the update proportional to the gradient's scale, so a missing factor shows.
  config a = zen_config(0.25, 100, 3, false);
  a.adam.eps = 1e-3f;
  a.loss_scale = 8.0f;
  a.gradient_clipping = 0.02f;
  config b = a;
  b.loss_scale = 1.0f;
  b.gradient_clipping = 0.0f;
  const auto init = initial_weights(seed);
  const std::vector<param_shape> f32_model = {{true, 12, 5, dtype::f32}, {false, 1, 7, dtype::f32}};
  zenflow_reference ra(a), rb(b);
  add_model(ra, {init[0], std::vector<float>(7, 0.25f)}, f32_model);
  add_model(rb, {init[0], std::vector<float>(7, 0.25f)}, f32_model);
  grad_source src(seed, f32_model);
  for (std::int64_t t = 0; t < 12; ++t) {
    grads_t g = src.next();
    double sq = 0.0;
    for (const auto& v : g) {
      for (const float x : v) {
        sq += static_cast<double>(x) * x;
      }
    }
    const double coef = std::min(1.0, static_cast<double>(0.02f) / (std::sqrt(sq) + 1e-6));
    ASSERT_LT(coef, 1.0);
    grads_t scaled = g, pre = g;
    for (std::size_t i = 0; i < g.size(); ++i) {
      for (std::size_t e = 0; e < g[i].size(); ++e) {
        scaled[i][e] = g[i][e] * 8.0f; // exact
        pre[i][e] = static_cast<float>(g[i][e] * coef);
      }
    }
    ra.step(scaled, lr_at(t));
    rb.step(pre, lr_at(t));
    EXPECT_NEAR(ra.last_coef(), coef / 8.0, 1e-15);
    for (std::size_t i = 0; i < 2; ++i) {
      for (std::size_t e = 0; e < ra.masters(i).size(); ++e) {
        ASSERT_NEAR(ra.masters(i)[e], rb.masters(i)[e], 1e-8)
            << "step " << t << " param " << i << " elem " << e;
      }
    }
  }
  EXPECT_EQ(ra.stats().host_jobs, 4);
}

TEST(reference, working_weights_are_dtype_values) {
  const std::uint64_t seed = zf_test::base_seed() + 13;
  zenflow_reference ref(zen_config(0.25, 6, 2, true));
  add_model(ref, initial_weights(seed));
  grad_source src(seed);
  for (std::int64_t t = 0; t < 10; ++t) {
    ref.step(src.next(), lr_at(t));
  }
  ref.flush();
  for (std::size_t i = 0; i < ref.num_params(); ++i) {
    for (std::size_t e = 0; e < ref.weights(i).size(); ++e) {
      EXPECT_EQ(ref.weights(i)[e], round_to_dtype(ref.weights(i)[e], model[i].dt));
      EXPECT_EQ(ref.weights(i)[e], round_to_dtype(ref.masters(i)[e], model[i].dt));
    }
  }
}

TEST(reference, rejects_mismatched_inputs) {
  zenflow_reference ref(zen_config(0.25, 6, 2, true));
  EXPECT_THROW(ref.add_matrix(0, 4, dtype::f32, {}), std::invalid_argument);
  EXPECT_THROW(ref.add_matrix(2, 4, dtype::f32, std::vector<float>(7)), std::invalid_argument);
  ref.add_vector(3, dtype::f32, {1.0f, 2.0f, 3.0f});
  EXPECT_THROW(ref.step({std::vector<float>(2)}, 0.1), std::invalid_argument);
  EXPECT_THROW(ref.step({}, 0.1), std::invalid_argument);
  EXPECT_EQ(ref.stats().steps, 0);
  config bad;
  bad.topk_ratio = -0.1; // [0, 1] is valid (DeepSpeed's range)
  EXPECT_THROW(zenflow_reference{bad}, zenflow::invalid_argument);
}

} // namespace
