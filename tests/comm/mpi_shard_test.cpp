// The shard helpers (comm/shard.hpp, shard_prefetcher.hpp) under mpiexec -np 2 and 3 (part of
// zf_comm_mpi_tests, whose main is mpi_communicator_test.cpp's): mpi_communicator itself and
// behind emulated_device_communicator, the bodies of shard_cases.hpp.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/mpi_communicator.hpp>

#include "mpi_test_support.hpp"
#include "shard_cases.hpp"

namespace {

struct mpi_make {
  static zenflow::mpi_communicator make() { return zf_comm_test::make_comm(); }
};

using host = zf_shard_test::host_kind<mpi_make>;
using emulated = zf_shard_test::emulated_kind<mpi_make>;

TEST(shard_mpi, reduce_scatter_gives_each_rank_its_rows_of_the_mean_host) {
  host k;
  zf_shard_test::reduce_scatter_case<float>(k, 11);
  zf_shard_test::reduce_scatter_case<zenflow::bfloat16>(k, 12);
  zf_shard_test::reduce_scatter_case<zenflow::half>(k, 13);
}

TEST(shard_mpi, reduce_scatter_gives_each_rank_its_rows_of_the_mean_emulated) {
  emulated k;
  zf_shard_test::reduce_scatter_case<float>(k, 11);
  zf_shard_test::reduce_scatter_case<zenflow::bfloat16>(k, 12);
  zf_shard_test::reduce_scatter_case<zenflow::half>(k, 13);
}

TEST(shard_mpi, all_gather_concatenates_every_ranks_shard_host) {
  host k;
  zf_shard_test::all_gather_case<float>(k, 14);
  zf_shard_test::all_gather_case<zenflow::bfloat16>(k, 15);
  zf_shard_test::all_gather_case<zenflow::half>(k, 16);
}

TEST(shard_mpi, all_gather_concatenates_every_ranks_shard_emulated) {
  emulated k;
  zf_shard_test::all_gather_case<float>(k, 14);
  zf_shard_test::all_gather_case<zenflow::bfloat16>(k, 15);
  zf_shard_test::all_gather_case<zenflow::half>(k, 16);
}

TEST(shard_mpi, prefetcher_gathers_each_layer_forward_and_backward_host) {
  host k;
  zf_shard_test::prefetcher_case(k, 17);
}

TEST(shard_mpi, prefetcher_gathers_each_layer_forward_and_backward_emulated) {
  emulated k;
  zf_shard_test::prefetcher_case(k, 17);
}

TEST(shard_mpi, bad_arguments_throw_on_every_rank_before_anything_is_sent_host) {
  host k;
  zf_shard_test::bad_arguments_case(k);
}

TEST(shard_mpi, bad_arguments_throw_on_every_rank_before_anything_is_sent_emulated) {
  emulated k;
  zf_shard_test::bad_arguments_case(k);
}

// Every rank computes the same shards, and they are the owner partition's blocks over the world.
TEST(shard_mpi, every_rank_computes_the_same_owner_blocks) {
  const auto list = zf_shard_test::sample_list();
  zf_shard_test::check_rule(list, zf_test::world_size());
  const auto layout = zenflow::shard_channels(list, zf_test::world_size());
  std::vector<std::int64_t> blocks;
  for (std::size_t m = 0; m < layout.matrices(); ++m) {
    for (int r = 0; r < layout.ranks(); ++r) {
      blocks.push_back(layout.first(m, r));
      blocks.push_back(layout.count(m, r));
    }
  }
  EXPECT_TRUE(zf_test::same_on_every_rank(blocks));
  EXPECT_TRUE(zf_test::same_on_every_rank(std::vector<std::uint64_t>{layout.hash()}));
}

// A mistake on one rank only: that rank throws invalid_argument naming the argument before it
// sends anything; the others, in the collective without it, throw comm_timeout (naming it) instead
// of hanging. Rank 0 then makes the right call, which completes the operation the others left
// posted (as in mpi_communicator's timeout case), so the job ends cleanly. The order is checked,
// not a duration: rank 0 makes the right call only once every other rank has told it that it
// timed out (zf_test::note), so they pass only by giving up on their own while rank 0 is away.
TEST(shard_mpi, a_mistake_on_one_rank_is_an_error_there_and_a_timeout_elsewhere) {
  using namespace std::chrono_literals;
  const int me = zf_test::world_rank();
  auto comm = zf_comm_test::make_comm(me == 0 ? 20000ms : 300ms);
  const auto list = zf_shard_test::sample_list();
  const auto layout = zenflow::shard_channels(list, comm.size());
  const std::size_t m = 4;
  const auto& s = list[m];
  const auto grads = zf_shard_test::grads_of<float>(me, 30, m, s, zf_shard_test::channel_layout::contiguous);
  std::vector<float> shard(layout.shard_elements(m, me) + static_cast<std::size_t>(s.channel_len));
  std::vector<float> staging(zenflow::shard_staging_floats(layout, me));
  const std::int64_t wrong = me == 0 ? layout.count(m, me) + 1 : layout.count(m, me);
  auto call = [&](std::int64_t channels) {
    zenflow::reduce_scatter_shard<float>(comm, layout, m, grads.cview(),
                                         zenflow::make_channel_matrix(shard.data(), channels, s.channel_len),
                                         staging, nullptr);
  };
  if (me == 0) {
    std::vector<std::unique_ptr<zf_test::note>> timed_out;
    for (int r = 1; r < comm.size(); ++r) {
      timed_out.push_back(std::make_unique<zf_test::note>(r));
    }
    zf_shard_test::expect_invalid([&] { call(wrong); }, "argument 'shard.channels'");
    EXPECT_TRUE(comm.usable());
    for (int r = 1; r < comm.size(); ++r) {
      EXPECT_TRUE(timed_out[static_cast<std::size_t>(r - 1)]->arrived())
          << "rank " << r << " did not time out while rank 0 was away";
    }
    call(layout.count(m, me));
  } else {
    try {
      call(wrong);
      ADD_FAILURE() << "no timeout";
    } catch (const zenflow::comm_timeout& e) {
      EXPECT_NE(std::string(e.what()).find("reduce_scatter_mean"), std::string::npos) << e.what();
    }
    zf_test::tell(0); // rank 0 may make its right call now
    EXPECT_FALSE(comm.usable());
  }
  MPI_Barrier(MPI_COMM_WORLD); // rank 0's right call has completed the others' posted operation
}

// The docs' example (docs/data-parallel.md, "Sharded weights"): a trainer's step over two sharded
// layers, with a forward and a backward stand-in; the layers saw the concatenated shards and each
// rank's gradient shard is its rows of the float64 rank-order mean.
TEST(shard_mpi, a_trainers_step_over_two_layers) {
  auto comm = zf_comm_test::make_comm();
  auto gather_comm = zf_comm_test::make_comm();
  const cudaStream_t stream = nullptr; // a host communicator ignores it
  const int test = 18;
  auto init_shard = [&](std::size_t m, std::vector<float>& w) {
    w = zf_shard_test::values<float>(zf_shard_test::seed_of(comm.rank(), test, m), w.size());
  };
  std::vector<std::vector<float>> seen(2);
  auto forward = [&](std::size_t m, const float* w, std::size_t n) { seen[m].assign(w, w + n); };
  std::vector<std::vector<float>> grads(2);
  auto backward = [&](std::size_t m, const float* w, std::size_t n) -> const std::vector<float>& {
    EXPECT_EQ(std::vector<float>(w, w + n), seen[m]) << "backward's weights, layer " << m;
    grads[m] = zf_shard_test::values<float>(zf_shard_test::seed_of(comm.rank(), test + 1, m), n);
    return grads[m];
  };
  // example-begin zero3-trainer
  const std::vector<zenflow::shard_matrix> list = {{96, 64, 12},
                                                   {40, 96, 12}}; // channels, channel_len, state bytes
  const zenflow::shard_layout layout = zenflow::shard_channels(list, comm.size());
  layout.verify_same(comm, stream); // every rank built the same list, or every rank throws
  const int me = comm.rank();
  // This rank's shards (what it trains), a gradient shard per layer, fp32 staging: allocated once.
  std::vector<std::vector<float>> weights(2), grad_shards(2);
  std::vector<zenflow::shard_gather_layer> layers;
  for (std::size_t m = 0; m < 2; ++m) {
    weights[m].resize(layout.shard_elements(m, me));
    init_shard(m, weights[m]);
    grad_shards[m].resize(layout.shard_elements(m, me));
    layers.push_back({m, weights[m].data(), zenflow::dtype::f32});
  }
  std::vector<float> staging(zenflow::shard_staging_floats(layout, me));
  zenflow::shard_prefetcher<zenflow::mpi_communicator> prefetch(gather_comm, layout, layers);

  for (std::size_t m = 0; m < 2; ++m) { // forward: layer m's full weights (m + 1's on the way)
    const std::size_t n = static_cast<std::size_t>(list[m].channels * list[m].channel_len);
    forward(m, static_cast<const float*>(prefetch.acquire(m, stream)), n);
  }
  for (std::size_t m = 2; m-- > 0;) { // backward: the full gradient to this rank's shard of the mean
    const std::size_t n = static_cast<std::size_t>(list[m].channels * list[m].channel_len);
    const auto* w = static_cast<const float*>(prefetch.acquire(m, stream, m > 0 ? m - 1 : prefetch.none));
    const std::vector<float>& g = backward(m, w, n);
    zenflow::reduce_scatter_shard<float>(
        comm, layout, m, zenflow::make_channel_matrix(g.data(), list[m].channels, list[m].channel_len),
        zenflow::make_channel_matrix(grad_shards[m].data(), layout.count(m, me), list[m].channel_len),
        staging, stream);
  }
  // The optimizer updates `weights` from `grad_shards`; then prefetch.invalidate().
  // example-end zero3-trainer
  const int N = comm.size();
  for (std::size_t m = 0; m < 2; ++m) {
    std::vector<float> full;
    for (int r = 0; r < N; ++r) {
      const auto w =
          zf_shard_test::values<float>(zf_shard_test::seed_of(r, test, m), layout.shard_elements(m, r));
      full.insert(full.end(), w.begin(), w.end());
    }
    EXPECT_EQ(seen[m], full) << "layer " << m;
    const auto len = static_cast<std::size_t>(list[m].channel_len);
    const auto n = static_cast<std::size_t>(list[m].channels) * len;
    std::vector<std::vector<float>> every;
    for (int r = 0; r < N; ++r) {
      every.push_back(zf_shard_test::values<float>(zf_shard_test::seed_of(r, test + 1, m), n));
    }
    for (std::size_t e = 0; e < grad_shards[m].size(); ++e) {
      double acc = 0.0;
      for (int r = 0; r < N; ++r) {
        acc += static_cast<double>(
            every[static_cast<std::size_t>(r)][static_cast<std::size_t>(layout.first(m, me)) * len + e]);
      }
      ASSERT_EQ(grad_shards[m][e], static_cast<float>(acc / N)) << "layer " << m << " element " << e;
    }
  }
}

} // namespace
