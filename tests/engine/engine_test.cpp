// cpu tests of the ZenFlow engine on the host backend: against the float64 reference and the
// baselines, state migration, byte accounting, staleness, NaN/Inf steps, convergence.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "engine_harness.hpp"
#include "reference_cases.hpp"

namespace {

using zf_engine_test::kShapes;
using zf_engine_test::model;
using zf_engine_test::shape;
using zf_engine_test::small_config;
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

// The reference cases (reference_cases.hpp) on the host backend and on the emulated device (its
// consumer thread, uploads on their own stream, copies that land later): the same assertions as
// the gpu suite's on the CUDA backend.
class engine_reference : public ::testing::TestWithParam<std::string> {};

TEST_P(engine_reference, host_backend) {
  zf_engine_test::run_reference_case<zf_engine_test::host_driver>(GetParam());
}

TEST_P(engine_reference, emulated_backend) {
  zf_engine_test::run_reference_case<zf_engine_test::emulated_driver>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(cases,
                         engine_reference,
                         ::testing::ValuesIn(zf_engine_test::reference_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(engine_host_lr_factor, every_rule_at_its_limits) {
  using zenflow::host_lr_factor;
  using zenflow::host_lr_scaling;
  EXPECT_EQ(host_lr_factor(host_lr_scaling::none, 9), 1.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::linear, 9), 9.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::sqrt, 9), 3.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::capped, 3), 3.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::capped, 9), static_cast<double>(zenflow::host_lr_cap));
  // snr: n where the window's gradients agree (coherence 1), sqrt(n) for noise (1 / sqrt(n)),
  // never below 1 (anti-correlated, empty or undefined) nor above n.
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 9, 1.0), 9.0);
  EXPECT_DOUBLE_EQ(host_lr_factor(host_lr_scaling::snr, 9, 1.0 / 3.0), 3.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 9, 0.01), 1.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 9, 1.5), 9.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 9, std::nan("")), 1.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 9, std::numeric_limits<double>::infinity()), 1.0);
  EXPECT_EQ(host_lr_factor(host_lr_scaling::snr, 1, 0.7), 1.0);
}

// The baselines (reference_cases.hpp), bit for bit, on both cpu backends.
TEST(engine_baselines, equal_offload_sync_gpu_adamw_and_dense_adamw_bit_for_bit_host) {
  zf_engine_test::run_baseline_cases<zf_engine_test::host_driver>();
}

TEST(engine_baselines, equal_offload_sync_gpu_adamw_and_dense_adamw_bit_for_bit_emulated) {
  zf_engine_test::run_baseline_cases<zf_engine_test::emulated_driver>();
}

TEST(engine_baselines, topk_ratio_one_matches_the_reference_dense_adamw_and_its_bytes) {
  // Everything on the device side: ZenFlow is dense AdamW (the host side has nothing to do): bit
  // for bit the engine's gpu_adamw in run_baseline_cases; here the float64 dense AdamW of the
  // reference, to rounding, and the bytes of such a step.
  auto zen = small_config();
  zen.topk_ratio = 1.0;
  zen.update_interval = 0; // Zen-auto: every matrix votes, windows of one step
  auto gpu = zen;
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  model<float> m(kShapes, zf_test::base_seed() + 14);
  host_engine eng(zen);
  zf_test::zenflow_reference ref(gpu);
  m.add_to_reference(ref);
  (void)register_model(eng, m);
  eng.initialize();
  for (int t = 0; t < 25; ++t) {
    m.next_grads();
    const auto rep = eng.step(1e-2f);
    ref.step(m.grads_as_float(), 1e-2);
    if (t > 0) { // after the first selection only the step's header, its record (and at a selection the
                 // skip flag and the selected indices) travel
      EXPECT_EQ(rep.h2d_bytes, 0u);
      EXPECT_EQ(rep.d2h_bytes, 4u * 4u + (4u + 2u * 2u) * 4u + (rep.selection ? 4u + 4u * (24u + 13u) : 0u));
    }
  }
  EXPECT_LT(zf_engine_test::max_weight_ulps(m, ref), 64.0);
}

