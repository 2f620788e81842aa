// Zen-auto's masses in one order on every backend (schedule/l1_mass.hpp). The CUDA launchers
// compute them row by row with the bodies of schedule/detail/l1_mass_body.hpp; the engine's host
// and emulated backends fused into the update and the pack (the optimizer's host twins). Here
// host::l1_mass, which runs the bodies, must give the fused twins' bits on every SIMD path,
// layout, dtype and odd size; both must be the L1 mass (a float64 sum, within float rounding); the
// batched calls must be the single ones; and every bad argument is named with nothing written.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/schedule/l1_mass.hpp>

#include "../optim/simd_paths.hpp"
#include "../support/random.hpp"
#include "rejects.hpp"

namespace {

using zf_schedule_test::expect_rejected;

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
      const auto a = zenflow::make_l1_mass_item(g, idx.data(), count, row_l1.data(), nullptr, &body);
      ASSERT_EQ(zenflow::host::l1_mass(a), cudaSuccess);
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
      ASSERT_EQ(zenflow::host::l1_mass(sa), cudaSuccess);
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
    const auto a = zenflow::make_l1_mass_item(g, idx.data(), count, row_l1.data(), nullptr, &body);
    ASSERT_EQ(zenflow::host::l1_mass(a), cudaSuccess);
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
    zenflow::l1_mass_item a{
        g.data(), zenflow::dtype::f32, 2, len,           len,     channel_layout::contiguous,
        lanes,    idx.data(),          2, row_l1.data(), nullptr, &mass};
    ASSERT_EQ(zenflow::host::l1_mass(a), cudaSuccess);
    // Every partial sum is a multiple of denorm_min below 2^-126: exact, the mass sum(i + 1) sub.
    EXPECT_EQ(mass, static_cast<float>((2 * len) * (2 * len + 1) / 2) * sub) << "lanes " << lanes;
    EXPECT_EQ(row_l1[1], static_cast<float>(len * (len + 1) / 2) * sub);
  }
}

// The batched calls are the single ones, item by item (a skipped item and one without a mass
// included), whatever the thread count; the second half alone adds given rows in order.
TEST(l1_mass, batched_calls_equal_the_single_ones_and_the_float64_mass) {
  const std::uint64_t seed = zf_test::base_seed() + 30;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const auto ga = spread_values<float>(60 * 40, seed);
  const auto gb = spread_values<zenflow::bfloat16>(33 * 50, seed + 1);
  const channel_matrix<const float> a{ga.data(), 60, 40, 40, channel_layout::contiguous};
  const channel_matrix<const zenflow::bfloat16> b{gb.data(), 33, 50, 33,
                                                  channel_layout::strided}; // ld >= channels
  std::vector<std::int32_t> ia, ib;
  for (std::int32_t c = 0; c < 60; c += 3) {
    ia.push_back(c);
  }
  for (std::int32_t c = 32; c >= 0; c -= 2) {
    ib.push_back(c); // any order: the rows are added in the list's order
  }
  const std::uint32_t skip = 1;
  std::vector<float> rows(200, -1.0f);
  float mass[4] = {0.25f, 0.5f, 0.75f, 1.0f};
  std::vector<zenflow::l1_mass_item> items = {
      zenflow::make_l1_mass_item(a, ia.data(), std::int64_t(ia.size()), rows.data(), nullptr, &mass[0]),
      zenflow::make_l1_mass_item(b, ib.data(), std::int64_t(ib.size()), rows.data() + 50, nullptr, &mass[1]),
      zenflow::make_l1_mass_item(a, ia.data(), std::int64_t(ia.size()), rows.data() + 100, &skip, &mass[2]),
      zenflow::make_l1_mass_item(b, ib.data(), std::int64_t(ib.size()), rows.data() + 150, nullptr, nullptr),
  };
  EXPECT_TRUE(items[0].lanes);
  EXPECT_FALSE(items[1].lanes);
  zenflow::worker_pool pool(3);
  ASSERT_EQ(zenflow::host::l1_mass_batched(items.data(), 4, 20, &pool), cudaSuccess);
  EXPECT_EQ(mass[2], 0.75f) << "a skipped item adds nothing";
  EXPECT_EQ(rows[100], -1.0f) << "a skipped item writes no row";
  EXPECT_EQ(rows[150], -1.0f) << "an item without a mass writes no row";
  EXPECT_EQ(mass[3], 1.0f);
  // Each against its single call on the calling thread, and the float64 sum.
  const auto check = [&](const auto& g, const std::vector<std::int32_t>& idx, float start, float got,
                         const float* got_rows) {
    std::vector<float> r(idx.size());
    float single = start;
    auto it = zenflow::make_l1_mass_item(g, idx.data(), std::int64_t(idx.size()), r.data(), nullptr, &single);
    ASSERT_EQ(zenflow::host::l1_mass(it), cudaSuccess);
    EXPECT_EQ(bits(single), bits(got));
    EXPECT_EQ(0, std::memcmp(r.data(), got_rows, r.size() * 4));
    double ref = start;
    for (const std::int32_t c : idx) {
      for (std::int64_t i = 0; i < g.channel_len; ++i) {
        ref += std::fabs(static_cast<double>(zenflow::to_float(g(c, i))));
      }
    }
    EXPECT_NEAR(got, ref, 1e-5 * ref);
  };
  check(a, ia, 0.25f, mass[0], rows.data());
  check(b, ib, 0.5f, mass[1], rows.data() + 50);
  // The second half alone: given rows in order, the sum added (a float64 check of the order-free
  // value, and the bits of a left-to-right float sum, which is what the order promises).
  std::vector<float> given = {3.5f, 1e-3f, 2.25f, 7.0f, 1e7f, 0.125f};
  float acc = 1.0f;
  zenflow::l1_mass_item add{};
  add.row_l1 = given.data();
  add.count = std::int64_t(given.size());
  add.l1 = &acc;
  ASSERT_EQ(zenflow::host::l1_mass_add_rows_batched(&add, 1), cudaSuccess);
  float sum = 0.0f;
  for (const float x : given) {
    sum += x;
  }
  EXPECT_EQ(bits(acc), bits(1.0f + sum));
  EXPECT_NEAR(acc, 1.0 + 3.5 + 1e-3 + 2.25 + 7.0 + 1e7 + 0.125, 4.0); // floats near 1e7 are 1 apart
  add.skip = &skip;
  ASSERT_EQ(zenflow::host::l1_mass_add_rows_batched(&add, 1), cudaSuccess);
  EXPECT_EQ(bits(acc), bits(1.0f + sum)) << "a skipped item adds nothing";
}

