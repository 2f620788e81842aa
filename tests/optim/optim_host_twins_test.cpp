// cpu tier of the optimizer, the host twins of the device launchers (host::adamw_dense_multi,
// adamw_selective, gather/scatter of channels, the L1 mass): against the float64 reference and
// the scalar math on every path and thread count, and their argument validation.
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

// ---------------------------------------------------------------------------------------------
// Host twins of the device launchers.

template <class T>
void check_dense() {
  const std::uint64_t seed = zf_test::base_seed() + 40;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(type_name<T>());
  const std::vector<std::int64_t> sizes = {1, 5, 4096, 70001, 0, 33};
  std::vector<std::vector<float>> master, m, v;
  std::vector<std::vector<T>> w, g;
  std::vector<zenflow::adamw_tensor<T>> desc;
  std::vector<std::int32_t> counts;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = static_cast<std::size_t>(sizes[t]);
    master.push_back(uniform(n, seed + t));
    m.push_back(uniform(n, seed + t + 100, 0.01f));
    v.push_back(positive(n, seed + t + 200));
    w.push_back(narrow<T>(master.back()));
    g.push_back(narrow<T>(uniform(n, seed + t + 300)));
    counts.push_back(static_cast<std::int32_t>(t * 3));
  }
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    desc.push_back({w[t].data(), g[t].data(), master[t].data(), m[t].data(), v[t].data(), sizes[t]});
  }
  const auto master0 = master, m0 = m, v0 = v;
  const auto w0 = w;
  const auto counts0 = counts;
  adamw_hparams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  const float scale = 0.25f;
  const std::uint32_t skip = 1, no_skip = 0;
  zenflow::worker_pool pool(2);

  // Skipped: nothing changes.
  ASSERT_EQ(host::adamw_dense<T>(desc.data(), static_cast<int>(desc.size()), counts.data(), hp, &scale, &skip,
                                 &pool),
            cudaSuccess);
  EXPECT_EQ(counts, counts0);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    EXPECT_TRUE(same_bits(master[t], master0[t]) && same_bits(w[t], w0[t]) && same_bits(m[t], m0[t]));
  }
  // Two real steps.
  for (int step = 0; step < 2; ++step) {
    ASSERT_EQ(host::adamw_dense<T>(desc.data(), static_cast<int>(desc.size()), counts.data(), hp, &scale,
                                   &no_skip, &pool),
              cudaSuccess);
  }
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    EXPECT_EQ(counts[t], counts0[t] + 2);
    for (std::size_t i = 0; i < master[t].size(); ++i) {
      float p = master0[t][i], mm = m0[t][i], vv = v0[t][i];
      ref_state r{p, mm, vv};
      for (int step = 0; step < 2; ++step) {
        const auto c = zenflow::make_adam_constants(hp, counts0[t] + 1 + step);
        zenflow::adam_update(p, mm, vv, g[t][i], scale, c);
        ref_step(r, zenflow::to_float(g[t][i]), scale, hp, counts0[t] + 1 + step);
      }
      ASSERT_EQ(bits(master[t][i]), bits(p)) << t << "," << i;
      ASSERT_EQ(bits(w[t][i]), bits(zenflow::from_float<T>(p))) << t << "," << i;
      ASSERT_TRUE(near(master[t][i], r.p, 1e-6, 1e-5)) << t << "," << i;
    }
  }
  // Null grad scale and skip = 1.0 and not skipped; null weights = no working copy.
  auto d2 = desc;
  d2[2].weights = nullptr;
  const auto w2 = w[2];
  ASSERT_EQ(host::adamw_dense<T>(d2.data(), static_cast<int>(d2.size()), counts.data(), hp, nullptr, nullptr,
                                 nullptr),
            cudaSuccess);
  EXPECT_TRUE(same_bits(w[2], w2));
  EXPECT_EQ(counts[2], counts0[2] + 3);
}

TEST(optim_host, dense_multi_tensor_f32) {
  check_dense<float>();
}
TEST(optim_host, dense_multi_tensor_f16) {
  check_dense<half>();
}
TEST(optim_host, dense_multi_tensor_bf16) {
  check_dense<bfloat16>();
}

