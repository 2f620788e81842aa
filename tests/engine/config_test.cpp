// zenflow::config: DeepSpeed JSON parsing as DeepSpeed reads it (keys, ranges, defaults),
// zenflow's own keys in zenflow_ext, round trips, and validation (every rejected value names its
// key). The schedule helpers, warnings, strict mode and printout: config_schedule_and_warnings_test.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>
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

TEST(config, default_config_is_valid_and_matches_spec_defaults) {
  const config c;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::zenflow);
  EXPECT_EQ(c.topk_ratio, 0.1);
  EXPECT_EQ(c.select, zenflow::select_strategy::automatic);
  EXPECT_EQ(c.select_interval, 0);
  EXPECT_EQ(c.update_interval, 0);
  EXPECT_TRUE(c.auto_update());
  EXPECT_FALSE(c.overlap_step); // synchronous windows: the accuracy study's worst case (docs/accuracy.md)
  EXPECT_EQ(c.auto_ratio, 0.99);
  EXPECT_EQ(c.pt_reserved_cores_perc, 0.5);
  EXPECT_FALSE(c.pin_host_threads); // placement is asked for: several ranks on one node would share cores
  EXPECT_EQ(c.host_lr_scale, zenflow::host_lr_scaling::linear);
  EXPECT_TRUE(c.host_moments_per_step);
  EXPECT_EQ(c.importance, zenflow::channel_norm::sq_l2);
  EXPECT_EQ(c.adam.lr, 1e-3f);
  EXPECT_EQ(c.adam.beta1, 0.9f);
  EXPECT_EQ(c.adam.beta2, 0.999f);
  EXPECT_EQ(c.adam.eps, 1e-8f);
  EXPECT_EQ(c.adam.weight_decay, 0.0f);
  EXPECT_TRUE(c.adam.decoupled);
}

TEST(config, deepspeed_example_block_parses) {
  const config c = config::from_deepspeed_json_string(deepspeed_example);
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::zenflow);
  EXPECT_EQ(c.topk_ratio, 0.05);
  EXPECT_EQ(c.select, zenflow::select_strategy::step);
  EXPECT_EQ(c.select_interval, 4);
  EXPECT_EQ(c.update_interval, 4);
  EXPECT_FALSE(c.auto_update());
  EXPECT_EQ(c.full_warm_up_rounds, 0);
  EXPECT_TRUE(c.overlap_step);
  EXPECT_EQ(c.adam.lr, 2e-5f);
  EXPECT_EQ(c.adam.beta1, 0.9f);
  EXPECT_EQ(c.adam.beta2, 0.999f);
  EXPECT_EQ(c.adam.eps, 1e-8f);
  EXPECT_EQ(c.adam.weight_decay, 0.01f);
  EXPECT_TRUE(c.adam.decoupled);
  EXPECT_EQ(c.gradient_clipping, 1.0f);
  EXPECT_EQ(c.loss_scale, 1.0f);
  EXPECT_EQ(c.select_interval_steps(), 4);
  // Keys it does not set keep their defaults.
  EXPECT_EQ(c.auto_ratio, 0.99);
  EXPECT_EQ(c.max_update_interval, 2);
}

