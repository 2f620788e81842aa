/// @file
/// `engine::save` / `engine::load`: the whole optimizer state in one checkpoint file
/// (<zenflow/engine/checkpoint_file.hpp>), so that a run resumed from it is bit-identical to one
/// that never stopped (docs/checkpoint.md, "Engine state"). Each component saves, checks and
/// restores its own part (io/): the registry its identity (registry_part.hpp), the schedule its
/// scalars, voter and trigger (schedule_part.hpp), the host state its rows and masses
/// (host_part.hpp), the device plan its device rows (plan_part.hpp); the data-parallel policy
/// names the rank's file and says which channels it holds (checkpoint_part). This file composes
/// them over the engine's parts (engine_core::checkpoint_parts()). An engine whose own file does
/// not fit (absent, or written for other channels: another world size, policy or shards) loads
/// the saving world's files re-sharded (reshard_part.hpp) through the same checks and restores.
///
/// Sections (little-endian; `p<i>` is the parameter of registration index i):
///
///     engine/scalars   ckpt_scalars: the schedule (step, selection step, window, windows, the current
///                      accumulator, the pending host job), the open window's n_w, the counters
///     engine/masses    the Zen-auto masses of the last two steps (step, valid, crit[M], rest[M]) x 2
///     engine/voter     Zen-auto's statistics: crit_steps, crit_sum[M], rest_sum[M] (doubles)
///     engine/trigger   select_on_mass_drop's state (only with the trigger on): ckpt_trigger
///     p<i>/sel         the device set the engine reports (int32, ascending)
///     p<i>/master, m, v, counts, acc, rest_l1    host state and the open window (host-side only);
///                      m and v as the host stores them: fp32, bf16 or int8 (host_moments)
///     p<i>/m_scale, v_scale                       int8 host moments only: the fp32 block scales
///     p<i>/upload      the pending host job's new weights, host-set order (overlap, pending only;
///                      a rank over a device communicator: its share)
///     p<i>/dev_sel, dev_rows, dev_counts         the device rows (master | m | v), k rows each
///
/// Saved between steps: a host job in flight is finished first (its new weights are kept, not
/// applied, and saved); the D2H ring is drained. Loaded after checking the whole file: structure and
/// checksums (the reader), identity (config and parameter-list hashes), every section's presence,
/// size and the selections' values; only then is anything changed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/io/checkpoint_sections.hpp>
#include <zenflow/engine/detail/io/host_part.hpp>
#include <zenflow/engine/detail/io/plan_part.hpp>
#include <zenflow/engine/detail/io/registry_part.hpp>
#include <zenflow/engine/detail/io/reshard_part.hpp>
#include <zenflow/engine/detail/io/schedule_part.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// `Core`: detail::engine_core (step/engine_core.hpp).
template <class Core>
struct engine_checkpoint {
  static void save(Core& core, const std::string& path, cudaStream_t stream) {
    between_steps(core, "zenflow::engine::save", path);
    auto e = core.checkpoint_parts();
    settle(e);
    const std::size_t M = e.voter.matrices();
    const std::size_t a = e.sched.accumulator;
    const ckpt_scalars s = scalars_of(e.sched, e.sched.job && e.jobs.outcome().produced, e.host.n_w(a),
                                      e.host.skipped(), M, e.stats);
    checkpoint_writer out(rank_path(e, path), identity(e));
    out.section("engine/scalars", &s, sizeof s);
    save_masses(out, e.host, s.step, M);
    save_voter(out, e.voter);
    if (e.cfg.mass_trigger()) { // the config hash already says whether a file has it
      const ckpt_trigger tr = trigger_of(e.trigger, e.sched, e.stats);
      out.section("engine/trigger", &tr, sizeof tr);
    }
    const bool upload = s.pending != 0 && s.job_produced != 0;
    window_sums(e, a, stream, true);
    for (std::size_t p = 0; p < e.params.size(); ++p) {
      save_host_rows(out, p, e.params[p], e.host[p], a, upload);
      save_device_rows(out, e.plan, p, stream);
    }
    out.commit();
  }