TEST(l1_mass_args, every_bad_argument_is_named_and_nothing_is_written) {
  std::vector<float> g(8 * 20, 1.0f), rows(8, -1.0f);
  std::vector<std::int32_t> idx = {1, 3, 5};
  float mass = 0.5f;
  const auto good = zenflow::make_l1_mass_item(zenflow::make_channel_matrix<const float>(g.data(), 8, 20),
                                               idx.data(), 3, rows.data(), nullptr, &mass);
  struct bad_case {
    const char* field;
    void (*spoil)(zenflow::l1_mass_item&);
  };
  static std::int32_t outside[3] = {1, 8, 2};
  const bad_case cases[] = {
      {"channels", [](zenflow::l1_mass_item& i) { i.channels = -1; }},
      {"channel_len", [](zenflow::l1_mass_item& i) { i.channel_len = -4; }},
      {"ld", [](zenflow::l1_mass_item& i) { i.ld = 19; }},
      {"layout", [](zenflow::l1_mass_item& i) { i.layout = static_cast<channel_layout>(5); }},
      {"type", [](zenflow::l1_mass_item& i) { i.type = static_cast<zenflow::dtype>(7); }},
      {"count", [](zenflow::l1_mass_item& i) { i.count = 9; }},
      {"count", [](zenflow::l1_mass_item& i) { i.count = -1; }},
      {"grad", [](zenflow::l1_mass_item& i) { i.grad = nullptr; }},
      {"idx", [](zenflow::l1_mass_item& i) { i.idx = nullptr; }},
      {"idx", [](zenflow::l1_mass_item& i) { i.idx = outside; }},
      {"row_l1", [](zenflow::l1_mass_item& i) { i.row_l1 = nullptr; }},
      {"lanes",
       [](zenflow::l1_mass_item& i) {
         i.layout = channel_layout::strided;
         i.ld = 8;
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    zenflow::l1_mass_item bad = good;
    c.spoil(bad);
    expect_rejected(zenflow::host::l1_mass(bad), "zenflow::host::l1_mass", c.field);
    zenflow::l1_mass_item two[2] = {good, bad};
    expect_rejected(zenflow::host::l1_mass_batched(two, 2, 9), "zenflow::host::l1_mass_batched",
                    std::string("items[1].") + c.field);
    EXPECT_EQ(mass, 0.5f) << "item 0 was computed although item 1 is invalid";
    for (const float r : rows) {
      EXPECT_EQ(r, -1.0f);
    }
  }
  expect_rejected(zenflow::host::l1_mass_batched(&good, 1, 2), "zenflow::host::l1_mass_batched", "max_rows");
  expect_rejected(zenflow::host::l1_mass_batched(&good, -1, 3), "zenflow::host::l1_mass_batched", "count");
  expect_rejected(zenflow::host::l1_mass_batched(nullptr, 1, 3), "zenflow::host::l1_mass_batched", "items");
  zenflow::l1_mass_item no_rows = good;
  no_rows.row_l1 = nullptr;
  expect_rejected(zenflow::host::l1_mass_add_rows_batched(&no_rows, 1),
                  "zenflow::host::l1_mass_add_rows_batched", "items[0].row_l1");
  zenflow::l1_mass_item negative = good;
  negative.count = -2;
  expect_rejected(zenflow::host::l1_mass_add_rows_batched(&negative, 1),
                  "zenflow::host::l1_mass_add_rows_batched", "items[0].count");
  expect_rejected(zenflow::host::l1_mass_add_rows_batched(nullptr, 1),
                  "zenflow::host::l1_mass_add_rows_batched", "items");
  EXPECT_EQ(mass, 0.5f);
  // An item without a mass is not checked and does nothing (a batch's unused entry).
  zenflow::l1_mass_item unused{};
  unused.count = 5;
  EXPECT_EQ(zenflow::host::l1_mass(unused), cudaSuccess);
  EXPECT_EQ(zenflow::host::l1_mass(good), cudaSuccess);
  EXPECT_EQ(mass, 0.5f + 60.0f);
}

} // namespace