template <class T>
void check_selective(zenflow::channel_layout layout) {
  const std::uint64_t seed = zf_test::base_seed() + 50;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string(type_name<T>()) +
               (layout == zenflow::channel_layout::contiguous ? " contiguous" : " strided"));
  const std::int64_t channels = 37, len = 53;
  const std::int64_t ld = layout == zenflow::channel_layout::contiguous ? len + 3 : channels + 2;
  const std::size_t storage =
      static_cast<std::size_t>(layout == zenflow::channel_layout::contiguous ? channels * ld : len * ld);
  auto w = narrow<T>(uniform(storage, seed));
  const auto g = narrow<T>(uniform(storage, seed + 1));
  const std::vector<std::int32_t> idx = {0, 1, 5, 6, 7, 20, 36};
  const auto k = static_cast<std::int64_t>(idx.size());
  const std::size_t state_n = static_cast<std::size_t>(k * len);
  auto master = uniform(state_n, seed + 2);
  auto m = uniform(state_n, seed + 3, 0.01f);
  auto v = positive(state_n, seed + 4);
  std::vector<std::int32_t> counts = {0, 4, 9, 1, 0, 100, 7};
  const auto w0 = w;
  const auto master0 = master, m0 = m, v0 = v;
  const auto counts0 = counts;
  zenflow::channel_matrix<T> wm{w.data(), channels, len, ld, layout};
  zenflow::channel_matrix<const T> gm{g.data(), channels, len, ld, layout};
  adamw_hparams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.05f;
  const float scale = 2.0f;
  const std::uint32_t skip = 1;
  float l1 = 10.0f;
  // Skipped: nothing, l1 included.
  const zenflow::selected_rows rows{idx.data(), k, master.data(), m.data(), v.data(), counts.data()};
  ASSERT_EQ(host::adamw_selective<T>(wm, gm, rows, hp, {&scale, &skip}, &l1, nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(w, w0) && same_bits(master, master0) && counts == counts0);
  EXPECT_EQ(l1, 10.0f);
  zenflow::worker_pool pool(2);
  ASSERT_EQ(host::adamw_selective<T>(wm, gm, rows, hp, {&scale, nullptr}, &l1, &pool), cudaSuccess);
  double l1_ref = 10.0;
  std::vector<bool> selected(static_cast<std::size_t>(channels), false);
  for (std::int64_t r = 0; r < k; ++r) {
    const std::int64_t c = idx[static_cast<std::size_t>(r)];
    selected[static_cast<std::size_t>(c)] = true;
    EXPECT_EQ(counts[static_cast<std::size_t>(r)], counts0[static_cast<std::size_t>(r)] + 1);
    const auto kc = zenflow::make_adam_constants(hp, counts0[static_cast<std::size_t>(r)] + 1);
    for (std::int64_t i = 0; i < len; ++i) {
      const std::size_t so = static_cast<std::size_t>(r * len + i);
      const std::size_t mo = static_cast<std::size_t>(wm.offset(c, i));
      float p = master0[so], mm = m0[so], vv = v0[so];
      const float np = zenflow::adam_update(p, mm, vv, g[mo], scale, kc);
      ref_state rs{master0[so], m0[so], v0[so]};
      ref_step(rs, zenflow::to_float(g[mo]), scale, hp, counts0[static_cast<std::size_t>(r)] + 1);
      ASSERT_EQ(bits(master[so]), bits(np));
      ASSERT_EQ(bits(m[so]), bits(mm));
      ASSERT_EQ(bits(w[mo]), bits(zenflow::from_float<T>(np)));
      ASSERT_TRUE(near(master[so], rs.p, 1e-6, 1e-5));
      l1_ref += std::abs(static_cast<double>(zenflow::to_float(g[mo])));
    }
  }
  EXPECT_TRUE(near(l1, l1_ref, 0, 1e-5));
  // Unlisted channels (and padding) untouched.
  for (std::size_t o = 0; o < storage; ++o) {
    const std::int64_t c = layout == zenflow::channel_layout::contiguous ? static_cast<std::int64_t>(o) / ld
                                                                         : static_cast<std::int64_t>(o) % ld;
    const std::int64_t i = layout == zenflow::channel_layout::contiguous ? static_cast<std::int64_t>(o) % ld
                                                                         : static_cast<std::int64_t>(o) / ld;
    if (c >= channels || i >= len || !selected[static_cast<std::size_t>(c)]) {
      ASSERT_EQ(bits(w[o]), bits(w0[o])) << o;
    }
  }
}

TEST(optim_host, selective_contiguous_all_dtypes) {
  check_selective<float>(zenflow::channel_layout::contiguous);
  check_selective<half>(zenflow::channel_layout::contiguous);
  check_selective<bfloat16>(zenflow::channel_layout::contiguous);
}
TEST(optim_host, selective_strided_all_dtypes) {
  check_selective<float>(zenflow::channel_layout::strided);
  check_selective<half>(zenflow::channel_layout::strided);
  check_selective<bfloat16>(zenflow::channel_layout::strided);
}

