// The device communicator's owner reduction (detail/device_owner_reduction.hpp) takes the
// one-rank bits of the clipping norm and the rest masses from per-channel numbers that each owner
// computes for its block and the ranks sum with zeros elsewhere. Here, on the host primitives
// (the CUDA kernels call the same bodies): the rescans of non-finite scores, summed over three
// owners in every order, give sq_totals the bits it computes from the whole gradient, and the
// float64 norm; the batched masses, per D2H slot then per matrix, give the packs' bits; a sharded
// matrix's masses from its ranks' gathered row masses (shard_masses) give one rank's update and
// packs' bits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/detail/dp/shard_mass.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/schedule/l1_mass.hpp>
#include <zenflow/schedule/step_scalars.hpp>

#include "../support/random.hpp"

namespace {

using zenflow::channel_layout;
using zenflow::channel_matrix;
using zenflow::detail::host_primitives;

template <class T>
std::uint64_t bits(T x) {
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof(T));
  return u;
}

TEST(owner_sums, rescans_summed_over_owners_give_the_whole_gradients_norm) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    const std::int64_t channels = 700, len = 37;
    const std::int64_t ld = layout == channel_layout::contiguous ? len + 2 : channels + 5;
    const auto n = static_cast<std::size_t>(layout == channel_layout::contiguous ? channels * ld : len * ld);
    auto g = zf_test::random_values<float>(n, seed + (layout == channel_layout::contiguous ? 1 : 2));
    const channel_matrix<float> gm{g.data(), channels, len, ld, layout};
    // Finite rows whose fp32 squared norm overflows (one in each owner's block), one NaN row.
    for (const std::int64_t c : {5, 260, 611}) {
      for (std::int64_t i = 0; i < len; ++i) {
        gm(c, i) = (i % 2 == 0 ? 3e19f : -2e19f);
      }
    }
    gm(420, 3) = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> scores(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) { // fp32 squared L2, as the prologue's scores
      float s = 0.0f;
      for (std::int64_t i = 0; i < len; ++i) {
        s += gm(c, i) * gm(c, i);
      }
      scores[static_cast<std::size_t>(c)] = s;
    }
    ASSERT_FALSE(std::isfinite(scores[5]));
    ASSERT_FALSE(std::isfinite(scores[420]));
    const zenflow::sq_total_item whole{g.data(), scores.data(), channels,           len,
                                       ld,       layout,        zenflow::dtype::f32};
    double from_grads = 0.0;
    ASSERT_EQ(host_primitives::sq_norm_totals(&whole, 1, &from_grads, nullptr), cudaSuccess);

    const std::array<std::int64_t, 4> first{0, 233, 467, channels}; // three owners' blocks
    std::array<std::vector<double>, 3> part;
    for (int r = 0; r < 3; ++r) { // each owner: its block's rescans, zeros elsewhere
      part[static_cast<std::size_t>(r)].assign(static_cast<std::size_t>(channels), 0.0);
      const auto q = static_cast<std::size_t>(r);
      const zenflow::sq_rescan_item it{whole, first[q], first[q + 1] - first[q], part[q].data()};
      ASSERT_EQ(host_primitives::sq_norm_rescan(&it, 1, it.count, nullptr), cudaSuccess);
    }
    std::array<int, 3> order{0, 1, 2};
    do { // the collective may add in any order: each sum is one owner's value plus zeros
      std::vector<double> rescan(static_cast<std::size_t>(channels), 0.0);
      for (const int r : order) {
        for (std::size_t c = 0; c < rescan.size(); ++c) {
          rescan[c] += part[static_cast<std::size_t>(r)][c];
        }
      }
      auto item = whole;
      item.grad = nullptr; // never read with the rescans given
      item.rescan = rescan.data();
      double from_rescans = 0.0;
      ASSERT_EQ(host_primitives::sq_norm_totals(&item, 1, &from_rescans, nullptr), cudaSuccess);
      EXPECT_TRUE(std::isnan(from_rescans)); // the NaN row
      EXPECT_EQ(bits(from_rescans), bits(from_grads)) << from_rescans << " vs " << from_grads;
    } while (std::next_permutation(order.begin(), order.end()));

    // Without the NaN row, the float64 norm of the whole gradient (finite although fp32 overflows).
    gm(420, 3) = 0.5f;
    scores[420] = 0.0f;
    for (std::int64_t i = 0; i < len; ++i) {
      scores[420] += gm(420, i) * gm(420, i);
    }
    std::vector<double> rescan(static_cast<std::size_t>(channels), 0.0);
    const zenflow::sq_rescan_item all{whole, 0, channels, rescan.data()};
    ASSERT_EQ(host_primitives::sq_norm_rescan(&all, 1, channels, nullptr), cudaSuccess);
    auto item = whole;
    item.rescan = rescan.data();
    double total = 0.0;
    ASSERT_EQ(host_primitives::sq_norm_totals(&item, 1, &total, nullptr), cudaSuccess);
    double ref = 0.0;
    for (std::int64_t c = 0; c < channels; ++c) {
      for (std::int64_t i = 0; i < len; ++i) {
        ref += static_cast<double>(gm(c, i)) * static_cast<double>(gm(c, i));
      }
    }
    EXPECT_TRUE(std::isfinite(total));
    EXPECT_NEAR(total, ref, 1e-12 * ref);
  }
}

