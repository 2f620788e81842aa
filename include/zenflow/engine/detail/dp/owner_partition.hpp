/// @file
/// The owner partition's side of the engine (parallel_side.hpp; docs/data-parallel-design.md): the
/// communicator, the checks of initialize() (the same configuration and parameter list on every
/// rank), the channel partition, and the reduction of every rank's gradients to their mean before
/// the step reads them.
///
/// The gradients are reduced (mean) in fixed-size fp32 buckets as grad_ready() announces them,
/// the rest at the start of step(), into your gradient buffers (reduce_in_place) or engine mean
/// buffers that the step reads instead (grad_buckets.hpp). With more than one rank the host state
/// is partitioned by owner: each rank keeps its block of every host-side matrix (its row_shard)
/// and copies only its block's unselected gradients down; the window's weights and the rows
/// entering the device are all-gathered. Every step with a host side reduce-scatters the host
/// sets' rows by owner and all-reduces only the rest; the scores, the skip flag, the clipping
/// norm, a selection's importance and the rest masses then get one number per channel from the
/// owners, and a selection's entering rows come from theirs: the owner reduction
/// (owner_reduction.hpp), over host buffers for a host communicator, stream-ordered in device
/// memory for a device one. A window's shares are gathered in the host upload buffers over a host
/// communicator, in the device upload buffers over a device one; a state read's through a device
/// staging buffer. A selection's entering state is gathered into a device staging buffer on
/// either kind (partitioned_migration.hpp). An N-rank run is a one-rank run fed the mean
/// gradient, bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/dp/collectives.hpp>
#include <zenflow/engine/detail/dp/comm_side.hpp>
#include <zenflow/engine/detail/dp/device_owner_reduction.hpp>
#include <zenflow/engine/detail/dp/grad_buckets.hpp>
#include <zenflow/engine/detail/dp/host_owner_reduction.hpp>
#include <zenflow/engine/detail/dp/owner_reduction.hpp>
#include <zenflow/engine/detail/dp/partitioned_migration.hpp>
#include <zenflow/engine/detail/host/host_moments.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/policy/parallel_side.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/parallel.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A step whose host sets' rows are reduce-scattered by owner: every step with a host side
/// (zenflow, its warm-up, offload_sync); gpu_adamw has none.
inline bool split_by_owner(const config& cfg) {
  return cfg.mode != optimizer_mode::gpu_adamw;
}

template <class Backend, class Comm, class Host>
class parallel_side<Backend, owner_partition<Comm>, Host> : public comm_side<Comm> {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  static_assert(comm_fits_backend<Backend, Comm>,
                "zenflow::engine: the communicator's memory (is_device) must be the backend's: "
                "local/mpi_communicator for the host and emulated backends (or, on the emulated "
                "backend, emulated_device_communicator), local_device/nccl_communicator for the "
                "CUDA backend");
  using reduction = std::conditional_t<Comm::is_device,
                                       device_owner_reduction<Backend, Comm, Host>,
                                       host_owner_reduction<Backend, Comm, Host>>;
  static_assert(owner_reduction<reduction, owner_context<Backend, Comm, Host>>);

public:
  using comm_side<Comm>::comm_side;
  [[nodiscard]] const channel_partition& partition() const noexcept { return partition_; }

  /// initialize(), before anything is changed: every rank must hold the same configuration and
  /// the same parameter list (else every rank throws the same invalid_argument, naming which and
  /// the ranks that differ; never a hang). Returns the bytes this rank sent.
  std::uint64_t verify(const config& cfg, const std::vector<param_info>& params, cudaStream_t stream) {
    // Each rank owns a block of the host rows and receives only those; a device sum of every
    // host-set row per rank is not what data parallel's byte budget is built on: one rank only.
    require(cfg.accumulate == accumulation_site::host, "zenflow::engine::initialize", "accumulate",
            "\"device\" is single-rank only (data parallel accumulates on the host)");
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
    // "snr" compares a window's accumulator with every host channel's mass: with the owner
    // partition that needs the other ranks' accumulators inside the window job (not built).
    require(!(active() && cfg.host_lr_scale == host_lr_scaling::snr), "zenflow::engine::initialize",
            "host_lr_scale", "\"snr\" is not supported data parallel (use \"linear\", \"sqrt\" or \"none\")");
    // A device communicator gathers a window's shares in the device upload buffer, which
    // chunk_ring does not have.
    require(!(active() && Comm::is_device && cfg.upload == upload_policy::chunk_ring),
            "zenflow::engine::initialize", "upload",
            "\"chunk_ring\" is not supported data parallel over a device communicator (the window's "
            "all-gather runs in the device upload buffer: use \"whole_window\")");
    return active() ? 2u * 8u : 0u; // two 8-byte hashes (one rank sends nothing)
  }

