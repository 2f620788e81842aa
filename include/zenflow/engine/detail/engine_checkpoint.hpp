/// @file
/// `engine::save` / `engine::load`: the whole optimizer state in one checkpoint file
/// (<zenflow/engine/checkpoint_file.hpp>), so that a run resumed from it is bit-identical to one
/// that never stopped (docs/checkpoint.md, "Engine state").
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
///                      m and v as the host stores them: fp32, or bf16 with host_moments "bf16"
///     p<i>/upload      the pending host job's new weights, host-set order (overlap, pending only)
///     p<i>/dev_sel, dev_rows, dev_counts         the device rows (master | m | v), k rows each
///
/// Saved between steps: a host job in flight is finished first (its new weights are kept, not
/// applied, and saved); the D2H ring is drained. Loaded after checking the whole file: structure and
/// checksums (the reader), identity (config and parameter-list hashes), every section's presence,
/// size and the selections' values; only then is anything changed.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/step/engine_core.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

static_assert(std::endian::native == std::endian::little, "zenflow: checkpoints are written little-endian");

/// The engine's scalars, one fixed record (8-byte fields: no padding).
struct ckpt_scalars {
  std::int64_t layout = 0; ///< engine_checkpoint's own layout version (ckpt_layout)
  std::int64_t step = 0, sel_step = -1, selection_pending = 0, window_open = 0, window_start = 0,
               window_len = 0, windows = 0, cur_acc = 0;
  std::int64_t pending = 0, pending_window = -1, pending_first = 0, pending_last = 0, job_produced = 0;
  std::int64_t n_w = 0;      ///< good steps in the current accumulator
  std::int64_t matrices = 0; ///< matrices in the masses and the voter
  std::int64_t steps = 0, skipped = 0, selections = 0, windows_closed = 0, host_jobs = 0, d2h = 0, h2d = 0,
               last_window_length = 0, max_staleness = 0;
  double stall_s = 0.0, host_window_s = 0.0, last_host_window_s = 0.0;
};
static_assert(std::is_trivially_copyable_v<ckpt_scalars> && sizeof(ckpt_scalars) == 28 * 8);

/// select_on_mass_drop's state (detail/mass_trigger.hpp) and the selection it scheduled.
struct ckpt_trigger {
  std::int64_t triggered_step = -1, pending_from_trigger = 0, mass_drop_selections = 0;
  std::int64_t ref_steps = 0, cur_steps = 0, last_steps = 0;
  double ref_crit = 0.0, ref_total = 0.0, cur_crit = 0.0, cur_total = 0.0, last_crit = 0.0, last_total = 0.0;
};
static_assert(std::is_trivially_copyable_v<ckpt_trigger> && sizeof(ckpt_trigger) == 12 * 8);

// 2: the voter holds the masses of steps up to s-3 between steps and the saved masses are those
//    of steps s-2 and s-1 (Zen-auto's lag of two); a layout-1 file's voter already holds s-2.
inline constexpr std::int64_t ckpt_layout = 2;

