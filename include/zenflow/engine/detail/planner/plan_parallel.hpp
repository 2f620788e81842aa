/// @file
/// The planner's data-parallel device figures over N GPUs (engine/plan.hpp, plan_impl.hpp), per
/// rank, from the functions the engine allocates by:
/// - ZeRO-2 (owner_partition, N > 1): the reduction's buckets (dp/bucket_layout.hpp's
///   bucket_footprint: the fp32 bucket, this rank's receive buffer, the index lists and copy
///   tables, and without reduce_in_place the mean buffers), and in the offloaded modes over NCCL
///   (device_owner_reduction) its per-channel buffers and a selection's staging
///   (owner_device_scratch).
/// - ZeRO-3 (plan_config::sharded; the sharded engine, docs/data-parallel.md): each rank holds its
///   owner block of every matrix (comm/shard.hpp's shard_channels: owner_partition's partition)
///   and every vector whole; per rank, as the engine allocates: your weights and gradients of its
///   shard, the device state of its share of each matrix's top-k (param_info::shard_device_rows:
///   ceil(k x its rows / all rows), the headroom more, at most min(k, its rows)), the whole-window
///   upload buffer of its rows. Its host side and PCIe traffic are ZeRO-2's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/dp/bucket_layout.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One rank's GPU bytes that data parallel sets (ZeRO-3: `weights_and_grads`, `selected_state`,
/// `upload` replace the one-rank figures) or adds (`scratch`, `reduction`).
struct plan_rank_bytes {
  double scratch = 0, reduction = 0, weights_and_grads = 0, selected_state = 0, upload = 0;
};

/// What the planner needs of the data-parallel settings.
struct plan_parallel_settings {
  int ranks = 1;
  bool sharded = false;
  bool gpu_adamw = false;
  bool whole_window = true;
  double elem_bytes = 2;
  std::size_t bucket_bytes = 25u << 20;
  bool in_place = true;
  double headroom = 0.25;
  std::size_t slot_bytes = 4u << 20;
};

/// The owner partition's device scratch over a device communicator (owner_partition::setup and
/// device_owner_reduction::setup; `split`: the host-side matrices, reduce-scattered by owner):
/// the stats counters, a selection's staging (the widest device set in fp32 state), the scores,
/// rescans and row masses of the split matrices, the index lists, the masses' descriptors and
/// the entering rows' copy tables.
inline double owner_device_scratch(const std::vector<param_info>& params, int ranks, std::size_t slot_bytes) {
  std::size_t entering = 0, channels = 0, all = 0, capacity = 0, split = 0, slots = 0, matrices = 0;
  for (const auto& pi : params) {
    all += static_cast<std::size_t>(pi.channels);
    matrices += pi.matrix ? 1 : 0;
    if (!(pi.matrix && pi.host_side)) {
      continue;
    }
    entering = std::max(entering, static_cast<std::size_t>(pi.device_capacity) *
                                      (12 * static_cast<std::size_t>(pi.channel_len) + 4));
    channels += static_cast<std::size_t>(pi.channels);
    capacity += static_cast<std::size_t>(pi.device_capacity);
    ++split;
    const auto per_slot = static_cast<std::size_t>(pi.rows_per_slot(slot_bytes));
    slots += (static_cast<std::size_t>(pi.channels) + per_slot - 1) / per_slot;
  }
  const auto one = [](std::size_t n) { return std::max<std::size_t>(n, 1); };
  const std::size_t items = one(split);
  const std::size_t bytes =
      11 * 8 + entering + (2 * one(channels) + one(all) + one(capacity)) * 4 + one(channels) * 8 +
      (2 * one(matrices) + one(slots)) * 4 + items * (sizeof(sq_rescan_item) + 2 * sizeof(l1_mass_item)) +
      one(slots) * sizeof(l1_mass_item) +
      (items + one(items * static_cast<std::size_t>(std::max(ranks - 1, 1)))) * sizeof(row_copy_item);
  return split > 0 ? static_cast<double>(bytes) : 88.0;
}

