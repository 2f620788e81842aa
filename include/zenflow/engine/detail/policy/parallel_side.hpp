/// @file
/// The engine's parallel side: what its data-parallel policy (engine/parallel.hpp) does at each
/// phase of initialize() and of a step, one class per policy over the same hooks:
/// `parallel_side<Backend, single_rank, Host>` (single_rank.hpp: nothing to reduce, every row
/// here), `parallel_side<Backend, owner_partition<Comm>, Host>` (dp/owner_partition.hpp) and
/// `parallel_side<Backend, sharded<Comm>, Host>` (dp/sharded.hpp). The engine calls these hooks and
/// nothing else of data parallel. Training thread only (gather_window() too: at a window's
/// boundary, a collective at the same point on every rank).
///
/// Also here: a host-side parameter's rows when this rank keeps all of them (one rank; a vector,
/// replicated), which both policies use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/plan/moment_rows.hpp>
#include <zenflow/engine/detail/policy/rank_part.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/param_state.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// What setup() returns: what the side allocated, what the plan's setup takes from it, and how a
/// step's phases may be ordered around it. initialize() reads it once.
struct parallel_layout {
  std::size_t device_scratch = 0;   ///< device bytes allocated (stats().memory.device_scratch)
  std::size_t device_reduction = 0; ///< the gradients' buckets and mean buffers (device_reduction)
  std::size_t host_staging = 0;     ///< pinned host bytes of a selection's staging (host_staging)
  plan_inputs inputs;               ///< what the plan's setup takes from the side
  /// Per parameter the channels whose host rows this rank keeps, which alone it copies down
  /// (resolve_d2h_slots sizes the ring by them); empty: all of them.
  std::vector<std::int64_t> kept_channels;
  bool streams_early = true;       ///< grad_ready() may stream a step's gradients before step()
  bool packs_before_norms = true;  ///< a step's packs may start before its prologue
  bool announces = false;          ///< grad_ready() starts a reduction: once a parameter and step
  bool steps_without_grads = true; ///< step_options::no_grad (data parallel: every rank steps all)
  bool gathers_windows = false;    ///< a window's weights come from every rank at its boundary
  bool gathers_on_device = false;  ///< ... into the device upload buffers (else the host ones)
};

/// What end_step() returns: the bytes the step's calls sent to other ranks, and how many matrices'
/// device rows grew so far (ZeRO-3's fallback: stats().device_rows_grown).
struct parallel_step_end {
  std::uint64_t sent = 0;
  std::int64_t device_rows_grown = 0;
};

/// The hooks the engine calls (engine_core.hpp), by phase; `t` is the step, and a member returns
/// what it sent to other ranks where it says bytes:
/// - initialize(): verify(cfg, params, stream), before anything changes (bytes);
///   setup(cfg, plan, params, host, slot_bytes, stream) -> parallel_layout, before the plan's
///   setup (binds the side to the engine's plan, parameters and host state);
///   init_host_rows(p, stream), after it: a host-side parameter's rows, host set and masters
///   (bytes copied down);
/// - grad_ready(): announce(p, stream);
/// - step(): begin_step(t, stream) -> the plan's step hooks (prologue, select_all), after its
///   gradients' reduction; select(kind, sets, d2h, stream) on a selection step (the skip flag),
///   then migrate(p, new_sel, stream) for each matrix ({down, up} bytes, selection.hpp);
///   write_rest(stream, pack_stream, order) after the packs; end_step() -> parallel_step_end;
/// - a window's boundary: gather_window(stream) (bytes), when the layout gathers windows;
/// - reads: read_state(p, stream), summed(stats, stream), collectives with more than one rank.
/// Beside them: construction from `argument_type` (the engine constructor's third argument),
/// rank(), ranks(), and checkpoint_part(p), the channels of matrix `p` this rank's checkpoint file
/// holds (rank_part.hpp). Training thread only.
template <class Backend, class Policy, class Host>
class parallel_side;

/// Zen-auto and select_on_mass_drop read step t's masses (zen_auto_lag steps later), so with more
/// than one rank every rank needs the one-rank masses, not its own rows' part.
inline bool reads_rest_masses(const config& cfg, std::int64_t t) {
  return cfg.mode == optimizer_mode::zenflow && (cfg.auto_update() || cfg.mass_trigger()) &&
         t >= cfg.full_warm_up_rounds;
}