TEST(config, auto_values_and_every_extension_key_parse) {
  const log_capture log;
  const config c = config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {
    "topk_ratio": 1, "select_strategy": "auto", "select_interval": "auto", "update_interval": "auto",
    "full_warm_up_rounds": 7, "overlap_step": false, "offload": false, "auto_ratio": 0.5,
    "pt_reserved_cores_perc": 0.25, "steps_per_epoch": 50}},
    "zenflow_ext": {"host_lr_scale": "sqrt",
    "max_update_interval": 9, "min_update_interval": 2, "importance": "l1", "mode": "offload_sync",
    "upload": "chunk_ring", "ring_slot_bytes": 65536, "ring_slots": 3, "host_threads": 5,
    "host_moments_per_step": false, "accumulate": "device", "pin_host_threads": true}})",
      {.strict = true});
  EXPECT_TRUE(log.messages.empty()) << log.messages.front(); // nothing to warn about, even strict
  EXPECT_EQ(c.topk_ratio, 1.0);
  EXPECT_EQ(c.select, zenflow::select_strategy::automatic);
  EXPECT_EQ(c.select_interval, 0);
  EXPECT_EQ(c.update_interval, 0);
  EXPECT_EQ(c.full_warm_up_rounds, 7);
  EXPECT_FALSE(c.overlap_step);
  EXPECT_EQ(c.auto_ratio, 0.5);
  EXPECT_EQ(c.pt_reserved_cores_perc, 0.25);
  EXPECT_EQ(c.steps_per_epoch, 50);
  EXPECT_EQ(c.host_lr_scale, zenflow::host_lr_scaling::sqrt);
  EXPECT_EQ(c.max_update_interval, 9);
  EXPECT_EQ(c.min_update_interval, 2);
  EXPECT_EQ(c.importance, zenflow::channel_norm::l1);
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::offload_sync);
  EXPECT_EQ(c.upload, zenflow::upload_policy::chunk_ring);
  EXPECT_EQ(c.accumulate, zenflow::accumulation_site::device);
  EXPECT_EQ(c.ring_slot_bytes, 65536);
  EXPECT_EQ(c.ring_slots, 3);
  EXPECT_EQ(c.host_threads, 5u);
  EXPECT_TRUE(c.pin_host_threads);
  EXPECT_FALSE(c.host_moments_per_step);
  EXPECT_EQ(c.select_interval_steps(), 50); // auto: once per epoch
}

TEST(config, range_boundaries_are_accepted) {
  // DeepSpeed's ranges: topk_ratio, auto_ratio and pt_reserved_cores_perc are all [0, 1].
  const config lo = config::from_deepspeed_json_string(with_zenflow_and_ext(R"({
    "topk_ratio": 0, "select_strategy": "step", "select_interval": 5, "update_interval": "auto",
    "full_warm_up_rounds": 0, "auto_ratio": 0, "pt_reserved_cores_perc": 0})",
                                                                            R"({"min_update_interval": 5,
    "max_update_interval": 5, "ring_slot_bytes": 4096, "ring_slots": 2, "host_threads": 0})"));
  EXPECT_EQ(lo.topk_ratio, 0.0);
  EXPECT_EQ(lo.topk(10), 1); // at least one channel
  EXPECT_EQ(lo.auto_ratio, 0.0);
  EXPECT_EQ(lo.pt_reserved_cores_perc, 0.0);
  EXPECT_EQ(lo.ring_slots, 2);
  const config hi = config::from_deepspeed_json_string(with_zenflow_and_ext(R"({
    "topk_ratio": 1, "select_strategy": "step", "select_interval": 2147483647, "update_interval": 2147483647,
    "full_warm_up_rounds": 2147483647, "pt_reserved_cores_perc": 1.0, "auto_ratio": 1})",
                                                                            R"({"ring_slot_bytes": 1073741824,
    "ring_slots": 1024, "host_threads": 4096})"));
  EXPECT_EQ(hi.pt_reserved_cores_perc, 1.0);
  EXPECT_EQ(hi.auto_ratio, 1.0);
  EXPECT_EQ(hi.select_interval, config::max_steps_value);
  EXPECT_EQ(hi.ring_slot_bytes, std::int64_t{1} << 30);
  EXPECT_EQ(hi.host_threads, 4096u);
  const config opt = config::from_deepspeed_json_string(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": 0, "betas": [0, 0], "eps": 1e-30, "weight_decay": 0}}})");
  EXPECT_EQ(opt.adam.lr, 0.0f);
  EXPECT_EQ(opt.adam.beta1, 0.0f);
  EXPECT_EQ(opt.adam.eps, 1e-30f);
}

TEST(config, integral_floats_and_null_are_read_like_deepspeed) {
  const config c = config::from_deepspeed_json_string(
      with_zenflow(R"({"select_strategy": "step", "select_interval": 8.0, "update_interval": 2,
                       "steps_per_epoch": null})"));
  EXPECT_EQ(c.select_interval, 8);
  EXPECT_EQ(c.steps_per_epoch, 0);
}

