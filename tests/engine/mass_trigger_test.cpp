// select_on_mass_drop (zenflow_ext): the key (read, written back, described, bad values named);
// the trigger's decision against a brute-force recomputation on random mass sequences; the engine
// on the host and emulated backends re-selecting when its strong channels move and not when they
// stay; a checkpoint saved mid-trigger resuming bit for bit.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zenflow/engine/config.hpp>
#include <zenflow/schedule/mass_trigger.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"

namespace {

using namespace zf_engine_test;
using zenflow::mass_trigger;
using zenflow::selection_cause;

// ---- the key ------------------------------------------------------------------------------------

TEST(mass_trigger_config, on_by_default_read_written_and_described) {
  EXPECT_EQ(zenflow::config{}.select_on_mass_drop, 0.5);
  EXPECT_EQ(zenflow::config::deepspeed_defaults().select_on_mass_drop, 0.5);
  EXPECT_EQ(zenflow::config{}.min_select_interval, 16);
  EXPECT_TRUE(zenflow::config{}.mass_trigger());
  zenflow::config_sources src;
  const auto c = zenflow::config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1}},
          "zenflow_ext": {"select_on_mass_drop": 0.6, "min_select_interval": 24}})",
      {}, &src);
  EXPECT_EQ(c.select_on_mass_drop, 0.6);
  EXPECT_EQ(c.min_select_interval, 24);
  EXPECT_TRUE(c.mass_trigger());
  const nlohmann::json j = c.to_deepspeed_json();
  EXPECT_EQ(j["zenflow_ext"]["select_on_mass_drop"], 0.6);
  const auto back = zenflow::config::from_deepspeed_json(j);
  EXPECT_EQ(back.select_on_mass_drop, 0.6);
  EXPECT_EQ(back.min_select_interval, 24);
  const std::string text = c.describe(&src);
  EXPECT_NE(text.find("zenflow_ext.select_on_mass_drop"), std::string::npos) << text;
  EXPECT_NE(text.find("falls below 0.6 x its share"), std::string::npos) << text;
}

TEST(mass_trigger_config, bad_values_are_rejected_by_name) {
  const auto read = [](const std::string& ext) {
    (void)zenflow::config::from_deepspeed_json_string(
        R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {}}, "zenflow_ext": )" +
        ext + "}");
  };
  for (const char* v : {"-0.1", "1.5", R"("0.5")", "true", "null"}) {
    SCOPED_TRACE(v);
    expect_invalid([&] { read(std::string(R"({"select_on_mass_drop": )") + v + "}"); },
                   "zenflow_ext.select_on_mass_drop");
  }
  for (const char* v : {"0", "-3", "2.5", R"("16")"}) {
    SCOPED_TRACE(v);
    expect_invalid([&] { read(std::string(R"({"min_select_interval": )") + v + "}"); },
                   "zenflow_ext.min_select_interval");
  }
  auto c = small_config();
  c.select_on_mass_drop = std::nan("");
  expect_invalid([&] { c.validate(); }, "zenflow_ext.select_on_mass_drop");
  c.select_on_mass_drop = 0.5;
  c.min_select_interval = 0;
  expect_invalid([&] { c.validate(); }, "zenflow_ext.min_select_interval");
}

// ---- the decision against brute force -----------------------------------------------------------

struct mass_step {
  bool valid = true;
  std::vector<float> crit, rest;
};

/// Recomputes the decision at the end of step `t` from scratch: the good steps after the selection
/// at `sel` whose data has landed (s <= t - 2), cut into blocks of 4; the first is the reference,
/// the last complete one after it is compared with it.
bool brute_force_fire(
    const std::vector<mass_step>& run, std::int64_t t, std::int64_t sel, double f, std::int64_t gap) {
  if (sel < 0 || t + 1 - sel < gap) {
    return false;
  }
  std::vector<double> c, n;
  for (std::int64_t s = sel + 1; s <= t - 2; ++s) {
    const auto& m = run[static_cast<std::size_t>(s)];
    if (!m.valid) {
      continue;
    }
    double cs = 0.0, ns = 0.0;
    for (std::size_t i = 0; i < m.crit.size(); ++i) {
      cs += static_cast<double>(m.crit[i]);
      ns += static_cast<double>(m.crit[i]) + static_cast<double>(m.rest[i]);
    }
    c.push_back(cs);
    n.push_back(ns);
  }
  const std::size_t blocks = c.size() / 4;
  if (blocks < 2) {
    return false;
  }
  const auto sum = [](const std::vector<double>& v, std::size_t b) {
    double x = 0.0;
    for (std::size_t i = 4 * b; i < 4 * b + 4; ++i) {
      x += v[i];
    }
    return x;
  };
  const double rc = sum(c, 0), rn = sum(n, 0), lc = sum(c, blocks - 1), ln = sum(n, blocks - 1);
  if (!(rn > 0.0) || !(ln > 0.0)) {
    return false;
  }
  return lc / ln < f * (rc / rn);
}

