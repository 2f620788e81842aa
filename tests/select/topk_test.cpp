// cpu tier for top-k: the host backend against a brute-force full sort (plain float
// comparisons), over many sizes and k, ties, NaN/Inf/-0/denormals, unaligned pointers,
// threaded and segmented; the radix arithmetic on its own; and the argument checks.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>

#include "select/reference.hpp"
#include "support/random.hpp"

namespace {

using zenflow::topk_order;

/// Scores of a given flavour: normal, few distinct values (ties), or adversarial specials.
std::vector<float> make_scores(std::int64_t n, std::uint64_t seed, int flavour) {
  std::vector<float> v = zf_test::random_values<float>(static_cast<std::size_t>(n) + 1, seed, 3.0f);
  std::mt19937_64 gen(seed ^ 0x9e3779b97f4a7c15ull);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""),
                            -std::nanf(""),
                            inf,
                            -inf,
                            0.0f,
                            -0.0f,
                            1e-45f,
                            -1e-45f,
                            1e-39f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max()};
  for (auto& x : v) {
    if (flavour == 1) {
      x = static_cast<float>(gen() % 4); // heavy ties
    } else if (flavour == 2 && gen() % 3 == 0) {
      x = specials[gen() % (sizeof specials / sizeof specials[0])];
    } else if (flavour == 3) {
      x = 1.0f; // all equal
    }
  }
  return v;
}

void check_topk(
    const float* scores, std::int64_t n, std::int64_t k, zenflow::worker_pool* pool, bool with_values) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(k) + 1, -9);
  std::vector<float> val(static_cast<std::size_t>(k) + 1, -9.0f);
  std::size_t bytes = 0;
  ASSERT_EQ(zenflow::host::topk(nullptr, bytes, scores, n, k, idx.data(), val.data()), cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::topk(temp.data(), bytes, scores, n, k, idx.data(),
                                with_values ? val.data() : nullptr, topk_order::ascending_index, pool),
            cudaSuccess);
  const auto ref = zf_test::reference_topk(scores, n, k);
  for (std::int64_t j = 0; j < k; ++j) {
    ASSERT_EQ(idx[static_cast<std::size_t>(j)], ref[static_cast<std::size_t>(j)]) << "position " << j;
    if (with_values) {
      ASSERT_EQ(zenflow::detail::float_bits(val[static_cast<std::size_t>(j)]),
                zenflow::detail::float_bits(scores[ref[static_cast<std::size_t>(j)]]))
          << "position " << j;
    }
  }
  EXPECT_EQ(idx[static_cast<std::size_t>(k)], -9) << "wrote past k";
  EXPECT_EQ(val[static_cast<std::size_t>(k)], -9.0f) << "wrote past k";
  if (!with_values) {
    EXPECT_EQ(val[0], -9.0f);
  }
}

TEST(radix_math, keys_follow_the_documented_order) {
  using zenflow::detail::topk_value_key;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ascending = {-inf,   -3e38f, -1.0f, -1e-39f, -1e-45f, 0.0f,
                                        1e-45f, 1e-39f, 1.0f,  3e38f,   inf};
  EXPECT_EQ(topk_value_key(std::nanf("")), 0u);
  EXPECT_EQ(topk_value_key(-std::nanf("")), 0u);
  EXPECT_LT(topk_value_key(std::nanf("")), topk_value_key(-inf));
  for (std::size_t i = 1; i < ascending.size(); ++i) {
    EXPECT_LT(topk_value_key(ascending[i - 1]), topk_value_key(ascending[i])) << ascending[i];
  }
  EXPECT_EQ(topk_value_key(-0.0f), topk_value_key(0.0f));
  // Lower index ranks higher among equal values.
  EXPECT_GT(zenflow::detail::topk_composite(5u, 3u), zenflow::detail::topk_composite(5u, 4u));
  EXPECT_GT(zenflow::detail::topk_composite(6u, 0x7fffffffu), zenflow::detail::topk_composite(5u, 0u));
  // The six digits tile the 64 bits exactly.
  std::uint64_t rebuilt = 0;
  const std::uint64_t c = 0xfedcba9876543210ull;
  for (int p = 0; p < zenflow::detail::topk_passes; ++p) {
    rebuilt |= static_cast<std::uint64_t>(zenflow::detail::topk_digit(c, p))
               << zenflow::detail::topk_pass_shift(p);
    EXPECT_EQ(c & zenflow::detail::topk_known_mask(p + 1), rebuilt) << p;
  }
  EXPECT_EQ(rebuilt, c);
}

