// gpu tier of the optimizer: every device launcher against its host twin (bit for bit on
// weights, masters, moments and counts; L1 masses within float tolerance), plain and under CUDA
// graph capture, all dtypes, both layouts, aligned and unaligned pointers, skip flag and
// gradient scale read from device memory. The argument-validation tests need no device.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/optim/adamw.hpp>

#include "optim_reference.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using zf_test::download;
using zf_test::run;
using zf_test::upload;

using namespace zf_optim_test;
using zenflow::adamw_hparams;
using zenflow::bfloat16;
using zenflow::half;

class optim_gpu : public zf_test::gpu_test {};

template <class T>
void check_dense_device(bool graph) {
  const std::uint64_t seed = zf_test::base_seed() + 140;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string(type_name<T>()) + (graph ? " graph" : ""));
  zf_test::stream s;
  // 60 tensors: more than one launch's worth of descriptors; sizes odd, tiny and large; offset 1
  // on some to force the scalar path.
  const int count = 60;
  std::vector<std::vector<float>> master, m, v;
  std::vector<std::vector<T>> w, g;
  std::vector<std::int64_t> sizes, offsets;
  for (int t = 0; t < count; ++t) {
    const std::int64_t n = t == 7 ? 300001 : (t % 5 == 0 ? 0 : 1 + (t * 37) % 1000);
    sizes.push_back(n);
    offsets.push_back(t % 3 == 1 ? 1 : 0);
    const std::size_t total = static_cast<std::size_t>(n + offsets.back());
    master.push_back(uniform(total, seed + t));
    m.push_back(uniform(total, seed + t + 100, 0.01f));
    v.push_back(positive(total, seed + t + 200));
    w.push_back(narrow<T>(master.back()));
    g.push_back(narrow<T>(uniform(total, seed + t + 300)));
  }
  std::vector<std::int32_t> counts(count);
  for (int t = 0; t < count; ++t) {
    counts[static_cast<std::size_t>(t)] = t % 11;
  }
  adamw_hparams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  const float scale = 0.5f;
  // Host twin.
  auto hm = master, hmm = m, hv = v;
  auto hw = w;
  auto hc = counts;
  std::vector<zenflow::adamw_tensor<T>> hd;
  for (int t = 0; t < count; ++t) {
    const std::size_t o = static_cast<std::size_t>(offsets[static_cast<std::size_t>(t)]);
    hd.push_back({hw[t].data() + o, g[t].data() + o, hm[t].data() + o, hmm[t].data() + o, hv[t].data() + o,
                  sizes[static_cast<std::size_t>(t)]});
  }
  const std::uint32_t no = 0;
  ASSERT_EQ(zenflow::host::adamw_dense<T>(hd.data(), count, hc.data(), hp, &scale, &no, nullptr),
            cudaSuccess);
  // Device.
  std::vector<zf_test::device_buffer<float>> dm, dmm, dv;
  std::vector<zf_test::device_buffer<T>> dw, dg;
  std::vector<zenflow::adamw_tensor<T>> dd;
  for (int t = 0; t < count; ++t) {
    dm.push_back(upload(master[t], s));
    dmm.push_back(upload(m[t], s));
    dv.push_back(upload(v[t], s));
    dw.push_back(upload(w[t], s));
    dg.push_back(upload(g[t], s));
    const std::size_t o = static_cast<std::size_t>(offsets[static_cast<std::size_t>(t)]);
    dd.push_back({dw.back().data() + o, dg.back().data() + o, dm.back().data() + o, dmm.back().data() + o,
                  dv.back().data() + o, sizes[static_cast<std::size_t>(t)]});
  }
  auto dcounts = upload(counts, s);
  auto dscale = upload(std::vector<float>{scale}, s);
  auto dskip = upload(std::vector<std::uint32_t>{1u}, s);
  auto dnoskip = upload(std::vector<std::uint32_t>{0u}, s);
  // A skipped step first: nothing may change.
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::adamw_dense<T>(dd.data(), count, dcounts.data(), hp, dscale.data(),
                                                dskip.data(), st));
  });
  EXPECT_EQ(download(dcounts, s), counts);
  EXPECT_TRUE(same_bits(download(dm[7], s), master[7]));
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::adamw_dense<T>(dd.data(), count, dcounts.data(), hp, dscale.data(),
                                                dnoskip.data(), st));
  });
  EXPECT_EQ(download(dcounts, s), hc);
  for (int t = 0; t < count; ++t) {
    ASSERT_TRUE(same_bits(download(dm[t], s), hm[t])) << t;
    ASSERT_TRUE(same_bits(download(dmm[t], s), hmm[t])) << t;
    ASSERT_TRUE(same_bits(download(dv[t], s), hv[t])) << t;
    ASSERT_TRUE(same_bits(download(dw[t], s), hw[t])) << t;
  }
}