  /// initialize(), before the plan's setup (the parameters' device capacities and host sides
  /// known): the partition; with more than one rank the reduction's buckets (every parameter's
  /// `step_grads` pointed at the mean's destination: reduction_bytes()), the owner reduction's
  /// buffers and a selection's staging. Binds this side to the engine's plan, parameters and host
  /// state.
  parallel_layout setup(const config& cfg,
                        device_plan<Backend>& plan,
                        std::vector<param_info>& params,
                        Host& host,
                        std::size_t slot_bytes,
                        cudaStream_t stream) {
    cfg_ = &cfg;
    plan_ = &plan;
    params_ = &params;
    host_ = &host;
    set_partition(params, host_state_bytes(cfg.host_moments));
    if (!active()) {
      return layout(0);
    }
    split_ = split_by_owner(cfg);
    const Backend& b = plan.backend();
    const auto owner_of = [this](std::size_t p, int r) { return block(p, (*params_)[p], r); };
    reduction_ = buckets_.setup({&comm_, &b, &params, &host, owner_of, split_,
                                 static_cast<std::size_t>(cfg.reduce_bucket_bytes), cfg.reduce_in_place},
                                stream);
    std::size_t bytes = 0;
    sums_ = dbuf<double>(stats_summed_counters);
    // A selection's entering state (migrate_partitioned's gathers, one matrix at a time; over a
    // device communicator its entering rows' gradients first) at its largest, so that no selection
    // step allocates: the widest device set, fp32 moments.
    std::size_t entering = 0;
    std::size_t staging = 0; // and the host sources of its copies up, pinned: one matrix's at least
    for (const auto& pi : params) {
      const bool rows = split_ && pi.matrix && pi.host_side;
      entering = rows ? std::max(entering, static_cast<std::size_t>(pi.device_capacity) *
                                               (host_state_bytes(moment_precision::fp32) *
                                                    static_cast<std::size_t>(pi.channel_len) +
                                                4u))
                      : entering;
      staging = std::max(staging, rows ? selection_staging<Backend>::bound(pi, !Comm::is_device) : 0);
    }
    if (staging > 0) { // a bucket's worth, so that a selection seldom waits to reuse it
      pending_ =
          selection_staging<Backend>(std::max(staging, static_cast<std::size_t>(cfg.reduce_bucket_bytes)));
    }
    if (entering > 0) {
      stage_ = dbuf<std::byte>(entering);
      bytes += entering;
    }
    if (split_) {
      bytes +=
          owners_.setup({&comm_, &plan, &params, &host, owner_of, stage_.data(), stage_.size(), slot_bytes});
    }
    b.synchronize(nullptr); // the allocations since the last wait, before a step's stream uses them
    return layout(bytes + sums_.size() * 8);
  }

  /// initialize(), a host-side parameter: its block, the host set of every channel, and the fp32
  /// masters of the block from the working weights (blocking). Returns the bytes copied down.
  std::size_t init_host_rows(std::size_t p, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& h = (*host_)[p];
    const auto [first, count] = block(p, pi, comm_.rank());
    if (count == pi.channels) {
      return init_whole_rows(*plan_, p, pi, h, stream);
    }
    h.shard.first = first;
    h.shard.channels = count;
    h.set_host_set(complement({}, pi.channels));
    const auto n = static_cast<std::size_t>(count * pi.channel_len);
    h.master.resize(n);
    std::vector<float> full(static_cast<std::size_t>(pi.elements()));
    const std::size_t bytes = plan_->download_weights(p, full.data(), stream);
    std::copy_n(full.begin() + first * pi.channel_len, n, h.master.begin());
    return bytes;
  }