TEST(radix_math, find_bucket_scans_from_the_top) {
  std::vector<std::uint32_t> h(zenflow::detail::topk_bins, 0);
  h[2047] = 3;
  h[100] = 5;
  h[7] = 2;
  auto b = zenflow::detail::topk_find_bucket(h.data(), 3);
  EXPECT_EQ(b.digit, 2047u);
  EXPECT_EQ(b.above, 0u);
  b = zenflow::detail::topk_find_bucket(h.data(), 4);
  EXPECT_EQ(b.digit, 100u);
  EXPECT_EQ(b.above, 3u);
  EXPECT_EQ(b.count, 5u);
  b = zenflow::detail::topk_find_bucket(h.data(), 10);
  EXPECT_EQ(b.digit, 7u);
  EXPECT_EQ(b.above, 8u);
}

TEST(topk_cpu, matches_brute_force_over_sizes_k_and_flavours) {
  std::uint64_t seed = zf_test::base_seed() + 1000;
  const std::vector<std::int64_t> sizes = {1, 2, 7, 33, 1000, 4097, 40001};
  for (int flavour = 0; flavour < 4; ++flavour) {
    for (std::int64_t n : sizes) {
      ++seed;
      const auto v = make_scores(n, seed, flavour);
      for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, n / 100, n / 20, n / 10, n / 2, n - 1, n}) {
        if (k < 0) {
          continue;
        }
        SCOPED_TRACE(zf_test::seed_note(seed) + " flavour=" + std::to_string(flavour) +
                     " n=" + std::to_string(n) + " k=" + std::to_string(k));
        check_topk(v.data(), n, k, nullptr, true);
        check_topk(v.data() + 1, n, k, nullptr, false); // unaligned
      }
    }
  }
}

TEST(topk_cpu, threaded_large_input_matches_brute_force) {
  zenflow::worker_pool pool(3);
  const std::int64_t n = (1 << 20) + 3;
  for (int flavour : {0, 1, 2}) {
    const std::uint64_t seed = zf_test::base_seed() + 77 + static_cast<std::uint64_t>(flavour);
    SCOPED_TRACE(zf_test::seed_note(seed) + " flavour=" + std::to_string(flavour));
    const auto v = make_scores(n, seed, flavour);
    check_topk(v.data(), n, n / 20, &pool, true);
  }
}

TEST(topk_cpu, ties_resolve_to_the_lowest_indices) {
  // 10 equal maxima; k = 4 must pick the first four of them.
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(i % 7) * 0.25f;
  }
  for (std::size_t i = 100; i < 1000; i += 90) {
    v[i] = 9.0f;
  }
  std::vector<std::int32_t> idx(4);
  std::size_t bytes = 0;
  ASSERT_EQ(zenflow::host::topk(nullptr, bytes, v.data(), 1000, 4, idx.data()), cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::topk(temp.data(), bytes, v.data(), 1000, 4, idx.data()), cudaSuccess);
  EXPECT_EQ(idx, (std::vector<std::int32_t>{100, 190, 280, 370}));
}

TEST(topk_cpu, nan_ranks_last) {
  std::vector<float> v = {std::nanf(""), -1.0f, std::nanf(""), -std::numeric_limits<float>::infinity()};
  std::vector<std::int32_t> idx(3);
  std::vector<float> val(3);
  std::size_t bytes = 0;
  ASSERT_EQ(zenflow::host::topk(nullptr, bytes, v.data(), 4, 3, idx.data(), val.data()), cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::topk(temp.data(), bytes, v.data(), 4, 3, idx.data(), val.data()), cudaSuccess);
  EXPECT_EQ(idx, (std::vector<std::int32_t>{0, 1, 3})); // both finite/inf, then the first NaN
  EXPECT_TRUE(std::isnan(val[0]));
}

