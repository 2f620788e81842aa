// Engine test bodies shared by the cpu tests (host backend) and the gpu tests (CUDA backend):
// each case is written once over a `Driver`, which owns where the parameters live.
//
//   host_driver<T> (here): the engine works on the model's own host arrays.
//   emulated_driver<T> (here): the same arrays, the engine on an emulated device (its threads).
//   device_driver<T> (engine_gpu_test.cu): device copies, gradients up before each step and the
//   weights back after it.
//
// A Driver<T> has: `engine_type`; `Driver(model<T>&)`; `add(eng, p, options)` registers the
// model's parameter p; `initialize(eng)`; `step(eng, lr)` (the model's weights are current after
// it); `make_engine(cfg)`; `flush(eng)`; `state(eng, id)`; `pull()` (the model's weights from where they
// live).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/step_options.hpp>

#include "engine_harness.hpp"
#include "support/log_capture.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_engine_test {

/// True when two arrays of working-type values hold the same bits.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// step() with `opt`, its loss scale and found-inf in `scalars` (host memory: the host and emulated
/// backends'); the caller reads the found-inf the step wrote in scalars[1] once the step ran.
template <class Engine>
zenflow::step_report step_with_host_scalars(Engine& eng,
                                            float lr,
                                            cudaStream_t s,
                                            float (&scalars)[2],
                                            std::optional<float> loss_scale,
                                            float found_inf,
                                            zenflow::step_options opt) {
  scalars[0] = loss_scale.value_or(0.0f);
  scalars[1] = found_inf;
  opt.loss_scale = loss_scale ? &scalars[0] : nullptr;
  opt.found_inf = &scalars[1];
  return eng.step(lr, s, opt);
}

template <class T>
struct host_driver {
  using engine_type = zenflow::engine<zenflow::host_backend>;
  model<T>& m;
  explicit host_driver(model<T>& mod) : m(mod) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg);
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, const zenflow::param_options& options = {}) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len, options)
                     : eng.add_vector(m.w[p].data(), m.g[p].data(), sh.len, options);
  }
  void initialize(engine_type& eng) { eng.initialize(); }
  zenflow::step_report step(engine_type& eng, float lr) { return eng.step(lr); }
  /// step() with `opt` and its loss scale and found-inf in host memory; the found-inf it wrote.
  std::pair<zenflow::step_report, float> step_with(engine_type& eng,
                                                   float lr,
                                                   std::optional<float> loss_scale,
                                                   float found_inf,
                                                   zenflow::step_options opt) {
    const auto rep = step_with_host_scalars(eng, lr, nullptr, scalars, loss_scale, found_inf, opt);
    return {rep, scalars[1]};
  }
  float scalars[2] = {};
  /// The test may write the gradients grad_ready() announced (every pack ran already).
  void release(engine_type&) {}
  void flush(engine_type& eng) { eng.flush(); }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id); }
  void pull() {}
};

/// The timing of the emulated device of the emulated_driver's made from now on (tests that need a
/// slow copy engine set it, and reset it to {} when done).
inline zenflow::emulated_timing& emulated_case_timing() {
  static zenflow::emulated_timing timing{};
  return timing;
}