TEST(mass_trigger_decision, matches_brute_force_on_random_mass_sequences) {
  std::int64_t fired = 0, held = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const auto M = static_cast<std::size_t>(1 + gen() % 4);
    const double fractions[] = {0.3, 0.5, 0.7, 0.9, 1.0};
    const double f = fractions[gen() % 5];
    const auto gap = static_cast<std::int64_t>(1 + gen() % 30);
    const std::int64_t period = 40 + static_cast<std::int64_t>(gen() % 80); // scheduled selections
    const std::int64_t N = 300;
    // The device set's share decays in random events and comes back at each selection.
    std::vector<double> strength(M, 1.0);
    std::vector<mass_step> run(static_cast<std::size_t>(N));
    mass_trigger trig(f, gap);
    std::int64_t sel = -1, triggered = -1;
    bool pending = false;
    for (std::int64_t t = 0; t < N; ++t) {
      auto& m = run[static_cast<std::size_t>(t)];
      m.valid = u(gen) > 0.06;
      const bool empty = u(gen) < 0.02; // a step without mass
      for (std::size_t i = 0; i < M; ++i) {
        if (u(gen) < 0.03) {
          strength[i] *= 0.1 + 0.9 * u(gen);
        }
        m.crit.push_back(
            empty ? 0.0f : static_cast<float>(strength[i] * (0.5 + u(gen)) * static_cast<double>(1 + i)));
        m.rest.push_back(empty ? 0.0f : static_cast<float>((0.5 + u(gen)) * 0.4));
      }
      // The engine's order: a scheduled or triggered step makes the selection pending; it is
      // performed at the first valid step.
      if (t % period == 0 || t == triggered) {
        pending = true;
      }
      if (pending && m.valid) {
        pending = false;
        sel = t;
        trig.on_selection();
        std::fill(strength.begin(), strength.end(), 1.0);
      }
      const std::int64_t s = t - 2;
      if (s >= 0 && run[static_cast<std::size_t>(s)].valid && sel >= 0 && s > sel) {
        const auto& ms = run[static_cast<std::size_t>(s)];
        trig.add_step(ms.crit.data(), ms.rest.data(), static_cast<std::int64_t>(M));
      }
      if (!pending && (t + 1) % period != 0) {
        const bool got = trig.fire(t, sel);
        ASSERT_EQ(got, brute_force_fire(run, t, sel, f, gap)) << "step " << t << ", selection " << sel;
        if (got) {
          triggered = t + 1;
          ++fired;
        } else {
          ++held;
        }
      }
    }
  }
  // Both outcomes occur, or the comparison proves little.
  EXPECT_GT(fired, 50);
  EXPECT_GT(held, 1000);
}

TEST(mass_trigger_decision, limits) {
  const float crit[2] = {3.0f, 1.0f}, rest[2] = {1.0f, 1.0f}, low[2] = {1.0f, 0.0f}, zero[2] = {0.0f, 0.0f};
  mass_trigger t(1.0, 1);
  EXPECT_FALSE(t.fire(100, -1)); // no selection yet
  for (int i = 0; i < 8; ++i) {
    t.add_step(crit, rest, 2);
  }
  EXPECT_FALSE(t.fire(100, 0)) << "an equal share never fires, even at fraction 1";
  for (int i = 0; i < 4; ++i) {
    t.add_step(low, rest, 2);
  }
  EXPECT_TRUE(t.fire(100, 0));
  EXPECT_FALSE(mass_trigger(0.5, 1).fire(100, 0)) << "no blocks";
  mass_trigger g(0.9, 20);
  for (int i = 0; i < 4; ++i) {
    g.add_step(crit, rest, 2);
  }
  for (int i = 0; i < 4; ++i) {
    g.add_step(low, rest, 2);
  }
  EXPECT_FALSE(g.fire(18, 0)) << "19 steps after the selection, gap 20";
  EXPECT_TRUE(g.fire(19, 0));
  mass_trigger z(0.9, 1);
  for (int i = 0; i < 8; ++i) {
    z.add_step(zero, zero, 2);
  }
  EXPECT_FALSE(z.fire(100, 0)) << "no mass, no decision";
}

