// zenflow::config, continued: the schedule helpers (selection steps, top-k, host threads), the
// printed example, the warnings the reader gives where it once ignored in silence, the strict
// mode, suggestions of the nearest key, the resolved-config printout, and the settings the engine
// itself checks at initialize().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "config_test_support.hpp"

namespace {

using namespace zf_config_test;
using zenflow::config;

TEST(config, selection_interval_resolution) {
  config c;
  c.select = zenflow::select_strategy::step;
  c.select_interval = 6;
  c.update_interval = 3;
  EXPECT_EQ(c.select_interval_steps(), 6);
  c.select = zenflow::select_strategy::epoch;
  c.steps_per_epoch = 10;
  EXPECT_EQ(c.select_interval_steps(), 60);
  c.select_interval = 0; // "auto": one epoch
  EXPECT_EQ(c.select_interval_steps(), 10);
  c.select = zenflow::select_strategy::automatic;
  EXPECT_EQ(c.select_interval_steps(), 10);
  c.steps_per_epoch = 0; // unknown epoch: the documented fallback, never "never"
  EXPECT_EQ(c.select_interval_steps(), config::auto_select_fallback_steps);
  c.update_interval = 150;
  EXPECT_EQ(c.select_interval_steps(), 150);
  EXPECT_NO_THROW(c.validate());
}

TEST(config, selection_steps_start_after_warm_up) {
  config c;
  c.select = zenflow::select_strategy::step;
  c.select_interval = 5;
  c.update_interval = 2;
  c.full_warm_up_rounds = 3;
  std::vector<std::int64_t> steps;
  for (std::int64_t t = 0; t < 20; ++t) {
    if (c.is_selection_step(t)) {
      steps.push_back(t);
    }
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{3, 8, 13, 18}));
}

// k as DeepSpeed computes it, `int(topk_ratio * channels)`: golden values printed by Python 3
// (`int(r * c)`, IEEE double product truncated), then at least 1. The comment is Python's
// `repr(r * c)`; where it sits just below an integer, DeepSpeed's k is one less than the exact
// product's floor, and so is ours.
struct topk_golden {
  double ratio;
  std::int64_t channels;
  std::int64_t python_int; // int(ratio * channels)
};
constexpr topk_golden topk_table[] = {
    {0.29, 100, 28},              // 28.999999999999996 (exact: 29)
    {0.57, 100, 56},              // 56.99999999999999 (exact: 57)
    {0.58, 100, 57},              // 57.99999999999999 (exact: 58)
    {0.29, 200, 57},              // 57.99999999999999 (exact: 58)
    {0.57, 300, 170},             // 170.99999999999997 (exact: 171)
    {0.14, 100, 14},              // 14.000000000000002
    {0.07, 100, 7},               // 7.000000000000001
    {0.28, 100, 28},              // 28.000000000000004
    {0.56, 100, 56},              // 56.00000000000001
    {0.7, 10, 7},                 // 7.0
    {0.1, 30, 3},                 // 3.0
    {0.15, 20, 3},                // 3.0
    {0.01, 4096, 40},             // 40.96
    {0.05, 4096, 204},            // 204.8
    {0.1, 4096, 409},             // 409.6
    {0.1, 12345, 1234},           // 1234.5
    {0.07, 300, 21},              // 21.000000000000004
    {0.11, 900, 99},              // 99.0
    {0.55, 100, 55},              // 55.00000000000001
    {0.999, 1000, 999},           // 999.0
    {0.3, 1000000007, 300000002}, // 300000002.09999996
    {1.0, 77, 77},                // 77.0
    {0.1, 3, 0},                  // 0.30000000000000004: k = 1
    {0.33, 3, 0},                 // 0.99: k = 1
    {0.1, 1, 0},                  // 0.1: k = 1
    {0.0, 64, 0},                 // 0.0: topk_ratio 0, k = 1 (DeepSpeed's stage 1/2 would select none)
    {1e-09, 10, 0},               // 1e-08: k = 1
};

