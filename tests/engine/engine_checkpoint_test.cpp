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
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/checkpoint_file.hpp>

#include "resume_cases.hpp"

namespace {

using namespace zf_engine_test;

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
      if (t % 5 == 2 || t == 0) { // t 0: right after initialize(), before any selection
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
/// A file saved with the other host_moments is refused by that name (not only "another
/// configuration"), both ways, and the engine is unchanged.
TEST(engine_checkpoint, other_host_moments_are_named_and_change_nothing) {
  const std::string file = temp_path("moments");
  using zenflow::moment_precision;
  const std::pair<moment_precision, moment_precision> pairs[] = {
      {moment_precision::bf16, moment_precision::fp32}, {moment_precision::fp32, moment_precision::bf16},
      {moment_precision::int8, moment_precision::fp32}, {moment_precision::fp32, moment_precision::int8},
      {moment_precision::int8, moment_precision::bf16}, {moment_precision::bf16, moment_precision::int8}};
  for (const auto& [saved, loading] : pairs) {
    auto cs = small_config();
    cs.host_moments = saved;
    auto cl = cs;
    cl.host_moments = loading;
    model<float> a(kPlanShapes, 31), b(kPlanShapes, 32);
    trained(a, cs, 13)->save(file);
    auto eb = trained(b, cl, 13);
    const snapshot before = take(*eb, b);
    try {
      eb->load(file);
      ADD_FAILURE() << "no error";
    } catch (const zenflow::checkpoint_error& e) {
      EXPECT_EQ(e.kind(), zenflow::checkpoint_errc::other_config) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("zenflow_ext.host_moments \"" + std::string(zenflow::to_string(saved)) + "\""),
                std::string::npos)
          << what;
    }
    EXPECT_TRUE(take(*eb, b) == before);
  }
  std::filesystem::remove(file);
}

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