// ---- the engine ---------------------------------------------------------------------------------

/// kShapes' matrices with a few strong channels (every 4th, k of them: the device set's size at
/// topk_ratio 0.25); from step `move_at` on, every strong channel moves to the next one.
template <class T>
void set_strong(model<T>& m, const zenflow::config& cfg, std::int64_t t, std::int64_t move_at) {
  const std::int64_t shift = move_at >= 0 && t >= move_at ? 1 : 0;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    if (!m.shapes[p].matrix) {
      continue;
    }
    auto& sc = m.channel_scale[p];
    std::fill(sc.begin(), sc.end(), 0.05f);
    for (std::int64_t i = 0; i < cfg.topk(m.shapes[p].channels); ++i) {
      sc[static_cast<std::size_t>(4 * i + shift)] = 1.0f;
    }
  }
}

struct trigger_run {
  std::vector<zenflow::step_report> reports;
  std::vector<std::vector<float>> weights;
  std::vector<zenflow::param_state> states;
  std::vector<std::vector<std::int32_t>> selected;
  zenflow::stats stats;
};

/// `steps` steps of kShapes with the strong channels moving at `move_at` (-1: never); with
/// `save_at` >= 0, saved after that many steps and resumed in a fresh engine and model.
template <template <class> class Driver>
trigger_run run_trigger(const zenflow::config& cfg, int steps, int move_at, int save_at = -1) {
  const std::string file =
      (std::filesystem::temp_directory_path() / ("zf_mass_trigger_" + std::to_string(::getpid()) + ".zfck"))
          .string();
  auto m = std::make_unique<model<float>>(kShapes, 77);
  m->drift = 0.0;
  auto d = std::make_unique<Driver<float>>(*m);
  auto eng = d->make_engine(cfg);
  std::vector<zenflow::param_id> ids;
  const auto setup = [&] {
    ids.clear();
    for (std::size_t p = 0; p < kShapes.size(); ++p) {
      ids.push_back(d->add(*eng, p));
    }
    d->initialize(*eng);
  };
  setup();
  trigger_run out;
  for (int t = 0; t < steps; ++t) {
    if (t == save_at) {
      eng->save(file, d->s);
      const auto saved = m->w;
      eng.reset();
      d.reset();
      m = std::make_unique<model<float>>(kShapes, 77);
      m->drift = 0.0;
      for (int i = 0; i < save_at; ++i) {
        set_strong(*m, cfg, i, move_at);
        m->next_grads();
      }
      m->w = saved;
      d = std::make_unique<Driver<float>>(*m);
      eng = d->make_engine(cfg);
      setup();
      eng->load(file, d->s);
      std::filesystem::remove(file);
    }
    set_strong(*m, cfg, t, move_at);
    m->next_grads();
    out.reports.push_back(d->step(*eng, 1e-2f));
  }
  d->flush(*eng);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    out.weights.push_back(m->weights_as_float(p));
    out.states.push_back(d->state(*eng, ids[p]));
    out.selected.push_back(eng->selected(ids[p]));
  }
  out.stats = eng->stats();
  return out;
}

/// The host backend's driver with a stream member, as the emulated driver's (for save/load).
template <class T>
struct host_stream_driver : host_driver<T> {
  cudaStream_t s = nullptr;
  using host_driver<T>::host_driver;
};

zenflow::config trigger_config(std::int64_t min_gap) {
  auto c = small_config();
  c.select = zenflow::select_strategy::automatic; // every 100 steps: only step 0 within the runs
  c.select_interval = 0;
  c.update_interval = 0; // Zen-auto, the defaults' windows
  c.max_update_interval = 2;
  c.select_on_mass_drop = 0.5;
  c.min_select_interval = min_gap;
  return c;
}

std::vector<std::int64_t> selection_steps(const trigger_run& r, selection_cause why) {
  std::vector<std::int64_t> out;
  for (const auto& rep : r.reports) {
    if (rep.selection && rep.selection_reason == why) {
      out.push_back(rep.step);
    }
  }
  return out;
}

