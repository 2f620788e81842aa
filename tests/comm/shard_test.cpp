// The shard helpers (comm/shard.hpp, shard_prefetcher.hpp) on one rank: local_communicator and
// emulated_device_communicator over it, and the shard rule against the owner partition for 1 to
// 7 ranks on random lists. The multi-rank cases run under mpiexec (mpi_shard_test.cpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/local_communicator.hpp>

#include "shard_cases.hpp"

namespace {

struct local_make {
  static zenflow::local_communicator make() { return {}; }
};

using host = zf_shard_test::host_kind<local_make>;
using emulated = zf_shard_test::emulated_kind<local_make>;

TEST(shard_local, reduce_scatter_gives_the_rows_of_the_mean_host) {
  host k;
  zf_shard_test::reduce_scatter_case<float>(k, 1);
  zf_shard_test::reduce_scatter_case<zenflow::bfloat16>(k, 2);
  zf_shard_test::reduce_scatter_case<zenflow::half>(k, 3);
}

TEST(shard_local, reduce_scatter_gives_the_rows_of_the_mean_emulated) {
  emulated k;
  zf_shard_test::reduce_scatter_case<float>(k, 1);
  zf_shard_test::reduce_scatter_case<zenflow::bfloat16>(k, 2);
  zf_shard_test::reduce_scatter_case<zenflow::half>(k, 3);
}

TEST(shard_local, all_gather_concatenates_the_shards_host) {
  host k;
  zf_shard_test::all_gather_case<float>(k, 4);
  zf_shard_test::all_gather_case<zenflow::bfloat16>(k, 5);
  zf_shard_test::all_gather_case<zenflow::half>(k, 6);
}

TEST(shard_local, all_gather_concatenates_the_shards_emulated) {
  emulated k;
  zf_shard_test::all_gather_case<float>(k, 4);
  zf_shard_test::all_gather_case<zenflow::bfloat16>(k, 5);
  zf_shard_test::all_gather_case<zenflow::half>(k, 6);
}

TEST(shard_local, prefetcher_gathers_each_layer_forward_and_backward_host) {
  host k;
  zf_shard_test::prefetcher_case(k, 7);
}

TEST(shard_local, prefetcher_gathers_each_layer_forward_and_backward_emulated) {
  emulated k;
  zf_shard_test::prefetcher_case(k, 7);
}

TEST(shard_local, bad_arguments_name_the_argument_and_write_nothing_host) {
  host k;
  zf_shard_test::bad_arguments_case(k);
}

TEST(shard_local, bad_arguments_name_the_argument_and_write_nothing_emulated) {
  emulated k;
  zf_shard_test::bad_arguments_case(k);
}

// On an emulated device: a gather reads the shard after the work enqueued on the acquiring stream
// before acquire() (a kernel that writes the shards late); a buffer is overwritten (layer 2 into
// layer 0's) only after the work that read it before the next acquire() (a slow reader); the
// gathers run on the prefetcher's side stream, not behind the layer's compute on the acquiring
// stream. (Whether they overlap it in the emulated timeline depends on its shared compute
// resource's order, so that is not asserted.)
TEST(shard_local, prefetcher_orders_its_gathers_with_the_acquiring_stream) {
  emulated k;
  auto& d = k.device;
  const std::vector<zenflow::shard_matrix> list = {{8, 4, 12}, {8, 4, 12}, {8, 4, 12}};
  const auto layout = zenflow::shard_channels(list, 1);
  std::vector<std::vector<float>> w = {std::vector<float>(32, 1.0f), std::vector<float>(32, 2.0f),
                                       std::vector<float>(32, 5.0f)};
  std::vector<zenflow::shard_gather_layer> layers;
  for (std::size_t m = 0; m < 3; ++m) {
    layers.push_back({m, w[m].data(), zenflow::dtype::f32});
  }
  zenflow::shard_prefetcher<zenflow::emulated_device_communicator<zenflow::local_communicator>> pre(
      k.comm, layout, layers);
  EXPECT_EQ(pre.buffer_bytes(), 32u * 4u);
  d.set_tracing(true);
  d.launch(k.s, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::fill(w[0].begin(), w[0].end(), 3.0f);
    std::fill(w[1].begin(), w[1].end(), 4.0f);
  });
  std::vector<std::vector<float>> seen(3, std::vector<float>(32));
  auto read = [&](std::size_t m, const void* p, int delay_ms) {
    d.launch(k.s, [&seen, m, p, delay_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::memcpy(seen[m].data(), p, 128);
    });
  };
  read(0, pre.acquire(0, k.s), 40); // gathers 0, then 1 on the side stream; a slow reader of 0
  d.compute(k.s, std::chrono::milliseconds(20), "layer 0");
  read(1, pre.acquire(1, k.s), 0); // starts 2 into layer 0's buffer, after the slow reader
  read(2, pre.acquire(2, k.s), 0);
  k.finish();
  EXPECT_EQ(seen[0], std::vector<float>(32, 3.0f));
  EXPECT_EQ(seen[1], std::vector<float>(32, 4.0f));
  EXPECT_EQ(seen[2], std::vector<float>(32, 5.0f));
  const auto trace = d.trace();
  std::vector<zenflow::emulated_op> gathers;
  const zenflow::emulated_op* compute = nullptr;
  for (const auto& op : trace) {
    if (op.name.find("all_gather_bytes") != std::string::npos) {
      gathers.push_back(op);
    }
    if (op.name == "layer 0") {
      compute = &op;
    }
  }
  ASSERT_EQ(gathers.size(), 3u);
  ASSERT_NE(compute, nullptr);
  for (const auto& g : gathers) {
    EXPECT_NE(g.stream, compute->stream);
  }
}