template <class Engine>
struct engine_checkpoint {
  static void save(Engine& eng, const std::string& path, cudaStream_t stream) {
    constexpr const char* fn = "zenflow::engine::save";
    between_steps(eng, fn, path);
    settle(eng);
    const ckpt_scalars s = scalars(eng);
    checkpoint_writer out(rank_path(eng, path), identity(eng));
    out.section("engine/scalars", &s, sizeof s);
    const auto M = static_cast<std::size_t>(s.matrices);
    out.begin_section("engine/masses", masses_bytes(M));
    // The masses the next two votes read (Zen-auto's lag of two): steps s-2 and s-1.
    for (std::int64_t i = 0; i < 2; ++i) {
      const std::int64_t t = s.step - zen_auto_lag + i;
      const step_masses none{};
      const step_masses& ms =
          t >= 0 && eng.host_.masses_slot_of(t).step == t ? eng.host_.masses_slot_of(t) : none;
      const std::int64_t head[2] = {ms.step, ms.valid ? 1 : 0};
      out.write(head, sizeof head);
      write_floats(out, ms.crit, M);
      write_floats(out, ms.rest, M);
    }
    out.end_section();
    const auto& voter = *eng.voter_;
    out.begin_section("engine/voter", voter_bytes(M));
    const std::int64_t crit_steps = voter.crit_steps();
    out.write(&crit_steps, 8);
    out.write(voter.crit_sums().data(), M * 8);
    out.write(voter.rest_sums().data(), M * 8);
    out.end_section();
    if (eng.cfg_.mass_trigger()) { // the config hash already says whether a file has it
      const ckpt_trigger tr = trigger_state(eng);
      out.section("engine/trigger", &tr, sizeof tr);
    }
    const bool upload = s.pending != 0 && s.job_produced != 0;
    for (std::size_t p = 0; p < eng.params_.size(); ++p) {
      const auto& pi = eng.params_[p];
      const auto& h = eng.host_[p];
      out.section(tag(p, "sel"), h.sel.data(), h.sel.size() * 4);
      if (pi.host_side) {
        const std::size_t n = h.master.size(); // data parallel: this rank's block
        out.section(tag(p, "master"), h.master.data(), n * 4);
        out.section(tag(p, "m"), h.moments.bytes(0), n * h.moments.element_bytes());
        out.section(tag(p, "v"), h.moments.bytes(1), n * h.moments.element_bytes());
        out.section(tag(p, "counts"), h.counts.data(), h.counts.size() * 4);
        out.section(tag(p, "acc"), h.acc[eng.sched_.accumulator].data(), n * 4);
        out.section(tag(p, "rest_l1"), &h.rest_l1[eng.sched_.accumulator], 8);
        if (upload && !h.host_set.empty()) {
          out.section(tag(p, "upload"), h.upload.data(), h.host_set.size() * pi.channel_bytes());
        }
      }
      std::vector<float> dm, d1, d2; // one parameter at a time
      std::vector<std::int32_t> dc, ds;
      eng.plan_.read_device_state(p, dm, d1, d2, dc, ds, stream);
      out.section(tag(p, "dev_sel"), ds.data(), ds.size() * 4);
      out.begin_section(tag(p, "dev_rows"), 3 * dm.size() * 4);
      out.write(dm.data(), dm.size() * 4);
      out.write(d1.data(), d1.size() * 4);
      out.write(d2.data(), d2.size() * 4);
      out.end_section();
      out.section(tag(p, "dev_counts"), dc.data(), dc.size() * 4);
    }
    out.commit();
  }