/// The host topk_segmented over `items` (ascending indices), its scratch sized by the size query,
/// on a pool of `threads` workers (0: the calling thread).
void run_host_topk_segmented(std::vector<zenflow::topk_item>& items, unsigned threads) {
  std::unique_ptr<zenflow::worker_pool> pool;
  if (threads != 0) {
    pool = std::make_unique<zenflow::worker_pool>(threads);
  }
  std::size_t bytes = 0;
  ASSERT_EQ(
      zenflow::host::topk_segmented(nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size())),
      cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::topk_segmented(temp.data(), bytes, items.data(),
                                          static_cast<std::int64_t>(items.size()),
                                          topk_order::ascending_index, pool.get()),
            cudaSuccess);
}

TEST(topk_cpu, segmented_matches_brute_force_per_segment) {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::vector<float>> vals;
  std::vector<zenflow::topk_item> items;
  const std::vector<std::pair<std::int64_t, std::int64_t>> nk = {
      {4096, 409}, {0, 0}, {1, 1}, {11008, 110}, {300, 0}, {777, 777}, {5000, 2500}};
  for (std::size_t i = 0; i < nk.size(); ++i) {
    data.push_back(make_scores(nk[i].first, zf_test::base_seed() + 500 + i, static_cast<int>(i % 3)));
    out.emplace_back(static_cast<std::size_t>(nk[i].second), -1);
    vals.emplace_back(static_cast<std::size_t>(nk[i].second), -1.0f);
  }
  for (std::size_t i = 0; i < nk.size(); ++i) {
    items.push_back({data[i].data(), nk[i].first, nk[i].second, out[i].data(), vals[i].data()});
  }
  for (unsigned threads : {0u, 2u, 8u}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ASSERT_NO_FATAL_FAILURE(run_host_topk_segmented(items, threads));
    for (std::size_t i = 0; i < nk.size(); ++i) {
      const auto ref = zf_test::reference_topk(data[i].data(), nk[i].first, nk[i].second);
      ASSERT_EQ(out[i], ref) << "segment " << i;
      for (std::size_t j = 0; j < ref.size(); ++j) {
        ASSERT_EQ(zenflow::detail::float_bits(vals[i][j]), zenflow::detail::float_bits(data[i][ref[j]]));
      }
    }
  }
}

// ---- +Inf scores ranked by their fp64 values (topk_item::wide; issue 36) ----

TEST(radix_math, wide_keys_follow_the_documented_order) {
  using zenflow::detail::topk_wide_key;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> ascending = {-inf, -1e300, -1.0, -4.9e-324, 0.0, 4.9e-324,
                                         1.0,  3.4e38, 1e40, 1e300,     inf};
  EXPECT_EQ(topk_wide_key(std::nan("")), 0u);
  EXPECT_EQ(topk_wide_key(-std::nan("")), 0u);
  EXPECT_LT(topk_wide_key(std::nan("")), topk_wide_key(-inf));
  for (std::size_t i = 1; i < ascending.size(); ++i) {
    EXPECT_LT(topk_wide_key(ascending[i - 1]), topk_wide_key(ascending[i])) << ascending[i];
  }
  EXPECT_EQ(topk_wide_key(-0.0), topk_wide_key(0.0));
  EXPECT_LT(topk_wide_key(1e40), topk_wide_key(std::nextafter(1e40, inf)));
  using zenflow::detail::topk_wide_composite;
  using zenflow::detail::topk_wide_ge;
  EXPECT_TRUE(topk_wide_ge(topk_wide_composite(1e40, 3), topk_wide_composite(1e40, 4))); // lower index first
  EXPECT_FALSE(topk_wide_ge(topk_wide_composite(1e40, 4), topk_wide_composite(1e40, 3)));
  EXPECT_TRUE(topk_wide_ge(topk_wide_composite(2e40, 9), topk_wide_composite(1e40, 0)));
}

/// Segments of (n, +Inf scores, k): fewer, as many and more +Inf scores than k, all +Inf, none,
/// a threaded size and one past the device's one-block segments.
const std::vector<std::array<std::int64_t, 3>> kWideCases = {
    {64, 4, 1},       {64, 4, 2},       {64, 4, 4},          {64, 4, 6},       {1, 1, 1},
    {5, 0, 2},        {100, 100, 37},   {3000, 300, 1},      {3000, 300, 100}, {3000, 300, 300},
    {3000, 300, 301}, {3000, 300, 500}, {40000, 2000, 1500}, {200000, 50, 10}, {200000, 3000, 2999}};