TEST(config, topk_matches_deepspeeds_int_of_the_double_product_at_least_one) {
  config c;
  for (const auto& g : topk_table) {
    c.topk_ratio = g.ratio;
    EXPECT_EQ(c.topk(g.channels), std::max<std::int64_t>(1, g.python_int))
        << "ratio " << g.ratio << " channels " << g.channels;
  }
  c.topk_ratio = 1.0;
  EXPECT_EQ(c.topk(1), 1);
  EXPECT_EQ(c.topk(0), 0);
  // Away from the rounding edge it is the floor of the exact product (ratio = p / 1024 is exact
  // in binary, so the product is exact): an independent check on a wide sweep.
  for (int p = 0; p <= 1024; p += 3) {
    c.topk_ratio = p / 1024.0;
    for (std::int64_t ch : {1, 2, 3, 7, 10, 100, 1000, 4096, 12345}) {
      ASSERT_EQ(c.topk(ch), std::max<std::int64_t>(1, (p * ch) / 1024))
          << "ratio " << c.topk_ratio << " channels " << ch;
    }
  }
}

// DeepSpeed reserves math.ceil(pt_reserved_cores_perc * cores) for the training thread; the pool
// gets the rest, at least one. Golden values from Python 3: max(1, n - math.ceil(p * n)).
TEST(config, host_threads_follow_deepspeeds_core_split) {
  struct row {
    double perc;
    unsigned cores;
    unsigned pool;
  };
  const row rows[] = {
      {0.5, 16, 8},    {0.9, 16, 1}, {0.9, 2, 1},  {0.0, 12, 12},
      {0.3, 16, 11},   {0.25, 7, 5}, {0.7, 10, 3}, // 0.7 * 10 = 7.0
      {0.07, 100, 92}, // 7.000000000000001 rounds up to 8 reserved (floor(100 * 0.93) would give 93)
      {0.8, 10, 2},    // 8.0 (floor(10 * (1 - 0.8)) = floor(1.9999999999999996) would give 1)
      {1.0, 12, 1},    // the training thread keeps every core; the pool still has one thread
      {1.0, 1, 1},     {0.99, 2, 1},
  };
  config c;
  for (const auto& r : rows) {
    c.pt_reserved_cores_perc = r.perc;
    EXPECT_EQ(c.resolved_host_threads(r.cores), r.pool) << "perc " << r.perc << " cores " << r.cores;
  }
  c.host_threads = 3;
  EXPECT_EQ(c.resolved_host_threads(12), 3u);
}

// The example docs/config.md shows: a DeepSpeed file with zenflow's own keys in zenflow_ext,
// read, checked, and printed as the resolved configuration.
TEST(config_example, read_a_deepspeed_file_and_print_the_resolved_configuration) {
  const std::string path = ::testing::TempDir() + "zf_config_example_ds.json";
  {
    std::ofstream out(path);
    out << R"({
      "train_micro_batch_size_per_gpu": 8,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                            "zenflow": {"topk_ratio": 0.05, "update_interval": 4, "overlap_step": true,
                                        "select_strategy": "step", "select_interval": 100}},
      "zenflow_ext": {"host_lr_scale": "sqrt", "max_update_interval": 8},
      "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": 0.01}},
      "gradient_clipping": 1.0
    })";
  }
  // example-begin read-deepspeed-config
  zenflow::set_log_handler(zenflow::stderr_log_handler); // show the reader's warnings, if any
  zenflow::config_sources sources;                       // where each value came from
  const zenflow::config cfg = zenflow::config::from_deepspeed_json_file(path, {.strict = true}, &sources);
  std::fputs(cfg.describe(&sources).c_str(), stdout); // the resolved mode, every setting, its origin
  // example-end read-deepspeed-config
  zenflow::set_log_handler({});
  EXPECT_EQ(cfg.mode, zenflow::optimizer_mode::zenflow);
  EXPECT_EQ(cfg.topk_ratio, 0.05);
  EXPECT_EQ(cfg.update_interval, 4);
  EXPECT_TRUE(cfg.overlap_step);
  EXPECT_EQ(cfg.host_lr_scale, zenflow::host_lr_scaling::sqrt);
  EXPECT_EQ(cfg.max_update_interval, 8);
  EXPECT_EQ(cfg.adam.weight_decay, 0.01f);
  EXPECT_EQ(sources.setting.at("host_lr_scale"), "zenflow_ext.host_lr_scale");
  EXPECT_EQ(sources.origin, "file " + path);
  EXPECT_TRUE(sources.warnings.empty());
  std::remove(path.c_str());
}