  static void load(Engine& eng, const std::string& path, cudaStream_t stream) {
    constexpr const char* fn = "zenflow::engine::load";
    between_steps(eng, fn, path);
    const checkpoint_reader in(rank_path(eng, path)); // structure and checksums
    same_host_moments(eng, in); // before the config hash: an error that names the setting
    in.expect(identity(eng));

    // 1. Check everything; change nothing.
    ckpt_scalars s{};
    need(in, "engine/scalars", sizeof s);
    in.read("engine/scalars", &s, sizeof s);
    const auto M = static_cast<std::int64_t>(eng.voter_->matrices());
    const bool overlap = eng.jobs_.overlapped();
    if (s.layout != ckpt_layout) {
      checkpoint::fail(checkpoint_errc::wrong_version, in.name(),
                       "engine state layout " + std::to_string(s.layout) + ", this build reads " +
                           std::to_string(ckpt_layout));
    }
    const bool ok = s.step >= 0 && s.sel_step >= -1 && s.sel_step < s.step && s.window_len >= 0 &&
                    s.windows >= 0 && (s.cur_acc == 0 || (s.cur_acc == 1 && overlap)) &&
                    (s.pending == 0 || overlap) && s.n_w >= 0 && s.n_w <= INT32_MAX && s.matrices == M;
    if (!ok) {
      corrupt(in, "engine/scalars",
              "holds a state this engine cannot be in (step " + std::to_string(s.step) + ", selection step " +
                  std::to_string(s.sel_step) + ", window length " + std::to_string(s.window_len) + ", n_w " +
                  std::to_string(s.n_w) + ", accumulator " + std::to_string(s.cur_acc) + ", pending " +
                  std::to_string(s.pending) + ", matrices " + std::to_string(s.matrices) + ")");
    }
    const auto Mz = static_cast<std::size_t>(M);
    need(in, "engine/masses", masses_bytes(Mz));
    need(in, "engine/voter", voter_bytes(Mz));
    ckpt_trigger tr{};
    if (eng.cfg_.mass_trigger()) {
      need(in, "engine/trigger", sizeof tr);
      in.read("engine/trigger", &tr, sizeof tr);
      const auto blk = [](std::int64_t n, std::int64_t hi) { return n >= 0 && n <= hi; };
      constexpr std::int64_t B = mass_trigger::block_steps;
      if (!((tr.triggered_step == -1 || tr.triggered_step == s.step) && blk(tr.ref_steps, B) &&
            blk(tr.cur_steps, B - 1) && (tr.last_steps == 0 || tr.last_steps == B) &&
            (tr.pending_from_trigger == 0 || s.selection_pending != 0) && tr.mass_drop_selections >= 0 &&
            tr.mass_drop_selections <= s.selections)) {
        corrupt(in, "engine/trigger",
                "holds a state the trigger cannot be in (triggered step " +
                    std::to_string(tr.triggered_step) + ", block steps " + std::to_string(tr.ref_steps) +
                    "/" + std::to_string(tr.cur_steps) + "/" + std::to_string(tr.last_steps) + ")");
      }
    }
    const bool upload = s.pending != 0 && s.job_produced != 0;
    std::vector<std::vector<std::int32_t>> sels(eng.params_.size()), dev_sels(eng.params_.size());
    for (std::size_t p = 0; p < eng.params_.size(); ++p) {
      const auto& pi = eng.params_[p];
      const auto& h = eng.host_[p];
      const std::size_t n = h.master.size(); // data parallel: this rank's block
      sels[p] = read_set(in, tag(p, "sel"), pi);
      dev_sels[p] = read_set(in, tag(p, "dev_sel"), pi);
      const std::size_t k = dev_sels[p].size();
      need(in, tag(p, "dev_rows"), 3 * k * static_cast<std::size_t>(pi.channel_len) * 4);
      need(in, tag(p, "dev_counts"), k * 4);
      if (pi.host_side) {
        for (const char* t : {"master", "acc"}) {
          need(in, tag(p, t), n * 4);
        }
        for (const char* t : {"m", "v"}) {
          need(in, tag(p, t), n * h.moments.element_bytes());
        }
        need(in, tag(p, "counts"), h.counts.size() * 4);
        need(in, tag(p, "rest_l1"), 8);
        const std::size_t host_channels = static_cast<std::size_t>(pi.channels) - sels[p].size();
        if (upload && host_channels > 0) {
          need(in, tag(p, "upload"), host_channels * pi.channel_bytes());
        }
      }
    }

    // 2. Replace the state: the job in flight and the ring first (their results are replaced).
    settle(eng);
    eng.sched_.job.reset();
    eng.plan_.wait_upload_done(); // the host upload buffers are written next
    eng.plan_.wait_migration();   // and the host rows: no migration's host task may still write them
    const std::size_t a = static_cast<std::size_t>(s.cur_acc);
    for (std::size_t p = 0; p < eng.params_.size(); ++p) {
      const auto& pi = eng.params_[p];
      auto& h = eng.host_[p];
      const std::size_t n = h.master.size();
      h.sel = sels[p];
      if (pi.host_side) {
        in.read(tag(p, "master"), h.master.data(), n * 4);
        in.read(tag(p, "m"), h.moments.bytes(0), n * h.moments.element_bytes());
        in.read(tag(p, "v"), h.moments.bytes(1), n * h.moments.element_bytes());
        in.read(tag(p, "counts"), h.counts.data(), h.counts.size() * 4);
        std::fill(h.acc[a ^ 1u].begin(), h.acc[a ^ 1u].end(), 0.0f); // empty once its job ran
        in.read(tag(p, "acc"), h.acc[a].data(), n * 4);
        in.read(tag(p, "rest_l1"), &h.rest_l1[a], 8);
        h.rest_l1[a ^ 1u] = 0.0;
        h.set_host_set(complement(h.sel, pi.channels));
        (void)eng.plan_.set_host_set(p, h.host_set, stream);
        if (upload && !h.host_set.empty()) {
          in.read(tag(p, "upload"), h.upload.data(), h.host_set.size() * pi.channel_bytes());
        }
      }
      const std::size_t k = dev_sels[p].size();
      const auto L = static_cast<std::size_t>(pi.channel_len);
      std::vector<float> rows(3 * k * L); // one parameter at a time
      std::vector<std::int32_t> counts(k);
      in.read(tag(p, "dev_rows"), rows.data(), rows.size() * 4);
      in.read(tag(p, "dev_counts"), counts.data(), counts.size() * 4);
      eng.plan_.write_device_state(p, static_cast<std::int64_t>(k), rows.data(), rows.data() + k * L,
                                   rows.data() + 2 * k * L, counts.data(), dev_sels[p].data(), stream);
    }
    {
      std::vector<std::byte> masses(masses_bytes(Mz));
      in.read("engine/masses", masses.data(), masses.size());
      const std::byte* at = masses.data();
      eng.host_.clear_masses();
      for (std::size_t i = 0; i < 2; ++i) {
        std::int64_t head[2];
        std::memcpy(head, at, sizeof head);
        at += sizeof head;
        step_masses unused;
        step_masses& ms = head[0] >= 0 ? eng.host_.masses_slot_of(head[0]) : unused;
        ms.step = head[0];
        ms.valid = head[1] != 0;
        ms.crit.resize(Mz);
        ms.rest.resize(Mz);
        std::memcpy(ms.crit.data(), at, Mz * 4);
        at += Mz * 4;
        std::memcpy(ms.rest.data(), at, Mz * 4);
        at += Mz * 4;
      }
      std::vector<std::byte> voter(voter_bytes(Mz));
      in.read("engine/voter", voter.data(), voter.size());
      std::int64_t crit_steps = 0;
      std::memcpy(&crit_steps, voter.data(), 8);
      std::vector<double> crit(Mz), rest(Mz);
      std::memcpy(crit.data(), voter.data() + 8, Mz * 8);
      std::memcpy(rest.data(), voter.data() + 8 + Mz * 8, Mz * 8);
      eng.voter_->restore(crit.data(), rest.data(), crit_steps);
    }
    eng.host_.restore_n_w(a, static_cast<std::int32_t>(s.n_w));
    eng.host_.restore_n_w(a ^ 1u, 0);
    eng.host_.restore_skipped(s.skipped);
    auto& sched = eng.sched_;
    sched.step = s.step;
    sched.selection_step = s.sel_step;
    sched.selection = s.selection_pending != 0 ? selection_phase::pending
                      : s.sel_step >= 0        ? selection_phase::current
                                               : selection_phase::none_yet;
    sched.window.reset();
    if (s.window_open != 0) {
      sched.window = open_window{s.window_start, s.window_len};
    }
    sched.windows_closed = s.windows;
    sched.accumulator = a;
    sched.triggered_step = tr.triggered_step;
    sched.pending_from_trigger = tr.pending_from_trigger != 0;
    eng.stats_.mass_drop_selections = tr.mass_drop_selections;
    eng.trigger_.restore({tr.ref_crit, tr.ref_total, tr.ref_steps}, {tr.cur_crit, tr.cur_total, tr.cur_steps},
                         {tr.last_crit, tr.last_total, tr.last_steps});
    auto& st = eng.stats_;
    st.steps = s.steps;
    st.skipped_steps = s.skipped;
    st.selections = s.selections;
    st.windows_closed = s.windows_closed;
    st.host_jobs = s.host_jobs;
    st.d2h_bytes = static_cast<std::uint64_t>(s.d2h);
    st.h2d_bytes = static_cast<std::uint64_t>(s.h2d);
    st.last_window_length = s.last_window_length;
    st.max_staleness_windows = s.max_staleness;
    st.stall_s = s.stall_s;
    st.host_window_s = s.host_window_s;
    st.last_host_window_s = s.last_host_window_s;
    if (s.pending != 0) {
      // The saved job as a job of this engine's queue that has already run: it only uploads the
      // saved weights, which the next drain applies, at the step the saved run would have.
      const bool produced = s.job_produced != 0;
      const std::int64_t qw = eng.jobs_.submit_finished(produced);
      sched.job = submitted_job{qw, s.pending_window, s.pending_first, s.pending_last};
    }
  }