// ---- byte accounting and the PCIe budget ------------------------------------------------------

/// Expected bytes of one ZenFlow step from first principles: the two step records, every
/// unselected channel's gradient down; at a close, every unselected channel's weights up.
TEST(engine_bytes, counters_equal_the_sizes_copied_and_meet_the_pcie_budget) {
  const std::vector<shape> shapes = {{true, 200, 64}, {true, 160, 64}, {false, 1, 64}};
  model<zenflow::bfloat16> m(shapes, zf_test::base_seed() + 20);
  auto cfg = small_config();
  cfg.topk_ratio = 0.1;
  cfg.update_interval = 4;
  cfg.select_interval = 1000;
  cfg.overlap_step = true;
  cfg.ring_slot_bytes = 8192;
  host_engine eng(cfg);
  (void)eng.add_matrix(m.w[0].data(), m.g[0].data(), 200, 64);
  (void)eng.add_matrix(m.w[1].data(), m.g[1].data(), 160, 64);
  (void)eng.add_vector(m.w[2].data(), m.g[2].data(), 64);
  eng.initialize();
  const std::uint64_t model_bytes = (200 + 160 + 1) * 64 * 2;
  EXPECT_EQ(eng.stats().model_bytes, model_bytes);
  const std::uint64_t record = (4 + 2 * 2) * 4;
  const std::uint64_t header = 4 * 4; // the step's first record: coef, skip and the norm only
  const std::uint64_t unselected = (200 - 20 + 160 - 16) * 64 * 2;
  const int steps = 200;
  std::uint64_t closes = 0;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    const auto rep = eng.step(1e-3f);
    if (t == 0) {
      // First selection: the skip flag and the indices down; entering rows (fp32 master/m/v + count), the
      // migration's index lists (entering positions and the new set: 2 x 4 bytes per selected channel) and
      // the host sets up.
      const std::uint64_t rows_up = (20 + 16) * (64 * 12 + 4) + 2 * (20 + 16) * 4 + (unselected / 128) * 4;
      EXPECT_EQ(rep.d2h_bytes, header + record + unselected + 4 + (20 + 16) * 4);
      EXPECT_EQ(rep.h2d_bytes, rows_up);
      continue;
    }
    EXPECT_EQ(rep.d2h_bytes, header + record + unselected) << "step " << t;
    // Job w is applied at the close of window w + 1: the first close uploads nothing.
    const std::uint64_t up = rep.window_closed && closes++ > 0 ? unselected : 0;
    EXPECT_EQ(rep.h2d_bytes, up) << "step " << t;
  }
  // The ring moved exactly what the engine says went down, the selection's flag and indices aside.
  EXPECT_EQ(eng.d2h_ring_stats().bytes, eng.stats().d2h_bytes - 4 - (20 + 16) * 4);
  const double ratio = eng.stats().pcie_model_ratio();
  EXPECT_LE(ratio, 1.15) << "r = 0.1, S = 4, bf16";
  EXPECT_GE(ratio, 0.9 + 0.9 / 4 - 0.02);

  // The synchronous baseline moves the whole model both ways: 2x.
  auto sync = cfg;
  sync.mode = zenflow::optimizer_mode::offload_sync;
  host_engine es(sync);
  (void)es.add_matrix(m.w[0].data(), m.g[0].data(), 200, 64);
  (void)es.add_matrix(m.w[1].data(), m.g[1].data(), 160, 64);
  (void)es.add_vector(m.w[2].data(), m.g[2].data(), 64);
  es.initialize();
  for (int t = 0; t < 20; ++t) {
    m.next_grads();
    const auto rep = es.step(1e-3f);
    EXPECT_EQ(rep.d2h_bytes, model_bytes + header);
    EXPECT_EQ(rep.h2d_bytes, model_bytes);
  }
  EXPECT_NEAR(es.stats().pcie_model_ratio(), 2.0, 0.01);
}

// ---- staleness ---------------------------------------------------------------------------------