// ---- what the reader used to ignore in silence: warnings, strict mode, suggestions ------------

/// The message of the invalid_argument that `f` throws ("" and a failure if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const zenflow::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no zenflow::invalid_argument";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(config_warnings, misspelt_zenflow_block_warns_with_the_baseline_it_runs) {
  const std::string json = R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"},
                                                      "zenflw": {"topk_ratio": 0.2}}})";
  const log_capture log;
  zenflow::config_sources src;
  const config c = config::from_deepspeed_json_string(json, {}, &src);
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::offload_sync);
  ASSERT_EQ(log.messages.size(), 1u);
  EXPECT_TRUE(contains(log.messages[0], "'zero_optimization.zenflw'")) << log.messages[0];
  EXPECT_TRUE(contains(log.messages[0], "did you mean 'zenflow'?")) << log.messages[0];
  EXPECT_TRUE(contains(log.messages[0], "offload_sync baseline")) << log.messages[0];
  EXPECT_EQ(src.warnings, log.messages);
  // The printout says which mode runs and why.
  const std::string text = c.describe(&src);
  EXPECT_TRUE(contains(text, "mode: offload_sync (no zero_optimization.zenflow block")) << text;
  EXPECT_TRUE(contains(text, "did you mean 'zenflow'?")) << text;
  // strict: the same file is an error naming the key, and nothing is logged.
  const log_capture strict_log;
  const std::string err = error_of([&] { (void)config::from_deepspeed_json_string(json, {.strict = true}); });
  EXPECT_TRUE(contains(err, "'zero_optimization.zenflw'")) << err;
  EXPECT_TRUE(contains(err, "did you mean 'zenflow'?")) << err;
  EXPECT_TRUE(strict_log.messages.empty());
}

TEST(config_warnings, misspelt_top_level_keys_warn_with_the_nearest_key) {
  const log_capture log;
  const config c = config::from_deepspeed_json_string(
      R"({"gradient_cliping": 1.0, "zero_optimisation": {"zenflow": {}}, "train_batch_size": 8,
          "wandb": {"enabled": false}, "zenflow_ext": {}, "my_own_note": "x"})");
  EXPECT_EQ(c.gradient_clipping, 0.0f); // ignored, as DeepSpeed ignores it
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::gpu_adamw);
  ASSERT_EQ(log.messages.size(), 3u); // DeepSpeed's and our known keys pass in silence
  EXPECT_TRUE(
      log.any_contains("'gradient_cliping' is not a DeepSpeed or zenflow top-level key and is ignored "
                       "(did you mean 'gradient_clipping'?)"));
  EXPECT_TRUE(
      log.any_contains("(did you mean 'zero_optimization'?); without it this file runs the gpu_adamw"));
  EXPECT_TRUE(log.any_contains("'my_own_note' is not a DeepSpeed or zenflow top-level key and is ignored"));
  EXPECT_FALSE(
      log.any_contains("'my_own_note' is not a DeepSpeed or zenflow top-level key and is ignored (did"));
  const std::string err = error_of(
      [] { (void)config::from_deepspeed_json_string(R"({"gradient_cliping": 1.0})", {.strict = true}); });
  EXPECT_TRUE(contains(err, "'gradient_cliping'")) << err;
  EXPECT_TRUE(contains(err, "did you mean 'gradient_clipping'?")) << err;
}

