// cpu tier of int8 host moments (core/detail/moment_q8.hpp): the block codec's round-trip error
// bounds and unbiased stochastic rounding, and the fused window with int8 moments against a
// float64 reference of the same scheme (dequantize, AdamW in float64, requantize on the block's
// absmax with the same hash thresholds), with the same bits on every SIMD path and thread count.
// Rows of odd length (partial last blocks) and many pool chunks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

#include "optim_reference.hpp"
#include "simd_paths.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_optim_test;
using zenflow::adamw_hparams;
using zenflow::int8_moment;
namespace host = zenflow::host;
namespace zd = zenflow::detail;

/// int8 moments of `rows x len`: codes and scales of m and v.
struct q8_store {
  std::int64_t rows, len;
  std::vector<std::uint8_t> mc, vc;
  std::vector<float> ms, vs;
  q8_store(std::int64_t r, std::int64_t l)
      : rows(r), len(l), mc(static_cast<std::size_t>(r * l)), vc(mc.size()),
        ms(static_cast<std::size_t>(r * zd::q8_blocks(l))), vs(ms.size()) {}
  zd::q8_ptr m() { return {mc.data(), ms.data(), len, zd::moment_m}; }
  zd::q8_ptr v() { return {vc.data(), vs.data(), len, zd::moment_v}; }
};

/// Second moments over ~9 decades (v's real dynamic range) and m of matching size and random sign.
void random_moments(std::size_t n, std::uint64_t seed, std::vector<float>& m, std::vector<float>& v) {
  const auto a = uniform(n, seed, 1.0f), b = uniform(n, seed + 1, 1.0f);
  m.resize(n);
  v.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(1e-3 * std::pow(10.0, -4.5 + 4.5 * static_cast<double>(a[i])));
    m[i] = static_cast<float>(static_cast<double>(b[i]) * std::sqrt(static_cast<double>(v[i])));
  }
}

double absmax(const std::vector<double>& x, std::size_t lo, std::size_t hi) {
  double a = 0;
  for (std::size_t i = lo; i < hi; ++i) {
    a = std::max(a, std::abs(x[i]));
  }
  return a;
}

TEST(int8_moments, round_to_nearest_is_within_half_a_step_of_the_block_absmax) {
  const std::uint64_t seed = zf_test::base_seed() + 301;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t rows = 37, len = 201; // blocks of 64, 64, 64, 9
  std::vector<float> m, v;
  random_moments(static_cast<std::size_t>(rows * len), seed, m, v);
  q8_store q(rows, len);
  zd::q8_store_rows(q.m(), q.v(), m.data(), v.data(), rows * len);
  std::vector<float> mh(m.size()), vh(v.size());
  zd::q8_load_rows(mh.data(), q.m(), rows * len);
  zd::q8_load_rows(vh.data(), q.v(), rows * len);
  std::vector<double> md(m.begin(), m.end()), ud(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    ud[i] = std::sqrt(static_cast<double>(v[i]));
  }
  std::size_t raised = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < zd::q8_blocks(len); ++b) {
      const auto lo = static_cast<std::size_t>(r * len + b * 64);
      const auto hi = static_cast<std::size_t>(r * len + std::min<std::int64_t>(len, (b + 1) * 64));
      const double am = absmax(md, lo, hi), au = absmax(ud, lo, hi);
      const auto s = static_cast<std::size_t>(r * zd::q8_blocks(len) + b);
      ASSERT_NEAR(q.ms[s], am, 1e-7 * am); // the scale is the block's absmax
      ASSERT_NEAR(q.vs[s], au, 1e-7 * au);
      for (std::size_t i = lo; i < hi; ++i) {
        ASSERT_LE(std::abs(mh[i] - md[i]), am / 254.0 * (1 + 1e-5)) << i;
        const double u = std::sqrt(static_cast<double>(vh[i]));
        if (q.vc[i] == 1 && ud[i] < au / 510.0) { // raised: m's code is not zero
          ++raised;
          ASSERT_NE(q.mc[i], 0u) << i;
          continue;
        }
        ASSERT_LE(std::abs(u - ud[i]), au / 510.0 * (1 + 1e-5)) << i;
      }
    }
  }
  EXPECT_LT(raised, m.size() / 20); // a rare guard, not the rule
}

