// The shard helpers (comm/shard.hpp, shard_prefetcher.hpp) under mpiexec -np 2 and 3 (part of
// zf_comm_mpi_tests, whose main is mpi_communicator_test.cpp's): mpi_communicator itself and
// behind emulated_device_communicator, the bodies of shard_cases.hpp.
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

} // namespace
