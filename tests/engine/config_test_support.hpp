// Helpers of the zenflow::config tests (config_test.cpp, config_schedule_and_warnings_test.cpp): the log
// capture, DeepSpeed's tutorial block, JSON builders and the checks that a value is rejected
// with an error naming its key.
#pragma once

#include <exception>
#include <string>

#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>

#include "support/log_capture.hpp"

namespace zf_config_test {

using zenflow::config;

/// The config reader's log messages ("zenflow::config: ...").
struct log_capture : zf_test::log_capture {
  log_capture() : zf_test::log_capture("zenflow::config") {}
};

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

inline std::string with_zenflow(const std::string& block) {
  return R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": )" + block + "}}";
}

/// Parsing `json` must throw zenflow::invalid_argument whose message names `key` (and nothing
/// else may escape: no nlohmann exception, no config).
inline void expect_rejected(const std::string& json, const std::string& key) {
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

inline void expect_invalid(const config& c, const std::string& key) {
  try {
    c.validate();
    ADD_FAILURE() << "validate() accepted, expected an error naming '" << key << "'";
  } catch (const zenflow::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + key + "'"), std::string::npos) << what;
  }
}

inline std::string with_zenflow_and_ext(const std::string& block, const std::string& ext) {
  return R"({"zero_optimization": {"zenflow": )" + block + R"(}, "zenflow_ext": )" + ext + "}";
}

} // namespace zf_config_test
