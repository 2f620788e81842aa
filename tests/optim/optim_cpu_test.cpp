// cpu tier of the optimizer: the AdamW math against a float64 reference, the CPU SIMD paths
// (each forced in turn) against the scalar math bit for bit, thread-count independence, the fused
// host window against the unfused sequence, NaN/Inf behaviour and argument validation. The host
// twins of the device launchers: optim_host_twins_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

#include "optim_args.hpp"
#include "optim_reference.hpp"
#include "simd_paths.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_optim_test;
using zenflow::adamw_hparams;
using zenflow::bfloat16;
using zenflow::half;
namespace host = zenflow::host;

std::vector<adamw_hparams> hparam_grid() {
  std::vector<adamw_hparams> out;
  for (float wd : {0.0f, 0.1f}) {
    for (bool decoupled : {true, false}) {
      adamw_hparams hp;
      hp.lr = 3e-3f;
      hp.weight_decay = wd;
      hp.decoupled = decoupled;
      out.push_back(hp);
    }
  }
  adamw_hparams odd;
  odd.lr = 1e-2f;
  odd.beta1 = 0.8f;
  odd.beta2 = 0.95f;
  odd.eps = 1e-6f;
  odd.weight_decay = 0.01f;
  out.push_back(odd);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Math core

TEST(optim_math, scalar_update_tracks_float64_reference_over_many_steps) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::size_t n = 257;
  for (const adamw_hparams& hp : hparam_grid()) {
    SCOPED_TRACE("wd=" + std::to_string(hp.weight_decay) + " decoupled=" + std::to_string(hp.decoupled));
    auto p = uniform(n, seed, 1.0f);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    std::vector<ref_state> ref(n);
    for (std::size_t i = 0; i < n; ++i) {
      ref[i].p = p[i];
    }
    const float scale = 0.5f;
    for (int step = 1; step <= 10; ++step) {
      const auto g = uniform(n, seed + 100 + step, 2.0f);
      const auto c = zenflow::make_adam_constants(hp, step);
      for (std::size_t i = 0; i < n; ++i) {
        zenflow::adam_update(p[i], m[i], v[i], g[i], scale, c);
        ref_step(ref[i], g[i], scale, hp, step);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(near(p[i], ref[i].p, 1e-6, 2e-6)) << i;
      ASSERT_TRUE(near(m[i], ref[i].m, 1e-7, 1e-5)) << i;
      ASSERT_TRUE(near(v[i], ref[i].v, 1e-9, 1e-5)) << i;
    }
  }
}

TEST(optim_math, bias_correction_constants_match_float64_for_small_and_huge_counts) {
  adamw_hparams hp;
  hp.lr = 1e-3f;
  for (std::int32_t t :
       {1, 2, 3, 10, 255, 256, 257, 1000, 100000, 1 << 30, std::numeric_limits<std::int32_t>::max()}) {
    const auto c = zenflow::make_adam_constants(hp, t);
    const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), t);
    EXPECT_TRUE(near(c.neg_step_size, -static_cast<double>(hp.lr) / bc1, 0, 1e-7)) << t;
    EXPECT_TRUE(near(c.inv_sqrt_bc2, 1.0 / std::sqrt(bc2), 0, 1e-7)) << t;
    EXPECT_TRUE(std::isfinite(c.neg_step_size) && std::isfinite(c.inv_sqrt_bc2)) << t;
  }
  // count <= 0 is treated as the first update.
  const auto c0 = zenflow::make_adam_constants(hp, 0);
  const auto c1 = zenflow::make_adam_constants(hp, 1);
  EXPECT_EQ(c0.neg_step_size, c1.neg_step_size);
}