template <class Tin, class Tout>
void check_gather_scatter(zenflow::channel_layout layout) {
  const std::uint64_t seed = zf_test::base_seed() + 60;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string(type_name<Tin>()) + "->" + type_name<Tout>() +
               (layout == zenflow::channel_layout::contiguous ? " contiguous" : " strided"));
  const std::int64_t channels = 29, len = 70;
  const std::int64_t ld = layout == zenflow::channel_layout::contiguous ? len + 1 : channels + 5;
  const std::size_t storage =
      static_cast<std::size_t>(layout == zenflow::channel_layout::contiguous ? channels * ld : len * ld);
  const auto src = narrow<Tin>(uniform(storage, seed, 100.0f));
  const std::vector<std::int32_t> idx = {1, 2, 3, 10, 11, 27, 28};
  const auto count = static_cast<std::int64_t>(idx.size());
  zenflow::channel_matrix<const Tin> sm{src.data(), channels, len, ld, layout};
  for (auto path : supported_paths()) {
    path_guard guard(path);
    std::vector<Tout> packed(static_cast<std::size_t>(count * len));
    float l1 = 1.0f;
    zenflow::worker_pool pool(2);
    ASSERT_EQ((host::gather_channels<Tin, Tout>(sm, idx.data(), count, packed.data(), &l1, &pool)),
              cudaSuccess);
    double l1_ref = 1.0;
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t i = 0; i < len; ++i) {
        const float x =
            zenflow::to_float(src[static_cast<std::size_t>(sm.offset(idx[static_cast<std::size_t>(r)], i))]);
        ASSERT_EQ(bits(packed[static_cast<std::size_t>(r * len + i)]), bits(zenflow::from_float<Tout>(x)));
        l1_ref += std::abs(static_cast<double>(x));
      }
    }
    EXPECT_TRUE(near(l1, l1_ref, 0, 1e-5));
    // Scatter back into a fresh matrix: listed channels get the values, the rest is untouched.
    std::vector<Tin> dst(storage, zenflow::from_float<Tin>(-7.0f));
    zenflow::channel_matrix<Tin> dm{dst.data(), channels, len, ld, layout};
    ASSERT_EQ((host::scatter_channels<Tout, Tin>(packed.data(), idx.data(), count, dm, &pool)), cudaSuccess);
    for (std::int64_t c = 0; c < channels; ++c) {
      const bool listed = std::find(idx.begin(), idx.end(), c) != idx.end();
      for (std::int64_t i = 0; i < len; ++i) {
        const std::size_t o = static_cast<std::size_t>(sm.offset(c, i));
        const auto expect = listed ? zenflow::from_float<Tin>(zenflow::to_float(
                                         zenflow::from_float<Tout>(zenflow::to_float(src[o]))))
                                   : zenflow::from_float<Tin>(-7.0f);
        ASSERT_EQ(bits(dst[o]), bits(expect)) << c << "," << i;
      }
    }
  }
}

TEST(optim_host, gather_scatter_contiguous) {
  check_gather_scatter<bfloat16, bfloat16>(zenflow::channel_layout::contiguous);
  check_gather_scatter<float, bfloat16>(zenflow::channel_layout::contiguous);
  check_gather_scatter<float, half>(zenflow::channel_layout::contiguous);
  check_gather_scatter<half, float>(zenflow::channel_layout::contiguous);
  check_gather_scatter<float, float>(zenflow::channel_layout::contiguous);
}
TEST(optim_host, gather_scatter_strided) {
  check_gather_scatter<bfloat16, bfloat16>(zenflow::channel_layout::strided);
  check_gather_scatter<float, half>(zenflow::channel_layout::strided);
}

TEST(optim_host, l1_mass_is_the_same_on_every_path_and_thread_count) {
  const std::uint64_t seed = zf_test::base_seed() + 61;
  const std::int64_t channels = 300, len = 301;
  const auto src = narrow<bfloat16>(uniform(static_cast<std::size_t>(channels * len), seed));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(channels));
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<bfloat16> packed(src.size());
  float first = -1.0f;
  for (auto path : supported_paths()) {
    path_guard guard(path);
    for (unsigned threads : {1u, 3u}) {
      zenflow::worker_pool pool(threads);
      float l1 = 0.0f;
      ASSERT_EQ(
          (host::gather_channels<bfloat16, bfloat16>(zenflow::make_channel_matrix(src.data(), channels, len),
                                                     idx.data(), channels, packed.data(), &l1, &pool)),
          cudaSuccess);
      if (first < 0.0f) {
        first = l1;
      }
      EXPECT_EQ(bits(l1), bits(first)) << host::simd_path_name(path) << " threads " << threads;
    }
  }
}

