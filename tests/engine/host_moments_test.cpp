// host_moments "bf16" and "int8" (zenflow_ext.host_moments): the key (read, written back,
// described, bad values named), the host bytes they save (counted from the engine's memory report
// against the registered sizes), and their results independent of the host thread count. Their
// values against the float64 reference: reference_cases.hpp ("bf16_host_moments_...",
// "int8_host_moments_..."); save/load: resume_cases.hpp and engine_checkpoint_test.cpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zenflow/engine/config.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "reference_cases.hpp"

namespace {

using namespace zf_engine_test;
using zenflow::moment_precision;

TEST(host_moments_config, default_is_bf16_and_fp32_is_read_written_and_described) {
  // bf16 since 2026-11-29 (docs/defaults.md): a C++ config and a DeepSpeed file alike.
  EXPECT_EQ(zenflow::config{}.host_moments, moment_precision::bf16);
  EXPECT_EQ(zenflow::config::deepspeed_defaults().host_moments, moment_precision::bf16);
  zenflow::config_sources src;
  const auto c = zenflow::config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1}},
          "zenflow_ext": {"host_moments": "fp32"}})",
      {}, &src);
  EXPECT_EQ(c.host_moments, moment_precision::fp32);
  const nlohmann::json j = c.to_deepspeed_json();
  EXPECT_EQ(j["zenflow_ext"]["host_moments"], "fp32");
  EXPECT_EQ(zenflow::config::from_deepspeed_json(j).host_moments, moment_precision::fp32);
  const std::string text = c.describe(&src);
  EXPECT_NE(text.find("host_moments"), std::string::npos) << text;
  EXPECT_NE(text.find("fp32"), std::string::npos) << text;
  EXPECT_NE(text.find("zenflow_ext.host_moments"), std::string::npos) << text; // where it came from
}

TEST(host_moments_config, int8_is_read_written_and_described) {
  zenflow::config_sources src;
  const auto c = zenflow::config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1}},
          "zenflow_ext": {"host_moments": "int8"}})",
      {}, &src);
  EXPECT_EQ(c.host_moments, moment_precision::int8);
  const nlohmann::json j = c.to_deepspeed_json();
  EXPECT_EQ(j["zenflow_ext"]["host_moments"], "int8");
  EXPECT_EQ(zenflow::config::from_deepspeed_json(j).host_moments, moment_precision::int8);
  const std::string text = c.describe(&src);
  EXPECT_NE(text.find("int8"), std::string::npos) << text;
  EXPECT_NE(text.find("zenflow_ext.host_moments"), std::string::npos) << text;
}

TEST(host_moments_config, bad_values_are_rejected_by_name) {
  for (const char* v : {R"("fp16")", R"("BF16")", R"("INT8")", R"("int4")", "16", "8", "true", "null"}) {
    SCOPED_TRACE(v);
    expect_invalid(
        [&] {
          (void)zenflow::config::from_deepspeed_json_string(
              std::string(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {}},
                             "zenflow_ext": {"host_moments": )") +
              v + "}}");
        },
        "zenflow_ext.host_moments");
  }
  auto c = small_config();
  c.host_moments = static_cast<moment_precision>(7);
  expect_invalid([&] { c.validate(); }, "zenflow_ext.host_moments");
}

TEST(host_accumulators_config, read_written_described_and_checked_by_name) {
  EXPECT_EQ(zenflow::config{}.host_accumulators, 1);
  zenflow::config_sources src;
  const auto c = zenflow::config::from_deepspeed_json_string(
      R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1}},
          "zenflow_ext": {"host_accumulators": 2}})",
      {}, &src);
  EXPECT_EQ(c.host_accumulators, 2);
  const nlohmann::json j = c.to_deepspeed_json();
  EXPECT_EQ(j["zenflow_ext"]["host_accumulators"], 2);
  EXPECT_EQ(zenflow::config::from_deepspeed_json(j).host_accumulators, 2);
  const std::string text = c.describe(&src);
  EXPECT_NE(text.find("host_accumulators"), std::string::npos) << text;
  EXPECT_NE(text.find("zenflow_ext.host_accumulators"), std::string::npos) << text;
  for (const char* v : {"0", "3", "1.5", R"("2")", "true", "null"}) {
    SCOPED_TRACE(v);
    expect_invalid(
        [&] {
          (void)zenflow::config::from_deepspeed_json_string(
              std::string(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {}},
                             "zenflow_ext": {"host_accumulators": )") +
              v + "}}");
        },
        "zenflow_ext.host_accumulators");
  }
  auto bad = small_config();
  bad.host_accumulators = 3;
  expect_invalid([&] { bad.validate(); }, "zenflow_ext.host_accumulators");
}

