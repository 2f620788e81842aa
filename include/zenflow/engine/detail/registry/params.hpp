/// @file
/// The engine's parameter registry: what the user registered, in a type-erased form, and the
/// dtype dispatch that turns it back into typed calls. The public types of registration
/// (`param_id`, `param_options`, `param_settings`) are in <zenflow/engine/params.hpp>.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/params.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// Calls `f(T{})` with the working type of `t`.
template <class F>
decltype(auto) dispatch_dtype(dtype t, F&& f) {
  switch (t) {
  case dtype::f16:
    return std::forward<F>(f)(half{});
  case dtype::bf16:
    return std::forward<F>(f)(bfloat16{});
  case dtype::f32:
  default:
    return std::forward<F>(f)(float{});
  }
}

/// One registered parameter. A vector parameter of n elements is seen as one channel of n.
struct param_info {
  bool matrix = false;
  dtype type = dtype::f32;
  void* weights = nullptr;
  const void* grads = nullptr; ///< the user's, as registered
  /// The gradient the step reads: `grads` (with data parallel and reduce_in_place, the mean of
  /// every rank's written there), or the engine's mean buffer (detail/dp/grad_buckets.hpp; the
  /// sharded policy's vectors: dp/mean_gradients.hpp; set at initialize()).
  const void* step_grads = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  std::string name;
  float lr_scale = 1.0f;            ///< resolved from param_options / param_groups; engine::set_lr_scale
  float registered_lr_scale = 1.0f; ///< lr_scale as registered (a checkpoint's identity)
  float weight_decay = 0.0f;        ///< resolved from param_options / param_groups / config
  /// A sharded engine's matrix (param_options::shard): these channels are [shard_first,
  /// shard_first + channels) of a matrix of shard_total; shard_total 0: the whole matrix.
  std::int64_t shard_first = 0;
  std::int64_t shard_total = 0;
  /// The channels of the whole matrix (a shard's `total`), which its top-k is taken over.
  [[nodiscard]] std::int64_t whole_channels() const noexcept {
    return shard_total > 0 ? shard_total : channels;
  }
  /// The whole matrix's device channels in `cfg`'s mode: k = topk_count(topk_ratio, whole
  /// channels) in zenflow (the one place k is computed: the selection's top-k, Zen-auto's voter),
  /// every channel in gpu_adamw, none in offload_sync.
  [[nodiscard]] std::int64_t selected_channels(const config& cfg) const {
    return cfg.mode == optimizer_mode::gpu_adamw
               ? whole_channels()
               : (cfg.mode == optimizer_mode::zenflow ? cfg.topk(whole_channels()) : 0);
  }
  /// A ZenFlow matrix's device rows: the whole matrix's top-k; a shard reserves its share of it
  /// (shard_device_rows: its share of k and cfg.shard_state_headroom more, at most min(k, its
  /// channels); a selection that crowds more into it grows it, docs/data-parallel.md).
  [[nodiscard]] std::int64_t zenflow_capacity(const config& cfg) const {
    const std::int64_t k = selected_channels(cfg); // zenflow: the whole matrix's top-k
    return shard_total > 0 ? shard_device_rows(k, channels, shard_total, cfg.shard_state_headroom)
                           : std::min(k, channels);
  }
  /// ZeRO-3: the device rows a shard of `count` of a matrix's `total` channels reserves for the
  /// matrix's top-k of `k`: its share, ceil(k x count / total), and `headroom` of that more, at
  /// most min(k, count) (a whole matrix: min(k, count)). The planner counts the same.
  [[nodiscard]] static std::int64_t
  shard_device_rows(std::int64_t k, std::int64_t count, std::int64_t total, double headroom) {
    const std::int64_t most = std::min(k, count);
    if (total <= 0 || count >= total) {
      return most;
    }
    const std::int64_t share = (k * count + total - 1) / total;
    const auto with = static_cast<std::int64_t>(std::ceil(static_cast<double>(share) * (1.0 + headroom)));
    return std::min(most, std::max<std::int64_t>(with, 1));
  }
  /// The most device rows a selection can give this matrix in `cfg`'s mode: the whole matrix's
  /// selected channels, of which a shard holds at most all its own (its whole matrix's top-k may
  /// fall in it). initialize() sets device_rows_most to it.
  [[nodiscard]] std::int64_t matrix_rows_most(const config& cfg) const {
    return std::min(selected_channels(cfg), channels);
  }
  /// A matrix's device rows in `cfg`'s mode (initialize() sets device_capacity to it): every
  /// channel in gpu_adamw, the top-k's in zenflow (a shard: its share), none in offload_sync.
  [[nodiscard]] std::int64_t matrix_capacity(const config& cfg) const {
    return cfg.mode == optimizer_mode::zenflow ? zenflow_capacity(cfg)
                                               : std::min(selected_channels(cfg), channels);
  }
  /// The most host-set rows this matrix can have: its channels less the fewest selected ones that
  /// can fall in it (channels - k for a whole matrix; a shard's, those of the whole matrix's k
  /// that the other shards cannot hold: it holds every one of its channels when the whole top-k
  /// fits elsewhere).
  [[nodiscard]] std::int64_t max_host_rows(const config& cfg) const {
    return channels - std::max<std::int64_t>(0, selected_channels(cfg) - (whole_channels() - channels));
  }

