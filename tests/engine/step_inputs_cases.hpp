// The engine's per-step inputs (engine/step_options.hpp) and set_lr_scale() against the float64
// reference (tests/support/zenflow_reference.hpp, step_inputs): a loss scale that changes every
// step (and one that is not finite), a scaler's found-inf, a clipping threshold per step, and
// parameters without a gradient for a step or for whole windows, with every parameter's lr
// scale changing every step. Written once over a Driver (engine_cases.hpp) whose `step_with`
// puts the loss scale and found-inf in its backend's memory and reads found-inf back.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/step_options.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_engine_test {

/// What step `t` of a run of `steps` takes: in the engine's terms (`opt` without its two
/// pointers, `loss_scale`, `found_inf`) and in the reference's (`ref`).
struct step_plan {
  zenflow::step_options opt;
  std::optional<float> loss_scale;
  float found_inf = 0.0f;
  zf_test::step_inputs ref;
  std::vector<zenflow::param_id> no_grad; // opt.no_grad's storage
};

/// Step t's inputs over kShapes (matrices 0 and 2, vectors 1 and 3): the loss scale a power of two
/// from 2 to 32 on three steps in four (the config's on the fourth), NaN at step 10; found-inf at
/// steps 7 and 19; the threshold a fifth of the unscaled norm (clipping) on steps 0 mod 3, +Inf
/// on steps 2 mod 3, the config's on the others; no gradient: vector 1 on steps 1 mod 4, matrix 0
/// on steps 3 mod 5, matrix 2 on steps 12 to 17 (whole windows of 2 and 3).
template <class T>
step_plan plan_step(int t, model<T>& m) {
  step_plan s;
  const auto absent = [&](std::size_t p) {
    return (p == 1 && t % 4 == 1) || (p == 0 && t % 5 == 3) || (p == 2 && t >= 12 && t <= 17);
  };
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    if (absent(p)) {
      std::fill(m.g[p].begin(), m.g[p].end(), zenflow::from_float<T>(0.0f));
      s.no_grad.push_back(zenflow::param_id{static_cast<std::int32_t>(p)});
      s.ref.no_grad.push_back(p);
    }
  }
  double sq = 0.0;
  for (const auto& g : m.g) {
    for (const T x : g) {
      sq += static_cast<double>(zenflow::to_float(x)) * zenflow::to_float(x);
    }
  }
  if (t % 4 != 3) {
    const float scale = t == 10 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, 1 + t % 5);
    s.loss_scale = scale;
    s.ref.loss_scale = scale;
    if (std::isfinite(scale)) { // the gradients carry it (exactly: a power of two)
      for (auto& g : m.g) {
        for (T& x : g) {
          x = zenflow::from_float<T>(zenflow::to_float(x) * scale);
        }
      }
    }
  }
  if (t == 7 || t == 19) {
    s.found_inf = 1.0f;
    s.ref.found_inf = true;
  }
  if (t % 3 == 0) {
    s.opt.max_norm = static_cast<float>(0.2 * std::sqrt(sq));
  } else if (t % 3 == 2) {
    s.opt.max_norm = std::numeric_limits<float>::infinity();
  }
  if (s.opt.max_norm) {
    s.ref.max_norm = static_cast<double>(*s.opt.max_norm);
  }
  s.opt.no_grad = s.no_grad;
  return s;
}

/// The engine with kshapes_groups()' options, every lr scale changed every step, and plan_step's
/// inputs, against the reference given the same (run_against_reference's checks, found-inf
/// written back, the skipped steps); returns the worst weight distance (ulps of T) after any step.
template <template <class> class Driver, class T>
double step_inputs_against_reference(const zenflow::config& cfg, int steps, std::uint64_t seed) {
  const group_case groups = kshapes_groups();
  model<T> m(kShapes, seed);
  Driver<T> d(m);
  const auto owned = d.make_engine(cfg);
  auto& eng = *owned;
  zf_test::zenflow_reference ref(cfg);
  const auto ids = register_groups(m, d, eng, ref, groups);
  std::int64_t skipped = 0;
  const double worst = run_against_reference(m, d, eng, ref, ids, cfg, steps, [&](int t, float lr) {
    for (std::size_t p = 0; p < ids.size(); ++p) { // a schedule per parameter, another each step
      const float scale = static_cast<float>(groups.hyper[p].lr_scale) *
                          (0.5f + 0.25f * static_cast<float>((t + 2 * static_cast<int>(p)) % 5));
      eng.set_lr_scale(ids[p], scale);
      ref.set_lr_scale(p, static_cast<double>(scale));
    }
    const step_plan s = plan_step(t, m);
    const auto [rep, found_inf] = d.step_with(eng, lr, s.loss_scale, s.found_inf, s.opt);
    ref.step(m.grads_as_float(), static_cast<double>(lr), s.ref);
    skipped += ref.last_step_skipped() ? 1 : 0;
    EXPECT_EQ(found_inf, ref.last_step_skipped() ? 1.0f : 0.0f) << "step " << t;
    return rep;
  });
  EXPECT_EQ(skipped, 3); // found-inf twice, the NaN scale, and nothing else
  EXPECT_EQ(eng.stats().skipped_steps, skipped);
  return worst;
}

/// step_inputs_against_reference in every mode, bfloat16 and float (the bounds of the reference
/// cases: the 16-bit type's own rounding, 64 float ulps).
template <template <class> class Driver>
void run_step_inputs_cases(unsigned host_threads = 1) {
  int i = 0;
  for (const auto& [name, cfg] : all_modes(host_threads)) {
    SCOPED_TRACE(name);
    EXPECT_LE((step_inputs_against_reference<Driver, zenflow::bfloat16>(
                  cfg, 30, zf_test::base_seed() + 700 + static_cast<std::uint64_t>(i))),
              1.01);
    EXPECT_LT((step_inputs_against_reference<Driver, float>(
                  cfg, 30, zf_test::base_seed() + 800 + static_cast<std::uint64_t>(i))),
              64.0);
    ++i;
  }
}

} // namespace zf_engine_test
