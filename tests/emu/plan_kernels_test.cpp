// The device plan's kernels (engine/detail/plan/kernels.cuh) on the kernel emulator, each through
// the CUDA backend's launcher (detail::device_primitives, cuda_backend.cuh) against the host
// backend's body (detail::host_primitives) on the same inputs, bit for bit: every working type and
// layout, odd sizes, one channel, one row, all rows, empty tables, the skip flag, overflowed
// scores. Written over tests/support/gpu.hpp's names (device memory of the emulated GPU).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/cuda_backend.cuh>
#include <zenflow/engine/detail/dp/shard_mass.hpp>

#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using zenflow::bfloat16;
using zenflow::channel_layout;
using zenflow::dtype;
using zenflow::half;
using zenflow::detail::device_primitives;
using zenflow::detail::host_primitives;
using zf_test::download;
using zf_test::upload;

class plan_kernels : public zf_test::gpu_test {
protected:
  zf_test::stream s;
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// A matrix of working type `type`: raw storage (random finite values, as 16- or 32-bit words) and
/// its shape; its copy in device memory.
struct matrix {
  dtype type;
  channel_layout layout;
  std::int64_t channels, len, ld;
  std::vector<std::uint16_t> host; // f32 as pairs
  zf_test::device_buffer<std::uint16_t> dev;
  matrix(dtype t,
         channel_layout l,
         std::int64_t c,
         std::int64_t n,
         std::mt19937_64& rng,
         cudaStream_t s,
         float scale = 1.0f)
      : type(t), layout(l), channels(c), len(n), ld(l == channel_layout::contiguous ? n + 3 : c + 5) {
    const std::int64_t outer = l == channel_layout::contiguous ? c : n;
    const std::size_t elems = static_cast<std::size_t>(outer * ld);
    host.resize(elems * zenflow::dtype_size(t) / 2);
    std::normal_distribution<float> nd(0.0f, scale);
    zenflow::detail::dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      auto* p = reinterpret_cast<T*>(host.data());
      for (std::size_t i = 0; i < elems; ++i) {
        p[i] = zenflow::from_float<T>(nd(rng));
      }
    });
    dev = upload(host, s);
  }
  [[nodiscard]] const void* hp() const { return host.data(); }
  [[nodiscard]] const void* dp() const { return dev.data(); }
};

std::vector<std::int32_t> some_rows(std::int64_t channels, std::int64_t count, std::mt19937_64& rng) {
  std::vector<std::int32_t> rows(static_cast<std::size_t>(channels));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<std::size_t>(count));
  std::sort(rows.begin(), rows.end());
  return rows;
}

