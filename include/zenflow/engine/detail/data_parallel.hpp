/// @file
/// The engine's data-parallel side (docs/data-parallel.md): the communicator, the checks of
/// initialize() (the same configuration and parameter list on every rank), the channel partition,
/// and the reduction of every rank's gradients to their mean before the step reads them.
///
/// The gradients are reduced (mean) at the start of step(), into engine-owned buffers that the
/// device plan then reads instead of the user's. The host state is partitioned by owner
/// (`active()`): each rank keeps its block of every host-side matrix and copies only its
/// block's unselected gradients down; the window's weights and the rows entering the device are
/// all-gathered. Over a host communicator every step reduce-scatters the host sets' rows by owner
/// and all-reduces only the rest; the scores, the skip flag, the clipping norm, a selection's
/// importance and the rest masses then get one float per channel from the owners, and a
/// selection's entering rows come from theirs (owner_reduction.hpp). A device communicator (NCCL)
/// does the same split in device memory, summing per-channel numbers instead of gathering them
/// (device_owner_reduction.hpp); it gathers a window's shares in the device upload buffers, and a
/// state read's through a device staging buffer. A selection's entering state is gathered into
/// a device staging buffer on either kind (partitioned_migration.hpp). An N-rank run is a
/// one-rank run fed the mean gradient, bit for bit.
///
/// One code path for every backend: the gradients are widened into one fp32 buffer, reduced in one
/// call, and narrowed back, each way one batched row copy over every parameter (row_copies.hpp). A host
/// communicator (`is_device == false`) on an asynchronous backend (emulated) needs its inputs
/// final when called, so the stream is synchronized first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <tuple>
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
#include <zenflow/engine/detail/device_owner_reduction.hpp>
#include <zenflow/engine/detail/device_plan.hpp>
#include <zenflow/engine/detail/dp_collectives.hpp>
#include <zenflow/engine/detail/owner_reduction.hpp>
#include <zenflow/engine/detail/params.hpp>
#include <zenflow/engine/detail/partitioned_migration.hpp>
#include <zenflow/engine/detail/schedule.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

/// The one-rank communicator that matches a backend's memory: host memory (host, emulated
/// backends) or device memory (CUDA).
template <class Backend>
using default_communicator_t = std::conditional_t<std::is_base_of_v<detail::host_memory, Backend>,
                                                  local_communicator,
                                                  local_device_communicator>;

namespace detail {

/// A step whose host sets' rows are reduce-scattered by owner (with the owner partition): every
/// step with a host side (zenflow, its warm-up, offload_sync); gpu_adamw has none.
inline bool split_by_owner(const config& cfg) {
  return cfg.mode != optimizer_mode::gpu_adamw;
}

/// Zen-auto and select_on_mass_drop read step t's rest masses (zen_auto_lag steps later), so every
/// rank needs the one-rank masses, not its own block's part.
inline bool reads_rest_masses(const config& cfg, std::int64_t t) {
  return cfg.mode == optimizer_mode::zenflow && (cfg.auto_update() || cfg.mass_trigger()) &&
         t >= cfg.full_warm_up_rounds;
}

template <class Backend, class Comm>
class data_parallel {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  // A host communicator reads host memory; a device one, device memory (the emulated device's
  // is host memory: emulated_device_communicator, stream-ordered on its streams).
  static constexpr bool host_memory_backend = std::is_base_of_v<host_memory, Backend>;
  static_assert(host_memory_backend ? !Comm::is_device || (Backend::is_device && emulates_device_memory<Comm>)
                                    : Comm::is_device && !emulates_device_memory<Comm>,
                "zenflow::engine: the communicator's memory (is_device) must be the backend's: "
                "local/mpi_communicator for the host and emulated backends (or, on the emulated "
                "backend, emulated_device_communicator), local_device/nccl_communicator for the "
                "CUDA backend");

public:
  explicit data_parallel(Comm comm) : comm_(std::move(comm)) {}

  [[nodiscard]] Comm& comm() noexcept { return comm_; }
  [[nodiscard]] const Comm& comm() const noexcept { return comm_; }
  /// More than one rank: the step reduces the gradients, and each rank keeps the host state of
  /// its block of every host-side matrix only (the owner partition).
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

