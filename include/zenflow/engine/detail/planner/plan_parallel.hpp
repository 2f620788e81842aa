/// @file
/// The planner's data-parallel device figures over N GPUs (engine/plan.hpp, plan_impl.hpp):
/// - ZeRO-2 (owner_partition, N > 1): the engine's mean of the gradients (mean_gradients: a mean
///   copy of every gradient in the working type and the fp32 reduction buffer) and, in the
///   offloaded modes over NCCL, the reduce-scatter by owner's buffers (device_owner_reduction:
///   its block's fp32 mean, four numbers a channel).
/// - ZeRO-3 (plan_config::sharded; the sharded engine, docs/data-parallel.md): each rank holds its
///   owner block of every matrix (comm/shard.hpp's shard_channels: owner_partition's partition)
///   and every vector whole; per rank, as the engine allocates: your weights and gradients of its
///   shard, the device state of min(k, its rows) of each matrix (k = topk of the whole matrix: the
///   top-k may fall in one shard), the whole-window upload buffer of its rows. The largest
///   rank's, term by term. Its host side and PCIe traffic are ZeRO-2's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// What data parallel changes in one GPU's bytes: ZeRO-2 adds `scratch`; ZeRO-3 (`sharded`)
/// replaces the weights and gradients, the selected state and the upload buffer.
struct plan_parallel_bytes {
  bool sharded = false;
  double scratch = 0, weights_and_grads = 0, selected_state = 0, upload = 0;
};

/// `params`: plan_params' list (matrices, then vectors); `eb`: the working type's bytes;
/// `whole_window`: the upload buffer holds every host-side row.
inline plan_parallel_bytes plan_data_parallel_device(const std::vector<param_info>& params,
                                                     bool sharded,
                                                     bool gpu_adamw,
                                                     bool whole_window,
                                                     double eb,
                                                     int ranks) {
  plan_parallel_bytes out;
  out.sharded = sharded;
  const double N = ranks;
  if (!sharded) {
    if (ranks <= 1) {
      return out;
    }
    for (const auto& pi : params) {
      const double n = static_cast<double>(pi.channels) * static_cast<double>(pi.channel_len);
      out.scratch += n * (eb + 4.0);
      if (pi.matrix && !gpu_adamw) {
        out.scratch += n * 4.0 / N + static_cast<double>(pi.channels) * 16.0;
      }
    }
    return out;
  }
  std::vector<partition_matrix> list;
  double vectors = 0;
  for (const auto& pi : params) {
    if (pi.matrix) {
      // Every element holds the same state: the bytes per element only scale the partition.
      list.push_back({pi.channels, static_cast<std::uint64_t>(pi.channel_len)});
    } else {
      vectors += static_cast<double>(pi.channel_len);
    }
  }
  const channel_partition part = list.empty() ? channel_partition{} : partition_channels(list, ranks);
  double wg = 0, sel = 0, up = 0;
  for (int r = 0; r < ranks; ++r) {
    double w = 2.0 * eb * vectors, s = 0, u = 0;
    std::size_t m = 0;
    for (const auto& pi : params) {
      if (!pi.matrix) {
        continue;
      }
      const auto rows = static_cast<double>(list.empty() ? 0 : part.count(m++, r));
      const auto len = static_cast<double>(pi.channel_len);
      // The whole matrix's capacity (topk, every channel for gpu_adamw, none offloaded) in this shard.
      const double cap = std::min(static_cast<double>(pi.device_capacity), rows);
      w += 2.0 * eb * rows * len;
      s += cap * len * 12.0 + cap * 8.0;
      u += pi.host_side && whole_window ? eb * rows * len : 0.0;
    }
    wg = std::max(wg, w);
    sel = std::max(sel, s);
    up = std::max(up, u);
  }
  out.weights_and_grads = wg;
  out.selected_state = sel;
  out.upload = up;
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