TEST(engine_staleness, overlap_applies_each_job_exactly_one_window_late) {
  model<float> m(kShapes, zf_test::base_seed() + 30);
  auto cfg = small_config();
  cfg.update_interval = 3;
  cfg.select_interval = 1000;
  host_engine eng(cfg);
  const auto ids = register_model(eng, m);
  eng.initialize();
  // Unselected weights change only at closes, and at close w they take job w-1's values.
  std::vector<float> before = m.weights_as_float(0);
  for (int t = 0; t < 30; ++t) {
    m.next_grads();
    const auto rep = eng.step(1e-2f);
    const auto sel = eng.selected(ids[0]);
    const auto now = m.weights_as_float(0);
    bool unselected_moved = false;
    for (std::int64_t c = 0; c < 24; ++c) {
      if (std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(c))) {
        continue;
      }
      for (std::int64_t i = 0; i < 8; ++i) {
        unselected_moved |=
            now[static_cast<std::size_t>(c * 8 + i)] != before[static_cast<std::size_t>(c * 8 + i)];
      }
    }
    // Windows close at t = 2, 5, 8, ...; the first close has no earlier job to apply.
    EXPECT_EQ(unselected_moved, rep.window_closed && t >= 5) << "step " << t;
    before = now;
  }
  EXPECT_EQ(eng.stats().max_staleness_windows, 1);
  auto sync_cfg = cfg;
  sync_cfg.overlap_step = false;
  host_engine es(sync_cfg);
  (void)register_model(es, m);
  es.initialize();
  for (int t = 0; t < 10; ++t) {
    m.next_grads();
    (void)es.step(1e-2f);
  }
  EXPECT_EQ(es.stats().max_staleness_windows, 0);
}

// ---- NaN/Inf steps -----------------------------------------------------------------------------

template <class T>
void expect_nan_step_changes_nothing(zenflow::config cfg, int warm_steps, float poison) {
  model<T> m(kShapes, zf_test::base_seed() + 40);
  host_engine eng(cfg);
  const auto ids = register_model(eng, m);
  eng.initialize();
  for (int t = 0; t < warm_steps; ++t) {
    m.next_grads();
    (void)eng.step(1e-2f);
  }
  std::vector<zenflow::param_state> before;
  for (const auto id : ids) {
    before.push_back(eng.state(id));
  }
  const auto w_before = m.w;
  const auto stats_before = eng.stats();
  m.next_grads();
  m.g[2][7] = zenflow::from_float<T>(poison);
  const auto rep = eng.step(1e-2f);
  ASSERT_TRUE(rep.skip_known);
  EXPECT_TRUE(rep.skipped);
  EXPECT_FALSE(rep.window_closed) << "pick a mid-window step: a close legitimately applies older results";
  EXPECT_EQ(eng.stats().skipped_steps, stats_before.skipped_steps + 1);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    const auto after = eng.state(ids[p]);
    EXPECT_EQ(0, std::memcmp(after.master.data(), before[p].master.data(), after.master.size() * 4)) << p;
    EXPECT_EQ(0, std::memcmp(after.m.data(), before[p].m.data(), after.m.size() * 4)) << p;
    EXPECT_EQ(0, std::memcmp(after.v.data(), before[p].v.data(), after.v.size() * 4)) << p;
    EXPECT_EQ(after.counts, before[p].counts) << p;
    for (std::size_t i = 0; i < m.w[p].size(); ++i) {
      ASSERT_EQ(zenflow::bit_pattern(m.w[p][i]), zenflow::bit_pattern(w_before[p][i])) << p << " " << i;
    }
  }
}

TEST(engine_nan, skipped_step_leaves_all_state_bit_identical) {
  auto cfg = small_config();
  cfg.update_interval = 4;
  expect_nan_step_changes_nothing<zenflow::bfloat16>(cfg, 5, NAN); // t = 5: mid-window
  cfg.update_interval = 0;                                         // Zen-auto
  cfg.max_update_interval = 16;
  cfg.auto_ratio = 1.0;
  expect_nan_step_changes_nothing<float>(cfg, 2, INFINITY);
  auto warm = small_config();
  warm.full_warm_up_rounds = 10;
  expect_nan_step_changes_nothing<zenflow::half>(warm, 3, -INFINITY);
  auto sync = small_config();
  sync.mode = zenflow::optimizer_mode::offload_sync;
  expect_nan_step_changes_nothing<float>(sync, 3, NAN);
  auto gpu = small_config();
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  expect_nan_step_changes_nothing<zenflow::bfloat16>(gpu, 3, NAN);
}

