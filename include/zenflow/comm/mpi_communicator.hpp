/// @file
/// `mpi_communicator`: the communicator concept over the user's `MPI_Comm`, for the host and
/// emulated backends (host pointers; every call is complete when it returns; the stream argument
/// is ignored). Needs `<mpi.h>`: link `zenflow::mpi`.
///
/// - Own traffic: the constructor duplicates the user's communicator (`MPI_Comm_idup`), so our
///   messages never match the user's, and sets `MPI_ERRORS_RETURN` on the duplicate, so an MPI
///   error becomes a `comm_error` instead of ending the job.
/// - Bounded waits: every collective is non-blocking (`MPI_Iallgather`, `MPI_Ialltoallv`, ...)
///   and polled with `MPI_Test` against a deadline (`mpi_options::timeout`, 60 s by default). A
///   rank that has failed, hangs or never makes the same call makes the others throw
///   `comm_timeout` within that bound instead of hanging.
/// - After a timeout the communicator is unusable: every later call throws `comm_error`. The
///   operation that timed out is still posted inside MPI (MPI cannot cancel a collective), so its
///   buffers, which are the communicator's own staging buffers, never the caller's, are kept
///   alive until the process ends, and the duplicate is not freed. End the job (`MPI_Abort`):
///   the ranks no longer agree on which collective comes next.
/// - Deterministic reductions: MPI_Allreduce's order is implementation-defined, so sums and means
///   are an all-gather followed by a fold in rank order in float64, rounded once
///   (detail/fixed_order.hpp): the same bits on every rank and in every run. This moves N x n
///   values instead of ~2n, which is fine for what the engine reduces this way (per-channel
///   scores, Zen-auto masses, norms, the selected channels' gradients at CI sizes); large
///   buffers are processed in chunks of at most `mpi_options::max_gather_bytes` (64 MiB) of
///   gathered data.
/// - reduce_scatter_sum / reduce_scatter_mean are `MPI_Ialltoallv` (each rank receives every
///   rank's copy of its own block: the same (N-1)/N volume as a ring reduce-scatter) followed by
///   the same fold, so an element's mean has the bits all_reduce_mean gives it; chunked like the
///   reductions.
/// - Threads: call from one thread at a time (MPI_THREAD_SERIALIZED, or FUNNELED from the main
///   thread, is enough). Messages are limited to 2^31-1 elements per block (MPI's int counts).
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mpi.h>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/detail/fixed_order.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// Settings of an mpi_communicator.
struct mpi_options {
  /// The longest a collective may take before it throws comm_timeout (> 0).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// The most gathered bytes a reduction holds at once (>= 1): larger buffers are reduced in
  /// chunks of max(1, max_gather_bytes / (size() x element)) elements; the result is the same.
  std::size_t max_gather_bytes = std::size_t{64} << 20;
};

namespace detail::comm {

/// Staging buffers of operations that timed out: MPI may still write into them, so they live as
/// long as the process (reachable from here, so leak checkers do not report them).
inline void keep_until_exit(std::vector<std::byte>&& a, std::vector<std::byte>&& b) {
  static std::mutex m;
  static std::vector<std::vector<std::byte>> kept;
  const std::lock_guard<std::mutex> lock(m);
  kept.push_back(std::move(a));
  kept.push_back(std::move(b));
}

template <class T>
MPI_Datatype mpi_type();
template <>
inline MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype mpi_type<std::uint32_t>() {
  return MPI_UINT32_T;
}
template <>
inline MPI_Datatype mpi_type<std::uint64_t>() {
  return MPI_UINT64_T;
}

} // namespace detail::comm

/// The communicator concept over an MPI communicator. Move-only.
class mpi_communicator {
public:
  static constexpr bool is_device = false;

