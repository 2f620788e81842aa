// gpu tier for the select area: the device launchers against the same float64 / brute-force
// references as the cpu tier, each also under CUDA graph capture; plus the launchers' argument
// checks and size queries, which need no device and therefore run everywhere.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>

#include "select/reference.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using zf_test::download;
using zf_test::run;
using zf_test::upload;

using zenflow::channel_layout;
using zenflow::channel_norm;
using zenflow::topk_order;

class select_gpu : public zf_test::gpu_test {};

struct norm_case {
  std::int64_t channels, len, pad;
  channel_layout layout;
  std::size_t offset; // elements: 1 makes the pointer unaligned
};

const std::vector<norm_case> norm_cases = {
    {1, 1, 0, channel_layout::contiguous, 0},      {3, 7, 2, channel_layout::contiguous, 1},
    {4096, 257, 0, channel_layout::contiguous, 0}, {300, 4099, 3, channel_layout::contiguous, 1},
    {2, 40000, 0, channel_layout::contiguous, 0},  {1000, 20000, 8, channel_layout::contiguous, 0},
    {1, 1, 0, channel_layout::strided, 0},         {37, 13, 1, channel_layout::strided, 1},
    {4096, 512, 0, channel_layout::strided, 0},    {1000, 333, 8, channel_layout::strided, 0},
    {777, 2048, 0, channel_layout::strided, 1},    {0, 5, 0, channel_layout::strided, 0},
    {5, 0, 0, channel_layout::contiguous, 0},
};

template <channel_norm Norm, class T>
void check_device_norms(bool graph) {
  zf_test::stream s;
  std::uint64_t seed = zf_test::base_seed() + 3000;
  for (const auto& c : norm_cases) {
    ++seed;
    if (c.channels * c.len > zf_test::max_case_elements) {
      continue; // the kernel emulator (support/gpu.hpp)
    }
    SCOPED_TRACE(zf_test::seed_note(seed) + " channels=" + std::to_string(c.channels) + " len=" +
                 std::to_string(c.len) + (c.layout == channel_layout::strided ? " strided" : " contiguous"));
    const std::int64_t ld = (c.layout == channel_layout::contiguous ? c.len : c.channels) + c.pad;
    const std::int64_t rows = c.layout == channel_layout::contiguous ? c.channels : c.len;
    auto host = zf_test::random_values<T>(static_cast<std::size_t>(rows * ld) + c.offset + 1, seed, 2.0f);
    if (c.channels > 2 && c.len > 2) {
      // One NaN in channel 1 (its score is NaN; the flag is set).
      const std::int64_t off = c.layout == channel_layout::contiguous ? 1 * ld + 2 : 2 * ld + 1;
      host[c.offset + static_cast<std::size_t>(off)] = zenflow::from_float<T>(std::nanf(""));
    }
    auto d_grad = upload(host, s);
    zf_test::device_buffer<float> d_scores(static_cast<std::size_t>(c.channels) + 1, s), d_total(1, s);
    zf_test::device_buffer<std::uint32_t> d_flag(1, s);
    std::size_t bytes = 0;
    const T* g = d_grad.data() + c.offset;
    ZF_CUDA_TRY(zenflow::device::channel_norms<Norm>(nullptr, bytes, g, c.channels, c.len, ld, c.layout,
                                                     d_scores.data(), {d_total.data(), d_flag.data()},
                                                     s.get()));
    zf_test::device_buffer<std::byte> temp(bytes, s);
    ZF_CUDA_TRY(zf_test::memset_async(d_scores.data(), 0xff, d_scores.bytes(), s));
    run(s, graph, [&](cudaStream_t st) {
      ZF_CUDA_TRY(zenflow::device::channel_norms<Norm>(temp.data(), bytes, g, c.channels, c.len, ld, c.layout,
                                                       d_scores.data(), {d_total.data(), d_flag.data()}, st));
    });
    const auto scores = download(d_scores, s);
    const auto total = download(d_total, s);
    const auto flag = download(d_flag, s);
    const auto ref = zf_test::reference_norms(host.data() + c.offset, c.channels, c.len, ld, c.layout, Norm);
    const double tol = zf_test::norm_tolerance(c.len, c.len);
    // The host backend's scores on the same values: the same order (norm_order.hpp), the same bits.
    std::vector<float> host_scores(static_cast<std::size_t>(c.channels) + 1);
    std::size_t host_bytes = 0;
    ZF_CUDA_TRY(zenflow::host::channel_norms<Norm>(nullptr, host_bytes, host.data() + c.offset, c.channels,
                                                   c.len, ld, c.layout, host_scores.data()));
    std::vector<std::byte> host_temp(host_bytes);
    ZF_CUDA_TRY(zenflow::host::channel_norms<Norm>(host_temp.data(), host_bytes, host.data() + c.offset,
                                                   c.channels, c.len, ld, c.layout, host_scores.data()));
    bool any_nan = false;
    for (std::int64_t ch = 0; ch < c.channels; ++ch) {
      const double r = ref[static_cast<std::size_t>(ch)];
      if (std::isnan(r)) {
        any_nan = true;
        ASSERT_TRUE(std::isnan(scores[static_cast<std::size_t>(ch)])) << ch;
        continue;
      }
      ASSERT_NEAR(scores[static_cast<std::size_t>(ch)], r, r * tol + 1e-30) << "channel " << ch;
      ASSERT_EQ(zenflow::detail::float_bits(scores[static_cast<std::size_t>(ch)]),
                zenflow::detail::float_bits(host_scores[static_cast<std::size_t>(ch)]))
          << "channel " << ch << ": the device's bits are not the host's";
    }
    EXPECT_EQ(zenflow::detail::float_bits(scores[static_cast<std::size_t>(c.channels)]), 0xffffffffu)
        << "wrote past the last channel";
    EXPECT_EQ(flag[0], any_nan ? 1u : 0u);
    if (!any_nan) {
      double t = 0;
      for (double r : ref) {
        t += r;
      }
      EXPECT_NEAR(total[0], t, t * (tol + 1e-5) + 1e-30);
    } else {
      EXPECT_TRUE(std::isnan(total[0]));
    }
  }
}