TEST(owner_sums, per_slot_then_per_matrix_masses_give_the_packs_bits) {
  const std::uint64_t seed = zf_test::base_seed() + 3;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 900, len = 45, per_slot = 64;
  auto g = zf_test::random_values<zenflow::bfloat16>(static_cast<std::size_t>(channels * len), seed);
  const channel_matrix<const zenflow::bfloat16> gm{g.data(), channels, len, len, channel_layout::contiguous};
  std::vector<std::int32_t> host_set;
  for (std::int32_t c = 0; c < channels; ++c) {
    if (c % 7 != 3) { // the device set: every seventh channel
      host_set.push_back(c);
    }
  }
  const auto n = static_cast<std::int64_t>(host_set.size());
  // The packs: one gather per D2H slot, each adding its rows' mass (the host twin).
  float packs = 0.0f;
  std::vector<zenflow::bfloat16> staging(static_cast<std::size_t>(per_slot * len));
  for (std::int64_t s = 0; s < n; s += per_slot) {
    ASSERT_EQ(zenflow::host::gather_channels(gm, host_set.data() + s, std::min(n, s + per_slot) - s,
                                             staging.data(), &packs, nullptr),
              cudaSuccess);
  }
  // The owners (three blocks of the host set): each its rows' L1, zeros elsewhere, summed.
  const std::array<std::int64_t, 4> at{0, 300, 301, n}; // a block of one row
  std::vector<float> rows(static_cast<std::size_t>(n), 0.0f);
  std::vector<float> junk(3, 0.0f);
  for (std::size_t r = 0; r < 3; ++r) {
    std::vector<float> mine(static_cast<std::size_t>(n), 0.0f);
    zenflow::l1_mass_item a{g.data(), zenflow::dtype::bf16,       channels, len,
                            len,      channel_layout::contiguous, true};
    a.idx = host_set.data() + at[r];
    a.count = at[r + 1] - at[r];
    a.row_l1 = mine.data() + at[r];
    a.l1 = junk.data() + r;
    ASSERT_EQ(host_primitives::l1_mass_batched(&a, 1, a.count, nullptr), cudaSuccess);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      rows[i] += mine[i];
    }
  }
  std::vector<float> slots(static_cast<std::size_t>((n + per_slot - 1) / per_slot), 0.0f);
  std::vector<zenflow::l1_mass_item> per_slot_calls;
  for (std::int64_t s = 0, k = 0; s < n; s += per_slot, ++k) {
    zenflow::l1_mass_item c{};
    c.row_l1 = rows.data() + s;
    c.count = std::min(n, s + per_slot) - s;
    c.l1 = slots.data() + k;
    per_slot_calls.push_back(c);
  }
  float mass = 0.0f;
  zenflow::l1_mass_item per_matrix{};
  per_matrix.row_l1 = slots.data();
  per_matrix.count = static_cast<std::int64_t>(slots.size());
  per_matrix.l1 = &mass;
  ASSERT_EQ(host_primitives::l1_mass_add_rows_batched(per_slot_calls.data(),
                                                      static_cast<int>(per_slot_calls.size()), nullptr),
            cudaSuccess);
  ASSERT_EQ(host_primitives::l1_mass_add_rows_batched(&per_matrix, 1, nullptr), cudaSuccess);
  EXPECT_EQ(bits(mass), bits(packs)) << mass << " vs " << packs;
  double ref = 0.0;
  for (const auto c : host_set) {
    for (std::int64_t i = 0; i < len; ++i) {
      ref += std::fabs(static_cast<double>(zenflow::to_float(gm(c, i))));
    }
  }
  EXPECT_NEAR(mass, ref, 1e-5 * ref);
  // The test can fail: one sum over all the rows (no slots) is another order, other bits.
  float flat = 0.0f;
  zenflow::l1_mass_item one{};
  one.row_l1 = rows.data();
  one.count = n;
  one.l1 = &flat;
  ASSERT_EQ(host_primitives::l1_mass_add_rows_batched(&one, 1, nullptr), cudaSuccess);
  EXPECT_NE(bits(flat), bits(mass)) << "inputs too tame: the slots' order did not show";
}