TEST(config_warnings, unknown_keys_in_our_blocks_are_errors_with_the_nearest_key) {
  const auto err = [](const std::string& json) {
    return error_of([&] { (void)config::from_deepspeed_json_string(json); });
  };
  EXPECT_TRUE(contains(err(with_zenflow(R"({"topk": 0.2})")), "did you mean 'topk_ratio'?"));
  EXPECT_TRUE(contains(err(with_zenflow(R"({"tpok_ratio": 0.2})")), "did you mean 'topk_ratio'?"));
  EXPECT_TRUE(contains(err(with_zenflow(R"({"update_intervall": 4})")), "did you mean 'update_interval'?"));
  EXPECT_TRUE(contains(err(with_zenflow(R"({"overlap_steps": true})")), "did you mean 'overlap_step'?"));
  EXPECT_TRUE(contains(err(with_zenflow(R"({"host_lr_scaling": "none"})")), "did you mean 'host_lr_scale'?"));
  EXPECT_FALSE(contains(err(with_zenflow(R"({"completely_else": 1})")), "did you mean"));
  EXPECT_TRUE(contains(err(R"({"zenflow_ext": {"ring_slot": 4}})"), "did you mean 'ring_slots'?"));
  EXPECT_TRUE(contains(err(R"({"optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}})"),
                       "did you mean 'weight_decay'?"));
  // A DeepSpeed key in zenflow_ext: told where it belongs.
  EXPECT_TRUE(contains(err(R"({"zenflow_ext": {"overlap_step": true}})"),
                       "'zero_optimization.zenflow.overlap_step'"));
}

TEST(config_warnings, our_keys_in_the_zenflow_block_are_read_with_a_deprecation_warning) {
  const std::string json = with_zenflow(R"({"topk_ratio": 0.2, "host_lr_scale": "none", "ring_slots": 5})");
  const log_capture log;
  zenflow::config_sources src;
  const config c = config::from_deepspeed_json_string(json, {}, &src);
  EXPECT_EQ(c.host_lr_scale, zenflow::host_lr_scaling::none);
  EXPECT_EQ(c.ring_slots, 5);
  ASSERT_EQ(log.messages.size(), 2u);
  EXPECT_TRUE(log.any_contains("'zero_optimization.zenflow.host_lr_scale' is deprecated here"));
  EXPECT_TRUE(log.any_contains("move it to 'zenflow_ext.ring_slots'"));
  EXPECT_EQ(src.setting.at("host_lr_scale"), "zero_optimization.zenflow.host_lr_scale");
  // Same values from the new place, silently; and the writer uses the new place.
  const log_capture quiet;
  const config d = config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.2}},
          "zenflow_ext": {"host_lr_scale": "none", "ring_slots": 5}})");
  EXPECT_TRUE(quiet.messages.empty());
  EXPECT_EQ(c.to_deepspeed_json(), d.to_deepspeed_json());
  EXPECT_FALSE(c.to_deepspeed_json()["zero_optimization"]["zenflow"].contains("host_lr_scale"));
  const std::string err = error_of([&] { (void)config::from_deepspeed_json_string(json, {.strict = true}); });
  EXPECT_TRUE(contains(err, "'zero_optimization.zenflow.host_lr_scale' is deprecated here")) << err;
  const std::string both = error_of([] {
    (void)config::from_deepspeed_json_string(
        R"({"zero_optimization": {"zenflow": {"mode": "gpu_adamw"}}, "zenflow_ext": {"mode": "zenflow"}})");
  });
  EXPECT_TRUE(contains(both, "'zenflow_ext.mode' is also given as 'zero_optimization.zenflow.mode'")) << both;
}

TEST(config_warnings, a_zenflow_block_without_cpu_offload_warns_as_deepspeed_rejects_it) {
  const std::string json = R"({"zero_optimization": {"stage": 2, "zenflow": {"topk_ratio": 0.2}}})";
  const log_capture log;
  const config c = config::from_deepspeed_json_string(json);
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::zenflow);
  ASSERT_EQ(log.messages.size(), 1u);
  EXPECT_TRUE(
      log.any_contains("'zero_optimization.zenflow' is given without zero_optimization.offload_optimizer"));
  const std::string err = error_of([&] { (void)config::from_deepspeed_json_string(json, {.strict = true}); });
  EXPECT_TRUE(contains(err, "which DeepSpeed rejects")) << err;
}