TEST(topk_cpu, overflowed_scores_rank_by_their_fp64_values) {
  std::vector<zf_test::overflow_scores> data;
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::vector<float>> vals;
  std::vector<zenflow::topk_item> items;
  for (std::size_t i = 0; i < kWideCases.size(); ++i) {
    const auto [n, inf, k] = kWideCases[i];
    data.push_back(zf_test::make_overflow_scores(n, inf, zf_test::base_seed() + 900 + i));
    out.emplace_back(static_cast<std::size_t>(k), -1);
    vals.emplace_back(static_cast<std::size_t>(k), -1.0f);
  }
  for (std::size_t i = 0; i < kWideCases.size(); ++i) {
    items.push_back({data[i].scores.data(), kWideCases[i][0], kWideCases[i][2], out[i].data(), vals[i].data(),
                     data[i].wide.data()});
  }
  for (unsigned threads : {0u, 2u, 8u, 32u}) { // 32: one segment per task
    SCOPED_TRACE("threads " + std::to_string(threads));
    ASSERT_NO_FATAL_FAILURE(run_host_topk_segmented(items, threads));
    for (std::size_t i = 0; i < kWideCases.size(); ++i) {
      const auto& d = data[i];
      const auto ref =
          zf_test::reference_topk_wide(d.scores.data(), d.wide.data(), kWideCases[i][0], kWideCases[i][2]);
      ASSERT_EQ(out[i], ref) << "segment " << i;
      for (std::size_t j = 0; j < ref.size(); ++j) {
        ASSERT_EQ(zenflow::detail::float_bits(vals[i][j]), zenflow::detail::float_bits(d.scores[ref[j]]));
      }
    }
  }
}

// The issue's reproduction at the primitive level: 64 x 32 bf16, channel 5 holds one element
// 3e19, channel 40 one element 1e20: both fp32 scores are +Inf; ranked by the fp64 rescan
// (math/norms.hpp, the one the squared totals use) channel 40 wins, by index alone channel 5.
TEST(topk_cpu, the_issues_overflowing_channels_rank_by_their_rescans) {
  constexpr std::int64_t channels = 64;
  constexpr std::int64_t len = 32;
  std::vector<zenflow::bfloat16> g = zf_test::random_values<zenflow::bfloat16>(channels * len, 36);
  g[5 * len + 3] = zenflow::from_float<zenflow::bfloat16>(3e19f);
  g[40 * len + 7] = zenflow::from_float<zenflow::bfloat16>(1e20f);
  std::vector<float> scores(channels);
  std::size_t bytes = 0;
  ASSERT_EQ(
      zenflow::host::channel_norms<zenflow::channel_norm::sq_l2>(
          nullptr, bytes, g.data(), channels, len, len, zenflow::channel_layout::contiguous, scores.data()),
      cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::channel_norms<zenflow::channel_norm::sq_l2>(
                temp.data(), bytes, g.data(), channels, len, len, zenflow::channel_layout::contiguous,
                scores.data()),
            cudaSuccess);
  ASSERT_TRUE(std::isinf(scores[5]) && std::isinf(scores[40]));
  const zenflow::channel_matrix<const zenflow::bfloat16> m{g.data(), channels, len, len,
                                                           zenflow::channel_layout::contiguous};
  std::vector<double> wide(channels);
  for (std::int64_t c = 0; c < channels; ++c) {
    wide[static_cast<std::size_t>(c)] = zenflow::detail::sq_rescan_channel(m, scores.data(), c);
  }
  EXPECT_GT(wide[40], wide[5]);
  for (const bool with_wide : {false, true}) {
    std::int32_t idx = -1;
    const zenflow::topk_item it{scores.data(), channels, 1, &idx, nullptr, with_wide ? wide.data() : nullptr};
    bytes = 0;
    ASSERT_EQ(zenflow::host::topk_segmented(nullptr, bytes, &it, 1), cudaSuccess);
    std::vector<std::byte> t(bytes);
    ASSERT_EQ(zenflow::host::topk_segmented(t.data(), bytes, &it, 1), cudaSuccess);
    EXPECT_EQ(idx, with_wide ? 40 : 5);
  }
}