  /// The hyper-parameters of this parameter's updates in a step with learning rate `lr`.
  [[nodiscard]] adamw_hparams hparams(const adamw_hparams& base, float lr) const noexcept {
    adamw_hparams hp = base;
    hp.lr = lr * lr_scale;
    hp.weight_decay = weight_decay;
    return hp;
  }
  /// True when two parameters' updates take the same hyper-parameters (one dense call may update both).
  [[nodiscard]] bool same_hparams(const param_info& o) const noexcept {
    return std::memcmp(&lr_scale, &o.lr_scale, 4) == 0 && std::memcmp(&weight_decay, &o.weight_decay, 4) == 0;
  }

  /// Channels whose optimizer state can live on the device (rows of the device's compact state):
  /// k for a ZenFlow matrix, 1 for a vector (zenflow, gpu_adamw), all channels for a gpu_adamw
  /// matrix, 0 in offload_sync; a shard's share of k (zenflow_capacity), grown when a selection
  /// crowds more into it.
  std::int64_t device_capacity = 0;
  /// The most device rows a selection can give it (matrix_rows_most; a vector: device_capacity):
  /// what a checkpoint's sets are checked against, and part of its identity.
  std::int64_t device_rows_most = 0;
  /// True when the parameter has full-size host state (ZenFlow matrices; vectors when there is a
  /// warm-up; every offload_sync parameter).
  bool host_side = false;
  /// True for a vector updated by the device's dense AdamW once it lives on the device.
  bool device_dense = false;

  [[nodiscard]] std::int64_t elements() const noexcept { return channels * channel_len; }
  [[nodiscard]] std::size_t elem_bytes() const noexcept { return dtype_size(type); }
  [[nodiscard]] std::size_t channel_bytes() const noexcept {
    return static_cast<std::size_t>(channel_len) * elem_bytes();
  }
  /// Host-set rows per D2H slot of `slot_bytes`: the D2H stream's pack boundaries, which also fix
  /// the order of the rest mass's sum (data parallel's owner reduction repeats that sum).
  [[nodiscard]] std::int64_t rows_per_slot(std::size_t slot_bytes) const noexcept {
    return static_cast<std::int64_t>(slot_bytes / channel_bytes());
  }
  [[nodiscard]] std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(elements()) * elem_bytes();
  }

  template <class T>
  [[nodiscard]] channel_matrix<T> weight_matrix() const {
    return {static_cast<T*>(weights), channels, channel_len, ld, layout};
  }
  template <class T>
  [[nodiscard]] channel_matrix<const T> grad_matrix() const {
    return {static_cast<const T*>(step_grads), channels, channel_len, ld, layout};
  }
};

