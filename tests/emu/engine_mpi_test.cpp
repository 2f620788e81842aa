// The engine's CUDA plan on the emulated device, data parallel (cpu.emu.engine_mpi_np1 and _np2):
// the owner partition (ZeRO-2) and the sharded engine (ZeRO-3) with emulated_cuda_backend over
// emulated_device_communicator<mpi_communicator> (stream-ordered collectives on device buffers,
// the path NCCL takes), a few cases at small shapes. Each rank must equal, bit for bit, a one-rank
// host engine fed the mean gradient (the drivers of tests/engine: data_parallel_driver.hpp and
// sharded_mpi_run.hpp check weights after every step, selections, state, counters).
#include <algorithm>
#include <cstdint>
#include <mpi.h>
#include <string>

#include <gtest/gtest.h>

#include <zenflow/engine/emulated_cuda_backend.hpp>

#include "engine/data_parallel_driver.hpp"
#include "engine/reference_cases.hpp"
#include "engine/sharded_mpi_run.hpp"
#include "support/mpi_gtest_main.hpp"

namespace {

template <class T>
using owner_partition_driver =
    zf_dp_test::dp_driver<T, zf_dp_test::dp_path::emulated_device_comm, zenflow::emulated_cuda_backend>;

void expect_no_reports() {
  for (const auto& r : zenflow::emu::reports()) {
    ADD_FAILURE() << r;
  }
  zenflow::emu::clear_reports();
}

/// Under ThreadSanitizer or AddressSanitizer (some 50 times slower): one case of each engine.
constexpr bool sanitized = ZF_TSAN || ZF_ASAN;

class owner_partition_on_emulated_cuda : public ::testing::TestWithParam<std::string> {};

TEST_P(owner_partition_on_emulated_cuda, every_rank_equals_one_rank_on_the_mean) {
  if (sanitized && GetParam() != "fixed_windows_overlap_float") {
    GTEST_SKIP() << "one case runs under a sanitizer";
  }
  zf_engine_test::run_reference_case<owner_partition_driver>(GetParam());
  expect_no_reports();
}

INSTANTIATE_TEST_SUITE_P(reference,
                         owner_partition_on_emulated_cuda,
                         ::testing::Values("fixed_windows_overlap_float",
                                           "zen_auto_with_warm_up_bf16",
                                           "nan_inf_steps_including_a_pending_selection_bf16",
                                           "offload_sync_nan_steps_float"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

/// The sharded engine's steps on the emulated CUDA plan, checked by sharded_run after each.
template <class T>
void sharded_steps(const zenflow::config& cfg, std::int64_t steps, std::int64_t nan_step = -1) {
  zf_sharded_mpi::sharded_run<T, true, true, zf_sharded_mpi::engine_kind::zero3,
                              zenflow::emulated_cuda_backend>
      r(cfg);
  r.add();
  r.initialize();
  for (std::int64_t t = 0; t < steps; ++t) {
    r.step(t, t == nan_step);
    int failed = ::testing::Test::HasFatalFailure() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed != 0) {
      ADD_FAILURE() << "a rank failed at step " << t;
      return;
    }
  }
  r.check_state();
  expect_no_reports();
}

TEST(sharded_on_emulated_cuda, fp32_rows_equal_one_rank_on_the_mean_through_a_nan_step) {
  sharded_steps<float>(zf_sharded_test::base(), 10, 6);
}

TEST(sharded_on_emulated_cuda, bf16_zen_auto_rows_and_windows_equal_one_rank) {
  if (sanitized) {
    GTEST_SKIP() << "one case runs under a sanitizer";
  }
  auto c = zf_sharded_test::base();
  c.update_interval = 0;
  c.max_update_interval = 4;
  c.auto_ratio = 0.6;
  sharded_steps<zenflow::bfloat16>(c, 10);
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