/// The engine on an emulated device (its consumer thread, the uploads on a stream of their own,
/// the ring's copies landing later) over the model's own arrays: step() synchronizes the training
/// stream before returning, so the model's weights are current and the test may write the next
/// gradients; the host job and the consumer still run concurrently with the training thread.
template <class T>
struct emulated_driver {
  using engine_type = zenflow::engine<zenflow::emulated_backend>;
  model<T>& m;
  zenflow::emulated_device device{emulated_case_timing()}; // outlives the engines this driver makes
  cudaStream_t s = device.create_stream();
  explicit emulated_driver(model<T>& mod) : m(mod) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg, zenflow::emulated_backend{device});
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, const zenflow::param_options& options = {}) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len, options)
                     : eng.add_vector(m.w[p].data(), m.g[p].data(), sh.len, options);
  }
  void initialize(engine_type& eng) { eng.initialize(s); }
  zenflow::step_report step(engine_type& eng, float lr) {
    const auto rep = eng.step(lr, s);
    device.synchronize_stream(s);
    return rep;
  }
  /// step() with `opt` and its loss scale and found-inf in the device's (host) memory, read and
  /// written on the stream; the found-inf it wrote.
  std::pair<zenflow::step_report, float> step_with(engine_type& eng,
                                                   float lr,
                                                   std::optional<float> loss_scale,
                                                   float found_inf,
                                                   zenflow::step_options opt) {
    const auto rep = step_with_host_scalars(eng, lr, s, scalars, loss_scale, found_inf, opt);
    device.synchronize_stream(s);
    return {rep, scalars[1]};
  }
  float scalars[2] = {};
  /// The test may write the gradients grad_ready() announced: the packs that read them are done.
  void release(engine_type& eng) {
    eng.release_gradients(s);
    device.synchronize_stream(s);
  }
  void flush(engine_type& eng) {
    eng.flush(s);
    device.synchronize_stream(s);
  }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id, s); }
  void pull() { device.synchronize_stream(s); }
};

/// Every mode the engine runs a parameter's updates in: ZenFlow with fixed windows (overlap on
/// and off), with Zen-auto and a warm-up, and the two baselines.
inline std::vector<std::pair<std::string, zenflow::config>> all_modes(unsigned host_threads = 1) {
  std::vector<std::pair<std::string, zenflow::config>> out;
  auto overlap = small_config(host_threads);
  out.emplace_back("zenflow fixed windows, overlap", overlap);
  auto sync = small_config(host_threads);
  sync.overlap_step = false;
  sync.update_interval = 3;
  sync.select_interval = 6;
  out.emplace_back("zenflow fixed windows, no overlap", sync);
  auto zen_auto = small_config(host_threads);
  zen_auto.update_interval = 0;
  zen_auto.max_update_interval = 5;
  zen_auto.auto_ratio = 0.6;
  zen_auto.full_warm_up_rounds = 4;
  zen_auto.select_interval = 9;
  out.emplace_back("zenflow Zen-auto with warm-up", zen_auto);
  auto offload = small_config(host_threads);
  offload.mode = zenflow::optimizer_mode::offload_sync;
  out.emplace_back("offload_sync", offload);
  auto gpu = small_config(host_threads);
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  out.emplace_back("gpu_adamw", gpu);
  return out;
}

/// Per-parameter options of kShapes (two matrices, two vectors) that make every parameter's
/// hyper-parameters different, the common recipe included (no decay on the vectors), and the
/// float64 reference's view of them.
struct group_case {
  std::vector<zenflow::param_options> options;
  std::vector<zf_test::param_hyper> hyper;
};
inline group_case kshapes_groups() {
  group_case g;
  g.options = {{.lr_scale = 0.5f, .weight_decay = 0.2f, .name = "layer0.weight"},
               {.weight_decay = 0.0f, .name = "layer0.bias"},
               {.lr_scale = 2.0f, .name = "layer1.weight"},
               {.lr_scale = 0.25f, .weight_decay = 0.0f, .name = "layer1.bias"}};
  g.hyper = {{0.5, 0.2}, {1.0, 0.0}, {2.0, std::nullopt}, {0.25, 0.0}};
  return g;
}

/// The model's parameters registered with `groups`' options and added to the reference with its
/// hyper-parameters; the engine initialized. Returns the ids.
template <class T, class Driver, class Engine>
std::vector<zenflow::param_id> register_groups(
    const model<T>& m, Driver& d, Engine& eng, zf_test::zenflow_reference& ref, const group_case& groups) {
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    const auto& sh = m.shapes[p];
    if (sh.matrix) {
      ref.add_matrix(sh.channels, sh.len, zenflow::dtype_of<T>(), m.weights_as_float(p), groups.hyper[p]);
    } else {
      ref.add_vector(sh.len, zenflow::dtype_of<T>(), m.weights_as_float(p), groups.hyper[p]);
    }
    ids.push_back(d.add(eng, p, groups.options[p]));
  }
  d.initialize(eng);
  return ids;
}