TEST(config, auto_placeholders_take_deepspeeds_defaults) {
  // DeepSpeed's config models drop "auto" values: each key then takes DeepSpeed's default.
  zenflow::config_sources src;
  const config c = config::from_deepspeed_json_string(
      with_zenflow(R"({"topk_ratio": "auto", "overlap_step": "auto", "auto_ratio": "auto", "offload": "auto",
                       "pt_reserved_cores_perc": "auto", "full_warm_up_rounds": "auto", "steps_per_epoch": "auto"})"),
      {}, &src);
  EXPECT_EQ(c.to_deepspeed_json(), config::deepspeed_defaults().to_deepspeed_json());
  EXPECT_EQ(src.setting.at("topk_ratio"),
            "zero_optimization.zenflow.topk_ratio \"auto\" (DeepSpeed's default)");
  expect_rejected(with_zenflow(R"({"topk_ratio": "automatic"})"), "zero_optimization.zenflow.topk_ratio");
  expect_rejected(R"({"zenflow_ext": {"ring_slots": "auto"}})", "zenflow_ext.ring_slots");
}

TEST(config, empty_zenflow_block_gives_deepspeeds_defaults) {
  const config c = config::from_deepspeed_json_string(with_zenflow("{}"));
  EXPECT_EQ(c.to_deepspeed_json(), config::deepspeed_defaults().to_deepspeed_json());
  // DeepSpeed's ZenFlowConfig defaults, written out independently of deepspeed_defaults().
  EXPECT_EQ(c.topk_ratio, 0.1);
  EXPECT_EQ(c.select, zenflow::select_strategy::automatic);
  EXPECT_EQ(c.select_interval, 0);
  EXPECT_EQ(c.update_interval, 0);
  EXPECT_EQ(c.full_warm_up_rounds, 0);
  EXPECT_FALSE(c.overlap_step); // DeepSpeed runs a file without overlap_step synchronously
  EXPECT_EQ(c.auto_ratio, 0.99);
  EXPECT_EQ(c.pt_reserved_cores_perc, 0.5);
  EXPECT_FALSE(c.pin_host_threads); // placement is asked for: several ranks on one node would share cores
  EXPECT_EQ(c.steps_per_epoch, 0);
  // zenflow's own keys keep the C++ defaults.
  const config d;
  EXPECT_EQ(c.host_lr_scale, d.host_lr_scale);
  EXPECT_EQ(c.max_update_interval, d.max_update_interval);
  EXPECT_EQ(c.ring_slot_bytes, d.ring_slot_bytes);
}

TEST(config, without_zenflow_block_the_mode_is_the_deepspeed_baseline) {
  EXPECT_EQ(
      config::from_deepspeed_json_string(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})")
          .mode,
      zenflow::optimizer_mode::offload_sync);
  EXPECT_EQ(config::from_deepspeed_json_string(R"({"zero_optimization": {"stage": 2}})").mode,
            zenflow::optimizer_mode::gpu_adamw);
  EXPECT_EQ(config::from_deepspeed_json_string("{}").mode, zenflow::optimizer_mode::gpu_adamw);
  EXPECT_EQ(config::from_deepspeed_json_string(
                R"({"zero_optimization": {"offload_optimizer": {"device": "none"}, "zenflow": null}})")
                .mode,
            zenflow::optimizer_mode::gpu_adamw);
  EXPECT_EQ(config::from_deepspeed_json_string(with_zenflow(R"({"mode": "gpu_adamw"})")).mode,
            zenflow::optimizer_mode::gpu_adamw);
}

