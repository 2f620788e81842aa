// engine::save / engine::load: train N steps, save, load into a fresh engine over fresh arrays
// (holding the saved working weights), train M more: every bit of the optimizer (weights, masters,
// moments, counts, device sets, per-step reports, counters) equals an uninterrupted N + M run. Over
// the plan scenarios (fixed windows with and without overlap, Zen-auto with warm-up and snr,
// grad_ready, NaN steps, strided layouts, every dtype, both baselines), saved mid-window, right after
// a selection, right after a close with a job pending, during the warm-up and with a selection
// pending; on the host and emulated backends. Then every bad file: the error says which and the
// engine is unchanged.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/checkpoint_file.hpp>

#include "plan_scenarios.hpp"

namespace {

using namespace zf_engine_test;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("zf_engine_ckpt_" + std::to_string(::getpid()) + "_" + name + ".zfck"))
      .string();
}

template <class D>
cudaStream_t stream_of(D& d) {
  if constexpr (requires { d.stream; }) {
    return d.stream;
  } else {
    return nullptr;
  }
}

/// The working weights as they are now (the user's copy to save beside the checkpoint).
template <class D>
auto weights_now(D& d) {
  if constexpr (requires { d.device; }) {
    d.device.synchronize_stream(d.stream);
    return d.w;
  } else {
    return d.m.w;
  }
}

template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

struct outcome {
  std::vector<std::vector<std::byte>> weights;
  std::vector<zenflow::param_state> states;
  std::vector<std::vector<std::int32_t>> selected;
  std::vector<std::uint64_t> reports; // per step
  std::vector<std::int64_t> counters;
};