TEST(optim_math, invalid_hparams_are_named) {
  adamw_hparams hp;
  EXPECT_EQ(zenflow::invalid_adamw_hparam(hp), nullptr);
  hp.beta1 = 1.0f;
  EXPECT_STREQ(zenflow::invalid_adamw_hparam(hp), "hp.beta1");
  hp = {};
  hp.eps = 0.0f;
  EXPECT_STREQ(zenflow::invalid_adamw_hparam(hp), "hp.eps");
  hp = {};
  hp.lr = std::numeric_limits<float>::quiet_NaN();
  EXPECT_STREQ(zenflow::invalid_adamw_hparam(hp), "hp.lr");
  hp = {};
  hp.weight_decay = -1.0f;
  EXPECT_STREQ(zenflow::invalid_adamw_hparam(hp), "hp.weight_decay");
}

// ---------------------------------------------------------------------------------------------
// CPU AdamW: every SIMD path, every dtype, odd sizes and unaligned pointers, bit-identical to the
// scalar math and close to float64.

template <class G, class T>
void check_adamw_span_all_paths() {
  const std::uint64_t seed = zf_test::base_seed() + 11;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string("grad ") + type_name<G>() + " out " + type_name<T>());
  adamw_hparams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.05f;
  for (std::int64_t n : {1, 7, 15, 16, 17, 33, 1001}) {
    for (int offset : {0, 1, 3}) { // offset elements: unaligned starts
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const std::size_t total = static_cast<std::size_t>(n + offset);
      const auto p0 = uniform(total, seed + n, 1.0f);
      const auto m0 = uniform(total, seed + n + 1, 0.01f);
      const auto v0 = positive(total, seed + n + 2);
      // Reference: the scalar math, 3 steps.
      std::vector<float> rp = p0, rm = m0, rv = v0;
      std::vector<T> rout(total);
      std::vector<std::vector<G>> grads;
      for (int step = 0; step < 3; ++step) {
        grads.push_back(narrow<G>(uniform(total, seed + 1000 * step + n, 1.0f)));
        const auto c = zenflow::make_adam_constants(hp, 5 + step);
        for (std::size_t i = static_cast<std::size_t>(offset); i < total; ++i) {
          rout[i] =
              zenflow::from_float<T>(zenflow::adam_update(rp[i], rm[i], rv[i], grads.back()[i], 0.75f, c));
        }
      }
      for (auto path : supported_paths()) {
        SCOPED_TRACE(host::simd_path_name(path));
        path_guard guard(path);
        std::vector<float> p = p0, m = m0, v = v0;
        std::vector<T> out(total);
        for (int step = 0; step < 3; ++step) {
          ASSERT_EQ((host::adamw_span<G, T>(p.data() + offset, m.data() + offset, v.data() + offset,
                                            grads[static_cast<std::size_t>(step)].data() + offset,
                                            out.data() + offset, n, 5 + step, hp, 0.75f, nullptr)),
                    cudaSuccess);
        }
        ASSERT_TRUE(same_bits(p, rp));
        ASSERT_TRUE(same_bits(m, rm));
        ASSERT_TRUE(same_bits(v, rv));
        ASSERT_TRUE(same_bits(out, rout));
      }
    }
  }
}

TEST(optim_cpu, every_simd_path_matches_the_scalar_math_bit_for_bit_f32) {
  check_adamw_span_all_paths<float, float>();
  check_adamw_span_all_paths<float, half>();
  check_adamw_span_all_paths<float, bfloat16>();
}
TEST(optim_cpu, every_simd_path_matches_the_scalar_math_bit_for_bit_f16) {
  check_adamw_span_all_paths<half, half>();
  check_adamw_span_all_paths<half, float>();
}
TEST(optim_cpu, every_simd_path_matches_the_scalar_math_bit_for_bit_bf16) {
  check_adamw_span_all_paths<bfloat16, bfloat16>();
  check_adamw_span_all_paths<bfloat16, half>();
}