  static void load(Core& core, const std::string& path, cudaStream_t stream) {
    between_steps(core, "zenflow::engine::load", path);
    auto e = core.checkpoint_parts();
    const std::string own = rank_path(e, path);
    const checkpoint_identity mine = identity(e);
    std::unique_ptr<checkpoint_reader> in;
    if (ckpt_file_exists(own)) {
      in = std::make_unique<checkpoint_reader>(own); // structure and checksums
    }
    // This rank's own file when an engine of this layout wrote it; else (absent, or written for
    // other channels: another world size, policy or shards) this rank's part assembled from
    // every file of the world that saved (reshard_part.hpp). A damaged own file, or one of another
    // configuration, stays an error of that file (below: one that names a host_moments setting).
    if (!in || (in->identity().config_hash == mine.config_hash && !fits(*in, e, mine))) {
      in.reset();
      std::vector<rank_part> parts;
      for (std::size_t p = 0; p < e.params.size(); ++p) {
        parts.push_back(e.par.checkpoint_part(p));
      }
      const ckpt_image img = reshard_image(e.cfg, e.params, e.host, parts, e.par.rank(), e.par.ranks(), path,
                                           e.voter.matrices(), e.jobs.overlapped());
      load_from(e, img, stream);
      return;
    }
    // Before the config hash: an error that names the setting.
    same_host_moments(*in, e.cfg, e.params);
    in->expect(mine);
    load_from(e, *in, stream);
  }

private:
  using parts = typename Core::checkpoint_parts_type;

  /// True when `in`, this rank's own file, was written by an engine of this one's layout: its
  /// identity, and a pending job's weights in the rows this engine's buffers hold (an owner
  /// partition over a device communicator keeps its block's share, over a host one every row: the
  /// same world's files of the other kind are assembled instead).
  static bool fits(const checkpoint_reader& in, const parts& e, const checkpoint_identity& mine) {
    if (!same_identity(in.identity(), mine)) {
      return false;
    }
    for (std::size_t p = 0; p < e.params.size(); ++p) {
      const auto& pi = e.params[p];
      const checkpoint_section* up = pi.host_side ? in.find(ckpt_tag(p, "upload")) : nullptr;
      if (up != nullptr && in.find(ckpt_tag(p, "sel")) != nullptr &&
          up->bytes != upload_rows_after(pi, e.host[p], ckpt_read_set(in, ckpt_tag(p, "sel"), pi)) *
                           pi.channel_bytes()) {
        return false;
      }
    }
    return true;
  }

  /// `in`: this engine's own file, its identity checked, or a re-sharded image.
  template <class In>
  static void load_from(parts& e, const In& in, cudaStream_t stream) {
    // 1. Check everything; change nothing.
    const auto M = static_cast<std::int64_t>(e.voter.matrices());
    const ckpt_scalars s = read_scalars(in, M, e.jobs.overlapped());
    ckpt_need(in, "engine/masses", masses_bytes(static_cast<std::size_t>(M)));
    ckpt_need(in, "engine/voter", voter_bytes(static_cast<std::size_t>(M)));
    const ckpt_trigger tr = e.cfg.mass_trigger() ? read_trigger(in, s) : ckpt_trigger{};
    const bool upload = s.pending != 0 && s.job_produced != 0;
    std::vector<std::vector<std::int32_t>> sels(e.params.size()), dev_sels(e.params.size());
    for (std::size_t p = 0; p < e.params.size(); ++p) {
      const auto& pi = e.params[p];
      sels[p] = ckpt_read_set(in, ckpt_tag(p, "sel"), pi);
      dev_sels[p] = check_device_rows(in, p, pi);
      check_host_rows(in, p, pi, e.host[p], sels[p], upload);
    }

    // 2. Replace the state: the job in flight and the ring first (their results are replaced).
    settle(e);
    e.sched.job.reset();
    e.plan.wait_upload_done(); // the host upload buffers are written next
    e.plan.wait_migration();   // and the host rows: no migration's host task may still write them
    const auto a = static_cast<std::size_t>(s.cur_acc);
    for (std::size_t p = 0; p < e.params.size(); ++p) {
      const auto& pi = e.params[p];
      auto& h = e.host[p];
      restore_host_rows(in, p, pi, h, std::move(sels[p]), a, upload);
      if (pi.host_side) {
        (void)e.plan.set_host_set(p, h.host_set, stream);
      }
      if constexpr (requires { e.par.fit_device_rows(p, std::size_t{0}, stream); }) {
        e.par.fit_device_rows(p, dev_sels[p].size(), stream); // a crowded shard's saved rows
      }
      restore_device_rows(in, e.plan, p, pi, dev_sels[p], stream);
    }
    e.stats.memory.host_accumulators = e.host.accumulator_bytes();
    e.host.reset_reads();
    restore_masses(in, e.host, static_cast<std::size_t>(M));
    restore_voter(in, e.voter);
    e.host.restore_n_w(a, static_cast<std::int32_t>(s.n_w));
    e.host.restore_n_w(a ^ 1u, 0);
    window_sums(e, a, stream, false, static_cast<std::uint32_t>(s.n_w));
    e.host.restore_skipped(s.skipped);
    restore_schedule(e.sched, e.trigger, e.stats, s, tr, a);
    if (s.pending != 0) {
      // The saved job as a job of this engine's queue that has already run: it only uploads the
      // saved weights, which the next drain applies, at the step the saved run would have.
      const std::int64_t qw = e.jobs.submit_finished(s.job_produced != 0);
      e.sched.job = submitted_job{qw, s.pending_window, s.pending_first, s.pending_last};
    }
  }