  /// The hashes a file must match: the configuration as describe() prints it (every setting), and
  /// the parameter list (kind, dtype, shape, layout, name, resolved options, where it lives).
  static checkpoint_identity identity(const Engine& eng) {
    const std::string cfg = eng.cfg_.describe();
    std::vector<std::byte> list;
    const auto put = [&](const void* x, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(x);
      list.insert(list.end(), b, b + n);
    };
    for (const auto& pi : eng.params_) {
      const std::int64_t f[] = {pi.matrix ? 1 : 0,
                                static_cast<std::int64_t>(pi.type),
                                pi.channels,
                                pi.channel_len,
                                pi.ld,
                                static_cast<std::int64_t>(pi.layout),
                                pi.device_capacity,
                                pi.host_side ? 1 : 0,
                                pi.device_dense ? 1 : 0,
                                static_cast<std::int64_t>(pi.name.size())};
      put(f, sizeof f);
      put(pi.name.data(), pi.name.size());
      put(&pi.lr_scale, 4);
      put(&pi.weight_decay, 4);
    }
    return {checkpoint_hash(std::as_bytes(std::span(cfg.data(), cfg.size()))), checkpoint_hash(list),
            static_cast<std::uint32_t>(eng.par_.rank()),
            static_cast<std::uint32_t>(eng.par_.ranks())};
  }

