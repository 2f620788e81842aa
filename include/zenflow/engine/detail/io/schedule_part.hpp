/// @file
/// The schedule's part of an engine checkpoint (engine_checkpoint.hpp): where the engine is in
/// its selection cycle and windows, the pending host job, the counters, Zen-auto's voter and
/// select_on_mass_drop's trigger. Sections engine/scalars, engine/voter, engine/trigger.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/io/checkpoint_sections.hpp>
#include <zenflow/engine/detail/step/schedule.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/schedule/mass_trigger.hpp>
#include <zenflow/schedule/zen_auto.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

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

/// select_on_mass_drop's state (mass_trigger.hpp) and the selection it scheduled.
struct ckpt_trigger {
  std::int64_t triggered_step = -1, pending_from_trigger = 0, mass_drop_selections = 0;
  std::int64_t ref_steps = 0, cur_steps = 0, last_steps = 0;
  double ref_crit = 0.0, ref_total = 0.0, cur_crit = 0.0, cur_total = 0.0, last_crit = 0.0, last_total = 0.0;
};
static_assert(std::is_trivially_copyable_v<ckpt_trigger> && sizeof(ckpt_trigger) == 12 * 8);

// 2: the voter holds the masses of steps up to s-3 between steps and the saved masses are those
//    of steps s-2 and s-1 (Zen-auto's lag of two); a layout-1 file's voter already holds s-2.
inline constexpr std::int64_t ckpt_layout = 2;

/// The scalars of a schedule between steps; `job_produced`: the pending job wrote new weights,
/// `n_w` and `skipped`: the host side's counts.
inline ckpt_scalars scalars_of(const schedule& sched,
                               bool job_produced,
                               std::int32_t n_w,
                               std::int64_t skipped,
                               std::size_t matrices,
                               const zenflow::stats& st) {
  ckpt_scalars s{};
  s.layout = ckpt_layout;
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
    s.job_produced = job_produced ? 1 : 0;
  }
  s.n_w = n_w;
  s.matrices = static_cast<std::int64_t>(matrices);
  s.steps = st.steps;
  s.skipped = skipped;
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

/// engine/scalars, checked against this engine: `matrices` in its voter, `overlap` its jobs.
template <class In>
ckpt_scalars read_scalars(const In& in, std::int64_t matrices, bool overlap) {
  ckpt_scalars s{};
  ckpt_need(in, "engine/scalars", sizeof s);
  in.read("engine/scalars", &s, sizeof s);
  if (s.layout != ckpt_layout) {
    checkpoint::fail(checkpoint_errc::wrong_version, in.name(),
                     "engine state layout " + std::to_string(s.layout) + ", this build reads " +
                         std::to_string(ckpt_layout));
  }
  const bool ok = s.step >= 0 && s.sel_step >= -1 && s.sel_step < s.step && s.window_len >= 0 &&
                  s.windows >= 0 && (s.cur_acc == 0 || (s.cur_acc == 1 && overlap)) &&
                  (s.pending == 0 || overlap) && s.n_w >= 0 && s.n_w <= INT32_MAX && s.matrices == matrices;
  if (!ok) {
    ckpt_corrupt(in, "engine/scalars",
                 "holds a state this engine cannot be in (step " + std::to_string(s.step) +
                     ", selection step " + std::to_string(s.sel_step) + ", window length " +
                     std::to_string(s.window_len) + ", n_w " + std::to_string(s.n_w) + ", accumulator " +
                     std::to_string(s.cur_acc) + ", pending " + std::to_string(s.pending) + ", matrices " +
                     std::to_string(s.matrices) + ")");
  }
  return s;
}

inline ckpt_trigger trigger_of(const mass_trigger& t, const schedule& sched, const zenflow::stats& st) {
  ckpt_trigger tr;
  tr.triggered_step = sched.triggered_step;
  tr.pending_from_trigger = sched.pending_from_trigger ? 1 : 0;
  tr.mass_drop_selections = st.mass_drop_selections;
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

/// engine/trigger, checked against the scalars `s` it was saved with.
template <class In>
ckpt_trigger read_trigger(const In& in, const ckpt_scalars& s) {
  ckpt_trigger tr{};
  ckpt_need(in, "engine/trigger", sizeof tr);
  in.read("engine/trigger", &tr, sizeof tr);
  const auto blk = [](std::int64_t n, std::int64_t hi) { return n >= 0 && n <= hi; };
  constexpr std::int64_t B = mass_trigger::block_steps;
  if (!((tr.triggered_step == -1 || tr.triggered_step == s.step) && blk(tr.ref_steps, B) &&
        blk(tr.cur_steps, B - 1) && (tr.last_steps == 0 || tr.last_steps == B) &&
        (tr.pending_from_trigger == 0 || s.selection_pending != 0) && tr.mass_drop_selections >= 0 &&
        tr.mass_drop_selections <= s.selections)) {
    ckpt_corrupt(in, "engine/trigger",
                 "holds a state the trigger cannot be in (triggered step " +
                     std::to_string(tr.triggered_step) + ", block steps " + std::to_string(tr.ref_steps) +
                     "/" + std::to_string(tr.cur_steps) + "/" + std::to_string(tr.last_steps) + ")");
  }
  return tr;
}

/// engine/voter: crit_steps, crit_sum[M], rest_sum[M] (doubles).
inline std::size_t voter_bytes(std::size_t m) {
  return 8 + 16 * m;
}
inline void save_voter(checkpoint_writer& out, const zen_auto_voter& voter) {
  const std::size_t M = voter.matrices();
  out.begin_section("engine/voter", voter_bytes(M));
  const std::int64_t crit_steps = voter.crit_steps();
  out.write(&crit_steps, 8);
  out.write(voter.crit_sums().data(), M * 8);
  out.write(voter.rest_sums().data(), M * 8);
  out.end_section();
}
template <class In>
void restore_voter(const In& in, zen_auto_voter& voter) {
  const std::size_t M = voter.matrices();
  std::vector<std::byte> bytes(voter_bytes(M));
  in.read("engine/voter", bytes.data(), bytes.size());
  std::int64_t crit_steps = 0;
  std::memcpy(&crit_steps, bytes.data(), 8);
  std::vector<double> crit(M), rest(M);
  std::memcpy(crit.data(), bytes.data() + 8, M * 8);
  std::memcpy(rest.data(), bytes.data() + 8 + M * 8, M * 8);
  voter.restore(crit.data(), rest.data(), crit_steps);
}

/// The schedule, the trigger and the counters as saved (`a`: the current accumulator). The pending
/// job is the jobs' to resubmit (engine_checkpoint.hpp).
inline void restore_schedule(schedule& sched,
                             mass_trigger& trigger,
                             zenflow::stats& st,
                             const ckpt_scalars& s,
                             const ckpt_trigger& tr,
                             std::size_t a) {
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
  st.mass_drop_selections = tr.mass_drop_selections;
  trigger.restore({tr.ref_crit, tr.ref_total, tr.ref_steps}, {tr.cur_crit, tr.cur_total, tr.cur_steps},
                  {tr.last_crit, tr.last_total, tr.last_steps});
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
}

} // namespace detail
ZF_NAMESPACE_END