  /// grad_ready(p): with more than one rank the buckets whose every gradient is final are
  /// reduced now (grad_buckets.hpp). A collective: it may wait for the other ranks.
  void announce(std::size_t p, cudaStream_t stream) {
    if (active()) {
      buckets_.announce(p, stream);
    }
  }
  /// At the start of step `t`: every parameter's gradient replaced by the mean over the ranks
  /// (fp32 rank-order mean, rounded once to the working type), the host sets' rows
  /// reduce-scattered by owner instead when the step has a host side (only this rank's block of
  /// them holds the mean): the buckets grad_ready() did not launch, then `stream` waits for them.
  /// Stream-ordered on a device communicator; a host communicator waits for `stream` first.
  /// Returns the plan's step hooks for the step (below).
  [[nodiscard]] auto begin_step(std::int64_t t, cudaStream_t stream) {
    split_step_ = split_ && active();
    rest_ = split_step_ && reads_rest_masses(*cfg_, t);
    if (active()) {
      sent_ += buckets_.finish(stream);
    }
    return hooks();
  }

  /// The plan's step hooks: after the norms, the scores and flags completed from the owners (and
  /// the rest masses prepared for write_rest()); after a selection's L1 importance, the scores
  /// again. No-ops on a step that is not split by owner.
  struct step_hooks {
    parallel_side* side;
    void after_norms(cudaStream_t stream) {
      if (side->split_step_) {
        side->sent_ += side->owners_.finish_norms(side->rest_, stream);
      }
    }
    void after_importance(channel_norm kind, cudaStream_t stream) {
      if (side->split_step_) {
        side->sent_ += side->owners_.complete_importance(kind, stream);
      }
    }
  };
  [[nodiscard]] step_hooks hooks() noexcept { return {this}; }

  /// A selection step's device sets (device_plan::select_all with the hooks): on a split step
  /// the entering rows' gradients then come from their owners. Returns the skip flag.
  bool select(channel_norm kind,
              std::vector<std::vector<std::int32_t>>& sets,
              std::size_t& d2h,
              cudaStream_t stream) {
    // select_all() waits for the stream: the last selection's copies up are done.
    const bool bad = plan_->select_all(kind, sets, d2h, stream, hooks());
    pending_.clear();
    if (split_step_ && !bad) {
      sent_ += owners_.fetch_entering(sets, stream);
    }
    return bad;
  }

  /// After the packs of a split step: the rest masses over the host sets as they are now, into
  /// the record on `pack_stream`, the packs' (`order()` makes it wait for `stream`).
  template <class Order>
  void write_rest(cudaStream_t stream, cudaStream_t pack_stream, Order&& order) {
    if (split_step_) {
      sent_ += owners_.write_rest(stream, pack_stream, order);
    }
  }

  /// At the end of a step: the bytes this rank sent since the last call.
  [[nodiscard]] parallel_step_end end_step() noexcept { return {std::exchange(sent_, 0), 0}; }

  /// A re-selection of `p` (device set h.sel -> new_sel): plan.migrate on the host rows. With the
  /// owner partition the rows that enter come from their owners first (an all-gather by owner of
  /// their master, m, v, count: the same bits on every rank), the device state is replicated, and
  /// a row that leaves is kept by its owner only. Returns {device->host, host->device} bytes.
  std::pair<std::size_t, std::size_t>
  migrate(std::size_t p, const std::vector<std::int32_t>& new_sel, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& h = (*host_)[p];
    if (h.shard.whole(pi.channels)) {
      return migrate_whole(*plan_, p, pi, h, new_sel, stream);
    }
    return h.moments.visit([&](auto hm, auto hv) {
      using M = moment_of_t<decltype(hm)>;
      const auto bytes = migrate_partitioned<M>(
          *plan_, comm_, p, pi, h, hm, hv, new_sel, [&](int r) { return block(p, pi, r); }, stage_, pending_,
          stream);
      sent_ += bytes.sent;
      return std::pair{bytes.down, bytes.up};
    });
  }