  /// Duplicates `comm` (collective over `comm`: every rank constructs its communicator together;
  /// bounded by `options.timeout`). MPI must be initialized and not finalized.
  /// @throws invalid_argument for MPI not initialized, MPI_COMM_NULL or a timeout <= 0;
  ///         comm_timeout / comm_error if the duplication does not complete.
  explicit mpi_communicator(MPI_Comm comm, mpi_options options = {}) : options_(options) {
    constexpr std::string_view fn = "zenflow::mpi_communicator";
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized == 0 || finalized != 0) {
      detail::comm::bad_argument(fn, "comm", "cannot be used: MPI is not initialized, or already finalized");
    }
    if (comm == MPI_COMM_NULL) {
      detail::comm::bad_argument(fn, "comm", "is MPI_COMM_NULL");
    }
    if (options.timeout.count() <= 0) {
      detail::comm::bad_argument(fn, "options.timeout", "must be positive");
    }
    if (options.max_gather_bytes == 0) {
      detail::comm::bad_argument(fn, "options.max_gather_bytes", "is 0");
    }
    // The user's communicator answers rank and size for the messages of a failed duplication.
    (void)MPI_Comm_rank(comm, &rank_);
    (void)MPI_Comm_size(comm, &size_);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Comm_idup(comm, &comm_, &req), "MPI_Comm_idup");
    wait(req, "zenflow::mpi_communicator (MPI_Comm_idup)");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  mpi_communicator(mpi_communicator&& o) noexcept { swap(o); }
  mpi_communicator& operator=(mpi_communicator&& o) noexcept {
    if (this != &o) {
      mpi_communicator tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }

  /// Frees the duplicate, unless a collective timed out on it (MPI still holds an operation on
  /// it) or MPI is already finalized.
  ~mpi_communicator() {
    if (comm_ == MPI_COMM_NULL || !failure_.empty()) {
      return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized == 0) {
      (void)MPI_Comm_free(&comm_);
    }
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The host bytes it keeps to stage its calls (grown to the largest gather's or round's).
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return send_.capacity() + recv_.capacity(); }
  /// False after a timeout or transport error (every call then throws comm_error).
  [[nodiscard]] bool usable() const noexcept { return comm_ != MPI_COMM_NULL && failure_.empty(); }
  /// The private duplicate the collectives run on.
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }

  /// In place: buf[i] = the float64 sum over ranks in rank order, rounded once to float.
  void all_reduce_sum(float* buf, std::size_t n, cudaStream_t = nullptr) {
    fold_all(buf, n, false, "all_reduce_sum");
  }
  /// In place: buf[i] = the sum over ranks in rank order, in float64.
  void all_reduce_sum(double* buf, std::size_t n, cudaStream_t = nullptr) {
    fold_all(buf, n, false, "all_reduce_sum");
  }
  /// In place: buf[i] = (the float64 sum in rank order) / size(), rounded once to float.
  void all_reduce_mean(float* buf, std::size_t n, cudaStream_t = nullptr) {
    fold_all(buf, n, true, "all_reduce_mean");
  }
  /// In place: the maximum over ranks (exact).
  void all_reduce_max(std::uint32_t* buf, std::size_t n, cudaStream_t = nullptr) {
    fold_all(buf, n, false, "all_reduce_max");
  }
  /// In place: the bitwise or over ranks (exact).
  void all_reduce_or(std::uint32_t* buf, std::size_t n, cudaStream_t = nullptr) {
    fold_all(buf, n, true, "all_reduce_or");
  }

  /// `send`: size() blocks back to back, block r of counts[r] floats. `recv` (counts[rank()]
  /// floats) receives the sum over ranks of block rank(), folded as all_reduce_sum folds.
  void reduce_scatter_sum(const float* send,
                          float* recv,
                          std::span<const std::size_t> counts,
                          cudaStream_t = nullptr) {
    scatter_fold(send, recv, counts, false, "reduce_scatter_sum");
  }
  /// reduce_scatter_sum's blocks, `recv` receiving the mean: each element the bits all_reduce_mean
  /// gives it (the same rank-order float64 fold, / size() in float64, rounded once).
  void reduce_scatter_mean(const float* send,
                           float* recv,
                           std::span<const std::size_t> counts,
                           cudaStream_t = nullptr) {
    scatter_fold(send, recv, counts, true, "reduce_scatter_mean");
  }

  /// Rank r contributes counts[r] bytes from `send`; `recv` receives every block back to back.
  /// `send` may alias any part of `recv` (it is read before `recv` is written).
  void all_gather_bytes(const void* send,
                        void* recv,
                        std::span<const std::size_t> counts,
                        cudaStream_t = nullptr) {
    const std::string fn = name("all_gather_bytes");
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size_);
    const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
    detail::comm::expect_buffer(fn, "send", send, mine);
    detail::comm::expect_buffer(fn, "recv", recv, total);
    expect_int_total(fn, total);
    expect_usable(fn);
    std::vector<int> rcounts(static_cast<std::size_t>(size_)), rdispls(rcounts.size());
    std::size_t off = 0;
    for (std::size_t r = 0; r < rcounts.size(); ++r) {
      rcounts[r] = static_cast<int>(counts[r]);
      rdispls[r] = static_cast<int>(off);
      off += counts[r];
    }
    std::byte* s = stage<std::byte>(send_, mine);
    if (mine > 0) {
      std::memcpy(s, send, mine);
    }
    std::byte* g = stage<std::byte>(recv_, total);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallgatherv(s, static_cast<int>(mine), MPI_BYTE, g, rcounts.data(), rdispls.data(), MPI_BYTE,
                          comm_, &req),
          fn + ": MPI_Iallgatherv");
    wait(req, fn);
    if (total > 0) {
      std::memcpy(recv, g, total);
    }
  }

  /// `bytes` bytes of root's `buf` into every rank's `buf`.
  void broadcast_bytes(void* buf, std::size_t bytes, int root, cudaStream_t = nullptr) {
    const std::string fn = name("broadcast_bytes");
    detail::comm::expect_buffer(fn, "buf", buf, bytes);
    detail::comm::expect_root(fn, root, size_);
    expect_int_total(fn, bytes);
    expect_usable(fn);
    std::byte* s = stage<std::byte>(send_, bytes);
    if (rank_ == root && bytes > 0) {
      std::memcpy(s, buf, bytes);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibcast(s, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req), fn + ": MPI_Ibcast");
    wait(req, fn);
    if (rank_ != root && bytes > 0) {
      std::memcpy(buf, s, bytes);
    }
  }

  /// Gathers every rank's `hash`; throws invalid_argument naming `what` and the ranks whose hash
  /// differs from rank 0's (on every rank). Bounded like every collective.
  void verify_same(std::uint64_t hash, std::string_view what, cudaStream_t = nullptr) {
    const std::string fn = name("verify_same");
    expect_usable(fn);
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
    gather_into(&hash, 1, all.data(), fn);
    detail::comm::verify_same_verdict(fn, what, all);
  }

