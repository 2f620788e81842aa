/// @file
/// The re-selection trigger (`zenflow_ext.select_on_mass_drop`, docs/engine-semantics.md, 5): an
/// extra selection when the device set's share of the gradient mass falls below a fraction of its
/// share just after the last selection.
///
/// It reads the same per-step masses as Zen-auto (crit: the device channels' L1 mass, rest: the
/// host channels', per matrix, scaled by coef_t), with the same lag of two steps, so it never
/// waits for the current step's copies and its decisions do not depend on timing. The share of a
/// run of good steps is sum(crit) / sum(crit + rest) over every matrix, summed in double, matrix
/// by matrix and step by step in order: the same bits on every backend and rank (the masses are
/// those of the rank-mean gradient). The good steps after a selection are cut into blocks of
/// `block_steps`: the first block is the reference (the selection step itself is left out: its set
/// was chosen from its own gradient, so its share is biased high), every later block is compared
/// with it. Blocks, not single steps, so that one noisy step does not fire a selection.
///
/// A host-side value type, as the voter (`<zenflow/schedule/zen_auto.hpp>`): no device twin.
/// `add_step_masses` (`<zenflow/schedule/step_schedule.hpp>`) feeds it by the schedule's rules.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

class mass_trigger {
public:
  /// Good steps per block (the reference and each compared block).
  static constexpr std::int64_t block_steps = 4;

  /// Sums of one run of steps: the device set's mass and the total.
  struct block {
    double crit = 0.0;
    double total = 0.0;
    std::int64_t steps = 0;
  };

  /// `fraction` in [0, 1]: fire when a block's share < fraction x the reference's (0: never);
  /// `min_gap` >= 1: the fewest steps from the last performed selection to a triggered one.
  /// Throws zenflow::invalid_argument naming the argument otherwise.
  mass_trigger(double fraction, std::int64_t min_gap)
      : fraction_(checked(fraction >= 0.0 && fraction <= 1.0, "fraction", "must be in [0, 1]", fraction)),
        min_gap_(checked(min_gap >= 1, "min_gap", "must be >= 1", min_gap)) {}

  /// A performed selection: everything starts over.
  void on_selection() noexcept {
    ref_ = {};
    cur_ = {};
    last_ = {};
  }

  /// One good step's masses after the last selection, `m` matrices: `crit[i]`, `rest[i]` (times
  /// the step's coef_t). Throws zenflow::invalid_argument (nothing added) on a null array or m < 0.
  void add_step(const float* crit, const float* rest, std::int64_t m) {
    constexpr const char* fn = "zenflow::mass_trigger::add_step";
    detail::require(m >= 0, fn, "m", "must be >= 0");
    detail::require(crit != nullptr || m == 0, fn, "crit", "must not be null");
    detail::require(rest != nullptr || m == 0, fn, "rest", "must not be null");
    double c = 0.0;
    double total = 0.0;
    for (std::int64_t i = 0; i < m; ++i) {
      c += static_cast<double>(crit[i]);
      total += static_cast<double>(crit[i]) + static_cast<double>(rest[i]);
    }
    block& b = ref_.steps < block_steps ? ref_ : cur_;
    b.crit += c;
    b.total += total;
    ++b.steps;
    if (&b == &cur_ && cur_.steps == block_steps) {
      last_ = cur_;
      cur_ = {};
    }
  }

  /// True when the step after `t` should be a selection step: the last complete block's share is
  /// below the fraction of the reference's, and the selection (at `selection_step`) is at least
  /// `min_gap` steps old by then. A block or reference without mass never fires.
  [[nodiscard]] bool fire(std::int64_t t, std::int64_t selection_step) const noexcept {
    if (selection_step < 0 || t + 1 - selection_step < min_gap_ || ref_.steps < block_steps ||
        last_.steps < block_steps || !(ref_.total > 0.0) || !(last_.total > 0.0)) {
      return false;
    }
    return last_.crit / last_.total < fraction_ * (ref_.crit / ref_.total);
  }

  /// The reference, the block being filled and the last complete block (checkpoints).
  [[nodiscard]] const block& reference() const noexcept { return ref_; }
  [[nodiscard]] const block& current() const noexcept { return cur_; }
  [[nodiscard]] const block& last() const noexcept { return last_; }
  void restore(const block& ref, const block& cur, const block& last) noexcept {
    ref_ = ref;
    cur_ = cur;
    last_ = last;
  }

private:
  template <class V>
  static V checked(bool ok, const char* arg, const char* why, V v) {
    detail::require(ok, "zenflow::mass_trigger", arg, why);
    return v;
  }

  double fraction_;
  std::int64_t min_gap_;
  block ref_;
  block cur_;
  block last_;
};

ZF_NAMESPACE_END
