// The resume cases of engine::save / engine::load, over a Driver of plan_scenarios.hpp (host,
// emulated: engine_checkpoint_test.cpp; CUDA: engine_gpu_test.cu): train N steps, save, load into a
// fresh engine over fresh arrays holding the saved working weights, train M more, and compare every
// bit with an uninterrupted N + M run.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "plan_scenarios.hpp"

namespace zf_engine_test {

using namespace zf_engine_test;

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("zf_engine_ckpt_" + std::to_string(::getpid()) + "_" + name + ".zfck"))
      .string();
}

template <class D>
cudaStream_t stream_of(D& d) {
  if constexpr (requires { d.stream; }) {
    return d.stream;
  } else if constexpr (requires { d.d.pull(d.m, d.s); }) {
    return static_cast<cudaStream_t>(d.s);
  } else {
    return nullptr;
  }
}

/// The working weights as they are now (the user's copy to save beside the checkpoint).
template <class D>
auto weights_now(D& d) {
  if constexpr (requires { d.device; }) { // emulated: the "device" arrays, once the stream is done
    d.device.synchronize_stream(d.stream);
    return d.w;
  } else if constexpr (requires { d.d.pull(d.m, d.s); }) { // CUDA: copied back
    d.d.pull(d.m, d.s);
    return d.m.w;
  } else {
    return d.m.w;
  }
}

template <class T>
inline bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

struct outcome {
  std::vector<std::vector<std::byte>> weights;
  std::vector<zenflow::param_state> states;
  std::vector<std::vector<std::int32_t>> selected;
  std::vector<std::uint64_t> reports; // per step
  std::vector<std::int64_t> counters;
};

inline float lr_at(const plan_scenario& sc, int t) {
  return sc.cfg.adam.lr * (1.0f - 0.5f * static_cast<float>(t) / static_cast<float>(sc.steps));
}

/// sc.steps steps; with `save_at` >= 0, saved after that many steps and resumed in a fresh engine
/// over fresh arrays (the old engine destroyed first).
template <template <class> class Driver, class T>
outcome run(const plan_scenario& sc, int save_at, const std::string& file) {
  const std::uint64_t seed = 0xc4e0000u + static_cast<std::uint64_t>(sc.name.size());
  auto m = std::make_unique<model<T>>(kPlanShapes, seed);
  auto d = std::make_unique<Driver<T>>(*m);
  auto eng = d->make_engine(sc.cfg);
  std::vector<zenflow::param_id> ids;
  const auto layout = sc.strided ? zenflow::channel_layout::strided : zenflow::channel_layout::contiguous;
  const auto setup = [&] {
    ids.clear();
    for (std::size_t p = 0; p < kPlanShapes.size(); ++p) {
      ids.push_back(d->add(*eng, p, layout));
    }
    d->initialize(*eng);
  };
  setup();
  outcome out;
  for (int t = 0; t < sc.steps; ++t) {
    if (t == save_at) {
      eng->save(file, stream_of(*d));
      auto saved_weights = weights_now(*d);
      eng.reset(); // a fresh process: nothing of the first run survives but the file and the weights
      d.reset();
      m = std::make_unique<model<T>>(kPlanShapes, seed);
      for (int i = 0; i < save_at; ++i) {
        m->next_grads(); // the data resumes at step save_at
      }
      m->w = saved_weights;
      d = std::make_unique<Driver<T>>(*m);
      eng = d->make_engine(sc.cfg);
      setup();
      eng->load(file, stream_of(*d));
      EXPECT_EQ(eng->steps(), save_at);
    }
    m->next_grads();
    for (const int b : sc.bad_steps) {
      if (b == t) {
        auto& g = m->g[static_cast<std::size_t>(t) % m->g.size()];
        g[g.size() / 2] = zenflow::from_float<T>(t % 2 == 0 ? NAN : INFINITY);
      }
    }
    d->publish_grads();
    if (sc.announce) {
      for (std::size_t p = ids.size(); p-- > 0;) {
        d->grad_ready(*eng, ids[p]);
      }
    }
    const auto rep = d->step(*eng, lr_at(sc, t));
    out.reports.push_back(rep.d2h_bytes);
    out.reports.push_back(rep.h2d_bytes);
    out.reports.push_back(static_cast<std::uint64_t>(rep.window_closed) |
                          static_cast<std::uint64_t>(rep.selection) << 1 |
                          static_cast<std::uint64_t>(rep.warm_up) << 2);
    out.reports.push_back(static_cast<std::uint64_t>(rep.window_length));
    out.reports.push_back(static_cast<std::uint64_t>(rep.selection_age));
  }
  d->finish(*eng);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    const auto& w = m->w[p];
    const auto* b = reinterpret_cast<const std::byte*>(w.data());
    out.weights.emplace_back(b, b + w.size() * sizeof(T));
    out.states.push_back(d->state(*eng, ids[p]));
    out.selected.push_back(eng->selected(ids[p]));
  }
  const auto& s = eng->stats();
  out.counters = {s.steps,
                  s.skipped_steps,
                  s.selections,
                  s.windows_closed,
                  s.host_jobs,
                  static_cast<std::int64_t>(s.d2h_bytes),
                  static_cast<std::int64_t>(s.h2d_bytes),
                  s.last_window_length,
                  s.max_staleness_windows};
  return out;
}

