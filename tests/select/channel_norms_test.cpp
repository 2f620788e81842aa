// cpu tier for the channel-norm reducers: the host backend against float64 loops, on seeded
// random inputs of many shapes, both layouts, both norms, all working types, with padding,
// unaligned pointers, NaN/Inf, overflow and denormals, batched and threaded; and the
// argument checks of every entry point.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/select/channel_norms.hpp>

#include "select/reference.hpp"
#include "support/random.hpp"

namespace {

using zenflow::channel_layout;
using zenflow::channel_norm;

struct shape {
  std::int64_t channels, len, pad;
};

const std::vector<shape> shapes = {{1, 1, 0},    {1, 4099, 0},  {3, 7, 2}, {17, 33, 0}, {64, 1000, 5},
                                   {1000, 9, 1}, {129, 257, 0}, {5, 1, 3}, {0, 5, 0},   {4, 0, 0}};

/// A matrix buffer with `pad` extra elements per leading dimension, placed at an element offset
/// (1: not 16-byte aligned) inside its allocation.
template <class T>
struct matrix_buffer {
  std::vector<T> storage;
  T* data;
  std::int64_t ld;
  matrix_buffer(const shape& s, channel_layout layout, std::size_t offset, std::uint64_t seed) {
    ld = (layout == channel_layout::contiguous ? s.len : s.channels) + s.pad;
    const std::int64_t rows = layout == channel_layout::contiguous ? s.channels : s.len;
    const std::size_t n = static_cast<std::size_t>(rows * ld) + offset + 1;
    storage = zf_test::random_values<T>(n, seed, 2.0f);
    data = storage.data() + offset;
  }
};

/// The `i`-th smallest positive subnormal of T.
template <class T>
T denormal(std::uint32_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return zenflow::detail::bits_float(i);
  } else {
    return zenflow::detail::from_raw_bits<T>(static_cast<std::uint16_t>(i));
  }
}

template <class T>
class channel_norms_cpu : public ::testing::Test {};
using working_types = ::testing::Types<float, zenflow::half, zenflow::bfloat16>;
TYPED_TEST_SUITE(channel_norms_cpu, working_types);

template <channel_norm Norm, class T>
void check_shapes(zenflow::worker_pool* pool) {
  std::uint64_t seed = zf_test::base_seed();
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (const auto& s : shapes) {
      for (std::size_t offset : {0u, 1u}) {
        ++seed;
        SCOPED_TRACE(zf_test::seed_note(seed) + " channels=" + std::to_string(s.channels) +
                     " len=" + std::to_string(s.len) + " pad=" + std::to_string(s.pad) +
                     " offset=" + std::to_string(offset) +
                     (layout == channel_layout::strided ? " strided" : " contiguous"));
        matrix_buffer<T> m(s, layout, offset, seed);
        std::vector<float> scores(static_cast<std::size_t>(s.channels) + 1, -7.0f);
        float total = -1.0f;
        std::uint32_t flag = 7;
        std::size_t bytes = 0;
        ASSERT_EQ(zenflow::host::channel_norms<Norm>(nullptr, bytes, m.data, s.channels, s.len, m.ld, layout,
                                                     scores.data(), {}, pool),
                  cudaSuccess);
        ASSERT_GT(bytes, 0u);
        std::vector<std::byte> temp(bytes);
        ASSERT_EQ(zenflow::host::channel_norms<Norm>(temp.data(), bytes, m.data, s.channels, s.len, m.ld,
                                                     layout, scores.data(), {&total, &flag}, pool),
                  cudaSuccess);
        const auto ref = zf_test::reference_norms(m.data, s.channels, s.len, m.ld, layout, Norm);
        const double tol =
            zf_test::norm_tolerance(s.len, layout == channel_layout::contiguous ? s.len / 8 + 1 : s.len);
        double ref_total = 0;
        for (std::int64_t c = 0; c < s.channels; ++c) {
          const double r = ref[static_cast<std::size_t>(c)];
          ref_total += r;
          ASSERT_NEAR(scores[static_cast<std::size_t>(c)], r, r * tol + 1e-30) << "channel " << c;
        }
        EXPECT_EQ(scores[static_cast<std::size_t>(s.channels)], -7.0f) << "wrote past the last channel";
        EXPECT_NEAR(total, ref_total, ref_total * (tol + 1e-6) + 1e-30);
        EXPECT_EQ(flag, 0u);
      }
    }
  }
}

