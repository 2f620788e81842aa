// zenflow::config: DeepSpeed JSON parsing, validation (every rejected value names its key),
// and the schedule helpers the engine and the reference share.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/config.hpp>

namespace {

using zenflow::config;

// DeepSpeed's ZenFlow tutorial block, as users have it in their files.
constexpr const char* deepspeed_example = R"({
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "zenflow": {
      "topk_ratio": 0.05,
      "select_strategy": "step",
      "select_interval": 4,
      "update_interval": 4,
      "full_warm_up_rounds": 0,
      "overlap_step": true
    }
  },
  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "gradient_clipping": 1.0
})";

std::string with_zenflow(const std::string& block) {
  return R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": )" + block + "}}";
}

/// Parsing `json` must throw zenflow::invalid_argument whose message names `key` (and nothing
/// else may escape: no nlohmann exception, no config).
void expect_rejected(const std::string& json, const std::string& key) {
  SCOPED_TRACE(json);
  try {
    (void)config::from_deepspeed_json_string(json);
    ADD_FAILURE() << "accepted, expected an error naming '" << key << "'";
  } catch (const zenflow::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + key + "'"), std::string::npos) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

void expect_invalid(const config& c, const std::string& key) {
  try {
    c.validate();
    ADD_FAILURE() << "validate() accepted, expected an error naming '" << key << "'";
  } catch (const zenflow::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + key + "'"), std::string::npos) << what;
  }
}

TEST(config, default_config_is_valid_and_matches_spec_defaults) {
  const config c;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.mode, zenflow::optimizer_mode::zenflow);
  EXPECT_EQ(c.topk_ratio, 0.1);
  EXPECT_EQ(c.select, zenflow::select_strategy::automatic);
  EXPECT_EQ(c.select_interval, 0);
  EXPECT_EQ(c.update_interval, 0);
  EXPECT_TRUE(c.auto_update());
  EXPECT_TRUE(c.overlap_step);
  EXPECT_EQ(c.auto_ratio, 0.99);
  EXPECT_EQ(c.pt_reserved_cores_perc, 0.5);
  EXPECT_EQ(c.host_lr_scale, zenflow::host_lr_scaling::linear);
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
  EXPECT_EQ(c.max_update_interval, 16);
}

TEST(config, auto_values_and_every_extension_key_parse) {
  const config c = config::from_deepspeed_json_string(with_zenflow(R"({
    "topk_ratio": 1, "select_strategy": "auto", "select_interval": "auto", "update_interval": "auto",
    "full_warm_up_rounds": 7, "overlap_step": false, "offload": true, "auto_ratio": 0.5,
    "pt_reserved_cores_perc": 0.25, "steps_per_epoch": 50, "host_lr_scale": "sqrt",
    "max_update_interval": 9, "min_update_interval": 2, "importance": "l1", "mode": "offload_sync",
    "upload": "chunk_ring", "ring_slot_bytes": 65536, "ring_slots": 3, "host_threads": 5})"));
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
  EXPECT_EQ(c.ring_slot_bytes, 65536);
  EXPECT_EQ(c.ring_slots, 3);
  EXPECT_EQ(c.host_threads, 5u);
  EXPECT_EQ(c.select_interval_steps(), 50); // auto: once per epoch
}

