// cpu tests of the engine's user-facing API on the host backend: parameter groups (options at
// registration and the JSON param_groups), the overflow-safe global norm, registration mistakes,
// and what destroying an engine with updates not applied does. The test bodies shared with the
// gpu tests are in engine_cases.hpp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/log.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"

namespace {

using zf_engine_test::emulated_driver;
using zf_engine_test::host_driver;
using zf_engine_test::kShapes;
using zf_engine_test::model;
using zf_engine_test::overflow_kind;
using zf_engine_test::shape;
using zf_engine_test::small_config;
using host_engine = zenflow::engine<zenflow::host_backend>;

using zf_engine_test::expect_invalid;

// ---- parameter groups ----------------------------------------------------------------------------

template <template <class> class Driver>
void per_parameter_options_case() {
  int i = 0;
  for (const auto& [name, cfg] : zf_engine_test::all_modes()) {
    SCOPED_TRACE(name);
    EXPECT_LE((zf_engine_test::param_groups_against_reference<Driver, zenflow::bfloat16>(
                  cfg, 40, zf_test::base_seed() + 100 + static_cast<std::uint64_t>(i))),
              1.01);
    EXPECT_LT((zf_engine_test::param_groups_against_reference<Driver, float>(
                  cfg, 40, zf_test::base_seed() + 200 + static_cast<std::uint64_t>(i))),
              64.0);
    ++i;
  }
}

TEST(engine_param_groups, per_parameter_options_match_the_reference_in_every_mode) {
  per_parameter_options_case<host_driver>();
}

TEST(engine_param_groups, per_parameter_options_match_the_reference_in_every_mode_on_the_emulated_backend) {
  per_parameter_options_case<emulated_driver>();
}

template <template <class> class Driver>
void options_equal_global_case() {
  for (const auto& [name, cfg] : zf_engine_test::all_modes()) {
    SCOPED_TRACE(name);
    zf_engine_test::expect_options_equal_global_config<Driver, zenflow::bfloat16>(
        cfg, {true, 24, 8}, 0.5f, 0.2f, 30, zf_test::base_seed() + 300);
    zf_engine_test::expect_options_equal_global_config<Driver, float>(cfg, {true, 13, 16}, 3.0f, 0.0f, 30,
                                                                      zf_test::base_seed() + 301);
    zf_engine_test::expect_options_equal_global_config<Driver, zenflow::half>(
        cfg, {false, 1, 7}, 0.25f, 0.05f, 30, zf_test::base_seed() + 302);
  }
}

TEST(engine_param_groups, options_are_bit_identical_to_the_same_values_as_global_config) {
  options_equal_global_case<host_driver>();
}

TEST(engine_param_groups,
     options_are_bit_identical_to_the_same_values_as_global_config_on_the_emulated_backend) {
  options_equal_global_case<emulated_driver>();
}

TEST(engine_param_groups, zero_lr_scale_freezes_a_parameter_and_its_neighbours_still_train) {
  auto cfg = small_config();
  model<float> m(kShapes, zf_test::base_seed() + 310);
  host_driver<float> d(m);
  host_engine eng(cfg);
  (void)d.add(eng, 0, {.lr_scale = 0.0f, .weight_decay = 0.0f});
  for (std::size_t p = 1; p < kShapes.size(); ++p) {
    (void)d.add(eng, p);
  }
  d.initialize(eng);
  const auto w0 = m.w;
  for (int t = 0; t < 20; ++t) {
    m.next_grads();
    (void)d.step(eng, 1e-2f);
  }
  eng.flush();
  EXPECT_TRUE(zf_engine_test::same_bits(w0[0], m.w[0])); // lr 0 and no decay: not one bit moves
  EXPECT_FALSE(zf_engine_test::same_bits(w0[2], m.w[2]));
}

TEST(engine_param_groups, json_groups_apply_by_name_first_match_wins_options_win) {
  const auto cfg = zenflow::config::from_deepspeed_json_string(R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
    "zero_optimization": {"offload_optimizer": {"device": "cpu"}, "zenflow": {
      "topk_ratio": 0.25, "select_strategy": "step", "select_interval": 8, "update_interval": 2}},
    "zenflow_ext": {"param_groups": [
        {"match": "*.bias", "weight_decay": 0.0},
        {"match": "norm", "weight_decay": 0.0, "lr_scale": 0.5},
        {"match": "layer?.weight", "lr_scale": 2.0},
        {"match": "*", "lr_scale": 0.75}
      ]}})");
  ASSERT_EQ(cfg.param_groups.size(), 4u);
  // Round trip through the writer.
  const auto again = zenflow::config::from_deepspeed_json(cfg.to_deepspeed_json());
  ASSERT_EQ(again.param_groups.size(), 4u);
  EXPECT_EQ(again.param_groups[2].match, "layer?.weight");
  EXPECT_EQ(again.param_groups[1].lr_scale, 0.5f);
  EXPECT_FALSE(again.param_groups[0].lr_scale.has_value());