/// The pinned host staging of a selection's entering rows of one rank (owner_partition::setup,
/// selection_staging::bound): the largest matrix's, its device set in fp32 state (twice over a
/// host communicator), and at least `bucket_bytes`; none without a host-side matrix.
inline double
owner_host_staging(const std::vector<param_info>& params, std::size_t bucket_bytes, bool device_comm) {
  std::size_t most = 0;
  for (const auto& pi : params) {
    if (pi.matrix && pi.host_side) {
      const std::size_t one = static_cast<std::size_t>(std::max<std::int64_t>(pi.device_capacity, 0)) *
                                  (12 * static_cast<std::size_t>(pi.channel_len) + 4) +
                              16;
      most = std::max(most, device_comm ? one : 2 * one);
    }
  }
  return most > 0 ? static_cast<double>(std::max(most, bucket_bytes)) : 0.0;
}

/// Every rank's bytes. `params`: plan_params' list (matrices, then vectors), their device
/// capacities the whole matrices' (a shard's share is computed here).
inline std::vector<plan_rank_bytes> plan_data_parallel_device(const std::vector<param_info>& params,
                                                              const plan_parallel_settings& s) {
  const int N = s.ranks;
  std::vector<plan_rank_bytes> out(static_cast<std::size_t>(N));
  if (N <= 1 && !s.sharded) {
    return out;
  }
  // The partition: the host-side matrices for ZeRO-2 (owner_partition), every matrix for ZeRO-3
  // (shard_channels). Every element holds the same state: the bytes per element only scale it.
  std::vector<partition_matrix> list;
  std::vector<std::int64_t> index(params.size(), -1);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    if (pi.matrix && (s.sharded || pi.host_side)) {
      index[p] = static_cast<std::int64_t>(list.size());
      list.push_back({pi.channels, static_cast<std::uint64_t>(pi.channel_len)});
    }
  }
  const channel_partition part = list.empty() ? channel_partition{} : partition_channels(list, N);
  const auto rows_of = [&](std::size_t p, int r) {
    return index[p] < 0 ? params[p].channels : part.count(static_cast<std::size_t>(index[p]), r);
  };
  if (!s.sharded) {
    std::vector<bucket_param> bp;
    for (const auto& pi : params) {
      const std::int64_t outer = pi.layout == channel_layout::contiguous ? pi.channels : pi.channel_len;
      const std::int64_t inner = pi.layout == channel_layout::contiguous ? pi.channel_len : pi.channels;
      bp.push_back({pi.channels, pi.channel_len,
                    static_cast<std::size_t>((outer - 1) * pi.ld + inner) * pi.elem_bytes(),
                    !s.gpu_adamw && pi.matrix && pi.host_side});
    }
    const double scratch = s.gpu_adamw ? 88.0 : owner_device_scratch(params, N, s.slot_bytes);
    for (int r = 0; r < N; ++r) {
      std::size_t own = 0;
      for (std::size_t p = 0; p < params.size(); ++p) {
        own += bp[p].split ? static_cast<std::size_t>(rows_of(p, r) * params[p].channel_len) : 0;
      }
      auto& o = out[static_cast<std::size_t>(r)];
      o.reduction = static_cast<double>(bucket_footprint(bp, N, own, s.bucket_bytes / 4, s.in_place).total());
      o.scratch = scratch;
    }
    return out;
  }
  double vectors = 0;
  for (const auto& pi : params) {
    vectors += pi.matrix ? 0.0 : static_cast<double>(pi.channel_len);
  }
  for (int r = 0; r < N; ++r) {
    double w = 2.0 * s.elem_bytes * vectors, sel = 0, up = 0;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      if (!pi.matrix) {
        continue;
      }
      const std::int64_t rows = rows_of(p, r);
      const auto len = static_cast<double>(pi.channel_len);
      // gpu_adamw: every row of the shard; zenflow: its share of the whole matrix's top-k
      // (device_capacity here: k); offload_sync: none.
      const std::int64_t cap =
          s.gpu_adamw
              ? rows
              : (pi.device_capacity == 0
                     ? 0
                     : param_info::shard_device_rows(pi.device_capacity, rows, pi.channels, s.headroom));
      w += 2.0 * s.elem_bytes * static_cast<double>(rows) * len;
      sel += static_cast<double>(cap) * (len * 12.0 + 8.0);
      up += pi.host_side && s.whole_window ? s.elem_bytes * static_cast<double>(rows) * len : 0.0;
    }
    auto& o = out[static_cast<std::size_t>(r)];
    o.weights_and_grads = w;
    o.selected_state = sel;
    o.upload = up;
  }
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
