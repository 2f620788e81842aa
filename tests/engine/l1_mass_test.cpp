// Zen-auto's masses in one order on every backend (detail/plan/l1_mass.hpp). The CUDA backend computes
// them row by row with the bodies of detail/plan/l1_mass.hpp; the host and emulated backends fused
// into the update and the pack (the host twins). Here the bodies, run as the host loop, must give
// the twins' bits on every SIMD path, layout, dtype and odd size; and both must be the L1 mass
// (a float64 sum, within float rounding).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/detail/plan/l1_mass.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/channels.hpp>

#include "../optim/simd_paths.hpp"
#include "../support/random.hpp"

namespace {

using zenflow::channel_layout;
using zenflow::channel_matrix;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

/// Values whose magnitudes span 2^-20..2^20 (2^-10..2^10 in fp16, whose range is narrower), so
/// that the order of the additions shows in the bits.
template <class T>
std::vector<T> spread_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int e = std::is_same_v<T, zenflow::half> ? 10 : 20;
  std::uniform_int_distribution<int> expo(-e, e);
  std::vector<T> out(n);
  for (auto& v : out) {
    v = zenflow::from_float<T>(std::ldexp(dist(gen), expo(gen)));
  }
  return out;
}

template <class T>
constexpr zenflow::dtype type_of() {
  if constexpr (std::is_same_v<T, zenflow::half>) {
    return zenflow::dtype::f16;
  } else if constexpr (std::is_same_v<T, zenflow::bfloat16>) {
    return zenflow::dtype::bf16;
  } else {
    return zenflow::dtype::f32;
  }
}

struct shape {
  std::int64_t channels;
  std::int64_t len;
  channel_layout layout;
};

template <class T>
void check_all(std::uint64_t seed) {
  const shape shapes[] = {{5, 1, channel_layout::contiguous},    {9, 15, channel_layout::contiguous},
                          {7, 16, channel_layout::contiguous},   {6, 17, channel_layout::contiguous},
                          {40, 100, channel_layout::contiguous}, {3, 4099, channel_layout::contiguous},
                          {33, 37, channel_layout::strided},     {8, 300, channel_layout::strided}};
  int order_mattered = 0;
  for (const auto& sh : shapes) {
    const std::int64_t ld = sh.layout == channel_layout::contiguous ? sh.len + 3 : sh.channels + 2;
    const std::size_t n =
        static_cast<std::size_t>(sh.layout == channel_layout::contiguous ? sh.channels * ld : sh.len * ld);
    const auto grad = spread_values<T>(n, seed + static_cast<std::uint64_t>(sh.channels * 1000 + sh.len));
    const channel_matrix<const T> g{grad.data(), sh.channels, sh.len, ld, sh.layout};
    std::vector<std::int32_t> idx;
    for (std::int64_t c = sh.channels - 1; c >= 0; c -= 2) { // every other channel, ascending below
      idx.insert(idx.begin(), static_cast<std::int32_t>(c));
    }
    const auto count = static_cast<std::int64_t>(idx.size());
    double ref = 0.5;
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t i = 0; i < sh.len; ++i) {
        ref += std::fabs(static_cast<double>(zenflow::to_float(g(idx[static_cast<std::size_t>(r)], i))));
      }
    }
    std::vector<float> row_l1(static_cast<std::size_t>(count));
    for (const auto path : zf_optim_test::supported_paths()) {
      SCOPED_TRACE("path " + std::to_string(static_cast<int>(path)) + " channels " +
                   std::to_string(sh.channels) + " len " + std::to_string(sh.len) + " " +
                   zf_test::seed_note(seed));
      zf_optim_test::path_guard guard(path);
      // The body, as the CUDA kernels run it.
      float body = 0.5f;
      const zenflow::detail::l1_mass_args a{grad.data(),
                                            type_of<T>(),
                                            sh.channels,
                                            sh.len,
                                            ld,
                                            sh.layout,
                                            sh.layout == channel_layout::contiguous,
                                            idx.data(),
                                            count,
                                            row_l1.data(),
                                            nullptr,
                                            &body};
      zenflow::detail::host_l1_mass(a);
      EXPECT_NEAR(body, ref, 1e-5 * ref);

      // The pack's twin.
      float pack = 0.5f;
      std::vector<T> dst(static_cast<std::size_t>(count * sh.len));
      ASSERT_EQ(zenflow::host::gather_channels(g, idx.data(), count, dst.data(), &pack, nullptr),
                cudaSuccess);
      EXPECT_EQ(bits(pack), bits(body)) << pack << " vs " << body;

      // The update's twin (the weights share the gradient's layout, as in the engine).
      std::vector<T> w = zf_test::random_values<T>(n, seed + 7);
      const channel_matrix<T> wm{w.data(), sh.channels, sh.len, ld, sh.layout};
      std::vector<float> master(static_cast<std::size_t>(count * sh.len), 0.25f);
      std::vector<float> m(master.size(), 0.0f), v(master.size(), 0.0f);
      std::vector<std::int32_t> counts(static_cast<std::size_t>(count), 3);
      float crit = 0.5f;
      const zenflow::selected_rows rows{idx.data(), count, master.data(), m.data(), v.data(), counts.data()};
      ASSERT_EQ(zenflow::host::adamw_selective(wm, g, rows, zenflow::adamw_hparams{}, {}, &crit),
                cudaSuccess);
      EXPECT_EQ(bits(crit), bits(body)) << crit << " vs " << body;

      // A skipped step adds nothing, on both sides.
      const std::uint32_t skip = 1;
      float skipped_body = 0.5f;
      auto sa = a;
      sa.skip = &skip;
      sa.l1 = &skipped_body;
      zenflow::detail::host_l1_mass(sa);
      float skipped_crit = 0.5f;
      ASSERT_EQ(zenflow::host::adamw_selective(wm, g, rows, zenflow::adamw_hparams{}, {nullptr, &skip},
                                               &skipped_crit),
                cudaSuccess);
      EXPECT_EQ(skipped_body, 0.5f);
      EXPECT_EQ(skipped_crit, 0.5f);
    }
    // The test can fail: a plain sequential sum of the same rows (another order) differs in the
    // last bits for some of these shapes.
    float naive = 0.5f;
    float rows_sum = 0.0f;
    for (std::int64_t r = 0; r < count; ++r) {
      rows_sum += zenflow::detail::l1_row_sequential(g, idx[static_cast<std::size_t>(r)]);
    }
    naive += rows_sum;
    float body = 0.5f;
    const zenflow::detail::l1_mass_args a{grad.data(),
                                          type_of<T>(),
                                          sh.channels,
                                          sh.len,
                                          ld,
                                          sh.layout,
                                          sh.layout == channel_layout::contiguous,
                                          idx.data(),
                                          count,
                                          row_l1.data(),
                                          nullptr,
                                          &body};
    zenflow::detail::host_l1_mass(a);
    order_mattered += bits(naive) != bits(body) ? 1 : 0;
  }
  EXPECT_GT(order_mattered, 0) << "inputs too tame: every order gave the same bits";
}