  std::vector<float> w(6 * 64), g(6 * 64);
  host_engine eng(cfg);
  const auto bias = eng.add_vector(w.data(), g.data(), 64, {.name = "layer1.bias"});
  const auto norm = eng.add_vector(w.data() + 64, g.data() + 64, 64, {.name = "final_norm.scale"});
  const auto weight = eng.add_matrix(w.data() + 128, g.data() + 128, 8, 8, {.name = "layer3.weight"});
  const auto other = eng.add_matrix(w.data() + 192, g.data() + 192, 8, 8, {.name = "layer12.weight"});
  const auto unnamed = eng.add_vector(w.data() + 256, g.data() + 256, 64);
  const auto explicit_wins =
      eng.add_vector(w.data() + 320, g.data() + 320, 64, {.lr_scale = 3.0f, .name = "head.bias"});
  const auto s = [&](zenflow::param_id id) { return eng.settings(id); };
  EXPECT_EQ(s(bias).weight_decay, 0.0f); // group 0
  EXPECT_EQ(s(bias).lr_scale, 1.0f);     // group 0 leaves it unset: the default, not group 3's
  EXPECT_EQ(s(norm).weight_decay, 0.0f); // group 1 (substring)
  EXPECT_EQ(s(norm).lr_scale, 0.5f);
  EXPECT_EQ(s(weight).lr_scale, 2.0f); // group 2 (glob with '?')
  EXPECT_EQ(s(weight).weight_decay, 0.1f);
  EXPECT_EQ(s(other).lr_scale, 0.75f);            // "layer12.weight": '?' is one character: group 3
  EXPECT_EQ(s(unnamed).lr_scale, 0.75f);          // '*' matches the empty name
  EXPECT_EQ(s(explicit_wins).lr_scale, 3.0f);     // the registration's value wins...
  EXPECT_EQ(s(explicit_wins).weight_decay, 0.0f); // ...the group supplies what it left unset
  EXPECT_EQ(s(explicit_wins).name, "head.bias");
}

TEST(engine_param_groups, documented_example) {
  // docs/engine.md "Parameter groups" shows this block.
  constexpr std::int64_t in = 16, out = 8, vocab = 32, dim = 8;
  std::vector<float> w(in * out), w_grad(in * out), b(out), b_grad(out), emb(vocab * dim),
      emb_grad(vocab * dim);
  auto cfg = small_config();
  cfg.adam.weight_decay = 0.01f;
  zenflow::engine<zenflow::host_backend> zf(cfg);
  // example-begin param-groups
  const auto w_id = zf.add_matrix(w.data(), w_grad.data(), in, out, {.name = "layer3.mlp.weight"});
  const auto b_id = zf.add_vector(b.data(), b_grad.data(), out, {.weight_decay = 0.0f}); // the common recipe
  const auto e_id =
      zf.add_matrix(emb.data(), emb_grad.data(), vocab, dim, {.lr_scale = 0.1f, .name = "embed"});
  // zf.settings(e_id): {name "embed", lr_scale 0.1, weight_decay = cfg.adam.weight_decay}
  // example-end param-groups
  EXPECT_EQ(zf.settings(w_id).lr_scale, 1.0f);
  EXPECT_EQ(zf.settings(w_id).weight_decay, 0.01f);
  EXPECT_EQ(zf.settings(b_id).weight_decay, 0.0f);
  EXPECT_EQ(zf.settings(e_id).lr_scale, 0.1f);
  EXPECT_EQ(zf.settings(e_id).weight_decay, 0.01f);
  EXPECT_EQ(zf.settings(e_id).name, "embed");
}