TEST_F(select_gpu, channel_norms_match_float64_reference) {
  check_device_norms<channel_norm::sq_l2, float>(false);
  check_device_norms<channel_norm::sq_l2, zenflow::half>(false);
  check_device_norms<channel_norm::sq_l2, zenflow::bfloat16>(false);
  check_device_norms<channel_norm::l1, float>(false);
  check_device_norms<channel_norm::l1, zenflow::half>(false);
  check_device_norms<channel_norm::l1, zenflow::bfloat16>(false);
}

TEST_F(select_gpu, channel_norms_match_float64_reference_under_graph_capture) {
  check_device_norms<channel_norm::sq_l2, zenflow::bfloat16>(true);
  check_device_norms<channel_norm::l1, float>(true);
}

void check_device_norms_batched(bool graph) {
  using T = zenflow::bfloat16;
  zf_test::stream s;
  // 40 items (more than one launch's worth), mixed layouts and shapes.
  const int count = 40;
  std::vector<std::vector<T>> host(count);
  std::vector<zf_test::device_buffer<T>> d_grad;
  std::vector<zf_test::device_buffer<float>> d_scores;
  std::vector<zenflow::channel_norm_item<T>> items;
  for (int i = 0; i < count; ++i) {
    const std::int64_t channels = 1 + (i * 97) % zf_test::shrink(700),
                       len = 1 + (i * 389) % zf_test::shrink(3000);
    const auto layout = i % 3 == 0 ? channel_layout::strided : channel_layout::contiguous;
    const std::int64_t ld = (layout == channel_layout::contiguous ? len : channels) + i % 2;
    const std::int64_t rows = layout == channel_layout::contiguous ? channels : len;
    host[i] = zf_test::random_values<T>(static_cast<std::size_t>(rows * ld), zf_test::base_seed() + 4000 + i);
    d_grad.push_back(upload(host[i], s));
    d_scores.emplace_back(static_cast<std::size_t>(channels), s);
    items.push_back({d_grad.back().data(), channels, len, ld, layout, d_scores.back().data()});
  }
  zf_test::device_buffer<float> d_total(count, s);
  zf_test::device_buffer<std::uint32_t> d_flag(count, s);
  std::size_t bytes = 0;
  ZF_CUDA_TRY(zenflow::device::channel_norms_batched(nullptr, bytes, items.data(), count));
  zf_test::device_buffer<std::byte> temp(bytes, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::channel_norms_batched(temp.data(), bytes, items.data(), count,
                                                       {d_total.data(), d_flag.data()}, st));
  });
  const auto total = download(d_total, s);
  const auto flag = download(d_flag, s);
  for (int i = 0; i < count; ++i) {
    const auto& it = items[static_cast<std::size_t>(i)];
    const auto scores = download(d_scores[static_cast<std::size_t>(i)], s);
    const auto ref = zf_test::reference_norms(host[i].data(), it.channels, it.channel_len, it.ld, it.layout,
                                              channel_norm::sq_l2);
    const double tol = zf_test::norm_tolerance(it.channel_len, it.channel_len);
    double t = 0;
    for (std::int64_t c = 0; c < it.channels; ++c) {
      t += ref[static_cast<std::size_t>(c)];
      ASSERT_NEAR(scores[static_cast<std::size_t>(c)], ref[static_cast<std::size_t>(c)],
                  ref[static_cast<std::size_t>(c)] * tol)
          << "item " << i << " channel " << c;
    }
    EXPECT_NEAR(total[static_cast<std::size_t>(i)], t, t * (tol + 1e-5)) << "item " << i;
    EXPECT_EQ(flag[static_cast<std::size_t>(i)], 0u) << "item " << i;
  }
}