/// The loop of a run against the reference: `steps` steps, each with new gradients and a decaying
/// lr, `step(t, lr)` stepping the engine and the reference and returning the engine's report;
/// the window closes and the selections checked after every step, the counts at the end. Returns
/// the worst weight distance (ulps of T) after any step.
template <class T, class Driver, class Engine, class Step>
double run_against_reference(model<T>& m,
                             Driver& d,
                             Engine& eng,
                             zf_test::zenflow_reference& ref,
                             const std::vector<zenflow::param_id>& ids,
                             const zenflow::config& cfg,
                             int steps,
                             Step&& step) {
  double worst = 0.0;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    const float lr = cfg.adam.lr * (1.0f - 0.3f * static_cast<float>(t) / static_cast<float>(steps));
    const zenflow::step_report rep = step(t, lr);
    EXPECT_EQ(rep.window_closed, ref.last_step_closed_window()) << "step " << t;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (m.shapes[p].matrix && cfg.mode == zenflow::optimizer_mode::zenflow) {
        EXPECT_EQ(eng.selected(ids[p]), ref.selected(p)) << "step " << t << " param " << p;
      }
    }
    worst = std::max(worst, max_weight_ulps(m, ref));
  }
  d.flush(eng);
  ref.flush();
  worst = std::max(worst, max_weight_ulps(m, ref));
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(d.state(eng, ids[p]).counts, ref.counts(p)) << "param " << p;
  }
  return worst;
}

/// The engine with per-parameter options against the float64 reference given the same values,
/// `steps` steps. Returns the worst weight distance (ulps of T) after any step.
template <template <class> class Driver, class T>
double param_groups_against_reference(const zenflow::config& cfg,
                                      int steps,
                                      std::uint64_t seed,
                                      const group_case& groups = kshapes_groups()) {
  model<T> m(kShapes, seed);
  Driver<T> d(m);
  const auto owned = d.make_engine(cfg);
  auto& eng = *owned;
  zf_test::zenflow_reference ref(cfg);
  const auto ids = register_groups(m, d, eng, ref, groups);
  return run_against_reference(m, d, eng, ref, ids, cfg, steps, [&](int, float lr) {
    const auto rep = d.step(eng, lr);
    ref.step(m.grads_as_float(), static_cast<double>(lr));
    return rep;
  });
}

/// A one-parameter model registered with {lr_scale, weight_decay} must give the same bits as the
/// same model with weight_decay in the config and every step's lr multiplied by lr_scale (in
/// float, as the engine does): weights after every step, and the final optimizer state.
template <template <class> class Driver, class T>
void expect_options_equal_global_config(
    zenflow::config cfg, shape sh, float lr_scale, float weight_decay, int steps, std::uint64_t seed) {
  SCOPED_TRACE("mode " + std::string(zenflow::to_string(cfg.mode)) + ", matrix " + std::to_string(sh.matrix));
  cfg.adam.weight_decay = 0.01f; // what the options must override
  auto global = cfg;
  global.adam.weight_decay = weight_decay;
  model<T> ma({sh}, seed), mb({sh}, seed);
  Driver<T> da(ma), db(mb);
  const auto owned_a = da.make_engine(cfg);
  const auto owned_b = db.make_engine(global);
  auto& ea = *owned_a;
  auto& eb = *owned_b;
  const auto ia = da.add(ea, 0, {.lr_scale = lr_scale, .weight_decay = weight_decay});
  const auto ib = db.add(eb, 0);
  da.initialize(ea);
  db.initialize(eb);
  std::int64_t changed = 0;
  for (int t = 0; t < steps; ++t) {
    ma.next_grads();
    mb.g = ma.g;
    const auto before = ma.w[0];
    const float lr = 1e-2f * (1.0f + 0.5f * std::cos(0.3f * static_cast<float>(t)));
    (void)da.step(ea, lr);
    (void)db.step(eb, lr * lr_scale);
    changed += same_bits(before, ma.w[0]) ? 0 : 1;
    ASSERT_TRUE(same_bits(ma.w[0], mb.w[0])) << "step " << t;
  }
  da.flush(ea);
  db.flush(eb);
  EXPECT_TRUE(same_bits(ma.w[0], mb.w[0]));
  const auto sa = da.state(ea, ia);
  const auto sb = db.state(eb, ib);
  EXPECT_EQ(0, std::memcmp(sa.master.data(), sb.master.data(), sa.master.size() * 4));
  EXPECT_EQ(0, std::memcmp(sa.m.data(), sb.m.data(), sa.m.size() * 4));
  EXPECT_EQ(0, std::memcmp(sa.v.data(), sb.v.data(), sa.v.size() * 4));
  EXPECT_EQ(sa.counts, sb.counts);
  EXPECT_GT(changed, steps / 2); // the weights really moved
}

