// The engine against the float64 reference, and against its own baselines bit for bit: test
// bodies written once over a Driver (engine_cases.hpp: host_driver and emulated_driver in the cpu
// suite, device_driver in the gpu suite), so that every backend is held to the same assertions:
// selections, set changes, window closes, skipped steps, host jobs, weights after every step,
// counts, and the full optimizer state of the baselines.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "host_moment_checks.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_engine_test {

/// Runs `steps` steps of the engine and the reference on the same gradients (one element
/// poisoned, NaN or Inf, at each step of `bad_steps`) of a model of `shapes`; returns the worst
/// weight distance (ulps of T) seen after any step. The Driver's step() may replace the model's
/// gradients (data_parallel_driver.hpp: by their mean over the ranks): the reference steps on the
/// gradients as they are after it.
template <template <class> class Driver, class T>
double against_reference(const zenflow::config& cfg,
                         int steps,
                         std::uint64_t seed,
                         const std::vector<int>& bad_steps = {},
                         const std::vector<shape>& shapes = kShapes) {
  model<T> m(shapes, seed);
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
  double worst = 0.0;
  std::int64_t warm_jobs = 0;
  std::int64_t set_changes = 0;
  std::vector<std::vector<std::int32_t>> last_sel(ids.size());
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    const bool bad = std::find(bad_steps.begin(), bad_steps.end(), t) != bad_steps.end();
    if (bad) {
      // One poisoned element somewhere: alternately NaN and Inf, in a matrix or a vector.
      auto& g = m.g[static_cast<std::size_t>(t) % m.g.size()];
      g[g.size() / 2] = zenflow::from_float<T>(t % 2 == 0 ? NAN : INFINITY);
    }
    // A warm-up step and an offload_sync step are host jobs of their own (not the reference's).
    if ((t < cfg.full_warm_up_rounds || cfg.mode == zenflow::optimizer_mode::offload_sync) && !bad) {
      ++warm_jobs;
    }
    const float lr = cfg.adam.lr * (1.0f - 0.3f * static_cast<float>(t) / static_cast<float>(steps));
    const auto rep = d.step(eng, lr);
    ref.step(m.grads_as_float(), static_cast<double>(lr));
    EXPECT_EQ(rep.selection, ref.last_step_selected()) << "step " << t;
    EXPECT_EQ(rep.window_closed, ref.last_step_closed_window()) << "step " << t;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (m.shapes[p].matrix) {
        EXPECT_EQ(eng.selected(ids[p]), ref.selected(p)) << "step " << t << " param " << p;
        if (!last_sel[p].empty() && last_sel[p] != ref.selected(p)) {
          ++set_changes;
        }
        last_sel[p] = ref.selected(p);
      }
    }
    if (rep.skip_known) { // device backends learn a step's flag later (counted after flush)
      EXPECT_EQ(rep.skipped, bad) << "step " << t;
    }
    worst = std::max(worst, max_weight_ulps(m, ref));
  }
  d.flush(eng);
  ref.flush();
  worst = std::max(worst, max_weight_ulps(m, ref));
  EXPECT_EQ(eng.stats().selections, ref.stats().selections);
  EXPECT_EQ(eng.stats().mass_drop_selections, ref.stats().mass_drop_selections);
  EXPECT_EQ(eng.stats().windows_closed, ref.stats().windows_closed);
  // The engine also counts its synchronous warm-up steps as host jobs (one each).
  EXPECT_EQ(eng.stats().host_jobs, ref.stats().host_jobs + warm_jobs);
  EXPECT_EQ(eng.stats().skipped_steps, ref.stats().skipped_steps);
  // The run must exercise what it claims: re-selections that change the set (ZenFlow), selections
  // that select_on_mass_drop fired where it is on.
  if (cfg.mode == zenflow::optimizer_mode::zenflow) {
    EXPECT_GT(set_changes, 0);
  }
  if (cfg.mass_trigger()) {
    EXPECT_GT(ref.stats().mass_drop_selections, 0);
  }
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(d.state(eng, ids[p]).counts, ref.counts(p)) << "param " << p;
  }
  if (cfg.host_moments == zenflow::moment_precision::bf16) {
    expect_host_moments_match(d, eng, ids, m, ref);
  }
  if (cfg.host_moments == zenflow::moment_precision::int8) {
    expect_int8_host_moments_match(d, eng, ids, m, ref);
  }
  return worst;
}

