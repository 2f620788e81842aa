/// @file
/// `emulated_device_communicator<C>`: a host communicator (mpi_communicator, local_communicator)
/// made to behave as a device communicator does (nccl_communicator) on an `emulated_device`:
/// every collective is enqueued on the stream it is given and runs on that stream's thread when
/// the stream reaches it, so it is complete only when the stream is. The emulated backend's
/// "device" memory is host memory, so the wrapped communicator reads and writes it directly.
///
/// Why: the engine's device-communicator path (stream-ordered collectives on device buffers, no
/// host read of a result before the stream has passed it) is what runs over NCCL on a GPU; with
/// this wrapper it runs in CI on a machine without one, under mpiexec, against the same one-rank
/// reference as the host path (tests/engine/data_parallel_mpi_test.cpp).
///
/// - Arguments are checked on the calling thread, before anything is enqueued (as
///   nccl_communicator does): a bad call throws `zenflow::invalid_argument` and enqueues nothing.
/// - A collective that fails when it runs (comm_timeout, comm_error) becomes the device's sticky
///   error, seen at the next synchronising call (as an asynchronous NCCL error is).
/// - verify_same() is blocking (it returns a verdict): it waits for the stream, then runs on the
///   calling thread, so a mismatch throws without making the device's error sticky.
/// - Threads: the wrapped communicator is called from the device's stream threads and from the
///   caller (verify_same), one call at a time (a mutex). With mpi_communicator, MPI must be
///   initialized with at least MPI_THREAD_SERIALIZED, and the caller's own MPI calls must not
///   overlap the stream's collectives: synchronize the stream before them (or initialize with
///   MPI_THREAD_MULTIPLE). As with NCCL, every rank must issue the collectives in the same order:
///   enqueue them on one stream.
/// - Copies share the wrapped communicator (one transport, as copies of an ncclComm_t handle do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>

ZF_NAMESPACE_BEGIN

template <communicator C>
requires(!C::is_device) class emulated_device_communicator {
public:
  static constexpr bool is_device = true;

  /// `device` must outlive every copy; `comm` is moved in and shared by the copies.
  emulated_device_communicator(emulated_device& device, C comm)
      : device_(&device), shared_(std::make_shared<shared>(std::move(comm))) {}

  [[nodiscard]] int rank() const noexcept { return rank_of(); }
  [[nodiscard]] int size() const noexcept { return size_of(); }
  /// The device whose streams the collectives run on (the shard helpers run their conversions
  /// there too: shard.hpp).
  [[nodiscard]] emulated_device& device() const noexcept { return *device_; }
  /// The wrapped communicator (its own calls are not ordered with the stream's).
  [[nodiscard]] C& wrapped() noexcept { return shared_->comm; }
  [[nodiscard]] const C& wrapped() const noexcept { return shared_->comm; }

  void all_reduce_sum(float* buf, std::size_t n, cudaStream_t s) {
    in_place(buf, n, s, "all_reduce_sum",
             [](C& c, float* b, std::size_t k) { c.all_reduce_sum(b, k, nullptr); });
  }
  void all_reduce_sum(double* buf, std::size_t n, cudaStream_t s) {
    in_place(buf, n, s, "all_reduce_sum",
             [](C& c, double* b, std::size_t k) { c.all_reduce_sum(b, k, nullptr); });
  }
  void all_reduce_mean(float* buf, std::size_t n, cudaStream_t s) {
    in_place(buf, n, s, "all_reduce_mean",
             [](C& c, float* b, std::size_t k) { c.all_reduce_mean(b, k, nullptr); });
  }
  void all_reduce_max(std::uint32_t* buf, std::size_t n, cudaStream_t s) {
    in_place(buf, n, s, "all_reduce_max",
             [](C& c, std::uint32_t* b, std::size_t k) { c.all_reduce_max(b, k, nullptr); });
  }
  void all_reduce_or(std::uint32_t* buf, std::size_t n, cudaStream_t s) {
    in_place(buf, n, s, "all_reduce_or",
             [](C& c, std::uint32_t* b, std::size_t k) { c.all_reduce_or(b, k, nullptr); });
  }

  void
  reduce_scatter_sum(const float* send, float* recv, std::span<const std::size_t> counts, cudaStream_t s) {
    scatter(send, recv, counts, s, "reduce_scatter_sum");
  }
  void
  reduce_scatter_mean(const float* send, float* recv, std::span<const std::size_t> counts, cudaStream_t s) {
    scatter(send, recv, counts, s, "reduce_scatter_mean");
  }

  void all_gather_bytes(const void* send, void* recv, std::span<const std::size_t> counts, cudaStream_t s) {
    const std::string fn = name("all_gather_bytes");
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size());
    const std::size_t mine = counts[static_cast<std::size_t>(rank())];
    detail::comm::expect_buffer(fn, "send", send, mine);
    detail::comm::expect_buffer(fn, "recv", recv, total);
    enqueue(s, "all_gather_bytes",
            [send, recv, c = std::vector<std::size_t>(counts.begin(), counts.end())](C& comm) {
              comm.all_gather_bytes(send, recv, std::span<const std::size_t>(c), nullptr);
            });
  }

  void broadcast_bytes(void* buf, std::size_t bytes, int root, cudaStream_t s) {
    const std::string fn = name("broadcast_bytes");
    detail::comm::expect_buffer(fn, "buf", buf, bytes);
    detail::comm::expect_root(fn, root, size());
    enqueue(s, "broadcast_bytes",
            [buf, bytes, root](C& comm) { comm.broadcast_bytes(buf, bytes, root, nullptr); });
  }

  /// Waits for `s`, then compares on the calling thread (blocking, as on every model).
  void verify_same(std::uint64_t hash, std::string_view what, cudaStream_t s) {
    device_->synchronize_stream(s);
    const std::lock_guard lock(shared_->mutex);
    shared_->comm.verify_same(hash, what, nullptr);
  }

