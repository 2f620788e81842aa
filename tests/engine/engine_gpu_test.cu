// gpu tier of the engine: the cpu checks on the CUDA backend (device pointers, copy stream,
// consumer thread). The model lives on the host; its gradients go up before each step and the
// weights come back after it, so the same float64 reference and the same comparisons apply.
// (Not under graph capture: an engine step blocks on the host by design, in the counted stalls.)
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/engine/detail/dp/shard_mass.hpp>
#include <zenflow/engine/engine.cuh>

#include "accumulate_cases.hpp"
#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "plan_scenarios.hpp"
#include "reference_cases.hpp"
#include "resume_cases.hpp"
#include "step_inputs_cases.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"
#include "trace_checks.hpp"

namespace {

using zf_engine_test::kShapes;
using zf_engine_test::model;
using zf_engine_test::shape;
using zf_engine_test::small_config;
using gpu_engine = zenflow::engine<zenflow::cuda_backend>;

/// The model's parameters on the device, mirrored around each step.
template <class T>
struct device_mirror {
  std::vector<zenflow::device_buffer<T>> w, g;
  explicit device_mirror(const model<T>& m) {
    for (std::size_t p = 0; p < m.w.size(); ++p) {
      w.emplace_back(m.w[p].size());
      g.emplace_back(m.g[p].size());
      ZF_CUDA_TRY(cudaMemcpy(w[p].data(), m.w[p].data(), w[p].bytes(), cudaMemcpyHostToDevice));
    }
  }
  std::vector<zenflow::param_id> add(gpu_engine& eng, const model<T>& m) {
    std::vector<zenflow::param_id> ids;
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      const auto& sh = m.shapes[p];
      ids.push_back(sh.matrix ? eng.add_matrix(w[p].data(), g[p].data(), sh.channels, sh.len)
                              : eng.add_vector(w[p].data(), g[p].data(), sh.len));
    }
    return ids;
  }
  zenflow::step_report step(gpu_engine& eng, model<T>& m, float lr, cudaStream_t s) {
    for (std::size_t p = 0; p < m.g.size(); ++p) {
      ZF_CUDA_TRY(cudaMemcpyAsync(g[p].data(), m.g[p].data(), g[p].bytes(), cudaMemcpyHostToDevice, s));
    }
    const auto rep = eng.step(lr, s);
    pull(m, s);
    return rep;
  }
  void pull(model<T>& m, cudaStream_t s) {
    for (std::size_t p = 0; p < m.w.size(); ++p) {
      ZF_CUDA_TRY(cudaMemcpyAsync(m.w[p].data(), w[p].data(), w[p].bytes(), cudaMemcpyDeviceToHost, s));
    }
    ZF_CUDA_TRY(cudaStreamSynchronize(s));
  }
};

/// The Driver of engine_cases.hpp on the CUDA backend: device copies of the model, a stream.
template <class T>
struct device_driver {
  using engine_type = gpu_engine;
  model<T>& m;
  device_mirror<T> d;
  zenflow::stream s;
  explicit device_driver(model<T>& mod) : m(mod), d(mod) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg);
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, const zenflow::param_options& options = {}) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(d.w[p].data(), d.g[p].data(), sh.channels, sh.len, options)
                     : eng.add_vector(d.w[p].data(), d.g[p].data(), sh.len, options);
  }
  void initialize(engine_type& eng) { eng.initialize(s); }
  zenflow::step_report step(engine_type& eng, float lr) { return d.step(eng, m, lr, s); }
  /// step() with `opt`, its loss scale and found-inf in device memory (read and written on the
  /// device, on the stream); the found-inf it wrote.
  std::pair<zenflow::step_report, float> step_with(engine_type& eng,
                                                   float lr,
                                                   std::optional<float> loss_scale,
                                                   float found_inf,
                                                   zenflow::step_options opt) {
    const float host[2] = {loss_scale.value_or(0.0f), found_inf};
    ZF_CUDA_TRY(cudaMemcpyAsync(scalars.data(), host, sizeof host, cudaMemcpyHostToDevice, s));
    opt.loss_scale = loss_scale ? scalars.data() : nullptr;
    opt.found_inf = scalars.data() + 1;
    for (std::size_t p = 0; p < m.g.size(); ++p) {
      ZF_CUDA_TRY(cudaMemcpyAsync(d.g[p].data(), m.g[p].data(), d.g[p].bytes(), cudaMemcpyHostToDevice, s));
    }
    const auto rep = eng.step(lr, s, opt);
    float written = 0.0f;
    ZF_CUDA_TRY(cudaMemcpyAsync(&written, scalars.data() + 1, 4, cudaMemcpyDeviceToHost, s));
    d.pull(m, s);
    return {rep, written};
  }
  zenflow::device_buffer<float> scalars{2};
  void flush(engine_type& eng) {
    eng.flush(s);
    d.pull(m, s);
  }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id, s); }
  void pull() { d.pull(m, s); }
};

