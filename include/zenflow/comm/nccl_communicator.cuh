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
/// - all_reduce_or: NCCL has no or: an all-gather into a scratch buffer allocated at
///   construction for `nccl_options::or_elements` elements (nothing is allocated by a
///   collective), and an or kernel. The engine reduces its 0/1 skip flags with all_reduce_max
///   (ncclMax, no scratch).
/// - Uneven reduce-scatter / all-gather: a group of ncclReduce / ncclBroadcast calls, one per
///   owner; equal blocks use ncclReduceScatter / ncclAllGather. all_gather_bytes may run in place
///   only with `send` at the rank's own block of `recv`.
/// - Bounds: the stream-ordered calls cannot wait, so a missing rank shows up as collectives that
///   never complete, and whatever waits on their stream (the engine's consumer thread, the CUDA
///   backend's cudaStreamSynchronize) would wait with them. A watchdog thread bounds that
///   (`nccl_options::revoke_after`, 10 minutes unless set; NCCL >= 2.28.7): each collective is
///   marked by an event, and one not complete that long after it was enqueued, or an asynchronous
///   NCCL error, makes it call ncclCommRevoke once: the collectives' kernels end, every wait on the
///   stream returns, and the next call of this communicator throws comm_timeout with the reason
///   (which collective, which rank). Revoke, not ncclCommAbort: the communicator stays the user's,
///   who then destroys it (ncclCommDestroy, once ncclCommGetAsyncError answers ncclSuccess) or
///   shrinks it. The bound is per collective, from its enqueue to its end: make it longer than the
///   longest time one rank may spend away from the others (a checkpoint written by one rank).
///   Collectives captured into a CUDA graph are not watched (time the graph's launch). While the
///   watchdog runs, NCCL calls on this communicator are serialized with its own (a lock), so
///   other threads must not call NCCL on `comm` at the same time. verify_same bounds its own wait
///   by `nccl_options::timeout`, polling ncclCommGetAsyncError. After comm_timeout the
///   communicator is unusable; end the job, or revoke and destroy the NCCL communicator.
/// - A non-blocking communicator (ncclConfig_t::blocking = 0): a call that answers ncclInProgress
///   is waited for (ncclCommGetAsyncError, bounded by `nccl_options::timeout`) before anything
///   else is enqueued, so the kernels after a collective run after it.
/// - Call it with the communicator's device current (its divide and or kernels launch there, as
///   NCCL's own calls need), and all_reduce_or from one stream at a time (one scratch buffer).
/// - Run-to-run bits with NVLink SHARP (NVLS, the default on NVSwitch systems): NCCL does not
///   promise them (NVIDIA/nccl#1497); set NCCL_NVLS_ENABLE=0 or NCCL_ALGO=Ring,Tree to keep them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
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
#include <zenflow/comm/detail/nccl_probe.cuh>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/kernel.hpp>

ZF_NAMESPACE_BEGIN

/// Settings of an nccl_communicator.
struct nccl_options {
  /// verify_same's bound on its wait, and on a non-blocking communicator's ncclInProgress (> 0).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// The most elements one all_reduce_or reduces (> 0): its scratch, size() x this many uint32,
  /// is allocated at construction.
  std::size_t or_elements = 4096;
  /// The watchdog's bound on each collective, from its enqueue to its end (module comment):
  /// past it, the communicator is revoked. 0 disables the watchdog (no thread, no events).
  /// Needs NCCL >= 2.28.7 (ncclCommRevoke); with an older NCCL it defaults to 0 and a non-zero value
  /// is refused.
  std::chrono::milliseconds revoke_after {
#if ZF_NCCL_HAS_REVOKE
    std::chrono::minutes(10)
#else
    0
#endif
  };
};

/// The communicator concept over an NCCL communicator (not owned). Move-only.
class nccl_communicator {
public:
  static constexpr bool is_device = true;