  /// The hashes a file must match (registry_part.hpp), for this rank.
  static checkpoint_identity identity(const parts& e) {
    return registry_identity(e.cfg, e.params, e.par.rank(), e.par.ranks());
  }
  /// Data parallel: every rank its own file (`path` itself for one rank).
  static std::string rank_path(const parts& e, const std::string& path) {
    return checkpoint_rank_path(path, e.par.rank(), e.par.ranks());
  }

  static void between_steps(const Core& core, const char* fn, const std::string& path) {
    require(core.initialized(), fn, "this", "is not initialized (register, initialize(), then load/save)");
    require(!path.empty(), fn, "path", "must not be empty");
    require(!core.announcements_pending(), fn, "this",
            "has grad_ready() announcements for the coming step (save and load between steps)");
  }

  /// accumulate = device: the open window's sums are state, saved in the accumulator's section
  /// (the same file as the host mode's: row c = channel c) with its n_w. `to_host`: the device's
  /// sums into accumulator `a`'s host-set rows (the job that read that buffer is done: settled);
  /// else those rows up into the device's sums, `n_w` good steps in the window. Blocking.
  static void window_sums(parts& e, std::size_t a, cudaStream_t stream, bool to_host, std::uint32_t n_w = 0) {
    auto& sums = e.d2h.window_sum();
    if (!sums.on()) {
      return;
    }
    for (std::size_t p = 0; p < e.params.size(); ++p) {
      auto& h = e.host[p];
      const std::int64_t L = e.params[p].channel_len;
      const auto rows = static_cast<std::int64_t>(h.host_set.size());
      if (!e.params[p].host_side || rows == 0 || rows * L > sums.elements(p)) {
        continue; // larger: no selection yet (warm-up), nothing in the device's sum
      }
      float* acc = h.sum(a).data(); // one rank: the host set's rows in its order, as the device's sum
      if (to_host) {
        (void)sums.read(e.plan.backend(), p, acc, rows * L, stream);
      } else {
        sums.write(e.plan.backend(), p, acc, rows * L, n_w, stream);
      }
    }
  }

  /// The host job in flight finished, every pushed slot consumed (no thread touches the state).
  static void settle(parts& e) {
    e.jobs.wait_idle();
    e.d2h.wait_packs(); // a restore rewrites the host sets they read (by_caller: maybe unreleased)
    e.host.wait_consumed(e.d2h.pushed());
    e.plan.wait_migration(); // a selection's host tasks wrote the host rows (usually long done)
  }
};

} // namespace detail
ZF_NAMESPACE_END