/// A host-side parameter whose rows this rank keeps all of: its shard is the whole matrix, its
/// host set every channel, its fp32 masters its working weights (blocking). Returns the bytes
/// copied down.
template <class Backend, class HostParam>
std::size_t init_whole_rows(
    device_plan<Backend>& plan, std::size_t p, const param_info& pi, HostParam& h, cudaStream_t stream) {
  h.shard.first = 0;
  h.shard.channels = pi.channels;
  h.set_host_set(complement({}, pi.channels));
  h.master.resize(static_cast<std::size_t>(pi.elements()));
  return plan.download_weights(p, h.master.data(), stream);
}

/// f(rows) with `h`'s host rows of every channel as a basic_channel_state of its moment type.
template <class HostParam, class F>
decltype(auto) with_whole_rows(const param_info& pi, HostParam& h, F&& f) {
  return h.moments.visit([&](auto hm, auto hv) -> decltype(auto) {
    using M = moment_of_t<decltype(hm)>;
    const basic_channel_state<M> rows{h.master.data(), hm, hv, h.counts.data(), pi.channels, pi.channel_len};
    return f(rows);
  });
}

/// device_plan::migrate() of `p` (device set h.sel -> new_sel) between the device and host rows
/// of every channel. Returns {device->host, host->device} bytes.
template <class Backend, class HostParam>
std::pair<std::size_t, std::size_t> migrate_whole(device_plan<Backend>& plan,
                                                  std::size_t p,
                                                  const param_info& pi,
                                                  HostParam& h,
                                                  const std::vector<std::int32_t>& new_sel,
                                                  cudaStream_t stream) {
  return with_whole_rows(pi, h, [&](const auto& rows) {
    using M = moment_of_t<decltype(rows.m)>;
    return plan.migrate(p, h.sel, new_sel, rows, 0,
                        static_cast<const entering_rows<wire_moment_t<M>>*>(nullptr), stream);
  });
}

/// The full state of `p` from host rows of every channel (none for a parameter without host
/// state) and the device rows over them. Blocking.
template <class Backend, class HostParam>
param_state read_whole_state(
    device_plan<Backend>& plan, std::size_t p, const param_info& pi, HostParam& h, cudaStream_t stream) {
  return with_whole_rows(pi, h, [&](const auto& rows) {
    return plan.read_full_state(p, pi.host_side ? &rows : nullptr, stream);
  });
}

/// The hooks of a side whose device and host rows are this rank's registered parameters whole
/// (single_rank; sharded, whose rank registered its shard of each matrix): migration, state reads
/// and the checkpoint part over the engine's plan, parameters and host state, bound at setup(), no
/// announcement to act on and no window to gather.
template <class Backend, class Host>
class whole_rows_side {
public:
  std::pair<std::size_t, std::size_t>
  migrate(std::size_t p, const std::vector<std::int32_t>& new_sel, cudaStream_t stream) {
    return migrate_whole(*plan_, p, (*params_)[p], (*host_)[p], new_sel, stream);
  }

  void announce(std::size_t /*p*/, cudaStream_t /*stream*/) {}
  std::uint64_t gather_window(cudaStream_t /*stream*/) { return 0; }

  /// The state of `p` as registered here (a sharded rank's: its shard of a matrix, a vector whole).
  param_state read_state(std::size_t p, cudaStream_t stream) {
    return read_whole_state(*plan_, p, (*params_)[p], (*host_)[p], stream);
  }
  /// Every channel of `p` as registered here, every host row of it (rank_part.hpp).
  [[nodiscard]] rank_part checkpoint_part(std::size_t p) const { return whole_part((*params_)[p]); }

protected:
  void bind(device_plan<Backend>& plan, std::vector<param_info>& params, Host& host) noexcept {
    plan_ = &plan;
    params_ = &params;
    host_ = &host;
  }

  device_plan<Backend>* plan_ = nullptr;
  std::vector<param_info>* params_ = nullptr;
  Host* host_ = nullptr;
};

} // namespace detail
ZF_NAMESPACE_END
