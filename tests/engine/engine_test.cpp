// cpu tests of the ZenFlow engine on the host backend: against the float64 reference and the
// baselines, state migration, byte accounting, staleness, NaN/Inf steps, convergence.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/engine.hpp>

#include "engine_harness.hpp"

namespace {

using zf_engine_test::model;
using zf_engine_test::shape;
using host_engine = zenflow::engine<zenflow::host_backend>;

template <class T>
std::vector<zenflow::param_id> register_model(host_engine& eng, model<T>& m) {
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    const auto& sh = m.shapes[p];
    if (sh.matrix) {
      ids.push_back(eng.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len));
    } else {
      ids.push_back(eng.add_vector(m.w[p].data(), m.g[p].data(), sh.len));
    }
  }
  return ids;
}

zenflow::config small_config() {
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
  c.host_threads = 1;
  return c;
}

const std::vector<shape> kShapes = {{true, 24, 8}, {false, 1, 5}, {true, 13, 16}, {false, 1, 3}};

/// Runs `steps` steps of the engine and the reference on the same gradients; returns the worst
/// weight distance (ulps of T) seen after any step.
template <class T>
double run_against_reference(const zenflow::config& cfg,
                             int steps,
                             std::uint64_t seed,
                             bool check_each_step = true) {
  model<T> m(kShapes, seed);
  host_engine eng(cfg);
  zf_test::zenflow_reference ref(cfg);
  m.add_to_reference(ref);
  const auto ids = register_model(eng, m);
  eng.initialize();
  double worst = 0.0;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    const float lr = cfg.adam.lr * (1.0f - 0.3f * static_cast<float>(t) / static_cast<float>(steps));
    const auto rep = eng.step(lr);
    ref.step(m.grads_as_float(), static_cast<double>(lr));
    EXPECT_EQ(rep.selection, ref.last_step_selected()) << "step " << t;
    EXPECT_EQ(rep.window_closed, ref.last_step_closed_window()) << "step " << t;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (m.shapes[p].matrix) {
        EXPECT_EQ(eng.selected(ids[p]), ref.selected(p)) << "step " << t << " param " << p;
      }
    }
    if (check_each_step) {
      worst = std::max(worst, zf_engine_test::max_weight_ulps(m, ref));
    }
  }
  eng.flush();
  ref.flush();
  worst = std::max(worst, zf_engine_test::max_weight_ulps(m, ref));
  EXPECT_EQ(eng.stats().selections, ref.stats().selections);
  EXPECT_EQ(eng.stats().windows_closed, ref.stats().windows_closed);
  EXPECT_EQ(eng.stats().host_jobs, ref.stats().host_jobs);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(eng.state(ids[p]).counts, ref.counts(p)) << "param " << p;
  }
  return worst;
}

TEST(engine_reference, fixed_windows_overlap_float) {
  auto cfg = small_config();
  const double u = run_against_reference<float>(cfg, 40, zf_test::base_seed());
  std::printf("worst %g\n", u);
  EXPECT_LT(u, 2000.0);
}

} // namespace
