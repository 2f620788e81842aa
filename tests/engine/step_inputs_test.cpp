// cpu tests of what a training loop under PyTorch's conventions needs from the engine (issue 42):
// step_options (a loss scale and found-inf per step, read and written where the step runs; a
// clipping threshold per step; parameters without a gradient) and set_lr_scale() against the
// float64 reference on the host and emulated backends (step_inputs_cases.hpp, shared with the gpu
// tests); a parameter announced again with grad_ready() after its gradient changed; a checkpoint
// taken after the lr scales changed; and the bad arguments of each, refused by name.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "step_inputs_cases.hpp"

namespace {

using zf_engine_test::emulated_driver;
using zf_engine_test::expect_invalid;
using zf_engine_test::host_driver;
using zf_engine_test::kShapes;
using zf_engine_test::model;
using zf_engine_test::small_config;
using host_engine = zenflow::engine<zenflow::host_backend>;

TEST(engine_step_inputs, match_the_reference_in_every_mode) {
  zf_engine_test::run_step_inputs_cases<host_driver>();
}

TEST(engine_step_inputs, match_the_reference_in_every_mode_on_the_emulated_backend) {
  zf_engine_test::run_step_inputs_cases<emulated_driver>();
}

TEST(engine_step_inputs, documented_example) {
  // docs/engine.md "Per-step inputs" shows this block (host memory here: the host backend's).
  std::vector<float> w(64, 0.5f), w_grad(64, 0.25f), b(8, 0.5f), b_grad(8, 0.0f);
  float scale = 4.0f, found = 0.0f;
  float* d_scale = &scale;
  float* d_found_inf = &found;
  const float lr = 1e-2f;
  cudaStream_t stream = nullptr;
  host_engine zf(small_config());
  (void)zf.add_matrix(w.data(), w_grad.data(), 8, 8);
  const zenflow::param_id frozen_this_step[] = {zf.add_vector(b.data(), b_grad.data(), 8)};
  zf.initialize();
  // example-begin step-options
  zenflow::step_options opt;
  opt.loss_scale = d_scale;       // one float the scaler keeps (CUDA: device memory), read on `stream`
  opt.found_inf = d_found_inf;    // in: non-zero skips the step; out: 1.0f if skipped, else 0.0f
  opt.max_norm = 1.0f;            // this step's clip threshold (unset: cfg.gradient_clipping)
  opt.no_grad = frozen_this_step; // param_ids without a gradient (their gradients zeroed)
  zf.step(lr, stream, opt);
  // example-end step-options
  EXPECT_EQ(found, 0.0f);
  EXPECT_EQ(b, std::vector<float>(8, 0.5f)); // not stepped
  EXPECT_NE(w, std::vector<float>(64, 0.5f));
  found = 1.0f;
  const auto before = w;
  zf.step(lr, stream, opt);
  EXPECT_EQ(found, 1.0f);
  EXPECT_EQ(w, before); // skipped
}

TEST(engine_step_inputs, bad_inputs_are_refused_by_name_and_change_nothing) {
  model<float> m(kShapes, zf_test::base_seed() + 900);
  host_engine eng(small_config());
  host_driver<float> d(m);
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    ids.push_back(d.add(eng, p));
  }
  eng.initialize();
  m.next_grads();
  const auto w = m.w;
  expect_invalid([&] { eng.set_lr_scale(zenflow::param_id{9}, 1.0f); },
                 "'param' is not a registered parameter");
  for (const float bad :
       {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    expect_invalid([&] { eng.set_lr_scale(ids[0], bad); }, "'lr_scale' must be finite and >= 0");
  }
  EXPECT_EQ(eng.settings(ids[0]).lr_scale, 1.0f);
  for (const float bad : {-0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    zenflow::step_options opt;
    opt.max_norm = bad;
    expect_invalid([&] { (void)eng.step(1e-2f, nullptr, opt); }, "'options.max_norm' must be >= 0");
  }
  const zenflow::param_id unknown[] = {ids[1], zenflow::param_id{7}};
  zenflow::step_options opt;
  opt.no_grad = unknown;
  expect_invalid([&] { (void)eng.step(1e-2f, nullptr, opt); },
                 "'options.no_grad' holds a parameter that is not");
  EXPECT_EQ(eng.steps(), 0);
  EXPECT_EQ(m.w, w);
  eng.set_lr_scale(ids[0], 0.5f); // a good one, between steps
  EXPECT_EQ(eng.settings(ids[0]).lr_scale, 0.5f);
  (void)eng.step(1e-2f);
  EXPECT_EQ(eng.steps(), 1);
}

/// grad_ready() on a gradient that then changes (a batch the loop dropped, zero_grad, another
/// backward), then again on the final gradient, equals one announcement of the final gradient and
/// no announcement at all, bit for bit: weights after every step, the state, the selections.
template <template <class> class Driver>
void announced_again_case() {
  auto cfg = small_config();
  cfg.full_warm_up_rounds = 1;
  cfg.update_interval = 0; // Zen-auto and "snr": the rest masses of the announced packs decide too
  cfg.max_update_interval = 5;
  cfg.auto_ratio = 0.6;
  cfg.host_lr_scale = zenflow::host_lr_scaling::snr;
  std::vector<std::vector<std::uint32_t>> runs;
  for (const int how : {0, 1, 2}) { // none, once, a stale announcement then again
    model<float> m(kShapes, zf_test::base_seed() + 910);
    Driver<float> d(m);
    const auto owned = d.make_engine(cfg);
    auto& eng = *owned;
    std::vector<zenflow::param_id> ids;
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      ids.push_back(d.add(eng, p));
    }
    d.initialize(eng);
    std::vector<std::uint32_t> bits;
    const auto record = [&] {
      for (const auto& w : m.w) {
        for (const float x : w) {
          bits.push_back(zenflow::bit_pattern(x));
        }
      }
    };
    for (int t = 0; t < 24; ++t) {
      m.next_grads();
      if (how == 2) {
        const auto good = m.g;
        for (auto& g : m.g) {
          for (float& x : g) {
            x = 3.0f * x + 0.5f; // a stale gradient, announced
          }
        }
        for (std::size_t p = ids.size(); p-- > 0;) {
          eng.grad_ready(ids[p]);
        }
        d.release(eng); // the packs may still read the stale gradients: the test's writes wait for them
        m.g = good;
      }
      if (how >= 1) {
        for (std::size_t p = ids.size(); p-- > 0;) {
          eng.grad_ready(ids[p]);
        }
      }
      (void)d.step(eng, 1e-2f);
      record();
      for (const auto id : ids) {
        const auto sel = eng.selected(id);
        bits.insert(bits.end(), sel.begin(), sel.end());
      }
    }
    d.flush(eng);
    record();
    for (const auto id : ids) {
      const auto st = d.state(eng, id);
      for (const auto* v : {&st.master, &st.m, &st.v}) {
        for (const float x : *v) {
          bits.push_back(zenflow::bit_pattern(x));
        }
      }
      bits.insert(bits.end(), st.counts.begin(), st.counts.end());
    }
    if (how == 2) {
      EXPECT_GT(eng.stats().memory.host_landing, 0u); // the early path ran
    }
    runs.push_back(std::move(bits));
  }
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]);
}