/// Gradients whose squared norm overflows fp32 while every element is finite. Each case is one
/// step's gradient change on top of seeded ordinary gradients.
enum class overflow_kind {
  one_element,       ///< the issue's reproduction: one element 3e19 (its square is > FLT_MAX)
  near_flt_max,      ///< elements near the largest bf16 / float values
  channel_aggregate, ///< each element's square finite, one channel's sum overflows
  tensor_aggregate,  ///< every channel score finite, the tensor's sum overflows
  across_tensors,    ///< every tensor's sum finite, the global sum overflows
};

inline const char* to_string(overflow_kind k) {
  switch (k) {
  case overflow_kind::one_element:
    return "one_element";
  case overflow_kind::near_flt_max:
    return "near_flt_max";
  case overflow_kind::channel_aggregate:
    return "channel_aggregate";
  case overflow_kind::tensor_aggregate:
    return "tensor_aggregate";
  case overflow_kind::across_tensors:
    return "across_tensors";
  }
  return "?";
}

/// Writes the overflow of `kind` into the model's gradients (bf16 or float; the first two shapes
/// are matrices of >= 32 channels of >= 4 elements).
template <class T>
void poison_with_large_values(model<T>& m, overflow_kind kind) {
  const auto set = [&](std::size_t p, std::int64_t c, std::int64_t i, float v) {
    m.g[p][static_cast<std::size_t>(c * m.shapes[p].len + i)] = zenflow::from_float<T>(v);
  };
  switch (kind) {
  case overflow_kind::one_element:
    set(0, 5, 3, 3e19f);
    break;
  case overflow_kind::near_flt_max:
    set(0, 7, 1, 3.0e38f);
    set(0, 9, 2, -2.5e38f);
    set(1, 3, 0, 1.0e38f);
    break;
  case overflow_kind::channel_aggregate:
    for (std::int64_t i = 0; i < 4; ++i) {
      set(0, 11, i, 1.0e19f); // squares 1e38 each: the channel's fp32 sum overflows
    }
    break;
  case overflow_kind::tensor_aggregate:
    for (std::int64_t c = 0; c < 32; ++c) {
      set(0, c, 0, 1.5e19f); // channel scores ~2.25e38 (finite), their sum is not
    }
    break;
  case overflow_kind::across_tensors:
    set(0, 2, 0, 1.5e19f); // 2.25e38 in each tensor: the sum of the two overflows
    set(1, 4, 1, 1.5e19f);
    break;
  }
}

/// Two matrices of 64 x 32 and a vector: the shape.
inline const std::vector<shape> kOverflowShapes = {{true, 64, 32}, {true, 40, 32}, {false, 1, 24}};

