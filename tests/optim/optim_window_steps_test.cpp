// host::adamw_window with moment_steps > 1 (the engine's host_moments_per_step): one update that
// stands for n steps of the window's mean gradient. Checked against an independent float64 loop
// (moments decayed by beta^n, counts and bias corrections in steps), on every SIMD path and thread
// count, and its argument check.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

#include "optim_reference.hpp"
#include "simd_paths.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_optim_test;
using zenflow::adamw_hparams;
namespace host = zenflow::host;

struct window_state {
  std::int64_t channels, len;
  std::vector<float> master, m, v, acc;
  std::vector<std::int32_t> counts, idx;

  window_state(std::int64_t ch, std::int64_t l, std::uint64_t seed) : channels(ch), len(l) {
    const auto n = static_cast<std::size_t>(ch * l);
    master = uniform(n, seed);
    m = uniform(n, seed + 1, 0.01f);
    v = positive(n, seed + 2);
    acc = uniform(n, seed + 3, 3.0f);
    for (std::int64_t c = 0; c < ch; ++c) {
      counts.push_back(static_cast<std::int32_t>((c * 5) % 11)); // 0 (a first update) and others
      if (c % 4 != 1) {                                          // every fourth channel is "selected"
        idx.push_back(static_cast<std::int32_t>(c));
      }
    }
  }
  zenflow::channel_state state() { return {master.data(), m.data(), v.data(), counts.data(), channels, len}; }
};

/// n AdamW steps' worth of decay in one update on gradient g, float64 (written from the
/// definition: m and v forget as n updates would, the count and bias corrections are in steps).
void ref_window_step(ref_state& s, double g, const adamw_hparams& hp, int count_before, int n) {
  const double lr = hp.lr, wd = hp.weight_decay;
  const double d1 = std::pow(static_cast<double>(hp.beta1), n);
  const double d2 = std::pow(static_cast<double>(hp.beta2), n);
  const int t = count_before + n;
  s.p *= 1.0 - lr * wd;
  s.m = d1 * s.m + (1.0 - d1) * g;
  s.v = d2 * s.v + (1.0 - d2) * g * g;
  const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), t);
  s.p -= lr / bc1 * s.m / (std::sqrt(s.v) / std::sqrt(bc2) + static_cast<double>(hp.eps));
}

TEST(optim_window_steps, moments_decay_by_beta_to_the_window_and_counts_advance_by_it) {
  const std::uint64_t seed = zf_test::base_seed() + 61;
  SCOPED_TRACE(zf_test::seed_note(seed));
  adamw_hparams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.01f;
  for (const std::int32_t n : {1, 2, 4, 13}) {
    SCOPED_TRACE("moment_steps=" + std::to_string(n));
    const window_state base(29, 37, seed + static_cast<std::uint64_t>(n));
    const auto count = static_cast<std::int64_t>(base.idx.size());
    std::vector<float> first_upload;
    window_state first = base;
    for (auto path : supported_paths()) {
      for (unsigned threads : {1u, 3u}) {
        SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads));
        path_guard guard(path);
        zenflow::worker_pool pool(threads);
        window_state w = base;
        std::vector<float> upload(static_cast<std::size_t>(count * w.len));
        ASSERT_EQ(
            (host::adamw_window<float, float>(w.state(), w.acc.data(), w.idx.data(), count, nullptr, 1.0f, n,
                                              hp, upload.data(), &pool, host::window_acc::zero, n)),
            cudaSuccess);
        if (first_upload.empty()) { // every path and thread count gives the first one's bits
          first_upload = upload;
          first = w;
        } else {
          ASSERT_TRUE(same_bits(upload, first_upload));
          ASSERT_TRUE(same_bits(w.m, first.m));
          ASSERT_TRUE(same_bits(w.v, first.v));
        }
        for (std::int64_t c = 0; c < w.channels; ++c) {
          const bool listed = c % 4 != 1;
          ASSERT_EQ(w.counts[static_cast<std::size_t>(c)],
                    base.counts[static_cast<std::size_t>(c)] + (listed ? n : 0));
        }
      }
    }
    for (std::int64_t r = 0; r < count; ++r) {
      const std::int64_t c = base.idx[static_cast<std::size_t>(r)];
      for (std::int64_t i = 0; i < base.len; ++i) {
        const auto o = static_cast<std::size_t>(c * base.len + i);
        ref_state s{base.master[o], base.m[o], base.v[o]};
        ref_window_step(s, static_cast<double>(base.acc[o]) / n, hp, base.counts[static_cast<std::size_t>(c)],
                        n);
        ASSERT_TRUE(near(first.master[o], s.p, 1e-6, 1e-5)) << c << "," << i;
        ASSERT_TRUE(near(first.m[o], s.m, 1e-8, 1e-5)) << c << "," << i;
        ASSERT_TRUE(near(first.v[o], s.v, 1e-10, 1e-5)) << c << "," << i;
      }
    }
  }
}

TEST(optim_window_steps, a_window_of_n_equal_gradients_moves_the_moments_as_n_dense_steps) {
  // With the same gradient every step, n dense AdamW steps and one n-step window leave the same
  // m, v and bias corrections (only the weight differs: n small moves against one): the property
  // host_moments_per_step exists for.
  const std::uint64_t seed = zf_test::base_seed() + 62;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const adamw_hparams hp;
  const std::int32_t n = 6;
  window_state w(8, 16, seed);
  const window_state base = w;
  const auto count = static_cast<std::int64_t>(w.idx.size());
  std::vector<float> upload(static_cast<std::size_t>(count * w.len));
  ASSERT_EQ((host::adamw_window<float, float>(w.state(), w.acc.data(), w.idx.data(), count, nullptr, 1.0f, n,
                                              hp, upload.data(), nullptr, host::window_acc::zero, n)),
            cudaSuccess);
  for (const std::int32_t c : base.idx) {
    for (std::int64_t i = 0; i < base.len; ++i) {
      const auto o = static_cast<std::size_t>(c * base.len + i);
      ref_state s{base.master[o], base.m[o], base.v[o]};
      for (int k = 1; k <= n; ++k) {
        ref_step(s, static_cast<double>(base.acc[o]) / n, 1.0, hp,
                 base.counts[static_cast<std::size_t>(c)] + k);
      }
      ASSERT_TRUE(near(w.m[o], s.m, 1e-8, 1e-5)) << c << "," << i;
      ASSERT_TRUE(near(w.v[o], s.v, 1e-10, 1e-5)) << c << "," << i;
    }
  }
}

TEST(optim_window_steps, moment_steps_below_one_is_rejected_and_changes_nothing) {
  window_state w(6, 8, zf_test::base_seed() + 63);
  const window_state before = w;
  const auto count = static_cast<std::int64_t>(w.idx.size());
  std::vector<float> upload(static_cast<std::size_t>(count * w.len), 7.0f);
  for (const std::int32_t bad : {0, -3}) {
    EXPECT_EQ((host::adamw_window<float, float>(w.state(), w.acc.data(), w.idx.data(), count, nullptr, 1.0f,
                                                2, adamw_hparams{}, upload.data(), nullptr,
                                                host::window_acc::zero, bad)),
              cudaErrorInvalidValue);
  }
  EXPECT_TRUE(same_bits(w.master, before.master));
  EXPECT_TRUE(same_bits(w.m, before.m));
  EXPECT_TRUE(same_bits(w.v, before.v));
  EXPECT_TRUE(same_bits(w.acc, before.acc));
  EXPECT_EQ(w.counts, before.counts);
  EXPECT_EQ(upload, std::vector<float>(upload.size(), 7.0f));
}

} // namespace