float lr_at(const plan_scenario& sc, int t) {
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

void expect_same(const outcome& a, const outcome& b, const std::string& what) {
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
std::vector<plan_scenario> resume_scenarios() {
  auto out = plan_scenarios();
  {
    auto c = small_config();
    out.push_back(
        {"fixed windows, overlap, NaN at a selection step", c, zenflow::dtype::f32, false, false, {16}});
  }
  for (auto& sc : out) {
    sc.steps = 40;
  }
  return out;
}

// Save points: during the warm-up (3: Zen-auto's scenario warms up 4 steps), right after a
// selection (9: step 8 selected; 17 after the NaN at 16), right after a close with its job pending
// (12: overlap, windows of 2), mid-window (13; 10 with windows of 3), late (25, 31).
const int kSavePoints[] = {3, 9, 10, 12, 13, 17, 25, 31};

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

TEST(engine_checkpoint, resume_is_bit_identical_on_the_host_backend) {
  expect_resume_is_bit_identical<host_plan_driver>("host");
}

TEST(engine_checkpoint, resume_is_bit_identical_on_the_emulated_backend) {
  emulated_driver_timing() = {};
  expect_resume_is_bit_identical<emulated_plan_driver>("emulated");
}

/// Saving changes nothing the engine computes next (a run that saves equals one that does not).
TEST(engine_checkpoint, saving_does_not_change_the_run) {
  for (auto sc : resume_scenarios()) {
    if (sc.type != zenflow::dtype::f32) {
      continue;
    }
    const std::string file = temp_path("nochange");
    model<float> a(kPlanShapes, 7), b(kPlanShapes, 7);
    host_plan_driver<float> da(a), db(b);
    auto ea = da.make_engine(sc.cfg), eb = db.make_engine(sc.cfg);
    for (std::size_t p = 0; p < kPlanShapes.size(); ++p) {
      (void)da.add(*ea, p, zenflow::channel_layout::contiguous);
      (void)db.add(*eb, p, zenflow::channel_layout::contiguous);
    }
    da.initialize(*ea);
    db.initialize(*eb);
    for (int t = 0; t < sc.steps; ++t) {
      a.next_grads();
      b.next_grads();
      (void)da.step(*ea, lr_at(sc, t));
      if (t % 5 == 2) {
        eb->save(file);
      }
      (void)db.step(*eb, lr_at(sc, t));
    }
    da.finish(*ea);
    db.finish(*eb);
    for (std::size_t p = 0; p < kPlanShapes.size(); ++p) {
      EXPECT_TRUE(same(a.w[p], b.w[p])) << sc.name;
      EXPECT_TRUE(
          same(ea->state({static_cast<std::int32_t>(p)}).m, eb->state({static_cast<std::int32_t>(p)}).m))
          << sc.name;
    }
    std::filesystem::remove(file);
  }
}

// ---- bad files ------------------------------------------------------------------------------------

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spill(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct snapshot {
  std::vector<std::vector<float>> w;
  std::vector<zenflow::param_state> states;
  std::vector<std::vector<std::int32_t>> selected;
  std::int64_t steps = 0;
  bool operator==(const snapshot& o) const {
    if (w != o.w || selected != o.selected || steps != o.steps || states.size() != o.states.size()) {
      return false;
    }
    for (std::size_t p = 0; p < states.size(); ++p) {
      if (!same(states[p].master, o.states[p].master) || !same(states[p].m, o.states[p].m) ||
          !same(states[p].v, o.states[p].v) || states[p].counts != o.states[p].counts) {
        return false;
      }
    }
    return true;
  }
};

template <class E>
snapshot take(E& eng, const model<float>& m) {
  snapshot s{m.w, {}, {}, eng.steps()};
  for (std::size_t p = 0; p < m.w.size(); ++p) {
    s.states.push_back(eng.state({static_cast<std::int32_t>(p)}));
    s.selected.push_back(eng.selected({static_cast<std::int32_t>(p)}));
  }
  return s;
}

/// An engine of `cfg` over `m` (every shape, `name0` the first parameter's name), trained `steps`.
std::unique_ptr<zenflow::engine<zenflow::host_backend>>
trained(model<float>& m, const zenflow::config& cfg, int steps, const std::string& name0 = "") {
  auto eng = std::make_unique<zenflow::engine<zenflow::host_backend>>(cfg);
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    const auto& sh = m.shapes[p];
    zenflow::param_options o;
    o.name = p == 0 ? name0 : "";
    if (sh.matrix) {
      (void)eng->add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len, o);
    } else {
      (void)eng->add_vector(m.w[p].data(), m.g[p].data(), sh.len, o);
    }
  }
  eng->initialize();
  for (int t = 0; t < steps; ++t) {
    m.next_grads();
    (void)eng->step(1e-2f);
  }
  return eng;
}

TEST(engine_checkpoint, a_bad_file_says_which_and_leaves_the_engine_unchanged) {
  const auto cfg = small_config();
  const std::string good = temp_path("good"), bad = temp_path("bad");
  model<float> src(kPlanShapes, 11);
  trained(src, cfg, 13)->save(good);
  const std::vector<char> bytes = slurp(good);

  std::vector<std::pair<std::string, zenflow::checkpoint_errc>> cases;
  spill(bad, {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() * 2 / 3)});
  const auto expect_kind = [&](zenflow::checkpoint_errc kind, const std::string& what) {
    model<float> m(kPlanShapes, 11);
    auto eng = trained(m, cfg, 17); // a used engine: a pending job, an open window
    const snapshot before = take(*eng, m);
    try {
      eng->load(bad);
      ADD_FAILURE() << what << ": no error";
    } catch (const zenflow::checkpoint_error& e) {
      EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string(zenflow::to_string(kind))), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    EXPECT_TRUE(take(*eng, m) == before) << what << ": the engine changed";
    // And it trains on as if nothing happened.
    model<float> ref(kPlanShapes, 11);
    auto ref_eng = trained(ref, cfg, 17);
    for (int t = 0; t < 5; ++t) {
      m.next_grads();
      ref.next_grads();
      (void)eng->step(1e-2f);
      (void)ref_eng->step(1e-2f);
    }
    eng->flush();
    ref_eng->flush();
    EXPECT_EQ(m.w, ref.w) << what;
  };
  expect_kind(zenflow::checkpoint_errc::truncated, "truncated");
  {
    auto flipped = bytes;
    flipped[flipped.size() / 2] ^= 0x10;
    spill(bad, flipped);
    expect_kind(zenflow::checkpoint_errc::corrupted, "flipped byte");
  }
  {
    auto v2 = bytes;
    v2[8] = 2; // u32 format version after the magic
    spill(bad, v2);
    expect_kind(zenflow::checkpoint_errc::wrong_version, "other version");
  }
  {
    auto other = cfg;
    other.adam.lr = 2e-2f;
    model<float> m(kPlanShapes, 11);
    trained(m, other, 3)->save(bad);
    expect_kind(zenflow::checkpoint_errc::other_config, "other config");
  }
  {
    model<float> m(kPlanShapes, 11);
    trained(m, cfg, 3, "renamed")->save(bad);
    expect_kind(zenflow::checkpoint_errc::other_parameters, "other parameter list (a name)");
    model<float> fewer(std::vector<shape>(kPlanShapes.begin(), kPlanShapes.end() - 1), 11);
    trained(fewer, cfg, 3)->save(bad);
    expect_kind(zenflow::checkpoint_errc::other_parameters, "other parameter list (one fewer)");
  }
  {
    spill(bad, {'n', 'o', 'p', 'e'});
    expect_kind(zenflow::checkpoint_errc::not_a_checkpoint, "four bytes");
  }
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST(engine_checkpoint, misuse_names_the_argument) {
  const auto cfg = small_config();
  const std::string file = temp_path("misuse");
  model<float> m(kPlanShapes, 3);
  zenflow::engine<zenflow::host_backend> fresh(cfg);
  expect_invalid([&] { fresh.save(file); }, "'this'");
  expect_invalid([&] { fresh.load(file); }, "'this'");
  auto eng = trained(m, cfg, 10);
  expect_invalid([&] { eng->save(""); }, "'path'");
  m.next_grads();
  eng->grad_ready({0});
  expect_invalid([&] { eng->save(file); }, "grad_ready");
  expect_invalid([&] { eng->load(file); }, "grad_ready");
  (void)eng->step(1e-2f);
  eng->save(file); // between steps again
  EXPECT_EQ(zenflow::checkpoint_rank_path(file, 0, 1), file);
  std::filesystem::remove(file);
}

} // namespace