TEST(optim_cpu, reports_the_paths_it_can_take) {
  EXPECT_TRUE(host::simd_path_supported(host::simd_path::scalar));
  EXPECT_TRUE(host::simd_path_supported(host::best_simd_path()));
  EXPECT_EQ(host::active_simd_path(), host::best_simd_path());
  ASSERT_TRUE(host::force_simd_path(host::simd_path::scalar));
  EXPECT_EQ(host::active_simd_path(), host::simd_path::scalar);
  host::reset_simd_path();
  EXPECT_EQ(host::active_simd_path(), host::best_simd_path());
  std::printf("[ info ] best CPU path: %s\n", host::simd_path_name(host::best_simd_path()));
}

TEST(optim_cpu, close_to_float64_over_several_steps_all_hparams) {
  const std::uint64_t seed = zf_test::base_seed() + 12;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t n = 4099;
  zenflow::worker_pool pool(2);
  for (const adamw_hparams& hp : hparam_grid()) {
    auto p = uniform(static_cast<std::size_t>(n), seed, 1.0f);
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    std::vector<ref_state> ref(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      ref[i].p = p[i];
    }
    for (int step = 1; step <= 6; ++step) {
      const auto g = uniform(p.size(), seed + step, 1.0f);
      ASSERT_EQ((host::adamw_span<float, float>(p.data(), m.data(), v.data(), g.data(), nullptr, n, step, hp,
                                                1.0f, &pool)),
                cudaSuccess);
      for (std::size_t i = 0; i < p.size(); ++i) {
        ref_step(ref[i], g[i], 1.0, hp, step);
      }
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      ASSERT_TRUE(near(p[i], ref[i].p, 1e-6, 2e-6)) << i;
      ASSERT_TRUE(near(v[i], ref[i].v, 1e-9, 1e-5)) << i;
    }
  }
}

TEST(optim_cpu, bit_identical_whatever_the_thread_count) {
  const std::uint64_t seed = zf_test::base_seed() + 13;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t n = 300007;
  const auto p0 = uniform(static_cast<std::size_t>(n), seed);
  const auto g = narrow<bfloat16>(uniform(p0.size(), seed + 1));
  adamw_hparams hp;
  hp.weight_decay = 0.01f;
  std::vector<float> first_p;
  std::vector<bfloat16> first_out;
  for (unsigned threads : {0u, 1u, 2u, 3u}) {
    std::vector<float> p = p0, m(p0.size(), 0.0f), v(p0.size(), 0.0f);
    std::vector<bfloat16> out(p0.size());
    if (threads == 0) {
      ASSERT_EQ((host::adamw_span<bfloat16, bfloat16>(p.data(), m.data(), v.data(), g.data(), out.data(), n,
                                                      1, hp, 1.0f, nullptr)),
                cudaSuccess);
      first_p = p;
      first_out = out;
    } else {
      zenflow::worker_pool pool(threads);
      ASSERT_EQ((host::adamw_span<bfloat16, bfloat16>(p.data(), m.data(), v.data(), g.data(), out.data(), n,
                                                      1, hp, 1.0f, &pool)),
                cudaSuccess);
      EXPECT_TRUE(same_bits(p, first_p)) << threads;
      EXPECT_TRUE(same_bits(out, first_out)) << threads;
    }
  }
}

TEST(optim_cpu, output_may_alias_the_master_for_float) {
  const std::uint64_t seed = zf_test::base_seed() + 14;
  const std::int64_t n = 333;
  auto p = uniform(static_cast<std::size_t>(n), seed);
  auto q = p;
  std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f), m2 = m, v2 = v, out(p.size());
  const auto g = uniform(p.size(), seed + 1);
  adamw_hparams hp;
  ASSERT_EQ((host::adamw_span<float, float>(p.data(), m.data(), v.data(), g.data(), p.data(), n, 1, hp, 1.0f,
                                            nullptr)),
            cudaSuccess);
  ASSERT_EQ((host::adamw_span<float, float>(q.data(), m2.data(), v2.data(), g.data(), out.data(), n, 1, hp,
                                            1.0f, nullptr)),
            cudaSuccess);
  EXPECT_TRUE(same_bits(p, q));
  EXPECT_TRUE(same_bits(out, q));
}