TEST(config, adam_type_follows_deepspeed_adam_w_mode) {
  const auto parse = [](const std::string& opt) {
    return config::from_deepspeed_json_string(R"({"optimizer": )" + opt + "}");
  };
  // DeepSpeed: "Adam" is AdamW unless adam_w_mode is false; "AdamW" is always AdamW.
  EXPECT_TRUE(parse(R"({"type": "Adam"})").adam.decoupled);
  EXPECT_FALSE(parse(R"({"type": "Adam", "params": {"adam_w_mode": false}})").adam.decoupled);
  EXPECT_TRUE(parse(R"({"type": "AdamW", "params": {"adam_w_mode": false}})").adam.decoupled);
  EXPECT_TRUE(parse(R"({"type": "adamw"})").adam.decoupled);
  // Missing params: DeepSpeed's CPU Adam defaults.
  const config c =
      parse(R"({"type": "Adam", "params": {"lr": 0.5, "torch_adam": true, "bias_correction": true,
                                                          "amsgrad": false}})");
  EXPECT_EQ(c.adam.lr, 0.5f);
  EXPECT_EQ(c.adam.beta1, 0.9f);
  EXPECT_EQ(c.adam.beta2, 0.999f);
  EXPECT_EQ(c.adam.eps, 1e-8f);
  EXPECT_EQ(c.adam.weight_decay, 0.0f);
}

TEST(config, static_loss_scale_and_bf16) {
  EXPECT_EQ(
      config::from_deepspeed_json_string(R"({"fp16": {"enabled": true, "loss_scale": 128}})").loss_scale,
      128.0f);
  EXPECT_EQ(config::from_deepspeed_json_string(R"({"fp16": {"enabled": false, "loss_scale": 0}})").loss_scale,
            1.0f);
  EXPECT_EQ(config::from_deepspeed_json_string(R"({"bf16": {"enabled": true}})").loss_scale, 1.0f);
}

TEST(config, round_trips_through_deepspeed_json) {
  config c;
  c.mode = zenflow::optimizer_mode::zenflow;
  c.topk_ratio = 0.37;
  c.select = zenflow::select_strategy::epoch;
  c.select_interval = 3;
  c.steps_per_epoch = 11;
  c.update_interval = 5;
  c.full_warm_up_rounds = 2;
  c.overlap_step = false;
  c.auto_ratio = 0.75;
  c.pt_reserved_cores_perc = 0.125;
  c.host_lr_scale = zenflow::host_lr_scaling::none;
  c.max_update_interval = 12;
  c.min_update_interval = 3;
  c.importance = zenflow::channel_norm::l1;
  c.host_moments_per_step = false;
  c.adam.lr = 3e-4f;
  c.adam.beta1 = 0.8f;
  c.adam.beta2 = 0.95f;
  c.adam.eps = 1e-6f;
  c.adam.weight_decay = 0.1f;
  c.adam.decoupled = false;
  c.gradient_clipping = 0.5f;
  c.loss_scale = 1024.0f;
  c.upload = zenflow::upload_policy::chunk_ring;
  c.accumulate = zenflow::accumulation_site::device;
  c.ring_slot_bytes = 1 << 16;
  c.ring_slots = 4;
  c.host_threads = 3;
  c.pin_host_threads = true;
  const nlohmann::json j = c.to_deepspeed_json();
  // DeepSpeed can read what we write: its zenflow block holds only DeepSpeed's keys.
  for (const auto& [key, v] : j["zero_optimization"]["zenflow"].items()) {
    (void)v;
    EXPECT_TRUE(key == "topk_ratio" || key == "select_strategy" || key == "select_interval" ||
                key == "update_interval" || key == "full_warm_up_rounds" || key == "overlap_step" ||
                key == "auto_ratio" || key == "pt_reserved_cores_perc" || key == "steps_per_epoch")
        << key;
  }
  EXPECT_EQ(j["zenflow_ext"]["host_lr_scale"], "none");
  EXPECT_EQ(j["zenflow_ext"]["ring_slots"], 4);
  const log_capture log;
  const config r = config::from_deepspeed_json(j, {.strict = true});
  EXPECT_TRUE(log.messages.empty());
  EXPECT_EQ(r.to_deepspeed_json(), j);
  EXPECT_EQ(r.host_lr_scale, zenflow::host_lr_scaling::none);
  EXPECT_EQ(r.max_update_interval, 12);
  EXPECT_EQ(r.min_update_interval, 3);
  EXPECT_EQ(r.importance, zenflow::channel_norm::l1);
  EXPECT_FALSE(r.host_moments_per_step);
  EXPECT_EQ(j["zenflow_ext"]["host_moments_per_step"], false);
  EXPECT_EQ(r.upload, zenflow::upload_policy::chunk_ring);
  EXPECT_EQ(j["zenflow_ext"]["accumulate"], "device");
  EXPECT_EQ(r.accumulate, zenflow::accumulation_site::device);
  EXPECT_EQ(r.ring_slot_bytes, 1 << 16);
  EXPECT_EQ(r.ring_slots, 4);
  EXPECT_FALSE(r.overlap_step);
  EXPECT_EQ(r.topk_ratio, c.topk_ratio);
  EXPECT_EQ(r.select, c.select);
  EXPECT_EQ(r.select_interval, 3);
  EXPECT_EQ(r.steps_per_epoch, 11);
  EXPECT_EQ(r.select_interval_steps(), 33);
  EXPECT_EQ(r.adam.lr, c.adam.lr);
  EXPECT_EQ(r.adam.beta2, c.adam.beta2);
  EXPECT_FALSE(r.adam.decoupled);
  EXPECT_EQ(r.loss_scale, 1024.0f);
  EXPECT_EQ(r.host_threads, 3u);
  EXPECT_TRUE(r.pin_host_threads);
  EXPECT_EQ(j["zenflow_ext"]["pin_host_threads"], true);
}