TEST_F(plan_kernels, early_masses_iota_count_moves_and_window_sums) {
  std::mt19937_64 rng(zf_test::base_seed() + 12);
  for (const int n : {1, 5, 300}) {
    auto early =
        zf_test::random_values<float>(static_cast<std::size_t>(n), rng(), 1e-38f); // subnormals among them
    std::vector<float> rest(static_cast<std::size_t>(n), 9.0f);
    auto d_early = upload(early, s);
    auto d_rest = upload(rest, s);
    ZF_CUDA_TRY(host_primitives::adopt_early_mass(early.data(), rest.data(), n, nullptr));
    ZF_CUDA_TRY(device_primitives::adopt_early_mass(d_early.data(), d_rest.data(), n, s));
    EXPECT_TRUE(same_bits(download(d_early, s), early)) << n;
    EXPECT_TRUE(same_bits(download(d_rest, s), rest)) << n;
  }
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{257}, std::int64_t{3000}}) {
    std::vector<std::int32_t> h(static_cast<std::size_t>(n), -1);
    zf_test::device_buffer<std::int32_t> d(static_cast<std::size_t>(n), s);
    ZF_CUDA_TRY(host_primitives::iota(h.data(), n, nullptr));
    ZF_CUDA_TRY(device_primitives::iota(d.data(), n, s));
    EXPECT_EQ(download(d, s), h);
  }
  // Count moves, with and without index lists.
  const std::int64_t m = 77;
  std::vector<std::int32_t> src(200), dst(200, -5), src_idx = some_rows(200, m, rng),
                                                    dst_idx = some_rows(200, m, rng);
  for (auto& x : src) {
    x = static_cast<std::int32_t>(rng() % 1000);
  }
  std::shuffle(dst_idx.begin(), dst_idx.end(), rng);
  for (const bool lists : {true, false}) {
    auto h_dst = dst;
    auto d_src = upload(src, s), d_dst = upload(dst, s), d_si = upload(src_idx, s), d_di = upload(dst_idx, s);
    const zenflow::detail::count_moves hm{src.data(), lists ? src_idx.data() : nullptr, h_dst.data(),
                                          lists ? dst_idx.data() : nullptr, m};
    const zenflow::detail::count_moves dm{d_src.data(), lists ? d_si.data() : nullptr, d_dst.data(),
                                          lists ? d_di.data() : nullptr, m};
    ZF_CUDA_TRY(host_primitives::move_counts(hm, nullptr));
    ZF_CUDA_TRY(device_primitives::move_counts(dm, s));
    EXPECT_EQ(download(d_dst, s), h_dst) << (lists ? "lists" : "identity");
  }
  // The window sums: each type, the first good step assigns, a later one adds, a skipped one
  // leaves the sum; the count of good steps.
  for (const dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1000}}) {
      matrix rows(type, channel_layout::contiguous, 1, n, rng, s); // one row of n (its padding unused)
      auto sum = zf_test::random_values<float>(static_cast<std::size_t>(n), rng());
      auto d_sum = upload(sum, s);
      for (const std::uint32_t steps : {0u, 3u}) {
        for (const std::uint32_t skip : {0u, 1u}) {
          std::vector<float> record(zenflow::detail::step_record_layout::header_words, 0.0f);
          record[zenflow::detail::step_record_layout::coef_word] = 0.375f;
          std::memcpy(record.data() + zenflow::detail::step_record_layout::skip_word, &skip, 4);
          auto d_record = upload(record, s);
          const std::vector<std::uint32_t> count = {steps};
          auto d_count = upload(count, s);
          ZF_CUDA_TRY(host_primitives::add_window_sum({sum.data(), rows.hp(), n, record.data(), count.data()},
                                                      type, nullptr));
          ZF_CUDA_TRY(device_primitives::add_window_sum(
              {d_sum.data(), rows.dp(), n, d_record.data(), d_count.data()}, type, s));
          ASSERT_TRUE(same_bits(download(d_sum, s), sum))
              << zenflow::dtype_name(type) << " n " << n << " steps " << steps << " skip " << skip;
          std::vector<std::uint32_t> h_steps = {steps};
          auto d_steps = upload(h_steps, s);
          ZF_CUDA_TRY(host_primitives::count_window_step(record.data(), h_steps.data(), nullptr));
          ZF_CUDA_TRY(device_primitives::count_window_step(d_record.data(), d_steps.data(), s));
          EXPECT_EQ(download(d_steps, s), h_steps);
        }
      }
    }
  }
}