/// The Driver of plan_scenarios.hpp on the CUDA backend: device copies of the model; each step's
/// gradients go up on the training stream (from pageable memory: the copy is done when it returns),
/// the weights come back at the end.
template <class T>
struct device_plan_driver {
  using engine_type = gpu_engine;
  model<T>& m;
  device_mirror<T> d;
  zenflow::stream s;
  explicit device_plan_driver(model<T>& mod) : m(mod), d(mod) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg);
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, zenflow::channel_layout layout) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(d.w[p].data(), d.g[p].data(), sh.channels, sh.len, 0, layout)
                     : eng.add_vector(d.w[p].data(), d.g[p].data(), sh.len);
  }
  void initialize(engine_type& eng) { eng.initialize(s); }
  void publish_grads() {
    for (std::size_t p = 0; p < m.g.size(); ++p) {
      ZF_CUDA_TRY(cudaMemcpyAsync(d.g[p].data(), m.g[p].data(), d.g[p].bytes(), cudaMemcpyHostToDevice, s));
    }
  }
  void grad_ready(engine_type& eng, zenflow::param_id id) { eng.grad_ready(id, s); }
  zenflow::step_report step(engine_type& eng, float lr) { return eng.step(lr, s); }
  void finish(engine_type& eng) {
    eng.flush(s);
    d.pull(m, s);
  }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id, s); }
};

class engine_gpu : public zf_test::gpu_test {};

// The reference cases and the baselines of the cpu suite (reference_cases.hpp), on the CUDA backend
// with two host threads: the same assertions.
class engine_gpu_reference : public zf_test::gpu_test, public ::testing::WithParamInterface<std::string> {};

TEST_P(engine_gpu_reference, cuda_backend) {
  zf_engine_test::run_reference_case<device_driver>(GetParam(), 2);
}

