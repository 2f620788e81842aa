/// @file
/// The engine's data-parallel side (docs/data-parallel.md): the communicator, the checks of
/// initialize() (the same configuration and parameter list on every rank), the channel partition,
/// and the reduction of every rank's gradients to their mean before the step reads them.
///
/// This is the replicated-host-state scheme: every rank keeps the full host state and every
/// gradient is all-reduced (mean) at the start of step(), into engine-owned buffers that the
/// device plan then reads instead of the user's. Every later decision of the step (scores, top-k,
/// the skip flag, the clipping norm, Zen-auto's masses) is computed from the same mean gradient on
/// every rank, so an N-rank run is a one-rank run fed the mean gradient, bit for bit, and no other
/// collective is needed. The owner partition of the host state (1/N per rank) is the next step;
/// its partition is computed here already.
///
/// One code path for every backend: the gradients are widened into one fp32 buffer with the plan's
/// own gather primitive, reduced in one call, and narrowed back with its scatter. A host
/// communicator (`is_device == false`) on an asynchronous backend (emulated) needs its inputs
/// final when called, so the stream is synchronized first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/params.hpp>

ZF_NAMESPACE_BEGIN

/// The one-rank communicator that matches a backend's memory: host memory (host, emulated
/// backends) or device memory (CUDA).
template <class Backend>
using default_communicator_t = std::conditional_t<std::is_base_of_v<detail::host_memory, Backend>,
                                                  local_communicator,
                                                  local_device_communicator>;

namespace detail {

template <class Backend, class Comm>
class data_parallel {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  // A host communicator reads host memory; a device one, device memory.
  static_assert(Comm::is_device != std::is_base_of_v<host_memory, Backend>,
                "zenflow::engine: the communicator's memory (is_device) must be the backend's: "
                "local/mpi_communicator for the host and emulated backends, "
                "local_device/nccl_communicator for the CUDA backend");

public:
  explicit data_parallel(Comm comm) : comm_(std::move(comm)) {}

  [[nodiscard]] Comm& comm() noexcept { return comm_; }
  [[nodiscard]] const Comm& comm() const noexcept { return comm_; }
  /// More than one rank: the step reduces the gradients.
  [[nodiscard]] bool active() const noexcept { return comm_.size() > 1; }
  [[nodiscard]] const channel_partition& partition() const noexcept { return partition_; }

  /// initialize(), before anything is changed: every rank must hold the same configuration and
  /// the same parameter list (else every rank throws the same invalid_argument, naming which and
  /// the ranks that differ; never a hang). Returns the bytes this rank sent.
  std::uint64_t verify(const config& cfg, const std::vector<param_info>& params, cudaStream_t stream) {
    comm_.verify_same(stable_hash{}.add_string(cfg.describe()).value(), "the configuration", stream);
    stable_hash h;
    h.add_u64(params.size());
    for (const auto& pi : params) {
      // Everything that shapes the step: a differing dtype, layout or option would desynchronise
      // the ranks' updates as surely as a differing shape.
      h.add_u64(pi.matrix ? 1u : 0u).add_u64(static_cast<std::uint64_t>(pi.type));
      h.add_i64(pi.channels).add_i64(pi.channel_len).add_i64(pi.ld);
      h.add_u64(static_cast<std::uint64_t>(pi.layout)).add_string(pi.name);
      h.add_f64(pi.lr_scale).add_f64(pi.weight_decay);
    }
    comm_.verify_same(h.value(), "the parameter list", stream);
    return active() ? 2u * 8u : 0u; // two 8-byte hashes (one rank sends nothing)
  }

  /// Which rank owns which channels' host state: the host-side matrices in registration order,
  /// a channel's bytes its fp32 master and two moments (docs/data-parallel.md).
  void set_partition(const std::vector<param_info>& params) {
    std::vector<partition_matrix> list;
    for (const auto& pi : params) {
      if (pi.matrix && pi.host_side) {
        list.push_back({pi.channels, static_cast<std::uint64_t>(pi.channel_len) * 12u});
      }
    }
    if (!list.empty()) {
      partition_ = partition_channels(list, comm_.size());
    }
  }