  /// At a window's boundary (more than one rank: the layout gathers windows): every rank's share of the new
  /// weights of every host-side matrix into every rank's upload buffer, in place (each rank's share copied up
  /// there already over a device communicator: host_jobs). The host set in ascending order is the blocks in
  /// rank order, so the result is the host-set order a one-rank window writes. Returns the bytes this rank
  /// sent.
  std::uint64_t gather_window(cudaStream_t stream) {
    std::uint64_t sent = 0;
    std::vector<std::size_t> sizes(static_cast<std::size_t>(comm_.size()));
    for (std::size_t p = 0; p < params_->size(); ++p) {
      const auto& pi = (*params_)[p];
      auto& h = (*host_)[p];
      if (!pi.host_side || h.shard.whole(pi.channels) || h.host_set.empty()) {
        continue;
      }
      for (int r = 0; r < comm_.size(); ++r) {
        const auto [first, count] = block(p, pi, r);
        const auto lo = std::lower_bound(h.host_set.begin(), h.host_set.end(), first);
        const auto hi = std::lower_bound(lo, h.host_set.end(), first + count);
        sizes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(hi - lo) * pi.channel_bytes();
      }
      std::byte* buf = Comm::is_device ? plan_->exposed().upload_buffer(p) : h.upload.data();
      comm_.all_gather_bytes(buf + static_cast<std::size_t>(h.shard.pos) * pi.channel_bytes(), buf, sizes,
                             stream);
      sent += sizes[static_cast<std::size_t>(comm_.rank())];
    }
    return sent;
  }

  /// The full state of `p` (param_state): the host rows, with the owner partition every rank's
  /// block all-gathered first (a collective: every rank calls it), and the device rows over them.
  param_state read_state(std::size_t p, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& h = (*host_)[p];
    if (!pi.host_side || h.shard.whole(pi.channels)) {
      return read_whole_state(*plan_, p, pi, h, stream);
    }
    return h.moments.visit([&](auto hm, auto hv) {
      using W = wire_moment_t<moment_of_t<decltype(hm)>>; // int8: each block widened (exact) first
      plan_->wait_migration(); // a selection's leaving rows are home in this rank's block
      const auto L = static_cast<std::size_t>(pi.channel_len);
      std::vector<std::size_t> sizes(static_cast<std::size_t>(comm_.size()));
      // A device communicator's staging for a whole matrix's state: allocated and freed here (a
      // state read is rare and blocking; stage_ holds only a device set's rows).
      dbuf<std::byte> stage;
      auto gather = [&](const auto* mine, auto& all, std::size_t per_channel) {
        for (int r = 0; r < comm_.size(); ++r) {
          sizes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(block(p, pi, r).second) * per_channel;
        }
        all.resize(static_cast<std::size_t>(pi.channels) * per_channel / sizeof(all[0]));
        gather_host_blocks(plan_->backend(), comm_, mine, all.data(), sizes, stage,
                           stream); // collectives.hpp
      };
      std::vector<float> master, wm, wv;
      std::vector<W> m, v;
      std::vector<std::int32_t> counts;
      gather(h.master.data(), master, L * 4);
      gather(widened(hm, h.master.size(), wm), m, L * sizeof(W));
      gather(widened(hv, h.master.size(), wv), v, L * sizeof(W));
      gather(h.counts.data(), counts, 4);
      const basic_channel_state<W> rows{master.data(), m.data(),    v.data(),
                                        counts.data(), pi.channels, pi.channel_len};
      return plan_->read_full_state(p, &rows, stream);
    });
  }

