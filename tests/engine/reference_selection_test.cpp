// Self-checks of the float64 ZenFlow reference, continued: its selection against a brute-force
// top-k (and deferred past a bad step), per-channel update counts, hand-derived Zen-auto
// schedules, clipping and unscaling on both paths, dtype-valued weights, and mismatched inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference_test_support.hpp"
#include "support/random.hpp"
#include "support/zenflow_reference.hpp"

namespace {

using namespace zf_reference_test;

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