using zf_engine_test::expect_invalid;

// ---- grad_ready: early pack and copy ------------------------------------------------------------

/// Which parameters a run announces with grad_ready() before each step, and in what order.
enum class announce { none, all_forward, all_reverse, some, random_subset };

/// Everything a run produces, bit for bit: the weights after every step, the final state of
/// every parameter, the selections, the per-step reports' counters and the ring's bytes.
struct run_trace {
  std::vector<std::uint32_t> weight_bits; // after every step
  std::vector<std::uint32_t> state_bits;
  std::vector<std::int32_t> counts_and_sets;
  std::vector<std::uint64_t> counters;
  std::size_t host_landing = 0;
};

template <class T>
void append_weights(run_trace& tr, const model<T>& m) {
  for (const auto& w : m.w) {
    for (const T x : w) {
      tr.weight_bits.push_back(zenflow::bit_pattern(x));
    }
  }
}

void append_floats(std::vector<std::uint32_t>& out, const std::vector<float>& v) {
  for (const float x : v) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    out.push_back(b);
  }
}

template <class T>
run_trace run_announced(const zenflow::config& cfg,
                        int steps,
                        std::uint64_t seed,
                        announce how,
                        const std::vector<int>& bad_steps,
                        const std::vector<shape>& shapes) {
  model<T> m(shapes, seed);
  host_engine eng(cfg);
  const auto ids = register_model(eng, m);
  eng.initialize();
  std::mt19937_64 order_gen(seed ^ 0x9e3779b97f4a7c15ull);
  run_trace tr;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    if (std::find(bad_steps.begin(), bad_steps.end(), t) != bad_steps.end()) {
      auto& g = m.g[static_cast<std::size_t>(t) % m.g.size()];
      g[g.size() / 3] = zenflow::from_float<T>(t % 2 == 0 ? NAN : INFINITY);
    }
    std::vector<std::size_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
    }
    switch (how) {
    case announce::none:
      order.clear();
      break;
    case announce::all_forward:
      break;
    case announce::all_reverse: // as a backward pass produces them: last layer first
      std::reverse(order.begin(), order.end());
      break;
    case announce::some: // a different part of the model every step
      order.erase(std::remove_if(order.begin(), order.end(),
                                 [&](std::size_t p) { return (p + static_cast<std::size_t>(t)) % 2 == 0; }),
                  order.end());
      break;
    case announce::random_subset: {
      std::shuffle(order.begin(), order.end(), order_gen);
      order.resize(static_cast<std::size_t>(order_gen() % (order.size() + 1)));
      break;
    }
    }
    for (const std::size_t p : order) {
      eng.grad_ready(ids[p]);
    }
    const float lr = cfg.adam.lr * (1.0f - 0.3f * static_cast<float>(t) / static_cast<float>(steps));
    const auto rep = eng.step(lr);
    append_weights(tr, m);
    tr.counters.insert(tr.counters.end(),
                       {rep.d2h_bytes, rep.h2d_bytes, static_cast<std::uint64_t>(rep.window_closed),
                        static_cast<std::uint64_t>(rep.selection), static_cast<std::uint64_t>(rep.skipped),
                        static_cast<std::uint64_t>(rep.window_length),
                        static_cast<std::uint64_t>(rep.warm_up)});
    for (const auto id : ids) {
      const auto sel = eng.selected(id);
      tr.counts_and_sets.insert(tr.counts_and_sets.end(), sel.begin(), sel.end());
      tr.counts_and_sets.push_back(-1);
    }
    if (t % 7 == 6) { // mid-run checkpoints read the state too (they wait for the host job)
      for (const auto id : ids) {
        append_floats(tr.state_bits, eng.state(id).master);
      }
    }
  }
  eng.flush();
  append_weights(tr, m);
  for (const auto id : ids) {
    const auto st = eng.state(id);
    append_floats(tr.state_bits, st.master);
    append_floats(tr.state_bits, st.m);
    append_floats(tr.state_bits, st.v);
    tr.counts_and_sets.insert(tr.counts_and_sets.end(), st.counts.begin(), st.counts.end());
  }
  const auto& s = eng.stats();
  tr.counters.insert(tr.counters.end(),
                     {s.d2h_bytes, s.h2d_bytes, static_cast<std::uint64_t>(s.windows_closed),
                      static_cast<std::uint64_t>(s.host_jobs), static_cast<std::uint64_t>(s.selections),
                      static_cast<std::uint64_t>(s.skipped_steps), static_cast<std::uint64_t>(s.steps),
                      eng.d2h_ring_stats().bytes});
  tr.host_landing = s.memory.host_landing;
  return tr;
}

