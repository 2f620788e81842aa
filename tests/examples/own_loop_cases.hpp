/// @file
/// The own loop against the engine (tests/examples/own_loop_test.cpp on the host,
/// own_loop_gpu_test.cu with the loop's device half on CUDA): the model, the gradients of every
/// step, the settings, and the run that compares them step by step. `Mirror` is where the loop's
/// parameters live: `weights(p)` / `grads(p)` for the loop, `grads_written(p)` after the host
/// gradients of a step are written, `weights_now(p)` the loop's weights on the host.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "../support/random.hpp"
#include "own_loop/own_loop.hpp"

namespace zf_own_loop_test {

struct shape {
  bool matrix;
  std::int64_t channels, len;
};
const std::vector<shape> shapes = {{true, 48, 24}, {false, 1, 24}, {true, 40, 32}};
constexpr std::int64_t steps = 40;
constexpr std::int64_t nan_step = 16; // a scheduled selection step: the selection waits for step 17

zenflow::config engine_config(bool overlap) {
  zenflow::config c;
  c.topk_ratio = 0.25;
  c.select = zenflow::select_strategy::step;
  c.select_interval = 16;
  c.update_interval = 0; // Zen-auto
  c.min_update_interval = 1;
  c.max_update_interval = 6;
  c.auto_ratio = 0.5;
  c.select_on_mass_drop = 0.8;
  c.min_select_interval = 4;
  c.overlap_step = overlap;
  c.full_warm_up_rounds = 0;
  c.adam.lr = 1e-2f;
  c.adam.weight_decay = 0.01f;
  c.gradient_clipping = 2.0f;
  c.host_threads = 2;
  // The loop keeps its host moments in fp32 (bf16 and int8 are the engine's: own_loop.hpp).
  c.host_moments = zenflow::moment_precision::fp32;
  return c;
}

own_loop::settings loop_settings(const zenflow::config& c) {
  own_loop::settings s;
  s.topk_ratio = c.topk_ratio;
  s.select_interval = c.select_interval_steps();
  s.windows = {c.update_interval, c.min_update_interval, c.max_update_interval, c.auto_ratio};
  s.select_on_mass_drop = c.select_on_mass_drop;
  s.min_select_interval = c.min_select_interval;
  s.overlap_step = c.overlap_step;
  s.adam = c.adam;
  s.gradient_clipping = c.gradient_clipping;
  s.loss_scale = c.loss_scale;
  return s;
}

/// Step t's gradient of parameter p: noise, with a strong set of channels (every 5th, shifted at
/// steps 5 and 24: the trigger sees the device set lose its share) and a NaN at nan_step.
template <class T>
void write_gradients(std::vector<std::vector<T>>& g, std::int64_t t) {
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const auto noise =
        zf_test::random_values<float>(g[p].size(), 1000 + static_cast<std::uint64_t>(t) * 16 + p, 0.05f);
    for (std::int64_t c = 0; c < shapes[p].channels; ++c) {
      const bool strong = (c + (t >= 5 ? 2 : 0) + (t >= 24 ? 2 : 0)) % 5 == 0;
      for (std::int64_t j = 0; j < shapes[p].len; ++j) {
        const auto i = static_cast<std::size_t>(c * shapes[p].len + j);
        g[p][i] = zenflow::from_float<T>(noise[i] * (strong ? 2.0f : 1.0f) + (strong ? 0.02f : 0.0f));
      }
    }
  }
  if (t == nan_step) {
    g[0][7] = zenflow::from_float<T>(std::numeric_limits<float>::quiet_NaN());
  }
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// The model's initial weights.
template <class T>
std::vector<std::vector<T>> initial_weights() {
  std::vector<std::vector<T>> w;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    w.push_back(
        zf_test::random_values<T>(static_cast<std::size_t>(shapes[p].channels * shapes[p].len), 7 + p));
  }
  return w;
}