/// The packs with Zen-auto's mass (every type and layout, one row, every row): each matrix's rows
/// gathered with its mass in one launch with the ticket (pack_mass_kernel), or the gather and the
/// schedule's two mass launches without. The schedule's own mass kernels are checked by
/// tests/schedule/schedule_gpu_test.cu, also run on the emulator (schedule_kernels_test.cpp).
TEST_F(plan_kernels, packs_with_their_masses) {
  std::mt19937_64 rng(zf_test::base_seed() + 13);
  struct call_shape {
    dtype type;
    channel_layout layout;
    std::int64_t channels, len, count;
  };
  const call_shape shapes[] = {{dtype::bf16, channel_layout::contiguous, 40, 70, 17},
                               {dtype::f16, channel_layout::strided, 33, 19, 33},
                               {dtype::f32, channel_layout::contiguous, 1, 5, 1},
                               {dtype::f32, channel_layout::strided, 50, 16, 1},
                               {dtype::bf16, channel_layout::strided, 300, 3, 299},
                               {dtype::f16, channel_layout::contiguous, 9, 100, 9}};
  std::vector<matrix> mats;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  for (const call_shape& sh : shapes) {
    mats.emplace_back(sh.type, sh.layout, sh.channels, sh.len, rng, s);
    idx.push_back(some_rows(sh.channels, sh.count, rng));
    d_idx.push_back(upload(idx.back(), s));
  }
  for (std::size_t i = 0; i < mats.size(); ++i) {
    for (const bool ticket : {true, false}) {
      const auto& m = mats[i];
      zenflow::detail::dispatch_dtype(m.type, [&](auto tag) {
        using T = decltype(tag);
        const std::size_t packed = idx[i].size() * static_cast<std::size_t>(m.len);
        std::vector<T> h_dst(packed);
        zf_test::device_buffer<T> d_dst(packed, s);
        std::vector<float> h_l1 = {0.5f};
        auto d_l1 = upload(h_l1, s);
        std::vector<float> rows(idx[i].size());
        auto d_rows = upload(rows, s);
        const std::vector<std::uint32_t> zero = {0u};
        auto d_ticket = upload(zero, s);
        const zenflow::channel_matrix<const T> hsrc{static_cast<const T*>(m.hp()), m.channels, m.len, m.ld,
                                                    m.layout};
        const zenflow::channel_matrix<const T> dsrc{static_cast<const T*>(m.dp()), m.channels, m.len, m.ld,
                                                    m.layout};
        // The pack's mass in its host twin's order: 16 lanes for a contiguous matrix (the plan's rule).
        const bool lanes = m.layout == channel_layout::contiguous;
        const zenflow::l1_mass_item hmass{m.hp(),   m.type,     m.channels,    m.len,           m.ld,
                                          m.layout, lanes,      idx[i].data(), shapes[i].count, rows.data(),
                                          nullptr,  h_l1.data()};
        const zenflow::l1_mass_item dmass{
            m.dp(), m.type,          m.channels,      m.len,         m.ld,    m.layout,
            lanes,  d_idx[i].data(), shapes[i].count, d_rows.data(), nullptr, d_l1.data()};
        ZF_CUDA_TRY(host_primitives::gather_channels_mass<T, T>(hsrc, idx[i].data(), shapes[i].count,
                                                                h_dst.data(), hmass, nullptr, nullptr));
        ZF_CUDA_TRY(device_primitives::gather_channels_mass<T, T>(dsrc, d_idx[i].data(), shapes[i].count,
                                                                  d_dst.data(), dmass,
                                                                  ticket ? d_ticket.data() : nullptr, s));
        EXPECT_TRUE(same_bits(download(d_dst, s), h_dst))
            << "pack " << i << (ticket ? " with the ticket" : "");
        EXPECT_TRUE(same_bits(download(d_l1, s), h_l1))
            << "mass of pack " << i << (ticket ? " with the ticket" : "");
        EXPECT_EQ(download(d_ticket, s), zero) << "the ticket is left 0 for the next pack";
      });
    }
  }
}