  /// Sums of the byte, stall and host-memory counters of `s` over the ranks (collectives.hpp); a
  /// collective with more than one rank.
  [[nodiscard]] zenflow::stats summed(const zenflow::stats& s, cudaStream_t stream) {
    return active() ? stats_over_ranks(plan_->backend(), comm_, s, sums_.data(), stream) : s;
  }
  /// The whole matrix, the host rows of this rank's block (parallel_side.hpp).
  [[nodiscard]] rank_part checkpoint_part(std::size_t p) const {
    const auto& pi = (*params_)[p];
    const auto [first, count] = block(p, pi, comm_.rank());
    return {0, pi.channels, first, count};
  }

private:
  /// More than one rank: the step reduces the gradients, and each rank keeps the host state of
  /// its block of every host-side matrix only.
  [[nodiscard]] bool active() const noexcept { return comm_.size() > 1; }

  /// setup()'s answer, `scratch` its device bytes but the buckets'.
  [[nodiscard]] parallel_layout layout(std::size_t scratch) const {
    parallel_layout l;
    l.device_scratch = scratch;
    l.device_reduction = reduction_;                                  // the buckets (and mean buffers)
    l.host_staging = pending_.bytes();                                // a selection's, pinned
    l.inputs = active() && split_ ? owners_.inputs() : plan_inputs{}; // a device communicator's rescans
    if (active()) { // this rank's block of each parameter (every channel of a vector)
      for (std::size_t p = 0; p < params_->size(); ++p) {
        l.kept_channels.push_back(block(p, (*params_)[p], comm_.rank()).second);
      }
    }
    // Early streaming only with one rank (the mean exists once step() made it); the packs start
    // before the prologue unless a host communicator's reduction by owner completes gradient rows
    // and the rest masses around them.
    l.streams_early = !active();
    l.packs_before_norms = Comm::is_device || !active();
    l.announces = true; // the buckets of final gradients are reduced once
    l.steps_without_grads = false;
    l.gathers_windows = active();
    l.gathers_on_device = Comm::is_device; // into the device upload buffers, else the host ones
    return l;
  }

  /// Which rank owns which channels' host state: the host-side matrices in registration order,
  /// a channel's bytes its fp32 master and two moments (`state_bytes` per element;
  /// docs/data-parallel-design.md).
  void set_partition(const std::vector<param_info>& params, std::uint64_t state_bytes) {
    std::vector<partition_matrix> list;
    part_index_.assign(params.size(), -1);
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      if (pi.matrix && pi.host_side) {
        part_index_[p] = static_cast<std::int64_t>(list.size());
        list.push_back({pi.channels, static_cast<std::uint64_t>(pi.channel_len) * state_bytes});
      }
    }
    if (!list.empty()) {
      partition_ = partition_channels(list, comm_.size());
    }
  }

  /// Channels [first, first + count) of `p` whose host state rank `r` keeps.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t>
  block(std::size_t p, const param_info& pi, int r) const {
    if (!active() || part_index_[p] < 0) {
      return {0, pi.channels}; // a vector on the host: small, replicated
    }
    const auto m = static_cast<std::size_t>(part_index_[p]);
    return {partition_.begin(m, r), partition_.count(m, r)};
  }

  using comm_side<Comm>::comm_;
  const config* cfg_ = nullptr;
  device_plan<Backend>* plan_ = nullptr;
  std::vector<param_info>* params_ = nullptr;
  Host* host_ = nullptr;
  channel_partition partition_{};
  std::vector<std::int64_t> part_index_;      // per parameter: its matrix in partition_, or -1
  grad_buckets<Backend, Comm, Host> buckets_; // the gradients' reduction
  std::size_t reduction_ = 0;                 // its device bytes
  dbuf<double> sums_;                         // summed()'s, in device memory for a device communicator
  dbuf<std::byte> stage_;                     // a selection's entering rows, one matrix at a time
  selection_staging<Backend> pending_;        // host sources of a selection's copies up
  reduction owners_;                          // a split step's reduction
  bool split_ = false;                        // the steps have a host side: split by owner
  bool split_step_ = false;                   // this step is (split_ with more than one rank)
  bool rest_ = false;                         // this step reads the rest masses
  std::uint64_t sent_ = 0;                    // bytes sent since take_sent()
};

} // namespace detail
ZF_NAMESPACE_END