/// Pinned chunks (of ring_slot_bytes each) of the upload stage through which a window's new
/// weights go up (whole_window, device_plan_upload.hpp): the job writes one while the others'
/// copies run. The planner counts them.
inline constexpr std::size_t upload_stage_chunks = 4;

/// Slots of the D2H stream: `ring` host ring slots, `staging` device staging slots.
struct d2h_slots {
  std::size_t ring = 0;
  std::size_t staging = 0;
};

/// The most pinned bytes the automatic sizing gives a rank's D2H ring (and the device staging,
/// never larger than the ring): 1 GiB, 256 slots of 4 MiB (0.16 B a parameter at 7B on one GPU;
/// it was 1024 slots, 0.64 B). A ring smaller than a step's D2H makes step() wait for the first
/// copies to be taken in before it can push the last ones, unless the gradients are streamed
/// during the backward (grad_ready): docs/planning.md measures both.
inline constexpr std::size_t max_auto_ring_bytes = std::size_t{1} << 30;

/// `cfg.ring_slots` resolved for these parameters: a fixed count is both; 0 (auto) sizes the
/// staging for one step's D2H and the host ring for two, so that a step's pushes find free slots
/// while the copies of the step before are still landing; at least 8, at most 1024 and
/// max_auto_ring_bytes. A step's D2H:
/// in zenflow mode the unselected channels of every matrix (channels - k; a sharded engine's shard,
/// the most its host set can hold for the whole matrix's k: max_host_rows; the warm-up's
/// synchronous steps move more, and wait for it anyway), in offload_sync every host-side
/// parameter; in slots of `slot_bytes`, plus the step record's two copies. `kept` (data parallel,
/// else empty): per parameter the channels whose host rows this rank keeps (its owner block), of
/// which alone it copies gradients down, so that a rank's ring and staging are sized by its block.
inline d2h_slots resolve_d2h_slots(const config& cfg,
                                   const std::vector<param_info>& params,
                                   std::size_t slot_bytes,
                                   const std::vector<std::int64_t>& kept = {}) {
  if (cfg.ring_slots > 0) {
    return {static_cast<std::size_t>(cfg.ring_slots), static_cast<std::size_t>(cfg.ring_slots)};
  }
  const bool zen = cfg.mode == optimizer_mode::zenflow;
  std::size_t step = 2;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    if (pi.host_side && (pi.matrix || !zen)) {
      const std::int64_t unselected = zen ? pi.max_host_rows(cfg) : pi.channels;
      const std::int64_t per_slot = pi.rows_per_slot(slot_bytes);
      const std::int64_t slots = (unselected + per_slot - 1) / per_slot;
      // A block's rows are cut at one rank's slot boundaries (d2h_stream), so they may touch one
      // slot more than their count fills, never more than one rank's slots.
      const std::int64_t rows = kept.empty() ? unselected : std::min(unselected, kept[p]);
      step += static_cast<std::size_t>(kept.empty() ? slots
                                                    : std::min(slots, (rows + per_slot - 1) / per_slot + 1));
    }
  }
  const std::size_t most =
      std::clamp<std::size_t>(max_auto_ring_bytes / std::max<std::size_t>(slot_bytes, 1), 8, 1024);
  const std::size_t ring = std::clamp<std::size_t>(2 * step, 8, most);
  return {ring, std::clamp<std::size_t>(step, 8, ring)};
}