/// Every announcement pattern gives the run without announcements, bit for bit.
template <class T>
void expect_announcements_change_nothing(const zenflow::config& cfg,
                                         int steps,
                                         std::uint64_t seed,
                                         const std::vector<int>& bad_steps = {},
                                         const std::vector<shape>& shapes = kShapes) {
  const run_trace plain = run_announced<T>(cfg, steps, seed, announce::none, bad_steps, shapes);
  EXPECT_EQ(plain.host_landing, 0u);
  for (const announce how :
       {announce::all_forward, announce::all_reverse, announce::some, announce::random_subset}) {
    const run_trace tr = run_announced<T>(cfg, steps, seed, how, bad_steps, shapes);
    const int h = static_cast<int>(how);
    EXPECT_EQ(tr.weight_bits, plain.weight_bits) << "announce " << h;
    EXPECT_EQ(tr.state_bits, plain.state_bits) << "announce " << h;
    EXPECT_EQ(tr.counts_and_sets, plain.counts_and_sets) << "announce " << h;
    EXPECT_EQ(tr.counters, plain.counters) << "announce " << h;
    if (cfg.mode == zenflow::optimizer_mode::zenflow && steps > cfg.full_warm_up_rounds + 1) {
      // The early path really ran: the host landed announced gradients.
      EXPECT_GT(tr.host_landing, 0u) << "announce " << h;
    }
  }
}

TEST(engine_grad_ready, fixed_windows_overlap_bit_identical_bf16) {
  expect_announcements_change_nothing<zenflow::bfloat16>(small_config(), 40, zf_test::base_seed() + 30);
}

TEST(engine_grad_ready, no_overlap_clipping_loss_scale_bit_identical_fp16) {
  auto cfg = small_config();
  cfg.overlap_step = false;
  cfg.update_interval = 3;
  cfg.gradient_clipping = 0.5f;
  cfg.loss_scale = 64.0f;
  expect_announcements_change_nothing<zenflow::half>(cfg, 40, zf_test::base_seed() + 31);
}

TEST(engine_grad_ready, zen_auto_warm_up_nan_steps_bit_identical_float) {
  auto cfg = small_config();
  cfg.update_interval = 0; // Zen-auto: the rest masses announced early drive the windows
  cfg.max_update_interval = 6;
  cfg.auto_ratio = 0.5;
  cfg.full_warm_up_rounds = 3;
  cfg.select_interval = 10;
  // 13 is a selection step (pending selection at 14), 7 and 20 are mid-window.
  expect_announcements_change_nothing<float>(cfg, 45, zf_test::base_seed() + 32, {1, 7, 13, 20});
}

TEST(engine_grad_ready, small_ring_many_slots_per_parameter_bf16) {
  auto cfg = small_config();
  cfg.ring_slot_bytes = 4096; // 16-32 channels per slot: several slots per parameter, the ring wraps
  cfg.ring_slots = 2;
  cfg.importance = zenflow::channel_norm::l1;
  const std::vector<shape> shapes = {{true, 150, 64}, {false, 1, 7}, {true, 97, 128}, {true, 5, 3}};
  expect_announcements_change_nothing<zenflow::bfloat16>(cfg, 30, zf_test::base_seed() + 33, {9}, shapes);
}