/// gradient_clipping 1.0, ordinary steps, then at step `at` an overflowing (finite) gradient: the
/// step must be applied (not skipped), clipped by the true norm, as the float64 reference does.
/// Returns the worst weight distance (ulps of T) over the run.
template <template <class> class Driver, class T>
double
overflow_against_reference(zenflow::config cfg, overflow_kind kind, int steps, int at, std::uint64_t seed) {
  SCOPED_TRACE(std::string("overflow ") + to_string(kind) + ", mode " +
               std::string(zenflow::to_string(cfg.mode)));
  cfg.gradient_clipping = 1.0f;
  model<T> m(kOverflowShapes, seed);
  Driver<T> d(m);
  const auto owned = d.make_engine(cfg);
  auto& eng = *owned;
  zf_test::zenflow_reference ref(cfg);
  m.add_to_reference(ref);
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    (void)d.add(eng, p);
  }
  d.initialize(eng);
  double worst = 0.0;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    if (t == at) {
      poison_with_large_values(m, kind);
    }
    const auto before = m.w;
    const auto rep = d.step(eng, 1e-2f);
    ref.step(m.grads_as_float(), 1e-2);
    EXPECT_FALSE(ref.last_step_skipped()) << "step " << t;
    if (rep.skip_known) {
      EXPECT_FALSE(rep.skipped) << "step " << t << ": finite gradients must never be skipped";
    }
    if (t == at) {
      EXPECT_LT(ref.last_coef(), 1e-18); // the clip really is the true norm's
      bool moved = false;
      for (std::size_t p = 0; p < m.w.size(); ++p) {
        moved = moved || !same_bits(before[p], m.w[p]);
      }
      EXPECT_TRUE(moved) << "the overflowing step must update the weights";
    }
    worst = std::max(worst, max_weight_ulps(m, ref));
  }
  d.flush(eng);
  ref.flush();
  worst = std::max(worst, max_weight_ulps(m, ref));
  EXPECT_EQ(eng.stats().skipped_steps, 0);
  return worst;
}

/// Issue 36: channels whose squared L2 overflows fp32 all score +Inf, and the selection ranks
/// them by their fp64 sums (the larger first, ties to the lower index), as the float64 reference
/// does. kOverflowShapes, k = 1 of each matrix, a selection every 2 steps from step 0:
///   step 0, the reproduction: matrix 0's channel 5 holds one element 3e19, channel 40
///     one element 1e20 (squares ~9e38 and ~1e40): channel 40, not 5;
///   step 2: matrix 0's channels 9 and 30 one element 1e20 each, channel 50 2e19 (a tie: 9);
///     matrix 1's channel 3 2e19, channel 33 5e19 (33);
///   step 4: three overflowing channels in matrix 1, the largest the last (39); in matrix 0 the
///     device-set row 9 (selected at step 2) 4e19 and the host-set row 60 6e19: 60, the larger sum
///     at the higher index (ranking by index would keep 9; with data parallel, 9's sum is every
///     rank's, 60's comes from its owner, the last rank).
/// Every step is applied (finite gradients), and the weights follow the reference's.
template <template <class> class Driver, class T>
void expect_overflowing_channels_rank_by_fp64(zenflow::config cfg, double max_ulps) {
  cfg.mode = zenflow::optimizer_mode::zenflow;
  cfg.gradient_clipping = 1.0f;
  cfg.full_warm_up_rounds = 0;
  cfg.select = zenflow::select_strategy::step;
  cfg.select_interval = 2;
  cfg.topk_ratio = 1.5 / 64; // k = 1 of 64 channels, and of 40
  model<T> m(kOverflowShapes, zf_test::base_seed() + 3600);
  Driver<T> d(m);
  const auto owned = d.make_engine(cfg);
  auto& eng = *owned;
  zf_test::zenflow_reference ref(cfg);
  m.add_to_reference(ref);
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    ids.push_back(d.add(eng, p));
  }
  d.initialize(eng);
  const auto set = [&](std::size_t p, std::int64_t c, std::int64_t i, float v) {
    m.g[p][static_cast<std::size_t>(c * m.shapes[p].len + i)] = zenflow::from_float<T>(v);
  };
  const std::vector<std::vector<std::int32_t>> expected[] = {{{40}, {}}, {{9}, {33}}, {{60}, {39}}};
  for (int t = 0; t < 6; ++t) {
    m.next_grads();
    if (t == 0) {
      set(0, 5, 3, 3e19f);
      set(0, 40, 7, 1e20f);
    } else if (t == 2) {
      set(0, 9, 0, 1e20f);
      set(0, 30, 31, 1e20f);
      set(0, 50, 4, 2e19f);
      set(1, 3, 1, 2e19f);
      set(1, 33, 2, 5e19f);
    } else if (t == 4) {
      set(1, 0, 0, 3e19f);
      set(1, 20, 5, 4e19f);
      set(1, 39, 9, 6e19f);
      set(0, 9, 2, 4e19f);
      set(0, 60, 6, 6e19f);
    }
    const auto rep = d.step(eng, 1e-2f);
    ref.step(m.grads_as_float(), 1e-2);
    if (rep.skip_known) {
      EXPECT_FALSE(rep.skipped) << "step " << t;
    }
    if (t % 2 == 0) {
      EXPECT_TRUE(rep.selection) << "step " << t;
      for (std::size_t p = 0; p < 2; ++p) {
        const auto& want = expected[t / 2][p];
        if (!want.empty()) {
          EXPECT_EQ(eng.selected(ids[p]), want) << "step " << t << " matrix " << p;
        }
        EXPECT_EQ(eng.selected(ids[p]), ref.selected(p)) << "step " << t << " matrix " << p;
      }
    }
  }
  d.flush(eng);
  ref.flush();
  EXPECT_LE(max_weight_ulps(m, ref), max_ulps);
  EXPECT_EQ(eng.stats().skipped_steps, 0);
}