/// `steps` steps of the engine (host backend) and of `loop` (its parameters in `mirror`) on the
/// same gradients, compared after each; then the optimizer state of every matrix channel.
template <class T, class Side, class Mirror>
void run_against_engine(bool overlap, Side side, Mirror& mirror) {
  SCOPED_TRACE(overlap ? "overlap" : "no overlap");
  const zenflow::config cfg = engine_config(overlap);
  std::vector<std::vector<T>> w_engine = initial_weights<T>(), g;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    g.emplace_back(w_engine[p].size());
  }
  zenflow::engine<zenflow::host_backend> eng(cfg);
  zenflow::worker_pool pool(2);
  own_loop::zenflow_loop<T, Side> loop(loop_settings(cfg), side, &pool);
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    if (shapes[p].matrix) {
      ids.push_back(eng.add_matrix(w_engine[p].data(), g[p].data(), shapes[p].channels, shapes[p].len));
      loop.add_matrix(mirror.weights(p), mirror.grads(p), shapes[p].channels, shapes[p].len);
    } else {
      ids.push_back(eng.add_vector(w_engine[p].data(), g[p].data(), shapes[p].len));
      loop.add_vector(mirror.weights(p), mirror.grads(p), shapes[p].len);
    }
  }
  eng.initialize();
  loop.start();
  int selections = 0, skipped = 0;
  std::set<std::int64_t> window_lengths;
  std::int64_t open_since = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    write_gradients(g, t);
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      mirror.grads_written(p, g[p]);
    }
    const float lr = 1e-2f * (1.0f + 0.01f * static_cast<float>(t)); // a schedule: every step its own lr
    const zenflow::step_report rep = eng.step(lr);
    const own_loop::step_result mine = loop.step(lr);
    ASSERT_EQ(mine.selection, rep.selection);
    ASSERT_EQ(mine.window_closed, rep.window_closed);
    ASSERT_EQ(mine.skipped, rep.skipped);
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      ASSERT_TRUE(same_bits(mirror.weights_now(p), w_engine[p])) << "parameter " << p;
    }
    selections += rep.selection ? 1 : 0;
    skipped += rep.skipped ? 1 : 0;
    if (rep.window_closed) {
      window_lengths.insert(t + 1 - open_since);
      open_since = t + 1;
    }
  }
  eng.flush();
  loop.finish();
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    EXPECT_TRUE(same_bits(mirror.weights_now(p), w_engine[p])) << "parameter " << p << " after finish()";
  }
  std::size_t i = 0;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    if (!shapes[p].matrix) {
      continue;
    }
    const zenflow::param_state st = eng.state(ids[p]);
    const auto L = static_cast<std::size_t>(shapes[p].len);
    for (std::int32_t c = 0; c < shapes[p].channels; ++c) {
      const auto row = loop.matrix_row(i, c);
      const auto at = static_cast<std::size_t>(c) * L;
      ASSERT_EQ(0, std::memcmp(row.master.data(), st.master.data() + at, L * 4)) << p << " channel " << c;
      ASSERT_EQ(0, std::memcmp(row.m.data(), st.m.data() + at, L * 4)) << p << " channel " << c;
      ASSERT_EQ(0, std::memcmp(row.v.data(), st.v.data() + at, L * 4)) << p << " channel " << c;
      ASSERT_EQ(row.count, st.counts[static_cast<std::size_t>(c)]) << p << " channel " << c;
    }
    ++i;
  }
  // What the run covered (so that the comparison above means something).
  const zenflow::stats st = eng.stats();
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(st.skipped_steps, 1);
  EXPECT_GE(selections, 4);
  EXPECT_GE(st.mass_drop_selections, 1) << "the trigger never fired";
  EXPECT_GE(window_lengths.size(), 2u) << "Zen-auto chose one length only";
  EXPECT_GE(st.windows_closed, 8);
}

} // namespace zf_own_loop_test