/// The update with its mass, one matrix at a time (adamw_selective_mass) and every matrix of a
/// type in one launch (adamw_selective_batched_mass): the weights, masters, moments, counts and
/// masses of the host backend.
TEST_F(plan_kernels, updates_with_their_masses) {
  std::mt19937_64 rng(zf_test::base_seed() + 14);
  using T = bfloat16;
  zenflow::adamw_hparams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.05f;
  const std::vector<float> scale = {0.75f};
  const std::vector<std::uint32_t> no_skip = {0u};
  auto d_scale = upload(scale, s);
  auto d_skip = upload(no_skip, s);
  struct item_shape {
    channel_layout layout;
    std::int64_t channels, len, count;
  };
  const item_shape shapes[] = {{channel_layout::contiguous, 30, 12, 7},
                               {channel_layout::strided, 45, 37, 45},
                               {channel_layout::contiguous, 1, 1, 1},
                               {channel_layout::strided, 70, 3, 1}};
  struct side {
    std::vector<float> master, m, v;
    std::vector<std::int32_t> counts;
  };
  std::vector<matrix> w, g;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  std::vector<side> host;
  std::vector<zf_test::device_buffer<float>> d_master, d_m, d_v;
  std::vector<zf_test::device_buffer<std::int32_t>> d_counts;
  for (const item_shape& sh : shapes) {
    w.emplace_back(dtype::bf16, sh.layout, sh.channels, sh.len, rng, s);
    g.emplace_back(dtype::bf16, sh.layout, sh.channels, sh.len, rng, s);
    idx.push_back(some_rows(sh.channels, sh.count, rng));
    d_idx.push_back(upload(idx.back(), s));
    const auto n = static_cast<std::size_t>(sh.count * sh.len);
    side h{zf_test::random_values<float>(n, rng()), zf_test::random_values<float>(n, rng(), 0.01f),
           zf_test::random_values<float>(n, rng(), 0.01f),
           std::vector<std::int32_t>(static_cast<std::size_t>(sh.count))};
    for (auto& x : h.v) {
      x = std::fabs(x);
    }
    for (auto& c : h.counts) {
      c = static_cast<std::int32_t>(rng() % 9);
    }
    d_master.push_back(upload(h.master, s));
    d_m.push_back(upload(h.m, s));
    d_v.push_back(upload(h.v, s));
    d_counts.push_back(upload(h.counts, s));
    host.push_back(std::move(h));
  }
  const auto view = [](const matrix& mm, bool dev) {
    return zenflow::channel_matrix<T>{static_cast<T*>(const_cast<void*>(dev ? mm.dp() : mm.hp())),
                                      mm.channels, mm.len, mm.ld, mm.layout};
  };
  const auto cview = [](const matrix& mm, bool dev) {
    return zenflow::channel_matrix<const T>{static_cast<const T*>(dev ? mm.dp() : mm.hp()), mm.channels,
                                            mm.len, mm.ld, mm.layout};
  };
  const auto expect_state = [&](const char* what) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_TRUE(same_bits(download(w[i].dev, s), w[i].host)) << what << " weights " << i;
      EXPECT_TRUE(same_bits(download(d_master[i], s), host[i].master)) << what << " master " << i;
      EXPECT_TRUE(same_bits(download(d_m[i], s), host[i].m)) << what << " m " << i;
      EXPECT_TRUE(same_bits(download(d_v[i], s), host[i].v)) << what << " v " << i;
      EXPECT_EQ(download(d_counts[i], s), host[i].counts) << what << " counts " << i;
    }
  };
  // One at a time, each with its mass.
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<float> h_l1 = {0.0f};
    auto d_l1 = upload(h_l1, s);
    std::vector<float> rows(idx[i].size());
    auto d_rows = upload(rows, s);
    const zenflow::selected_rows hr{idx[i].data(),    shapes[i].count,  host[i].master.data(),
                                    host[i].m.data(), host[i].v.data(), host[i].counts.data()};
    const zenflow::selected_rows dr{d_idx[i].data(), shapes[i].count, d_master[i].data(),
                                    d_m[i].data(),   d_v[i].data(),   d_counts[i].data()};
    const bool lanes = g[i].layout == channel_layout::contiguous; // the host twin's order
    const zenflow::l1_mass_item hmass{g[i].hp(),       dtype::bf16, g[i].channels,  g[i].len,
                                      g[i].ld,         g[i].layout, lanes,          idx[i].data(),
                                      shapes[i].count, rows.data(), no_skip.data(), h_l1.data()};
    const zenflow::l1_mass_item dmass{g[i].dp(),       dtype::bf16,   g[i].channels, g[i].len,
                                      g[i].ld,         g[i].layout,   lanes,         d_idx[i].data(),
                                      shapes[i].count, d_rows.data(), d_skip.data(), d_l1.data()};
    ZF_CUDA_TRY(host_primitives::adamw_selective_mass<T>(view(w[i], false), cview(g[i], false), hr, hp,
                                                         {scale.data(), no_skip.data()}, hmass, nullptr));
    ZF_CUDA_TRY(device_primitives::adamw_selective_mass<T>(view(w[i], true), cview(g[i], true), dr, hp,
                                                           {d_scale.data(), d_skip.data()}, dmass, s));
    EXPECT_TRUE(same_bits(download(d_l1, s), h_l1)) << "mass " << i;
  }
  expect_state("one at a time");
  // All in one launch, each with its own learning-rate scale and decay, and their masses.
  std::vector<zenflow::adamw_selective_item<T>> h_items, d_items;
  std::vector<float> h_l1(w.size(), 0.0f);
  auto d_l1 = upload(h_l1, s);
  std::vector<std::vector<float>> rows;
  std::vector<zf_test::device_buffer<float>> d_rows;
  std::vector<zenflow::l1_mass_item> h_mass, d_mass;
  std::int64_t max_rows = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float lr_scale = 0.5f + static_cast<float>(i), decay = 0.01f * static_cast<float>(i);
    h_items.push_back({view(w[i], false),
                       cview(g[i], false),
                       {idx[i].data(), shapes[i].count, host[i].master.data(), host[i].m.data(),
                        host[i].v.data(), host[i].counts.data()},
                       lr_scale,
                       decay});
    d_items.push_back({view(w[i], true),
                       cview(g[i], true),
                       {d_idx[i].data(), shapes[i].count, d_master[i].data(), d_m[i].data(), d_v[i].data(),
                        d_counts[i].data()},
                       lr_scale,
                       decay});
    rows.emplace_back(idx[i].size());
    d_rows.push_back(upload(rows.back(), s));
    const bool lanes = g[i].layout == channel_layout::contiguous;
    h_mass.push_back({g[i].hp(), dtype::bf16, g[i].channels, g[i].len, g[i].ld, g[i].layout, lanes,
                      idx[i].data(), shapes[i].count, rows.back().data(), no_skip.data(), &h_l1[i]});
    d_mass.push_back({g[i].dp(), dtype::bf16, g[i].channels, g[i].len, g[i].ld, g[i].layout, lanes,
                      d_idx[i].data(), shapes[i].count, d_rows.back().data(), d_skip.data(),
                      d_l1.data() + i});
    max_rows = std::max(max_rows, shapes[i].count);
  }
  const int n = static_cast<int>(h_items.size());
  const std::int64_t blocks = zenflow::adamw_selective_batch_blocks(h_items.data(), n);
  ASSERT_EQ(zenflow::adamw_selective_batch_blocks(d_items.data(), n), blocks);
  auto d_table = upload(d_items, s);
  auto d_mass_table = upload(d_mass, s);
  ZF_CUDA_TRY(host_primitives::adamw_selective_batched_mass<T>(
      h_items.data(), n, blocks, max_rows, hp, {scale.data(), no_skip.data()}, h_mass.data(), nullptr));
  ZF_CUDA_TRY(device_primitives::adamw_selective_batched_mass<T>(
      d_table.data(), n, blocks, max_rows, hp, {d_scale.data(), d_skip.data()}, d_mass_table.data(), s));
  expect_state("batched");
  EXPECT_TRUE(same_bits(download(d_l1, s), h_l1)) << "batched masses";
}