TEST(config_warnings, param_groups_live_in_zenflow_ext_and_are_still_read_from_the_zenflow_block) {
  const std::string groups =
      R"([{"match": "*.bias", "weight_decay": 0.0}, {"match": "embed", "lr_scale": 0.5}])";
  const log_capture log;
  zenflow::config_sources src;
  const config old_place =
      config::from_deepspeed_json_string(with_zenflow(R"({"param_groups": )" + groups + "}"), {}, &src);
  ASSERT_EQ(old_place.param_groups.size(), 2u);
  EXPECT_EQ(old_place.param_groups[1].lr_scale, 0.5f);
  EXPECT_TRUE(log.any_contains("move it to 'zenflow_ext.param_groups'"));
  const config new_place = config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {}}, "zenflow_ext": {"param_groups": )" +
      groups + "}}");
  EXPECT_EQ(old_place.to_deepspeed_json(), new_place.to_deepspeed_json());
  EXPECT_TRUE(new_place.to_deepspeed_json()["zenflow_ext"].contains("param_groups"));
  EXPECT_TRUE(contains(old_place.describe(&src),
                       R"([{"match":"*.bias","weight_decay":0.0},{"lr_scale":0.5,"match":"embed"}])"))
      << old_place.describe(&src);
  // Errors name the place they were read from; validate() names the canonical one.
  EXPECT_TRUE(contains(error_of([] {
                         (void)config::from_deepspeed_json_string(
                             R"({"zenflow_ext": {"param_groups": [{"lr": 1}]}})");
                       }),
                       "'zenflow_ext.param_groups[0].lr'"));
  EXPECT_TRUE(contains(error_of([] {
                         (void)config::from_deepspeed_json_string(
                             with_zenflow(R"({"param_groups": [{"match": "a", "lr": 1}]})"));
                       }),
                       "'zero_optimization.zenflow.param_groups[0].lr'"));
  EXPECT_TRUE(contains(
      error_of([&] {
        (void)config::from_deepspeed_json_string(R"({"zero_optimization": {"zenflow": {"param_groups": )" +
                                                 groups + R"(}}, "zenflow_ext": {"param_groups": []}})");
      }),
      "'zenflow_ext.param_groups' is also given as 'zero_optimization.zenflow.param_groups'"));
}

TEST(config_warnings, offload_true_is_rejected_with_the_reason) {
  const std::string err =
      error_of([] { (void)config::from_deepspeed_json_string(with_zenflow(R"({"offload": true})")); });
  EXPECT_TRUE(contains(err, "'zero_optimization.zenflow.offload' is true, which zenflow does not support"))
      << err;
  EXPECT_TRUE(contains(err, "pinned host memory")) << err;
  EXPECT_NO_THROW((void)config::from_deepspeed_json_string(with_zenflow(R"({"offload": false})")));
}

TEST(config_warnings, a_rejected_file_leaves_the_callers_sources_as_they_were) {
  zenflow::config_sources src;
  src.origin = "kept";
  src.warnings = {"kept"};
  const log_capture log;
  (void)error_of([&] {
    (void)config::from_deepspeed_json_string(
        R"({"gradient_cliping": 1, "zero_optimization": {"zenflow": {"topk_ratio": 2}}})", {}, &src);
  });
  EXPECT_EQ(src.origin, "kept");
  EXPECT_EQ(src.warnings, std::vector<std::string>{"kept"});
  EXPECT_TRUE(src.setting.empty());
}

// ---- the resolved-config printout ---------------------------------------------------------------