TEST(engine_param_groups, name_matching_agrees_with_std_regex_on_random_patterns) {
  // Independent reference: the glob rewritten as an ECMAScript regex over the whole name, the
  // substring rule as regex_search. Small alphabets so that matches and near-misses are common.
  std::mt19937_64 gen(zf_test::base_seed() + 900);
  const std::string pattern_chars = "ab.*?";
  const std::string name_chars = "ab.";
  std::uniform_int_distribution<int> len(0, 7);
  std::int64_t matched = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string pattern(static_cast<std::size_t>(len(gen)), ' ');
    std::string name(static_cast<std::size_t>(len(gen)), ' ');
    for (char& c : pattern) {
      c = pattern_chars[gen() % pattern_chars.size()];
    }
    for (char& c : name) {
      c = name_chars[gen() % name_chars.size()];
    }
    std::string re;
    for (const char c : pattern) {
      re += c == '*'   ? std::string(".*")
            : c == '?' ? std::string(".")
            : c == '.' ? std::string("\\.")
                       : std::string(1, c);
    }
    const bool glob = pattern.find_first_of("*?") != std::string::npos;
    const bool want = glob ? std::regex_match(name, std::regex(re)) : std::regex_search(name, std::regex(re));
    ASSERT_EQ(zenflow::detail::param_name_matches(pattern, name), want)
        << "'" << pattern << "' vs '" << name << "'";
    matched += want ? 1 : 0;
  }
  EXPECT_GT(matched, 2000);
  EXPECT_LT(matched, 18000);
}

TEST(engine_param_groups, bad_values_are_rejected_by_name_and_register_nothing) {
  const auto json = [](const std::string& groups) {
    return R"({"zenflow_ext": {"param_groups": )" + groups + "}}";
  };
  const std::string key = "zenflow_ext.param_groups";
  expect_invalid([&] { (void)zenflow::config::from_deepspeed_json_string(json(R"({"match": "x"})")); }, key);
  expect_invalid([&] { (void)zenflow::config::from_deepspeed_json_string(json(R"([3])")); }, key + "[0]");
  expect_invalid(
      [&] {
        (void)zenflow::config::from_deepspeed_json_string(
            json(R"([{"match": "a"}, {"match": "b", "lr": 1}])"));
      },
      key + "[1].lr' is not a known key");
  expect_invalid([&] { (void)zenflow::config::from_deepspeed_json_string(json(R"([{"lr_scale": 1}])")); },
                 key + "[0].match' is required");
  expect_invalid([&] { (void)zenflow::config::from_deepspeed_json_string(json(R"([{"match": ""}])")); },
                 key + "[0].match");
  expect_invalid(
      [&] {
        (void)zenflow::config::from_deepspeed_json_string(json(R"([{"match": "a", "lr_scale": -0.5}])"));
      },
      key + "[0].lr_scale");
  expect_invalid(
      [&] {
        (void)zenflow::config::from_deepspeed_json_string(json(R"([{"match": "a", "weight_decay": "0.1"}])"));
      },
      key + "[0].weight_decay");
  expect_invalid(
      [&] {
        (void)zenflow::config::from_deepspeed_json_string(json(R"([{"match": "a", "weight_decay": -1}])"));
      },
      key + "[0].weight_decay");
  auto nan_group = small_config();
  nan_group.param_groups.push_back({.match = "a", .weight_decay = NAN});
  expect_invalid([&] { host_engine e(nan_group); }, key + "[0].weight_decay");

  std::vector<float> w(64), g(64);
  host_engine eng(small_config());
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 8, 8, {.lr_scale = -1.0f}); },
                 "'options.lr_scale'");
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data(), 8, 8, {.lr_scale = INFINITY}); },
                 "'options.lr_scale'");
  expect_invalid([&] { (void)eng.add_vector(w.data(), g.data(), 8, {.weight_decay = NAN}); },
                 "'options.weight_decay'");
  expect_invalid([&] { (void)eng.add_vector(w.data(), g.data(), 8, {.weight_decay = -0.1f}); },
                 "'options.weight_decay'");
  EXPECT_EQ(eng.param_count(), 0u);
  (void)eng.add_matrix(w.data(), g.data(), 8, 8, {.lr_scale = 0.5f}); // the same buffers, now valid
  EXPECT_EQ(eng.param_count(), 1u);
}

// ---- overflow-safe global norm -------------------------------------------------------------------

