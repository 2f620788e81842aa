// gpu tier for the schedule layer: the device launchers of the step scalars and of Zen-auto's L1
// masses against their host twins, bit for bit (the host twins are checked against float64 in the
// cpu tier), each also under CUDA graph capture; plus the launchers' argument checks, which need
// no device and therefore run wherever this is built.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/schedule/l1_mass.cuh>
#include <zenflow/schedule/step_scalars.cuh>

#include "schedule/rejects.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using zf_schedule_test::expect_rejected;

using zenflow::bfloat16;
using zenflow::channel_layout;
using zf_test::download;
using zf_test::run;
using zf_test::upload;

class schedule_gpu : public zf_test::gpu_test {};

struct host_tensor {
  std::int64_t channels, len, ld;
  channel_layout layout;
  std::vector<bfloat16> grad;
  std::vector<float> scores;
};

/// Two bf16 matrices (contiguous and strided) with seeded scores, some overflowed (+Inf) over
/// gradients that hold huge finite values, so that the rescan runs too.
std::vector<host_tensor> tensors(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<host_tensor> items = {{700, 33, 40, channel_layout::contiguous, {}, {}},
                                    {300, 9, 310, channel_layout::strided, {}, {}}};
  for (auto& it : items) {
    const std::int64_t outer = it.layout == channel_layout::contiguous ? it.channels : it.len;
    it.grad.resize(static_cast<std::size_t>(outer * it.ld));
    for (auto& x : it.grad) {
      x = zenflow::from_float<bfloat16>(nd(gen) * 1e18f);
    }
    it.scores.resize(static_cast<std::size_t>(it.channels));
    for (std::int64_t c = 0; c < it.channels; ++c) {
      it.scores[static_cast<std::size_t>(c)] = c % 97 == 5 ? INFINITY : std::fabs(nd(gen)) * 1e30f;
    }
  }
  return items;
}

