// cpu tier of the host options that move fewer bytes per parameter: bf16 moments (stochastic
// rounding from a counter-based hash) in the CPU AdamW and the fused window, against a float64
// reference and against the documented rounding bit for bit, on every SIMD path and thread
// count; and the window's first step assigning the accumulator (no read, no zeroing) with the
// same bits as adding into a zeroed one. Sizes span several pool chunks, so threads really split
// the work.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/detail/moment_rounding.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

#include "optim_reference.hpp"
#include "simd_paths.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_optim_test;
using zenflow::adamw_hparams;
using zenflow::bfloat16;
namespace host = zenflow::host;

/// The bf16 value whose bits are `b`, as a double.
double bf16_value(std::uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16));
}
std::uint16_t raw(bfloat16 h) {
  return static_cast<std::uint16_t>(bits(h));
}

/// True when `stored` is one of the two bf16 neighbours of `exact` (a float64 value), allowing
/// the fp32 arithmetic's own rounding (a few fp32 ulps) at the boundary.
bool brackets(std::uint16_t stored, double exact) {
  const double s = bf16_value(stored);
  const double ulp = std::ldexp(1.0, std::ilogb(exact == 0.0 ? 1e-30 : exact) - 7);
  return std::abs(s - exact) <= ulp * (1.0 + 1e-3) + 1e-6 * std::abs(exact);
}

// --- the rounding itself -------------------------------------------------------------------

TEST(bf16_moments, stochastic_rounding_is_unbiased_and_deterministic) {
  // A value a quarter of the way between two bf16 neighbours rounds up about 25% of the time.
  const float lo = 1.0f, hi = std::bit_cast<float>(0x3f810000u); // 1 and the next bf16 (1 + 2^-7)
  const float x = lo + 0.25f * (hi - lo);
  int up = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const std::uint16_t b = zenflow::detail::round_moment_bf16(x, static_cast<std::uint64_t>(i), 7, 0);
    ASSERT_TRUE(b == 0x3f80 || b == 0x3f81) << b;
    up += b == 0x3f81 ? 1 : 0;
    ASSERT_EQ(b, zenflow::detail::round_moment_bf16(x, static_cast<std::uint64_t>(i), 7,
                                                    0)); // same inputs, same bits
  }
  EXPECT_NEAR(static_cast<double>(up) / n, 0.25, 0.01);
  // Exact bf16 values never move; negative values round their magnitude the same way; NaN stays NaN.
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(zenflow::detail::round_moment_bf16(1.5f, i, 1, 1), 0x3fc0);
    const std::uint16_t neg = zenflow::detail::round_moment_bf16(-x, i, 3, 1);
    EXPECT_TRUE(neg == 0xbf80 || neg == 0xbf81);
  }
  const std::uint16_t nan =
      zenflow::detail::round_moment_bf16(std::numeric_limits<float>::quiet_NaN(), 5, 1, 0);
  EXPECT_TRUE(std::isnan(bf16_value(nan)));
  // m and v, and successive counts, draw different bits.
  int same = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same += zenflow::detail::moment_hash(i, 3, 0) == zenflow::detail::moment_hash(i, 3, 1) ? 1 : 0;
    same += zenflow::detail::moment_hash(i, 3, 0) == zenflow::detail::moment_hash(i, 4, 0) ? 1 : 0;
  }
  EXPECT_EQ(same, 0);
}

TEST(bf16_moments, v_keeps_decaying_where_round_to_nearest_would_stall) {
  // With zero gradients v should shrink by beta2 per update; 0.1% is below half a bf16 ulp, so
  // round-to-nearest would keep v = 1 forever. Stochastic rounding follows 0.999^t on average.
  const std::int64_t n = 1 << 16;
  std::vector<float> p(static_cast<std::size_t>(n), 0.5f), g(static_cast<std::size_t>(n), 0.0f);
  std::vector<bfloat16> m(static_cast<std::size_t>(n), zenflow::from_float<bfloat16>(0.0f));
  std::vector<bfloat16> v(static_cast<std::size_t>(n), zenflow::from_float<bfloat16>(1.0f));
  adamw_hparams hp;
  const int steps = 300;
  for (int t = 1; t <= steps; ++t) {
    ASSERT_EQ((host::adamw_span<float, float, bfloat16>(p.data(), m.data(), v.data(), g.data(), nullptr, n, t,
                                                        hp, 1.0f, nullptr)),
              cudaSuccess);
  }
  double mean = 0;
  for (const auto& x : v) {
    mean += static_cast<double>(zenflow::to_float(x));
  }
  mean /= static_cast<double>(n);
  const double want = std::pow(0.999, steps);
  EXPECT_NEAR(mean, want, 0.01 * want);
  // The same recursion with round-to-nearest stalls at 1 (why the library does not use it).
  float rne = 1.0f;
  for (int t = 0; t < steps; ++t) {
    rne = zenflow::to_float(zenflow::from_float<bfloat16>(0.999f * rne));
  }
  EXPECT_EQ(rne, 1.0f);
}

