/// @file
/// Whether the open window closes at the end of step t (docs/engine-semantics.md, 5-7): the next
/// step is a scheduled selection, select_on_mass_drop fires, Zen-auto votes, or the fixed length
/// is reached (the schedule layer's rules, schedule/step_schedule.hpp). Zen-auto and the trigger
/// read the masses of step t - zen_auto_lag, landed by then on the host in the common case
/// (waiting for them is counted as stall).
#pragma once

#include <cstdint>
#include <optional>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/step/call_cost.hpp>
#include <zenflow/engine/detail/step/schedule.hpp>
#include <zenflow/schedule/mass_trigger.hpp>
#include <zenflow/schedule/step_schedule.hpp>
#include <zenflow/schedule/zen_auto.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The statistics of Zen-auto's voter and of the trigger, and the engine's schedule they move.
struct window_close_inputs {
  const config& cfg;
  schedule& sched;
  std::optional<zen_auto_voter>& voter;
  mass_trigger& trigger;
  std::uint64_t pushed_before_prev_step; ///< slots pushed up to the end of step t-2
};

/// Feeds step t - zen_auto_lag's masses to the voter and the trigger, then decides. A firing
/// trigger sets `sched.triggered_step = t + 1` (that step selects, so this window closes now).
template <class HostSide>
[[nodiscard]] bool window_closes_after(
    const window_close_inputs& in, HostSide& host, std::int64_t t, std::int64_t length, call_cost& cost) {
  const config& cfg = in.cfg;
  schedule& sched = in.sched;
  bool close = cfg.is_selection_step(t + 1);
  if (cfg.auto_update() || cfg.mass_trigger()) {
    // A lag of two: step t-1's copies are usually still in flight when step() is called for step
    // t (the training thread runs ahead of the device), and waiting for them cost ~75% stall.
    const std::int64_t s = t - zen_auto_lag;
    if (s >= cfg.full_warm_up_rounds) {
      if (host.consumed(in.pushed_before_prev_step)) {
        host.wait_consumed(in.pushed_before_prev_step); // landed already: no stall
      } else {
        timed_stall(cost, "Zen-auto: masses of step t-2 not landed",
                    [&] { host.wait_consumed(in.pushed_before_prev_step); });
      }
      const auto& mass = host.masses(s);
      add_step_masses(cfg.auto_update() ? &*in.voter : nullptr, cfg.mass_trigger() ? &in.trigger : nullptr, s,
                      mass.step == s && mass.valid, mass.crit.data(), mass.rest.data(),
                      static_cast<std::int64_t>(mass.crit.size()), sched.selection_step, sched.window->start);
    }
  }
  if (cfg.mass_trigger() && !close && sched.selection == selection_phase::current &&
      in.trigger.fire(t, sched.selection_step)) {
    sched.triggered_step = t + 1;
    close = true;
  }
  const window_rule rule{cfg.update_interval, cfg.min_update_interval, cfg.max_update_interval,
                         cfg.auto_ratio};
  return window_closes(rule, length, close, cfg.auto_update() ? in.voter->vote_share() : 0.0);
}

} // namespace detail
ZF_NAMESPACE_END
