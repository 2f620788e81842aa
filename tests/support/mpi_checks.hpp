/// @file
/// Checks for the tests that run under mpiexec, in plain MPI (never the communicator under test):
/// this process's rank and the world's size, and whether every rank holds the same bytes.
#pragma once

#include <cstddef>
#include <cstring>
#include <mpi.h>
#include <vector>

namespace zf_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// True when every rank holds the same bytes in `v` (an MPI_Allgather of them, then memcmp).
template <class T>
bool same_on_every_rank(const std::vector<T>& v) {
  const int n = world_size();
  const auto bytes = v.size() * sizeof(T);
  std::vector<unsigned char> all(bytes * static_cast<std::size_t>(n));
  MPI_Allgather(v.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE,
                MPI_COMM_WORLD);
  for (int r = 1; r < n; ++r) {
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(r) * bytes, bytes) != 0) {
      return false;
    }
  }
  return true;
}

} // namespace zf_test