TEST_F(optim_gpu, dense_matches_host_twin_bit_for_bit) {
  check_dense_device<float>(false);
  check_dense_device<half>(false);
  check_dense_device<bfloat16>(false);
}
TEST_F(optim_gpu, dense_matches_host_twin_under_graph_capture) {
  check_dense_device<bfloat16>(true);
  check_dense_device<float>(true);
}

template <class T>
void check_selective_device(zenflow::channel_layout layout, std::int64_t len, bool graph) {
  const std::uint64_t seed = zf_test::base_seed() + 150;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const bool contiguous = layout == zenflow::channel_layout::contiguous;
  SCOPED_TRACE(std::string(type_name<T>()) + (contiguous ? " contiguous" : " strided") + " len " +
               std::to_string(len) + (graph ? " graph" : ""));
  zf_test::stream s;
  const std::int64_t channels = 203;
  const std::int64_t ld = contiguous ? len : channels + 3;
  const std::size_t storage = static_cast<std::size_t>(contiguous ? channels * ld : len * ld);
  const auto w0 = narrow<T>(uniform(storage, seed));
  const auto g = narrow<T>(uniform(storage, seed + 1));
  std::vector<std::int32_t> idx;
  for (std::int32_t c = 0; c < channels; ++c) {
    if (c % 7 == 0 || c % 11 == 3) {
      idx.push_back(c);
    }
  }
  const auto k = static_cast<std::int64_t>(idx.size());
  const std::size_t sn = static_cast<std::size_t>(k * len);
  const auto master0 = uniform(sn, seed + 2), m0 = uniform(sn, seed + 3, 0.01f), v0 = positive(sn, seed + 4);
  std::vector<std::int32_t> counts0(static_cast<std::size_t>(k));
  for (std::size_t r = 0; r < counts0.size(); ++r) {
    counts0[r] = static_cast<std::int32_t>(r % 9);
  }
  adamw_hparams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.05f;
  hp.decoupled = len % 2 == 0;
  const float scale = 0.75f;
  // Host twin.
  auto hw = w0;
  auto hmaster = master0, hm = m0, hv = v0;
  auto hc = counts0;
  float hl1 = 0.0f;
  ASSERT_EQ(zenflow::host::adamw_selective<T>(
                {hw.data(), channels, len, ld, layout}, {g.data(), channels, len, ld, layout},
                {idx.data(), k, hmaster.data(), hm.data(), hv.data(), hc.data()}, hp, {&scale, nullptr}, &hl1,
                nullptr),
            cudaSuccess);
  // Device.
  auto dw = upload(w0, s);
  auto dg = upload(g, s);
  auto didx = upload(idx, s);
  auto dmaster = upload(master0, s), dm = upload(m0, s), dv = upload(v0, s);
  auto dc = upload(counts0, s);
  auto dscale = upload(std::vector<float>{scale}, s);
  auto dl1 = upload(std::vector<float>{0.0f}, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::adamw_selective<T>(
        {dw.data(), channels, len, ld, layout}, {dg.data(), channels, len, ld, layout},
        {didx.data(), k, dmaster.data(), dm.data(), dv.data(), dc.data()}, hp, {dscale.data(), nullptr},
        dl1.data(), st));
  });
  EXPECT_TRUE(same_bits(download(dw, s), hw));
  EXPECT_TRUE(same_bits(download(dmaster, s), hmaster));
  EXPECT_TRUE(same_bits(download(dm, s), hm));
  EXPECT_TRUE(same_bits(download(dv, s), hv));
  EXPECT_EQ(download(dc, s), hc);
  EXPECT_TRUE(near(download(dl1, s)[0], hl1, 0, 1e-5));
}