INSTANTIATE_TEST_SUITE_P(cases,
                         engine_gpu_reference,
                         ::testing::ValuesIn(zf_engine_test::reference_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST_F(engine_gpu, baselines_equal_offload_sync_gpu_adamw_and_dense_adamw_bit_for_bit) {
  zf_engine_test::run_baseline_cases<device_driver>(2);
}

// step_options and set_lr_scale (step_inputs_cases.hpp): the loss scale read and found-inf written
// by the device, the clip per step, parameters without a gradient, lr scales changing every step.
TEST_F(engine_gpu, step_inputs_match_the_reference_in_every_mode) {
  zf_engine_test::run_step_inputs_cases<device_driver>(2);
}

// accumulate = device (accumulate_cases.hpp): the CUDA kernels' window sums have the host's bits.
TEST_F(engine_gpu, device_accumulation_equals_host_accumulation_bit_for_bit) {
  zf_engine_test::run_device_accumulation_cases<device_driver>(2);
}

// The pipeline trace on the CUDA backend: its streams timed by events (every launch of the plan and
// every copy, the D2H ring's included), checked with the emulated device's body (trace_checks.hpp);
// the test's own gradient uploads go around the backend and are not in it.
TEST_F(engine_gpu, pipeline_trace_times_the_streams_by_events_and_matches_the_counters) {
  const std::uint64_t seed = zf_test::base_seed() + 304;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const zenflow::config cfg = zf_trace_test::trace_config();
  const std::int64_t C = zf_trace_test::kChannels, L = zf_trace_test::kLen;
  const std::size_t n = static_cast<std::size_t>(2 * C * L);
  zenflow::stream s;
  zenflow::device_buffer<float> w(n), g(n);
  const std::vector<float> w0 = zf_test::random_values<float>(n, seed);
  ZF_CUDA_TRY(cudaMemcpy(w.data(), w0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  gpu_engine zf(cfg);
  zf.add_matrix(w.data(), g.data(), C, L);
  zf.add_matrix(w.data() + C * L, g.data() + C * L, C, L);
  zf.initialize(s);
  s.synchronize();
  const zenflow::stats before = zf.stats();
  zf.start_trace();
  const int steps = 10;
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < steps; ++t) {
    grads.push_back(zf_test::random_values<float>(n, seed + 1 + static_cast<std::uint64_t>(t), 1e-3f));
    ZF_CUDA_TRY(cudaMemcpyAsync(g.data(), grads.back().data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    (void)zf.step(1e-3f, s);
  }
  zf.flush(s);
  s.synchronize();
  zf_trace_test::expect_trace_matches_the_run(zf_trace_test::written_trace(zf, "cuda"), steps, before,
                                              zf.stats(), -1);
}

TEST_F(engine_gpu, bytes_meet_the_pcie_budget) {
  zenflow::stream s;
  const std::vector<shape> shapes = {{true, 200, 64}, {true, 160, 64}, {false, 1, 64}};
  model<zenflow::bfloat16> m(shapes, zf_test::base_seed() + 20);
  device_mirror<zenflow::bfloat16> d(m);
  auto cfg = small_config(2);
  cfg.topk_ratio = 0.1;
  cfg.update_interval = 4;
  cfg.select_interval = 1000;
  cfg.ring_slot_bytes = 8192;
  gpu_engine eng(cfg);
  (void)d.add(eng, m);
  eng.initialize(s);
  for (int t = 0; t < 200; ++t) {
    m.next_grads();
    (void)d.step(eng, m, 1e-3f, s);
  }
  eng.flush(s);
  EXPECT_EQ(eng.d2h_ring_stats().bytes,
            eng.stats().d2h_bytes - 4 - (20 + 16) * 4); // the selection's flag, indices
  EXPECT_LE(eng.stats().pcie_model_ratio(), 1.15);
}

// ---- the bodies shared with the cpu tests (engine_cases.hpp) ------------------------------------
TEST_F(engine_gpu, param_groups_match_the_reference_in_every_mode) {
  int i = 0;
  for (const auto& [name, cfg] : zf_engine_test::all_modes(2)) {
    SCOPED_TRACE(name);
    EXPECT_LE((zf_engine_test::param_groups_against_reference<device_driver, zenflow::bfloat16>(
                  cfg, 40, zf_test::base_seed() + 100 + static_cast<std::uint64_t>(i))),
              1.01);
    EXPECT_LT((zf_engine_test::param_groups_against_reference<device_driver, float>(
                  cfg, 40, zf_test::base_seed() + 200 + static_cast<std::uint64_t>(i))),
              64.0);
    ++i;
  }
}

TEST_F(engine_gpu, param_groups_bit_identical_to_the_same_values_as_global_config) {
  for (const auto& [name, cfg] : zf_engine_test::all_modes(2)) {
    SCOPED_TRACE(name);
    zf_engine_test::expect_options_equal_global_config<device_driver, zenflow::bfloat16>(
        cfg, {true, 24, 8}, 0.5f, 0.2f, 30, zf_test::base_seed() + 300);
    zf_engine_test::expect_options_equal_global_config<device_driver, zenflow::half>(
        cfg, {false, 1, 7}, 0.25f, 0.05f, 30, zf_test::base_seed() + 302);
  }
}

TEST_F(engine_gpu, finite_gradients_whose_norm_overflows_fp32_are_clipped_by_the_true_norm) {
  using zf_engine_test::overflow_kind;
  for (const auto kind :
       {overflow_kind::one_element, overflow_kind::near_flt_max, overflow_kind::channel_aggregate,
        overflow_kind::tensor_aggregate, overflow_kind::across_tensors}) {
    int i = 0;
    for (const auto& [name, cfg] : zf_engine_test::all_modes(2)) {
      if (cfg.auto_update()) {
        continue; // as on the cpu: Zen-auto's fp32 masses are not overflow-safe
      }
      SCOPED_TRACE(name);
      const auto seed = zf_test::base_seed() + 500 + static_cast<std::uint64_t>(i++);
      EXPECT_LE((zf_engine_test::overflow_against_reference<device_driver, zenflow::bfloat16>(cfg, kind, 16,
                                                                                              6, seed)),
                1.01);
      EXPECT_LT((zf_engine_test::overflow_against_reference<device_driver, float>(cfg, kind, 16, 6, seed)),
                64.0);
    }
  }
}

TEST_F(engine_gpu, overflowing_channel_scores_rank_by_their_fp64_sums) {
  // Issue 36 on the CUDA backend: the issue's reproduction (64 x 32 bf16, k = 1: channel 40's
  // 1e20 over channel 5's 3e19) and the cases after it, as on the cpu.
  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    auto cfg = small_config(2);
    cfg.overlap_step = overlap;
    zf_engine_test::expect_overflowing_channels_rank_by_fp64<device_driver, zenflow::bfloat16>(cfg, 1.01);
    zf_engine_test::expect_overflowing_channels_rank_by_fp64<device_driver, float>(cfg, 64.0);
  }
}

TEST_F(engine_gpu, destruction_drops_a_window_never_applied_with_a_warning) {
  zf_engine_test::expect_destruction_drops_and_logs<device_driver>(small_config(2));
}

TEST_F(engine_gpu, repeated_or_overlapping_device_buffers_are_rejected_by_name) {
  zenflow::device_buffer<float> w(1024), g(1024);
  gpu_engine eng(small_config(2));
  (void)eng.add_matrix(w.data(), g.data(), 8, 16);
  const auto rejects = [&](auto&& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no exception; expected " << what;
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  rejects([&] { (void)eng.add_matrix(w.data(), g.data() + 512, 8, 16); }, "'weights' overlaps the weights");
  rejects([&] { (void)eng.add_vector(w.data() + 512, w.data() + 512, 8); }, "'grads' overlaps 'weights'");
  rejects([&] { (void)eng.add_vector(w.data() + 512, g.data() + 127, 8); }, "'grads' overlaps the gradients");
  EXPECT_EQ(eng.param_count(), 1u);
}

// ---- the norm's arithmetic: the step scalars' kernels and host loops give the same bits: the
// schedule layer's gpu tier (tests/schedule/schedule_gpu_test.cu).

// Data parallel's batched row copies (row_copy_batched_kernel): a table of every working type
// and layout, rows in random order, strided counts past one 32-row tile and lengths off it,
// packed in fp32 or in the matrix's own type (a selection's entering rows), gathered and then
// scattered (one item as zeros) with the host loop's bits.
TEST_F(engine_gpu, batched_row_copies_are_bit_identical_to_the_host_loop) {
  using zenflow::channel_layout;
  using zenflow::dtype;
  using zenflow::detail::row_copy_direction;
  using zenflow::detail::row_copy_item;
  std::mt19937_64 rng(zf_test::base_seed());
  struct spec {
    dtype type;
    channel_layout layout;
    std::int64_t channels, len;
    bool own = false; // packed in `type`, not fp32
  };
  const spec specs[] = {{dtype::bf16, channel_layout::contiguous, 300, 1000},
                        {dtype::f16, channel_layout::strided, 97, 70},
                        {dtype::f32, channel_layout::strided, 40, 33},
                        {dtype::bf16, channel_layout::strided, 200, 31},
                        {dtype::f32, channel_layout::contiguous, 9, 5},
                        {dtype::bf16, channel_layout::strided, 120, 45, true},
                        {dtype::f16, channel_layout::contiguous, 50, 300, true},
                        {dtype::f32, channel_layout::strided, 70, 20, true}};
  // Own-type packed rows: random finite elements as 16-bit words (as the matrices' storage).
  auto random_words = [&rng](std::vector<float>& v) {
    std::vector<std::uint16_t> w(v.size() * 2);
    for (auto& x : w) {
      x = static_cast<std::uint16_t>(rng() & 0x3fffu);
    }
    std::memcpy(v.data(), w.data(), v.size() * 4);
  };
  std::vector<std::vector<std::uint16_t>> host_mats; // raw storage (f32 as two halves)
  std::vector<zenflow::device_buffer<std::uint16_t>> dev_mats;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<zenflow::device_buffer<std::int32_t>> dev_idx;
  std::vector<std::vector<float>> packed;
  std::vector<zenflow::device_buffer<float>> dev_packed;
  std::vector<row_copy_item> host_items, dev_items;
  for (const spec& sp : specs) {
    const std::int64_t ld = sp.layout == channel_layout::contiguous ? sp.len + 3 : sp.channels + 7;
    const std::int64_t n = sp.layout == channel_layout::contiguous ? sp.channels * ld : sp.len * ld;
    const std::size_t words = static_cast<std::size_t>(n) * zenflow::dtype_size(sp.type) / 2;
    host_mats.emplace_back(words);
    for (auto& w : host_mats.back()) { // random finite values: exponents kept off 0x7f80 / 0x7c00
      w = static_cast<std::uint16_t>(rng() & 0x3fffu);
    }
    std::vector<std::int32_t> rows(static_cast<std::size_t>(sp.channels));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(rows.size() * 3 / 4);
    idx.push_back(rows);
    packed.push_back(
        zf_test::random_values<float>(rows.size() * static_cast<std::size_t>(sp.len), rng(), 300.0f));
    if (sp.own) {
      random_words(packed.back());
    }
    dev_mats.emplace_back(words);
    dev_idx.emplace_back(rows.size());
    dev_packed.emplace_back(packed.back().size());
    ZF_CUDA_TRY(
        cudaMemcpy(dev_mats.back().data(), host_mats.back().data(), words * 2, cudaMemcpyHostToDevice));
    ZF_CUDA_TRY(cudaMemcpy(dev_idx.back().data(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    const row_copy_item h{host_mats.back().data(),
                          sp.type,
                          sp.channels,
                          sp.len,
                          ld,
                          sp.layout,
                          idx.back().data(),
                          std::int64_t(rows.size()),
                          packed.back().data(),
                          sp.own ? sp.type : dtype::f32};
    row_copy_item d = h;
    d.matrix = dev_mats.back().data();
    d.idx = dev_idx.back().data();
    d.packed = dev_packed.back().data();
    host_items.push_back(h);
    dev_items.push_back(d);
  }
  const int n = static_cast<int>(host_items.size());
  const std::int64_t blocks = zenflow::detail::row_copy_blocks(host_items.data(), n);
  ASSERT_EQ(zenflow::detail::row_copy_blocks(dev_items.data(), n), blocks);
  zenflow::device_buffer<row_copy_item> d_items(dev_items.size());
  for (const auto dir : {row_copy_direction::gather, row_copy_direction::scatter}) {
    if (dir == row_copy_direction::scatter) { // packed from the gather, perturbed; item 1 zeros
      for (std::size_t k = 0; k < packed.size(); ++k) {
        for (float& v : packed[k]) {
          v = v * 1.001f + 0.3f;
        }
        if (specs[k].own) {
          random_words(packed[k]);
        }
        ZF_CUDA_TRY(
            cudaMemcpy(dev_packed[k].data(), packed[k].data(), packed[k].size() * 4, cudaMemcpyHostToDevice));
      }
      host_items[1].packed = dev_items[1].packed = nullptr;
    }
    ZF_CUDA_TRY(cudaMemcpy(d_items.data(), dev_items.data(), d_items.bytes(), cudaMemcpyHostToDevice));
    ZF_CUDA_TRY(
        zenflow::detail::device_primitives::copy_rows_batched(d_items.data(), n, blocks, dir, nullptr));
    ZF_CUDA_TRY(zenflow::detail::host_copy_rows_batched(host_items.data(), n, dir, nullptr));
    ZF_CUDA_TRY(cudaDeviceSynchronize());
    for (std::size_t k = 0; k < host_mats.size(); ++k) {
      std::vector<std::uint16_t> m(host_mats[k].size());
      ZF_CUDA_TRY(cudaMemcpy(m.data(), dev_mats[k].data(), m.size() * 2, cudaMemcpyDeviceToHost));
      EXPECT_EQ(m, host_mats[k]) << "matrix " << k;
      std::vector<float> p(packed[k].size());
      ZF_CUDA_TRY(cudaMemcpy(p.data(), dev_packed[k].data(), p.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(0, std::memcmp(p.data(), packed[k].data(), p.size() * 4)) << "packed " << k;
    }
  }
}

// ZeRO-3's masses (dp/shard_masses.hpp): for_each_item's kernel adds the ranks' gathered row masses in the
// host body's order (subnormal rows too), for a batch of matrices, with and without the skip flag.
TEST_F(engine_gpu, sharded_masses_are_bit_identical_to_the_host_body) {
  using zenflow::detail::shard_mass_item;
  using zenflow::detail::shard_mass_part;
  std::mt19937_64 rng(zf_test::base_seed() + 900);
  const int ranks = 3, matrices = 4;
  const std::int64_t per_slot[matrices] = {1, 7, 64, 1000};
  std::vector<float> gathered;
  std::vector<shard_mass_part> parts;
  for (int m = 0; m < matrices; ++m) {
    for (int r = 0; r < ranks; ++r) {
      const auto rows = static_cast<std::int64_t>(rng() % 300);
      const auto k = static_cast<std::int32_t>(rows == 0 ? 0 : rng() % static_cast<std::uint64_t>(rows));
      gathered.push_back(std::bit_cast<float>(k));
      const auto at = static_cast<std::int64_t>(gathered.size());
      for (std::int64_t j = 0; j < rows; ++j) { // subnormal rows among them
        const std::uint64_t u = rng();
        gathered.push_back(u % 50 == 0 ? 1e-40f : static_cast<float>(u % 100000) * 0.37f);
      }
      parts.push_back({at - 1, at, rows});
    }
  }
  zenflow::device_buffer<float> d_gathered(gathered.size());
  zenflow::device_buffer<shard_mass_part> d_parts(parts.size());
  ZF_CUDA_TRY(cudaMemcpy(d_gathered.data(), gathered.data(), d_gathered.bytes(), cudaMemcpyHostToDevice));
  ZF_CUDA_TRY(cudaMemcpy(d_parts.data(), parts.data(), d_parts.bytes(), cudaMemcpyHostToDevice));
  std::vector<shard_mass_item> host_items, dev_items;
  for (int m = 0; m < matrices; ++m) {
    host_items.push_back({parts.data() + m * ranks, ranks, per_slot[m], m});
    dev_items.push_back({d_parts.data() + m * ranks, ranks, per_slot[m], m});
  }
  zenflow::device_buffer<shard_mass_item> d_items(dev_items.size());
  ZF_CUDA_TRY(cudaMemcpy(d_items.data(), dev_items.data(), d_items.bytes(), cudaMemcpyHostToDevice));
  zenflow::device_buffer<float> d_masses(2 * matrices);
  zenflow::device_buffer<std::uint32_t> d_skip(1);
  for (const std::uint32_t skip : {0u, 1u}) {
    ZF_CUDA_TRY(cudaMemcpy(d_skip.data(), &skip, 4, cudaMemcpyHostToDevice));
    ZF_CUDA_TRY(zenflow::detail::shard_masses_on(zenflow::detail::device_primitives{}, d_items.data(),
                                                 matrices, d_gathered.data(), d_skip.data(), d_masses.data(),
                                                 d_masses.data() + matrices, nullptr));
    std::vector<float> want(2 * matrices, -1.0f), got(2 * matrices);
    ZF_CUDA_TRY(zenflow::detail::shard_masses_on(zenflow::detail::host_primitives{}, host_items.data(),
                                                 matrices, gathered.data(), &skip, want.data(),
                                                 want.data() + matrices, nullptr));
    ZF_CUDA_TRY(cudaMemcpy(got.data(), d_masses.data(), got.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "skip " << skip;
    EXPECT_GT(want[static_cast<std::size_t>(matrices)], 0.0f); // a real mass, not zeros
  }
}

// ---- save / load: a resumed run is bit-identical (as on the host and emulated backends) -------
TEST_F(engine_gpu, resume_from_a_checkpoint_is_bit_identical) {
  zf_engine_test::expect_resume_is_bit_identical<device_plan_driver>("cuda");
}

// ---- the 300-step scenarios: the host backend's bits and counters ------------------------------
TEST_F(engine_gpu, three_hundred_step_scenarios_give_the_host_backends_bits_and_counters) {
  for (const auto& sc : zf_engine_test::plan_scenarios()) {
    const auto host = zf_engine_test::digest_run<zf_engine_test::host_plan_driver>(sc);
    const auto gpu = zf_engine_test::digest_run<device_plan_driver>(sc);
    EXPECT_EQ(gpu.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(gpu.counters_digest, host.counters_digest) << sc.name;
  }
}

} // namespace