/// One configuration against the reference: its working type, steps, seed, poisoned steps and the
/// bound on the weight distance (ulps: 1.01 for 16-bit types, whose rounding hides the fp32
/// arithmetic's; 64 for float).
struct reference_case {
  std::string name;
  zenflow::dtype type;
  std::function<void(zenflow::config&)> configure;
  int steps;
  std::uint64_t seed_offset;
  std::vector<int> bad_steps;
  std::vector<shape> shapes = kShapes;
};

inline std::vector<reference_case> reference_cases() {
  using zenflow::dtype;
  return {
      {"fixed_windows_overlap_float", dtype::f32, [](zenflow::config&) {}, 40, 0, {}},
      {"zen_auto_with_warm_up_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.update_interval = 0; // Zen-auto
         c.max_update_interval = 6;
         c.auto_ratio = 0.5;
         c.full_warm_up_rounds = 3;
         c.select_interval = 12;
       },
       45,
       1,
       {}},
      {"no_overlap_clipping_loss_scale_fp16",
       dtype::f16,
       [](zenflow::config& c) {
         c.overlap_step = false;
         c.update_interval = 3;
         c.select_interval = 6;
         c.gradient_clipping = 0.5f;
         c.loss_scale = 64.0f;
       },
       40,
       2,
       {}},
      {"sqrt_lr_scale_l1_importance_adam_l2_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.host_lr_scale = zenflow::host_lr_scaling::sqrt;
         c.importance = zenflow::channel_norm::l1;
         c.adam.decoupled = false;
         c.update_interval = 4;
         c.select_interval = 8;
       },
       40,
       3,
       {}},
      // The two rules of docs/defaults.md beyond linear/sqrt/none: "capped" at windows longer than
      // its cap, "snr" (a per-matrix factor from the window's own gradients) with Zen-auto's windows.
      {"capped_lr_scale_windows_longer_than_the_cap_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.host_lr_scale = zenflow::host_lr_scaling::capped;
         c.update_interval = 6;
         c.select_interval = 12;
       },
       40,
       8,
       {}},
      {"snr_lr_scale_zen_auto_warm_up_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.host_lr_scale = zenflow::host_lr_scaling::snr;
         c.update_interval = 0;
         c.max_update_interval = 6;
         c.auto_ratio = 0.5;
         c.full_warm_up_rounds = 2;
         c.select_interval = 12;
       },
       45,
       9,
       {}},
      {"snr_lr_scale_no_overlap_clipping_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.host_lr_scale = zenflow::host_lr_scaling::snr;
         c.overlap_step = false;
         c.update_interval = 5;
         c.select_interval = 10;
         c.gradient_clipping = 0.5f;
       },
       40,
       10,
       {}},
      {"zen_auto_overlap_float_many_selections",
       dtype::f32,
       [](zenflow::config& c) {
         c.update_interval = 0;
         c.auto_ratio = 0.99;
         c.max_update_interval = 5;
         c.select_interval = 7;
       },
       60,
       4,
       {}},
      // 1: warm-up; 2 and 3: the first selection step and the next (pending twice); 9: mid-window;
      // 14: the selection step 14; 20: a window close.
      {"nan_inf_steps_including_a_pending_selection_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.full_warm_up_rounds = 2;
         c.update_interval = 3;
         c.select_interval = 6;
       },
       30,
       5,
       {1, 2, 3, 9, 14, 20}},
      {"zen_auto_nan_steps_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.update_interval = 0;
         c.max_update_interval = 4;
         c.auto_ratio = 0.6;
         c.select_interval = 10;
       },
       40,
       6,
       {5, 6, 10, 17}},
      // The host side writes the accumulator on a window's first good step and leaves it as it is
      // after the window (no zeroing), so nothing stale may reach the next window's mean (a stale
      // row would be off by whole updates). Windows start at 0, 4, 8, ...; 4: a first step; 12-15:
      // a window skipped whole; 16: a selection step that starts a window; 21: mid-window. "snr"
      // reads |acc|_1 over the host set only.
      {"first_good_step_of_a_window_overwrites_the_last_window_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.update_interval = 4;
         c.select_interval = 8;
         c.host_lr_scale = zenflow::host_lr_scaling::snr;
       },
       32,
       11,
       {4, 12, 13, 14, 15, 16, 21}},
      // The same without overlap: one accumulator, a skipped step 0 (the very first window).
      {"first_good_step_of_a_window_no_overlap_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.overlap_step = false;
         c.update_interval = 4;
         c.select_interval = 8;
         c.host_lr_scale = zenflow::host_lr_scaling::snr;
       },
       32,
       12,
       {0, 4, 8, 9, 10, 11, 20}},
      // bf16 host moments (host_moments "bf16"): stochastically rounded after every host update
      // (warm-up, windows), rounded to nearest when a row leaves the device, widened exactly when
      // one enters it; the reference rounds the same way (tests/support/bf16_moments_reference.hpp).
      // A bf16 working type: the weights agree within the rounding of their own type even where
      // the engine's fp32 moment and the reference's float64 one straddle a rounding threshold.
      {"bf16_host_moments_warm_up_overlap_reselection_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.host_moments = zenflow::moment_precision::bf16;
         c.full_warm_up_rounds = 3;
         c.update_interval = 3;
         c.select_interval = 6;
       },
       45,
       13,
       {7}},
      // int8 host moments (host_moments "int8"): block-wise quantized after every host update
      // (stochastically) and when a row leaves the device (to nearest), dequantized when one
      // enters it; the reference quantizes the same way (tests/support/int8_moments_reference.hpp).
      // A bf16 working type: a one-step difference of a moment stays within the weights' rounding.
      {"int8_host_moments_warm_up_overlap_reselection_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.host_moments = zenflow::moment_precision::int8;
         c.full_warm_up_rounds = 3;
         c.update_interval = 3;
         c.select_interval = 6;
       },
       45,
       19,
       {7},
       {{true, 40, 150}, {false, 1, 5}, {true, 13, 16}, {false, 1, 70}}},
      // select_on_mass_drop (docs/engine-semantics.md, 5): the harness's channel scales drift, so
      // the device set loses its share; scheduled selections only at step 0. Bad steps inside the
      // trigger's blocks, Zen-auto windows, then fixed windows without overlap.
      {"mass_drop_trigger_zen_auto_nan_steps_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.update_interval = 0;
         c.max_update_interval = 2;
         c.select_interval = 1000;
         c.select_on_mass_drop = 0.9;
         c.min_select_interval = 12;
       },
       80,
       14,
       {20, 33, 47}},
      {"mass_drop_trigger_fixed_windows_no_overlap_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.overlap_step = false;
         c.update_interval = 3;
         c.select_interval = 1000;
         c.select_on_mass_drop = 0.97;
         c.min_select_interval = 11;
       },
       80,
       15,
       {}},
      // The trigger with fixed windows and overlap: it reads the rest masses as Zen-auto does (with
      // data parallel every rank needs the one-rank masses, not its own block's).
      {"mass_drop_trigger_fixed_windows_overlap_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.update_interval = 2;
         c.select_interval = 1000;
         c.select_on_mass_drop = 1.0;
         c.min_select_interval = 6;
       },
       60,
       18,
       {}},
      // Wide matrices: a D2H slot holds 64 and 25 channels, so with data parallel the slots
      // straddle the owners' blocks (every slot is packed for the rest mass, only the rank's own
      // rows of it go down); a matrix of 2 channels leaves a rank of 3 an empty block. bf16 host
      // moments (each rank rounds its block with the whole matrix's indices; entering rows cross
      // as bf16), Zen-auto (its rest masses), the weights up chunk by chunk, a NaN at step 5.
      {"wide_matrices_bf16_host_moments_zen_auto_chunk_ring_bf16",
       dtype::bf16,
       [](zenflow::config& c) {
         c.host_moments = zenflow::moment_precision::bf16;
         c.update_interval = 0;
         c.max_update_interval = 5;
         c.auto_ratio = 0.5;
         c.select_interval = 7;
         c.upload = zenflow::upload_policy::chunk_ring;
       },
       22,
       16,
       {5},
       {{true, 301, 32}, {false, 1, 7}, {true, 77, 80}, {true, 2, 8}}},
      // offload_sync: every channel's state on the host (split by owner with data parallel), every
      // step a host job; bad steps in a matrix and in a vector.
      {"offload_sync_nan_steps_float",
       dtype::f32,
       [](zenflow::config& c) {
         c.mode = zenflow::optimizer_mode::offload_sync;
         c.overlap_step = false;
       },
       12,
       17,
       {4, 9}},
  };
}

