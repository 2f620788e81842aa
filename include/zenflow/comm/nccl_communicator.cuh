/// @file
/// `nccl_communicator`: the communicator concept over the user's `ncclComm_t`, for the CUDA
/// backend. Device pointers; every collective is enqueued on the given stream (no host wait,
/// safe under graph capture) except verify_same, which returns a verdict and so waits. Needs
/// nvcc and `<nccl.h>`: link `zenflow::nccl`.
///
/// - The communicator is the user's and stays theirs: not duplicated, not destroyed here.
/// - Reductions are NCCL's (ncclAllReduce, ncclSum). Same bits on every rank: in every NCCL
///   algorithm (ring, tree, NVLS, CollNet) each element's sum is computed once and then copied to
///   every rank, so all ranks read one value. Same bits from run to run: for the same NCCL
///   version, topology, rank count, sizes and NCCL_* environment, NCCL picks the same algorithm
///   and order; set NCCL_ALGO / NCCL_PROTO to pin it across machines. The order differs from
///   mpi_communicator's rank-order float64 fold, so the two models need not agree bit for bit
///   with each other (each agrees with itself on every rank).
/// - all_reduce_mean, reduce_scatter_mean: the float sum, then a division by size() (correctly
///   rounded), not NCCL's ncclAvg (which scales each input first).
/// - all_reduce_or: NCCL has no or: an all-gather into a scratch buffer (grown stream-ordered
///   with cudaMallocAsync) and an or kernel.
/// - Uneven reduce-scatter / all-gather: a group of ncclReduce / ncclBroadcast calls, one per
///   owner; equal blocks use ncclReduceScatter / ncclAllGather. all_gather_bytes may run in place
///   only with `send` at the rank's own block of `recv`.
/// - Bounds: the stream-ordered calls cannot wait, so a missing rank shows up as a stream that
///   never completes; the engine bounds its own waits on the stream (and verify_same bounds its
///   wait by `nccl_options::timeout`, polling ncclCommGetAsyncError). After comm_timeout the
///   communicator is unusable; end the job or call ncclCommAbort (which needs a communicator made
///   non-blocking for the abort to take effect while a kernel is stuck).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/detail/nccl_kernels.cuh>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// Settings of an nccl_communicator.
struct nccl_options {
  /// verify_same's bound on its wait (> 0).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/// The communicator concept over an NCCL communicator (not owned). Move-only.
class nccl_communicator {
public:
  static constexpr bool is_device = true;