  /// When active: allocates the fp32 reduction buffer and one mean-gradient buffer per parameter
  /// (its layout and leading dimension, so the plan reads it as it read the user's), and points
  /// every parameter's gradient at it. Returns the device bytes allocated.
  std::size_t setup(const Backend& b, std::vector<param_info>& params, cudaStream_t stream) {
    if (!active()) {
      return 0;
    }
    std::size_t bytes = 0;
    std::int64_t total = 0;
    std::int64_t widest = 1;
    for (auto& pi : params) {
      const std::int64_t outer = pi.layout == channel_layout::contiguous ? pi.channels : pi.channel_len;
      const std::int64_t inner = pi.layout == channel_layout::contiguous ? pi.channel_len : pi.channels;
      const auto extent = static_cast<std::size_t>((outer - 1) * pi.ld + inner) * pi.elem_bytes();
      slot s;
      s.user = pi.grads;
      s.mean = dbuf<std::byte>(extent);
      b.zero(s.mean.data(), extent, stream); // the padding between channels is never read
      s.offset = total;
      total += pi.elements();
      widest = std::max(widest, pi.channels);
      bytes += extent;
      pi.grads = s.mean.data();
      slots_.push_back(std::move(s));
    }
    wide_ = dbuf<float>(static_cast<std::size_t>(total));
    idx_ = dbuf<std::int32_t>(static_cast<std::size_t>(widest));
    b.run(stream, static_cast<std::size_t>(widest) * 4, "zenflow::engine: iota",
          [out = idx_.data(), widest](auto prim, auto on) { return prim.iota(out, widest, on); });
    b.synchronize(stream);
    return bytes + wide_.size() * 4 + idx_.size() * 4;
  }

  /// At the start of step(), when active: every parameter's gradient replaced by the mean over the
  /// ranks (fp32 rank-order mean, rounded once to the working type). Stream-ordered on a device
  /// communicator; a host communicator waits for `stream` first. Returns the bytes this rank sent.
  std::uint64_t
  reduce_gradients(const Backend& b, const std::vector<param_info>& params, cudaStream_t stream) {
    if (!active()) {
      return 0;
    }
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      float* wide = wide_.data() + slots_[p].offset;
      dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        const channel_matrix<const T> src{static_cast<const T*>(slots_[p].user), pi.channels, pi.channel_len,
                                          pi.ld, pi.layout};
        b.run(stream, static_cast<std::size_t>(pi.elements()) * (sizeof(T) + 4),
              "zenflow::engine: widen_grads", [src, idx = idx_.data(), wide](auto prim, auto on) {
                return prim.gather_channels(src, idx, src.channels, wide, nullptr, on);
              });
      });
    }
    if constexpr (!Comm::is_device) {
      b.synchronize(stream); // a host communicator reads the buffer when called
    }
    comm_.all_reduce_mean(wide_.data(), wide_.size(), stream);
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      const float* wide = wide_.data() + slots_[p].offset;
      dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        const channel_matrix<T> dst{static_cast<T*>(const_cast<void*>(pi.grads)), pi.channels, pi.channel_len,
                                    pi.ld, pi.layout};
        b.run(stream, static_cast<std::size_t>(pi.elements()) * (sizeof(T) + 4),
              "zenflow::engine: narrow_grads", [dst, idx = idx_.data(), wide](auto prim, auto on) {
                return prim.scatter_channels(wide, idx, dst.channels, dst, on);
              });
      });
    }
    return wide_.size() * 4u;
  }

private:
  struct slot {
    const void* user = nullptr; // the user's gradient (the plan reads `mean`)
    dbuf<std::byte> mean;
    std::int64_t offset = 0; // in wide_
  };

  Comm comm_;
  channel_partition partition_{};
  std::vector<slot> slots_;
  dbuf<float> wide_;
  dbuf<std::int32_t> idx_;
};

} // namespace detail
ZF_NAMESPACE_END