TEST_F(optim_gpu, selective_matches_host_twin_bit_for_bit) {
  int sweep = 0;
  for (auto layout : {zenflow::channel_layout::contiguous, zenflow::channel_layout::strided}) {
    for (std::int64_t len : {1, 61, 256, 4099, 8192}) {
      if (zf_test::sampled(sweep++)) {
        check_selective_device<float>(layout, len, false);
      }
      if (zf_test::sampled(sweep++)) {
        check_selective_device<half>(layout, len, false);
      }
      if (zf_test::sampled(sweep++)) {
        check_selective_device<bfloat16>(layout, len, false);
      }
    }
  }
}
TEST_F(optim_gpu, selective_matches_host_twin_under_graph_capture) {
  check_selective_device<bfloat16>(zenflow::channel_layout::contiguous, 4096, true);
  check_selective_device<bfloat16>(zenflow::channel_layout::strided, 96, true);
}

/// The batched selective AdamW (one launch for several matrices, counts advanced in it) against
/// its host twin, bit for bit: contiguous (L % 4 != 0, longer than a block's 4096 elements) and
/// strided matrices (more than 32 rows), their own lr scale and weight decay.
template <class T>
void check_selective_batched_device(bool graph) {
  const std::uint64_t seed = zf_test::base_seed() + 160;
  SCOPED_TRACE(zf_test::seed_note(seed));
  SCOPED_TRACE(std::string(type_name<T>()) + (graph ? " graph" : ""));
  zf_test::stream s;
  const std::int64_t channels = 203;
  const std::int64_t lens[] = {61, 4099, 96, 256, 1};
  struct mat {
    std::int64_t len, ld;
    zenflow::channel_layout layout;
    std::vector<T> w, g;
    std::vector<std::int32_t> idx, counts;
    std::vector<float> master, m, v;
    zf_test::device_buffer<T> dw, dg;
    zf_test::device_buffer<std::int32_t> didx, dc;
    zf_test::device_buffer<float> dmaster, dm, dv;
  };
  std::vector<mat> mats;
  for (int i = 0; i < 5; ++i) {
    mat x;
    x.len = lens[i];
    x.layout = i == 2 || i == 4 ? zenflow::channel_layout::strided : zenflow::channel_layout::contiguous;
    x.ld = x.layout == zenflow::channel_layout::contiguous ? x.len : channels + 1;
    const auto storage = static_cast<std::size_t>(
        x.layout == zenflow::channel_layout::contiguous ? channels * x.ld : x.len * x.ld);
    x.w = narrow<T>(uniform(storage, seed + 10 * i));
    x.g = narrow<T>(uniform(storage, seed + 10 * i + 1));
    for (std::int32_t c = i % 4; c < channels; c += 2 + i) {
      x.idx.push_back(c);
      x.counts.push_back(c % 13);
    }
    const std::size_t sn = x.idx.size() * static_cast<std::size_t>(x.len);
    x.master = uniform(sn, seed + 10 * i + 2);
    x.m = uniform(sn, seed + 10 * i + 3, 0.01f);
    x.v = positive(sn, seed + 10 * i + 4);
    x.dw = upload(x.w, s);
    x.dg = upload(x.g, s);
    x.didx = upload(x.idx, s);
    x.dc = upload(x.counts, s);
    x.dmaster = upload(x.master, s);
    x.dm = upload(x.m, s);
    x.dv = upload(x.v, s);
    mats.push_back(std::move(x));
  }
  std::vector<zenflow::adamw_selective_item<T>> host_items, dev_items;
  for (std::size_t i = 0; i < mats.size(); ++i) {
    auto& x = mats[i];
    const auto k = static_cast<std::int64_t>(x.idx.size());
    const float lr_scale = 0.5f + 0.5f * static_cast<float>(i);
    const float wd = 0.02f * static_cast<float>(i);
    host_items.push_back({{x.w.data(), channels, x.len, x.ld, x.layout},
                          {x.g.data(), channels, x.len, x.ld, x.layout},
                          {x.idx.data(), k, x.master.data(), x.m.data(), x.v.data(), x.counts.data()},
                          lr_scale,
                          wd,
                          0});
    dev_items.push_back({{x.dw.data(), channels, x.len, x.ld, x.layout},
                         {x.dg.data(), channels, x.len, x.ld, x.layout},
                         {x.didx.data(), k, x.dmaster.data(), x.dm.data(), x.dv.data(), x.dc.data()},
                         lr_scale,
                         wd,
                         0});
  }
  adamw_hparams hp;
  hp.lr = 2e-3f;
  const float scale = 0.75f;
  ASSERT_EQ(zenflow::host::adamw_selective_batched(host_items.data(), static_cast<int>(host_items.size()), hp,
                                                   {&scale, nullptr}),
            cudaSuccess);
  const std::int64_t blocks =
      zenflow::adamw_selective_batch_blocks(dev_items.data(), static_cast<int>(dev_items.size()));
  auto ditems = upload(dev_items, s);
  auto dscale = upload(std::vector<float>{scale}, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::adamw_selective_batched<T>(ditems.data(), static_cast<int>(dev_items.size()),
                                                            blocks, hp, {dscale.data(), nullptr}, st));
  });
  for (std::size_t i = 0; i < mats.size(); ++i) {
    SCOPED_TRACE("matrix " + std::to_string(i));
    auto& x = mats[i];
    EXPECT_TRUE(same_bits(download(x.dw, s), x.w));
    EXPECT_TRUE(same_bits(download(x.dmaster, s), x.master));
    EXPECT_TRUE(same_bits(download(x.dm, s), x.m));
    EXPECT_TRUE(same_bits(download(x.dv, s), x.v));
    EXPECT_EQ(download(x.dc, s), x.counts);
  }
}