TEST(optim_args, host_twins_reject_bad_arguments_and_write_nothing) {
  std::vector<float> master(16, 1.0f), m(16, 2.0f), v(16, 3.0f);
  std::vector<bfloat16> w(16, zenflow::from_float<bfloat16>(4.0f)),
      g(16, zenflow::from_float<bfloat16>(5.0f));
  std::vector<std::int32_t> counts(4, 7);
  const auto master0 = master, m0 = m, v0 = v;
  const auto w0 = w;
  const auto counts0 = counts;
  adamw_hparams hp;
  // dense
  zenflow::adamw_tensor<bfloat16> t{w.data(), g.data(), master.data(), m.data(), v.data(), 16};
  EXPECT_TRUE(
      rejected(host::adamw_dense<bfloat16>(&t, -1, counts.data(), hp, nullptr, nullptr, nullptr), "count"));
  EXPECT_TRUE(rejected(host::adamw_dense<bfloat16>(nullptr, 1, counts.data(), hp, nullptr, nullptr, nullptr),
                       "tensors"));
  EXPECT_TRUE(rejected(host::adamw_dense<bfloat16>(&t, 1, nullptr, hp, nullptr, nullptr, nullptr), "counts"));
  auto t2 = t;
  t2.grads = nullptr;
  EXPECT_TRUE(rejected(host::adamw_dense<bfloat16>(&t2, 1, counts.data(), hp, nullptr, nullptr, nullptr),
                       "tensors[].grads"));
  t2 = t;
  t2.size = -3;
  EXPECT_TRUE(rejected(host::adamw_dense<bfloat16>(&t2, 1, counts.data(), hp, nullptr, nullptr, nullptr),
                       "tensors[].size"));
  adamw_hparams bad = hp;
  bad.eps = -1.0f;
  EXPECT_TRUE(
      rejected(host::adamw_dense<bfloat16>(&t, 1, counts.data(), bad, nullptr, nullptr, nullptr), "hp.eps"));
  // selective: 4 channels x 4
  auto wm = zenflow::make_channel_matrix(w.data(), 4, 4);
  auto gm = zenflow::make_channel_matrix<const bfloat16>(g.data(), 4, 4);
  const std::vector<std::int32_t> idx = {0, 2};
  const std::vector<std::int32_t> bad_idx = {0, 4};
  auto sel = [&](zenflow::channel_matrix<bfloat16> a, zenflow::channel_matrix<const bfloat16> b,
                 const std::int32_t* i, std::int64_t k, float* p, std::int32_t* c) {
    return host::adamw_selective<bfloat16>(a, b, {i, k, p, m.data(), v.data(), c}, hp, {}, nullptr, nullptr);
  };
  EXPECT_TRUE(rejected(sel(wm, gm, idx.data(), 5, master.data(), counts.data()), "rows.count"));
  EXPECT_TRUE(rejected(sel(wm, gm, nullptr, 2, master.data(), counts.data()), "rows.idx"));
  EXPECT_TRUE(rejected(sel(wm, gm, bad_idx.data(), 2, master.data(), counts.data()), "idx"));
  EXPECT_TRUE(rejected(sel(wm, gm, idx.data(), 2, nullptr, counts.data()), "rows.master"));
  EXPECT_TRUE(rejected(sel(wm, gm, idx.data(), 2, master.data(), nullptr), "rows.counts"));
  auto gm_bad = gm;
  gm_bad.channels = 3;
  EXPECT_TRUE(rejected(sel(wm, gm_bad, idx.data(), 2, master.data(), counts.data()), "grads"));
  auto wm_bad = wm;
  wm_bad.ld = 2;
  EXPECT_TRUE(rejected(sel(wm_bad, gm, idx.data(), 2, master.data(), counts.data()), "ld"));
  wm_bad = wm;
  wm_bad.data = nullptr;
  EXPECT_TRUE(rejected(sel(wm_bad, gm, idx.data(), 2, master.data(), counts.data()), "weights"));
  // gather / scatter
  std::vector<float> packed(8, -1.0f);
  const auto packed0 = packed;
  float l1 = 0.0f;
  EXPECT_TRUE(
      rejected((host::gather_channels<bfloat16, float>(gm, idx.data(), 2, nullptr, &l1, nullptr)), "dst"));
  EXPECT_TRUE(rejected(
      (host::gather_channels<bfloat16, float>(gm, bad_idx.data(), 2, packed.data(), &l1, nullptr)), "idx"));
  EXPECT_TRUE(rejected(
      (host::gather_channels<bfloat16, float>(gm, idx.data(), -1, packed.data(), &l1, nullptr)), "count"));
  EXPECT_TRUE(
      rejected((host::scatter_channels<float, bfloat16>(nullptr, idx.data(), 2, wm, nullptr)), "src"));
  EXPECT_TRUE(rejected(
      (host::scatter_channels<float, bfloat16>(packed.data(), bad_idx.data(), 2, wm, nullptr)), "idx"));
  EXPECT_TRUE(rejected(
      (host::scatter_channels<float, bfloat16>(packed.data(), idx.data(), 2, wm_bad, nullptr)), "dst"));
  EXPECT_EQ(l1, 0.0f);
  EXPECT_TRUE(same_bits(master, master0) && same_bits(m, m0) && same_bits(v, v0) && same_bits(w, w0) &&
              counts == counts0 && same_bits(packed, packed0));
}

} // namespace