/// The configurations the overflow cases run in: every path a clipped gradient takes.
std::vector<zenflow::config> overflow_modes() {
  std::vector<zenflow::config> out;
  // Zen-auto's fp32 L1 masses are not made overflow-safe (docs/engine.md), nor is host_lr_scale
  // "snr", which reads the same masses: these modes use "linear" (the test is about clipping).
  for (auto [name, cfg] : zf_engine_test::all_modes()) {
    if (!cfg.auto_update()) {
      if (cfg.host_lr_scale == zenflow::host_lr_scaling::snr) {
        cfg.host_lr_scale = zenflow::host_lr_scaling::linear;
      }
      out.push_back(cfg);
    }
  }
  auto warm = small_config();
  warm.full_warm_up_rounds = 12; // the overflow lands in the warm-up
  warm.host_lr_scale = zenflow::host_lr_scaling::linear;
  out.push_back(warm);
  return out;
}

TEST(engine_overflow, issue_reproduction_bf16_64x32_one_element_3e19_is_clipped_not_skipped) {
  // The issue's exact case: one 64 x 32 bf16 matrix, clipping 1.0, one element 3e19.
  auto cfg = small_config();
  cfg.gradient_clipping = 1.0f;
  model<zenflow::bfloat16> m({{true, 64, 32}}, zf_test::base_seed() + 400);
  host_engine eng(cfg);
  zf_test::zenflow_reference ref(cfg);
  m.add_to_reference(ref);
  (void)eng.add_matrix(m.w[0].data(), m.g[0].data(), 64, 32);
  eng.initialize();
  for (int t = 0; t < 12; ++t) {
    m.next_grads();
    if (t == 4) {
      m.g[0][100] = zenflow::from_float<zenflow::bfloat16>(3e19f);
    }
    const auto rep = eng.step(1e-2f);
    ref.step(m.grads_as_float(), 1e-2);
    EXPECT_FALSE(rep.skipped) << "step " << t;
  }
  eng.flush();
  ref.flush();
  EXPECT_EQ(eng.stats().skipped_steps, 0);
  EXPECT_LE(zf_engine_test::max_weight_ulps(m, ref), 1.01);
}

template <template <class> class Driver>
void overflow_case() {
  for (const auto kind :
       {overflow_kind::one_element, overflow_kind::near_flt_max, overflow_kind::channel_aggregate,
        overflow_kind::tensor_aggregate, overflow_kind::across_tensors}) {
    int i = 0;
    for (const auto& cfg : overflow_modes()) {
      const auto seed = zf_test::base_seed() + 500 + static_cast<std::uint64_t>(i++);
      EXPECT_LE(
          (zf_engine_test::overflow_against_reference<Driver, zenflow::bfloat16>(cfg, kind, 16, 6, seed)),
          1.01);
      EXPECT_LT((zf_engine_test::overflow_against_reference<Driver, float>(cfg, kind, 16, 6, seed)), 64.0);
    }
  }
}

TEST(engine_overflow, finite_gradients_whose_norm_overflows_fp32_are_clipped_by_the_true_norm) {
  overflow_case<host_driver>();
}

TEST(engine_overflow,
     finite_gradients_whose_norm_overflows_fp32_are_clipped_by_the_true_norm_on_the_emulated_backend) {
  overflow_case<emulated_driver>();
}

// Issue 36: overflowing channel scores rank by their fp64 sums, not by index (the issue's
// reproduction first), with overlap and without, host threads 1 and 3, both working types.
template <template <class> class Driver>
void overflow_ranking_case() {
  for (const unsigned threads : {1u, 3u}) {
    for (const bool overlap : {true, false}) {
      SCOPED_TRACE(std::string(overlap ? "overlap" : "no overlap") + ", threads " + std::to_string(threads));
      auto cfg = small_config(threads);
      cfg.overlap_step = overlap;
      zf_engine_test::expect_overflowing_channels_rank_by_fp64<Driver, zenflow::bfloat16>(cfg, 1.01);
      zf_engine_test::expect_overflowing_channels_rank_by_fp64<Driver, float>(cfg, 64.0);
    }
  }
}

TEST(engine_overflow, overflowing_channel_scores_rank_by_their_fp64_sums) {
  overflow_ranking_case<host_driver>();
}