namespace {

TEST(engine_checkpoint, example_stop_and_resume) {
  const auto cfg = small_config();
  const std::string file = temp_path("example");
  model<float> m(kShapes, 5), resumed_model(kShapes, 5);
  cudaStream_t stream = nullptr;
  zenflow::engine<zenflow::host_backend> eng(cfg);
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    const auto& sh = m.shapes[p];
    (void)(sh.matrix ? eng.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len)
                     : eng.add_vector(m.w[p].data(), m.g[p].data(), sh.len));
  }
  eng.initialize(stream);
  for (int t = 0; t < 11; ++t) {
    m.next_grads();
    (void)eng.step(1e-2f, stream);
  }
  auto& w = resumed_model.w;
  auto& g = resumed_model.g;
  // example-begin engine-save-load
  // Stop, between two steps: the optimizer's state into one file, your working weights beside it.
  eng.save(file, stream);
  w = m.w; // (in a real trainer: the model's own checkpoint)

  // Resume, in a fresh process: the same configuration and registrations, initialize, load.
  zenflow::engine<zenflow::host_backend> resumed(cfg);
  (void)resumed.add_matrix(w[0].data(), g[0].data(), 24, 8);
  (void)resumed.add_vector(w[1].data(), g[1].data(), 5);
  (void)resumed.add_matrix(w[2].data(), g[2].data(), 13, 16);
  (void)resumed.add_vector(w[3].data(), g[3].data(), 3);
  resumed.initialize(stream);
  resumed.load(file, stream); // throws checkpoint_error (saying which) on a bad file, changing nothing
  // example-end engine-save-load
  EXPECT_EQ(resumed.steps(), 11);
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    const zenflow::param_id id{static_cast<std::int32_t>(p)};
    EXPECT_EQ(resumed.selected(id), eng.selected(id));
    EXPECT_TRUE(same(resumed.state(id).v, eng.state(id).v));
  }
  std::filesystem::remove(file);
}

} // namespace

namespace {

/// An engine that trained already loads too: its state (a pending job and an open window included)
/// is replaced whole, and it goes on as the saved run does.
TEST(engine_checkpoint, a_used_engine_loads_and_goes_on_as_the_saved_run) {
  const auto cfg = small_config();
  const std::string file = temp_path("used");
  model<float> a(kPlanShapes, 21), b(kPlanShapes, 22);
  auto ea = trained(a, cfg, 13); // save point: mid-window, a job pending
  ea->save(file);
  auto eb = trained(b, cfg, 17); // other data, other state
  eb->load(file);
  b.w = a.w; // the saved run's weights
  b.gen = a.gen;
  b.channel_scale = a.channel_scale;
  for (int t = 0; t < 11; ++t) {
    a.next_grads();
    b.next_grads();
    (void)ea->step(1e-2f);
    (void)eb->step(1e-2f);
  }
  ea->flush();
  eb->flush();
  EXPECT_EQ(a.w, b.w);
  for (std::size_t p = 0; p < kPlanShapes.size(); ++p) {
    const zenflow::param_id id{static_cast<std::int32_t>(p)};
    EXPECT_EQ(ea->selected(id), eb->selected(id));
    EXPECT_TRUE(same(ea->state(id).master, eb->state(id).master)) << p;
    EXPECT_TRUE(same(ea->state(id).v, eb->state(id).v)) << p;
  }
  EXPECT_EQ(ea->steps(), eb->steps());
  std::filesystem::remove(file);
}

} // namespace