/// resolve_d2h_slots of each of `ranks` data-parallel ranks, sized by its owner block of every
/// host-side matrix (the partition owner_partition::kept_channels reads): what the planner counts.
inline std::vector<d2h_slots> resolve_rank_d2h_slots(const config& e,
                                                     const std::vector<param_info>& params,
                                                     std::size_t slot_bytes,
                                                     int ranks) {
  if (ranks <= 1) {
    return {resolve_d2h_slots(e, params, slot_bytes)};
  }
  std::vector<partition_matrix> list;
  std::vector<std::int64_t> index(params.size(), -1);
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].matrix && params[p].host_side) {
      index[p] = static_cast<std::int64_t>(list.size());
      // Every element holds the same state, so the bytes per element only scale the partition.
      list.push_back({params[p].channels, static_cast<std::uint64_t>(params[p].channel_len)});
    }
  }
  std::vector<d2h_slots> out;
  const channel_partition part = list.empty() ? channel_partition{} : partition_channels(list, ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::int64_t> kept(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      kept[p] = index[p] < 0 ? params[p].channels : part.count(static_cast<std::size_t>(index[p]), r);
    }
    out.push_back(resolve_d2h_slots(e, params, slot_bytes, kept));
  }
  return out;
}

/// The device-dense parameters (vectors) in the order of their slots in one contiguous array of
/// update counts: grouped by dtype (f32, f16, bf16), then by hyper-parameters (lr_scale, weight
/// decay; in the order of their first appearance), registration order inside a group, so that
/// one dense AdamW call per group updates them all.
inline std::vector<std::size_t> dense_order(const std::vector<param_info>& params) {
  std::vector<std::size_t> order;
  std::vector<char> placed(params.size(), 0);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (!params[p].device_dense || params[p].type != t || placed[p] != 0) {
        continue;
      }
      for (std::size_t q = p; q < params.size(); ++q) {
        if (params[q].device_dense && params[q].type == t && placed[q] == 0 &&
            params[q].same_hparams(params[p])) {
          order.push_back(q);
          placed[q] = 1;
        }
      }
    }
  }
  return order;
}

/// Sorted set difference a \ b of two ascending index lists.
inline std::vector<std::int32_t> sorted_difference(const std::vector<std::int32_t>& a,
                                                   const std::vector<std::int32_t>& b) {
  std::vector<std::int32_t> out;
  std::size_t j = 0;
  for (const std::int32_t x : a) {
    while (j < b.size() && b[j] < x) {
      ++j;
    }
    if (j == b.size() || b[j] != x) {
      out.push_back(x);
    }
  }
  return out;
}

/// How the device set changes from `old_sel` to `new_sel` (both ascending): leaving channels
/// (their positions in old_sel and their channel ids), kept channels (old and new positions),
/// entering channels (their positions in new_sel and their channel ids).
inline void diff_selection(const std::vector<std::int32_t>& old_sel,
                           const std::vector<std::int32_t>& new_sel,
                           std::vector<std::int32_t>& leave_pos,
                           std::vector<std::int32_t>& leave_ch,
                           std::vector<std::int32_t>& keep_old,
                           std::vector<std::int32_t>& keep_new,
                           std::vector<std::int32_t>& enter_pos,
                           std::vector<std::int32_t>& enter_ch) {
  std::size_t a = 0;
  std::size_t b = 0;
  while (a < old_sel.size() || b < new_sel.size()) {
    if (b == new_sel.size() || (a < old_sel.size() && old_sel[a] < new_sel[b])) {
      leave_pos.push_back(static_cast<std::int32_t>(a));
      leave_ch.push_back(old_sel[a]);
      ++a;
    } else if (a == old_sel.size() || new_sel[b] < old_sel[a]) {
      enter_pos.push_back(static_cast<std::int32_t>(b));
      enter_ch.push_back(new_sel[b]);
      ++b;
    } else {
      keep_old.push_back(static_cast<std::int32_t>(a));
      keep_new.push_back(static_cast<std::int32_t>(b));
      ++a;
      ++b;
    }
  }
}

/// The ascending complement of the ascending list `sel` in [0, n).
inline std::vector<std::int32_t> complement(const std::vector<std::int32_t>& sel, std::int64_t n) {
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(n) - sel.size());
  std::size_t j = 0;
  for (std::int32_t c = 0; c < n; ++c) {
    if (j < sel.size() && sel[j] == c) {
      ++j;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