/// The engine's memory report against the sizes registered: every host-side parameter holds an
/// fp32 master, m and v, and an int32 count per channel; bf16 moments take 2 bytes each, not 4.
TEST(host_moments_engine, host_state_is_8_bytes_per_parameter_instead_of_12) {
  for (const auto mode : {zenflow::optimizer_mode::zenflow, zenflow::optimizer_mode::offload_sync}) {
    std::size_t state[2] = {0, 0};
    std::size_t elements = 0, channels = 0;
    for (const auto mp : {moment_precision::fp32, moment_precision::bf16}) {
      auto cfg = small_config();
      cfg.mode = mode;
      cfg.host_moments = mp;
      model<float> m(kShapes, 5);
      host_driver<float> d(m);
      auto eng = d.make_engine(cfg);
      elements = channels = 0;
      for (std::size_t p = 0; p < kShapes.size(); ++p) {
        (void)d.add(*eng, p);
        // zenflow: matrices have host state, vectors live on the device; offload_sync: everything.
        if (kShapes[p].matrix || mode == zenflow::optimizer_mode::offload_sync) {
          elements += static_cast<std::size_t>(kShapes[p].channels * kShapes[p].len);
          channels += static_cast<std::size_t>(kShapes[p].channels);
        }
      }
      d.initialize(*eng);
      state[mp == moment_precision::bf16 ? 1 : 0] = eng->stats().memory.host_state;
    }
    EXPECT_EQ(state[0], elements * 12 + channels * 4);
    EXPECT_EQ(state[1], elements * 8 + channels * 4);
  }
}

/// int8: a byte per moment and two fp32 scales per block of 64 of each row (rows of 150: three
/// blocks, the last partial; rows of 5: one).
TEST(host_moments_engine, int8_host_state_is_6_bytes_per_parameter_and_the_block_scales) {
  const std::vector<shape> shapes = {{true, 40, 150}, {false, 1, 5}, {true, 13, 16}, {false, 1, 70}};
  for (const auto mode : {zenflow::optimizer_mode::zenflow, zenflow::optimizer_mode::offload_sync}) {
    auto cfg = small_config();
    cfg.mode = mode;
    cfg.host_moments = moment_precision::int8;
    model<float> m(shapes, 5);
    host_driver<float> d(m);
    auto eng = d.make_engine(cfg);
    std::size_t want = 0;
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      (void)d.add(*eng, p);
      if (shapes[p].matrix || mode == zenflow::optimizer_mode::offload_sync) {
        const auto rows = static_cast<std::size_t>(shapes[p].channels);
        const auto len = static_cast<std::size_t>(shapes[p].len);
        want += rows * (6 * len + 8 * ((len + 63) / 64) + 4);
      }
    }
    d.initialize(*eng);
    EXPECT_EQ(eng->stats().memory.host_state, want);
  }
}

/// Same inputs, same bits whatever the host threads: the stochastic rounding's bits come from
/// (element, count, moment), never from which thread rounded.
TEST(host_moments_engine, bit_identical_across_host_thread_counts) {
  for (const auto mode : {zenflow::optimizer_mode::zenflow, zenflow::optimizer_mode::offload_sync}) {
    auto one = small_config(1);
    one.mode = mode;
    one.host_moments = moment_precision::bf16;
    one.full_warm_up_rounds = 2;
    auto three = one;
    three.host_threads = 3;
    expect_identical<host_driver, zenflow::bfloat16>(one, three, 24, zf_test::base_seed() + 40);
    expect_identical<emulated_driver, float>(one, three, 24, zf_test::base_seed() + 41);
    one.host_moments = moment_precision::int8;
    three.host_moments = moment_precision::int8;
    auto two = one;
    two.host_threads = 2;
    expect_identical<host_driver, zenflow::bfloat16>(one, three, 24, zf_test::base_seed() + 42);
    expect_identical<emulated_driver, float>(one, two, 24, zf_test::base_seed() + 43);
  }
}

/// The option is in effect: an fp32 and a bf16 run part ways (their host moments differ), and the
/// bf16 run's host moments are bf16 values while the fp32 run's are not all.
TEST(host_moments_engine, bf16_moments_are_bf16_values_and_change_the_run) {
  auto f32 = small_config();
  auto b16 = f32;
  b16.host_moments = moment_precision::bf16;
  model<float> ma(kShapes, 9), mb(kShapes, 9);
  host_driver<float> da(ma), db(mb);
  auto ea = da.make_engine(f32), eb = db.make_engine(b16);
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    (void)da.add(*ea, p);
    (void)db.add(*eb, p);
  }
  da.initialize(*ea);
  db.initialize(*eb);
  for (int t = 0; t < 12; ++t) {
    ma.next_grads();
    mb.g = ma.g;
    (void)da.step(*ea, 1e-2f);
    (void)db.step(*eb, 1e-2f);
  }
  da.flush(*ea);
  db.flush(*eb);
  std::size_t not_bf16_a = 0, not_bf16_b = 0;
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    if (!kShapes[p].matrix) {
      continue;
    }
    const zenflow::param_id id{static_cast<std::int32_t>(p)};
    const auto sel = eb->selected(id);
    const auto sa = ea->state(id), sb = eb->state(id);
    for (std::size_t e = 0; e < sb.v.size(); ++e) {
      const auto c = static_cast<std::int32_t>(e / static_cast<std::size_t>(kShapes[p].len));
      if (!std::binary_search(sel.begin(), sel.end(), c)) {
        not_bf16_a += (zenflow::bit_pattern(sa.v[e]) & 0xffffu) != 0 ? 1 : 0;
        not_bf16_b += (zenflow::bit_pattern(sb.v[e]) & 0xffffu) != 0 ? 1 : 0;
      }
    }
  }
  EXPECT_GT(not_bf16_a, 100u);
  EXPECT_EQ(not_bf16_b, 0u);
  EXPECT_NE(ma.w, mb.w);
}

} // namespace