TEST(int8_moments, stochastic_rounding_is_unbiased_and_deterministic) {
  // One block whose absmax is 127 steps of 1: the value 10.3 must round to 10 or 11, up 30% of
  // the time over many (index, count) pairs, and the same pair gives the same code.
  std::vector<float> m(64, 0.0f), v(64, 0.0f);
  m[0] = 127.0f;
  v[0] = 255.0f * 255.0f;
  m[5] = 10.3f;
  v[5] = 100.3f * 100.3f;
  int up_m = 0, up_u = 0;
  const int n = 20000;
  for (int t = 0; t < n; ++t) {
    std::uint8_t mc[64], vc[64];
    float sm = 0, su = 0;
    zd::q8_store_block(m.data(), v.data(), 64, mc, sm, vc, su, true, 1000, static_cast<std::uint32_t>(t));
    const auto cm = static_cast<std::int8_t>(mc[5]);
    ASSERT_TRUE(cm == 10 || cm == 11) << int(cm);
    ASSERT_TRUE(vc[5] == 100 || vc[5] == 101) << int(vc[5]);
    up_m += cm == 11 ? 1 : 0;
    up_u += vc[5] == 101 ? 1 : 0;
    std::uint8_t mc2[64], vc2[64];
    zd::q8_store_block(m.data(), v.data(), 64, mc2, sm, vc2, su, true, 1000, static_cast<std::uint32_t>(t));
    ASSERT_EQ(mc[5], mc2[5]);
    ASSERT_EQ(vc[5], vc2[5]);
  }
  EXPECT_NEAR(static_cast<double>(up_m) / n, 0.3, 0.02);
  EXPECT_NEAR(static_cast<double>(up_u) / n, 0.3, 0.02);
}

/// The window on int8 rows in float64: per block, dequantize, AdamW, requantize with the block's
/// absmax and the same stochastic thresholds (the hash of element, count, moment).
struct window_ref {
  std::vector<double> master;
  std::vector<double> m, v; // dequantized after the update
  std::vector<int> mcode, vcode;
  std::vector<double> ms, vs;
};

window_ref reference_window(q8_store q,
                            const std::vector<float>& master,
                            const std::vector<float>& acc,
                            const std::vector<std::int32_t>& idx,
                            const std::vector<std::int32_t>& counts,
                            const adamw_hparams& hp,
                            int steps) {
  const std::int64_t L = q.len, nb = zd::q8_blocks(L);
  window_ref r;
  r.master.assign(master.begin(), master.end());
  r.m.resize(master.size());
  r.v.resize(master.size());
  r.mcode.assign(q.mc.size(), 0);
  r.vcode.assign(q.vc.size(), 0);
  for (std::size_t i = 0; i < q.mc.size(); ++i) {
    r.mcode[i] = static_cast<std::int8_t>(q.mc[i]);
    r.vcode[i] = q.vc[i];
  }
  r.ms.assign(q.ms.begin(), q.ms.end());
  r.vs.assign(q.vs.begin(), q.vs.end());
  for (const std::int32_t c : idx) {
    const int cnt = counts[static_cast<std::size_t>(c)] + 1;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t lo = c * L + b * 64, hi = c * L + std::min<std::int64_t>(L, (b + 1) * 64);
      const auto s = static_cast<std::size_t>(c * nb + b);
      std::vector<double> mn, un;
      for (std::int64_t i = lo; i < hi; ++i) {
        const auto o = static_cast<std::size_t>(i);
        ref_state st{r.master[o], r.mcode[o] * (r.ms[s] / 127.0),
                     std::pow(r.vcode[o] * (r.vs[s] / 255.0), 2.0)};
        ref_step(st, acc[o], 1.0 / steps, hp, cnt);
        r.master[o] = st.p;
        mn.push_back(st.m);
        un.push_back(std::sqrt(st.v));
      }
      double am = 0, au = 0;
      for (std::size_t j = 0; j < mn.size(); ++j) {
        am = std::max(am, std::abs(mn[j]));
        au = std::max(au, un[j]);
      }
      r.ms[s] = am;
      r.vs[s] = au;
      for (std::int64_t i = lo; i < hi; ++i) {
        const auto o = static_cast<std::size_t>(i);
        const auto j = static_cast<std::size_t>(i - lo);
        auto round = [&](double x, std::uint32_t which, double lim) {
          const double f = std::floor(x);
          const double th =
              static_cast<double>(zd::moment_hash(o, static_cast<std::uint32_t>(cnt), which) >> 8) /
              16777216.0;
          return std::clamp(f + (x - f > th ? 1.0 : 0.0), which == zd::moment_m ? -lim : 0.0, lim);
        };
        const double cm = am > 0 ? round(mn[j] * 127.0 / am, zd::moment_m, 127.0) : 0.0;
        double cu = au > 0 ? round(un[j] * 255.0 / au, zd::moment_v, 255.0) : 0.0;
        cu = (cm != 0 && cu == 0 && au > 0) ? 1.0 : cu;
        r.mcode[o] = static_cast<int>(cm);
        r.vcode[o] = static_cast<int>(cu);
        r.m[o] = cm * am / 127.0;
        r.v[o] = std::pow(cu * au / 255.0, 2.0);
      }
    }
  }
  return r;
}