// NaN/Inf: documented behaviour is plain IEEE propagation limited to the elements it touches.
TEST(optim_cpu, non_finite_gradients_poison_only_their_own_elements) {
  const std::uint64_t seed = zf_test::base_seed() + 15;
  const std::int64_t n = 50;
  for (auto path : supported_paths()) {
    SCOPED_TRACE(host::simd_path_name(path));
    path_guard guard(path);
    auto p = uniform(static_cast<std::size_t>(n), seed);
    const auto p0 = p;
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    auto g = uniform(p.size(), seed + 1);
    g[3] = std::numeric_limits<float>::quiet_NaN();
    g[20] = std::numeric_limits<float>::infinity();
    g[49] = -std::numeric_limits<float>::infinity();
    std::vector<half> out(p.size());
    adamw_hparams hp;
    ASSERT_EQ((host::adamw_span<float, half>(p.data(), m.data(), v.data(), g.data(), out.data(), n, 1, hp,
                                             1.0f, nullptr)),
              cudaSuccess);
    EXPECT_TRUE(std::isnan(p[3]) && std::isnan(m[3]) && std::isnan(v[3]));
    EXPECT_TRUE(std::isnan(zenflow::to_float(out[3])));
    EXPECT_EQ(bits(out[3]) & 0x7fffu, 0x7e00u); // canonical quiet NaN (either sign) on every path
    EXPECT_TRUE(std::isinf(v[20]) && std::isinf(m[20]) && std::isnan(p[20])); // inf / inf
    EXPECT_TRUE(std::isnan(p[49]));
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (i == 3 || i == 20 || i == 49) {
        continue;
      }
      ref_state r{p0[i], 0, 0};
      ref_step(r, g[i], 1.0, hp, 1);
      ASSERT_TRUE(std::isfinite(p[i]) && near(p[i], r.p, 1e-6, 1e-6)) << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host accumulate and the fused window.

struct window_fixture {
  std::int64_t channels, len;
  std::vector<float> master, m, v, acc;
  std::vector<std::int32_t> counts, idx;

  window_fixture(std::int64_t ch, std::int64_t l, std::uint64_t seed) : channels(ch), len(l) {
    const std::size_t n = static_cast<std::size_t>(ch * l);
    master = uniform(n, seed);
    m = uniform(n, seed + 1, 0.01f);
    v = positive(n, seed + 2);
    acc = uniform(n, seed + 3, 3.0f);
    counts.resize(static_cast<std::size_t>(ch));
    for (std::int64_t c = 0; c < ch; ++c) {
      counts[static_cast<std::size_t>(c)] = static_cast<std::int32_t>((c * 7) % 13); // per-channel counts
    }
    for (std::int64_t c = 0; c < ch; ++c) {
      if (c % 5 != 2) { // every fifth channel is "selected": not in the list
        idx.push_back(static_cast<std::int32_t>(c));
      }
    }
  }
  zenflow::channel_state state() { return {master.data(), m.data(), v.data(), counts.data(), channels, len}; }
};

template <class S, class T>
void check_window(std::int64_t channels, std::int64_t len) {
  const std::uint64_t seed = zf_test::base_seed() + 20 + static_cast<std::uint64_t>(len);
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string(type_name<S>()) + "->" + type_name<T>() + " len=" + std::to_string(len));
  adamw_hparams hp;
  hp.lr = 4e-3f;
  hp.weight_decay = 0.02f;
  const std::int32_t steps = 3;
  const float coef = 0.6f;
  window_fixture base(channels, len, seed);
  const auto count = static_cast<std::int64_t>(base.idx.size());
  const auto slot = narrow<S>(uniform(static_cast<std::size_t>(count * len), seed + 9));

  // Reference: the unfused sequence on the scalar math.
  window_fixture ref = base;
  std::vector<T> ref_upload(static_cast<std::size_t>(count * len));
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t c = base.idx[static_cast<std::size_t>(r)];
    const auto k = zenflow::make_adam_constants(hp, ref.counts[static_cast<std::size_t>(c)] + 1);
    for (std::int64_t i = 0; i < len; ++i) {
      const std::size_t o = static_cast<std::size_t>(c * len + i);
      ref.acc[o] = zenflow::accumulate_value(ref.acc[o], coef,
                                             zenflow::to_float(slot[static_cast<std::size_t>(r * len + i)]));
      const float p = zenflow::adam_update(ref.master[o], ref.m[o], ref.v[o], ref.acc[o], 1.0f / steps, k);
      ref_upload[static_cast<std::size_t>(r * len + i)] = zenflow::from_float<T>(p);
      ref.acc[o] = 0.0f;
    }
    ref.counts[static_cast<std::size_t>(c)] += 1;
  }

  for (auto path : supported_paths()) {
    for (unsigned threads : {1u, 2u, 3u}) {
      SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads));
      path_guard guard(path);
      zenflow::worker_pool pool(threads);
      window_fixture w = base;
      std::vector<T> upload(static_cast<std::size_t>(count * len));
      ASSERT_EQ((host::adamw_window<S, T>(w.state(), w.acc.data(), w.idx.data(), count, slot.data(), coef,
                                          steps, hp, upload.data(), &pool)),
                cudaSuccess);
      ASSERT_TRUE(same_bits(w.master, ref.master));
      ASSERT_TRUE(same_bits(w.m, ref.m));
      ASSERT_TRUE(same_bits(w.v, ref.v));
      ASSERT_TRUE(same_bits(w.acc, ref.acc)); // listed rows zeroed, selected rows untouched
      ASSERT_EQ(w.counts, ref.counts);
      ASSERT_TRUE(same_bits(upload, ref_upload));

      // The unfused sequence through the public primitives gives the same bits.
      window_fixture u = base;
      std::vector<T> upload2(upload.size());
      ASSERT_EQ(host::accumulate_channels<S>(u.acc.data(), channels, len, slot.data(), u.idx.data(), count,
                                             coef, &pool),
                cudaSuccess);
      for (std::int64_t r = 0; r < count; ++r) {
        const std::int64_t c = u.idx[static_cast<std::size_t>(r)];
        const std::size_t o = static_cast<std::size_t>(c * len);
        ASSERT_EQ(
            (host::adamw_span<float, T>(u.master.data() + o, u.m.data() + o, u.v.data() + o, u.acc.data() + o,
                                        upload2.data() + r * len, len,
                                        u.counts[static_cast<std::size_t>(c)] + 1, hp, 1.0f / steps, &pool)),
            cudaSuccess);
        std::fill_n(u.acc.data() + o, len, 0.0f);
        u.counts[static_cast<std::size_t>(c)] += 1;
      }
      ASSERT_TRUE(same_bits(u.master, ref.master));
      ASSERT_TRUE(same_bits(upload2, ref_upload));

      // An accumulator of the listed rows only, in list order (window_acc_rows::packed): the same
      // bits, and its rows zeroed (or, with keep, left as they were).
      for (const auto after : {host::window_acc::zero, host::window_acc::keep}) {
        window_fixture k = base;
        std::vector<float> packed(static_cast<std::size_t>(count * len));
        for (std::int64_t r = 0; r < count; ++r) {
          std::copy_n(base.acc.data() + base.idx[static_cast<std::size_t>(r)] * len, len,
                      packed.data() + r * len);
        }
        const std::vector<float> packed0 = packed;
        std::vector<T> upload3(upload.size());
        ASSERT_EQ(
            (host::adamw_window<S, T>(k.state(), packed.data(), k.idx.data(), count, slot.data(), coef, steps,
                                      hp, upload3.data(), &pool, after, 1, 0, host::window_acc_rows::packed)),
            cudaSuccess);
        ASSERT_TRUE(same_bits(k.master, ref.master));
        ASSERT_TRUE(same_bits(k.m, ref.m));
        ASSERT_TRUE(same_bits(k.v, ref.v));
        ASSERT_EQ(k.counts, ref.counts);
        ASSERT_TRUE(same_bits(upload3, ref_upload));
        ASSERT_TRUE(same_bits(k.acc, base.acc)); // the by-channel accumulator is not touched
        if (after == host::window_acc::zero) {
          ASSERT_TRUE(std::all_of(packed.begin(), packed.end(), [](float x) { return x == 0.0f; }));
        } else { // keep: not written (the next window's first step assigns the rows)
          ASSERT_TRUE(same_bits(packed, packed0));
        }
      }
    }
  }
  // Against float64: the mean gradient of the window drives one AdamW step.
  for (std::int64_t r = 0; r < count; r += 17) {
    const std::int64_t c = base.idx[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < len; i += 5) {
      const std::size_t o = static_cast<std::size_t>(c * len + i);
      ref_state s{base.master[o], base.m[o], base.v[o]};
      const double g =
          (static_cast<double>(base.acc[o]) +
           coef * static_cast<double>(zenflow::to_float(slot[static_cast<std::size_t>(r * len + i)]))) /
          steps;
      ref_step(s, g, 1.0, hp, base.counts[static_cast<std::size_t>(c)] + 1);
      ASSERT_TRUE(near(ref.master[o], s.p, 1e-6, 1e-5)) << c << "," << i;
    }
  }
}