TEST_F(select_gpu, channel_norms_batched_match_float64_reference) {
  check_device_norms_batched(false);
}
TEST_F(select_gpu, channel_norms_batched_match_float64_reference_under_graph_capture) {
  check_device_norms_batched(true);
}

TEST_F(select_gpu, channel_norms_are_bitwise_deterministic) {
  zf_test::stream s;
  const std::int64_t channels = zf_test::shrink(2048), len = zf_test::shrink(3000);
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    const auto host = zf_test::random_values<zenflow::half>(static_cast<std::size_t>(channels * len), 77);
    auto d = upload(host, s);
    zf_test::device_buffer<float> a(channels, s), b(channels, s);
    const std::int64_t ld = layout == channel_layout::contiguous ? len : channels;
    std::size_t bytes = 0;
    ZF_CUDA_TRY(
        zenflow::device::channel_norms(nullptr, bytes, d.data(), channels, len, ld, layout, a.data()));
    zf_test::device_buffer<std::byte> temp(bytes, s);
    ZF_CUDA_TRY(zenflow::device::channel_norms(temp.data(), bytes, d.data(), channels, len, ld, layout,
                                               a.data(), {}, s.get()));
    ZF_CUDA_TRY(zenflow::device::channel_norms(temp.data(), bytes, d.data(), channels, len, ld, layout,
                                               b.data(), {}, s.get()));
    const auto va = download(a, s), vb = download(b, s);
    for (std::size_t i = 0; i < va.size(); ++i) {
      ASSERT_EQ(zenflow::detail::float_bits(va[i]), zenflow::detail::float_bits(vb[i])) << i;
    }
  }
}

// ---- top-k ----

std::vector<float> topk_scores(std::int64_t n, std::uint64_t seed, int flavour) {
  auto v = zf_test::random_values<float>(static_cast<std::size_t>(n) + 1, seed, 3.0f);
  std::mt19937_64 gen(seed);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""), inf, -inf, 0.0f, -0.0f, 1e-45f, -1e-39f};
  for (auto& x : v) {
    if (flavour == 1) {
      x = static_cast<float>(gen() % 5);
    } else if (flavour == 2 && gen() % 4 == 0) {
      x = specials[gen() % 7];
    }
  }
  return v;
}

