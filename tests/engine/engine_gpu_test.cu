// gpu tier of the engine: the cpu checks on the CUDA backend (device pointers, copy stream,
// consumer thread). The model lives on the host; its gradients go up before each step and the
// weights come back after it, so the same float64 reference and the same comparisons apply.
// (Not under graph capture: an engine step blocks on the host by design, in the counted stalls.)
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/engine/engine.cuh>

#include "engine_harness.hpp"
#include "support/gpu.hpp"

namespace {

using zf_engine_test::model;
using zf_engine_test::kShapes;
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

class engine_gpu : public zf_test::gpu_test {};

template <class T>
double
run_against_reference(const zenflow::config& cfg, int steps, std::uint64_t seed, std::vector<int> bad = {}) {
  zenflow::stream s;
  model<T> m(kShapes, seed);
  device_mirror<T> d(m);
  gpu_engine eng(cfg);
  zf_test::zenflow_reference ref(cfg);
  m.add_to_reference(ref);
  const auto ids = d.add(eng, m);
  eng.initialize(s);
  double worst = 0.0;
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    if (std::find(bad.begin(), bad.end(), t) != bad.end()) {
      m.g[static_cast<std::size_t>(t) % m.g.size()][3] = zenflow::from_float<T>(NAN);
    }
    const auto rep = d.step(eng, m, cfg.adam.lr, s);
    ref.step(m.grads_as_float(), cfg.adam.lr);
    EXPECT_EQ(rep.selection, ref.last_step_selected()) << "step " << t;
    EXPECT_EQ(rep.window_closed, ref.last_step_closed_window()) << "step " << t;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (m.shapes[p].matrix) {
        EXPECT_EQ(eng.selected(ids[p]), ref.selected(p)) << "step " << t;
      }
    }
    worst = std::max(worst, zf_engine_test::max_weight_ulps(m, ref));
  }
  eng.flush(s);
  ref.flush();
  d.pull(m, s);
  worst = std::max(worst, zf_engine_test::max_weight_ulps(m, ref));
  EXPECT_EQ(eng.stats().windows_closed, ref.stats().windows_closed);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(eng.state(ids[p], s).counts, ref.counts(p)) << "param " << p;
  }
  return worst;
}

TEST_F(engine_gpu, matches_reference_fixed_windows_overlap_bf16) {
  EXPECT_LE(run_against_reference<zenflow::bfloat16>(small_config(2), 40, zf_test::base_seed()), 1.01);
}

TEST_F(engine_gpu, matches_reference_zen_auto_warm_up_nan_float) {
  auto cfg = small_config(2);
  cfg.update_interval = 0;
  cfg.max_update_interval = 5;
  cfg.auto_ratio = 0.6;
  cfg.full_warm_up_rounds = 3;
  cfg.select_interval = 7;
  EXPECT_LT(run_against_reference<float>(cfg, 50, zf_test::base_seed() + 4, {5, 10, 17}), 64.0);
}

TEST_F(engine_gpu, matches_reference_no_overlap_clipping_fp16) {
  auto cfg = small_config(2);
  cfg.overlap_step = false;
  cfg.update_interval = 3;
  cfg.select_interval = 6;
  cfg.gradient_clipping = 0.5f;
  cfg.loss_scale = 64.0f;
  EXPECT_LE(run_against_reference<zenflow::half>(cfg, 40, zf_test::base_seed() + 2), 1.01);
}

TEST_F(engine_gpu, update_interval_one_equals_offload_sync_bitwise) {
  zenflow::stream s;
  auto zen = small_config(2);
  zen.update_interval = 1;
  zen.overlap_step = false;
  zen.select_interval = 1;
  auto sync = zen;
  sync.mode = zenflow::optimizer_mode::offload_sync;
  model<zenflow::bfloat16> ma(kShapes, zf_test::base_seed() + 10), mb(kShapes, zf_test::base_seed() + 10);
  device_mirror<zenflow::bfloat16> da(ma), db(mb);
  gpu_engine ea(zen), eb(sync);
  (void)da.add(ea, ma);
  (void)db.add(eb, mb);
  ea.initialize(s);
  eb.initialize(s);
  for (int t = 0; t < 20; ++t) {
    ma.next_grads();
    mb.g = ma.g;
    (void)da.step(ea, ma, 1e-2f, s);
    (void)db.step(eb, mb, 1e-2f, s);
    for (std::size_t p = 0; p < ma.w.size(); ++p) {
      ASSERT_EQ(0, std::memcmp(ma.w[p].data(), mb.w[p].data(), ma.w[p].size() * 2)) << "step " << t;
    }
  }
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
  EXPECT_EQ(eng.d2h_ring_stats().bytes, eng.stats().d2h_bytes - (20 + 16) * 4);
  EXPECT_LE(eng.stats().pcie_model_ratio(), 1.15);
}

} // namespace