  /// Which rank owns which channels' host state: the host-side matrices in registration order,
  /// a channel's bytes its fp32 master and two moments (`state_bytes` per element: 12 with fp32
  /// moments, 8 with bf16; docs/data-parallel.md).
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

  /// initialize(), a host-side parameter: its block, the host set of every channel, and the fp32
  /// masters of the block from the working weights (blocking). Returns the bytes copied down.
  template <class HostParam>
  std::size_t init_host_rows(
      device_plan<Backend>& plan, std::size_t p, const param_info& pi, HostParam& h, cudaStream_t stream) {
    std::tie(h.shard.first, h.shard.channels) = block(p, pi, comm_.rank());
    h.set_host_set(complement({}, pi.channels));
    const auto n = static_cast<std::size_t>(h.shard.channels * pi.channel_len);
    h.master.resize(n);
    if (h.shard.channels == pi.channels) {
      return plan.download_weights(p, h.master.data(), stream);
    }
    std::vector<float> full(static_cast<std::size_t>(pi.elements()));
    const std::size_t bytes = plan.download_weights(p, full.data(), stream);
    std::copy_n(full.begin() + h.shard.first * pi.channel_len, n, h.master.begin());
    return bytes;
  }

  /// A re-selection of `p` (device set h.sel -> new_sel): plan.migrate on the host rows. With the
  /// owner partition the rows that enter come from their owners first (an all-gather by owner of
  /// their master, m, v, count: the same bits on every rank), the device state is replicated, and
  /// a row that leaves is kept by its owner only. Returns {device->host, host->device} bytes.
  template <class HostParam>
  std::pair<std::size_t, std::size_t> migrate(device_plan<Backend>& plan,
                                              std::size_t p,
                                              const param_info& pi,
                                              HostParam& h,
                                              const std::vector<std::int32_t>& new_sel,
                                              cudaStream_t stream,
                                              std::uint64_t& comm_bytes) {
    return h.moments.visit([&](auto* hm, auto* hv) {
      using M = std::remove_pointer_t<decltype(hm)>;
      if (h.shard.channels == pi.channels) {
        const basic_channel_state<M> rows{h.master.data(), hm,          hv,
                                          h.counts.data(), pi.channels, pi.channel_len};
        return plan.migrate(p, h.sel, new_sel, rows, 0, static_cast<const entering_rows<M>*>(nullptr),
                            stream);
      }
      const auto bytes = migrate_partitioned<M>(
          plan, comm_, p, pi, h, hm, hv, new_sel, [&](int r) { return block(p, pi, r); }, stage_, pending_,
          stream);
      comm_bytes += bytes.sent;
      return std::pair{bytes.down, bytes.up};
    });
  }

  /// At a window's boundary (owner partition): every rank's share of the new weights of every
  /// host-side matrix into every rank's upload buffer, in place: the host upload buffers over a
  /// host communicator, the device upload buffers on `stream` over a device one (each rank's
  /// share copied up there already: host_jobs). The host set in ascending order is the blocks in
  /// rank order, so the result is the host-set order a one-rank window writes. Returns the bytes
  /// this rank sent.
  template <class HostSide>
  std::uint64_t gather_uploads(device_plan<Backend>& plan,
                               const std::vector<param_info>& params,
                               HostSide& host,
                               cudaStream_t stream) {
    std::uint64_t sent = 0;
    std::vector<std::size_t> sizes(static_cast<std::size_t>(comm_.size()));
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      auto& h = host[p];
      if (!pi.host_side || h.shard.channels == pi.channels || h.host_set.empty()) {
        continue;
      }
      for (int r = 0; r < comm_.size(); ++r) {
        const auto [first, count] = block(p, pi, r);
        const auto lo = std::lower_bound(h.host_set.begin(), h.host_set.end(), first);
        const auto hi = std::lower_bound(lo, h.host_set.end(), first + count);
        sizes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(hi - lo) * pi.channel_bytes();
      }
      std::byte* buf = Comm::is_device ? plan.upload_buffer(p) : h.upload.data();
      comm_.all_gather_bytes(buf + static_cast<std::size_t>(h.shard.pos) * pi.channel_bytes(), buf, sizes,
                             stream);
      sent += sizes[static_cast<std::size_t>(comm_.rank())];
    }
    return sent;
  }