TEST(config_describe, a_deepspeed_file_without_overlap_step_runs_synchronously_and_says_so) {
  zenflow::config_sources src;
  const config c = config::from_deepspeed_json_string(
      with_zenflow(
          R"({"topk_ratio": 0.05, "select_strategy": "step", "select_interval": 8, "update_interval": 4})"),
      {}, &src);
  EXPECT_FALSE(c.overlap_step); // DeepSpeed's default
  const std::string text = c.describe(&src);
  EXPECT_TRUE(contains(text, "read from JSON text")) << text;
  EXPECT_TRUE(contains(text, "mode: zenflow (the file has a zero_optimization.zenflow block)")) << text;
  EXPECT_TRUE(contains(text, "host windows: synchronous (overlap_step false)")) << text;
  EXPECT_TRUE(contains(text, "overlap_step is not in the file, so DeepSpeed's default (false) applies"))
      << text;
  EXPECT_TRUE(contains(text, "window length: 4 steps")) << text;
  EXPECT_TRUE(contains(text, "selection: every 8 steps from step 0")) << text;
  // Each setting with where it came from.
  const auto line_of = [&](const std::string& name) {
    const auto at = text.find("\n  " + name + " ");
    return at == std::string::npos ? std::string() : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  EXPECT_TRUE(contains(line_of("topk_ratio"), "0.05")) << line_of("topk_ratio");
  EXPECT_TRUE(contains(line_of("topk_ratio"), "[zero_optimization.zenflow.topk_ratio]"));
  EXPECT_TRUE(contains(line_of("overlap_step"), "[DeepSpeed's default]")) << line_of("overlap_step");
  EXPECT_TRUE(contains(line_of("auto_ratio"), "[DeepSpeed's default]"));
  EXPECT_TRUE(contains(line_of("host_lr_scale"), "[default]"));

  // With overlap_step in the file, the windows overlap and nothing is said about the default.
  zenflow::config_sources src2;
  const config o = config::from_deepspeed_json_string(with_zenflow(R"({"overlap_step": true})"), {}, &src2);
  const std::string text2 = o.describe(&src2);
  EXPECT_TRUE(contains(text2, "host windows: overlapped (overlap_step true)")) << text2;
  EXPECT_FALSE(contains(text2, "DeepSpeed's default (false) applies")) << text2;
  EXPECT_TRUE(contains(text2, "window length: Zen-auto")) << text2;
}

TEST(config_describe, marks_values_a_caller_changed_and_the_baselines) {
  config c;
  c.topk_ratio = 0.25;
  c.auto_ratio = 0.0;
  const std::string text = c.describe();
  EXPECT_TRUE(contains(text, "0.25")) << text;
  EXPECT_TRUE(contains(text, "[set by the caller]")) << text;
  EXPECT_TRUE(contains(text, "(0: every window closes at min_update_interval)")) << text;
  EXPECT_FALSE(contains(text, "DeepSpeed's default")) << text;
  zenflow::config_sources src;
  (void)config::from_deepspeed_json_string(with_zenflow("{}"), {}, &src);
  src.set("topk_ratio", "--topk-ratio");
  EXPECT_TRUE(contains(c.describe(&src), "[--topk-ratio]"));
  config g;
  g.mode = zenflow::optimizer_mode::gpu_adamw;
  EXPECT_TRUE(contains(g.describe(), "mode: gpu_adamw"));
  EXPECT_TRUE(contains(
      config::from_deepspeed_json_string(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})")
          .describe(),
      "mode: offload_sync"));
}

// ---- auto_ratio 0 and pt_reserved_cores_perc 1 in the engine ---------------------------------

/// Steps of a small host-backend engine with Zen-auto; returns the steps that closed a window.
std::vector<std::int64_t> zen_auto_closes(const config& cfg, int steps) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::int64_t channels = 24, len = 8;
  std::vector<float> w1(channels * len), g1(w1.size()), w2(16 * 4), g2(w2.size());
  for (auto* v : {&w1, &w2}) {
    for (float& x : *v) {
      x = nd(gen);
    }
  }
  zenflow::engine<zenflow::host_backend> zf(cfg);
  (void)zf.add_matrix(w1.data(), g1.data(), channels, len);
  (void)zf.add_matrix(w2.data(), g2.data(), 16, 4);
  zf.initialize();
  std::vector<std::int64_t> closes;
  for (int t = 0; t < steps; ++t) {
    for (auto* v : {&g1, &g2}) {
      for (std::size_t i = 0; i < v->size(); ++i) {
        // skewed channels: the first ones carry most of the gradient
        (*v)[i] = nd(gen) * (i < 16 ? 4.0f : 0.05f);
      }
    }
    if (zf.step(1e-3f).window_closed) {
      closes.push_back(t);
    }
  }
  zf.flush();
  return closes;
}

