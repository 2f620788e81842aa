// The batched selective AdamW (issue 11, P4): host::adamw_selective_batched against the float64
// reference and, bit for bit, against one adamw_selective call per matrix (contiguous and strided
// matrices, their own lr scale, weight decay and counts, several working types); its argument
// checks (an error names the item, nothing is written); the launch's block arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>
#include <zenflow/optim/adamw.hpp>

#include "optim_reference.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_optim_test;
using zenflow::adamw_hparams;
using zenflow::bfloat16;
using zenflow::channel_layout;
using zenflow::half;

/// One matrix of a batched call, with its own buffers.
template <class T>
struct matrix_case {
  std::int64_t channels = 0, len = 0, ld = 0;
  channel_layout layout = channel_layout::contiguous;
  std::vector<T> w, g;
  std::vector<std::int32_t> idx, counts;
  std::vector<float> master, m, v;
  float lr_scale = 1.0f, wd = 0.0f;

  zenflow::adamw_selective_item<T> item() {
    return {
        {w.data(), channels, len, ld, layout},
        {g.data(), channels, len, ld, layout},
        {idx.data(), static_cast<std::int64_t>(idx.size()), master.data(), m.data(), v.data(), counts.data()},
        lr_scale,
        wd,
        0};
  }
};

/// Matrices of odd shapes: contiguous (L % 4 != 0 too) and strided (more than 32 rows), every
/// third channel selected, counts from 0 to 40.
template <class T>
std::vector<matrix_case<T>> make_cases(std::uint64_t seed) {
  const std::int64_t shapes[][2] = {{40, 24}, {70, 13}, {9, 130}, {50, 36}};
  std::vector<matrix_case<T>> out;
  for (int i = 0; i < 4; ++i) {
    matrix_case<T> c;
    c.channels = shapes[i][0];
    c.len = shapes[i][1];
    c.layout = i % 2 == 1 ? channel_layout::strided : channel_layout::contiguous;
    c.ld = c.layout == channel_layout::contiguous ? c.len : c.channels;
    const auto n = static_cast<std::size_t>(c.channels * c.len);
    c.w = narrow<T>(uniform(n, seed + 10 * i));
    c.g = narrow<T>(uniform(n, seed + 10 * i + 1));
    for (std::int32_t ch = i % 3; ch < c.channels; ch += 3) {
      c.idx.push_back(ch);
      c.counts.push_back(static_cast<std::int32_t>((ch * 7 + i) % 41));
    }
    const std::size_t rows = c.idx.size() * static_cast<std::size_t>(c.len);
    c.master = uniform(rows, seed + 10 * i + 2);
    c.m = uniform(rows, seed + 10 * i + 3, 0.01f);
    c.v = positive(rows, seed + 10 * i + 4);
    c.lr_scale = 0.5f + 0.25f * static_cast<float>(i);
    c.wd = 0.05f * static_cast<float>(i);
    out.push_back(std::move(c));
  }
  return out;
}

template <class T>
void check_batched() {
  const std::uint64_t seed = zf_test::base_seed() + 1100;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(type_name<T>());
  adamw_hparams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.3f; // replaced by each item's
  const float scale = 0.75f;
  const std::uint32_t no_skip = 0;
  auto batched = make_cases<T>(seed);
  auto single = make_cases<T>(seed);
  const auto before = make_cases<T>(seed);
  std::vector<zenflow::adamw_selective_item<T>> items;
  for (auto& c : batched) {
    items.push_back(c.item());
  }
  std::vector<float> l1_batched(items.size(), 0.5f);
  std::vector<float*> l1_ptrs;
  for (auto& x : l1_batched) {
    l1_ptrs.push_back(&x);
  }
  ASSERT_EQ(zenflow::host::adamw_selective_batched(items.data(), static_cast<int>(items.size()), hp,
                                                   {&scale, &no_skip}, l1_ptrs.data()),
            cudaSuccess);
  for (std::size_t i = 0; i < single.size(); ++i) {
    SCOPED_TRACE("matrix " + std::to_string(i));
    auto& c = single[i];
    adamw_hparams hi = hp;
    hi.lr = hp.lr * c.lr_scale;
    hi.weight_decay = c.wd;
    float l1 = 0.5f;
    const auto it = c.item();
    ASSERT_EQ(zenflow::host::adamw_selective(it.weights, it.grads, it.rows, hi, {&scale, &no_skip}, &l1),
              cudaSuccess);
    // Bit for bit: one call per matrix.
    EXPECT_TRUE(same_bits(batched[i].w, c.w));
    EXPECT_TRUE(same_bits(batched[i].master, c.master));
    EXPECT_TRUE(same_bits(batched[i].m, c.m));
    EXPECT_TRUE(same_bits(batched[i].v, c.v));
    EXPECT_EQ(batched[i].counts, c.counts);
    EXPECT_EQ(bits(l1_batched[i]), bits(l1));
    // The float64 reference, element by element; unlisted channels untouched.
    const auto& b = before[i];
    double l1_ref = 0.5;
    for (std::size_t r = 0; r < b.idx.size(); ++r) {
      const std::int64_t ch = b.idx[r];
      EXPECT_EQ(batched[i].counts[r], b.counts[r] + 1);
      for (std::int64_t e = 0; e < b.len; ++e) {
        const std::size_t o = r * static_cast<std::size_t>(b.len) + static_cast<std::size_t>(e);
        const std::size_t wo =
            static_cast<std::size_t>(b.layout == channel_layout::contiguous ? ch * b.ld + e : e * b.ld + ch);
        const double grad = zenflow::to_float(b.g[wo]);
        l1_ref += std::abs(grad);
        ref_state s{b.master[o], b.m[o], b.v[o]};
        ref_step(s, grad, scale, hi, b.counts[r] + 1);
        ASSERT_TRUE(near(batched[i].master[o], s.p, 1e-6, 1e-5)) << "row " << r << " element " << e;
        ASSERT_TRUE(near(batched[i].m[o], s.m, 1e-7, 1e-5));
        ASSERT_TRUE(near(batched[i].v[o], s.v, 1e-9, 1e-5));
      }
    }
    EXPECT_TRUE(near(l1_batched[i], l1_ref, 1e-3, 1e-5));
    for (std::int64_t ch = 0; ch < b.channels; ++ch) { // unlisted channels untouched
      if (std::find(b.idx.begin(), b.idx.end(), ch) != b.idx.end()) {
        continue;
      }
      for (std::int64_t e = 0; e < b.len; ++e) {
        const std::size_t wo =
            static_cast<std::size_t>(b.layout == channel_layout::contiguous ? ch * b.ld + e : e * b.ld + ch);
        ASSERT_EQ(bits(batched[i].w[wo]), bits(b.w[wo])) << "channel " << ch;
      }
    }
  }
}