// --- CPU AdamW with bf16 moments -------------------------------------------------------------

TEST(bf16_moments, cpu_adamw_matches_the_documented_rounding_on_every_path_and_thread_count) {
  const std::uint64_t seed = zf_test::base_seed() + 70;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t n = 3 * zenflow::detail::cpu_grain + 1037; // several chunks and a tail
  const auto N = static_cast<std::size_t>(n);
  const auto p0 = uniform(N, seed);
  const auto m0 = narrow<bfloat16>(uniform(N, seed + 1, 0.01f));
  const auto v0 = narrow<bfloat16>(positive(N, seed + 2));
  const auto g = uniform(N, seed + 3, 0.1f);
  adamw_hparams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.05f;
  const std::int32_t count = 5;
  const float scale = 0.75f;

  // Reference 1: the scalar math, then the documented rounding (exact bits expected).
  // Reference 2: float64 AdamW from the same bf16 inputs (the stored moment must be a bf16
  // neighbour of the exact value, the master within fp32 rounding of it).
  std::vector<float> ref_p = p0;
  std::vector<std::uint16_t> ref_m(N), ref_v(N);
  const auto k = zenflow::make_adam_constants(hp, count);
  for (std::size_t i = 0; i < N; ++i) {
    float mf = zenflow::to_float(m0[i]), vf = zenflow::to_float(v0[i]);
    (void)zenflow::adam_update(ref_p[i], mf, vf, g[i], scale, k);
    ref_m[i] = zenflow::detail::round_moment_bf16(mf, i, count, zenflow::detail::moment_m);
    ref_v[i] = zenflow::detail::round_moment_bf16(vf, i, count, zenflow::detail::moment_v);
    ref_state s{p0[i], zenflow::to_float(m0[i]), zenflow::to_float(v0[i])};
    ref_step(s, g[i], scale, hp, count);
    ASSERT_TRUE(near(ref_p[i], s.p, 1e-6, 1e-5)) << i;
    ASSERT_TRUE(brackets(ref_m[i], s.m)) << i << ": " << bf16_value(ref_m[i]) << " vs " << s.m;
    ASSERT_TRUE(brackets(ref_v[i], s.v)) << i << ": " << bf16_value(ref_v[i]) << " vs " << s.v;
  }
  for (auto path : supported_paths()) {
    for (unsigned threads : {0u, 1u, 2u, 3u}) {
      SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads));
      path_guard guard(path);
      zenflow::worker_pool pool(std::max(threads, 1u));
      auto p = p0;
      auto m = m0;
      auto v = v0;
      std::vector<bfloat16> out(N);
      ASSERT_EQ(
          (host::adamw_span<float, bfloat16, bfloat16>(p.data(), m.data(), v.data(), g.data(), out.data(), n,
                                                       count, hp, scale, threads == 0 ? nullptr : &pool)),
          cudaSuccess);
      ASSERT_TRUE(same_bits(p, ref_p));
      for (std::size_t i = 0; i < N; ++i) {
        ASSERT_EQ(raw(m[i]), ref_m[i]) << i;
        ASSERT_EQ(raw(v[i]), ref_v[i]) << i;
        ASSERT_EQ(bits(out[i]), bits(zenflow::from_float<bfloat16>(ref_p[i]))) << i;
      }
    }
  }
}

// --- the fused window: bf16 moments, and the accumulator's first step ---------------------------

struct window_case {
  std::int64_t channels, len;
  std::vector<float> master, acc;
  std::vector<bfloat16> m, v;
  std::vector<std::int32_t> counts, idx;
  window_case(std::int64_t ch, std::int64_t l, std::uint64_t seed) : channels(ch), len(l) {
    const auto n = static_cast<std::size_t>(ch * l);
    master = uniform(n, seed);
    m = narrow<bfloat16>(uniform(n, seed + 1, 0.01f));
    v = narrow<bfloat16>(positive(n, seed + 2));
    acc = uniform(n, seed + 3, 3.0f);
    for (std::int64_t c = 0; c < ch; ++c) {
      counts.push_back(static_cast<std::int32_t>((c * 7) % 13));
      if (c % 5 != 2) {
        idx.push_back(static_cast<std::int32_t>(c));
      }
    }
  }
  zenflow::channel_state_bf16m state() {
    return {master.data(), m.data(), v.data(), counts.data(), channels, len};
  }
};