  /// Data parallel: every rank its own file (`path` itself for one rank).
  static std::string rank_path(const Engine& eng, const std::string& path) {
    return checkpoint_rank_path(path, eng.par_.rank(), eng.par_.ranks());
  }

private:
  static void between_steps(const Engine& eng, const char* fn, const std::string& path) {
    require(eng.initialized(), fn, "this", "is not initialized (register, initialize(), then load/save)");
    require(!path.empty(), fn, "path", "must not be empty");
    require(!eng.early_any_ && std::all_of(eng.announced_.begin(), eng.announced_.end(),
                                           [](announcement x) { return x == announcement::none; }),
            fn, "this", "has grad_ready() announcements for the coming step (save and load between steps)");
  }

  /// The host job in flight finished, every pushed slot consumed (no thread touches the state).
  static void settle(Engine& eng) {
    eng.jobs_.wait_idle();
    eng.d2h_.wait_packs(); // a restore rewrites the host sets they read (by_caller: maybe unreleased)
    eng.host_.wait_consumed(eng.d2h_.pushed());
    eng.plan_.wait_migration(); // a selection's host tasks wrote the host rows (usually long done)
  }

  static ckpt_scalars scalars(Engine& eng) {
    ckpt_scalars s{};
    s.layout = ckpt_layout;
    const auto& sched = eng.sched_;
    s.step = sched.step;
    s.sel_step = sched.selection_step;
    s.selection_pending = sched.selection == selection_phase::pending ? 1 : 0;
    s.window_open = sched.window ? 1 : 0;
    s.window_start = sched.window ? sched.window->start : 0;
    s.window_len = sched.window ? sched.window->length : 0;
    s.windows = sched.windows_closed;
    s.cur_acc = static_cast<std::int64_t>(sched.accumulator);
    if (sched.job) {
      s.pending = 1;
      s.pending_window = sched.job->window;
      s.pending_first = sched.job->first_step;
      s.pending_last = sched.job->last_step;
      s.job_produced = eng.jobs_.outcome().produced ? 1 : 0;
    }
    s.n_w = eng.host_.n_w(sched.accumulator);
    s.matrices = static_cast<std::int64_t>(eng.voter_->matrices());
    const auto& st = eng.stats_;
    s.steps = st.steps;
    s.skipped = eng.host_.skipped();
    s.selections = st.selections;
    s.windows_closed = st.windows_closed;
    s.host_jobs = st.host_jobs;
    s.d2h = static_cast<std::int64_t>(st.d2h_bytes);
    s.h2d = static_cast<std::int64_t>(st.h2d_bytes);
    s.last_window_length = st.last_window_length;
    s.max_staleness = st.max_staleness_windows;
    s.stall_s = st.stall_s;
    s.host_window_s = st.host_window_s;
    s.last_host_window_s = st.last_host_window_s;
    return s;
  }

  static ckpt_trigger trigger_state(const Engine& eng) {
    const auto& t = eng.trigger_;
    ckpt_trigger tr;
    tr.triggered_step = eng.sched_.triggered_step;
    tr.pending_from_trigger = eng.sched_.pending_from_trigger ? 1 : 0;
    tr.mass_drop_selections = eng.stats_.mass_drop_selections;
    tr.ref_steps = t.reference().steps;
    tr.cur_steps = t.current().steps;
    tr.last_steps = t.last().steps;
    tr.ref_crit = t.reference().crit;
    tr.ref_total = t.reference().total;
    tr.cur_crit = t.current().crit;
    tr.cur_total = t.current().total;
    tr.last_crit = t.last().crit;
    tr.last_total = t.last().total;
    return tr;
  }