// ---- argument validation ----

TEST(topk_cpu_args, every_bad_argument_is_rejected_by_name_and_nothing_is_written) {
  std::vector<float> v(16, 1.0f);
  struct bad {
    const char* arg;
    const float* scores;
    std::int64_t n, k;
    bool null_idx;
    topk_order order;
  };
  const std::vector<bad> cases = {
      {"scores", nullptr, 16, 2, false, topk_order::ascending_index},
      {"n", v.data(), -1, 0, false, topk_order::ascending_index},
      {"n", v.data(), std::int64_t{1} << 31, 2, false, topk_order::ascending_index},
      {"k", v.data(), 16, -1, false, topk_order::ascending_index},
      {"k", v.data(), 16, 17, false, topk_order::ascending_index},
      {"indices", v.data(), 16, 2, true, topk_order::ascending_index},
      {"order", v.data(), 16, 2, false, static_cast<topk_order>(7)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arg);
    std::vector<std::int32_t> idx(17, -4);
    std::vector<float> val(17, -4.0f);
    std::size_t bytes = 4242;
    EXPECT_EQ(zenflow::host::topk(nullptr, bytes, c.scores, c.n, c.k, c.null_idx ? nullptr : idx.data(),
                                  val.data(), c.order),
              cudaErrorInvalidValue);
    EXPECT_EQ(bytes, 4242u);
    std::vector<std::byte> temp(1 << 20);
    bytes = temp.size();
    EXPECT_EQ(zenflow::host::topk(temp.data(), bytes, c.scores, c.n, c.k, c.null_idx ? nullptr : idx.data(),
                                  val.data(), c.order),
              cudaErrorInvalidValue);
    EXPECT_NE(zenflow::last_error_message().find(std::string("'") + c.arg + "'"), std::string::npos)
        << zenflow::last_error_message();
    EXPECT_NE(zenflow::last_error_message().find("zenflow::host::topk"), std::string::npos);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(idx[i], -4);
      EXPECT_EQ(val[i], -4.0f);
    }
  }
  std::vector<std::int32_t> idx(2, -4);
  std::size_t small = 8;
  std::byte buf[8];
  EXPECT_EQ(zenflow::host::topk(buf, small, v.data(), 16, 2, idx.data()), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'temp_bytes'"), std::string::npos);
  EXPECT_EQ(idx[0], -4);
  // k == 0 with null outputs is valid and writes nothing.
  std::size_t bytes = 0;
  EXPECT_EQ(zenflow::host::topk(nullptr, bytes, v.data(), 16, 0, nullptr), cudaSuccess);
  std::vector<std::byte> temp(bytes);
  EXPECT_EQ(zenflow::host::topk(temp.data(), bytes, v.data(), 16, 0, nullptr), cudaSuccess);
  EXPECT_EQ(zenflow::host::topk(temp.data(), bytes, nullptr, 0, 0, nullptr), cudaSuccess);
}

TEST(topk_cpu_args, segmented_names_the_bad_item_and_writes_nothing) {
  std::vector<float> v(16, 1.0f);
  std::vector<std::int32_t> a(4, -4), b(4, -4);
  std::vector<zenflow::topk_item> items = {{v.data(), 16, 4, a.data(), nullptr},
                                           {v.data(), 3, 4, b.data(), nullptr}};
  std::vector<std::byte> temp(1 << 20);
  std::size_t bytes = temp.size();
  EXPECT_EQ(zenflow::host::topk_segmented(temp.data(), bytes, items.data(), 2), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items[1].k'"), std::string::npos)
      << zenflow::last_error_message();
  EXPECT_EQ(a[0], -4);
  EXPECT_EQ(zenflow::host::topk_segmented(temp.data(), bytes, nullptr, 2), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items'"), std::string::npos);
  EXPECT_EQ(zenflow::host::topk_segmented(temp.data(), bytes, items.data(), -3), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'count'"), std::string::npos);
  items[1] = {nullptr, 3, 1, b.data(), nullptr};
  EXPECT_EQ(zenflow::host::topk_segmented(temp.data(), bytes, items.data(), 2), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items[1].scores'"), std::string::npos);
  EXPECT_EQ(a[0], -4);
}

} // namespace
