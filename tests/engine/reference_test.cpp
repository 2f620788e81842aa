// Self-checks of the float64 ZenFlow reference (tests/support/zenflow_reference.hpp) against
// independent computations: a plain float64 AdamW loop, the synchronous-offload baseline and
// host_lr_scale step sizes. Brute-force top-k, counts, Zen-auto schedules, clipping and input
// checks: reference_selection_test.cpp.
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

} // namespace