private:
  struct shared {
    explicit shared(C c) : comm(std::move(c)) {}
    C comm;
    std::mutex mutex; // one call at a time into the wrapped communicator
  };

  [[nodiscard]] int rank_of() const noexcept { return shared_->comm.rank(); }
  [[nodiscard]] int size_of() const noexcept { return shared_->comm.size(); }

  static std::string name(std::string_view op) {
    std::string s = "zenflow::emulated_device_communicator::";
    s += op;
    return s;
  }

  /// An in-place reduction `op(comm, buf, n)`, checked now, run when the stream reaches it.
  template <class T, class Op>
  void in_place(T* buf, std::size_t n, cudaStream_t s, const char* what, Op op) {
    detail::comm::expect_buffer(name(what), "buf", buf, n);
    enqueue(s, what, [buf, n, op](C& comm) { op(comm, buf, n); });
  }

  void scatter(
      const float* send, float* recv, std::span<const std::size_t> counts, cudaStream_t s, const char* op) {
    const std::string fn = name(op);
    const std::size_t total = detail::comm::checked_total(fn, "counts", counts, size());
    detail::comm::expect_buffer(fn, "send", send, total);
    detail::comm::expect_buffer(fn, "recv", recv, counts[static_cast<std::size_t>(rank())]);
    const bool mean = std::string_view(op) == "reduce_scatter_mean";
    enqueue(s, op, [send, recv, mean, c = std::vector<std::size_t>(counts.begin(), counts.end())](C& comm) {
      const std::span<const std::size_t> cs(c);
      if (mean) {
        comm.reduce_scatter_mean(send, recv, cs, nullptr);
      } else {
        comm.reduce_scatter_sum(send, recv, cs, nullptr);
      }
    });
  }

  /// `call(comm)` on `s`'s thread when the stream reaches it.
  template <class F>
  void enqueue(cudaStream_t s, const char* op, F&& call) {
    device_->launch(
        s,
        [sh = shared_, call = std::forward<F>(call)]() mutable {
          const std::lock_guard lock(sh->mutex);
          call(sh->comm);
        },
        0, name(op));
  }

  emulated_device* device_;
  std::shared_ptr<shared> shared_;
};

template <class C>
inline constexpr bool emulates_device_memory<emulated_device_communicator<C>> = true;

ZF_NAMESPACE_END