template <template <class> class Driver>
void expect_drift_reselects_and_stable_does_not(const char* backend) {
  SCOPED_TRACE(backend);
  const auto cfg = trigger_config(16);
  const auto stable = run_trigger<Driver>(cfg, 100, -1);
  EXPECT_EQ(stable.stats.selections, 1);
  EXPECT_EQ(stable.stats.mass_drop_selections, 0);
  EXPECT_EQ(selection_steps(stable, selection_cause::schedule), std::vector<std::int64_t>{0});

  const auto drift = run_trigger<Driver>(cfg, 100, 40);
  const auto fired = selection_steps(drift, selection_cause::mass_drop);
  ASSERT_EQ(fired.size(), 1u) << "one move, one triggered selection";
  // Step 40's data lands for the decision at the end of step 42; the first block of 4 good steps
  // with the moved channels only (41..44) is complete at the end of step 46.
  EXPECT_EQ(fired[0], 47);
  EXPECT_EQ(drift.stats.mass_drop_selections, 1);
  EXPECT_EQ(drift.stats.selections, 2);
  EXPECT_TRUE(drift.reports[46].window_closed) << "the window closes before a triggered selection";
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    if (kShapes[p].matrix) {
      for (const std::int32_t j : drift.selected[p]) {
        EXPECT_EQ(j % 4, 1) << "matrix " << p << " holds the moved strong channels";
      }
    }
  }
  // The minimum distance holds a triggered selection back: the drop is seen at step 46, the
  // selection waits until 60 steps after step 0.
  const auto late = run_trigger<Driver>(trigger_config(60), 100, 40);
  EXPECT_EQ(selection_steps(late, selection_cause::mass_drop), std::vector<std::int64_t>{60});
  // Off: nothing fires.
  auto off = cfg;
  off.select_on_mass_drop = 0.0;
  EXPECT_EQ(run_trigger<Driver>(off, 100, 40).stats.selections, 1);
}

TEST(mass_trigger_engine, host_backend_reselects_when_strong_channels_move) {
  expect_drift_reselects_and_stable_does_not<host_stream_driver>("host");
}

TEST(mass_trigger_engine, emulated_backend_reselects_when_strong_channels_move) {
  expect_drift_reselects_and_stable_does_not<emulated_driver>("emulated");
}

TEST(mass_trigger_engine, fixed_windows_close_before_a_triggered_selection) {
  auto cfg = trigger_config(16);
  cfg.update_interval = 3;
  const auto r = run_trigger<host_stream_driver>(cfg, 100, 40);
  const auto fired = selection_steps(r, selection_cause::mass_drop);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(r.reports[static_cast<std::size_t>(fired[0] - 1)].window_closed);
}

TEST(mass_trigger_engine, host_and_emulated_backends_agree_bit_for_bit) {
  const auto cfg = trigger_config(16);
  const auto h = run_trigger<host_stream_driver>(cfg, 90, 40);
  const auto e = run_trigger<emulated_driver>(cfg, 90, 40);
  EXPECT_EQ(h.weights, e.weights);
  EXPECT_EQ(h.selected, e.selected);
  EXPECT_EQ(selection_steps(h, selection_cause::mass_drop), selection_steps(e, selection_cause::mass_drop));
}

/// Saved before the move, in the block that sees it, right after the decision (the selection
/// scheduled for the coming step), after the triggered selection: every bit as one run.
template <template <class> class Driver>
void expect_resume_mid_trigger_is_bit_identical(const char* backend) {
  SCOPED_TRACE(backend);
  const auto cfg = trigger_config(16);
  const auto whole = run_trigger<Driver>(cfg, 70, 40);
  for (const int at : {30, 44, 46, 47, 48, 53}) {
    SCOPED_TRACE("saved after " + std::to_string(at));
    const auto r = run_trigger<Driver>(cfg, 70, 40, at);
    EXPECT_EQ(r.weights, whole.weights);
    EXPECT_EQ(r.selected, whole.selected);
    for (std::size_t p = 0; p < r.states.size(); ++p) {
      EXPECT_EQ(r.states[p].master, whole.states[p].master);
      EXPECT_EQ(r.states[p].m, whole.states[p].m);
      EXPECT_EQ(r.states[p].v, whole.states[p].v);
      EXPECT_EQ(r.states[p].counts, whole.states[p].counts);
    }
    EXPECT_EQ(selection_steps(r, selection_cause::mass_drop),
              selection_steps(whole, selection_cause::mass_drop));
    EXPECT_EQ(r.stats.mass_drop_selections, whole.stats.mass_drop_selections);
    EXPECT_EQ(r.stats.selections, whole.stats.selections);
  }
}

TEST(mass_trigger_engine, checkpoint_mid_trigger_resumes_bit_for_bit_host) {
  expect_resume_mid_trigger_is_bit_identical<host_stream_driver>("host");
}

TEST(mass_trigger_engine, checkpoint_mid_trigger_resumes_bit_for_bit_emulated) {
  expect_resume_mid_trigger_is_bit_identical<emulated_driver>("emulated");
}

} // namespace
