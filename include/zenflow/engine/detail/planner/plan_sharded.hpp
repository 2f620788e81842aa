/// @file
/// The planner's ZeRO-3 figures (plan_config::sharded; engine/plan.hpp): one GPU's shard-sized
/// buffers under the sharded engine (engine<Backend, sharded<Comm>>, docs/data-parallel.md). Each
/// rank holds its owner block of every matrix (comm/shard.hpp's shard_channels: the same
/// partition as owner_partition's) and every vector whole; per rank, as the engine allocates:
/// your weights and gradients of its shard, the device state of min(k, its rows) of each matrix
/// (k = topk of the whole matrix: the top-k may fall in one shard), the whole-window upload buffer
/// of its rows. The largest rank's, term by term.
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

struct plan_shard_bytes {
  double weights_and_grads = 0, selected_state = 0, upload = 0;
};

/// `params`: plan_params' list (matrices, then vectors); `eb`: the working type's bytes;
/// `whole_window`: the upload buffer holds every host-side row.
inline plan_shard_bytes
plan_sharded_device(const std::vector<param_info>& params, double eb, int ranks, bool whole_window) {
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
  plan_shard_bytes most;
  for (int r = 0; r < ranks; ++r) {
    plan_shard_bytes b;
    b.weights_and_grads = 2.0 * eb * vectors;
    std::size_t m = 0;
    for (const auto& pi : params) {
      if (!pi.matrix) {
        continue;
      }
      const std::int64_t rows = list.empty() ? 0 : part.count(m++, r);
      const auto len = static_cast<double>(pi.channel_len);
      // The whole matrix's capacity (topk, every channel for gpu_adamw, none offloaded) in this shard.
      const auto cap = static_cast<double>(std::min(pi.device_capacity, rows));
      b.weights_and_grads += 2.0 * eb * static_cast<double>(rows) * len;
      b.selected_state += cap * len * 12.0 + cap * 8.0;
      b.upload += pi.host_side && whole_window ? eb * static_cast<double>(rows) * len : 0.0;
    }
    most.weights_and_grads = std::max(most.weights_and_grads, b.weights_and_grads);
    most.selected_state = std::max(most.selected_state, b.selected_state);
    most.upload = std::max(most.upload, b.upload);
  }
  return most;
}

} // namespace detail
ZF_NAMESPACE_END