  /// @throws invalid_argument for a null `comm` or a timeout <= 0; comm_error if NCCL cannot
  ///         answer rank and size; cuda_error if the small verify_same buffer cannot be allocated.
  explicit nccl_communicator(ncclComm_t comm, nccl_options options = {}) : comm_(comm), options_(options) {
    constexpr std::string_view fn = "zenflow::nccl_communicator";
    if (comm == nullptr) {
      detail::comm::bad_argument(fn, "comm", "is null");
    }
    if (options.timeout.count() <= 0) {
      detail::comm::bad_argument(fn, "options.timeout", "must be positive");
    }
    nccl(ncclCommUserRank(comm_, &rank_), "zenflow::nccl_communicator: ncclCommUserRank");
    nccl(ncclCommCount(comm_, &size_), "zenflow::nccl_communicator: ncclCommCount");
    detail::check(cudaMalloc(&hashes_, static_cast<std::size_t>(size_) * sizeof(std::uint64_t)),
                  "zenflow::nccl_communicator: cudaMalloc");
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&& o) noexcept { swap(o); }
  nccl_communicator& operator=(nccl_communicator&& o) noexcept {
    if (this != &o) {
      nccl_communicator tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  /// Frees the scratch buffers (not after a timeout: NCCL may still write into them).
  ~nccl_communicator() {
    if (!failure_.empty()) {
      return;
    }
    if (hashes_ != nullptr) {
      (void)cudaFree(hashes_);
    }
    if (scratch_ != nullptr) {
      (void)cudaFree(scratch_);
    }
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] bool usable() const noexcept { return comm_ != nullptr && failure_.empty(); }
  [[nodiscard]] ncclComm_t comm() const noexcept { return comm_; }

  void all_reduce_sum(float* buf, std::size_t n, cudaStream_t stream) {
    all_reduce(buf, n, ncclFloat, ncclSum, "all_reduce_sum", stream);
  }
  void all_reduce_sum(double* buf, std::size_t n, cudaStream_t stream) {
    all_reduce(buf, n, ncclDouble, ncclSum, "all_reduce_sum", stream);
  }
  /// The float sum, then / size() on the stream.
  void all_reduce_mean(float* buf, std::size_t n, cudaStream_t stream) {
    all_reduce(buf, n, ncclFloat, ncclSum, "all_reduce_mean", stream);
    if (size_ > 1 && n > 0) {
      detail::comm::divide_kernel<float>
          <<<detail::comm::grid_for(n), 256, 0, stream>>>(buf, n, static_cast<float>(size_));
      detail::check(cudaGetLastError(), "zenflow::nccl_communicator::all_reduce_mean: divide kernel");
    }
  }
  void all_reduce_max(std::uint32_t* buf, std::size_t n, cudaStream_t stream) {
    all_reduce(buf, n, ncclUint32, ncclMax, "all_reduce_max", stream);
  }
  void all_reduce_or(std::uint32_t* buf, std::size_t n, cudaStream_t stream) {
    const std::string fn = name("all_reduce_or");
    detail::comm::expect_buffer(fn, "buf", buf, n);
    expect_usable(fn);
    if (size_ == 1 || n == 0) {
      return;
    }
    const std::size_t bytes = n * static_cast<std::size_t>(size_) * sizeof(std::uint32_t);
    if (scratch_bytes_ < bytes) {
      if (scratch_ != nullptr) {
        detail::check(cudaFreeAsync(scratch_, stream), fn + ": cudaFreeAsync");
        scratch_ = nullptr;
        scratch_bytes_ = 0;
      }
      detail::check(cudaMallocAsync(&scratch_, bytes, stream), fn + ": cudaMallocAsync");
      scratch_bytes_ = bytes;
    }
    auto* gathered = static_cast<std::uint32_t*>(scratch_);
    nccl(ncclAllGather(buf, gathered, n, ncclUint32, comm_, stream), fn + ": ncclAllGather");
    detail::comm::or_kernel<std::uint32_t>
        <<<detail::comm::grid_for(n), 256, 0, stream>>>(gathered, n, size_, buf);
    detail::check(cudaGetLastError(), fn + ": or kernel");
  }

  void reduce_scatter_sum(const float* send,
                          float* recv,
                          std::span<const std::size_t> counts,
                          cudaStream_t stream) {
    scatter_sum(send, recv, counts, stream, name("reduce_scatter_sum"));
  }

  /// reduce_scatter_sum, then / size() on the stream (as all_reduce_mean). The sums are NCCL's
  /// (ncclReduceScatter, or a group of ncclReduce for uneven blocks): their order is NCCL's, not
  /// necessarily the one its all-reduce takes, so an element's bits may differ from
  /// all_reduce_mean's (the same on every rank either way: each element is reduced once).
  void reduce_scatter_mean(const float* send,
                           float* recv,
                           std::span<const std::size_t> counts,
                           cudaStream_t stream) {
    const std::string fn = name("reduce_scatter_mean");
    scatter_sum(send, recv, counts, stream, fn);
    const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
    if (size_ > 1 && mine > 0) {
      detail::comm::divide_kernel<float>
          <<<detail::comm::grid_for(mine), 256, 0, stream>>>(recv, mine, static_cast<float>(size_));
      detail::check(cudaGetLastError(), fn + ": divide kernel");
    }
  }

  void
  all_gather_bytes(const void* send, void* recv, std::span<const std::size_t> counts, cudaStream_t stream) {
    const std::string fn = name("all_gather_bytes");
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size_);
    detail::comm::expect_buffer(fn, "send", send, counts[static_cast<std::size_t>(rank_)]);
    detail::comm::expect_buffer(fn, "recv", recv, total);
    expect_usable(fn);
    if (total == 0) {
      return;
    }
    auto* out = static_cast<unsigned char*>(recv);
    if (equal(counts)) {
      nccl(ncclAllGather(send, out, counts[0], ncclUint8, comm_, stream), fn + ": ncclAllGather");
      return;
    }
    nccl(ncclGroupStart(), fn + ": ncclGroupStart");
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t c = counts[static_cast<std::size_t>(r)];
      if (c > 0) {
        nccl(ncclBroadcast(r == rank_ ? send : out + off, out + off, c, ncclUint8, r, comm_, stream),
             fn + ": ncclBroadcast");
      }
      off += c;
    }
    nccl(ncclGroupEnd(), fn + ": ncclGroupEnd");
  }

  void broadcast_bytes(void* buf, std::size_t bytes, int root, cudaStream_t stream) {
    const std::string fn = name("broadcast_bytes");
    detail::comm::expect_buffer(fn, "buf", buf, bytes);
    detail::comm::expect_root(fn, root, size_);
    expect_usable(fn);
    if (bytes > 0) {
      nccl(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream), fn + ": ncclBroadcast");
    }
  }

