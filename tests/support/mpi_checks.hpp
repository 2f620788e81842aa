/// @file
/// Checks for the tests that run under mpiexec, in plain MPI (never the communicator under test):
/// this process's rank and the world's size, whether every rank holds the same bytes, and notes
/// between ranks that order their events.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstring>
#include <mpi.h>
#include <thread>
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

/// A note from one rank to another, for the tests that assert the order of events across ranks
/// ("rank 0 gave up before the others entered the collective") instead of how long each took:
/// under mpiexec on 2 cores and a sanitizer, any wall-clock bound may be missed. The rank whose
/// event comes first calls `tell(to)` after it; the other posts a `note` (before anything that
/// could depend on it), waits for it, and only then acts. Each note is told exactly once, on the
/// failure paths too, so that its destructor completes it. Plain MPI on MPI_COMM_WORLD with its own
/// tag: it never touches the communicator under test.
inline constexpr int note_tag = 0x2f1;

inline void tell(int to) {
  const int word = 1;
  MPI_Send(&word, 1, MPI_INT, to, note_tag, MPI_COMM_WORLD);
}

class note {
public:
  explicit note(int from) { MPI_Irecv(&word_, 1, MPI_INT, from, note_tag, MPI_COMM_WORLD, &request_); }
  note(const note&) = delete;
  note& operator=(const note&) = delete;
  ~note() {
    if (!arrived_) {
      MPI_Wait(&request_, MPI_STATUS_IGNORE);
    }
  }

  /// True once the note has come; false when `patience` passed first. The patience is no bound
  /// on the behaviour under test: it only ends a test whose awaited event never happens (a hang)
  /// instead of hanging it, so it is long.
  bool arrived(std::chrono::milliseconds patience = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (!arrived_) {
      int done = 0;
      MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      arrived_ = done != 0;
      if (!arrived_ && std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

private:
  int word_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool arrived_ = false;
};

} // namespace zf_test