TEST(optim_window, fused_window_equals_unfused_sequence_bit_for_bit) {
  check_window<bfloat16, bfloat16>(41, 67);
  check_window<half, half>(23, 64);
  check_window<float, float>(19, 33);
  check_window<bfloat16, float>(12, 128);
}

TEST(optim_window, zero_steps_uploads_current_weights_and_changes_no_state) {
  const std::uint64_t seed = zf_test::base_seed() + 30;
  window_fixture w(16, 24, seed);
  const window_fixture before = w;
  const auto count = static_cast<std::int64_t>(w.idx.size());
  std::vector<bfloat16> upload(static_cast<std::size_t>(count * w.len));
  ASSERT_EQ((host::adamw_window<bfloat16, bfloat16>(w.state(), w.acc.data(), w.idx.data(), count, nullptr,
                                                    1.0f, 0, adamw_hparams{}, upload.data(), nullptr)),
            cudaSuccess);
  EXPECT_TRUE(same_bits(w.master, before.master));
  EXPECT_TRUE(same_bits(w.m, before.m));
  EXPECT_EQ(w.counts, before.counts);
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t c = w.idx[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < w.len; ++i) {
      ASSERT_EQ(bits(upload[static_cast<std::size_t>(r * w.len + i)]),
                bits(zenflow::from_float<bfloat16>(before.master[static_cast<std::size_t>(c * w.len + i)])));
      ASSERT_EQ(w.acc[static_cast<std::size_t>(c * w.len + i)], 0.0f);
    }
  }
}