  /// Gathers every rank's hash on `stream` and waits for it (bounded by nccl_options::timeout);
  /// throws invalid_argument naming `what` and the ranks that differ, on every rank.
  void verify_same(std::uint64_t hash, std::string_view what, cudaStream_t stream) {
    const std::string fn = name("verify_same");
    expect_usable(fn);
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
    all[static_cast<std::size_t>(rank_)] = hash;
    detail::check(cudaMemcpyAsync(hashes_ + rank_, &all[static_cast<std::size_t>(rank_)],
                                  sizeof(std::uint64_t), cudaMemcpyHostToDevice, stream),
                  fn + ": cudaMemcpyAsync");
    nccl(ncclAllGather(hashes_ + rank_, hashes_, 1, ncclUint64, comm_, stream), fn + ": ncclAllGather");
    detail::check(cudaMemcpyAsync(all.data(), hashes_, all.size() * sizeof(std::uint64_t),
                                  cudaMemcpyDeviceToHost, stream),
                  fn + ": cudaMemcpyAsync");
    wait(stream, fn);
    detail::comm::verify_same_verdict(fn, what, all);
  }

private:
  void scatter_sum(const float* send,
                   float* recv,
                   std::span<const std::size_t> counts,
                   cudaStream_t stream,
                   const std::string& fn) {
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size_);
    detail::comm::expect_buffer(fn, "send", send, total);
    detail::comm::expect_buffer(fn, "recv", recv, counts[static_cast<std::size_t>(rank_)]);
    expect_usable(fn);
    if (total == 0) {
      return;
    }
    if (equal(counts)) {
      nccl(ncclReduceScatter(send, recv, counts[0], ncclFloat, ncclSum, comm_, stream),
           fn + ": ncclReduceScatter");
      return;
    }
    nccl(ncclGroupStart(), fn + ": ncclGroupStart");
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t c = counts[static_cast<std::size_t>(r)];
      if (c > 0) {
        // recvbuff is read only on the root (NCCL's contract for ncclReduce).
        nccl(ncclReduce(send + off, recv, c, ncclFloat, ncclSum, r, comm_, stream), fn + ": ncclReduce");
      }
      off += c;
    }
    nccl(ncclGroupEnd(), fn + ": ncclGroupEnd");
  }

  static std::string name(std::string_view op) {
    std::string s = "zenflow::nccl_communicator::";
    s += op;
    return s;
  }
  static bool equal(std::span<const std::size_t> counts) {
    for (const std::size_t c : counts) {
      if (c != counts[0]) {
        return false;
      }
    }
    return true;
  }

  void swap(nccl_communicator& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(options_, o.options_);
    std::swap(failure_, o.failure_);
    std::swap(hashes_, o.hashes_);
    std::swap(scratch_, o.scratch_);
    std::swap(scratch_bytes_, o.scratch_bytes_);
  }

  template <class T>
  void all_reduce(
      T* buf, std::size_t n, ncclDataType_t type, ncclRedOp_t op, std::string_view opname, cudaStream_t s) {
    const std::string fn = name(opname);
    detail::comm::expect_buffer(fn, "buf", buf, n);
    expect_usable(fn);
    if (n > 0) {
      nccl(ncclAllReduce(buf, buf, n, type, op, comm_, s), fn + ": ncclAllReduce");
    }
  }

  void expect_usable(const std::string& fn) const {
    if (comm_ == nullptr) {
      throw comm_error(fn + ": the communicator was moved from");
    }
    if (!failure_.empty()) {
      throw comm_error(fn + ": the communicator is unusable after an earlier failure (" + failure_ + ")");
    }
  }

  void nccl(ncclResult_t rc, const std::string& what) {
    if (rc == ncclSuccess || rc == ncclInProgress) {
      return;
    }
    std::string msg = what + ": " + ncclGetErrorString(rc);
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && last[0] != '\0') {
        msg += " (";
        msg += last;
        msg += ")";
      }
    }
    failure_ = msg;
    throw comm_error(msg + "; the communicator is unusable");
  }

  /// Polls the stream against the deadline, and NCCL's asynchronous error.
  void wait(cudaStream_t stream, const std::string& fn) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + options_.timeout;
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) {
        return;
      }
      if (q != cudaErrorNotReady) {
        detail::check(q, fn + ": cudaStreamQuery");
      }
      (void)cudaGetLastError();
      ncclResult_t async = ncclSuccess;
      nccl(ncclCommGetAsyncError(comm_, &async), fn + ": ncclCommGetAsyncError");
      nccl(async, fn + ": asynchronous NCCL error");
      if (clock::now() >= deadline) {
        failure_ = "timeout in " + fn;
        throw comm_timeout(fn + ": not complete after " + std::to_string(options_.timeout.count()) +
                           " ms on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                           ": a rank has failed, hangs, or did not make the same call; the communicator is "
                           "unusable (end the job, or ncclCommAbort)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  nccl_options options_{};
  std::string failure_;
  std::uint64_t* hashes_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

static_assert(communicator<nccl_communicator>);

ZF_NAMESPACE_END
