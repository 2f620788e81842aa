// The long-run scenarios of the engine (300 steps: Zen-auto, warm-up, NaN steps, clipping,
// grad_ready, strided layouts, every dtype, both baselines), run over a Driver and reduced to
// digests: one of the optimizer state (compared with golden/plan_digests.txt and across backends)
// and one of the counters (compared across backends).
//
// A Driver<T> has `engine_type`, `Driver(model<T>&)`, `make_engine(cfg)`, `add(eng, p, layout)`,
// `initialize(eng)`, `publish_grads()` (the model's new gradients to where the engine reads them, in stream
// order), `grad_ready(eng, id)`, `step(eng, lr)`, `finish(eng)` (flush, then the model's weights current),
// `state(eng, id)`.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#ifndef XXH_INLINE_ALL
#  define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "engine_harness.hpp"

namespace zf_engine_test {

struct plan_scenario {
  std::string name;
  zenflow::config cfg;
  zenflow::dtype type = zenflow::dtype::f32;
  bool strided = false;       // matrices registered with channel_layout::strided
  bool announce = false;      // grad_ready() for every parameter, last first, before each step
  std::vector<int> bad_steps; // steps whose gradients carry a NaN or an Inf
  int steps = 300;
  std::vector<shape> shapes = {}; // empty: kPlanShapes
};

inline std::vector<plan_scenario> plan_scenarios() {
  std::vector<plan_scenario> out;
  {
    auto c = small_config();
    out.push_back(
        {"fixed windows, overlap, f32, NaN steps", c, zenflow::dtype::f32, false, false, {37, 150}});
  }
  {
    auto c = small_config();
    c.overlap_step = false;
    c.update_interval = 3;
    c.select_interval = 6;
    c.gradient_clipping = 0.5f;
    c.loss_scale = 64.0f;
    out.push_back({"fixed windows, no overlap, clipping, loss scale, bf16",
                   c,
                   zenflow::dtype::bf16,
                   false,
                   false,
                   {11}});
  }
  {
    auto c = small_config();
    c.update_interval = 0;
    c.max_update_interval = 5;
    c.auto_ratio = 0.6;
    c.full_warm_up_rounds = 4;
    c.select_interval = 9;
    c.host_lr_scale = zenflow::host_lr_scaling::snr;
    out.push_back(
        {"Zen-auto, warm-up, snr, grad_ready, bf16", c, zenflow::dtype::bf16, false, true, {2, 100}});
  }
  {
    auto c = small_config();
    c.update_interval = 0;
    c.max_update_interval = 4;
    c.auto_ratio = 0.8;
    c.importance = zenflow::channel_norm::l1;
    c.host_lr_scale = zenflow::host_lr_scaling::sqrt;
    out.push_back({"Zen-auto, l1 importance, strided, f16", c, zenflow::dtype::f16, true, false, {}});
  }
  {
    auto c = small_config();
    c.gradient_clipping = 1.0f;
    c.host_lr_scale = zenflow::host_lr_scaling::linear;
    out.push_back({"fixed windows, overlap, clipping, grad_ready, strided, f32",
                   c,
                   zenflow::dtype::f32,
                   true,
                   true,
                   {60}});
  }
  {
    auto c = small_config();
    c.mode = zenflow::optimizer_mode::offload_sync;
    out.push_back({"offload_sync, f32", c, zenflow::dtype::f32, false, false, {5}});
  }
  {
    auto c = small_config();
    c.mode = zenflow::optimizer_mode::gpu_adamw;
    c.gradient_clipping = 0.7f;
    out.push_back({"gpu_adamw, clipping, bf16", c, zenflow::dtype::bf16, false, false, {8}});
  }
  return out;
}

/// Shapes of the long runs: three matrices (one narrow enough to need many slots) and two vectors.
inline const std::vector<shape> kPlanShapes = {
    {true, 24, 8}, {false, 1, 5}, {true, 13, 16}, {false, 1, 3}, {true, 40, 6}};

struct run_digest {
  std::string state_digest;            // weights, masters, moments, counts, device sets
  std::string counters_digest;         // bytes, windows, selections (stalls and skip counts excluded: timing)
  std::size_t device_upload_bytes = 0; // stats().memory.device_upload
};

class digest_builder {
public:
  digest_builder() : st_(XXH3_createState()) { XXH3_64bits_reset(st_); }
  ~digest_builder() { XXH3_freeState(st_); }
  digest_builder(const digest_builder&) = delete;
  digest_builder& operator=(const digest_builder&) = delete;
  template <class V>
  void add(const V& v) {
    if (!v.empty()) {
      XXH3_64bits_update(st_, v.data(), v.size() * sizeof(v[0]));
    }
  }
  void add_u64(std::uint64_t x) { XXH3_64bits_update(st_, &x, sizeof x); }
  [[nodiscard]] std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(st_)));
    return buf;
  }

private:
  XXH3_state_t* st_;
};