TEST_F(plan_kernels, sharded_masses_and_batched_row_copies) {
  std::mt19937_64 rng(zf_test::base_seed() + 15);
  // ZeRO-3's record masses from the ranks' gathered row masses.
  using zenflow::detail::shard_mass_item;
  using zenflow::detail::shard_mass_part;
  const int ranks = 3, matrices = 4;
  const std::int64_t per_slot[matrices] = {1, 7, 64, 1000};
  std::vector<float> gathered;
  std::vector<shard_mass_part> parts;
  for (int m = 0; m < matrices; ++m) {
    for (int r = 0; r < ranks; ++r) {
      const auto rows = static_cast<std::int64_t>(m == 0 ? 0 : rng() % 200);
      const auto k = static_cast<std::int32_t>(rows == 0 ? 0 : rng() % static_cast<std::uint64_t>(rows + 1));
      float kbits;
      std::memcpy(&kbits, &k, 4);
      gathered.push_back(kbits);
      const auto at = static_cast<std::int64_t>(gathered.size());
      for (std::int64_t j = 0; j < rows; ++j) {
        gathered.push_back(j % 17 == 0 ? 1e-40f : static_cast<float>(rng() % 100000) * 0.37f);
      }
      parts.push_back({at - 1, at, rows});
    }
  }
  auto d_gathered = upload(gathered, s);
  auto d_parts = upload(parts, s);
  std::vector<shard_mass_item> h_items, d_items;
  for (int m = 0; m < matrices; ++m) {
    h_items.push_back({parts.data() + m * ranks, ranks, per_slot[m], m});
    d_items.push_back({d_parts.data() + m * ranks, ranks, per_slot[m], m});
  }
  auto d_table = upload(d_items, s);
  for (const std::uint32_t skip : {0u, 1u}) {
    const std::vector<std::uint32_t> h_skip = {skip};
    auto d_skip = upload(h_skip, s);
    std::vector<float> h_masses(2 * matrices, -1.0f);
    auto d_masses = upload(h_masses, s);
    ZF_CUDA_TRY(zenflow::detail::shard_masses_on(host_primitives{}, h_items.data(), matrices, gathered.data(),
                                                 h_skip.data(), h_masses.data(), h_masses.data() + matrices,
                                                 nullptr));
    ZF_CUDA_TRY(zenflow::detail::shard_masses_on(device_primitives{}, d_table.data(), matrices,
                                                 d_gathered.data(), d_skip.data(), d_masses.data(),
                                                 d_masses.data() + matrices, s));
    EXPECT_TRUE(same_bits(download(d_masses, s), h_masses)) << "skip " << skip;
  }
  // Row copies: a table of every type and layout, packed in fp32 or in the matrix's own type,
  // gathered, then scattered back perturbed (one item from null rows: zeros).
  using zenflow::detail::row_copy_direction;
  using zenflow::detail::row_copy_item;
  struct spec {
    dtype type;
    channel_layout layout;
    std::int64_t channels, len, count;
    bool own;
  };
  const spec specs[] = {{dtype::bf16, channel_layout::contiguous, 30, 100, 22, false},
                        {dtype::f16, channel_layout::strided, 97, 70, 72, false},
                        {dtype::f32, channel_layout::strided, 40, 33, 1, false},
                        {dtype::bf16, channel_layout::strided, 33, 31, 33, true},
                        {dtype::f32, channel_layout::contiguous, 1, 5, 1, true},
                        {dtype::f16, channel_layout::contiguous, 50, 3, 50, true}};
  std::vector<matrix> mats;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<zf_test::device_buffer<std::int32_t>> d_idx;
  std::vector<std::vector<std::uint16_t>> packed; // fp32 rows as pairs of words
  std::vector<zf_test::device_buffer<std::uint16_t>> d_packed;
  std::vector<row_copy_item> h_rc, d_rc;
  for (const spec& sp : specs) {
    mats.emplace_back(sp.type, sp.layout, sp.channels, sp.len, rng, s);
    idx.push_back(some_rows(sp.channels, sp.count, rng));
    std::shuffle(idx.back().begin(), idx.back().end(), rng);
    d_idx.push_back(upload(idx.back(), s));
    const dtype pt = sp.own ? sp.type : dtype::f32;
    packed.emplace_back(static_cast<std::size_t>(sp.count * sp.len) * zenflow::dtype_size(pt) / 2, 0);
    d_packed.push_back(upload(packed.back(), s));
    auto& m = mats.back();
    h_rc.push_back({m.host.data(), sp.type, sp.channels, sp.len, m.ld, sp.layout, idx.back().data(), sp.count,
                    packed.back().data(), pt});
    d_rc.push_back({m.dev.data(), sp.type, sp.channels, sp.len, m.ld, sp.layout, d_idx.back().data(),
                    sp.count, d_packed.back().data(), pt});
  }
  const int n = static_cast<int>(h_rc.size());
  const std::int64_t blocks = zenflow::detail::row_copy_blocks(h_rc.data(), n);
  ASSERT_EQ(zenflow::detail::row_copy_blocks(d_rc.data(), n), blocks);
  for (const auto dir : {row_copy_direction::gather, row_copy_direction::scatter}) {
    if (dir == row_copy_direction::scatter) {
      for (std::size_t k = 0; k < packed.size(); ++k) { // new finite rows to scatter
        for (auto& word : packed[k]) {
          word = static_cast<std::uint16_t>(rng() & 0x3fffu);
        }
        d_packed[k] = upload(packed[k], s);
        d_rc[k].packed = d_packed[k].data();
      }
      h_rc[2].packed = d_rc[2].packed = nullptr;
    }
    auto d_table_rc = upload(d_rc, s);
    ZF_CUDA_TRY(host_primitives::copy_rows_batched(h_rc.data(), n, blocks, dir, nullptr));
    ZF_CUDA_TRY(device_primitives::copy_rows_batched(d_table_rc.data(), n, blocks, dir, s));
    for (std::size_t k = 0; k < mats.size(); ++k) {
      EXPECT_TRUE(same_bits(download(mats[k].dev, s), mats[k].host)) << "matrix " << k;
      EXPECT_TRUE(same_bits(download(d_packed[k], s), packed[k])) << "packed " << k;
    }
  }
}

} // namespace