inline void expect_same(const outcome& a, const outcome& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t p = 0; p < a.weights.size(); ++p) {
    EXPECT_TRUE(same(a.weights[p], b.weights[p])) << what << ": weights of " << p;
    EXPECT_TRUE(same(a.states[p].master, b.states[p].master)) << what << ": master of " << p;
    EXPECT_TRUE(same(a.states[p].m, b.states[p].m)) << what << ": m of " << p;
    EXPECT_TRUE(same(a.states[p].v, b.states[p].v)) << what << ": v of " << p;
    EXPECT_EQ(a.states[p].counts, b.states[p].counts) << what << ": counts of " << p;
    EXPECT_EQ(a.selected[p], b.selected[p]) << what << ": selection of " << p;
  }
  EXPECT_EQ(a.reports, b.reports) << what << ": step reports";
  EXPECT_EQ(a.counters, b.counters) << what << ": counters";
}

/// The scenarios, 40 steps, plus one whose selection step is skipped (selection pending).
inline std::vector<plan_scenario> resume_scenarios() {
  auto out = plan_scenarios();
  {
    auto c = small_config();
    out.push_back(
        {"fixed windows, overlap, NaN at a selection step", c, zenflow::dtype::f32, false, false, {16}});
  }
  {
    // bf16 host moments: saved as bf16, loaded bit for bit (a resumed run rounds with the same
    // hashes, so it stays bit-identical); warm-up, re-selections and a NaN step.
    auto c = small_config();
    c.host_moments = zenflow::moment_precision::bf16;
    c.full_warm_up_rounds = 4;
    c.update_interval = 3;
    c.select_interval = 6;
    out.push_back({"bf16 host moments, warm-up, fixed windows of 3, overlap",
                   c,
                   zenflow::dtype::bf16,
                   false,
                   false,
                   {20}});
  }
  {
    // int8 host moments: codes and block scales saved and loaded as they are (bit-exact resume).
    auto c = small_config();
    c.host_moments = zenflow::moment_precision::int8;
    c.full_warm_up_rounds = 4;
    c.update_interval = 3;
    c.select_interval = 6;
    out.push_back({"int8 host moments, warm-up, fixed windows of 3, overlap",
                   c,
                   zenflow::dtype::bf16,
                   false,
                   false,
                   {20}});
  }
  {
    // accumulate = device: the open window's device sums and their count are saved and restored
    // (mid-window save points), with grad_ready() announcements (hints in this mode) and NaN steps.
    auto c = small_config();
    c.accumulate = zenflow::accumulation_site::device;
    c.update_interval = 3;
    c.gradient_clipping = 0.5f;
    out.push_back({"device accumulation, fixed windows of 3, overlap, grad_ready",
                   c,
                   zenflow::dtype::f32,
                   false,
                   true,
                   {11, 16}});
    auto z = small_config();
    z.accumulate = zenflow::accumulation_site::device;
    z.update_interval = 0;
    z.max_update_interval = 5;
    z.full_warm_up_rounds = 4;
    z.overlap_step = false;
    z.host_moments = zenflow::moment_precision::bf16;
    out.push_back(
        {"device accumulation, Zen-auto, warm-up, no overlap", z, zenflow::dtype::bf16, false, false, {14}});
  }
  for (auto& sc : out) {
    sc.steps = 40;
  }
  return out;
}

// Save points: during the warm-up (3: Zen-auto's scenario warms up 4 steps), right after a
// selection (9: step 8 selected; 17 after the NaN at 16), right after a close with its job pending
// (12: overlap, windows of 2), mid-window (13; 10 with windows of 3), late (25, 31).
inline const int kSavePoints[] = {3, 9, 10, 12, 13, 17, 25, 31};

template <template <class> class Driver>
void expect_resume_is_bit_identical(const char* backend) {
  for (const auto& sc : resume_scenarios()) {
    const std::string file = temp_path(backend);
    const auto typed = [&](auto tag, int save_at) {
      using T = decltype(tag);
      return run<Driver, T>(sc, save_at, file);
    };
    const auto dispatch = [&](int save_at) {
      switch (sc.type) {
      case zenflow::dtype::bf16:
        return typed(zenflow::bfloat16{}, save_at);
      case zenflow::dtype::f16:
        return typed(zenflow::half{}, save_at);
      default:
        return typed(float{}, save_at);
      }
    };
    const outcome whole = dispatch(-1);
    for (const int n : kSavePoints) {
      expect_same(dispatch(n), whole,
                  std::string(backend) + ", " + sc.name + ", saved after " + std::to_string(n));
    }
    std::filesystem::remove(file);
  }
}

} // namespace zf_engine_test