TEST(optim_window, accumulate_matches_scalar_reference_on_every_path) {
  const std::uint64_t seed = zf_test::base_seed() + 31;
  const std::int64_t channels = 30, len = 45;
  const std::vector<std::int32_t> idx = {0, 3, 4, 9, 17, 29};
  const auto count = static_cast<std::int64_t>(idx.size());
  const auto acc0 = uniform(static_cast<std::size_t>(channels * len), seed);
  const auto slot = narrow<half>(uniform(static_cast<std::size_t>(count * len), seed + 1));
  auto ref = acc0;
  for (std::int64_t r = 0; r < count; ++r) {
    for (std::int64_t i = 0; i < len; ++i) {
      float& a = ref[static_cast<std::size_t>(idx[static_cast<std::size_t>(r)] * len + i)];
      a = zenflow::accumulate_value(a, -1.25f,
                                    zenflow::to_float(slot[static_cast<std::size_t>(r * len + i)]));
      EXPECT_TRUE(near(a, 0, 1e9, 0)); // finite
    }
  }
  for (auto path : supported_paths()) {
    path_guard guard(path);
    auto acc = acc0;
    ASSERT_EQ(host::accumulate_channels<half>(acc.data(), channels, len, slot.data(), idx.data(), count,
                                              -1.25f, nullptr),
              cudaSuccess);
    EXPECT_TRUE(same_bits(acc, ref)) << host::simd_path_name(path);
  }
  // And against float64 for one element.
  const std::size_t o = static_cast<std::size_t>(9 * len + 4);
  EXPECT_TRUE(near(ref[o], acc0[o] - 1.25 * zenflow::to_float(slot[static_cast<std::size_t>(3 * len + 4)]),
                   1e-6, 1e-6));
}