TEST(config, reads_files_and_names_unreadable_ones) {
  const std::string path = ::testing::TempDir() + "zf_config_test_ds.json";
  {
    std::ofstream out(path);
    out << deepspeed_example;
  }
  EXPECT_EQ(config::from_deepspeed_json_file(path).topk_ratio, 0.05);
  {
    std::ofstream out(path);
    out << with_zenflow(R"({"topk_ratio": 3})");
  }
  try {
    (void)config::from_deepspeed_json_file(path);
    ADD_FAILURE() << "accepted topk_ratio 3";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'zero_optimization.zenflow.topk_ratio'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::remove(path.c_str());
  try {
    (void)config::from_deepspeed_json_file(path);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

struct rejected_case {
  const char* json; // a zenflow block, or a whole config when it starts with '!'
  const char* key;
};

// Printed on failure, and a stable test name (the default would print the struct's bytes,
// pointers included, so ctest's test names would change from run to run).
void PrintTo(const rejected_case& c, std::ostream* os) {
  *os << c.json << " -> " << c.key;
}
std::string rejected_case_name(const ::testing::TestParamInfo<rejected_case>& info) {
  std::string name = std::to_string(info.index) + "_";
  for (const char* p = info.param.key; *p != '\0'; ++p) {
    name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  }
  return name;
}

class config_rejects : public ::testing::TestWithParam<rejected_case> {};

TEST_P(config_rejects, with_an_error_naming_the_key) {
  const rejected_case& c = GetParam();
  const std::string json = c.json[0] == '!' ? std::string(c.json + 1) : with_zenflow(c.json);
  expect_rejected(json, c.key);
}

#define ZF_KEY(name) "zero_optimization.zenflow." name

INSTANTIATE_TEST_SUITE_P(
    zenflow_block,
    config_rejects,
    ::testing::Values(
        rejected_case{R"({"topk_ratio": -0.1})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"topk_ratio": -1e-300})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"topk_ratio": 1.5})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"topk_ratio": "0.1"})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"topk_ratio": true})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"select_strategy": "steps"})", ZF_KEY("select_strategy")},
        rejected_case{R"({"select_strategy": 3})", ZF_KEY("select_strategy")},
        rejected_case{R"({"select_strategy": "step", "select_interval": "never"})",
                      ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 0})", ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": -1})", ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 2.5})", ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 1e20})", ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 18446744073709551615})",
                      ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 4294967296})",
                      ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "step"})", ZF_KEY("select_interval")}, // "auto" with "step"
        rejected_case{R"({"select_strategy": "auto", "select_interval": 10})", ZF_KEY("select_interval")},
        rejected_case{R"({"update_interval": 0})", ZF_KEY("update_interval")},
        rejected_case{R"({"update_interval": "fast"})", ZF_KEY("update_interval")},
        rejected_case{R"({"update_interval": [4]})", ZF_KEY("update_interval")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 2, "update_interval": 4})",
                      ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "epoch", "select_interval": 1, "steps_per_epoch": 3,
                          "update_interval": 4})",
                      ZF_KEY("steps_per_epoch")},
        rejected_case{R"({"select_strategy": "auto", "steps_per_epoch": 3, "update_interval": 4})",
                      ZF_KEY("steps_per_epoch")},
        rejected_case{R"({"select_strategy": "step", "select_interval": 1, "min_update_interval": 2})",
                      ZF_KEY("select_interval")},
        rejected_case{R"({"select_strategy": "epoch"})", ZF_KEY("select_strategy")},
        rejected_case{R"({"select_strategy": "epoch", "select_interval": 2})", ZF_KEY("select_strategy")},
        rejected_case{R"({"topk": 0.1})", ZF_KEY("topk")},
        rejected_case{R"({"offload": true})", ZF_KEY("offload")},
        rejected_case{R"({"update_intervall": 4})", ZF_KEY("update_intervall")},
        rejected_case{R"({"full_warm_up_rounds": -1})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"full_warm_up_rounds": 1.5})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"full_warm_up_rounds": "0"})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"overlap_step": "true"})", ZF_KEY("overlap_step")},
        rejected_case{R"({"overlap_step": 1})", ZF_KEY("overlap_step")},
        rejected_case{R"({"offload": "yes"})", ZF_KEY("offload")},
        rejected_case{R"({"auto_ratio": -0.01})", ZF_KEY("auto_ratio")},
        rejected_case{R"({"auto_ratio": 1.01})", ZF_KEY("auto_ratio")},
        rejected_case{R"({"pt_reserved_cores_perc": 1.01})", ZF_KEY("pt_reserved_cores_perc")},
        rejected_case{R"({"pt_reserved_cores_perc": -0.1})", ZF_KEY("pt_reserved_cores_perc")},
        rejected_case{R"({"host_lr_scale": "quadratic"})", ZF_KEY("host_lr_scale")}, // deprecated place
        rejected_case{R"({"steps_per_epoch": 0})", ZF_KEY("steps_per_epoch")},
        rejected_case{R"({"steps_per_epoch": -3})", ZF_KEY("steps_per_epoch")},
        rejected_case{"true", "zero_optimization.zenflow"},
        rejected_case{"[]", "zero_optimization.zenflow"}),
    rejected_case_name);