TYPED_TEST(channel_norms_cpu, squared_l2_matches_float64_reference) {
  check_shapes<channel_norm::sq_l2, TypeParam>(nullptr);
}

TYPED_TEST(channel_norms_cpu, l1_matches_float64_reference) {
  check_shapes<channel_norm::l1, TypeParam>(nullptr);
}

TYPED_TEST(channel_norms_cpu, threaded_matches_float64_reference) {
  zenflow::worker_pool pool(3);
  check_shapes<channel_norm::sq_l2, TypeParam>(&pool);
}

TYPED_TEST(channel_norms_cpu, result_is_bit_identical_whatever_the_thread_count) {
  using T = TypeParam;
  zenflow::worker_pool pool(3);
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    const shape s{3000, 700, 3};
    matrix_buffer<T> m(s, layout, 0, zf_test::base_seed() + 99);
    std::vector<float> a(3000), b(3000);
    float ta = 0, tb = 0;
    std::size_t bytes = 0;
    ASSERT_EQ(zenflow::host::channel_norms(nullptr, bytes, m.data, s.channels, s.len, m.ld, layout, a.data()),
              cudaSuccess);
    std::vector<std::byte> temp(bytes);
    ASSERT_EQ(zenflow::host::channel_norms(temp.data(), bytes, m.data, s.channels, s.len, m.ld, layout,
                                           a.data(), {&ta, nullptr}),
              cudaSuccess);
    ASSERT_EQ(zenflow::host::channel_norms(temp.data(), bytes, m.data, s.channels, s.len, m.ld, layout,
                                           b.data(), {&tb, nullptr}, &pool),
              cudaSuccess);
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(zenflow::detail::float_bits(a[i]), zenflow::detail::float_bits(b[i])) << i;
    }
    EXPECT_EQ(zenflow::detail::float_bits(ta), zenflow::detail::float_bits(tb));
  }
}

TYPED_TEST(channel_norms_cpu, nan_inf_overflow_and_denormals) {
  using T = TypeParam;
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    const shape s{6, 37, 0};
    matrix_buffer<T> m(s, layout, 0, zf_test::base_seed() + 5);
    auto at = [&](std::int64_t c, std::int64_t i) -> T& {
      return m.data[layout == channel_layout::contiguous ? c * m.ld + i : i * m.ld + c];
    };
    // Channel 1: a NaN; channel 2: -Inf; channel 3: large finite values whose squares overflow
    // fp32 (a score of Inf, but no NaN/Inf in the gradient); channel 4: denormals only.
    at(1, 20) = zenflow::from_float<T>(std::nanf(""));
    at(2, 36) = zenflow::from_float<T>(-inf);
    const float big = std::is_same_v<T, zenflow::half> ? 60000.0f : 1.0e20f;
    for (std::int64_t i = 0; i < s.len; ++i) {
      at(3, i) = zenflow::from_float<T>(i % 2 ? big : -big);
      at(4, i) = denormal<T>(static_cast<std::uint32_t>(i) + 1);
    }
    std::vector<float> sq(6), l1(6);
    std::uint32_t flag_sq = 7, flag_l1 = 7;
    float total = 0;
    std::size_t bytes = 0;
    ASSERT_EQ(
        zenflow::host::channel_norms(nullptr, bytes, m.data, s.channels, s.len, m.ld, layout, sq.data()),
        cudaSuccess);
    std::vector<std::byte> temp(bytes);
    ASSERT_EQ(zenflow::host::channel_norms(temp.data(), bytes, m.data, s.channels, s.len, m.ld, layout,
                                           sq.data(), {&total, &flag_sq}),
              cudaSuccess);
    ASSERT_EQ(zenflow::host::channel_norms<channel_norm::l1>(temp.data(), bytes, m.data, s.channels, s.len,
                                                             m.ld, layout, l1.data(), {nullptr, &flag_l1}),
              cudaSuccess);
    EXPECT_TRUE(std::isnan(sq[1]));
    EXPECT_TRUE(std::isnan(l1[1]));
    EXPECT_EQ(sq[2], inf);
    EXPECT_EQ(l1[2], inf);
    EXPECT_EQ(flag_sq, 1u);
    EXPECT_EQ(flag_l1, 1u);
    EXPECT_TRUE(std::isnan(total));
    const auto ref_sq =
        zf_test::reference_norms(m.data, s.channels, s.len, m.ld, layout, channel_norm::sq_l2);
    const auto ref_l1 = zf_test::reference_norms(m.data, s.channels, s.len, m.ld, layout, channel_norm::l1);
    if (!std::is_same_v<T, zenflow::half>) {
      EXPECT_EQ(sq[3], inf); // (1e20)^2 overflows fp32, the L1 sum does not
    } else {
      EXPECT_NEAR(sq[3], ref_sq[3], ref_sq[3] * 1e-5);
    }
    EXPECT_NEAR(l1[3], ref_l1[3], ref_l1[3] * 1e-5);
    EXPECT_GT(ref_l1[4], 0.0);
    EXPECT_NEAR(l1[4], ref_l1[4], ref_l1[4] * 1e-5);
    EXPECT_NEAR(sq[4], ref_sq[4], ref_sq[4] * 1e-5 + 1e-37);
    for (std::int64_t c : {0, 5}) {
      EXPECT_NEAR(sq[static_cast<std::size_t>(c)], ref_sq[static_cast<std::size_t>(c)], ref_sq[c] * 1e-5);
    }
    // Without the NaN/Inf elements the flag clears, even though channel 3's score is still Inf.
    at(1, 20) = zenflow::from_float<T>(1.0f);
    at(2, 36) = zenflow::from_float<T>(1.0f);
    ASSERT_EQ(zenflow::host::channel_norms(temp.data(), bytes, m.data, s.channels, s.len, m.ld, layout,
                                           sq.data(), {nullptr, &flag_sq}),
              cudaSuccess);
    EXPECT_EQ(flag_sq, 0u);
  }
}