// ---------------------------------------------------------------------------------------------
// Bad arguments: the error, the argument's name in the message, and nothing written.

TEST(optim_args, adamw_span_rejects_bad_arguments_and_writes_nothing) {
  std::vector<float> p(8, 1.0f), m(8, 2.0f), v(8, 3.0f), g(8, 4.0f), out(8, 5.0f);
  const auto p0 = p, m0 = m, v0 = v, out0 = out;
  adamw_hparams hp;
  auto call = [&](float* pp, float* mm, float* vv, const float* gg, std::int64_t n, std::int32_t count,
                  const adamw_hparams& h, float s) {
    return host::adamw_span<float, float>(pp, mm, vv, gg, out.data(), n, count, h, s, nullptr);
  };
  EXPECT_TRUE(rejected(call(p.data(), m.data(), v.data(), g.data(), -1, 1, hp, 1.0f), "n"));
  EXPECT_TRUE(rejected(call(nullptr, m.data(), v.data(), g.data(), 8, 1, hp, 1.0f), "master"));
  EXPECT_TRUE(rejected(call(p.data(), nullptr, v.data(), g.data(), 8, 1, hp, 1.0f), "m"));
  EXPECT_TRUE(rejected(call(p.data(), m.data(), nullptr, g.data(), 8, 1, hp, 1.0f), "v"));
  EXPECT_TRUE(rejected(call(p.data(), m.data(), v.data(), nullptr, 8, 1, hp, 1.0f), "grad"));
  EXPECT_TRUE(rejected(call(p.data(), m.data(), v.data(), g.data(), 8, 0, hp, 1.0f), "count"));
  EXPECT_TRUE(rejected(call(p.data(), m.data(), v.data(), g.data(), 8, 1, hp, std::nanf("")), "grad_scale"));
  adamw_hparams bad = hp;
  bad.beta2 = 1.5f;
  EXPECT_TRUE(rejected(call(p.data(), m.data(), v.data(), g.data(), 8, 1, bad, 1.0f), "hp.beta2"));
  EXPECT_TRUE(same_bits(p, p0) && same_bits(m, m0) && same_bits(v, v0) && same_bits(out, out0));
}