void check_step_scalars(bool graph) {
  const auto items = tensors(zf_test::base_seed() + 800);
  zf_test::stream s;
  std::vector<zf_test::device_buffer<bfloat16>> d_grad;
  std::vector<zf_test::device_buffer<float>> d_scores;
  std::vector<zenflow::sq_total_item> host_items, dev_items;
  for (const auto& it : items) {
    d_grad.push_back(upload(it.grad, s));
    d_scores.push_back(upload(it.scores, s));
    host_items.push_back({it.grad.data(), it.scores.data(), it.channels, it.len, it.ld, it.layout,
                          zenflow::dtype::bf16, nullptr});
    dev_items.push_back({d_grad.back().data(), d_scores.back().data(), it.channels, it.len, it.ld, it.layout,
                         zenflow::dtype::bf16, nullptr});
  }
  const auto n = static_cast<std::int64_t>(items.size());
  std::vector<double> host_totals(items.size());
  ZF_CUDA_TRY(zenflow::host::sq_norm_totals(host_items.data(), n, host_totals.data()));
  auto d_items = upload(dev_items, s);
  zf_test::device_buffer<double> d_totals(items.size(), s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::sq_norm_totals(d_items.data(), n, d_totals.data(), st));
  });
  const auto dev_totals = download(d_totals, s);
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_TRUE(std::isfinite(host_totals[i])) << i;
    EXPECT_EQ(0, std::memcmp(&host_totals[i], &dev_totals[i], 8)) << i;
  }
  // The rescans (data parallel's owners'), and the totals from them, the gradients not read.
  std::vector<zf_test::device_buffer<double>> d_rescan;
  std::vector<zenflow::sq_rescan_item> rescans;
  std::int64_t widest = 0;
  for (const auto& d : dev_items) {
    d_rescan.push_back(upload(std::vector<double>(static_cast<std::size_t>(d.channels), -1.0), s));
    rescans.push_back({d, 0, d.channels, d_rescan.back().data()});
    widest = std::max(widest, d.channels);
  }
  auto d_rescans = upload(rescans, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::sq_norm_rescan(d_rescans.data(), n, widest, st));
  });
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    std::vector<double> host(static_cast<std::size_t>(it.channels), -1.0);
    const zenflow::sq_rescan_item h{host_items[i], 0, it.channels, host.data()};
    ZF_CUDA_TRY(zenflow::host::sq_norm_rescan(&h, 1, it.channels));
    const auto dev = download(d_rescan[i], s);
    EXPECT_EQ(0, std::memcmp(dev.data(), host.data(), dev.size() * 8)) << i;
    dev_items[i].grad = nullptr;
    dev_items[i].rescan = d_rescan[i].data();
  }
  auto d_from_rescans = upload(dev_items, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::sq_norm_totals(d_from_rescans.data(), n, d_totals.data(), st));
  });
  const auto again = download(d_totals, s);
  EXPECT_EQ(0, std::memcmp(host_totals.data(), again.data(), again.size() * 8));
  // The header over sums on both sides of FLT_MAX, clipped and not, a flag set or not.
  for (const double extra : {0.0, 3.0e38, 1.0e60}) {
    for (const std::uint32_t flag : {0u, 1u}) {
      const std::vector<double> totals = {host_totals[0] * 1e-40, extra, 0.5};
      const std::vector<std::uint32_t> flags = {0, flag};
      auto dt = upload(totals, s);
      auto df = upload(flags, s);
      auto rec = upload(std::vector<float>(8, -3.0f), s);
      run(s, graph, [&](cudaStream_t st) {
        ZF_CUDA_TRY(zenflow::device::compute_step_header(dt.data(), 3, df.data(), 2, 8.0f, 1.0f,
                                                         reinterpret_cast<zenflow::step_header*>(rec.data()),
                                                         rec.data() + 4, 3, st));
      });
      std::vector<float> host_rec(8, -3.0f);
      ZF_CUDA_TRY(zenflow::host::compute_step_header(totals.data(), 3, flags.data(), 2, 8.0f, 1.0f,
                                                     reinterpret_cast<zenflow::step_header*>(host_rec.data()),
                                                     host_rec.data() + 4, 3));
      const auto dev_rec = download(rec, s);
      EXPECT_EQ(0, std::memcmp(host_rec.data(), dev_rec.data(), 32)) << "extra " << extra << " flag " << flag;
    }
  }
}

TEST_F(schedule_gpu, step_scalars_are_the_host_twins_bits) {
  check_step_scalars(false);
}
TEST_F(schedule_gpu, step_scalars_are_the_host_twins_bits_in_a_graph) {
  check_step_scalars(true);
}