TEST(int8_moments,
     fused_window_matches_a_float64_reference_and_the_same_bits_on_every_path_and_thread_count) {
  const std::uint64_t seed = zf_test::base_seed() + 303;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 173, len = 331; // ~5 pool chunks of rows; blocks 5 x 64 + 11
  adamw_hparams hp;
  hp.lr = 4e-3f;
  hp.weight_decay = 0.02f;
  const int steps = 3;
  const auto n = static_cast<std::size_t>(channels * len);
  const auto master0 = uniform(n, seed + 1);
  const auto acc0 = uniform(n, seed + 2, 0.05f);
  std::vector<float> m0, v0;
  random_moments(n, seed + 3, m0, v0);
  q8_store q0(channels, len);
  zd::q8_store_rows(q0.m(), q0.v(), m0.data(), v0.data(), static_cast<std::int64_t>(n));
  std::vector<std::int32_t> counts0, idx;
  for (std::int64_t c = 0; c < channels; ++c) {
    counts0.push_back(static_cast<std::int32_t>(c % 9));
    if (c % 4 != 1) {
      idx.push_back(static_cast<std::int32_t>(c));
    }
  }
  const auto count = static_cast<std::int64_t>(idx.size());
  const window_ref ref = reference_window(q0, master0, acc0, idx, counts0, hp, steps);

  q8_store first(0, 0);
  std::vector<float> first_master, first_upload;
  for (auto path : supported_paths()) {
    for (unsigned threads : {0u, 1u, 2u, 3u}) {
      SCOPED_TRACE(std::string(host::simd_path_name(path)) + " threads=" + std::to_string(threads));
      path_guard guard(path);
      zenflow::worker_pool pool(std::max(threads, 1u));
      q8_store q = q0;
      auto master = master0, acc = acc0;
      auto counts = counts0;
      std::vector<float> upload(static_cast<std::size_t>(count * len));
      const zenflow::basic_channel_state<int8_moment> st{master.data(), q.m(),    q.v(),
                                                         counts.data(), channels, len};
      ASSERT_EQ((host::adamw_window<float, float, int8_moment>(st, acc.data(), idx.data(), count, nullptr,
                                                               1.0f, steps, hp, upload.data(),
                                                               threads == 0 ? nullptr : &pool)),
                cudaSuccess);
      if (first.rows == 0) { // the first run against the float64 reference
        std::size_t code_diffs = 0;
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(near(master[i], ref.master[i], 1e-6, 1e-5)) << i;
          const int dm = std::abs(static_cast<std::int8_t>(q.mc[i]) - ref.mcode[i]);
          const int dv = std::abs(static_cast<int>(q.vc[i]) - ref.vcode[i]);
          ASSERT_LE(dm, 1) << i; // a threshold within fp32 rounding of the fraction
          ASSERT_LE(dv, 1) << i;
          code_diffs += (dm + dv) > 0 ? 1 : 0;
        }
        EXPECT_LT(code_diffs, n / 200);
        for (std::size_t s = 0; s < q.ms.size(); ++s) {
          ASSERT_TRUE(near(q.ms[s], ref.ms[s], 0, 1e-5)) << s;
          ASSERT_TRUE(near(q.vs[s], ref.vs[s], 0, 1e-5)) << s;
        }
        for (std::int64_t r = 0; r < count; ++r) {
          const std::int64_t c = idx[static_cast<std::size_t>(r)];
          ASSERT_EQ(counts[static_cast<std::size_t>(c)], counts0[static_cast<std::size_t>(c)] + 1);
          for (std::int64_t i = 0; i < len; ++i) {
            ASSERT_EQ(bits(upload[static_cast<std::size_t>(r * len + i)]),
                      bits(master[static_cast<std::size_t>(c * len + i)]));
            ASSERT_EQ(acc[static_cast<std::size_t>(c * len + i)], 0.0f);
          }
        }
        for (std::int64_t c = 0; c < channels; c += 4) { // an unlisted row: untouched
          const auto o = static_cast<std::size_t>((c + 1) * len);
          if (c + 1 < channels) {
            ASSERT_EQ(bits(master[o]), bits(master0[o]));
            ASSERT_EQ(q.mc[o], q0.mc[o]);
          }
        }
        first = q;
        first_master = master;
        first_upload = upload;
      } else { // every other path and thread count: the same bits
        ASSERT_EQ(q.mc, first.mc);
        ASSERT_EQ(q.vc, first.vc);
        ASSERT_TRUE(same_bits(q.ms, first.ms));
        ASSERT_TRUE(same_bits(q.vs, first.vs));
        ASSERT_TRUE(same_bits(master, first_master));
        ASSERT_TRUE(same_bits(upload, first_upload));
      }
    }
  }
}