TEST(optim_args, window_and_accumulate_reject_bad_arguments_and_write_nothing) {
  window_fixture w(8, 4, 1);
  const window_fixture before = w;
  const auto count = static_cast<std::int64_t>(w.idx.size());
  std::vector<bfloat16> slot(static_cast<std::size_t>(count * 4), zenflow::from_float<bfloat16>(1.0f));
  std::vector<bfloat16> upload(slot.size(), zenflow::from_float<bfloat16>(9.0f));
  const auto upload0 = upload;
  adamw_hparams hp;
  auto win = [&](zenflow::channel_state st, float* acc, const std::int32_t* idx, std::int64_t n,
                 const bfloat16* s, std::int32_t steps, bfloat16* up, const adamw_hparams& h) {
    return host::adamw_window<bfloat16, bfloat16>(st, acc, idx, n, s, 1.0f, steps, h, up, nullptr);
  };
  auto st = w.state();
  EXPECT_TRUE(rejected(win(st, nullptr, w.idx.data(), count, slot.data(), 2, upload.data(), hp), "acc"));
  EXPECT_TRUE(rejected(win(st, w.acc.data(), nullptr, count, slot.data(), 2, upload.data(), hp), "idx"));
  EXPECT_TRUE(rejected(win(st, w.acc.data(), w.idx.data(), count, slot.data(), 2, nullptr, hp), "upload"));
  EXPECT_TRUE(rejected(win(st, w.acc.data(), w.idx.data(), 9, slot.data(), 2, upload.data(), hp), "count"));
  EXPECT_TRUE(
      rejected(win(st, w.acc.data(), w.idx.data(), count, slot.data(), -1, upload.data(), hp), "steps"));
  EXPECT_TRUE(
      rejected(win(st, w.acc.data(), w.idx.data(), count, slot.data(), 0, upload.data(), hp), "last_slot"));
  adamw_hparams bad = hp;
  bad.lr = -1.0f;
  EXPECT_TRUE(
      rejected(win(st, w.acc.data(), w.idx.data(), count, slot.data(), 2, upload.data(), bad), "hp.lr"));
  auto st2 = st;
  st2.counts = nullptr;
  EXPECT_TRUE(rejected(win(st2, w.acc.data(), w.idx.data(), count, slot.data(), 2, upload.data(), hp),
                       "state.counts"));
  st2 = st;
  st2.v = nullptr;
  EXPECT_TRUE(
      rejected(win(st2, w.acc.data(), w.idx.data(), count, slot.data(), 2, upload.data(), hp), "state.v"));
  std::vector<std::int32_t> bad_idx = w.idx;
  bad_idx.back() = 8; // out of range, last: a partial write would show
  EXPECT_TRUE(
      rejected(win(st, w.acc.data(), bad_idx.data(), count, slot.data(), 2, upload.data(), hp), "idx"));
  EXPECT_TRUE(rejected(host::accumulate_channels<bfloat16>(w.acc.data(), 8, 4, slot.data(), bad_idx.data(),
                                                           count, 1.0f, nullptr),
                       "idx"));
  EXPECT_TRUE(rejected(
      host::accumulate_channels<bfloat16>(nullptr, 8, 4, slot.data(), w.idx.data(), count, 1.0f, nullptr),
      "acc"));
  EXPECT_TRUE(rejected(
      host::accumulate_channels<bfloat16>(w.acc.data(), 8, 4, nullptr, w.idx.data(), count, 1.0f, nullptr),
      "slot"));
  EXPECT_TRUE(
      rejected(host::accumulate_channels<bfloat16>(w.acc.data(), 8, 4, slot.data(), w.idx.data(), count,
                                                   std::numeric_limits<float>::infinity(), nullptr),
               "coef"));
  const auto packed = [&](float* acc, std::int64_t n, host::window_acc_rows rows) {
    return host::adamw_window<bfloat16, bfloat16>(st, acc, w.idx.data(), n, n > 0 ? slot.data() : nullptr,
                                                  1.0f, 2, hp, upload.data(), nullptr, host::window_acc::zero,
                                                  1, 0, rows);
  };
  EXPECT_TRUE(rejected(packed(w.acc.data(), count, static_cast<host::window_acc_rows>(7)), "acc_rows"));
  EXPECT_TRUE(rejected(packed(nullptr, count, host::window_acc_rows::packed), "acc"));
  EXPECT_TRUE(same_bits(w.master, before.master) && same_bits(w.m, before.m) && same_bits(w.v, before.v) &&
              same_bits(w.acc, before.acc) && w.counts == before.counts && same_bits(upload, upload0));
  // A packed accumulator of no rows may be null (a rank that keeps none of a matrix's host rows).
  EXPECT_EQ(packed(nullptr, 0, host::window_acc_rows::packed), cudaSuccess);
}

} // namespace
