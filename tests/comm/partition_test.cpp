// The ZeRO-2 channel partition against brute force: ownership recomputed channel by channel from
// the blocks, bytes summed channel by channel, and, on small lists, the best balance any split into
// contiguous per-matrix blocks can reach, found by trying them all.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/partition.hpp>

#include "support/random.hpp"

namespace {

using zenflow::partition_matrix;

std::vector<partition_matrix>
random_list(std::mt19937_64& gen, int max_matrices, int max_channels, int max_bytes) {
  std::uniform_int_distribution<int> nm(1, max_matrices), nc(0, max_channels), nb(1, max_bytes);
  std::vector<partition_matrix> list(static_cast<std::size_t>(nm(gen)));
  for (auto& m : list) {
    m.channels = nc(gen);
    m.channel_bytes = static_cast<std::uint64_t>(nb(gen));
  }
  return list;
}

// Every property the rule promises, checked channel by channel.
void check_partition(const std::vector<partition_matrix>& list,
                     int ranks,
                     const zenflow::channel_partition& p) {
  ASSERT_EQ(p.ranks(), ranks);
  ASSERT_EQ(p.matrices(), list.size());
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(ranks), 0);
  std::uint64_t largest = 0;
  for (std::size_t m = 0; m < list.size(); ++m) {
    const std::int64_t C = list[m].channels;
    largest = std::max(largest, C > 0 ? list[m].channel_bytes : 0);
    // Blocks tile [0, C) in rank order; each holds floor or ceil of C / ranks channels.
    EXPECT_EQ(p.begin(m, 0), 0);
    EXPECT_EQ(p.end(m, ranks - 1), C);
    for (int r = 0; r < ranks; ++r) {
      if (r > 0) {
        EXPECT_EQ(p.begin(m, r), p.end(m, r - 1));
      }
      EXPECT_GE(p.count(m, r), C / ranks);
      EXPECT_LE(p.count(m, r), C / ranks + 1);
    }
    // Channel by channel: exactly one block holds it, owner() says which, and its bytes count
    // toward that rank (a whole channel: no straddling by construction of the check).
    for (std::int64_t c = 0; c < C; ++c) {
      int holders = 0;
      int holder = -1;
      for (int r = 0; r < ranks; ++r) {
        if (p.begin(m, r) <= c && c < p.end(m, r)) {
          ++holders;
          holder = r;
        }
      }
      ASSERT_EQ(holders, 1) << "matrix " << m << " channel " << c;
      EXPECT_EQ(p.owner(m, c), holder) << "matrix " << m << " channel " << c;
      bytes[static_cast<std::size_t>(holder)] += list[m].channel_bytes;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(p.bytes(r), bytes[static_cast<std::size_t>(r)]) << "rank " << r;
  }
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*hi - *lo, largest) << "owned bytes differ by more than one channel";
}

// The smallest possible largest load over every split of every matrix into `ranks` contiguous
// blocks in rank order (any sizes), by exhaustive search.
std::uint64_t best_max_load(const std::vector<partition_matrix>& list, int ranks) {
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> load(static_cast<std::size_t>(ranks), 0);
  auto rec = [&](auto&& self, std::size_t m) -> void {
    if (m == list.size()) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    // Distribute C channels into `ranks` ordered counts.
    auto split = [&](auto&& split_self, int r, std::int64_t left) -> void {
      if (r == ranks - 1) {
        load[static_cast<std::size_t>(r)] += static_cast<std::uint64_t>(left) * list[m].channel_bytes;
        self(self, m + 1);
        load[static_cast<std::size_t>(r)] -= static_cast<std::uint64_t>(left) * list[m].channel_bytes;
        return;
      }
      for (std::int64_t k = 0; k <= left; ++k) {
        load[static_cast<std::size_t>(r)] += static_cast<std::uint64_t>(k) * list[m].channel_bytes;
        split_self(split_self, r + 1, left - k);
        load[static_cast<std::size_t>(r)] -= static_cast<std::uint64_t>(k) * list[m].channel_bytes;
      }
    };
    split(split, 0, list[m].channels);
  };
  rec(rec, 0);
  return best;
}

TEST(channel_partition, worked_example) {
  // Matrix 0: 5 channels of 10 B over 2 ranks: 2 each, the extra to rank 0 (a tie) -> 30 / 20 B.
  // Matrix 1: 3 channels of 100 B: 1 each, the extra to the lighter rank 1 -> 130 / 220 B.
  const std::vector<partition_matrix> list = {{5, 10}, {3, 100}};
  const auto p = zenflow::partition_channels(list, 2);
  EXPECT_EQ(p.end(0, 0), 3);
  EXPECT_EQ(p.end(1, 0), 1);
  EXPECT_EQ(p.bytes(0), 130u);
  EXPECT_EQ(p.bytes(1), 220u);
  check_partition(list, 2, p);
}

TEST(channel_partition, random_lists_against_brute_force) {
  const std::uint64_t seed = zf_test::base_seed() + 11;
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const int ranks = 1 + trial % 7;
    const auto list = random_list(gen, 12, 70, 300);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(ranks) + " ranks");
    check_partition(list, ranks, zenflow::partition_channels(list, ranks));
  }
}

TEST(channel_partition, within_one_channel_of_the_best_contiguous_split) {
  const std::uint64_t seed = zf_test::base_seed() + 12;
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 120; ++trial) {
    const int ranks = 2 + trial % 2;
    const auto list = random_list(gen, 3, 7, 40);
    const auto p = zenflow::partition_channels(list, ranks);
    std::uint64_t ours = 0;
    std::uint64_t largest = 0;
    for (int r = 0; r < ranks; ++r) {
      ours = std::max(ours, p.bytes(r));
    }
    for (const auto& m : list) {
      largest = std::max(largest, m.channels > 0 ? m.channel_bytes : 0);
    }
    EXPECT_LE(ours, best_max_load(list, ranks) + largest) << "trial " << trial;
  }
}

TEST(channel_partition, fewer_channels_than_ranks_and_empty_lists) {
  const std::vector<partition_matrix> list = {{1, 8}, {2, 8}, {0, 8}, {1, 8}};
  const auto p = zenflow::partition_channels(list, 4);
  check_partition(list, 4, p);
  // The single channels land on different ranks, lightest first.
  EXPECT_EQ(p.owner(0, 0), 0);
  EXPECT_EQ(p.owner(1, 0), 1);
  EXPECT_EQ(p.owner(1, 1), 2);
  EXPECT_EQ(p.owner(3, 0), 3);
  const auto none = zenflow::partition_channels({}, 3);
  EXPECT_EQ(none.matrices(), 0u);
  EXPECT_EQ(none.bytes(2), 0u);
}

TEST(channel_partition, bad_arguments_name_the_argument) {
  auto expect = [](auto&& f, const std::string& needle) {
    try {
      (void)f();
      ADD_FAILURE() << "no exception; expected one naming " << needle;
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::vector<partition_matrix> ok = {{4, 8}};
  expect([&] { return zenflow::partition_channels(ok, 0); }, "'ranks' is 0");
  const std::vector<partition_matrix> zero_bytes = {{4, 8}, {4, 0}};
  expect([&] { return zenflow::partition_channels(zero_bytes, 2); }, "'matrices[1].channel_bytes' is 0");
  const std::vector<partition_matrix> negative = {{-1, 8}};
  expect([&] { return zenflow::partition_channels(negative, 2); }, "'matrices[0].channels' is negative");
}

} // namespace