#define ZF_EXT(name) "zenflow_ext." name
#define ZF_EXT_CASE(block) "!{\"zenflow_ext\": " block "}"

INSTANTIATE_TEST_SUITE_P(
    zenflow_ext_block,
    config_rejects,
    ::testing::Values(
        rejected_case{ZF_EXT_CASE(R"({"host_lr_scale": "quadratic"})"), ZF_EXT("host_lr_scale")},
        rejected_case{ZF_EXT_CASE(R"({"host_lr_scale": 2})"), ZF_EXT("host_lr_scale")},
        rejected_case{ZF_EXT_CASE(R"({"max_update_interval": 0})"), ZF_EXT("max_update_interval")},
        rejected_case{ZF_EXT_CASE(R"({"min_update_interval": 5, "max_update_interval": 4})"),
                      ZF_EXT("max_update_interval")},
        rejected_case{ZF_EXT_CASE(R"({"min_update_interval": 0})"), ZF_EXT("min_update_interval")},
        rejected_case{ZF_EXT_CASE(R"({"importance": "l2"})"), ZF_EXT("importance")},
        rejected_case{ZF_EXT_CASE(R"({"host_moments_per_step": 1})"), ZF_EXT("host_moments_per_step")},
        rejected_case{ZF_EXT_CASE(R"({"host_moments_per_step": "true"})"), ZF_EXT("host_moments_per_step")},
        rejected_case{ZF_EXT_CASE(R"({"mode": "cpu"})"), ZF_EXT("mode")},
        rejected_case{ZF_EXT_CASE(R"({"upload": "ring"})"), ZF_EXT("upload")},
        rejected_case{ZF_EXT_CASE(R"({"accumulate": "gpu"})"), ZF_EXT("accumulate")},
        rejected_case{ZF_EXT_CASE(R"({"accumulate": true})"), ZF_EXT("accumulate")},
        rejected_case{ZF_EXT_CASE(R"({"ring_slot_bytes": 100})"), ZF_EXT("ring_slot_bytes")},
        rejected_case{ZF_EXT_CASE(R"({"ring_slot_bytes": 4097})"), ZF_EXT("ring_slot_bytes")},
        rejected_case{ZF_EXT_CASE(R"({"ring_slot_bytes": 2147483648})"), ZF_EXT("ring_slot_bytes")},
        rejected_case{ZF_EXT_CASE(R"({"ring_slots": 1})"), ZF_EXT("ring_slots")},
        rejected_case{ZF_EXT_CASE(R"({"ring_slots": 2000})"), ZF_EXT("ring_slots")},
        rejected_case{ZF_EXT_CASE(R"({"host_threads": -1})"), ZF_EXT("host_threads")},
        rejected_case{ZF_EXT_CASE(R"({"host_threads": 5000})"), ZF_EXT("host_threads")},
        rejected_case{ZF_EXT_CASE(R"({"pin_host_threads": 1})"), ZF_EXT("pin_host_threads")},
        rejected_case{ZF_EXT_CASE(R"({"host_lr": "none"})"), ZF_EXT("host_lr")},
        rejected_case{ZF_EXT_CASE(R"({"topk_ratio": 0.2})"), ZF_EXT("topk_ratio")},
        rejected_case{ZF_EXT_CASE("3"), "zenflow_ext"},
        // one key in both places
        rejected_case{R"(!{"zero_optimization": {"zenflow": {"ring_slots": 4}},
                                        "zenflow_ext": {"ring_slots": 4}})",
                      ZF_EXT("ring_slots")}),
    rejected_case_name);

