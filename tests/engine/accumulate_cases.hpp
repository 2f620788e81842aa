// accumulate = device (config::accumulate): the device's window sums give the host accumulation's
// bits. One body over a Driver (engine_cases.hpp: host, emulated; engine_gpu_test.cu: CUDA): two
// engines on the same gradients, one summing on the host, one on the device, over many steps and
// windows with NaN/Inf steps, clipping, a loss scale, fp32/bf16/fp16 working types, warm-up,
// Zen-auto with snr scaling and the trigger, with and without overlap: weights after every step and
// masters, moments and counts at the end are bit-identical, and the device mode moves fewer bytes
// down and keeps one host accumulator. The float64 reference checks the device mode too
// (run_reference_case_accumulating_on_device).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference_cases.hpp"

namespace zf_engine_test {

/// Host and device accumulation of `cfg` over `steps` steps (a NaN or Inf at each of `bad`):
/// bit-identical weights (every step) and state (at the end).
template <template <class> class Driver, class T>
void expect_device_sums_equal_host_sums(zenflow::config cfg,
                                        int steps,
                                        std::uint64_t seed,
                                        std::vector<int> bad) {
  cfg.accumulate = zenflow::accumulation_site::host;
  auto dev = cfg;
  dev.accumulate = zenflow::accumulation_site::device;
  model<T> ma(kShapes, seed);
  model<T> mb(kShapes, seed);
  Driver<T> da(ma);
  Driver<T> db(mb);
  const auto owned_a = da.make_engine(cfg);
  const auto owned_b = db.make_engine(dev);
  auto& ea = *owned_a;
  auto& eb = *owned_b;
  std::vector<zenflow::param_id> ia, ib;
  for (std::size_t p = 0; p < ma.shapes.size(); ++p) {
    ia.push_back(da.add(ea, p));
    ib.push_back(db.add(eb, p));
  }
  da.initialize(ea);
  db.initialize(eb);
  std::int64_t closed = 0;
  for (int t = 0; t < steps; ++t) {
    ma.next_grads();
    if (std::find(bad.begin(), bad.end(), t) != bad.end()) {
      auto& g = ma.g[static_cast<std::size_t>(t) % ma.g.size()];
      g[g.size() / 2] = zenflow::from_float<T>(t % 2 == 0 ? NAN : INFINITY);
    }
    mb.g = ma.g;
    const float lr = 1e-2f / (1.0f + 0.05f * static_cast<float>(t));
    const auto ra = da.step(ea, lr);
    const auto rb = db.step(eb, lr);
    ASSERT_EQ(ra.window_closed, rb.window_closed) << "step " << t;
    ASSERT_EQ(ra.selection, rb.selection) << "step " << t;
    closed += ra.window_closed && t >= cfg.full_warm_up_rounds ? 1 : 0;
    for (std::size_t p = 0; p < ia.size(); ++p) {
      ASSERT_TRUE(same_bits(ma.w[p], mb.w[p])) << "step " << t << " param " << p;
    }
  }
  EXPECT_GE(closed, 4) << "too few windows to compare";
  da.flush(ea);
  db.flush(eb);
  da.pull();
  db.pull();
  for (std::size_t p = 0; p < ia.size(); ++p) {
    EXPECT_TRUE(same_bits(ma.w[p], mb.w[p])) << "after flush, param " << p;
    const auto sa = da.state(ea, ia[p]);
    const auto sb = db.state(eb, ib[p]);
    EXPECT_EQ(sa.counts, sb.counts) << "param " << p;
    EXPECT_TRUE(same_bits(sa.master, sb.master)) << "param " << p;
    EXPECT_TRUE(same_bits(sa.m, sb.m)) << "param " << p;
    EXPECT_TRUE(same_bits(sa.v, sb.v)) << "param " << p;
  }
  // The footprint: one fp32 host buffer of the unselected rows (as the host mode keeps with
  // host_accumulators 1; two with 2 and overlap), the window sums on the device (two of
  // channels - k rows of each matrix: the closed window's goes down beside the next). After the
  // warm-up the vectors live on the device: no host rows.
  const auto& ma_ = ea.stats().memory;
  const auto& mb_ = eb.stats().memory;
  EXPECT_EQ(ma_.device_window_sum, 0u);
  std::size_t sums = 4; // the window's count of good steps
  std::size_t elements = 0;
  for (const auto& sh : kShapes) {
    if (sh.matrix) {
      elements += static_cast<std::size_t>((sh.channels - cfg.topk(sh.channels)) * sh.len);
      sums += static_cast<std::size_t>((sh.channels - cfg.topk(sh.channels)) * sh.len) * 8; // two
    }
  }
  EXPECT_EQ(mb_.device_window_sum, sums);
  EXPECT_EQ(mb_.host_accumulators, elements * 4);
  EXPECT_EQ(ma_.host_accumulators, elements * 4 * (cfg.overlap_step && cfg.host_accumulators == 2 ? 2 : 1));
  EXPECT_EQ(eb.stats().skipped_steps, static_cast<std::int64_t>(bad.size()));
}

template <template <class> class Driver>
void run_device_accumulation_cases(unsigned host_threads = 1) {
  {
    SCOPED_TRACE("fixed windows of 2, overlap, clipping, NaN/Inf steps, fp32");
    auto c = small_config(host_threads);
    c.gradient_clipping = 0.5f;
    expect_device_sums_equal_host_sums<Driver, float>(c, 40, zf_test::base_seed() + 60, {5, 12, 16, 31});
  }
  {
    SCOPED_TRACE("fixed windows of 3, no overlap, loss scale, warm-up, bf16");
    auto c = small_config(host_threads);
    c.overlap_step = false;
    c.update_interval = 3;
    c.select_interval = 6;
    c.full_warm_up_rounds = 3;
    c.loss_scale = 8.0f;
    c.host_moments = zenflow::moment_precision::bf16;
    expect_device_sums_equal_host_sums<Driver, zenflow::bfloat16>(c, 36, zf_test::base_seed() + 61, {7, 20});
  }
  {
    SCOPED_TRACE("Zen-auto, snr, the mass trigger, warm-up, overlap, fp16");
    auto c = small_config(host_threads);
    c.update_interval = 0;
    c.max_update_interval = 5;
    c.min_update_interval = 2;
    c.auto_ratio = 0.5;
    c.full_warm_up_rounds = 4;
    c.select_interval = 9;
    c.host_lr_scale = zenflow::host_lr_scaling::snr;
    c.select_on_mass_drop = 0.9;
    c.min_select_interval = 3;
    c.gradient_clipping = 2.0f;
    expect_device_sums_equal_host_sums<Driver, zenflow::half>(c, 40, zf_test::base_seed() + 62, {9, 22});
  }
}

/// The reference cases run with accumulate = device too.
inline std::vector<std::string> device_accumulation_reference_cases() {
  return {"nan_inf_steps_including_a_pending_selection_bf16",
          "first_good_step_of_a_window_overwrites_the_last_window_float",
          "first_good_step_of_a_window_no_overlap_float",
          "zen_auto_nan_steps_float",
          "snr_lr_scale_no_overlap_clipping_float",
          "mass_drop_trigger_zen_auto_nan_steps_float",
          "wide_matrices_bf16_host_moments_zen_auto_chunk_ring_bf16"};
}

/// Reference case `name` with accumulate = device: the float64 reference's bounds hold as well.
template <template <class> class Driver>
void run_reference_case_accumulating_on_device(const std::string& name) {
  const auto cases = reference_cases();
  const auto it =
      std::find_if(cases.begin(), cases.end(), [&](const reference_case& c) { return c.name == name; });
  ASSERT_NE(it, cases.end()) << "no reference case " << name;
  SCOPED_TRACE("reference case " + name + ", accumulate = device");
  auto cfg = small_config();
  it->configure(cfg);
  cfg.accumulate = zenflow::accumulation_site::device;
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

} // namespace zf_engine_test