template <template <class> class Driver, class T>
run_digest digest_run_typed(const plan_scenario& sc) {
  model<T> m(sc.shapes.empty() ? kPlanShapes : sc.shapes,
             0x5eed0000u + static_cast<std::uint64_t>(sc.name.size()));
  Driver<T> d(m);
  const auto owned = d.make_engine(sc.cfg);
  auto& eng = *owned;
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    ids.push_back(
        d.add(eng, p, sc.strided ? zenflow::channel_layout::strided : zenflow::channel_layout::contiguous));
  }
  d.initialize(eng);
  digest_builder counters;
  for (int t = 0; t < sc.steps; ++t) {
    m.next_grads();
    for (const int b : sc.bad_steps) {
      if (b == t) {
        auto& g = m.g[static_cast<std::size_t>(t) % m.g.size()];
        g[g.size() / 2] = zenflow::from_float<T>(t % 2 == 0 ? NAN : INFINITY);
      }
    }
    d.publish_grads();
    if (sc.announce) {
      for (std::size_t p = ids.size(); p-- > 0;) {
        d.grad_ready(eng, ids[p]);
      }
    }
    const float lr = sc.cfg.adam.lr * (1.0f - 0.5f * static_cast<float>(t) / static_cast<float>(sc.steps));
    const auto rep = d.step(eng, lr);
    counters.add_u64(rep.d2h_bytes);
    counters.add_u64(rep.h2d_bytes);
    counters.add_u64(static_cast<std::uint64_t>(rep.window_closed) |
                     static_cast<std::uint64_t>(rep.selection) << 1 |
                     static_cast<std::uint64_t>(rep.warm_up) << 2);
    counters.add_u64(static_cast<std::uint64_t>(rep.window_length));
  }
  d.finish(eng);
  digest_builder state;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    state.add(m.w[p]);
    const auto st = d.state(eng, ids[p]);
    state.add(st.master);
    state.add(st.m);
    state.add(st.v);
    state.add(st.counts);
    state.add(eng.selected(ids[p]));
  }
  const auto& s = eng.stats();
  // (skipped_steps is left out: on a device backend it counts the flags the host has read so far.)
  const std::uint64_t totals[] = {s.d2h_bytes, s.h2d_bytes, static_cast<std::uint64_t>(s.windows_closed),
                                  static_cast<std::uint64_t>(s.host_jobs),
                                  static_cast<std::uint64_t>(s.selections)};
  for (const std::uint64_t x : totals) {
    counters.add_u64(x);
  }
  return {state.hex(), counters.hex(), s.memory.device_upload};
}

template <template <class> class Driver>
run_digest digest_run(const plan_scenario& sc) {
  switch (sc.type) {
  case zenflow::dtype::bf16:
    return digest_run_typed<Driver, zenflow::bfloat16>(sc);
  case zenflow::dtype::f16:
    return digest_run_typed<Driver, zenflow::half>(sc);
  default:
    return digest_run_typed<Driver, float>(sc);
  }
}

/// The timing of the emulated device the emulated driver runs on (tests set jitter).
inline zenflow::emulated_timing& emulated_driver_timing() {
  static zenflow::emulated_timing timing{};
  return timing;
}

/// The engine on the host backend, on the model's own arrays.
template <class T>
struct host_plan_driver {
  using engine_type = zenflow::engine<zenflow::host_backend>;
  model<T>& m;
  explicit host_plan_driver(model<T>& mod) : m(mod) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg);
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, zenflow::channel_layout layout) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len, 0, layout)
                     : eng.add_vector(m.w[p].data(), m.g[p].data(), sh.len);
  }
  void initialize(engine_type& eng) { eng.initialize(); }
  void publish_grads() {}
  void grad_ready(engine_type& eng, zenflow::param_id id) { eng.grad_ready(id); }
  zenflow::step_report step(engine_type& eng, float lr) { return eng.step(lr); }
  void finish(engine_type& eng) { eng.flush(); }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id); }
};

/// The engine on an emulated device, as a GPU trainer drives it: the parameters live in "device"
/// buffers of their own; each step's gradients are written on the training stream (an executor
/// thread of the device), step() returns with its work in flight, the consumer thread drains the
/// ring and the host job uploads on the plan's stream; the weights come back only at the end.
template <class T, class Backend>
struct emulated_plan_driver_with {
  using engine_type = zenflow::engine<Backend>;
  model<T>& m;
  zenflow::emulated_device device{emulated_driver_timing()}; // outlives the engine (declared first)
  cudaStream_t stream = device.create_stream();
  std::vector<std::vector<T>> w, g; // the "device" copies

  explicit emulated_plan_driver_with(model<T>& mod) : m(mod), w(mod.w), g(mod.g) {}
  std::unique_ptr<engine_type> make_engine(const zenflow::config& cfg) {
    return std::make_unique<engine_type>(cfg, Backend{device});
  }
  zenflow::param_id add(engine_type& eng, std::size_t p, zenflow::channel_layout layout) {
    const auto& sh = m.shapes[p];
    return sh.matrix ? eng.add_matrix(w[p].data(), g[p].data(), sh.channels, sh.len, 0, layout)
                     : eng.add_vector(w[p].data(), g[p].data(), sh.len);
  }
  void initialize(engine_type& eng) { eng.initialize(stream); }
  void publish_grads() {
    // The backward pass of this step: writes the gradients in stream order, from a snapshot (the
    // model's host arrays change again before this runs).
    device.launch(stream, [this, snapshot = m.g] {
      for (std::size_t p = 0; p < snapshot.size(); ++p) {
        std::copy(snapshot[p].begin(), snapshot[p].end(), g[p].begin());
      }
    });
  }
  void grad_ready(engine_type& eng, zenflow::param_id id) { eng.grad_ready(id, stream); }
  zenflow::step_report step(engine_type& eng, float lr) { return eng.step(lr, stream); }
  void finish(engine_type& eng) {
    eng.flush(stream);
    device.synchronize_stream(stream);
    m.w = w;
  }
  zenflow::param_state state(engine_type& eng, zenflow::param_id id) { return eng.state(id, stream); }
};
/// The emulated backend's (the host twins on the device's streams); tests/emu runs the CUDA
/// backend's plan with emulated_cuda_backend through the same driver.
template <class T>
using emulated_plan_driver = emulated_plan_driver_with<T, zenflow::emulated_backend>;

} // namespace zf_engine_test
