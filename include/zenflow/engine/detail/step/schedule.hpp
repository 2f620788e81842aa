/// @file
/// The engine's state between two calls, named: where it is in its life, in the selection cycle,
/// in the window of host-side updates and with the host job (docs/engine-semantics.md). The
/// engine moves it in step(); save()/load() write and restore it whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <zenflow/core/config.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Registration (add_matrix/add_vector) until initialize(), then training.
enum class lifecycle : std::uint8_t { registering, training };

/// The device set of the matrices.
enum class selection_phase : std::uint8_t {
  none_yet, ///< no selection yet (before the first selection step: warm-up)
  pending,  ///< a selection step came and is carried to the first step with finite gradients
  current,  ///< the set chosen at `schedule::selection_step` holds
};

/// What grad_ready() did for a parameter in the coming step.
enum class announcement : std::uint8_t {
  none,     ///< not announced
  hint,     ///< announced, nothing started (step() does it)
  streamed, ///< packed and pushed by grad_ready()
};

/// The open window: its first step and how many steps it has accumulated.
struct open_window {
  std::int64_t start = 0;
  std::int64_t length = 0;
};

/// A closed window whose host job was submitted and whose new weights are not applied yet.
struct submitted_job {
  std::int64_t queue_window = -1; ///< index in the window queue
  std::int64_t window = -1;       ///< engine window index
  std::int64_t first_step = 0;    ///< the window's steps (error messages, the destructor's report)
  std::int64_t last_step = 0;
};

/// What the host job wrote for the training thread: read only after the queue says it is done.
struct job_outcome {
  bool produced = false; ///< the window had steps to apply (n_w > 0)
  double seconds = 0.0;  ///< its host time
};

struct schedule {
  std::int64_t step = 0; ///< the next step t
  selection_phase selection = selection_phase::none_yet;
  std::int64_t selection_step = -1; ///< the step of the last selection (-1: none yet)
  /// A step that select_on_mass_drop made a selection step (decided at the end of the step before;
  /// -1: none), and why the pending selection is pending (reported when it is performed).
  std::int64_t triggered_step = -1;
  bool pending_from_trigger = false;
  std::optional<open_window> window;
  std::int64_t windows_closed = 0;
  std::size_t accumulator = 0; ///< the accumulator the open (or next) window fills
  std::optional<submitted_job> job;

  /// A step whose device set is known before it starts (grad_ready() may start packing).
  [[nodiscard]] bool selection_fixed() const noexcept { return selection == selection_phase::current; }

  /// The coming step keeps the current device sets: a selection holds, none is pending, and the
  /// step is neither a scheduled selection step (`scheduled`) nor one select_on_mass_drop fired.
  [[nodiscard]] bool sets_fixed_for_step(bool scheduled) const noexcept {
    return !scheduled && triggered_step != step && selection_fixed();
  }

  /// The coming step's host sets are known before it starts (so its packs may start as soon as
  /// its gradients exist): ZenFlow after the full warm-up, and the device sets stay fixed.
  [[nodiscard]] bool host_sets_known(const config& cfg) const noexcept {
    return cfg.mode == optimizer_mode::zenflow && step >= cfg.full_warm_up_rounds &&
           sets_fixed_for_step(cfg.is_selection_step(step));
  }

  /// At the start of the coming step: true if a selection becomes pending (scheduled, or fired by
  /// select_on_mass_drop at the step before), remembering which.
  bool begin_selection(bool scheduled) noexcept {
    if (!scheduled && triggered_step != step) {
      return false;
    }
    selection = selection_phase::pending;
    pending_from_trigger = !scheduled;
    triggered_step = -1;
    return true;
  }

  /// The pending selection was made at step `t`: why, for the step's report.
  selection_cause selected(std::int64_t t) noexcept {
    const selection_cause why = pending_from_trigger ? selection_cause::mass_drop : selection_cause::schedule;
    selection = selection_phase::current;
    selection_step = t;
    pending_from_trigger = false;
    return why;
  }
};

/// The engine destructor's report of what it drops (docs/engine.md): a warning for a submitted
/// window whose job produced weights that were never applied (`job_produced`), naming its steps
/// and pointing to flush(); info for the open window's `open_steps` steps of gradients. Never
/// throws.
inline void
report_dropped_updates(const schedule& sched, bool job_produced, std::int32_t open_steps) noexcept {
  try {
    if (sched.job && job_produced) {
      const auto& job = *sched.job;
      log(log_level::warning, "zenflow::engine destroyed with 1 host window of updates not applied (window " +
                                  std::to_string(job.window) + ", steps " + std::to_string(job.first_step) +
                                  ".." + std::to_string(job.last_step) +
                                  "): its new weights of the host-side channels are dropped; call flush() "
                                  "before destroying the engine to apply them");
    }
    if (sched.window && open_steps > 0) {
      log(log_level::info, "zenflow::engine destroyed with " + std::to_string(open_steps) +
                               " step(s) of gradients accumulated in the open window (from step " +
                               std::to_string(sched.window->start) +
                               "): dropped, as a window that never closes has no host update");
    }
  } catch (...) { // NOLINT(bugprone-empty-catch): a destructor reports nothing more
  }
}

} // namespace detail
ZF_NAMESPACE_END
