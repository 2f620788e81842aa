/// @file
/// One rank, no transport: the communicator of a single-process engine. Every reduction is the
/// identity (a sum or mean over one rank is the rank's own value, bit for bit); the gathers and
/// scatters copy their one block. Arguments are validated as the multi-rank models validate
/// them, so that a single-process run catches what a data-parallel run would reject.
///
/// - `local_communicator`: host pointers, complete on return, the stream is ignored.
/// - `local_device_communicator`: device pointers; copies are `cudaMemcpyAsync` on the stream
///   (none when in place), so it is stream-ordered and safe under graph capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

template <bool Device>
class basic_local_communicator {
public:
  static constexpr bool is_device = Device;

  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }

  /// Sum over one rank: `buf` is left as it is.
  void all_reduce_sum(float* buf, std::size_t n, cudaStream_t) const {
    expect_buffer(name("all_reduce_sum"), "buf", buf, n);
  }
  void all_reduce_sum(double* buf, std::size_t n, cudaStream_t) const {
    expect_buffer(name("all_reduce_sum"), "buf", buf, n);
  }
  /// Mean over one rank: x / 1 == x, so `buf` is left as it is.
  void all_reduce_mean(float* buf, std::size_t n, cudaStream_t) const {
    expect_buffer(name("all_reduce_mean"), "buf", buf, n);
  }
  void all_reduce_max(std::uint32_t* buf, std::size_t n, cudaStream_t) const {
    expect_buffer(name("all_reduce_max"), "buf", buf, n);
  }
  void all_reduce_or(std::uint32_t* buf, std::size_t n, cudaStream_t) const {
    expect_buffer(name("all_reduce_or"), "buf", buf, n);
  }

  /// Copies the one block (`counts[0]` floats) from `send` to `recv`.
  void reduce_scatter_sum(const float* send,
                          float* recv,
                          std::span<const std::size_t> counts,
                          cudaStream_t stream) const {
    scatter_one(send, recv, counts, stream, "reduce_scatter_sum");
  }
  /// The mean over one rank is the value (x / 1 == x): the copy of reduce_scatter_sum.
  void reduce_scatter_mean(const float* send,
                           float* recv,
                           std::span<const std::size_t> counts,
                           cudaStream_t stream) const {
    scatter_one(send, recv, counts, stream, "reduce_scatter_mean");
  }

  /// Copies the one block (`counts[0]` bytes) from `send` to `recv` (nothing when in place).
  void all_gather_bytes(const void* send,
                        void* recv,
                        std::span<const std::size_t> counts,
                        cudaStream_t stream) const {
    const std::string fn = name("all_gather_bytes");
    const std::size_t n = checked_total(fn, "counts", counts, 1);
    expect_buffer(fn, "send", send, n);
    expect_buffer(fn, "recv", recv, n);
    copy(recv, send, n, stream);
  }

  void broadcast_bytes(void* buf, std::size_t bytes, int root, cudaStream_t) const {
    const std::string fn = name("broadcast_bytes");
    expect_buffer(fn, "buf", buf, bytes);
    expect_root(fn, root, 1);
  }

  /// One rank agrees with itself.
  void verify_same(std::uint64_t, std::string_view, cudaStream_t) const {}

private:
  static void scatter_one(const float* send,
                          float* recv,
                          std::span<const std::size_t> counts,
                          cudaStream_t stream,
                          std::string_view op) {
    const std::string fn = name(op);
    const std::size_t n = checked_total(fn, "counts", counts, 1);
    expect_buffer(fn, "send", send, n);
    expect_buffer(fn, "recv", recv, n);
    copy(recv, send, n * sizeof(float), stream);
  }
  static std::string name(std::string_view op) {
    std::string s = Device ? "zenflow::local_device_communicator::" : "zenflow::local_communicator::";
    s += op;
    return s;
  }
  static void copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
    if (bytes == 0 || dst == src) {
      return;
    }
    if constexpr (Device) {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
            "zenflow::local_device_communicator: cudaMemcpyAsync");
    } else {
      (void)stream;
      std::memmove(dst, src, bytes);
    }
  }
};

} // namespace detail::comm

/// One rank on host memory (host and emulated backends).
using local_communicator = detail::comm::basic_local_communicator<false>;
/// One rank on device memory (CUDA backend), stream-ordered.
using local_device_communicator = detail::comm::basic_local_communicator<true>;

static_assert(communicator<local_communicator>);
static_assert(communicator<local_device_communicator>);

ZF_NAMESPACE_END