/// Runs `fn` once on every SIMD path this CPU supports (forced), then restores the automatic choice.
template <class F>
void for_each_simd_path(F&& fn) {
  using zenflow::host::simd_path;
  for (const auto p : {simd_path::scalar, simd_path::avx2, simd_path::avx512}) {
    if (!zenflow::host::force_simd_path(p)) {
      continue;
    }
    SCOPED_TRACE("simd path " + std::to_string(static_cast<int>(p)));
    fn(p);
  }
  zenflow::host::reset_simd_path();
}

TYPED_TEST(channel_norms_cpu, every_simd_path_matches_the_reference_and_writes_the_same_bits) {
  using T = TypeParam;
  // Lengths around the 64 lanes of a contiguous channel and the vector widths of a strided row.
  const std::vector<shape> odd = {{3, 64, 0},  {5, 65, 1},  {2, 127, 0},
                                  {7, 200, 3}, {33, 17, 0}, {1, 1031, 0}};
  for_each_simd_path([&](zenflow::host::simd_path) {
    check_shapes<channel_norm::sq_l2, T>(nullptr);
    check_shapes<channel_norm::l1, T>(nullptr);
  });
  std::uint64_t seed = zf_test::base_seed() + 1000;
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (const auto& s : odd) {
      for (const bool poison : {false, true}) {
        ++seed;
        SCOPED_TRACE(zf_test::seed_note(seed) + " channels=" + std::to_string(s.channels) +
                     " len=" + std::to_string(s.len) + (poison ? " with NaN/Inf" : ""));
        matrix_buffer<T> m(s, layout, 1, seed);
        if (poison) { // one Inf in the vector part of the last channel, one NaN in a tail
          const std::int64_t c = s.channels - 1, i = s.len / 2;
          (layout == channel_layout::contiguous ? m.data[c * m.ld + i] : m.data[i * m.ld + c]) =
              zenflow::from_float<T>(std::numeric_limits<float>::infinity());
          m.data[(layout == channel_layout::contiguous ? 0 : (s.len - 1) * m.ld)] =
              zenflow::from_float<T>(std::nanf(""));
        }
        std::vector<std::uint32_t> first_sq, first_l1;
        for_each_simd_path([&](zenflow::host::simd_path) {
          std::vector<float> sq(static_cast<std::size_t>(s.channels)), l1(sq.size());
          std::uint32_t flag_sq = 7, flag_l1 = 7;
          std::size_t bytes = 0;
          ASSERT_EQ(zenflow::host::channel_norms(nullptr, bytes, m.data, s.channels, s.len, m.ld, layout,
                                                 sq.data()),
                    cudaSuccess);
          std::vector<std::byte> temp(bytes);
          ASSERT_EQ(zenflow::host::channel_norms(temp.data(), bytes, m.data, s.channels, s.len, m.ld, layout,
                                                 sq.data(), {nullptr, &flag_sq}),
                    cudaSuccess);
          ASSERT_EQ(zenflow::host::channel_norms<channel_norm::l1>(temp.data(), bytes, m.data, s.channels,
                                                                   s.len, m.ld, layout, l1.data(),
                                                                   {nullptr, &flag_l1}),
                    cudaSuccess);
          EXPECT_EQ(flag_sq, poison ? 1u : 0u);
          EXPECT_EQ(flag_l1, poison ? 1u : 0u);
          std::vector<std::uint32_t> bits_sq, bits_l1;
          for (std::size_t c = 0; c < sq.size(); ++c) {
            bits_sq.push_back(zenflow::detail::float_bits(sq[c]));
            bits_l1.push_back(zenflow::detail::float_bits(l1[c]));
          }
          if (first_sq.empty()) {
            first_sq = bits_sq;
            first_l1 = bits_l1;
          } else {
            EXPECT_EQ(bits_sq, first_sq);
            EXPECT_EQ(bits_l1, first_l1);
          }
        });
      }
    }
  }
}

