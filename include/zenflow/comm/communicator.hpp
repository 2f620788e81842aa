/// @file
/// The communicator concept: the collectives that data-parallel ZenFlow needs, over a
/// communicator the user already has (an `MPI_Comm`, an `ncclComm_t`) or none (one rank).
///
/// Streams. Every collective takes a `cudaStream_t`, as the copy backends do
/// (transport/copy_backend.hpp): one signature for every model, so that the engine calls the same
/// line on every backend. `C::is_device` says what the pointers are and when a call is complete:
/// - `is_device == false` (local_communicator, mpi_communicator): host pointers; the call is
///   complete when it returns; the stream is ignored.
/// - `is_device == true` (local_device_communicator, nccl_communicator): device pointers; the call
///   is enqueued on the stream and complete when the stream reaches it.
///
/// Semantics shared by every model (N = size()):
/// - all_reduce_sum / all_reduce_mean: in place. The result has the same bits on every rank, and
///   the same bits from run to run for the same inputs (each model says how; mpi_communicator
///   sums in rank order in float64, see docs/data-parallel-design.md).
/// - all_reduce_max / all_reduce_or on uint32: exact, so order-free (the NaN/Inf skip flag).
/// - reduce_scatter_sum: `send` holds N blocks back to back, block r of `counts[r]` floats; rank r
///   receives the sum of every rank's block r in `recv` (`counts[r]` floats). Send and recv must
///   not overlap.
/// - reduce_scatter_mean: reduce_scatter_sum's blocks, rank r receiving the mean of block r; each
///   element has the bits that all_reduce_mean gives it on the same model (mpi_communicator: the
///   same rank-order float64 fold and division; NCCL: its reduce-scatter's order, see the model).
/// - all_gather_bytes: rank r contributes `counts[r]` bytes; every rank receives the N blocks
///   back to back in `recv`. `send` may point at the rank's own block inside `recv` (in place).
/// - broadcast_bytes: root's bytes to every rank.
/// - verify_same: every rank contributes a 64-bit hash; when they differ, every rank throws
///   `zenflow::invalid_argument` naming `what` and the ranks that differ (all ranks see the same
///   gathered hashes, so all of them throw: no rank is left waiting in a later collective).
///   Blocking on every model (it returns a verdict).
///
/// Failure. Argument errors throw `zenflow::invalid_argument` before anything is sent (on that
/// rank only: the other ranks then see a timeout, not a hang). A collective that cannot complete
/// within the model's bound throws `comm_timeout`; after that the communicator is unusable.
/// Other transport failures throw `comm_error`.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

// comm_error and comm_timeout: core/error.hpp (the engine rethrows them with context, keeping
// their type).

/// What the data-parallel engine calls on a communicator. See the file comment for semantics.
template <class C>
concept communicator = requires(C& c,
                                const C& cc,
                                float* f,
                                const float* cf,
                                double* d,
                                std::uint32_t* u,
                                void* p,
                                const void* cp,
                                std::size_t n,
                                std::span<const std::size_t> counts,
                                int root,
                                std::uint64_t hash,
                                std::string_view what,
                                cudaStream_t s) {
  { C::is_device } -> std::convertible_to<bool>;
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  c.all_reduce_sum(f, n, s);
  c.all_reduce_sum(d, n, s);
  c.all_reduce_mean(f, n, s);
  c.all_reduce_max(u, n, s);
  c.all_reduce_or(u, n, s);
  c.reduce_scatter_sum(cf, f, counts, s);
  c.reduce_scatter_mean(cf, f, counts, s);
  c.all_gather_bytes(cp, p, counts, s);
  c.broadcast_bytes(p, n, root, s);
  c.verify_same(hash, what, s);
};

/// A device communicator whose "device" memory is host memory (emulated_device_communicator: the
/// emulated backend's device): stream-ordered like NCCL, on the buffers of the host-memory backends.
template <class C>
inline constexpr bool emulates_device_memory = false;

/// reduce_scatter_sum into equal blocks of `block` floats (`send` holds size() x block).
template <communicator C>
void reduce_scatter_sum(C& c, const float* send, float* recv, std::size_t block, cudaStream_t stream) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), block);
  c.reduce_scatter_sum(send, recv, std::span<const std::size_t>(counts), stream);
}