  /// A file whose host moments have the other precision (its first host-side parameter's m holds
  /// 2 bytes per element where this engine keeps 4, or the reverse) was saved under the other
  /// host_moments: say so by name (the config hash alone would only say "another configuration").
  static void same_host_moments(const Engine& eng, const checkpoint_reader& in) {
    for (std::size_t p = 0; p < eng.params_.size(); ++p) {
      const auto& pi = eng.params_[p];
      const checkpoint_section* s = pi.host_side ? in.find(tag(p, "m")) : nullptr;
      if (s == nullptr) {
        continue;
      }
      const auto n = static_cast<std::uint64_t>(eng.host_[p].master.size()); // data parallel: the block
      const moment_precision mine = eng.cfg_.host_moments;
      const moment_precision other =
          mine == moment_precision::fp32 ? moment_precision::bf16 : moment_precision::fp32;
      if (n > 0 && s->bytes == n * (mine == moment_precision::fp32 ? 2u : 4u)) {
        checkpoint::fail(checkpoint_errc::other_config, in.name(),
                         "holds " + std::string(to_string(other)) +
                             " host moments (saved with zenflow_ext.host_moments \"" +
                             std::string(to_string(other)) + "\"), this engine keeps " +
                             std::string(to_string(mine)) +
                             ": load it with the host_moments it was saved with");
      }
      return;
    }
  }

  static std::string tag(std::size_t p, const char* what) { return "p" + std::to_string(p) + "/" + what; }
  static std::size_t masses_bytes(std::size_t m) { return 2 * (16 + 8 * m); }
  static std::size_t voter_bytes(std::size_t m) { return 8 + 16 * m; }

  static void write_floats(checkpoint_writer& out, const std::vector<float>& v, std::size_t n) {
    if (v.size() == n) {
      out.write(v.data(), n * 4);
    } else { // a slot never filled
      const std::vector<float> zeros(n, 0.0f);
      out.write(zeros.data(), n * 4);
    }
  }

  [[noreturn]] static void
  corrupt(const checkpoint_reader& in, const std::string& section, const std::string& why) {
    checkpoint::fail(checkpoint_errc::corrupted, in.name(), "section '" + section + "' " + why);
  }

  static void need(const checkpoint_reader& in, const std::string& t, std::size_t bytes) {
    const checkpoint_section* s = in.find(t);
    if (s == nullptr) {
      checkpoint::fail(checkpoint_errc::missing_section, in.name(), "no section '" + t + "'");
    }
    if (s->bytes != bytes) {
      checkpoint::fail(checkpoint_errc::wrong_size, in.name(),
                       "section '" + t + "' holds " + std::to_string(s->bytes) +
                           " bytes, this engine needs " + std::to_string(bytes));
    }
  }

  /// An ascending channel set of at most the parameter's device capacity.
  static std::vector<std::int32_t>
  read_set(const checkpoint_reader& in, const std::string& t, const param_info& pi) {
    const checkpoint_section* s = in.find(t);
    if (s == nullptr) {
      checkpoint::fail(checkpoint_errc::missing_section, in.name(), "no section '" + t + "'");
    }
    if (s->bytes % 4 != 0 || s->bytes / 4 > static_cast<std::uint64_t>(pi.device_capacity)) {
      checkpoint::fail(checkpoint_errc::wrong_size, in.name(),
                       "section '" + t + "' holds " + std::to_string(s->bytes) + " bytes, more than " +
                           std::to_string(pi.device_capacity) + " channels");
    }
    std::vector<std::int32_t> out(static_cast<std::size_t>(s->bytes / 4));
    in.read(t, out.data(), out.size() * 4);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] < 0 || out[i] >= pi.channels || (i > 0 && out[i] <= out[i - 1])) {
        corrupt(in, t, "is not an ascending set of channels in [0, " + std::to_string(pi.channels) + ")");
      }
    }
    return out;
  }
};

} // namespace detail
ZF_NAMESPACE_END