// ZeRO-3 (dp/shard_masses.hpp): three ranks hold contiguous shards of a bf16 matrix (one of a
// single channel); each computes its rows' masses (its device set, then its host set, ascending)
// into its part of the gathered buffer after its device-set count. shard_masses then gives the
// bits of one rank holding the whole matrix: the crit mass of the update's one call over the
// device set, the rest mass of the packs (gather_channels' host twin, one call per D2H slot).
TEST(owner_sums, a_sharded_matrixs_gathered_row_masses_give_one_ranks_crit_and_rest) {
  const std::uint64_t seed = zf_test::base_seed() + 4;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t channels = 600, len = 37, per_slot = 50;
  auto g = zf_test::random_values<zenflow::bfloat16>(static_cast<std::size_t>(channels * len), seed);
  const channel_matrix<const zenflow::bfloat16> gm{g.data(), channels, len, len, channel_layout::contiguous};
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> sel, host_set;
  for (std::int32_t c = 0; c < channels; ++c) {
    (gen() % 5 == 0 ? sel : host_set).push_back(c);
  }
  // One rank: the update's one call over the device set, the packs over the host set.
  float crit = 0.0f;
  std::vector<float> scratch(static_cast<std::size_t>(channels));
  zenflow::l1_mass_item whole{g.data(), zenflow::dtype::bf16,       channels, len,
                              len,      channel_layout::contiguous, true};
  whole.idx = sel.data();
  whole.count = static_cast<std::int64_t>(sel.size());
  whole.row_l1 = scratch.data();
  whole.l1 = &crit;
  zenflow::detail::host_l1_mass(whole, nullptr);
  float rest = 0.0f;
  const auto n = static_cast<std::int64_t>(host_set.size());
  std::vector<zenflow::bfloat16> staging(static_cast<std::size_t>(per_slot * len));
  for (std::int64_t s = 0; s < n; s += per_slot) {
    ASSERT_EQ(zenflow::host::gather_channels(gm, host_set.data() + s, std::min(n, s + per_slot) - s,
                                             staging.data(), &rest, nullptr),
              cudaSuccess);
  }
  // Three ranks: shards [0, 250), [250, 251), [251, 600), gathered as the engine lays them out.
  const std::array<std::int32_t, 4> first{0, 250, 251, static_cast<std::int32_t>(channels)};
  std::vector<float> gathered;
  std::vector<zenflow::detail::shard_mass_part> parts;
  for (std::size_t r = 0; r < 3; ++r) {
    const auto lo = first[r];
    const auto hi = first[r + 1];
    std::vector<std::int32_t> rows; // shard indices: its device set, then its host set
    for (const auto c : sel) {
      if (c >= lo && c < hi) {
        rows.push_back(c - lo);
      }
    }
    const auto k = static_cast<std::int32_t>(rows.size());
    for (const auto c : host_set) {
      if (c >= lo && c < hi) {
        rows.push_back(c - lo);
      }
    }
    float count_word = 0.0f;
    std::memcpy(&count_word, &k, 4);
    gathered.push_back(count_word);
    const auto at = static_cast<std::int64_t>(gathered.size());
    gathered.resize(gathered.size() + rows.size());
    float junk = 0.0f;
    zenflow::l1_mass_item a{g.data() + static_cast<std::size_t>(lo * len),
                            zenflow::dtype::bf16,
                            hi - lo,
                            len,
                            len,
                            channel_layout::contiguous,
                            true};
    a.idx = rows.data();
    a.count = static_cast<std::int64_t>(rows.size());
    a.row_l1 = gathered.data() + at;
    a.l1 = &junk;
    ASSERT_EQ(host_primitives::l1_mass_batched(&a, 1, a.count, nullptr), cudaSuccess);
    parts.push_back({at - 1, at, static_cast<std::int64_t>(rows.size())});
  }
  const zenflow::detail::shard_mass_item item{parts.data(), 3, per_slot, 1};
  std::array<float, 2> got_crit{-1.0f, -1.0f}, got_rest{-1.0f, -1.0f};
  const std::uint32_t go = 0, skip = 1;
  ASSERT_EQ(zenflow::detail::shard_masses_on(host_primitives{}, &item, 1, gathered.data(), &go,
                                             got_crit.data(), got_rest.data(), nullptr),
            cudaSuccess);
  EXPECT_EQ(bits(got_crit[1]), bits(crit)) << got_crit[1] << " vs " << crit;
  EXPECT_EQ(bits(got_rest[1]), bits(rest)) << got_rest[1] << " vs " << rest;
  EXPECT_EQ(got_crit[0], -1.0f); // matrix 0's words untouched
  double ref_crit = 0.0, ref_rest = 0.0;
  for (std::int32_t c = 0; c < channels; ++c) {
    double row = 0.0;
    for (std::int64_t i = 0; i < len; ++i) {
      row += std::fabs(static_cast<double>(zenflow::to_float(gm(c, i))));
    }
    (std::binary_search(sel.begin(), sel.end(), c) ? ref_crit : ref_rest) += row;
  }
  EXPECT_NEAR(got_crit[1], ref_crit, 1e-5 * ref_crit);
  EXPECT_NEAR(got_rest[1], ref_rest, 1e-5 * ref_rest);
  // A skipped step: no crit mass (the update adds none), the rest mass all the same (the packs').
  ASSERT_EQ(zenflow::detail::shard_masses_on(host_primitives{}, &item, 1, gathered.data(), &skip,
                                             got_crit.data(), got_rest.data(), nullptr),
            cudaSuccess);
  EXPECT_EQ(got_crit[1], 0.0f);
  EXPECT_EQ(bits(got_rest[1]), bits(rest));
}

} // namespace