TEST(engine_overflow, overflowing_channel_scores_rank_by_their_fp64_sums_on_the_emulated_backend) {
  overflow_ranking_case<emulated_driver>();
}

TEST(engine_overflow, nan_and_inf_elements_still_skip_the_step) {
  // "Bad" is a property of the elements: a NaN beside an overflowing finite value still skips.
  auto cfg = small_config();
  cfg.gradient_clipping = 1.0f;
  cfg.update_interval = 8; // no window closes (which apply older results) in the poisoned steps
  model<float> m(zf_engine_test::kOverflowShapes, zf_test::base_seed() + 600);
  host_engine eng(cfg);
  for (std::size_t p = 0; p < m.shapes.size(); ++p) {
    (void)host_driver<float>(m).add(eng, p);
  }
  eng.initialize();
  m.next_grads();
  (void)eng.step(1e-2f);
  for (const float poison : {NAN, INFINITY, -INFINITY}) {
    m.next_grads();
    zf_engine_test::poison_with_large_values(m, overflow_kind::tensor_aggregate);
    m.g[1][17] = poison;
    const auto before = m.w;
    const auto rep = eng.step(1e-2f);
    EXPECT_TRUE(rep.skipped);
    for (std::size_t p = 0; p < m.w.size(); ++p) {
      EXPECT_TRUE(zf_engine_test::same_bits(before[p], m.w[p])) << p;
    }
  }
  EXPECT_EQ(eng.stats().skipped_steps, 3);
}

TEST(engine_overflow, step_scalars_clip_by_the_fp64_norm_and_skip_only_on_flags) {
  // finish_step_scalars on its own, against float64 arithmetic written out here.
  for (const double sum_sq : {0.0, 0.25, 1e30, 9e38, 1e60, 1.3e77}) {
    for (const float loss_scale : {1.0f, 64.0f}) {
      float coef = 0.0f;
      std::uint32_t skip = 7;
      zenflow::detail::finish_step_scalars(sum_sq, 0u, loss_scale, 1.0f, &coef, &skip);
      EXPECT_EQ(skip, 0u) << sum_sq;
      const double norm = std::sqrt(sum_sq) / loss_scale;
      const double want = std::min(1.0, 1.0 / (norm + 1e-6)) / loss_scale;
      EXPECT_NEAR(coef, want, want * 1e-6 + 1e-44) << sum_sq; // (denormal coefs near 1.3e77)
      zenflow::detail::finish_step_scalars(sum_sq, 1u, loss_scale, 1.0f, &coef, &skip);
      EXPECT_EQ(skip, 1u);
    }
  }
  float coef = 0.0f;
  std::uint32_t skip = 0;
  zenflow::detail::finish_step_scalars(1e60, 0u, 2.0f, 0.0f, &coef, &skip); // no clipping: unscaling only
  EXPECT_EQ(coef, 0.5f);
  EXPECT_EQ(skip, 0u);
}

// ---- registration mistakes ---------------------------------------------------------------------