TEST(shard_channels, is_the_owner_partition_and_covers_every_channel_once) {
  zf_shard_test::check_rule(zf_shard_test::sample_list(), 1);
  zf_shard_test::check_rule(zf_shard_test::sample_list(), 4);
  std::mt19937_64 gen(zf_test::base_seed() + 33);
  std::uniform_int_distribution<std::int64_t> nm(0, 9), nc(0, 40), nl(1, 300);
  std::uniform_int_distribution<int> sb(0, 2), nr(1, 7);
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + ", " + zf_test::seed_note(zf_test::base_seed() + 33));
    std::vector<zenflow::shard_matrix> list(static_cast<std::size_t>(nm(gen)));
    for (auto& m : list) {
      m.channels = nc(gen);
      m.channel_len = nl(gen);
      m.state_bytes = static_cast<std::uint32_t>(4 + 4 * sb(gen)); // 4, 8 or 12
    }
    zf_shard_test::check_rule(list, nr(gen));
  }
}

// A hand-checked case: 5 channels of 10 elements and 3 of 100 over 2 ranks. Matrix 0: 2 and 3
// channels would tie on bytes; the extra channel goes to the lighter (then lower) rank 0: rank 0
// holds [0, 3), rank 1 [3, 5). Matrix 1: rank 1 is lighter (20 x 12 vs 30 x 12 bytes), so it
// takes the extra channel: rank 0 [0, 1), rank 1 [1, 3).
TEST(shard_channels, a_small_list_by_hand) {
  const std::vector<zenflow::shard_matrix> list = {{5, 10, 12}, {3, 100, 12}};
  const auto l = zenflow::shard_channels(list, 2);
  EXPECT_EQ(l.first(0, 0), 0);
  EXPECT_EQ(l.count(0, 0), 3);
  EXPECT_EQ(l.first(0, 1), 3);
  EXPECT_EQ(l.count(0, 1), 2);
  EXPECT_EQ(l.first(1, 0), 0);
  EXPECT_EQ(l.count(1, 0), 1);
  EXPECT_EQ(l.first(1, 1), 1);
  EXPECT_EQ(l.count(1, 1), 2);
  EXPECT_EQ(zenflow::shard_staging_floats(l, 1, 1), 300u + 200u);
  EXPECT_EQ(zenflow::shard_staging_floats(l, 0), 300u + 100u);
  EXPECT_NE(l.hash(), zenflow::shard_channels(list, 3).hash());
}

} // namespace