TEST(bf16_moments, fused_window_matches_the_documented_rounding_on_every_path_and_thread_count) {
  const std::uint64_t seed = zf_test::base_seed() + 71;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 211, len = 1003; // ~6 pool chunks of rows, odd row length
  adamw_hparams hp;
  hp.lr = 4e-3f;
  hp.weight_decay = 0.02f;
  const std::int32_t steps = 3;
  const float coef = 0.6f;
  const window_case base(channels, len, seed);
  const auto count = static_cast<std::int64_t>(base.idx.size());
  const auto slot = narrow<bfloat16>(uniform(static_cast<std::size_t>(count * len), seed + 9));

  window_case ref = base;
  std::vector<bfloat16> ref_upload(static_cast<std::size_t>(count * len));
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t c = base.idx[static_cast<std::size_t>(r)];
    const std::int32_t cnt = ref.counts[static_cast<std::size_t>(c)] + 1;
    const auto k = zenflow::make_adam_constants(hp, cnt);
    for (std::int64_t i = 0; i < len; ++i) {
      const auto o = static_cast<std::size_t>(c * len + i);
      const float gsum = zenflow::accumulate_value(
          ref.acc[o], coef, zenflow::to_float(slot[static_cast<std::size_t>(r * len + i)]));
      float mf = zenflow::to_float(ref.m[o]), vf = zenflow::to_float(ref.v[o]);
      const float p = zenflow::adam_update(ref.master[o], mf, vf, gsum, 1.0f / steps, k);
      ref.m[o] = zenflow::detail::from_raw_bits<bfloat16>(zenflow::detail::round_moment_bf16(
          mf, o, static_cast<std::uint32_t>(cnt), zenflow::detail::moment_m));
      ref.v[o] = zenflow::detail::from_raw_bits<bfloat16>(zenflow::detail::round_moment_bf16(
          vf, o, static_cast<std::uint32_t>(cnt), zenflow::detail::moment_v));
      ref_upload[static_cast<std::size_t>(r * len + i)] = zenflow::from_float<bfloat16>(p);
    }
    ref.counts[static_cast<std::size_t>(c)] = cnt;
  }
  for (auto path : supported_paths()) {
    for (unsigned threads : {0u, 2u, 3u}) {
      for (auto after : {host::window_acc::zero, host::window_acc::keep}) {
        SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads) +
                     (after == host::window_acc::keep ? " keep" : " zero"));
        path_guard guard(path);
        zenflow::worker_pool pool(std::max(threads, 1u));
        window_case w = base;
        std::vector<bfloat16> upload(static_cast<std::size_t>(count * len));
        ASSERT_EQ((host::adamw_window<bfloat16, bfloat16, bfloat16>(
                      w.state(), w.acc.data(), w.idx.data(), count, slot.data(), coef, steps, hp,
                      upload.data(), threads == 0 ? nullptr : &pool, after)),
                  cudaSuccess);
        ASSERT_TRUE(same_bits(w.master, ref.master));
        ASSERT_TRUE(same_bits(w.m, ref.m));
        ASSERT_TRUE(same_bits(w.v, ref.v));
        ASSERT_TRUE(same_bits(upload, ref_upload));
        ASSERT_EQ(w.counts, ref.counts);
        for (std::int64_t c = 0; c < channels; ++c) {
          const bool listed = c % 5 != 2;
          for (std::int64_t i = 0; i < len; ++i) {
            const auto o = static_cast<std::size_t>(c * len + i);
            const float want = listed && after == host::window_acc::zero ? 0.0f : base.acc[o];
            ASSERT_EQ(bits(w.acc[o]), bits(want)) << c << "," << i; // kept rows: not even written
          }
        }
      }
    }
  }
}

