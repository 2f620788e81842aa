/// @file
/// The ZenFlow step schedule's rules (docs/engine-semantics.md, 5-7), as small host functions that
/// the engine and a hand-written loop both call:
/// - `topk_count`: k, the channels of a matrix updated on the device (the one definition);
/// - `is_selection_step`: the scheduled selection steps (after the warm-up, every interval);
/// - `add_step_masses`: which step's masses the Zen-auto voter and the mass trigger take;
/// - `window_closes`: whether the open window closes at the end of a step.
///
/// The loop around them, per step t after the warm-up (what `zenflow::engine` does):
/// 1. a selection is due when t is a scheduled selection step, or when the mass trigger fired at
///    the end of step t-1; it stays pending until a step whose gradients are finite (bad_t = 0),
///    which selects; a selection waits for every host job and applies it first, and restarts the
///    voter (`on_selection`) and the trigger;
/// 2. a window opens at the first step after the last one closed (`voter.on_window_start()`);
/// 3. at the end of step t: step s = t - zen_auto_lag's masses (when s is past the warm-up) go to
///    `add_step_masses`; the trigger fires when `mass_trigger::fire(t, selection_step)` (only
///    while a selection holds and the window is not already closing for a scheduled one), and
///    then step t+1 selects; the window closes when `window_closes(rule, length, forced,
///    voter.vote_share())` with `forced` = step t+1 selects (scheduled or fired).
/// Every step counts toward a window's length, skipped (bad) ones too, so that boundaries never wait
/// on data. Everything here is arithmetic on the host: the same decisions on every backend.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/schedule/mass_trigger.hpp>
#include <zenflow/schedule/zen_auto.hpp>

ZF_NAMESPACE_BEGIN

/// k, the channels of a matrix of `channels` channels that the device updates: DeepSpeed's
/// `int(topk_ratio * channels)` (the IEEE double product, truncated toward zero: 0.29 x 100 =
/// 28.999999999999996 gives 28), then at least 1 and at most `channels`; 0 for `channels` <= 0.
/// A ratio outside [0, 1] (or NaN) clamps the same way (configs reject it before: `topk_ratio`).
/// A sharded matrix takes the whole matrix's channels.
[[nodiscard]] constexpr std::int64_t topk_count(double topk_ratio, std::int64_t channels) noexcept {
  if (channels <= 0) {
    return 0;
  }
  const double product = topk_ratio * static_cast<double>(channels);
  if (!(product >= 1.0)) { // ratio 0, or tiny, negative or NaN
    return 1;
  }
  if (product >= static_cast<double>(channels)) {
    return channels;
  }
  return static_cast<std::int64_t>(product);
}

/// True when step `t` (0-based; every step counts, skipped ones too) is a scheduled selection
/// step: `t >= warm_up` and `(t - warm_up)` a multiple of `interval` (an interval < 1 counts as 1:
/// every step).
[[nodiscard]] constexpr bool
is_selection_step(std::int64_t t, std::int64_t warm_up, std::int64_t interval) noexcept {
  const std::int64_t every = interval < 1 ? 1 : interval;
  return t >= warm_up && (t - warm_up) % every == 0;
}

/// How a window's length is decided (the config's update_interval, min_update_interval,
/// max_update_interval and auto_ratio).
struct window_rule {
  std::int64_t update_interval = 0;     ///< a fixed length S >= 1, or 0: Zen-auto decides
  std::int64_t min_update_interval = 1; ///< Zen-auto's shortest window
  std::int64_t max_update_interval = 2; ///< Zen-auto's longest window
  double auto_ratio = 0.99;             ///< Zen-auto: the share of voting matrices that closes it
};

/// Whether the open window of `length` steps (this one included) closes at the end of this step:
/// always when `forced` (the next step selects); with a fixed length when it is reached; with
/// Zen-auto at `max_update_interval`, or from `min_update_interval` on once `vote_share` (the
/// voter's, read now) reaches `auto_ratio`.
[[nodiscard]] constexpr bool
window_closes(const window_rule& rule, std::int64_t length, bool forced, double vote_share) noexcept {
  if (forced) {
    return true;
  }
  if (rule.update_interval > 0) {
    return length >= rule.update_interval;
  }
  return length >= rule.max_update_interval ||
         (length >= rule.min_update_interval && vote_share >= rule.auto_ratio);
}

/// Step `s`'s masses (`m` matrices: `crit[i]`, `rest[i]`, times coef_s) to the voter and the
/// trigger (each nullable: not in use), by the schedule's rules: only a good step (`good`: bad_s =
/// 0) of the current selection (a selection was made, at `selection_step`, and s >= it); the
/// voter's window sum only from the open window's steps (s >= `window_start`); the trigger leaves
/// the selection step itself out (its set was chosen from its own gradient). For a step it takes,
/// throws zenflow::invalid_argument naming the argument (nothing added) on a null array or a voter
/// of another size.
inline void add_step_masses(zen_auto_voter* voter,
                            mass_trigger* trigger,
                            std::int64_t s,
                            bool good,
                            const float* crit,
                            const float* rest,
                            std::int64_t m,
                            std::int64_t selection_step,
                            std::int64_t window_start) {
  constexpr const char* fn = "zenflow::add_step_masses";
  if (!good || selection_step < 0 || s < selection_step) {
    return; // a step the rules leave out: its arrays are not read
  }
  detail::require(m >= 0, fn, "m", "must be >= 0");
  detail::require(voter == nullptr || static_cast<std::int64_t>(voter->matrices()) == m, fn, "m",
                  "must equal the voter's matrices()");
  detail::require(crit != nullptr || m == 0, fn, "crit", "must not be null");
  detail::require(rest != nullptr || m == 0, fn, "rest", "must not be null");
  if (voter != nullptr) {
    voter->add_step(crit, rest, s >= window_start);
  }
  if (trigger != nullptr && s > selection_step) {
    trigger->add_step(crit, rest, m);
  }
}

ZF_NAMESPACE_END