  /// Allocates, on the communicator's device, verify_same's buffers (a pinned host one
  /// included, so that its wait can be bounded) and all_reduce_or's scratch.
  /// @throws invalid_argument for a null `comm`, a timeout <= 0 or or_elements == 0; comm_error if
  ///         NCCL cannot answer rank, size and device; cuda_error if the buffers cannot be
  ///         allocated.
  explicit nccl_communicator(ncclComm_t comm, nccl_options options = {}) : comm_(comm), options_(options) {
    constexpr std::string_view fn = "zenflow::nccl_communicator";
    if (comm == nullptr) {
      detail::comm::bad_argument(fn, "comm", "is null");
    }
    if (options.timeout.count() <= 0) {
      detail::comm::bad_argument(fn, "options.timeout", "must be positive");
    }
    if (options.or_elements == 0) {
      detail::comm::bad_argument(fn, "options.or_elements", "must be positive");
    }
    if (options.revoke_after.count() < 0) {
      detail::comm::bad_argument(fn, "options.revoke_after", "must be 0 (no watchdog) or positive");
    }
    if (!ZF_NCCL_HAS_REVOKE && options.revoke_after.count() > 0) {
      detail::comm::bad_argument(fn, "options.revoke_after",
                                 "needs NCCL >= 2.28.7 (ncclCommRevoke); set it to 0");
    }
    nccl(ncclCommUserRank(comm_, &rank_), "zenflow::nccl_communicator: ncclCommUserRank");
    nccl(ncclCommCount(comm_, &size_), "zenflow::nccl_communicator: ncclCommCount");
    int device = 0, current = 0;
    nccl(ncclCommCuDevice(comm_, &device), "zenflow::nccl_communicator: ncclCommCuDevice");
    detail::check(cudaGetDevice(&current), "zenflow::nccl_communicator: cudaGetDevice");
    detail::check(cudaSetDevice(device), "zenflow::nccl_communicator: cudaSetDevice");
    const auto n = static_cast<std::size_t>(size_);
    cudaError_t rc = cudaMalloc(&hashes_, n * sizeof(std::uint64_t));
    rc = rc == cudaSuccess ? cudaMallocHost(&host_hashes_, n * sizeof(std::uint64_t)) : rc;
    rc = rc == cudaSuccess && size_ > 1
             ? cudaMalloc(&scratch_, n * options.or_elements * sizeof(std::uint32_t))
             : rc;
    if (rc == cudaSuccess && options.revoke_after.count() > 0) {
      watch_ = std::make_unique<watchdog_parts>();
      for (std::size_t i = 0; i < watched_collectives && rc == cudaSuccess; ++i) {
        cudaEvent_t e = nullptr;
        rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (rc == cudaSuccess) {
          watch_->events.push_back(e);
        }
      }
    }
    (void)cudaSetDevice(current);
    if (rc != cudaSuccess) {
      free_buffers();
      detail::check(rc, "zenflow::nccl_communicator: cudaMalloc / cudaEventCreate");
    }
    if (watch_ != nullptr) {
      watch_->dog.emplace(detail::comm::nccl_probe{comm_, device, &watch_->nccl_lock}, watch_->events,
                          options.revoke_after,
                          "rank " + std::to_string(rank_) + " of " + std::to_string(size_));
    }
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
  /// Stops the watchdog; frees the buffers and events (not after a failure: NCCL or a copy may
  /// still use them).
  ~nccl_communicator() {
    if (watch_ != nullptr) {
      watch_->dog.reset();
    }
    if (failure_.empty() && !revoked()) {
      free_buffers();
    }
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] bool usable() const noexcept { return comm_ != nullptr && failure_.empty() && !revoked(); }
  [[nodiscard]] ncclComm_t comm() const noexcept { return comm_; }
  /// Whether the watchdog revoked the communicator (the reason is in the next call's comm_timeout).
  [[nodiscard]] bool revoked() const noexcept {
    return watch_ != nullptr && watch_->dog && watch_->dog->fired();
  }
  /// Collectives enqueued and marked, not yet seen complete by the watchdog (0 without one).
  [[nodiscard]] std::size_t watched_pending() const {
    return watch_ != nullptr && watch_->dog ? watch_->dog->pending() : 0;
  }

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
      ZF_LAUNCH(detail::comm::grid_for(n), 256, 0, stream, detail::comm::divide_kernel<float>)
      (buf, n, static_cast<float>(size_));
      detail::check(detail::launch_status(), "zenflow::nccl_communicator::all_reduce_mean: divide kernel");
    }
  }
  void all_reduce_max(std::uint32_t* buf, std::size_t n, cudaStream_t stream) {
    all_reduce(buf, n, ncclUint32, ncclMax, "all_reduce_max", stream);
  }
  void all_reduce_or(std::uint32_t* buf, std::size_t n, cudaStream_t stream) {
    const std::string fn = name("all_reduce_or");
    detail::comm::expect_buffer(fn, "buf", buf, n);
    if (n > options_.or_elements) {
      detail::comm::bad_argument(fn, "n",
                                 "exceeds nccl_options::or_elements (" +
                                     std::to_string(options_.or_elements) +
                                     ", the scratch allocated at construction)");
    }
    expect_usable(fn);
    if (size_ == 1 || n == 0) {
      return;
    }
    auto* gathered = static_cast<std::uint32_t*>(scratch_);
    enqueue(stream, fn, [&] {
      nccl(ncclAllGather(buf, gathered, n, ncclUint32, comm_, stream), fn + ": ncclAllGather");
    });
    ZF_LAUNCH(detail::comm::grid_for(n), 256, 0, stream, detail::comm::or_kernel<std::uint32_t>)
    (gathered, n, size_, buf);
    detail::check(detail::launch_status(), fn + ": or kernel");
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
      ZF_LAUNCH(detail::comm::grid_for(mine), 256, 0, stream, detail::comm::divide_kernel<float>)
      (recv, mine, static_cast<float>(size_));
      detail::check(detail::launch_status(), fn + ": divide kernel");
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
    enqueue(stream, fn, [&] {
      if (equal(counts)) {
        nccl(ncclAllGather(send, out, counts[0], ncclUint8, comm_, stream), fn + ": ncclAllGather");
        return;
      }
      group g(*this, fn);
      std::size_t off = 0;
      for (int r = 0; r < size_; ++r) {
        const std::size_t c = counts[static_cast<std::size_t>(r)];
        if (c > 0) {
          nccl(ncclBroadcast(r == rank_ ? send : out + off, out + off, c, ncclUint8, r, comm_, stream),
               fn + ": ncclBroadcast");
        }
        off += c;
      }
      g.end();
    });
  }

  void broadcast_bytes(void* buf, std::size_t bytes, int root, cudaStream_t stream) {
    const std::string fn = name("broadcast_bytes");
    detail::comm::expect_buffer(fn, "buf", buf, bytes);
    detail::comm::expect_root(fn, root, size_);
    expect_usable(fn);
    if (bytes > 0) {
      enqueue(stream, fn, [&] {
        nccl(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream), fn + ": ncclBroadcast");
      });
    }
  }

  /// Gathers every rank's hash on `stream` and waits for it (bounded by nccl_options::timeout);
  /// throws invalid_argument naming `what` and the ranks that differ, on every rank.
  void verify_same(std::uint64_t hash, std::string_view what, cudaStream_t stream) {
    const std::string fn = name("verify_same");
    expect_usable(fn);
    // Through pinned host memory: a copy to or from pageable memory would block this thread
    // until the collective is done, past the bound below.
    const auto n = static_cast<std::size_t>(size_);
    host_hashes_[rank_] = hash;
    detail::check(cudaMemcpyAsync(hashes_ + rank_, host_hashes_ + rank_, sizeof(std::uint64_t),
                                  cudaMemcpyHostToDevice, stream),
                  fn + ": cudaMemcpyAsync");
    enqueue(stream, fn, [&] {
      nccl(ncclAllGather(hashes_ + rank_, hashes_, 1, ncclUint64, comm_, stream), fn + ": ncclAllGather");
    });
    detail::check(
        cudaMemcpyAsync(host_hashes_, hashes_, n * sizeof(std::uint64_t), cudaMemcpyDeviceToHost, stream),
        fn + ": cudaMemcpyAsync");
    wait(stream, fn);
    detail::comm::verify_same_verdict(fn, what, std::vector<std::uint64_t>(host_hashes_, host_hashes_ + n));
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
    enqueue(stream, fn, [&] {
      if (equal(counts)) {
        nccl(ncclReduceScatter(send, recv, counts[0], ncclFloat, ncclSum, comm_, stream),
             fn + ": ncclReduceScatter");
        return;
      }
      group g(*this, fn);
      std::size_t off = 0;
      for (int r = 0; r < size_; ++r) {
        const std::size_t c = counts[static_cast<std::size_t>(r)];
        if (c > 0) {
          // recvbuff is read only on the root (NCCL's contract for ncclReduce).
          nccl(ncclReduce(send + off, recv, c, ncclFloat, ncclSum, r, comm_, stream), fn + ": ncclReduce");
        }
        off += c;
      }
      g.end();
    });
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
    std::swap(host_hashes_, o.host_hashes_);
    std::swap(scratch_, o.scratch_);
    std::swap(watch_, o.watch_);
  }

  void free_buffers() noexcept {
    if (hashes_ != nullptr) {
      (void)cudaFree(hashes_);
    }
    if (host_hashes_ != nullptr) {
      (void)cudaFreeHost(host_hashes_);
    }
    if (scratch_ != nullptr) {
      (void)cudaFree(scratch_);
    }
    hashes_ = host_hashes_ = nullptr;
    scratch_ = nullptr;
    if (watch_ != nullptr) {
      watch_->dog.reset(); // its thread first: it polls the events
      for (cudaEvent_t e : watch_->events) {
        (void)cudaEventDestroy(e);
      }
      watch_.reset();
    }
  }

  /// ncclGroupStart ... ncclGroupEnd, the end also when a call inside throws (NCCL's group depth
  /// is per thread: a group left open would defer every later NCCL call of the thread).
  class group {
  public:
    group(nccl_communicator& c, const std::string& fn) : c_(c), fn_(fn) {
      c_.nccl(ncclGroupStart(), fn_ + ": ncclGroupStart");
    }
    group(const group&) = delete;
    group& operator=(const group&) = delete;
    void end() {
      open_ = false;
      c_.nccl(ncclGroupEnd(), fn_ + ": ncclGroupEnd");
    }
    ~group() {
      if (open_) {
        (void)ncclGroupEnd();
      }
    }

  private:
    nccl_communicator& c_;
    const std::string& fn_;
    bool open_ = true;
  };

  template <class T>
  void all_reduce(
      T* buf, std::size_t n, ncclDataType_t type, ncclRedOp_t op, std::string_view opname, cudaStream_t s) {
    const std::string fn = name(opname);
    detail::comm::expect_buffer(fn, "buf", buf, n);
    expect_usable(fn);
    if (n > 0) {
      enqueue(s, fn, [&] { nccl(ncclAllReduce(buf, buf, n, type, op, comm_, s), fn + ": ncclAllReduce"); });
    }
  }

  /// Runs `calls` (the NCCL calls of one collective) under the NCCL lock, then marks the
  /// collective for the watchdog, after the lock (collective_watchdog's lock order).
  template <class F>
  void enqueue(cudaStream_t stream, const std::string& fn, F&& calls) {
    {
      const auto lk = nccl_lock();
      calls();
    }
    mark(stream, fn);
  }

  /// The lock of NCCL calls on comm_, held while the watchdog runs (nothing to serialize without).
  [[nodiscard]] std::unique_lock<std::mutex> nccl_lock() {
    return watch_ != nullptr ? std::unique_lock<std::mutex>(watch_->nccl_lock)
                             : std::unique_lock<std::mutex>();
  }

  /// Marks the collective just enqueued on `stream` for the watchdog (not under capture: an event
  /// recorded into a graph says nothing until the graph runs). Called without the NCCL lock.
  void mark(cudaStream_t stream, const std::string& fn) {
    if (watch_ == nullptr || !watch_->dog) {
      return;
    }
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    detail::check(cudaStreamIsCapturing(stream, &capturing), fn + ": cudaStreamIsCapturing");
    if (capturing != cudaStreamCaptureStatusNone) {
      return;
    }
    watch_->dog->watch(
        fn, [&](cudaEvent_t e) { detail::check(cudaEventRecord(e, stream), fn + ": cudaEventRecord"); });
  }

  void expect_usable(const std::string& fn) const {
    if (comm_ == nullptr) {
      throw comm_error(fn + ": the communicator was moved from");
    }
    if (!failure_.empty()) {
      throw comm_error(fn + ": the communicator is unusable after an earlier failure (" + failure_ + ")");
    }
    if (revoked()) {
      throw comm_timeout(fn + ": " + watch_->dog->reason() +
                         "; the watchdog revoked the communicator (nccl_options::revoke_after = " +
                         std::to_string(options_.revoke_after.count()) +
                         " ms): end the job, or destroy the NCCL communicator");
    }
  }

  void nccl(ncclResult_t rc, const std::string& what) {
    if (rc == ncclInProgress) {
      rc = settle(what);
    }
    if (rc == ncclSuccess) {
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

  /// A non-blocking communicator's call that answered ncclInProgress: polls ncclCommGetAsyncError
  /// until NCCL has finished enqueuing it (bounded by the timeout), and returns its result. Called
  /// with the NCCL lock held (every nccl() is, while the watchdog runs), which it releases between
  /// polls: the watchdog's revoke, which takes it, is not held up for up to the timeout.
  ncclResult_t settle(const std::string& what) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t rc = ncclSuccess;
    const bool settled =
        detail::comm::poll_released(watch_ != nullptr ? &watch_->nccl_lock : nullptr, options_.timeout, [&] {
          rc = ncclCommGetAsyncError(comm_, &state);
          return rc != ncclSuccess || state != ncclInProgress;
        });
    if (rc != ncclSuccess) {
      return rc;
    }
    if (!settled) {
      failure_ = "timeout in " + what;
      throw comm_timeout(what + ": still in progress after " + std::to_string(options_.timeout.count()) +
                         " ms on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                         "; the communicator is unusable (end the job, or ncclCommAbort)");
    }
    return state;
  }

  /// Polls the stream against the deadline, and NCCL's asynchronous error; throws comm_timeout if
  /// the watchdog revoked the communicator meanwhile.
  void wait(cudaStream_t stream, const std::string& fn) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + options_.timeout;
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      // Revoked by the watchdog: what the stream holds is no result (it may have ended because
      // its collective was stopped), and it may never end (other work holds it).
      expect_usable(fn);
      if (q == cudaSuccess) {
        return;
      }
      if (q != cudaErrorNotReady) {
        detail::check(q, fn + ": cudaStreamQuery");
      }
      {
        const auto lk = nccl_lock();
        ncclResult_t async = ncclSuccess;
        nccl(ncclCommGetAsyncError(comm_, &async), fn + ": ncclCommGetAsyncError");
        nccl(async, fn + ": asynchronous NCCL error");
      }
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
  std::uint64_t* host_hashes_ = nullptr; // pinned
  void* scratch_ = nullptr;              // size() x or_elements uint32 (none with one rank)

  /// How many collectives the watchdog can tell apart in flight (module comment: past that, the
  /// newest is marked again). The engine has a handful per step in flight.
  static constexpr std::size_t watched_collectives = 64;
  /// The watchdog and what it shares with the communicator, at a fixed address (the communicator
  /// moves; the watchdog's thread holds pointers into this).
  struct watchdog_parts {
    std::mutex nccl_lock;
    std::vector<cudaEvent_t> events;
    std::optional<detail::comm::collective_watchdog<detail::comm::nccl_probe>> dog;
  };
  std::unique_ptr<watchdog_parts> watch_; // null: no watchdog
};

static_assert(communicator<nccl_communicator>);

ZF_NAMESPACE_END