INSTANTIATE_TEST_SUITE_P(
    whole_config,
    config_rejects,
    ::testing::Values(
        rejected_case{"![]", "<root>"},
        rejected_case{"!{\"zero_optimization\": ", "<root>"},
        rejected_case{R"(!{"zero_optimization": 2})", "zero_optimization"},
        rejected_case{R"(!{"zero_optimization": {"offload_optimizer": "cpu"}})",
                      "zero_optimization.offload_optimizer"},
        rejected_case{R"(!{"zero_optimization": {"offload_optimizer": {"device": 1}}})",
                      "zero_optimization.offload_optimizer.device"},
        rejected_case{R"(!{"optimizer": {"params": {"lr": 0.1}}})", "optimizer.type"},
        rejected_case{R"(!{"optimizer": {"type": "SGD"}})", "optimizer.type"},
        rejected_case{R"(!{"optimizer": {"type": 1}})", "optimizer.type"},
        rejected_case{R"(!{"optimizer": "AdamW"})", "optimizer"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": [1]}})", "optimizer.params"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"lr": -1}}})", "optimizer.params.lr"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})",
                      "optimizer.params.lr"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"lr": 1e300}}})", "optimizer.params.lr"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})",
                      "optimizer.params.betas"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})",
                      "optimizer.params.betas"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"betas": [-0.1, 0.9]}}})",
                      "optimizer.params.betas"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"betas": "x"}}})",
                      "optimizer.params.betas"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"eps": 0}}})", "optimizer.params.eps"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"weight_decay": -0.1}}})",
                      "optimizer.params.weight_decay"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}})",
                      "optimizer.params.momentum"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})",
                      "optimizer.params.amsgrad"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}})",
                      "optimizer.params.bias_correction"},
        rejected_case{R"(!{"optimizer": {"type": "AdamW", "params": {"adam_w_mode": 1}}})",
                      "optimizer.params.adam_w_mode"},
        rejected_case{R"(!{"gradient_clipping": -1})", "gradient_clipping"},
        rejected_case{R"(!{"gradient_clipping": "auto"})", "gradient_clipping"},
        rejected_case{R"(!{"fp16": {"enabled": true}})", "fp16.loss_scale"},
        rejected_case{R"(!{"fp16": {"enabled": true, "loss_scale": 0}})", "fp16.loss_scale"},
        rejected_case{R"(!{"fp16": {"enabled": true, "loss_scale": -2}})", "fp16.loss_scale"},
        rejected_case{R"(!{"fp16": {"enabled": "auto", "loss_scale": 2}})", "fp16.enabled"},
        rejected_case{R"(!{"fp16": {"enabled": true, "loss_scale": 8}, "bf16": {"enabled": true}})",
                      "bf16.enabled"}),
    rejected_case_name);