TEST(config, range_boundaries_are_accepted) {
  const config lo = config::from_deepspeed_json_string(with_zenflow(R"({
    "topk_ratio": 1e-9, "select_strategy": "step", "select_interval": 3, "update_interval": 3,
    "full_warm_up_rounds": 0, "auto_ratio": 1, "pt_reserved_cores_perc": 0, "min_update_interval": 5,
    "max_update_interval": 5, "ring_slot_bytes": 4096, "ring_slots": 2, "host_threads": 0})"));
  EXPECT_EQ(lo.topk_ratio, 1e-9);
  EXPECT_EQ(lo.topk(10), 1); // at least one channel
  EXPECT_EQ(lo.select_interval, lo.update_interval);
  EXPECT_EQ(lo.auto_ratio, 1.0);
  EXPECT_EQ(lo.ring_slots, 2);
  const config hi = config::from_deepspeed_json_string(with_zenflow(R"({
    "topk_ratio": 1, "select_strategy": "step", "select_interval": 2147483647, "update_interval": 2147483647,
    "full_warm_up_rounds": 2147483647, "pt_reserved_cores_perc": 0.999, "ring_slot_bytes": 1073741824,
    "ring_slots": 1024, "host_threads": 4096})"));
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

TEST(config, empty_zenflow_block_gives_the_defaults) {
  const config c = config::from_deepspeed_json_string(with_zenflow("{}"));
  const config d;
  EXPECT_EQ(c.to_deepspeed_json(), d.to_deepspeed_json());
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
  c.adam.lr = 3e-4f;
  c.adam.beta1 = 0.8f;
  c.adam.beta2 = 0.95f;
  c.adam.eps = 1e-6f;
  c.adam.weight_decay = 0.1f;
  c.adam.decoupled = false;
  c.gradient_clipping = 0.5f;
  c.loss_scale = 1024.0f;
  c.upload = zenflow::upload_policy::chunk_ring;
  c.ring_slot_bytes = 1 << 16;
  c.ring_slots = 4;
  c.host_threads = 3;
  const nlohmann::json j = c.to_deepspeed_json();
  const config r = config::from_deepspeed_json(j);
  EXPECT_EQ(r.to_deepspeed_json(), j);
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
        rejected_case{R"({"topk_ratio": 0})", ZF_KEY("topk_ratio")},
        rejected_case{R"({"topk_ratio": -0.1})", ZF_KEY("topk_ratio")},
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
        rejected_case{R"({"update_intervall": 4})", ZF_KEY("update_intervall")},
        rejected_case{R"({"full_warm_up_rounds": -1})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"full_warm_up_rounds": 1.5})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"full_warm_up_rounds": "0"})", ZF_KEY("full_warm_up_rounds")},
        rejected_case{R"({"overlap_step": "true"})", ZF_KEY("overlap_step")},
        rejected_case{R"({"overlap_step": 1})", ZF_KEY("overlap_step")},
        rejected_case{R"({"offload": "yes"})", ZF_KEY("offload")},
        rejected_case{R"({"auto_ratio": 0})", ZF_KEY("auto_ratio")},
        rejected_case{R"({"auto_ratio": 1.01})", ZF_KEY("auto_ratio")},
        rejected_case{R"({"pt_reserved_cores_perc": 1.0})", ZF_KEY("pt_reserved_cores_perc")},
        rejected_case{R"({"pt_reserved_cores_perc": -0.1})", ZF_KEY("pt_reserved_cores_perc")},
        rejected_case{R"({"host_lr_scale": "quadratic"})", ZF_KEY("host_lr_scale")},
        rejected_case{R"({"host_lr_scale": 2})", ZF_KEY("host_lr_scale")},
        rejected_case{R"({"max_update_interval": 0})", ZF_KEY("max_update_interval")},
        rejected_case{R"({"min_update_interval": 5, "max_update_interval": 4})",
                      ZF_KEY("max_update_interval")},
        rejected_case{R"({"min_update_interval": 0})", ZF_KEY("min_update_interval")},
        rejected_case{R"({"steps_per_epoch": 0})", ZF_KEY("steps_per_epoch")},
        rejected_case{R"({"steps_per_epoch": -3})", ZF_KEY("steps_per_epoch")},
        rejected_case{R"({"importance": "l2"})", ZF_KEY("importance")},
        rejected_case{R"({"mode": "cpu"})", ZF_KEY("mode")},
        rejected_case{R"({"upload": "ring"})", ZF_KEY("upload")},
        rejected_case{R"({"ring_slot_bytes": 100})", ZF_KEY("ring_slot_bytes")},
        rejected_case{R"({"ring_slot_bytes": 4097})", ZF_KEY("ring_slot_bytes")},
        rejected_case{R"({"ring_slot_bytes": 2147483648})", ZF_KEY("ring_slot_bytes")},
        rejected_case{R"({"ring_slots": 1})", ZF_KEY("ring_slots")},
        rejected_case{R"({"ring_slots": 2000})", ZF_KEY("ring_slots")},
        rejected_case{R"({"host_threads": -1})", ZF_KEY("host_threads")},
        rejected_case{R"({"host_threads": 5000})", ZF_KEY("host_threads")},
        rejected_case{"true", "zero_optimization.zenflow"},
        rejected_case{"[]", "zero_optimization.zenflow"}),
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
  expect_invalid(with([](config& c) { c.ring_slots = 1; }), ZF_KEY("ring_slots"));
  expect_invalid(with([](config& c) { c.ring_slot_bytes = 3000; }), ZF_KEY("ring_slot_bytes"));
  expect_invalid(with([](config& c) { c.host_threads = 9999; }), ZF_KEY("host_threads"));
  expect_invalid(with([](config& c) { c.mode = static_cast<zenflow::optimizer_mode>(7); }), ZF_KEY("mode"));
  expect_invalid(with([](config& c) { c.importance = static_cast<zenflow::channel_norm>(9); }),
                 ZF_KEY("importance"));
}

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

TEST(config, topk_is_floor_of_ratio_times_channels_at_least_one) {
  // Against exact integer arithmetic: ratio = p / 1000.
  config c;
  for (int p = 1; p <= 1000; p += 7) {
    c.topk_ratio = p / 1000.0;
    for (std::int64_t ch : {1, 2, 3, 7, 10, 100, 1000, 4096, 12345}) {
      const std::int64_t exact = std::max<std::int64_t>(1, (p * ch) / 1000);
      ASSERT_EQ(c.topk(ch), exact) << "ratio " << c.topk_ratio << " channels " << ch;
    }
  }
  c.topk_ratio = 0.57;
  EXPECT_EQ(c.topk(100), 57); // 0.57 * 100 is 56.99999999999999 in double
  c.topk_ratio = 1.0;
  EXPECT_EQ(c.topk(77), 77);
  EXPECT_EQ(c.topk(0), 0);
}

TEST(config, host_threads_from_reserved_share) {
  config c;
  EXPECT_EQ(c.resolved_host_threads(16), 8u);
  c.pt_reserved_cores_perc = 0.9;
  EXPECT_EQ(c.resolved_host_threads(16), 1u);
  EXPECT_EQ(c.resolved_host_threads(2), 1u);
  c.pt_reserved_cores_perc = 0.0;
  EXPECT_EQ(c.resolved_host_threads(12), 12u);
  c.host_threads = 3;
  EXPECT_EQ(c.resolved_host_threads(12), 3u);
}

} // namespace