TEST(engine_registration, repeated_or_overlapping_buffers_are_rejected_by_name_and_register_nothing) {
  std::vector<float> w(1024), g(1024);
  host_engine eng(small_config());
  const auto a = eng.add_matrix(w.data(), g.data(), 8, 16, {.name = "a"}); // w[0, 128), g[0, 128)
  // weights == grads, and overlapping weights/grads of one parameter.
  expect_invalid([&] { (void)eng.add_matrix(w.data() + 512, w.data() + 512, 4, 4); },
                 "'grads' overlaps 'weights'");
  expect_invalid([&] { (void)eng.add_vector(w.data() + 512, w.data() + 515, 4); },
                 "'grads' overlaps 'weights'");
  // The same weights registered twice, and partial overlaps with a registered parameter.
  expect_invalid([&] { (void)eng.add_matrix(w.data(), g.data() + 512, 8, 16); },
                 "'weights' overlaps the weights of parameter 0 ('a')");
  expect_invalid([&] { (void)eng.add_vector(w.data() + 127, g.data() + 512, 4); },
                 "'weights' overlaps the weights");
  expect_invalid([&] { (void)eng.add_vector(w.data() + 512, g.data() + 120, 16); },
                 "'grads' overlaps the gradients");
  expect_invalid([&] { (void)eng.add_vector(g.data() + 100, w.data() + 512, 4); },
                 "'weights' overlaps the gradients");
  expect_invalid([&] { (void)eng.add_vector(w.data() + 512, w.data() + 64, 4); },
                 "'grads' overlaps the weights");
  // Extents follow ld and the layout: a strided 4 x 8 matrix with ld 16 spans 7 * 16 + 4 floats.
  const auto b = eng.add_matrix(w.data() + 256, g.data() + 256, 4, 8, 16, zenflow::channel_layout::strided);
  expect_invalid([&] { (void)eng.add_vector(w.data() + 256 + 7 * 16 + 3, g.data() + 900, 1); },
                 "'weights' overlaps the weights of parameter 1");
  // Padded contiguous rows: 3 channels of 5 with ld 8 span 2 * 8 + 5 floats.
  (void)eng.add_matrix(w.data() + 400, g.data() + 400, 3, 5, 8);
  expect_invalid([&] { (void)eng.add_vector(w.data() + 420, g.data() + 950, 2); }, "'weights' overlaps");
  EXPECT_EQ(eng.param_count(), 3u);
  // Right next to each other is fine.
  (void)eng.add_vector(w.data() + 256 + 7 * 16 + 4, g.data() + 256 + 7 * 16 + 4, 4);
  (void)eng.add_vector(w.data() + 128, g.data() + 128, 128);
  EXPECT_EQ(eng.param_count(), 5u);
  eng.initialize();
  EXPECT_EQ(eng.settings(a).name, "a");
  EXPECT_EQ(eng.settings(b).name, "");
}

// A GPU faults on an element off its type's boundary: weights or gradients not aligned to their
// element size (pointers made by byte arithmetic) are refused by name, and nothing is registered.
TEST(engine_registration, buffers_off_their_element_boundary_are_rejected_by_name_and_register_nothing) {
  std::vector<float> w(256), g(256);
  std::vector<zenflow::bfloat16> wb(256), gb(256);
  const auto off = [](auto* p, int bytes) {
    return reinterpret_cast<decltype(p)>(reinterpret_cast<unsigned char*>(p) + bytes);
  };
  host_engine eng(small_config());
  expect_invalid([&] { (void)eng.add_matrix(off(w.data(), 2), g.data(), 4, 8); },
                 "'weights' is not aligned to its element size (4 bytes)");
  expect_invalid([&] { (void)eng.add_vector(w.data(), off(g.data(), 1), 8); },
                 "'grads' is not aligned to its element size (4 bytes)");
  expect_invalid([&] { (void)eng.add_matrix(off(wb.data(), 1), gb.data(), 4, 8); },
                 "'weights' is not aligned to its element size (2 bytes)");
  EXPECT_EQ(eng.param_count(), 0u);
  // 2 bytes off a float is a bf16 boundary: fine there; aligned floats are fine.
  (void)eng.add_matrix(off(wb.data(), 2), off(gb.data(), 2), 4, 8);
  (void)eng.add_matrix(w.data() + 1, g.data() + 1, 4, 8);
  EXPECT_EQ(eng.param_count(), 2u);
}

// ---- destruction with updates not applied --------------------------------------------------------

using zf_engine_test::log_capture;

template <template <class> class Driver>
void destruction_case() {
  zf_engine_test::expect_destruction_drops_and_logs<Driver>(small_config());
}

TEST(engine_destruction, a_window_never_applied_is_dropped_with_a_warning_flush_applies_it) {
  destruction_case<host_driver>();
}

TEST(engine_destruction,
     a_window_never_applied_is_dropped_with_a_warning_flush_applies_it_on_the_emulated_backend) {
  destruction_case<emulated_driver>();
}

TEST(engine_destruction, nothing_pending_logs_nothing) {
  auto cfg = small_config();
  cfg.overlap_step = false;
  cfg.update_interval = 2;
  model<float> m(kShapes, zf_test::base_seed() + 710);
  log_capture log;
  {
    host_engine eng(cfg);
    for (std::size_t p = 0; p < kShapes.size(); ++p) {
      (void)host_driver<float>(m).add(eng, p);
    }
    eng.initialize();
    for (int t = 0; t < 4; ++t) { // the last step closes its window
      m.next_grads();
      (void)eng.step(1e-2f);
    }
  }
  { host_engine never_initialized(cfg); }
  EXPECT_TRUE(log.lines.empty());
}

} // namespace