void check_device_topk(bool graph) {
  zf_test::stream s;
  std::uint64_t seed = zf_test::base_seed() + 5000;
  int sweep = 0;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{32768}, std::int64_t{32769},
                         std::int64_t{100003}, std::int64_t{(1 << 20) + 5}}) {
    if (n > (zf_test::sanitized ? 40000 : zf_test::max_case_elements)) {
      continue; // the kernel emulator (support/gpu.hpp): 32769 takes the multi-block path
    }
    for (int flavour = 0; flavour < 3; ++flavour) {
      ++seed;
      const auto host = topk_scores(n, seed, flavour);
      auto d_scores = upload(host, s);
      for (std::int64_t k : {std::int64_t{1}, n / 100, n / 10, n - 1, n}) {
        if (k < 1) {
          continue;
        }
        for (std::size_t offset : {0u, 1u}) {
          if (!zf_test::sampled(sweep++)) {
            continue;
          }
          SCOPED_TRACE(zf_test::seed_note(seed) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                       " flavour=" + std::to_string(flavour) + " offset=" + std::to_string(offset));
          zf_test::device_buffer<std::int32_t> d_idx(static_cast<std::size_t>(k), s);
          zf_test::device_buffer<float> d_val(static_cast<std::size_t>(k), s);
          std::size_t bytes = 0;
          const float* sc = d_scores.data() + offset;
          ZF_CUDA_TRY(zenflow::device::topk(nullptr, bytes, sc, n, k, d_idx.data(), d_val.data()));
          zf_test::device_buffer<std::byte> temp(bytes, s);
          run(s, graph, [&](cudaStream_t st) {
            ZF_CUDA_TRY(zenflow::device::topk(temp.data(), bytes, sc, n, k, d_idx.data(), d_val.data(),
                                              topk_order::ascending_index, st));
          });
          const auto idx = download(d_idx, s);
          const auto val = download(d_val, s);
          const auto ref = zf_test::reference_topk(host.data() + offset, n, k);
          ASSERT_EQ(idx, ref);
          for (std::size_t j = 0; j < ref.size(); ++j) {
            ASSERT_EQ(zenflow::detail::float_bits(val[j]), zenflow::detail::float_bits(host[offset + ref[j]]))
                << j;
          }
        }
      }
    }
  }
}

TEST_F(select_gpu, topk_matches_brute_force) {
  check_device_topk(false);
}
TEST_F(select_gpu, topk_matches_brute_force_under_graph_capture) {
  check_device_topk(true);
}

void check_device_topk_segmented(bool graph) {
  zf_test::stream s;
  const std::vector<std::pair<std::int64_t, std::int64_t>> nk = {
      {4096, 409}, {0, 0}, {1, 1}, {11008, 110}, {300, 0}, {777, 777}, {200000, 20000}, {28672, 2867}};
  std::vector<std::vector<float>> host;
  std::vector<zf_test::device_buffer<float>> d_scores, d_val;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  std::vector<zenflow::topk_item> items;
  for (std::size_t i = 0; i < nk.size(); ++i) {
    host.push_back(topk_scores(nk[i].first, zf_test::base_seed() + 6000 + i, static_cast<int>(i % 3)));
    d_scores.push_back(upload(host.back(), s));
    d_idx.emplace_back(static_cast<std::size_t>(nk[i].second), s);
    d_val.emplace_back(static_cast<std::size_t>(nk[i].second), s);
    items.push_back(
        {d_scores.back().data(), nk[i].first, nk[i].second, d_idx.back().data(), d_val.back().data()});
  }
  std::size_t bytes = 0;
  ZF_CUDA_TRY(
      zenflow::device::topk_segmented(nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size())));
  zf_test::device_buffer<std::byte> temp(bytes, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::topk_segmented(
        temp.data(), bytes, items.data(), static_cast<std::int64_t>(items.size()), topk_order::unsorted, st));
  });
  for (std::size_t i = 0; i < nk.size(); ++i) {
    const auto ref = zf_test::reference_topk(host[i].data(), nk[i].first, nk[i].second);
    ASSERT_EQ(download(d_idx[i], s), ref) << "segment " << i;
    const auto val = download(d_val[i], s);
    for (std::size_t j = 0; j < ref.size(); ++j) {
      ASSERT_EQ(zenflow::detail::float_bits(val[j]), zenflow::detail::float_bits(host[i][ref[j]]));
    }
  }
}