/// A table of mass calls over every working type and both orders (subnormal rows included), one
/// skipped, one without a mass, more rows than one block; each item's rows and mass against the
/// host twins', and the second half alone against its host twin.
void check_l1_masses(bool graph) {
  std::mt19937_64 gen(zf_test::base_seed() + 810);
  zf_test::stream s;
  struct spec {
    zenflow::dtype type;
    channel_layout layout;
    std::int64_t channels, len;
    bool skip, massless;
  };
  const spec specs[] = {{zenflow::dtype::f32, channel_layout::contiguous, 300, 37, false, false},
                        {zenflow::dtype::bf16, channel_layout::contiguous, 64, 200, false, false},
                        {zenflow::dtype::f16, channel_layout::strided, 90, 31, false, false},
                        {zenflow::dtype::f32, channel_layout::strided, 40, 3, true, false},
                        {zenflow::dtype::bf16, channel_layout::contiguous, 10, 16, false, true}};
  std::vector<std::vector<std::uint16_t>> raw;
  std::vector<zf_test::device_buffer<std::uint16_t>> d_raw;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  const std::uint32_t skip = 1;
  auto d_skip = upload(std::vector<std::uint32_t>{1}, s);
  std::vector<zenflow::l1_mass_item> host_items, dev_items;
  std::vector<float> host_rows(2000, -1.0f), host_mass(std::size(specs), 0.5f);
  auto d_rows = upload(host_rows, s);
  auto d_mass = upload(host_mass, s);
  std::int64_t at = 0, max_rows = 0;
  for (std::size_t k = 0; k < std::size(specs); ++k) {
    const spec& sp = specs[k];
    const std::int64_t ld = sp.layout == channel_layout::contiguous ? sp.len + 1 : sp.channels + 3;
    const std::int64_t outer = sp.layout == channel_layout::contiguous ? sp.channels : sp.len;
    const std::size_t words = static_cast<std::size_t>(outer * ld) * zenflow::dtype_size(sp.type) / 2;
    raw.emplace_back(words);
    for (auto& w : raw.back()) { // random finite values (exponents off the all-ones), subnormals too
      w = static_cast<std::uint16_t>(gen() & 0xbfffu);
    }
    d_raw.push_back(upload(raw.back(), s));
    std::vector<std::int32_t> rows;
    for (std::int32_t c = 0; c < sp.channels; ++c) {
      if (gen() % 3 != 0) {
        rows.push_back(c);
      }
    }
    idx.push_back(rows);
    d_idx.push_back(upload(rows, s));
    const auto count = static_cast<std::int64_t>(rows.size());
    zenflow::l1_mass_item h{raw.back().data(),
                            sp.type,
                            sp.channels,
                            sp.len,
                            ld,
                            sp.layout,
                            sp.layout == channel_layout::contiguous,
                            idx.back().data(),
                            count,
                            host_rows.data() + at,
                            sp.skip ? &skip : nullptr,
                            sp.massless ? nullptr : host_mass.data() + k};
    zenflow::l1_mass_item d = h;
    d.grad = d_raw.back().data();
    d.idx = d_idx.back().data();
    d.row_l1 = d_rows.data() + at;
    d.skip = sp.skip ? d_skip.data() : nullptr;
    d.l1 = sp.massless ? nullptr : d_mass.data() + k;
    host_items.push_back(h);
    dev_items.push_back(d);
    at += count;
    max_rows = std::max(max_rows, count);
  }
  const auto n = static_cast<std::int64_t>(host_items.size());
  ZF_CUDA_TRY(zenflow::host::l1_mass_batched(host_items.data(), n, max_rows));
  auto d_items = upload(dev_items, s);
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::l1_mass_batched(d_items.data(), n, max_rows, st));
  });
  EXPECT_EQ(download(d_rows, s), host_rows);
  const auto dev_mass = download(d_mass, s);
  EXPECT_EQ(0, std::memcmp(dev_mass.data(), host_mass.data(), host_mass.size() * 4));
  EXPECT_EQ(host_mass[3], 0.5f); // skipped
  // One call on its own (two launches), item 1 again into a fresh mass.
  float one = 0.25f;
  auto d_one = upload(std::vector<float>{0.25f}, s);
  zenflow::l1_mass_item h1 = host_items[1], dv1 = dev_items[1];
  h1.l1 = &one;
  dv1.l1 = d_one.data();
  ZF_CUDA_TRY(zenflow::host::l1_mass(h1));
  run(s, graph, [&](cudaStream_t st) { ZF_CUDA_TRY(zenflow::device::l1_mass(dv1, st)); });
  EXPECT_EQ(0, std::memcmp(download(d_one, s).data(), &one, 4));
  // The second half alone, over the rows just computed.
  ZF_CUDA_TRY(zenflow::host::l1_mass_add_rows_batched(host_items.data(), n));
  run(s, graph, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::l1_mass_add_rows_batched(d_items.data(), n, st));
  });
  const auto twice = download(d_mass, s);
  EXPECT_EQ(0, std::memcmp(twice.data(), host_mass.data(), host_mass.size() * 4));
}

TEST_F(schedule_gpu, l1_masses_are_the_host_twins_bits) {
  check_l1_masses(false);
}
TEST_F(schedule_gpu, l1_masses_are_the_host_twins_bits_in_a_graph) {
  check_l1_masses(true);
}