/// The cases' names (test parameters).
inline std::vector<std::string> reference_case_names() {
  std::vector<std::string> names;
  for (const auto& c : reference_cases()) {
    names.push_back(c.name);
  }
  return names;
}

/// Runs the reference case `name` on `Driver` with `host_threads` host threads.
template <template <class> class Driver>
void run_reference_case(const std::string& name, unsigned host_threads = 1) {
  const auto cases = reference_cases();
  const auto it =
      std::find_if(cases.begin(), cases.end(), [&](const reference_case& c) { return c.name == name; });
  ASSERT_NE(it, cases.end()) << "no reference case " << name;
  SCOPED_TRACE("reference case " + name);
  auto cfg = small_config(host_threads);
  it->configure(cfg);
  const std::uint64_t seed = zf_test::base_seed() + it->seed_offset;
  switch (it->type) {
  case zenflow::dtype::f32:
    EXPECT_LT((against_reference<Driver, float>(cfg, it->steps, seed, it->bad_steps, it->shapes)), 64.0);
    break;
  case zenflow::dtype::bf16:
    EXPECT_LE((against_reference<Driver, zenflow::bfloat16>(cfg, it->steps, seed, it->bad_steps, it->shapes)),
              1.01);
    break;
  case zenflow::dtype::f16:
    EXPECT_LE((against_reference<Driver, zenflow::half>(cfg, it->steps, seed, it->bad_steps, it->shapes)),
              1.01);
    break;
  }
}