// Issue 36: +Inf scores ranked by their fp64 values (topk_item::wide), against the brute force
// and the host backend's set, over the cpu tier's cases (one past the one-block segments
// included) and more segments than one launch takes.
TEST_F(select_gpu, topk_segmented_ranks_overflowed_scores_by_their_fp64_values) {
  zf_test::stream s;
  std::vector<std::array<std::int64_t, 3>> cases = {
      {64, 4, 1},       {64, 4, 2},       {64, 4, 4},          {64, 4, 6},       {1, 1, 1},
      {5, 0, 2},        {100, 100, 37},   {3000, 300, 1},      {3000, 300, 100}, {3000, 300, 300},
      {3000, 300, 301}, {3000, 300, 500}, {40000, 2000, 1500}, {200000, 50, 10}, {200000, 3000, 2999}};
  for (int i = 0; i < 30; ++i) {
    cases.push_back({64 + i, 3 + i % 5, 1 + i % 3});
  }
  if (zf_test::sanitized) { // the kernel emulator under a sanitizer: the smaller segments only
    std::erase_if(cases, [](const auto& c) { return c[0] > 40000; });
  }
  std::vector<zf_test::overflow_scores> host;
  std::vector<zf_test::device_buffer<float>> d_scores, d_val;
  std::vector<zf_test::device_buffer<double>> d_wide;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  std::vector<zenflow::topk_item> items;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto [n, inf, k] = cases[i];
    host.push_back(zf_test::make_overflow_scores(n, inf, zf_test::base_seed() + 900 + i));
    d_scores.push_back(upload(host.back().scores, s));
    d_wide.push_back(upload(host.back().wide, s));
    d_idx.emplace_back(static_cast<std::size_t>(k), s);
    d_val.emplace_back(static_cast<std::size_t>(k), s);
    items.push_back(
        {d_scores.back().data(), n, k, d_idx.back().data(), d_val.back().data(), d_wide.back().data()});
  }
  std::size_t bytes = 0;
  ZF_CUDA_TRY(
      zenflow::device::topk_segmented(nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size())));
  zf_test::device_buffer<std::byte> temp(bytes, s);
  ZF_CUDA_TRY(zenflow::device::topk_segmented(temp.data(), bytes, items.data(),
                                              static_cast<std::int64_t>(items.size()),
                                              topk_order::ascending_index, s.get()));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& h = host[i];
    const auto ref = zf_test::reference_topk_wide(h.scores.data(), h.wide.data(), cases[i][0], cases[i][2]);
    ASSERT_EQ(download(d_idx[i], s), ref) << "segment " << i;
    const auto val = download(d_val[i], s);
    for (std::size_t j = 0; j < ref.size(); ++j) {
      ASSERT_EQ(zenflow::detail::float_bits(val[j]), zenflow::detail::float_bits(h.scores[ref[j]]));
    }
  }
}

TEST_F(select_gpu, topk_segmented_matches_brute_force) {
  check_device_topk_segmented(false);
}
TEST_F(select_gpu, topk_segmented_matches_brute_force_under_graph_capture) {
  check_device_topk_segmented(true);
}

// ---- launcher argument checks and size queries: host-side, no device needed ----