TEST(first_step_assign, equals_adding_into_a_zeroed_accumulator_bit_for_bit_without_reading_it) {
  const std::uint64_t seed = zf_test::base_seed() + 72;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 97, len = 1531; // several row chunks, odd length
  std::vector<std::int32_t> idx;
  for (std::int64_t c = 0; c < channels; ++c) {
    if (c % 4 != 1) {
      idx.push_back(static_cast<std::int32_t>(c));
    }
  }
  const auto count = static_cast<std::int64_t>(idx.size());
  auto slot = narrow<bfloat16>(uniform(static_cast<std::size_t>(count * len), seed));
  slot[3] = zenflow::from_float<bfloat16>(-0.0f); // signed zeros must come out as with add
  slot[4] = zenflow::from_float<bfloat16>(0.0f);
  const auto n = static_cast<std::size_t>(channels * len);
  for (float coef : {0.7f, -1.25f}) {
    std::vector<float> zeroed(n, 0.0f);
    ASSERT_EQ(host::accumulate_channels<bfloat16>(zeroed.data(), channels, len, slot.data(), idx.data(),
                                                  count, coef, nullptr),
              cudaSuccess);
    for (auto path : supported_paths()) {
      for (unsigned threads : {0u, 2u, 3u}) {
        SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads));
        path_guard guard(path);
        zenflow::worker_pool pool(std::max(threads, 1u));
        std::vector<float> acc(n, std::numeric_limits<float>::quiet_NaN()); // stale: must not be read
        ASSERT_EQ(host::accumulate_channels<bfloat16>(acc.data(), channels, len, slot.data(), idx.data(),
                                                      count, coef, threads == 0 ? nullptr : &pool,
                                                      host::accumulate_mode::assign),
                  cudaSuccess);
        for (std::int64_t c = 0; c < channels; ++c) {
          for (std::int64_t i = 0; i < len; ++i) {
            const auto o = static_cast<std::size_t>(c * len + i);
            if (c % 4 == 1) {
              ASSERT_TRUE(std::isnan(acc[o])); // not listed: untouched
            } else {
              ASSERT_EQ(bits(acc[o]), bits(zeroed[o])) << c << "," << i;
            }
          }
        }
      }
    }
  }
}

TEST(first_step_assign, a_window_that_keeps_its_accumulator_gives_the_same_training_as_zeroing) {
  // Two windows of two steps each, fp32 moments: (zero after each window, add every step) against
  // (keep after each window, assign on each window's first step). Same bits throughout.
  const std::uint64_t seed = zf_test::base_seed() + 73;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 64, len = 700;
  const auto n = static_cast<std::size_t>(channels * len);
  std::vector<std::int32_t> idx;
  for (std::int64_t c = 0; c < channels; ++c) {
    if (c % 3 != 0) {
      idx.push_back(static_cast<std::int32_t>(c));
    }
  }
  const auto count = static_cast<std::int64_t>(idx.size());
  struct run {
    std::vector<float> master, m, v, acc;
    std::vector<std::int32_t> counts;
  };
  auto make = [&] {
    return run{uniform(n, seed), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f),
               std::vector<float>(n, 0.0f), std::vector<std::int32_t>(static_cast<std::size_t>(channels), 0)};
  };
  run a = make(), b = make();
  b.acc.assign(n, 123.0f); // whatever was left: the first step overwrites it
  zenflow::worker_pool pool(2);
  std::vector<bfloat16> up_a(static_cast<std::size_t>(count * len)), up_b(up_a.size());
  adamw_hparams hp;
  for (int window = 0; window < 2; ++window) {
    for (int step = 0; step < 2; ++step) {
      const auto slot =
          narrow<bfloat16>(uniform(static_cast<std::size_t>(count * len), seed + 10 + window * 2 + step));
      const float coef = 0.5f + 0.25f * static_cast<float>(step);
      ASSERT_EQ(host::accumulate_channels<bfloat16>(a.acc.data(), channels, len, slot.data(), idx.data(),
                                                    count, coef, &pool),
                cudaSuccess);
      ASSERT_EQ(host::accumulate_channels<bfloat16>(
                    b.acc.data(), channels, len, slot.data(), idx.data(), count, coef, &pool,
                    step == 0 ? host::accumulate_mode::assign : host::accumulate_mode::add),
                cudaSuccess);
    }
    zenflow::channel_state sa{a.master.data(), a.m.data(), a.v.data(), a.counts.data(), channels, len};
    zenflow::channel_state sb{b.master.data(), b.m.data(), b.v.data(), b.counts.data(), channels, len};
    ASSERT_EQ((host::adamw_window<bfloat16, bfloat16>(sa, a.acc.data(), idx.data(), count, nullptr, 1.0f, 2,
                                                      hp, up_a.data(), &pool)),
              cudaSuccess);
    ASSERT_EQ((host::adamw_window<bfloat16, bfloat16>(sb, b.acc.data(), idx.data(), count, nullptr, 1.0f, 2,
                                                      hp, up_b.data(), &pool, host::window_acc::keep)),
              cudaSuccess);
    ASSERT_TRUE(same_bits(a.master, b.master));
    ASSERT_TRUE(same_bits(a.m, b.m));
    ASSERT_TRUE(same_bits(a.v, b.v));
    ASSERT_TRUE(same_bits(up_a, up_b));
  }
}

} // namespace