TEST(engine_step_inputs, a_parameter_announced_again_reads_its_new_gradient) {
  announced_again_case<host_driver>();
}

TEST(engine_step_inputs, a_parameter_announced_again_reads_its_new_gradient_on_the_emulated_backend) {
  announced_again_case<emulated_driver>();
}

/// The lr scales are the caller's, set like the lr each step: a checkpoint saved after they changed
/// loads into an engine registered as the first was (the registered scale is its identity), and
/// the two runs go on bit-identical; another registered scale is another parameter list.
TEST(engine_step_inputs, a_checkpoint_after_lr_scales_changed_loads_by_the_registered_scale) {
  const std::string file =
      (std::filesystem::temp_directory_path() / ("zf_step_inputs_" + std::to_string(::getpid()) + ".zf"))
          .string();
  const auto cfg = small_config();
  // The model's parameters, all registered with `lr_scale`.
  const auto registered = [](host_engine& eng, model<float>& m, float lr_scale) {
    host_driver<float> d(m);
    std::vector<zenflow::param_id> ids;
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      ids.push_back(d.add(eng, p, {.lr_scale = lr_scale}));
    }
    eng.initialize();
    return ids;
  };
  model<float> a(kShapes, zf_test::base_seed() + 920);
  host_engine ea(cfg);
  const auto ids = registered(ea, a, 0.5f);
  for (int t = 0; t < 5; ++t) {
    a.next_grads();
    ea.set_lr_scale(ids[t % ids.size()], 0.1f * static_cast<float>(t + 1));
    (void)ea.step(1e-2f);
  }
  ea.save(file);
  model<float> b = a;
  host_engine eb(cfg);
  (void)registered(eb, b, 0.5f);
  eb.load(file);
  for (std::size_t p = 0; p < ids.size(); ++p) { // set again after load, as the lr is
    eb.set_lr_scale(ids[p], ea.settings(ids[p]).lr_scale);
  }
  for (int t = 0; t < 6; ++t) {
    a.next_grads();
    b.g = a.g;
    (void)ea.step(1e-2f);
    (void)eb.step(1e-2f);
    EXPECT_EQ(a.w, b.w) << "step " << t;
  }
  model<float> c = a;
  host_engine ec(cfg);
  (void)registered(ec, c, 0.25f);
  try {
    ec.load(file);
    ADD_FAILURE() << "a checkpoint of other registered lr scales loaded";
  } catch (const zenflow::checkpoint_error& e) {
    EXPECT_EQ(e.kind(), zenflow::checkpoint_errc::other_parameters) << e.what();
  }
  std::filesystem::remove(file);
}

} // namespace