/// Runs two engines on the same gradients and expects bit-identical weights and state after
/// every step. Counts in `reentries_out` how many times a channel re-entered the first engine's
/// selection. `shapes`: the parameters (kShapes by default).
template <template <class> class Driver, class T>
void expect_identical(const zenflow::config& a,
                      const zenflow::config& b,
                      int steps,
                      std::uint64_t seed,
                      std::int64_t* reentries_out = nullptr,
                      const std::vector<shape>& shapes = kShapes) {
  model<T> ma(shapes, seed);
  model<T> mb(shapes, seed);
  Driver<T> da(ma);
  Driver<T> db(mb);
  const auto owned_a = da.make_engine(a);
  const auto owned_b = db.make_engine(b);
  auto& ea = *owned_a;
  auto& eb = *owned_b;
  std::vector<zenflow::param_id> ia, ib;
  for (std::size_t p = 0; p < ma.shapes.size(); ++p) {
    ia.push_back(da.add(ea, p));
    ib.push_back(db.add(eb, p));
  }
  da.initialize(ea);
  db.initialize(eb);
  std::vector<std::vector<std::int32_t>> ever_left(ia.size());
  std::int64_t reentries = 0;
  for (int t = 0; t < steps; ++t) {
    ma.next_grads();
    mb.g = ma.g;
    const float lr = 1e-2f / (1.0f + 0.05f * static_cast<float>(t));
    std::vector<std::vector<std::int32_t>> before(ia.size());
    for (std::size_t p = 0; p < ia.size(); ++p) {
      before[p] = ea.selected(ia[p]);
    }
    (void)da.step(ea, lr);
    (void)db.step(eb, lr);
    for (std::size_t p = 0; p < ia.size(); ++p) {
      for (std::size_t i = 0; i < ma.w[p].size(); ++i) {
        ASSERT_EQ(zenflow::bit_pattern(ma.w[p][i]), zenflow::bit_pattern(mb.w[p][i]))
            << "step " << t << " param " << p << " element " << i;
      }
      const auto sa = da.state(ea, ia[p]);
      const auto sb = db.state(eb, ib[p]);
      ASSERT_EQ(sa.counts, sb.counts) << "step " << t << " param " << p;
      ASSERT_EQ(0, std::memcmp(sa.master.data(), sb.master.data(), sa.master.size() * 4)) << "step " << t;
      ASSERT_EQ(0, std::memcmp(sa.m.data(), sb.m.data(), sa.m.size() * 4)) << "step " << t;
      ASSERT_EQ(0, std::memcmp(sa.v.data(), sb.v.data(), sa.v.size() * 4)) << "step " << t;
      // Track channels that left the device set and came back.
      const auto now = ea.selected(ia[p]);
      for (const std::int32_t c : before[p]) {
        if (!std::binary_search(now.begin(), now.end(), c)) {
          ever_left[p].push_back(c);
        }
      }
      for (const std::int32_t c : now) {
        if (!std::binary_search(before[p].begin(), before[p].end(), c) &&
            std::find(ever_left[p].begin(), ever_left[p].end(), c) != ever_left[p].end()) {
          ++reentries;
        }
      }
    }
  }
  if (reentries_out != nullptr) {
    *reentries_out = reentries;
  }
}