TEST(select_device_args, bad_arguments_are_rejected_by_name_before_any_launch) {
  // Fake device pointers: validation must fail before anything could touch them.
  auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x1000});
  auto* fake_idx = reinterpret_cast<std::int32_t*>(std::uintptr_t{0x2000});
  std::byte* fake_temp = reinterpret_cast<std::byte*>(std::uintptr_t{0x3000});
  std::size_t bytes = 1 << 30;
  auto expect_arg = [](cudaError_t e, const char* fn, const char* arg) {
    EXPECT_EQ(e, cudaErrorInvalidValue) << fn << " " << arg;
    EXPECT_NE(zenflow::last_error_message().find(fn), std::string::npos) << zenflow::last_error_message();
    EXPECT_NE(zenflow::last_error_message().find(std::string("'") + arg + "'"), std::string::npos)
        << zenflow::last_error_message();
  };
  const char* cn = "zenflow::device::channel_norms";
  expect_arg(zenflow::device::channel_norms(fake_temp, bytes, static_cast<const float*>(nullptr), 4, 4, 4,
                                            channel_layout::contiguous, fake),
             cn, "grad");
  expect_arg(
      zenflow::device::channel_norms(fake_temp, bytes, fake, -1, 4, 4, channel_layout::contiguous, fake), cn,
      "channels");
  expect_arg(
      zenflow::device::channel_norms(fake_temp, bytes, fake, 4, -1, 4, channel_layout::contiguous, fake), cn,
      "channel_len");
  expect_arg(
      zenflow::device::channel_norms(fake_temp, bytes, fake, 4, 8, 7, channel_layout::contiguous, fake), cn,
      "ld");
  expect_arg(zenflow::device::channel_norms(fake_temp, bytes, fake, 8, 4, 7, channel_layout::strided, fake),
             cn, "ld");
  expect_arg(
      zenflow::device::channel_norms(fake_temp, bytes, fake, 4, 4, 4, channel_layout::contiguous, nullptr),
      cn, "scores");
  std::size_t small = 1;
  expect_arg(zenflow::device::channel_norms(fake_temp, small, fake, 4, 4, 4, channel_layout::strided, fake),
             cn, "temp_bytes");
  std::vector<zenflow::channel_norm_item<float>> items = {
      {fake, 4, 4, 4, channel_layout::contiguous, fake},
      {fake, 4, 4, 4, channel_layout::contiguous, nullptr}};
  expect_arg(zenflow::device::channel_norms_batched(fake_temp, bytes, items.data(), 2),
             "zenflow::device::channel_norms_batched", "items[1].scores");
  expect_arg(zenflow::device::channel_norms_batched(fake_temp, bytes, items.data(), -1),
             "zenflow::device::channel_norms_batched", "count");

  const char* tn = "zenflow::device::topk";
  expect_arg(zenflow::device::topk(fake_temp, bytes, nullptr, 10, 2, fake_idx), tn, "scores");
  expect_arg(zenflow::device::topk(fake_temp, bytes, fake, -1, 0, fake_idx), tn, "n");
  expect_arg(zenflow::device::topk(fake_temp, bytes, fake, 10, -1, fake_idx), tn, "k");
  expect_arg(zenflow::device::topk(fake_temp, bytes, fake, 10, 11, fake_idx), tn, "k");
  expect_arg(zenflow::device::topk(fake_temp, bytes, fake, 10, 2, nullptr), tn, "indices");
  expect_arg(
      zenflow::device::topk(fake_temp, bytes, fake, 10, 2, fake_idx, nullptr, static_cast<topk_order>(5)), tn,
      "order");
  small = 8;
  expect_arg(zenflow::device::topk(fake_temp, small, fake, 1 << 20, 2, fake_idx), tn, "temp_bytes");
  std::vector<zenflow::topk_item> t_items = {{fake, 10, 2, fake_idx, nullptr},
                                             {fake, 10, 12, fake_idx, nullptr}};
  expect_arg(zenflow::device::topk_segmented(fake_temp, bytes, t_items.data(), 2),
             "zenflow::device::topk_segmented", "items[1].k");
  expect_arg(zenflow::device::topk_segmented(fake_temp, bytes, nullptr, 1), "zenflow::device::topk_segmented",
             "items");
}

TEST(select_device_args, size_queries_are_host_arithmetic_and_k0_launches_nothing) {
  auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x1000});
  auto* fake_idx = reinterpret_cast<std::int32_t*>(std::uintptr_t{0x2000});
  std::size_t bytes = 0;
  // No device on CI: these succeed only if they make no CUDA call.
  ASSERT_EQ(zenflow::device::topk(nullptr, bytes, fake, 16 << 20, 1 << 20, fake_idx), cudaSuccess);
  EXPECT_GE(bytes, std::size_t{8} * (16 << 20));
  ASSERT_EQ(zenflow::device::topk(nullptr, bytes, fake, 1000, 10, fake_idx), cudaSuccess);
  EXPECT_GT(bytes, 0u);
  ASSERT_EQ(
      zenflow::device::channel_norms(nullptr, bytes, fake, 4096, 4096, 4096, channel_layout::strided, fake),
      cudaSuccess);
  EXPECT_GE(bytes, std::size_t{4096} * 4); // row-chunk partials
  // k == 0 launches nothing (so it succeeds without a device) and writes nothing.
  std::vector<std::byte> temp(bytes);
  EXPECT_EQ(zenflow::device::topk(temp.data(), bytes, fake, 1000, 0, nullptr), cudaSuccess);
  // Zero channels launch nothing either.
  EXPECT_EQ(zenflow::device::channel_norms(temp.data(), bytes, fake, 0, 4096, 4096,
                                           channel_layout::contiguous, fake),
            cudaSuccess);
}

} // namespace