TYPED_TEST(channel_norms_cpu, batched_mixed_layouts_match_the_reference) {
  using T = TypeParam;
  const std::vector<std::pair<shape, channel_layout>> specs = {{{300, 129, 0}, channel_layout::contiguous},
                                                               {{77, 1000, 4}, channel_layout::strided},
                                                               {{0, 10, 0}, channel_layout::contiguous},
                                                               {{1, 1, 0}, channel_layout::strided},
                                                               {{2048, 64, 1}, channel_layout::contiguous}};
  std::vector<matrix_buffer<T>> bufs;
  std::vector<std::vector<float>> scores;
  std::vector<zenflow::channel_norm_item<T>> items;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    bufs.emplace_back(specs[i].first, specs[i].second, i % 2, zf_test::base_seed() + 40 + i);
    scores.emplace_back(static_cast<std::size_t>(specs[i].first.channels));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    items.push_back({bufs[i].data, specs[i].first.channels, specs[i].first.len, bufs[i].ld, specs[i].second,
                     scores[i].data()});
  }
  std::vector<float> totals(specs.size(), -1.0f);
  std::vector<std::uint32_t> flags(specs.size(), 7);
  zenflow::worker_pool pool(2);
  std::size_t bytes = 0;
  ASSERT_EQ(zenflow::host::channel_norms_batched<channel_norm::l1>(nullptr, bytes, items.data(),
                                                                   static_cast<std::int64_t>(items.size())),
            cudaSuccess);
  std::vector<std::byte> temp(bytes);
  ASSERT_EQ(zenflow::host::channel_norms_batched<channel_norm::l1>(temp.data(), bytes, items.data(),
                                                                   static_cast<std::int64_t>(items.size()),
                                                                   {totals.data(), flags.data()}, &pool),
            cudaSuccess);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i].first;
    const auto ref = zf_test::reference_norms(bufs[i].data, s.channels, s.len, bufs[i].ld, specs[i].second,
                                              channel_norm::l1);
    const double tol = zf_test::norm_tolerance(s.len, s.len);
    double t = 0;
    for (std::int64_t c = 0; c < s.channels; ++c) {
      t += ref[static_cast<std::size_t>(c)];
      ASSERT_NEAR(scores[i][static_cast<std::size_t>(c)], ref[static_cast<std::size_t>(c)],
                  ref[static_cast<std::size_t>(c)] * tol)
          << "item " << i << " channel " << c;
    }
    EXPECT_NEAR(totals[i], t, t * (tol + 1e-6)) << "item " << i;
    EXPECT_EQ(flags[i], 0u);
  }
}

// ---- argument validation: error code, the message names the argument, nothing written ----

struct bad_case {
  const char* arg;
  const float* grad;
  std::int64_t channels, len, ld;
  channel_layout layout;
  bool null_scores;
};