  /// The full state of `p` (param_state): the host rows, with the owner partition every rank's
  /// block all-gathered first (a collective: every rank calls it), and the device rows over them.
  template <class HostParam>
  param_state read_state(
      device_plan<Backend>& plan, std::size_t p, const param_info& pi, HostParam& h, cudaStream_t stream) {
    return h.moments.visit([&](auto* hm, auto* hv) {
      using M = std::remove_pointer_t<decltype(hm)>;
      if (!pi.host_side || h.shard.channels == pi.channels) {
        const basic_channel_state<M> rows{h.master.data(), hm,          hv,
                                          h.counts.data(), pi.channels, pi.channel_len};
        return plan.read_full_state(p, pi.host_side ? &rows : nullptr, stream);
      }
      plan.wait_migration(); // a selection's leaving rows are home in this rank's block
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
        all_gather_host(plan.backend(), mine, all.data(), sizes, stage, stream);
      };
      std::vector<float> master;
      std::vector<M> m, v;
      std::vector<std::int32_t> counts;
      gather(h.master.data(), master, L * 4);
      gather(hm, m, L * sizeof(M));
      gather(hv, v, L * sizeof(M));
      gather(h.counts.data(), counts, 4);
      const basic_channel_state<M> rows{master.data(), m.data(),    v.data(),
                                        counts.data(), pi.channels, pi.channel_len};
      return plan.read_full_state(p, &rows, stream);
    });
  }

  /// Sums of the byte, stall and host-memory counters of `s` over the ranks (dp_collectives.hpp).
  [[nodiscard]] zenflow::stats summed(const Backend& b, const zenflow::stats& s, cudaStream_t stream) {
    return stats_over_ranks(b, comm_, s, sums_.data(), stream);
  }

  /// When active, before the plan's setup: allocates the fp32 reduction buffer and one
  /// mean-gradient buffer per parameter (its layout and leading dimension, so the plan reads it as
  /// it read the user's), and points every parameter's gradient at it; over a device
  /// communicator with `split` (split_by_owner()), the owner reduction's buffers too (`slot_bytes`:
  /// the D2H ring's). Returns the device bytes allocated.
  std::size_t setup(device_plan<Backend>& plan,
                    std::vector<param_info>& params,
                    std::size_t slot_bytes,
                    bool split,
                    cudaStream_t stream) {
    if (!active()) {
      return 0;
    }
    const Backend& b = plan.backend();
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
      s.offset = total;
      total += pi.elements();
      widest = std::max(widest, pi.channels);
      bytes += extent;
      pi.grads = s.mean.data();
      slots_.push_back(std::move(s));
    }
    wide_ = dbuf<float>(static_cast<std::size_t>(total));
    sums_ = dbuf<double>(stats_summed_counters);
    idx_ = dbuf<std::int32_t>(static_cast<std::size_t>(widest));
    // CUDA allocates them stream-ordered on the null stream: done before `stream` uses them.
    b.synchronize(nullptr);
    for (auto& s : slots_) {
      b.zero(s.mean.data(), s.mean.size(), stream); // the padding between channels is never read
    }
    b.run(stream, static_cast<std::size_t>(widest) * 4, "zenflow::engine: iota",
          [out = idx_.data(), widest](auto prim, auto on) { return prim.iota(out, widest, on); });
    // Every gradient widened into the reduction buffer and narrowed back, one launch each way.
    std::vector<row_copy_item> widen, narrow;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      row_copy_item it{const_cast<void*>(slots_[p].user),
                       pi.type,
                       pi.channels,
                       pi.channel_len,
                       pi.ld,
                       pi.layout,
                       idx_.data(),
                       pi.channels,
                       wide_.data() + slots_[p].offset};
      widen.push_back(it);
      it.matrix = slots_[p].mean.data();
      narrow.push_back(it);
    }
    widen_ = row_copy_table<Backend>(widen.size());
    narrow_ = row_copy_table<Backend>(narrow.size());
    widen_.assign(b, widen, stream);
    narrow_.assign(b, narrow, stream);
    b.synchronize(stream); // `widen` and `narrow` are freed on return
    if constexpr (Comm::is_device) {
      for (std::size_t p = 0; p < params.size(); ++p) {
        grads_.push_back({slots_[p].user, slots_[p].mean.data()});
      }
      bytes += split ? device_owners_.setup(params, grads_, wide_.data(), owned(params), comm_.rank(),
                                            comm_.size(), slot_bytes, plan)
                     : 0;
    } else if (split) {
      (void)owners_.setup(params); // host memory: not counted as device bytes
    }
    // A selection's entering state (migrate_partitioned's gathers, one matrix at a time) at its
    // largest, so that no selection step allocates: the widest device set, fp32 moments.
    std::size_t entering = 0;
    std::size_t staging = 0; // and the host sources of its copies up, pinned, every matrix's
    for (const auto& pi : params) {
      entering = split && pi.matrix && pi.host_side
                     ? std::max(entering, static_cast<std::size_t>(pi.device_capacity) *
                                              (12u * static_cast<std::size_t>(pi.channel_len) + 4u))
                     : entering;
      staging +=
          split && pi.matrix && pi.host_side ? selection_staging<Backend>::bound(pi, !Comm::is_device) : 0;
    }
    if (staging > 0) {
      pending_ = selection_staging<Backend>(staging);
    }
    if (entering > 0) {
      stage_ = dbuf<std::byte>(entering);
      bytes += entering;
    }
    b.synchronize(nullptr); // the allocations since the last wait, before a step's stream uses them
    return bytes + wide_.size() * 4 + idx_.size() * 4 + sums_.size() * 8;
  }

  /// At the start of step(), when active: every parameter's gradient replaced by the mean over the
  /// ranks (fp32 rank-order mean, rounded once to the working type). Stream-ordered on a device
  /// communicator; a host communicator waits for `stream` first. With `split` (the owner
  /// partition, split_by_owner(): owner_reduction.hpp) the host sets' rows are
  /// reduce-scattered by owner instead, and only this rank's block of them holds the mean; then
  /// finish_norms() after the prologue's norms. Returns the bytes this rank sent.
  template <class HostSide>
  std::uint64_t reduce_gradients(device_plan<Backend>& plan,
                                 const std::vector<param_info>& params,
                                 const HostSide& host,
                                 bool split,
                                 cudaStream_t stream) {
    split_ = split && active();
    if (!active()) {
      return 0;
    }
    const Backend& b = plan.backend();
    if constexpr (Comm::is_device) {
      if (split_) { // stream-ordered in device memory (device_owner_reduction.hpp)
        return device_owners_.reduce(b, comm_, plan, params, host, stream);
      }
    }
    widen_.run(b, row_copy_direction::gather, stream);
    if constexpr (!Comm::is_device) {
      b.synchronize(stream); // a host communicator reads the buffer when called
    }
    std::uint64_t sent = wide_.size() * 4u;
    if constexpr (!Comm::is_device) {
      if (split_) {
        std::vector<std::int64_t> offsets;
        for (const auto& s : slots_) {
          offsets.push_back(s.offset);
        }
        sent = owners_.reduce(comm_, params, host, owned(params), wide_.data(), offsets);
      } else {
        comm_.all_reduce_mean(wide_.data(), wide_.size(), stream);
      }
    } else {
      comm_.all_reduce_mean(wide_.data(), wide_.size(), stream);
    }
    narrow_.run(b, row_copy_direction::scatter, stream);
    return sent;
  }

  /// After the prologue's norms of a split step (reduce_gradients): the scores and flags completed
  /// from the owners, and with `rest_masses` the rest masses for write_rest() (owner_reduction.hpp);
  /// a no-op otherwise. Returns the bytes this rank sent.
  template <class HostSide>
  std::uint64_t finish_norms(device_plan<Backend>& plan,
                             const std::vector<param_info>& params,
                             const HostSide& host,
                             bool rest_masses,
                             std::size_t slot_bytes,
                             cudaStream_t stream) {
    if (!split_) {
      return 0;
    }
    if constexpr (Comm::is_device) {
      (void)host;
      (void)slot_bytes;
      return device_owners_.finish_norms(plan.backend(), comm_, plan, params, rest_masses, stream);
    } else {
      return owners_.finish_norms(comm_, plan.backend(), plan, params, host, owned(params), rest_masses,
                                  slot_bytes, stream);
    }
  }

  /// A selection step's device sets (device_plan::select_all): on a split step the importance
  /// and the entering rows are completed from the owners. Returns the skip flag; the bytes sent
  /// go to `comm_bytes`.
  template <class HostSide>
  bool select(device_plan<Backend>& plan,
              const std::vector<param_info>& params,
              const HostSide& host,
              channel_norm kind,
              std::vector<std::vector<std::int32_t>>& sets,
              std::size_t& d2h,
              std::uint64_t& comm_bytes,
              cudaStream_t stream) {
    plan.importance(kind, stream);
    // select_top() waits for the stream: the last selection's copies up are done.
    const auto top = [&] {
      const bool bad = plan.select_top(sets, d2h, stream);
      pending_.clear();
      return bad;
    };
    if constexpr (Comm::is_device) {
      if (split_) {
        comm_bytes += device_owners_.complete_importance(plan.backend(), comm_, plan, params, kind, stream);
        const bool bad = top();
        if (!bad) {
          comm_bytes += device_owners_.fetch_entering(plan.backend(), comm_, params, host, sets, grads_,
                                                      wide_.data(), stream);
        }
        return bad;
      }
    } else {
      if (split_) {
        comm_bytes +=
            owners_.complete_importance(comm_, plan.backend(), plan, params, owned(params), kind, stream);
        const bool bad = top();
        if (!bad) {
          comm_bytes += owners_.fetch_entering(comm_, params, host, owned(params), sets);
        }
        return bad;
      }
    }
    return top();
  }

  /// After the packs of a split step: the rest masses of finish_norms() over the host sets as
  /// they are now, into the record on `pack_stream`, the packs'. A device communicator computes
  /// them on `stream`, then calls `order()` (the packs' stream waits for `stream`). Returns the
  /// bytes sent.
  template <class HostSide, class Order>
  std::uint64_t write_rest(device_plan<Backend>& plan,
                           const std::vector<param_info>& params,
                           const HostSide& host,
                           cudaStream_t stream,
                           cudaStream_t pack_stream,
                           Order&& order) {
    if (!split_) {
      return 0;
    }
    if constexpr (Comm::is_device) {
      return device_owners_.write_rest(plan.backend(), comm_, plan, params, host, stream, pack_stream, order);
    } else {
      (void)stream;
      (void)order;
      return owners_.write_rest(comm_, plan.backend(), plan, params, host, owned(params), pack_stream);
    }
  }