TEST(engine_grad_ready, baselines_are_unchanged_by_announcements) {
  auto sync = small_config();
  sync.mode = zenflow::optimizer_mode::offload_sync;
  expect_announcements_change_nothing<float>(sync, 8, zf_test::base_seed() + 34);
  auto gpu = small_config();
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  expect_announcements_change_nothing<float>(gpu, 8, zf_test::base_seed() + 35);
}

TEST(engine_grad_ready, early_bytes_count_in_the_step_they_belong_to) {
  // The report of a step counts what grad_ready() enqueued for it, and nothing is counted twice.
  auto cfg = small_config();
  cfg.select_interval = 1000;
  model<float> m(kShapes, zf_test::base_seed() + 36);
  host_engine eng(cfg);
  const auto ids = register_model(eng, m);
  eng.initialize();
  m.next_grads();
  (void)eng.step(1e-3f); // selection step: grad_ready is a hint there
  const std::uint64_t record = (4 + 2 * 2) * 4;
  const std::uint64_t header = 4 * 4; // the step's first record: coef, skip and the norm only
  const std::uint64_t unselected = ((24 - 6) * 8 + (13 - 3) * 16) * 4;
  for (int t = 1; t < 6; ++t) {
    m.next_grads();
    const auto ring_before = eng.d2h_ring_stats().bytes;
    eng.grad_ready(ids[2]);
    eng.grad_ready(ids[0]);
    EXPECT_EQ(eng.d2h_ring_stats().bytes - ring_before, unselected) << "step " << t; // already down
    const auto rep = eng.step(1e-3f);
    EXPECT_EQ(rep.d2h_bytes, header + record + unselected) << "step " << t;
    EXPECT_EQ(eng.d2h_ring_stats().bytes - ring_before, header + record + unselected) << "step " << t;
  }
  EXPECT_EQ(eng.stats().memory.host_landing, unselected);
}

TEST(engine_grad_ready, bad_announcements_are_rejected_by_name_and_change_nothing) {
  std::vector<float> w(64, 0.5f), g(64, 0.25f);
  host_engine eng(small_config());
  const auto id = eng.add_matrix(w.data(), g.data(), 8, 8);
  expect_invalid([&] { eng.grad_ready(id); }, "'this' is not initialized");
  eng.initialize();
  expect_invalid([&] { eng.grad_ready(zenflow::param_id{1}); }, "'param' is not a registered parameter");
  expect_invalid([&] { eng.grad_ready(zenflow::param_id{-1}); }, "'param' is not a registered parameter");
  (void)eng.step(1e-3f); // t = 0 selects
  const std::vector<float> w_before = w;
  const auto d2h = eng.d2h_ring_stats().bytes;
  eng.grad_ready(id);
  const auto announced = eng.d2h_ring_stats().bytes;
  EXPECT_GT(announced, d2h);
  eng.grad_ready(id); // announced again (its gradient changed): read again (step_inputs_test.cpp)
  EXPECT_EQ(eng.d2h_ring_stats().bytes - announced, announced - d2h);
  EXPECT_EQ(eng.steps(), 1);
  EXPECT_EQ(w, w_before); // grad_ready writes no weight
  (void)eng.step(1e-3f);
  // After step() an announcement is for the next step again.
  eng.grad_ready(id);
  (void)eng.step(1e-3f);
  EXPECT_EQ(eng.steps(), 3);
}

// ---- uploads -----------------------------------------------------------------------------------

