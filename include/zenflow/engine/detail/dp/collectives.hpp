/// @file
/// Two collectives of the engine's data-parallel side (data_parallel.hpp) over either kind of
/// communicator: the stats summed over the ranks, and an all-gather of host buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The doubles stats_over_ranks() reduces (a device communicator's buffer holds as many).
inline constexpr std::size_t stats_summed_counters = 11;

/// Sums of the byte, stall and host-memory counters of `s` over the ranks (a collective; double
/// sums, exact for byte counts below 2^53). A device communicator reduces them in `device_sums`
/// (device memory, stats_summed_counters doubles): blocking.
template <class Backend, class Comm>
[[nodiscard]] zenflow::stats stats_over_ranks(
    const Backend& b, Comm& comm, const zenflow::stats& s, double* device_sums, cudaStream_t stream) {
  zenflow::stats out = s;
  double v[] = {static_cast<double>(s.d2h_bytes),
                static_cast<double>(s.h2d_bytes),
                static_cast<double>(s.comm_bytes),
                s.stall_s,
                s.host_window_s,
                static_cast<double>(s.memory.host_state),
                static_cast<double>(s.memory.host_accumulators),
                static_cast<double>(s.memory.host_ring),
                static_cast<double>(s.memory.host_upload),
                static_cast<double>(s.memory.host_landing),
                static_cast<double>(s.memory.host_staging)};
  static_assert(std::size(v) == stats_summed_counters);
  if constexpr (Comm::is_device) {
    b.copy_h2d(device_sums, v, sizeof(v), stream);
    comm.all_reduce_sum(device_sums, std::size(v), stream);
    b.copy_d2h(v, device_sums, sizeof(v), stream);
    b.synchronize(stream);
  } else {
    (void)b;
    (void)device_sums;
    comm.all_reduce_sum(v, std::size(v), stream);
  }
  out.d2h_bytes = static_cast<std::uint64_t>(v[0]);
  out.h2d_bytes = static_cast<std::uint64_t>(v[1]);
  out.comm_bytes = static_cast<std::uint64_t>(v[2]);
  out.stall_s = v[3];
  out.host_window_s = v[4];
  out.memory.host_state = static_cast<std::size_t>(v[5]);
  out.memory.host_accumulators = static_cast<std::size_t>(v[6]);
  out.memory.host_ring = static_cast<std::size_t>(v[7]);
  out.memory.host_upload = static_cast<std::size_t>(v[8]);
  out.memory.host_landing = static_cast<std::size_t>(v[9]);
  out.memory.host_staging = static_cast<std::size_t>(v[10]);
  return out;
}

/// all_gather_bytes of host buffers (`send` may be this rank's block inside `recv`), complete on
/// return: a host communicator reads them; a device one gathers in the device buffer `stage`
/// (this rank's block up, the gather, every block down; blocking), grown to the gather's size
/// when smaller (a device allocation).
template <class Backend, class Comm, class Stage>
void gather_host_blocks(const Backend& b,
                        Comm& comm,
                        const void* send,
                        void* recv,
                        std::span<const std::size_t> sizes,
                        Stage& stage,
                        cudaStream_t stream) {
  if constexpr (!Comm::is_device) {
    (void)b;
    (void)stage;
    comm.all_gather_bytes(send, recv, sizes, stream);
  } else {
    std::size_t total = 0;
    std::size_t at = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      at = static_cast<int>(r) == comm.rank() ? total : at;
      total += sizes[r];
    }
    if (stage.size() < total) {
      stage = Stage(total); // the last use was synchronized: nothing reads the old one
    }
    const std::size_t mine = sizes[static_cast<std::size_t>(comm.rank())];
    b.copy_h2d(stage.data() + at, send, mine, stream);
    comm.all_gather_bytes(stage.data() + at, stage.data(), sizes, stream);
    b.copy_d2h(recv, stage.data(), total, stream);
    b.synchronize(stream);
  }
}

} // namespace detail
ZF_NAMESPACE_END