TEST(channel_norms_cpu_args, every_bad_argument_is_rejected_by_name_and_nothing_is_written) {
  std::vector<float> g(64, 1.0f);
  const std::vector<bad_case> cases = {
      {"grad", nullptr, 4, 4, 4, channel_layout::contiguous, false},
      {"channels", g.data(), -1, 4, 4, channel_layout::contiguous, false},
      {"channel_len", g.data(), 4, -2, 4, channel_layout::contiguous, false},
      {"ld", g.data(), 4, 8, 7, channel_layout::contiguous, false},
      {"ld", g.data(), 8, 4, 7, channel_layout::strided, false},
      {"scores", g.data(), 4, 4, 4, channel_layout::contiguous, true},
      {"layout", g.data(), 4, 4, 4, static_cast<channel_layout>(9), false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arg);
    std::vector<float> scores(8, -3.0f);
    float total = -5.0f;
    std::uint32_t flag = 9;
    std::size_t bytes = 12345;
    zenflow::clear_last_error_message();
    EXPECT_EQ(zenflow::host::channel_norms(nullptr, bytes, c.grad, c.channels, c.len, c.ld, c.layout,
                                           c.null_scores ? nullptr : scores.data(), {&total, &flag}),
              cudaErrorInvalidValue);
    EXPECT_EQ(bytes, 12345u) << "size query wrote temp_bytes on a bad argument";
    std::vector<std::byte> temp(1024);
    bytes = temp.size();
    EXPECT_EQ(zenflow::host::channel_norms(temp.data(), bytes, c.grad, c.channels, c.len, c.ld, c.layout,
                                           c.null_scores ? nullptr : scores.data(), {&total, &flag}),
              cudaErrorInvalidValue);
    EXPECT_NE(zenflow::last_error_message().find(std::string("'") + c.arg + "'"), std::string::npos)
        << zenflow::last_error_message();
    EXPECT_NE(zenflow::last_error_message().find("zenflow::host::channel_norms"), std::string::npos);
    for (float v : scores) {
      EXPECT_EQ(v, -3.0f);
    }
    EXPECT_EQ(total, -5.0f);
    EXPECT_EQ(flag, 9u);
  }
  // Too little scratch.
  std::vector<float> scores(4, -3.0f);
  std::size_t small = 1;
  std::byte one{};
  EXPECT_EQ(
      zenflow::host::channel_norms(&one, small, g.data(), 4, 4, 4, channel_layout::contiguous, scores.data()),
      cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'temp_bytes'"), std::string::npos);
  EXPECT_EQ(scores[0], -3.0f);
}

TEST(channel_norms_cpu_args, batched_names_the_bad_item_and_writes_nothing) {
  std::vector<float> g(64, 1.0f), s0(4, -3.0f), s1(4, -3.0f);
  std::vector<zenflow::channel_norm_item<float>> items = {
      {g.data(), 4, 4, 4, channel_layout::contiguous, s0.data()},
      {g.data(), 4, 4, 3, channel_layout::contiguous, s1.data()}, // ld < channel_len
  };
  std::vector<std::byte> temp(1024);
  std::size_t bytes = temp.size();
  float totals[2] = {-5.0f, -5.0f};
  EXPECT_EQ(zenflow::host::channel_norms_batched(temp.data(), bytes, items.data(), 2, {totals, nullptr}),
            cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items[1].ld'"), std::string::npos)
      << zenflow::last_error_message();
  EXPECT_EQ(s0[0], -3.0f) << "item 0 was computed although item 1 is invalid";
  EXPECT_EQ(totals[0], -5.0f);
  const zenflow::channel_norm_item<float>* no_items = nullptr;
  EXPECT_EQ(zenflow::host::channel_norms_batched(temp.data(), bytes, no_items, 2), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items'"), std::string::npos);
  EXPECT_EQ(zenflow::host::channel_norms_batched(temp.data(), bytes, items.data(), -1),
            cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'count'"), std::string::npos);
  items[1].ld = 4;
  items[1].grad = nullptr;
  EXPECT_EQ(zenflow::host::channel_norms_batched(temp.data(), bytes, items.data(), 2), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'items[1].grad'"), std::string::npos);
  // count == 0 is valid and writes nothing.
  EXPECT_EQ(zenflow::host::channel_norms_batched(temp.data(), bytes, items.data(), 0, {totals, nullptr}),
            cudaSuccess);
  EXPECT_EQ(totals[0], -5.0f);
}

} // namespace