/// upload = chunk_ring gives whole_window's weights after every step and the same state, on the
/// host backend and on an emulated device whose H2D copies are slow (the boundary's copies still
/// queued when the next host job starts: a job that rewrote its upload buffers before they were
/// read would put the next window's weights in early).
TEST(engine_upload, chunk_ring_equals_whole_window_after_every_step_on_a_slow_copy_engine) {
  auto& timing = zf_engine_test::emulated_case_timing();
  timing = {};
  timing.h2d_bytes_per_second = 1e6; // about 1 ms for a 768-byte parameter
  timing.max_jitter = std::chrono::microseconds(100);
  auto fixed = small_config();
  auto sync = small_config();
  sync.overlap_step = false;
  auto auto_windows = small_config();
  auto_windows.update_interval = 0;
  auto_windows.max_update_interval = 4;
  for (const auto& whole : {fixed, sync, auto_windows}) {
    auto chunked = whole;
    chunked.upload = zenflow::upload_policy::chunk_ring;
    chunked.ring_slot_bytes = 4096;
    zf_engine_test::expect_identical<zf_engine_test::host_driver, float>(whole, chunked, 24,
                                                                         zf_test::base_seed() + 40);
    zf_engine_test::expect_identical<zf_engine_test::emulated_driver, float>(whole, chunked, 24,
                                                                             zf_test::base_seed() + 41);
  }
  timing = {};
}

/// One accumulator buffer (host_accumulators 1, the default) gives two buffers' weights after
/// every step and their state at the end, on an emulated device whose H2D copies are slow: the
/// window's job keeps pace with its staged copies up, so the next window's first step meets a job
/// that has not read every parameter yet and must wait for it (a step that wrote rows before the
/// job read them would change the job's update). Nothing reads the state between steps (that
/// would wait for the job).
TEST(engine_upload, one_accumulator_equals_two_while_the_job_runs_slowly) {
  using zf_engine_test::emulated_driver;
  using zf_engine_test::same_bits;
  auto& timing = zf_engine_test::emulated_case_timing();
  timing = {};
  timing.h2d_bytes_per_second = 2e5; // 20 ms a 4 KiB chunk of the upload stage
  timing.max_jitter = std::chrono::microseconds(100);
  // 48 and 36 unselected rows of 64 floats: 3 + 3 chunks of 16 rows a window, more than the
  // stage's 4, so the job waits for its first copies before it reads the second matrix's rows.
  const std::vector<zf_engine_test::shape> shapes = {{true, 64, 64}, {false, 1, 5}, {true, 48, 64}};
  auto fixed = small_config();
  fixed.update_interval = 1;
  fixed.select_interval = 16;
  auto auto_windows = fixed;
  auto_windows.update_interval = 0;
  auto_windows.max_update_interval = 3;
  for (auto one : {fixed, auto_windows}) {
    one.host_accumulators = 1;
    auto two = one;
    two.host_accumulators = 2;
    zf_engine_test::model<float> ma(shapes, zf_test::base_seed() + 42);
    zf_engine_test::model<float> mb(shapes, zf_test::base_seed() + 42);
    emulated_driver<float> da(ma);
    emulated_driver<float> db(mb);
    const auto ea = da.make_engine(one);
    const auto eb = db.make_engine(two);
    std::vector<zenflow::param_id> ia, ib;
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      ia.push_back(da.add(*ea, p));
      ib.push_back(db.add(*eb, p));
    }
    da.initialize(*ea);
    db.initialize(*eb);
    for (int t = 0; t < 12; ++t) {
      ma.next_grads();
      mb.g = ma.g;
      (void)da.step(*ea, 1e-2f);
      (void)db.step(*eb, 1e-2f);
      for (std::size_t p = 0; p < shapes.size(); ++p) {
        ASSERT_TRUE(same_bits(ma.w[p], mb.w[p])) << "step " << t << " param " << p;
      }
    }
    da.flush(*ea);
    db.flush(*eb);
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      EXPECT_TRUE(same_bits(ma.w[p], mb.w[p])) << "after flush, param " << p;
      const auto sa = da.state(*ea, ia[p]);
      const auto sb = db.state(*eb, ib[p]);
      EXPECT_TRUE(same_bits(sa.master, sb.master) && same_bits(sa.m, sb.m) && same_bits(sa.v, sb.v) &&
                  sa.counts == sb.counts)
          << "param " << p;
    }
    EXPECT_EQ(ea->stats().memory.host_accumulators * 2, eb->stats().memory.host_accumulators);
  }
  timing = {};
}

