// The trainer end to end on the host backend: a tiny model trained with each optimizer mode on
// the same data and seed. The loss must fall in every mode; offload-sync runs the same dense
// AdamW as gpu-adamw (only where it runs differs), so their losses agree closely; ZenFlow's
// deferred updates of the unimportant channels cost little loss; PCIe accounting matches what
// each mode moves.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "charlm/options.hpp"
#include "charlm/run.hpp"
#include "support/random.hpp"

namespace {

charlm::options tiny(const std::vector<std::string>& extra) {
  charlm::options o;
  std::vector<std::string> args = {"--size",  "tiny", "--steps",        "80", "--corpus-bytes", "200000",
                                   "--quiet", "true", "--eval-batches", "4",  "--threads",      "2",
                                   "--lr",    "3e-3", "--seed",         "5"};
  args.insert(args.end(), extra.begin(), extra.end());
  EXPECT_TRUE(charlm::parse_args(args, o));
  return o;
}

struct mode_runs {
  charlm::run_result dense, offload, zen;
};

const mode_runs& runs() {
  static const mode_runs r = [] {
    mode_runs m;
    m.dense = charlm::run_host(tiny({"--optimizer", "gpu-adamw"}));
    m.offload = charlm::run_host(tiny({"--optimizer", "offload-sync"}));
    m.zen = charlm::run_host(
        tiny({"--optimizer", "zenflow", "--topk-ratio", "0.1", "--update-interval", "4", "--select-strategy",
              "step", "--select-interval", "20", "--host-lr-scale", "linear"}));
    return m;
  }();
  return r;
}

TEST(CharlmTrain, LossFallsInEveryMode) {
  for (const auto* r : {&runs().dense, &runs().offload, &runs().zen}) {
    SCOPED_TRACE(r->mode);
    EXPECT_EQ(r->steps, 80);
    ASSERT_EQ(r->losses.size(), 80u);
    EXPECT_TRUE(std::isfinite(r->eval_loss_final));
    // From ~log(vocab) to well below: the model learns the text.
    EXPECT_LT(r->eval_loss_final, 0.8 * r->eval_loss_initial);
    EXPECT_LT(r->train_loss_final, r->losses.front());
    EXPECT_EQ(r->skipped_steps, 0);
  }
}

TEST(CharlmTrain, ModesAgree) {
  const auto& m = runs();
  // Same initial model and data in every mode.
  EXPECT_DOUBLE_EQ(m.offload.eval_loss_initial, m.dense.eval_loss_initial);
  EXPECT_DOUBLE_EQ(m.zen.eval_loss_initial, m.dense.eval_loss_initial);
  // Synchronous offload is dense AdamW computed on the host: the same trajectory.
  for (std::size_t t = 0; t < m.dense.losses.size(); ++t) {
    ASSERT_NEAR(m.offload.losses[t], m.dense.losses[t], 2e-3 * m.dense.losses[t]) << "step " << t;
  }
  EXPECT_NEAR(m.offload.eval_loss_final, m.dense.eval_loss_final, 2e-3 * m.dense.eval_loss_final);
  // ZenFlow: a different trajectory, but close in loss.
  EXPECT_NEAR(m.zen.eval_loss_final, m.dense.eval_loss_final, 0.08 * m.dense.eval_loss_final);
}

TEST(CharlmTrain, PcieTrafficPerMode) {
  const auto& m = runs();
  // GPU-resident AdamW moves no parameter data (only the step's few control bytes).
  EXPECT_LT(m.dense.pcie_model_ratio, 0.01);
  // Gradients down and weights up, all of them, every step.
  EXPECT_NEAR(m.offload.pcie_model_ratio, 2.0, 0.05);
  // ZenFlow moves less than synchronous offload: (1 - r) down and (1 - r) / S up per step at most
  // (plus the periodic selection migrations).
  EXPECT_GT(m.zen.pcie_model_ratio, 0.5);
  EXPECT_LT(m.zen.pcie_model_ratio, 1.5);
  EXPECT_GT(m.zen.windows_closed, 10);
  // Fixed windows of 4 steps, except where a selection (every 20 steps) closes one early: 20 is a
  // multiple of 4, so every closed window is 4 steps long.
  EXPECT_DOUBLE_EQ(m.zen.mean_window, 4.0);
  EXPECT_GE(m.zen.selections, 4);
}

TEST(CharlmOptions, ParsesEveryKnobAndRejectsBadFlags) {
  charlm::options o;
  ASSERT_TRUE(charlm::parse_args({"--optimizer",
                                  "offload-sync",
                                  "--topk-ratio",
                                  "0.25",
                                  "--update-interval",
                                  "auto",
                                  "--select-strategy",
                                  "step",
                                  "--select-interval",
                                  "12",
                                  "--overlap-step=false",
                                  "--host-lr-scale",
                                  "sqrt",
                                  "--importance",
                                  "l1",
                                  "--beta2",
                                  "0.95",
                                  "--weight-decay",
                                  "0.01",
                                  "--gradient-clipping",
                                  "1.5",
                                  "--hidden",
                                  "33"},
                                 o));
  EXPECT_EQ(o.zf.mode, zenflow::optimizer_mode::offload_sync);
  EXPECT_DOUBLE_EQ(o.zf.topk_ratio, 0.25);
  EXPECT_EQ(o.zf.update_interval, 0);
  EXPECT_EQ(o.zf.select, zenflow::select_strategy::step);
  EXPECT_EQ(o.zf.select_interval, 12);
  EXPECT_FALSE(o.zf.overlap_step);
  EXPECT_EQ(o.zf.host_lr_scale, zenflow::host_lr_scaling::sqrt);
  EXPECT_EQ(o.zf.importance, zenflow::channel_norm::l1);
  EXPECT_FLOAT_EQ(o.zf.adam.beta2, 0.95f);
  EXPECT_FLOAT_EQ(o.zf.adam.weight_decay, 0.01f);
  EXPECT_FLOAT_EQ(o.zf.gradient_clipping, 1.5f);
  EXPECT_EQ(o.shape.hidden, 33);

  auto rejects = [](std::vector<std::string> args, const std::string& name) {
    charlm::options bad;
    try {
      (void)charlm::parse_args(args, bad);
      ADD_FAILURE() << "accepted " << args[0];
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  rejects({"--optimizer", "sgd"}, "--optimizer");
  rejects({"--steps", "ten"}, "--steps");
  rejects({"--steps", "0"}, "--steps");
  rejects({"--batch"}, "--batch");
  rejects({"--no-such-flag", "1"}, "--no-such-flag");
  rejects({"--topk-ratio", "1.5"}, "topk_ratio");
  rejects({"--size", "huge"}, "--size");
  rejects({"--deepspeed-config", "/nonexistent/ds.json"}, "/nonexistent/ds.json");
}

// --progress-every and --log-level, and the progress line: elapsed time and the time left at the
// mean pace so far (6 s for 30 steps -> 18 s for the other 90).
TEST(CharlmOptions, ProgressLineAndLogLevel) {
  charlm::options o;
  ASSERT_TRUE(charlm::parse_args({"--progress-every", "25", "--log-level", "info"}, o));
  EXPECT_EQ(o.progress_every, 25);
  EXPECT_EQ(o.log_level, zenflow::log_level::info);
  charlm::options d;
  ASSERT_TRUE(charlm::parse_args({}, d));
  EXPECT_EQ(d.progress_every, 0);
  EXPECT_EQ(d.log_level, zenflow::log_level::warning);

  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--log-level", "loud"},
                                    std::pair<std::string, std::string>{"--progress-every", "-1"}}) {
    charlm::options bad;
    try {
      (void)charlm::parse_args({flag, value}, bad);
      ADD_FAILURE() << "accepted " << flag << " " << value;
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  }

  testing::internal::CaptureStderr();
  charlm::print_progress(30, 120, 6.0, 1.5f);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "progress 30/120 steps ( 25%), 6.0 s elapsed, ETA 18.0 s, loss 1.5000\n");
}

// The shipped DeepSpeed file is read as DeepSpeed would; a flag given on the command line wins.
TEST(CharlmOptions, DeepSpeedConfigFileThenFlags) {
  charlm::options o;
  ASSERT_TRUE(charlm::parse_args({"--deepspeed-config", CHARLM_DS_CONFIG, "--update-interval", "8"}, o));
  EXPECT_EQ(o.zf.mode, zenflow::optimizer_mode::zenflow);
  EXPECT_DOUBLE_EQ(o.zf.topk_ratio, 0.1);
  EXPECT_EQ(o.zf.select, zenflow::select_strategy::step);
  EXPECT_EQ(o.zf.select_interval, 100);
  EXPECT_EQ(o.zf.full_warm_up_rounds, 30);
  EXPECT_EQ(o.zf.update_interval, 8); // the flag, not the file's 4
  EXPECT_FLOAT_EQ(o.zf.gradient_clipping, 1.0f);
  EXPECT_FLOAT_EQ(o.lr, 2e-3f); // the file's lr is the schedule's peak
  charlm::options p;
  ASSERT_TRUE(charlm::parse_args({"--lr", "5e-4", "--deepspeed-config", CHARLM_DS_CONFIG}, p));
  EXPECT_FLOAT_EQ(p.lr, 5e-4f);
  EXPECT_FLOAT_EQ(p.zf.adam.lr, 5e-4f);
}

// The resolved-config printout names where each value came from: the file's key, DeepSpeed's
// default, or the flag that overrode it; --strict-config turns the reader's warnings into errors.
TEST(CharlmOptions, ResolvedConfigNamesFileKeysAndFlags) {
  charlm::options o;
  ASSERT_TRUE(charlm::parse_args(
      {"--deepspeed-config", CHARLM_DS_CONFIG, "--update-interval", "8", "--host-lr-scale", "none"}, o));
  const std::string text = o.zf.describe(&o.zf_sources);
  EXPECT_NE(text.find(std::string("read from file ") + CHARLM_DS_CONFIG), std::string::npos) << text;
  EXPECT_NE(text.find("[zero_optimization.zenflow.topk_ratio]"), std::string::npos) << text;
  EXPECT_NE(text.find("[--update-interval]"), std::string::npos) << text;
  EXPECT_NE(text.find("[--host-lr-scale]"), std::string::npos) << text;
  EXPECT_NE(text.find("auto_ratio                     0.99            [DeepSpeed's default]"),
            std::string::npos)
      << text;

  const std::string path = ::testing::TempDir() + "charlm_misspelt_ds.json";
  {
    std::ofstream out(path);
    out << R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflw": {"topk_ratio": 0.2}}})";
  }
  charlm::options lax;
  ASSERT_TRUE(charlm::parse_args({"--deepspeed-config", path}, lax));
  EXPECT_EQ(lax.zf.mode, zenflow::optimizer_mode::offload_sync); // what DeepSpeed-less reading gives
  ASSERT_EQ(lax.zf_sources.warnings.size(), 1u);
  EXPECT_NE(lax.zf_sources.warnings[0].find("did you mean 'zenflow'?"), std::string::npos);
  charlm::options strict;
  try {
    (void)charlm::parse_args({"--strict-config", "true", "--deepspeed-config", path}, strict);
    ADD_FAILURE() << "--strict-config accepted a misspelt block";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'zero_optimization.zenflw'"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(CharlmOptions, LearningRateSchedule) {
  charlm::options o;
  o.lr = 1e-3f;
  o.steps = 100;
  o.warmup_steps = 10;
  o.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(charlm::learning_rate(o, 0), 1e-4f);
  EXPECT_FLOAT_EQ(charlm::learning_rate(o, 9), 1e-3f);
  EXPECT_FLOAT_EQ(charlm::learning_rate(o, 10), 1e-3f);
  EXPECT_NEAR(charlm::learning_rate(o, 55), 0.55e-3f, 1e-9f);
  EXPECT_NEAR(charlm::learning_rate(o, 100), 1e-4f, 1e-9f);
}

} // namespace