/// Captures the log while alive; restores the quiet default after.
/// Captures the engine's own log messages (the shared helper, filtered to "zenflow::engine").
struct log_capture : zf_test::log_capture {
  log_capture() : zf_test::log_capture("zenflow::engine") {}
};

/// Destroying an engine whose last window (overlap_step, fixed windows of 2) was computed but
/// not applied: its weights are left as they were, a warning names the window's steps and
/// flush(), an info the open window's step; with flush() first, no warning and the weights of a
/// twin run flushed the same way.
template <template <class> class Driver>
void expect_destruction_drops_and_logs(zenflow::config cfg) {
  cfg.overlap_step = true;
  cfg.update_interval = 2;
  cfg.select_interval = 8;
  cfg.full_warm_up_rounds = 0;
  for (const bool flush_first : {false, true}) {
    SCOPED_TRACE(flush_first ? "flush() before destruction" : "no flush()");
    model<float> m(kShapes, zf_test::base_seed() + 700);
    model<float> twin(kShapes, zf_test::base_seed() + 700); // the same run, flushed
    Driver<float> dm(m), dt(twin);
    log_capture log;
    std::vector<std::vector<float>> at_destruction;
    {
      const auto owned = dm.make_engine(cfg);
      const auto owned2 = dt.make_engine(cfg);
      auto& eng = *owned;
      auto& eng2 = *owned2;
      for (std::size_t p = 0; p < kShapes.size(); ++p) {
        (void)dm.add(eng, p);
        (void)dt.add(eng2, p);
      }
      dm.initialize(eng);
      dt.initialize(eng2);
      for (int t = 0; t < 5; ++t) { // closes at steps 1 and 3; step 4 opens a window
        m.next_grads();
        twin.g = m.g;
        (void)dm.step(eng, 1e-2f);
        (void)dt.step(eng2, 1e-2f);
      }
      dt.flush(eng2);
      if (flush_first) {
        dm.flush(eng);
      }
      at_destruction = m.w;
    }
    dm.pull();
    for (std::size_t p = 0; p < m.w.size(); ++p) { // the destructor never writes the weights
      EXPECT_TRUE(same_bits(at_destruction[p], m.w[p])) << p;
    }
    std::size_t warnings = 0;
    std::size_t infos = 0;
    for (const auto& [level, msg] : log.lines) {
      if (level == zenflow::log_level::warning) {
        ++warnings;
        EXPECT_NE(msg.find("1 host window"), std::string::npos) << msg;
        EXPECT_NE(msg.find("steps 2..3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("flush()"), std::string::npos) << msg;
      } else if (level == zenflow::log_level::info) {
        ++infos;
        EXPECT_NE(msg.find("1 step(s)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("from step 4"), std::string::npos) << msg;
      }
    }
    // eng2 was flushed; eng only when flush_first: exactly eng's warning otherwise.
    EXPECT_EQ(warnings, flush_first ? 0u : 1u);
    EXPECT_EQ(infos, 2u); // both had one step in the open window
    // What the warning says was dropped is what flush() applies.
    bool differs = false;
    for (std::size_t p = 0; p < m.w.size(); ++p) {
      differs = differs || !same_bits(m.w[p], twin.w[p]);
    }
    EXPECT_EQ(differs, !flush_first);
  }
}

} // namespace zf_engine_test