TEST(config_engine, auto_ratio_zero_closes_every_window_at_min_update_interval) {
  config cfg;
  cfg.topk_ratio = 0.25;
  cfg.update_interval = 0; // Zen-auto
  cfg.select = zenflow::select_strategy::step;
  cfg.select_interval = 100;
  cfg.max_update_interval = 16;
  cfg.auto_ratio = 0.0;
  cfg.min_update_interval = 1;
  std::vector<std::int64_t> every(20);
  for (int t = 0; t < 20; ++t) {
    every[static_cast<std::size_t>(t)] = t;
  }
  EXPECT_EQ(zen_auto_closes(cfg, 20), every);
  cfg.min_update_interval = 3;
  EXPECT_EQ(zen_auto_closes(cfg, 20), (std::vector<std::int64_t>{2, 5, 8, 11, 14, 17}));
  // The contrast (the test can fail): every matrix must vote at 1, so the windows grow.
  cfg.auto_ratio = 1.0;
  cfg.min_update_interval = 1;
  EXPECT_LT(zen_auto_closes(cfg, 20).size(), 20u);
}

TEST(config_engine, all_cores_reserved_leaves_the_host_pool_one_thread_and_trains) {
  config cfg;
  cfg.pt_reserved_cores_perc = 1.0;
  cfg.update_interval = 2;
  cfg.select = zenflow::select_strategy::step;
  cfg.select_interval = 4;
  cfg.topk_ratio = 0.0; // k = 1
  EXPECT_EQ(cfg.resolved_host_threads(64), 1u);
  EXPECT_EQ(cfg.topk(24), 1);
  EXPECT_EQ(zen_auto_closes(cfg, 8), (std::vector<std::int64_t>{1, 3, 5, 7}));
}

TEST(config_engine, ring_slot_error_gives_the_numbers_and_the_remedy) {
  config cfg;
  cfg.ring_slot_bytes = 4096;
  zenflow::engine<zenflow::host_backend> zf(cfg);
  std::vector<zenflow::bfloat16> w(3 * 2048), g(w.size());
  const std::string err = error_of([&] { (void)zf.add_matrix(w.data(), g.data(), 2, 3000); });
  EXPECT_TRUE(contains(err, "argument 'channel_len' makes one channel 6000 bytes (3000 x 2)")) << err;
  EXPECT_TRUE(contains(err, "ring_slot_bytes = 4096")) << err;
  EXPECT_TRUE(contains(err, "zenflow_ext.ring_slot_bytes (config::ring_slot_bytes) to at least 6144")) << err;
  EXPECT_EQ(zf.param_count(), 0u); // nothing registered
  EXPECT_NO_THROW((void)zf.add_matrix(w.data(), g.data(), 3, 2048));
  config sync = cfg;
  sync.mode = zenflow::optimizer_mode::offload_sync;
  zenflow::engine<zenflow::host_backend> zs(sync);
  std::vector<float> b(1100), gb(b.size());
  const std::string verr = error_of([&] { (void)zs.add_vector(b.data(), gb.data(), 1100); });
  EXPECT_TRUE(contains(verr, "argument 'n' makes the vector 4400 bytes (1100 x 4)")) << verr;
  EXPECT_TRUE(contains(verr, "at least 4608")) << verr;
}

// describe() renders the parameter groups without a JSON library (detail/config/config_impl.hpp): on
// seeded random groups its text equals what the JSON writer dumps.
TEST(config_describe, param_groups_text_equals_the_json_writers) {
  std::mt19937 rng(20261124);
  std::uniform_real_distribution<float> value(0.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    config c;
    const int n = 1 + trial % 4;
    for (int g = 0; g < n; ++g) {
      zenflow::param_group group;
      group.match = (g % 2 == 0 ? "layer" : "*.b\\ias\"") + std::to_string(trial);
      if ((trial + g) % 3 != 0) {
        group.lr_scale = (trial + g) % 5 == 0 ? 1.0f : value(rng);
      }
      if ((trial + g) % 2 == 0) {
        group.weight_decay = (trial + g) % 4 == 0 ? 0.0f : value(rng);
      }
      c.param_groups.push_back(group);
    }
    const std::string dumped = c.to_deepspeed_json()["zenflow_ext"]["param_groups"].dump();
    EXPECT_TRUE(contains(c.describe(), dumped)) << dumped << "\n" << c.describe();
  }
}

} // namespace