/// The baselines the engine must equal bit for bit (docs/engine-semantics.md): selecting and
/// closing every step is offload_sync; offload_sync is gpu_adamw; a warm-up longer than the run
/// is gpu_adamw; top-k ratio 1 is dense AdamW.
template <template <class> class Driver>
void run_baseline_cases(unsigned host_threads = 1) {
  {
    SCOPED_TRACE("update_interval 1 without overlap equals offload_sync");
    // Every channel's update is the same arithmetic wherever it runs, so moving channels between
    // device and host every step must give the synchronous baseline bit for bit: a row moved to
    // the wrong place, a lost moment or count would show at once. Selections every step with
    // drifting gradients make channels leave and re-enter the device set.
    auto zen = small_config(host_threads);
    zen.update_interval = 1;
    zen.overlap_step = false;
    zen.select_interval = 1;
    auto sync = zen;
    sync.mode = zenflow::optimizer_mode::offload_sync;
    std::int64_t reentries = 0;
    expect_identical<Driver, zenflow::bfloat16>(zen, sync, 30, zf_test::base_seed() + 10, &reentries);
    EXPECT_GT(reentries, 5) << "the gradients did not move channels in and out of the selection";
  }
  {
    SCOPED_TRACE("offload_sync equals gpu_adamw");
    auto sync = small_config(host_threads);
    sync.mode = zenflow::optimizer_mode::offload_sync;
    sync.gradient_clipping = 1.0f;
    auto gpu = sync;
    gpu.mode = zenflow::optimizer_mode::gpu_adamw;
    expect_identical<Driver, zenflow::half>(sync, gpu, 12, zf_test::base_seed() + 11);
  }
  {
    SCOPED_TRACE("a warm-up longer than the run equals gpu_adamw");
    auto zen = small_config(host_threads);
    zen.full_warm_up_rounds = 1000;
    auto gpu = zen;
    gpu.mode = zenflow::optimizer_mode::gpu_adamw;
    expect_identical<Driver, float>(zen, gpu, 15, zf_test::base_seed() + 12);
  }
  {
    SCOPED_TRACE("top-k ratio 1 equals dense AdamW");
    auto zen = small_config(host_threads);
    zen.topk_ratio = 1.0;
    zen.update_interval = 0; // Zen-auto: every matrix votes, windows of one step
    auto gpu = zen;
    gpu.mode = zenflow::optimizer_mode::gpu_adamw;
    expect_identical<Driver, zenflow::bfloat16>(zen, gpu, 20, zf_test::base_seed() + 13);
  }
  {
    SCOPED_TRACE("one accumulator buffer equals two (host_accumulators 1 and 2)");
    // With one buffer the next window's first step waits for the closed window's job to have
    // read each parameter's rows; with two it fills its own. Nothing else differs: a row written
    // before the job read it, or a job that read a row of the next window, shows at once. Zen-auto
    // windows of 1 to 3, clipping, bf16 moments (snr, which reads the whole accumulator first, is
    // one rank only: the plan digests' Zen-auto scenario runs it with one buffer).
    auto one = small_config(host_threads);
    one.update_interval = 0;
    one.max_update_interval = 3;
    one.host_moments = zenflow::moment_precision::bf16;
    one.gradient_clipping = 1.0f;
    one.host_accumulators = 1;
    auto two = one;
    two.host_accumulators = 2;
    expect_identical<Driver, zenflow::bfloat16>(one, two, 40, zf_test::base_seed() + 14);
  }
}

} // namespace zf_engine_test