TEST(int8_moments, bad_int8_state_is_rejected_by_name_and_nothing_changes) {
  const std::int64_t channels = 3, len = 70;
  q8_store q(channels, len);
  std::vector<float> master(static_cast<std::size_t>(channels * len), 0.5f), acc(master.size(), 0.25f);
  std::vector<std::int32_t> counts(3, 0), idx{0, 2};
  std::vector<float> upload(static_cast<std::size_t>(2 * len));
  auto run = [&](zd::q8_ptr m, zd::q8_ptr v) {
    const zenflow::basic_channel_state<int8_moment> st{master.data(), m, v, counts.data(), channels, len};
    return host::adamw_window<float, float, int8_moment>(st, acc.data(), idx.data(), 2, nullptr, 1.0f, 1,
                                                         adamw_hparams{}, upload.data(), nullptr);
  };
  auto no_scale = q.m();
  no_scale.scale = nullptr;
  auto short_rows = q.v();
  short_rows.row_len = 64;
  auto swapped = q.m(); // m's codes passed as v
  for (const auto& [m, v] :
       {std::pair{no_scale, q.v()}, std::pair{q.m(), short_rows}, std::pair{q.m(), swapped}}) {
    EXPECT_EQ(run(m, v), cudaErrorInvalidValue);
    EXPECT_EQ(master, std::vector<float>(master.size(), 0.5f));
    EXPECT_EQ(acc, std::vector<float>(acc.size(), 0.25f));
    EXPECT_EQ(counts, std::vector<std::int32_t>(3, 0));
  }
  EXPECT_EQ(run(q.m(), q.v()), cudaSuccess);
  EXPECT_EQ(counts, (std::vector<std::int32_t>{1, 0, 1}));
}

} // namespace