// ---- the launchers' argument checks (no device needed) ---------------------------------------------

TEST(schedule_device_args, bad_arguments_are_named_before_any_launch) {
  double totals[2] = {-1.0, -1.0};
  const zenflow::sq_total_item item{};
  const char* fn = "zenflow::device::sq_norm_totals";
  expect_rejected(zenflow::device::sq_norm_totals(&item, -1, totals), fn, "count");
  expect_rejected(zenflow::device::sq_norm_totals(&item, std::int64_t{1} << 31, totals), fn, "count");
  expect_rejected(zenflow::device::sq_norm_totals(nullptr, 1, totals), fn, "d_items");
  expect_rejected(zenflow::device::sq_norm_totals(&item, 1, nullptr), fn, "totals");
  const zenflow::sq_rescan_item rescan{};
  fn = "zenflow::device::sq_norm_rescan";
  expect_rejected(zenflow::device::sq_norm_rescan(&rescan, -1, 4), fn, "count");
  expect_rejected(zenflow::device::sq_norm_rescan(nullptr, 1, 4), fn, "d_items");
  expect_rejected(zenflow::device::sq_norm_rescan(&rescan, 1, -4), fn, "max_count");
  fn = "zenflow::device::compute_step_header";
  const std::uint32_t flags[1] = {0};
  zenflow::step_header h;
  expect_rejected(zenflow::device::compute_step_header(totals, -1, flags, 1, 1.0f, 0.0f, &h), fn, "tensors");
  expect_rejected(zenflow::device::compute_step_header(nullptr, 2, flags, 1, 1.0f, 0.0f, &h), fn, "totals");
  expect_rejected(zenflow::device::compute_step_header(totals, 2, nullptr, 1, 1.0f, 0.0f, &h), fn, "flags");
  expect_rejected(zenflow::device::compute_step_header(totals, 2, flags, 1, 0.0f, 0.0f, &h), fn,
                  "loss_scale");
  expect_rejected(zenflow::device::compute_step_header(totals, 2, flags, 1, 1.0f, -1.0f, &h), fn, "max_norm");
  expect_rejected(zenflow::device::compute_step_header(totals, 2, flags, 1, 1.0f, 0.0f, nullptr), fn,
                  "header");
  expect_rejected(zenflow::device::compute_step_header(totals, 2, flags, 1, 1.0f, 0.0f, &h, nullptr, 3), fn,
                  "zero");
  EXPECT_EQ(h.coef, 1.0f);
  EXPECT_EQ(totals[0], -1.0);
  float mass = 0.5f, rows[4];
  std::int32_t idx[2] = {0, 1};
  std::vector<float> g(8, 1.0f);
  zenflow::l1_mass_item m = zenflow::make_l1_mass_item(
      zenflow::make_channel_matrix<const float>(g.data(), 2, 4), idx, 2, rows, nullptr, &mass);
  m.count = 3;
  expect_rejected(zenflow::device::l1_mass(m), "zenflow::device::l1_mass", "count");
  m.count = 2;
  m.row_l1 = nullptr;
  expect_rejected(zenflow::device::l1_mass(m), "zenflow::device::l1_mass", "row_l1");
  expect_rejected(zenflow::device::l1_mass_batched(&m, -1, 2), "zenflow::device::l1_mass_batched", "count");
  expect_rejected(zenflow::device::l1_mass_batched(nullptr, 1, 2), "zenflow::device::l1_mass_batched",
                  "d_items");
  expect_rejected(zenflow::device::l1_mass_batched(&m, 1, -2), "zenflow::device::l1_mass_batched",
                  "max_rows");
  expect_rejected(zenflow::device::l1_mass_add_rows_batched(&m, -1),
                  "zenflow::device::l1_mass_add_rows_batched", "count");
  expect_rejected(zenflow::device::l1_mass_add_rows_batched(nullptr, 2),
                  "zenflow::device::l1_mass_add_rows_batched", "d_items");
  EXPECT_EQ(mass, 0.5f);
}

} // namespace