TEST_F(optim_gpu, selective_batched_matches_host_twin_bit_for_bit) {
  check_selective_batched_device<float>(false);
  check_selective_batched_device<half>(false);
  check_selective_batched_device<bfloat16>(false);
}
TEST_F(optim_gpu, selective_batched_matches_host_twin_under_graph_capture) {
  check_selective_batched_device<bfloat16>(true);
}

TEST_F(optim_gpu, selective_skip_flag_in_device_memory_changes_nothing) {
  zf_test::stream s;
  const std::int64_t channels = 8, len = 64;
  const auto w0 = narrow<bfloat16>(uniform(static_cast<std::size_t>(channels * len), 5));
  const auto g = narrow<bfloat16>(uniform(w0.size(), 6));
  const std::vector<std::int32_t> idx = {1, 4};
  const auto master0 = uniform(static_cast<std::size_t>(2 * len), 7);
  auto dw = upload(w0, s);
  auto dg = upload(g, s);
  auto didx = upload(idx, s);
  auto dmaster = upload(master0, s), dm = upload(master0, s), dv = upload(master0, s);
  auto dc = upload(std::vector<std::int32_t>{3, 4}, s);
  auto dskip = upload(std::vector<std::uint32_t>{1u}, s);
  auto dl1 = upload(std::vector<float>{2.0f}, s);
  ZF_CUDA_TRY(zenflow::device::adamw_selective<bfloat16>(
      zenflow::make_channel_matrix(dw.data(), channels, len),
      zenflow::make_channel_matrix<const bfloat16>(dg.data(), channels, len),
      {didx.data(), 2, dmaster.data(), dm.data(), dv.data(), dc.data()}, adamw_hparams{},
      {nullptr, dskip.data()}, dl1.data(), s));
  EXPECT_TRUE(same_bits(download(dw, s), w0));
  EXPECT_TRUE(same_bits(download(dmaster, s), master0));
  EXPECT_EQ(download(dc, s), (std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(download(dl1, s)[0], 2.0f);
}

template <class Tin, class Tout>
void check_gather_scatter_device(zenflow::channel_layout layout, std::int64_t len, bool graph) {
  const std::uint64_t seed = zf_test::base_seed() + 160;
  const bool contiguous = layout == zenflow::channel_layout::contiguous;
  SCOPED_TRACE(std::string(type_name<Tin>()) + "->" + type_name<Tout>() +
               (contiguous ? " contiguous" : " strided") + " len " + std::to_string(len) +
               (graph ? " graph" : ""));
  zf_test::stream s;
  const std::int64_t channels = 150;
  const std::int64_t ld = contiguous ? len + (len % 2) : channels + 1;
  const std::size_t storage = static_cast<std::size_t>(contiguous ? channels * ld : len * ld);
  const auto src = narrow<Tin>(uniform(storage, seed, 10.0f));
  std::vector<std::int32_t> idx;
  for (std::int32_t c = 0; c < channels; c += 3) {
    idx.push_back(c);
  }
  const auto count = static_cast<std::int64_t>(idx.size());
  std::vector<Tout> hpacked(static_cast<std::size_t>(count * len));
  float hl1 = 0.0f;
  ASSERT_EQ((zenflow::host::gather_channels<Tin, Tout>({src.data(), channels, len, ld, layout}, idx.data(),
                                                       count, hpacked.data(), &hl1, nullptr)),
            cudaSuccess);
  std::vector<Tin> hdst(storage, zenflow::from_float<Tin>(-3.0f));
  ASSERT_EQ((zenflow::host::scatter_channels<Tout, Tin>(hpacked.data(), idx.data(), count,
                                                        {hdst.data(), channels, len, ld, layout}, nullptr)),
            cudaSuccess);
  auto dsrc = upload(src, s);
  auto didx = upload(idx, s);
  zf_test::device_buffer<Tout> dpacked(hpacked.size(), s);
  auto ddst = upload(std::vector<Tin>(storage, zenflow::from_float<Tin>(-3.0f)), s);
  auto dl1 = upload(std::vector<float>{0.0f}, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY((zenflow::device::gather_channels<Tin, Tout>(
        {dsrc.data(), channels, len, ld, layout}, didx.data(), count, dpacked.data(), dl1.data(), st)));
    ZF_CUDA_TRY((zenflow::device::scatter_channels<Tout, Tin>(dpacked.data(), didx.data(), count,
                                                              {ddst.data(), channels, len, ld, layout}, st)));
  });
  EXPECT_TRUE(same_bits(download(dpacked, s), hpacked));
  EXPECT_TRUE(same_bits(download(ddst, s), hdst));
  EXPECT_TRUE(near(download(dl1, s)[0], hl1, 0, 1e-5));
}

TEST_F(optim_gpu, gather_scatter_match_host_twins) {
  int sweep = 0;
  for (auto layout : {zenflow::channel_layout::contiguous, zenflow::channel_layout::strided}) {
    for (std::int64_t len : {1, 33, 1024, 5000}) {
      if (zf_test::sampled(sweep++)) {
        check_gather_scatter_device<bfloat16, bfloat16>(layout, len, false);
      }
      if (zf_test::sampled(sweep++)) {
        check_gather_scatter_device<float, bfloat16>(layout, len, false);
      }
      if (zf_test::sampled(sweep++)) {
        check_gather_scatter_device<half, float>(layout, len, false);
      }
      if (zf_test::sampled(sweep++)) {
        check_gather_scatter_device<float, float>(layout, len, false);
      }
    }
  }
}
// A strided matrix longer than 65535 element tiles of 32 (gridDim.y's limit): the tile kernels
// stride over the tiles (the packs, migrations and upload scatters of such a matrix in the engine).
TEST_F(optim_gpu, gather_scatter_of_a_strided_matrix_past_the_grid_y_limit_match_host_twins) {
  if (zf_test::emulated) { // 16.7 million threads: 16 s of CPU on the emulator, even at 3 channels
    GTEST_SKIP() << "65535 blocks of 256 threads: not run on the kernel emulator";
  }
  check_gather_scatter_device<bfloat16, bfloat16>(zenflow::channel_layout::strided, 65535 * 32 + 100, false);
}
TEST_F(optim_gpu, gather_scatter_under_graph_capture) {
  check_gather_scatter_device<float, half>(zenflow::channel_layout::contiguous, 2048, true);
  check_gather_scatter_device<bfloat16, float>(zenflow::channel_layout::strided, 100, true);
}

// Validation happens on the host before any CUDA call: these run without a device.
::testing::AssertionResult rejected(cudaError_t e, const char* arg) {
  if (e != cudaErrorInvalidValue) {
    return ::testing::AssertionFailure() << "returned " << static_cast<int>(e);
  }
  if (zenflow::last_error_message().find(arg) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << zenflow::last_error_message() << "' does not name " << arg;
  }
  if (zenflow::last_error_message().find("zenflow::device::") == std::string::npos) {
    return ::testing::AssertionFailure() << "message does not name the launcher";
  }
  return ::testing::AssertionSuccess();
}

TEST(optim_gpu_args, launchers_reject_bad_arguments_before_launching) {
  // Host pointers stand in for device ones: a rejected call must not touch them.
  std::vector<float> master(16, 1.0f), m(16, 2.0f), v(16, 3.0f);
  std::vector<bfloat16> w(16, zenflow::from_float<bfloat16>(4.0f)),
      g(16, zenflow::from_float<bfloat16>(5.0f));
  std::vector<std::int32_t> counts(4, 7);
  const auto master0 = master;
  const auto w0 = w;
  adamw_hparams hp;
  zenflow::adamw_tensor<bfloat16> t{w.data(), g.data(), master.data(), m.data(), v.data(), 16};
  EXPECT_TRUE(
      rejected(zenflow::device::adamw_dense<bfloat16>(&t, -1, counts.data(), hp, nullptr, nullptr), "count"));
  EXPECT_TRUE(rejected(
      zenflow::device::adamw_dense<bfloat16>(nullptr, 1, counts.data(), hp, nullptr, nullptr), "tensors"));
  EXPECT_TRUE(
      rejected(zenflow::device::adamw_dense<bfloat16>(&t, 1, nullptr, hp, nullptr, nullptr), "d_counts"));
  auto t2 = t;
  t2.m = nullptr;
  EXPECT_TRUE(rejected(zenflow::device::adamw_dense<bfloat16>(&t2, 1, counts.data(), hp, nullptr, nullptr),
                       "tensors[].m"));
  adamw_hparams bad = hp;
  bad.beta1 = -0.5f;
  EXPECT_TRUE(rejected(zenflow::device::adamw_dense<bfloat16>(&t, 1, counts.data(), bad, nullptr, nullptr),
                       "hp.beta1"));
  auto wm = zenflow::make_channel_matrix(w.data(), 4, 4);
  auto gm = zenflow::make_channel_matrix<const bfloat16>(g.data(), 4, 4);
  const std::vector<std::int32_t> idx = {0, 2};
  EXPECT_TRUE(rejected(zenflow::device::adamw_selective<bfloat16>(
                           wm, gm, {idx.data(), 5, master.data(), m.data(), v.data(), counts.data()}, hp),
                       "rows.count"));
  EXPECT_TRUE(rejected(zenflow::device::adamw_selective<bfloat16>(
                           wm, gm, {idx.data(), 2, master.data(), nullptr, v.data(), counts.data()}, hp),
                       "rows.m"));
  auto gm_bad = gm;
  gm_bad.channel_len = 3;
  EXPECT_TRUE(rejected(zenflow::device::adamw_selective<bfloat16>(
                           wm, gm_bad, {idx.data(), 2, master.data(), m.data(), v.data(), counts.data()}, hp),
                       "grads"));
  EXPECT_TRUE(rejected(
      (zenflow::device::gather_channels<bfloat16, float>(gm, nullptr, 2, master.data(), nullptr)), "d_idx"));
  EXPECT_TRUE(rejected(
      (zenflow::device::gather_channels<bfloat16, float>(gm, idx.data(), 2, nullptr, nullptr)), "d_dst"));
  auto wm_bad = wm;
  wm_bad.ld = 1;
  EXPECT_TRUE(rejected(
      (zenflow::device::scatter_channels<float, bfloat16>(master.data(), idx.data(), 2, wm_bad)), "ld"));
  EXPECT_TRUE(
      rejected((zenflow::device::scatter_channels<float, bfloat16>(nullptr, idx.data(), 2, wm)), "d_src"));
  EXPECT_TRUE(same_bits(master, master0) && same_bits(w, w0));
}

} // namespace