/// reduce_scatter_mean into equal blocks of `block` floats (`send` holds size() x block).
template <communicator C>
void reduce_scatter_mean(C& c, const float* send, float* recv, std::size_t block, cudaStream_t stream) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), block);
  c.reduce_scatter_mean(send, recv, std::span<const std::size_t>(counts), stream);
}

/// all_gather of `counts[r]` elements of T per rank (a typed front of all_gather_bytes).
template <class T, communicator C>
void all_gather(C& c, const T* send, T* recv, std::span<const std::size_t> counts, cudaStream_t stream) {
  std::vector<std::size_t> bytes(counts.begin(), counts.end());
  for (auto& b : bytes) {
    b *= sizeof(T);
  }
  c.all_gather_bytes(send, recv, std::span<const std::size_t>(bytes), stream);
}

/// all_gather of equal blocks of `block` elements of T per rank.
template <class T, communicator C>
void all_gather(C& c, const T* send, T* recv, std::size_t block, cudaStream_t stream) {
  const std::vector<std::size_t> bytes(static_cast<std::size_t>(c.size()), block * sizeof(T));
  c.all_gather_bytes(send, recv, std::span<const std::size_t>(bytes), stream);
}

namespace detail::comm {

[[noreturn]] inline void
bad_argument(std::string_view function, std::string_view argument, std::string_view why) {
  std::string msg(function);
  msg += ": argument '";
  msg += argument;
  msg += "' ";
  msg += why;
  throw invalid_argument(msg);
}

/// Checks a per-rank count list and returns its total; throws naming `argument` otherwise.
inline std::size_t checked_total(std::string_view function,
                                 std::string_view argument,
                                 std::span<const std::size_t> counts,
                                 int ranks) {
  if (counts.size() != static_cast<std::size_t>(ranks)) {
    bad_argument(function, argument,
                 "has " + std::to_string(counts.size()) + " entries; the communicator has " +
                     std::to_string(ranks) + " ranks");
  }
  std::size_t total = 0;
  for (const std::size_t c : counts) {
    if (c > SIZE_MAX / 8 - total) {
      bad_argument(function, argument, "sums past the addressable size");
    }
    total += c;
  }
  return total;
}

inline void
expect_buffer(std::string_view function, std::string_view argument, const void* p, std::size_t n) {
  if (p == nullptr && n > 0) {
    bad_argument(function, argument, "is null with a non-zero count");
  }
}

inline void expect_root(std::string_view function, int root, int ranks) {
  if (root < 0 || root >= ranks) {
    bad_argument(function, "root",
                 "is " + std::to_string(root) + "; ranks are 0.." + std::to_string(ranks - 1));
  }
}

/// The verdict of verify_same on the gathered hashes (one per rank): throws invalid_argument
/// naming `what` and every rank whose hash differs from rank 0's, with each rank's value.
inline void
verify_same_verdict(std::string_view function, std::string_view what, std::span<const std::uint64_t> hashes) {
  std::vector<int> differ;
  for (std::size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) {
      differ.push_back(static_cast<int>(r));
    }
  }
  if (differ.empty()) {
    return;
  }
  auto hex = [](std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s = "0x";
    for (int shift = 60; shift >= 0; shift -= 4) {
      s += digits[(v >> shift) & 0xf];
    }
    return s;
  };
  std::string msg(function);
  msg += ": ";
  msg += what;
  msg += " differs across ranks: rank";
  msg += differ.size() > 1 ? "s " : " ";
  for (std::size_t i = 0; i < differ.size(); ++i) {
    msg += (i > 0 ? ", " : "") + std::to_string(differ[i]);
  }
  msg += differ.size() > 1 ? " differ" : " differs";
  msg += " from rank 0 (hashes:";
  for (std::size_t r = 0; r < hashes.size(); ++r) {
    msg += " rank " + std::to_string(r) + " " + hex(hashes[r]) + (r + 1 < hashes.size() ? ";" : ")");
  }
  throw invalid_argument(msg);
}

} // namespace detail::comm

ZF_NAMESPACE_END