private:
  void all_gather_host(const Backend& b,
                       const void* send,
                       void* recv,
                       std::span<const std::size_t> sizes,
                       dbuf<std::byte>& stage,
                       cudaStream_t stream) {
    gather_host_blocks(b, comm_, send, recv, sizes, stage, stream); // dp_collectives.hpp
  }

  /// block() over `params` for owner_reduction.
  auto owned(const std::vector<param_info>& params) const {
    return typename owner_reduction<Backend, Comm>::block_fn(
        [this, &params](std::size_t p, int r) { return block(p, params[p], r); });
  }

  struct slot {
    const void* user = nullptr; // the user's gradient (the plan reads `mean`)
    dbuf<std::byte> mean;
    std::int64_t offset = 0; // in wide_
  };
  Comm comm_;
  channel_partition partition_{};
  std::vector<std::int64_t> part_index_; // per parameter: its matrix in partition_, or -1
  std::vector<slot> slots_;
  dbuf<float> wide_;
  dbuf<std::int32_t> idx_;
  row_copy_table<Backend> widen_, narrow_; // every parameter's rows to and from wide_
  dbuf<double> sums_;                      // summed()'s, in device memory for a device communicator
  dbuf<std::byte> stage_; // a selection's entering rows, one matrix at a time (migrate_partitioned)
  selection_staging<Backend> pending_;    // host sources of a selection's copies up (partitioned_migration)
  owner_reduction<Backend, Comm> owners_; // a split step's reduction (host communicators)
  device_owner_reduction<Backend, Comm> device_owners_; // ... and over a device communicator
  std::vector<typename device_owner_reduction<Backend, Comm>::grads> grads_; // the latter's view of slots_
  bool split_ = false; // this step's reduction is split by owner
};

} // namespace detail
ZF_NAMESPACE_END