TEST(l1_mass, kernel_bodies_match_the_host_twins_bit_for_bit_f32) {
  check_all<float>(zf_test::base_seed());
}
TEST(l1_mass, kernel_bodies_match_the_host_twins_bit_for_bit_f16) {
  check_all<zenflow::half>(zf_test::base_seed() + 1);
}
TEST(l1_mass, kernel_bodies_match_the_host_twins_bit_for_bit_bf16) {
  check_all<zenflow::bfloat16>(zf_test::base_seed() + 2);
}

// The device's arithmetic is written so that a consumer's -ftz=true / --use_fast_math cannot
// flush subnormals (the PTX is checked by cpu.engine.ptx_no_ftz); its host side must be the
// plain arithmetic: |x| a bit clear with std::fabs's bits (-0 and NaN included), widening and
// narrowing exact, subnormals kept. A row of subnormals has its exact mass.
TEST(l1_mass, the_ftz_free_helpers_have_the_host_arithmetics_bits) {
  using zenflow::detail::abs_f32;
  using zenflow::detail::f32_to_f64;
  using zenflow::detail::f64_to_f32;
  const float sub = std::numeric_limits<float>::denorm_min();
  for (const float x :
       {0.0f, -0.0f, 1.5f, -1.5f, sub, -sub, -3.0f * sub, std::numeric_limits<float>::min() / 4,
        -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()}) {
    const float a = abs_f32(x);
    const float f = std::fabs(x);
    EXPECT_EQ(std::memcmp(&a, &f, 4), 0) << x;
    const double w = f32_to_f64(x);
    const double wc = static_cast<double>(x);
    EXPECT_EQ(std::memcmp(&w, &wc, 8), 0) << x;
    const float n = f64_to_f32(wc / 3);
    const float nc = static_cast<float>(wc / 3);
    EXPECT_EQ(std::memcmp(&n, &nc, 4), 0) << x;
  }
  EXPECT_EQ(f32_to_f64(-sub), -static_cast<double>(sub));
  EXPECT_EQ(f64_to_f32(static_cast<double>(sub) * 2.4), 2 * sub); // rounded, not flushed

  constexpr std::int64_t len = 37; // 2 whole groups of 16 and a tail
  std::vector<float> g(static_cast<std::size_t>(2 * len));
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = (i % 2 == 0 ? 1.0f : -1.0f) * static_cast<float>(i + 1) * sub;
  }
  std::vector<std::int32_t> idx{1, 0};
  std::vector<float> row_l1(2);
  for (const bool lanes : {true, false}) {
    float mass = 0.0f;
    zenflow::detail::l1_mass_args a{
        g.data(), zenflow::dtype::f32, 2, len,           len,     channel_layout::contiguous,
        lanes,    idx.data(),          2, row_l1.data(), nullptr, &mass};
    zenflow::detail::host_l1_mass(a);
    // Every partial sum is a multiple of denorm_min below 2^-126: exact, the mass sum(i + 1) sub.
    EXPECT_EQ(mass, static_cast<float>((2 * len) * (2 * len + 1) / 2) * sub) << "lanes " << lanes;
    EXPECT_EQ(row_l1[1], static_cast<float>(len * (len + 1) / 2) * sub);
  }
}

} // namespace