TEST(config, validate_names_the_key_of_a_bad_struct_field) {
  const auto with = [](auto edit) {
    config c;
    edit(c);
    return c;
  };
  expect_invalid(with([](config& c) { c.topk_ratio = std::nan(""); }), ZF_KEY("topk_ratio"));
  expect_invalid(with([](config& c) { c.select_interval = -2; }), ZF_KEY("select_interval"));
  expect_invalid(with([](config& c) { c.update_interval = -1; }), ZF_KEY("update_interval"));
  expect_invalid(with([](config& c) { c.full_warm_up_rounds = -1; }), ZF_KEY("full_warm_up_rounds"));
  expect_invalid(with([](config& c) { c.select = zenflow::select_strategy::epoch; }),
                 ZF_KEY("select_strategy"));
  expect_invalid(with([](config& c) { c.adam.eps = 0.0f; }), "optimizer.params.eps");
  expect_invalid(with([](config& c) { c.adam.lr = -1.0f; }), "optimizer.params.lr");
  expect_invalid(with([](config& c) { c.adam.beta1 = 1.0f; }), "optimizer.params.betas");
  expect_invalid(with([](config& c) { c.adam.beta2 = std::nanf(""); }), "optimizer.params.betas");
  expect_invalid(with([](config& c) { c.adam.weight_decay = -1.0f; }), "optimizer.params.weight_decay");
  expect_invalid(with([](config& c) { c.gradient_clipping = std::numeric_limits<float>::infinity(); }),
                 "gradient_clipping");
  expect_invalid(with([](config& c) { c.loss_scale = 0.0f; }), "fp16.loss_scale");
  expect_invalid(with([](config& c) { c.topk_ratio = -0.5; }), ZF_KEY("topk_ratio"));
  expect_invalid(with([](config& c) { c.auto_ratio = 1.5; }), ZF_KEY("auto_ratio"));
  expect_invalid(with([](config& c) { c.pt_reserved_cores_perc = 1.0 + 1e-9; }),
                 ZF_KEY("pt_reserved_cores_perc"));
  expect_invalid(with([](config& c) { c.ring_slots = 1; }), ZF_EXT("ring_slots"));
  expect_invalid(with([](config& c) { c.ring_slot_bytes = 3000; }), ZF_EXT("ring_slot_bytes"));
  expect_invalid(with([](config& c) { c.host_threads = 9999; }), ZF_EXT("host_threads"));
  // Pinned, a share of 1 leaves the host threads no core on any machine (unpinned it is fine).
  expect_invalid(with([](config& c) {
                   c.pin_host_threads = true;
                   c.pt_reserved_cores_perc = 1.0;
                 }),
                 ZF_KEY("pt_reserved_cores_perc"));
  expect_invalid(with([](config& c) { c.mode = static_cast<zenflow::optimizer_mode>(7); }), ZF_EXT("mode"));
  expect_invalid(with([](config& c) { c.importance = static_cast<zenflow::channel_norm>(9); }),
                 ZF_EXT("importance"));
  expect_invalid(with([](config& c) { c.max_update_interval = 0; }), ZF_EXT("max_update_interval"));
  expect_invalid(with([](config& c) { c.accumulate = static_cast<zenflow::accumulation_site>(5); }),
                 ZF_EXT("accumulate"));
}

} // namespace