/// The hand-over behind one accumulator buffer (host/handover.hpp): the consumer, writing the next
/// window's rows of a parameter, waits until the closed window's job has read that parameter, and
/// for nothing else: not before any job, not while writing the window the job belongs to, not
/// after the job ended (done or failed), not without the shared buffer.
TEST(engine_drain, the_next_window_waits_for_the_job_to_read_each_parameter) {
  using namespace std::chrono_literals;
  zenflow::detail::consumer_progress progress;
  progress.set_drain(2, true);
  progress.wait_read(1, 0);                         // no job yet
  const std::uint64_t job = progress.begin_read(0); // the job of accumulator 0's window
  progress.wait_read(0, 1); // the window it belongs to: its own steps were written before it
  std::atomic<bool> read0{false}, read1{false};
  bool saw0 = false, saw1 = false;
  std::thread consumer([&] {
    progress.wait_read(1, 1); // the next window (accumulator 1) writes parameter 1 first
    saw1 = read1.load();
    progress.wait_read(1, 0);
    saw0 = read0.load();
  });
  std::this_thread::sleep_for(20ms);
  read0 = true;
  progress.note_read(0, job); // parameter 0 first: the consumer still waits for parameter 1
  std::this_thread::sleep_for(20ms);
  read1 = true;
  progress.note_read(1, job);
  consumer.join();
  EXPECT_TRUE(saw1) << "wrote parameter 1 before the job had read it";
  EXPECT_TRUE(saw0);
  // A job that ends (done, nothing to read, failed) frees every row at once.
  const std::uint64_t next = progress.begin_read(1);
  std::thread second([&] { progress.wait_read(0, 1); });
  progress.note_all_read(next);
  second.join();
  // After a restore no job reads the buffer; without the shared buffer nothing ever waits.
  (void)progress.begin_read(0);
  progress.reset_reads();
  progress.wait_read(1, 0);
  zenflow::detail::consumer_progress two;
  two.set_drain(2, false);
  (void)two.begin_read(0);
  two.wait_read(1, 0);
}

// ---- arguments ---------------------------------------------------------------------------------

TEST(engine_arguments, bad_arguments_are_rejected_by_name_and_change_nothing) {
  auto bad = small_config();
  bad.topk_ratio = 1.5;
  expect_invalid([&] { host_engine e(bad); }, "topk_ratio");

  std::vector<float> w(64, 0.5f), g(64, 0.25f);
  host_engine eng(small_config());
  expect_invalid([&] { (void)eng.step(1e-3f); }, "initialize");
  expect_invalid([&] { (void)eng.add_matrix<float>(nullptr, g.data(), 8, 8); }, "'weights'");
  expect_invalid([&] { (void)eng.add_matrix<float>(w.data(), nullptr, 8, 8); }, "'grads'");
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 0, 8); }, "'channels'");
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 8, 0); }, "'channel_len'");
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 8, 8, 4); }, "'ld'");
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 1, 4096); }, "'channel_len'"); // > ring slot
  expect_invalid([&] { (void)eng.add_vector(w.data(), g.data(), 0); }, "'n'");
  expect_invalid([&] { eng.initialize(); }, "'params'");
  EXPECT_EQ(eng.param_count(), 0u); // nothing was registered by the failed calls
  const auto id = eng.add_matrix(w.data(), g.data(), 8, 8);
  eng.initialize();
  expect_invalid([&] { (void)eng.add_vector(w.data(), g.data(), 4); }, "initialized");
  expect_invalid([&] { (void)eng.step(NAN); }, "'lr'");
  expect_invalid([&] { (void)eng.selected(zenflow::param_id{5}); }, "'param'");
  EXPECT_EQ(eng.steps(), 0);
  for (const float x : w) {
    ASSERT_EQ(x, 0.5f);
  }
  (void)eng.step(1e-3f);
  EXPECT_EQ(eng.selected(id).size(), 2u);
}

} // namespace