TEST(optim_batched, host_twin_is_one_selective_call_per_matrix_and_the_float64_reference) {
  check_batched<float>();
  check_batched<half>();
  check_batched<bfloat16>();
}

TEST(optim_batched, a_skipped_step_writes_nothing_and_advances_no_count) {
  auto cases = make_cases<float>(zf_test::base_seed() + 1200);
  const auto before = make_cases<float>(zf_test::base_seed() + 1200);
  std::vector<zenflow::adamw_selective_item<float>> items;
  for (auto& c : cases) {
    items.push_back(c.item());
  }
  const std::uint32_t skip = 1;
  ASSERT_EQ(zenflow::host::adamw_selective_batched(items.data(), static_cast<int>(items.size()), {},
                                                   {nullptr, &skip}),
            cudaSuccess);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(same_bits(cases[i].w, before[i].w));
    EXPECT_TRUE(same_bits(cases[i].master, before[i].master));
    EXPECT_EQ(cases[i].counts, before[i].counts);
  }
}

TEST(optim_batched, a_bad_item_is_named_and_nothing_is_written) {
  auto cases = make_cases<float>(zf_test::base_seed() + 1300);
  const auto before = make_cases<float>(zf_test::base_seed() + 1300);
  std::vector<zenflow::adamw_selective_item<float>> items;
  for (auto& c : cases) {
    items.push_back(c.item());
  }
  items[2].rows.idx = nullptr; // item 0 and 1 are valid: nothing of theirs may change either
  EXPECT_EQ(zenflow::host::adamw_selective_batched(items.data(), static_cast<int>(items.size()), {}),
            cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("items[2].rows.idx"), std::string::npos)
      << zenflow::last_error_message();
  items[2] = cases[2].item();
  cases[3].idx[1] = static_cast<std::int32_t>(cases[3].channels); // out of range: the last item
  EXPECT_EQ(zenflow::host::adamw_selective_batched(items.data(), static_cast<int>(items.size()), {}),
            cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("idx"), std::string::npos) << zenflow::last_error_message();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(same_bits(cases[i].w, before[i].w)) << i;
    EXPECT_TRUE(same_bits(cases[i].master, before[i].master)) << i;
    EXPECT_EQ(cases[i].counts, before[i].counts) << i;
  }
  EXPECT_EQ(zenflow::host::adamw_selective_batched<float>(nullptr, 1, {}), cudaErrorInvalidValue);
  EXPECT_EQ(zenflow::host::adamw_selective_batched<float>(nullptr, -1, {}), cudaErrorInvalidValue);
  EXPECT_EQ(zenflow::host::adamw_selective_batched<float>(nullptr, 0, {}), cudaSuccess);
}

TEST(optim_batched, the_launch_takes_a_block_per_contiguous_row_and_per_32_strided_rows) {
  auto cases = make_cases<float>(zf_test::base_seed() + 1400);
  std::vector<zenflow::adamw_selective_item<float>> items;
  std::int64_t expected = 0;
  std::vector<std::int64_t> begins;
  for (auto& c : cases) {
    items.push_back(c.item());
    begins.push_back(expected);
    const auto k = static_cast<std::int64_t>(c.idx.size());
    expected += c.layout == channel_layout::contiguous ? k : (k + 31) / 32;
  }
  EXPECT_EQ(zenflow::adamw_selective_batch_blocks(items.data(), static_cast<int>(items.size())), expected);
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].block_begin, begins[i]) << i;
  }
  EXPECT_EQ(zenflow::adamw_selective_batch_blocks(items.data(), 0), 0);
}

} // namespace