private:
  static std::string name(std::string_view op) {
    std::string s = "zenflow::mpi_communicator::";
    s += op;
    return s;
  }

  void swap(mpi_communicator& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(options_, o.options_);
    std::swap(failure_, o.failure_);
    std::swap(send_, o.send_);
    std::swap(recv_, o.recv_);
  }

  static void expect_int_total(const std::string& fn, std::size_t total) {
    if (total > static_cast<std::size_t>(INT_MAX)) {
      detail::comm::bad_argument(fn, "counts",
                                 "total more than 2^31-1 elements (MPI's int counts); split the call");
    }
  }

  void expect_usable(const std::string& fn) const {
    if (comm_ == MPI_COMM_NULL) {
      throw comm_error(fn + ": the communicator was moved from");
    }
    if (!failure_.empty()) {
      throw comm_error(fn + ": the communicator is unusable after an earlier failure (" + failure_ + ")");
    }
  }

  template <class T>
  static T* stage(std::vector<std::byte>& v, std::size_t n) {
    if (v.size() < n * sizeof(T)) {
      v.resize(n * sizeof(T));
    }
    return reinterpret_cast<T*>(v.data());
  }

  /// Gathers n values of T from every rank into `out` (rank-major), staging both sides.
  template <class T>
  void gather_into(const T* in, std::size_t n, T* out, const std::string& fn) {
    T* s = stage<T>(send_, n);
    if (n > 0) {
      std::memcpy(s, in, n * sizeof(T));
    }
    const std::size_t all = n * static_cast<std::size_t>(size_);
    T* g = stage<T>(recv_, all);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallgather(s, static_cast<int>(n), detail::comm::mpi_type<T>(), g, static_cast<int>(n),
                         detail::comm::mpi_type<T>(), comm_, &req),
          fn + ": MPI_Iallgather");
    wait(req, fn);
    if (all > 0) {
      std::memcpy(out, g, all * sizeof(T));
    }
  }

  /// Elements of `elem_bytes` per rank in one round of a gather or all-to-all: at most
  /// max_gather_bytes arrive at a rank (one copy from each of the N ranks), and MPI's int counts hold.
  [[nodiscard]] std::size_t round_elements(std::size_t elem_bytes) const {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    return std::max<std::size_t>(1, std::min<std::size_t>(options_.max_gather_bytes / elem_bytes / ranks,
                                                          static_cast<std::size_t>(INT_MAX) / ranks));
  }

  /// All-gather + fold, in chunks of at most options_.max_gather_bytes of gathered values.
  template <class T>
  void fold_all(T* buf, std::size_t n, bool alt, std::string_view op) {
    const std::string fn = name(op);
    detail::comm::expect_buffer(fn, "buf", buf, n);
    expect_usable(fn);
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t chunk = round_elements(sizeof(T));
    std::vector<T> gathered;
    for (std::size_t first = 0; first < n; first += chunk) {
      const std::size_t m = std::min(chunk, n - first);
      gathered.resize(m * ranks);
      gather_into(buf + first, m, gathered.data(), fn);
      if constexpr (std::is_same_v<T, std::uint32_t>) {
        detail::comm::fold_u32(gathered.data(), m, size_, alt, buf + first);
      } else {
        detail::comm::fold_rank_order(gathered.data(), m, size_, alt, buf + first);
      }
    }
  }

  /// The reduce-scatters: rounds of `MPI_Ialltoallv` (rank r receives every rank's copy of the
  /// next piece of its own block: the (N-1)/N volume of a ring reduce-scatter; not
  /// MPI_Reduce_scatter, whose order is the implementation's), each folded in rank order. A round
  /// moves at most max_gather_bytes into a rank (chunk elements of each of its N copies); every
  /// rank runs the same rounds (the counts are the same everywhere).
  void scatter_fold(
      const float* send, float* recv, std::span<const std::size_t> counts, bool mean, std::string_view op) {
    const std::string fn = name(op);
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size_);
    detail::comm::expect_buffer(fn, "send", send, total);
    const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
    detail::comm::expect_buffer(fn, "recv", recv, mine);
    expect_usable(fn);
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t chunk = round_elements(sizeof(float));
    const std::size_t longest = *std::max_element(counts.begin(), counts.end());
    std::vector<int> scounts(ranks), sdispls(ranks), rcounts(ranks), rdispls(ranks);
    std::vector<std::size_t> offsets(ranks);
    for (std::size_t r = 1; r < ranks; ++r) {
      offsets[r] = offsets[r - 1] + counts[r - 1];
    }
    // One round even when every block is empty, so that the ranks meet in a collective.
    for (std::size_t first = 0; first == 0 || first < longest; first += chunk) {
      auto piece = [&](std::size_t n) { return n > first ? std::min(chunk, n - first) : std::size_t{0}; };
      const std::size_t m = piece(mine);
      std::size_t staged = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        scounts[r] = static_cast<int>(piece(counts[r]));
        sdispls[r] = static_cast<int>(staged);
        staged += static_cast<std::size_t>(scounts[r]);
        rcounts[r] = static_cast<int>(m);
        rdispls[r] = static_cast<int>(r * m);
      }
      float* s = stage<float>(send_, staged);
      for (std::size_t r = 0; r < ranks; ++r) {
        if (scounts[r] > 0) {
          std::memcpy(s + sdispls[r], send + offsets[r] + first, static_cast<std::size_t>(scounts[r]) * 4);
        }
      }
      float* g = stage<float>(recv_, m * ranks);
      MPI_Request req = MPI_REQUEST_NULL;
      check(MPI_Ialltoallv(s, scounts.data(), sdispls.data(), MPI_FLOAT, g, rcounts.data(), rdispls.data(),
                           MPI_FLOAT, comm_, &req),
            fn + ": MPI_Ialltoallv");
      wait(req, fn);
      if (m > 0) {
        detail::comm::fold_rank_order(g, m, size_, mean, recv + first);
      }
    }
  }

  void check(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) {
      return;
    }
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    std::string msg = what + ": " + std::string(text, static_cast<std::size_t>(len));
    mark_failed(msg);
    throw comm_error(msg + " (rank " + std::to_string(rank_) + "; the communicator is unusable)");
  }

  void mark_failed(const std::string& why) {
    failure_ = why;
    detail::comm::keep_until_exit(std::move(send_), std::move(recv_));
    send_ = {};
    recv_ = {};
  }

  /// Polls `req` until it completes or the deadline passes. Spins briefly, then sleeps with a
  /// growing pause (up to 1 ms) so that a rank waiting on a slow peer leaves the cores to the
  /// host optimizer.
  void wait(MPI_Request& req, std::string_view fn) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + options_.timeout;
    auto pause = std::chrono::microseconds(1);
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), std::string(fn) + ": MPI_Test");
      if (done != 0) {
        return;
      }
      if (clock::now() >= deadline) {
        std::string msg = std::string(fn) + ": not complete after " +
                          std::to_string(options_.timeout.count()) + " ms on rank " + std::to_string(rank_) +
                          " of " + std::to_string(size_) +
                          ": a rank has failed, hangs, or did not make the same call";
        mark_failed("timeout in " + std::string(fn));
        throw comm_timeout(msg + "; the communicator is unusable (end the job, e.g. MPI_Abort)");
      }
      if (polls >= 64) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  mpi_options options_{};
  std::string failure_;
  std::vector<std::byte> send_;
  std::vector<std::byte> recv_;
};

static_assert(communicator<mpi_communicator>);

ZF_NAMESPACE_END
