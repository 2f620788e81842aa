// The main() of the GoogleTest programs run under mpiexec: MPI initialized FUNNELED (the engine and
// the tests call the communicator on one thread), rank 0 prints the usual report and the other
// ranks print only their failures, each with its rank. A test file includes this header once and
// defines `int main(int argc, char** argv) { return zf_test::mpi_gtest_main(argc, argv); }`.
#pragma once

#include <cstdio>
#include <mpi.h>

#include <gtest/gtest.h>

namespace zf_test {

/// Prints a failed assertion of a rank other than 0 with its rank.
class rank_failures : public ::testing::EmptyTestEventListener {
public:
  explicit rank_failures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::printf("[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                  r.summary());
    }
  }

private:
  int rank_;
};

inline int mpi_gtest_main(int argc, char** argv) {
  int provided = 0;
  // SERIALIZED: emulated_device_communicator calls MPI from the emulated device's stream threads.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "this MPI provides thread level %d; the tests need MPI_THREAD_SERIALIZED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new rank_failures(rank));
  }
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}

} // namespace zf_test
