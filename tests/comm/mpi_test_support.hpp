// Helpers of the mpi_communicator tests under mpiexec (mpi_communicator_test.cpp,
// mpi_data_parallel_step_test.cpp): the communicator with a bound, and each rank's random inputs,
// seeded by rank and case so that every rank can compute every other rank's.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mpi.h>
#include <random>
#include <vector>

#include <zenflow/comm/mpi_communicator.hpp>

#include "support/mpi_checks.hpp"
#include "support/random.hpp"

namespace zf_comm_test {

using zf_test::same_on_every_rank;

using zenflow::mpi_communicator;
using namespace std::chrono_literals;

// A generous bound for the cases that expect success: a failure elsewhere ends them in 10 s.
inline mpi_communicator make_comm(std::chrono::milliseconds timeout = 10s) {
  return mpi_communicator(MPI_COMM_WORLD, zenflow::mpi_options{timeout});
}

inline std::uint64_t seed_of(int rank, int test) {
  return zf_test::base_seed() + 1000u * static_cast<std::uint64_t>(test) + static_cast<std::uint64_t>(rank);
}

// Values spread over many binades, of both signs, so the summation order shows in the low bits.
inline std::vector<float> inputs(int rank, int test, std::size_t n) {
  std::mt19937_64 gen(seed_of(rank, test));
  std::normal_distribution<float> mant(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-12, 12);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = std::ldexp(mant(gen), expo(gen));
  }
  return v;
}

} // namespace zf_comm_test
