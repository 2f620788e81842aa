/// @file
/// Zen-auto: the run-time choice of each host window's length (docs/design.md, "Zen-auto").
///
/// Per matrix and per step the device reports `crit` (L1 mass of the selected channels) and
/// `rest` (L1 mass of the others; `<zenflow/schedule/l1_mass.hpp>`), both times the step's coef_t.
/// The voter keeps the mean of `crit / k` over the steps since the last selection and the sum of
/// `rest / (channels - k)` over the steps of the current window; a matrix votes when the sum
/// reaches the mean. Each term is normalised once, when it is added (DeepSpeed normalises inside
/// its running-mean recursion, which makes the windows drift geometrically). The decision at the
/// end of step t only sees steps up to t - zen_auto_lag (t-2), so it does not wait for the current
/// or the previous step's data (whose copies are still in flight while the training thread runs
/// ahead of the device) and does not depend on timing.
///
/// A host-side value type: the masses are a few floats per step that come down with the step's
/// other data, and what it decides (close a window: run a host job) happens on the host, so there
/// is no device twin. Its sums are fp64, in matrix order and step order: the same bits wherever it
/// runs. `add_step_masses` (`<zenflow/schedule/step_schedule.hpp>`) feeds it by the schedule's rules.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// The decision at the end of step t sees the masses of steps up to t - zen_auto_lag.
inline constexpr std::int64_t zen_auto_lag = 2;

class zen_auto_voter {
public:
  /// `k[i]` and `channels[i]` of every matrix that takes part (vector parameters do not): its
  /// selected channels (`topk_count`) and all of them, 1 <= k[i] <= channels[i]. Throws
  /// zenflow::invalid_argument naming the argument otherwise.
  zen_auto_voter(std::vector<std::int64_t> k, std::vector<std::int64_t> channels)
      : k_(checked_k(k, channels)), channels_(std::move(channels)), crit_sum_(k_.size(), 0.0),
        rest_sum_(k_.size(), 0.0) {}

  [[nodiscard]] std::size_t matrices() const noexcept { return k_.size(); }

  /// A new selection: the mean of `crit / k` starts over, and so does the window.
  void on_selection() {
    std::fill(crit_sum_.begin(), crit_sum_.end(), 0.0);
    crit_steps_ = 0;
    on_window_start();
  }
  /// A new window: the sums of `rest / (channels - k)` start over.
  void on_window_start() { std::fill(rest_sum_.begin(), rest_sum_.end(), 0.0); }

  /// Adds one good (not skipped) step's masses, `crit[i]` and `rest[i]` per matrix (times the
  /// step's coef_t). `in_window`: the step belongs to the current window (its rest mass counts
  /// toward the vote). Throws zenflow::invalid_argument (nothing added) on a null array.
  void add_step(const float* crit, const float* rest, bool in_window) {
    constexpr const char* fn = "zenflow::zen_auto_voter::add_step";
    detail::require(crit != nullptr || k_.empty(), fn, "crit", "must not be null");
    detail::require(rest != nullptr || k_.empty(), fn, "rest", "must not be null");
    for (std::size_t i = 0; i < k_.size(); ++i) {
      crit_sum_[i] += static_cast<double>(crit[i]);
      if (in_window) {
        rest_sum_[i] += static_cast<double>(rest[i]);
      }
    }
    ++crit_steps_;
  }

  /// Share of the matrices that vote to close the window now (docs/engine-semantics.md, 7): a
  /// matrix votes when its mean has a sample and the window's sum reaches it; one with nothing
  /// unselected always votes. No matrix at all: 1.
  [[nodiscard]] double vote_share() const {
    if (k_.empty()) {
      return 1.0;
    }
    std::int64_t yes = 0;
    for (std::size_t i = 0; i < k_.size(); ++i) {
      if (channels_[i] - k_[i] <= 0) {
        ++yes;
      } else if (crit_steps_ > 0 &&
                 rest_sum_[i] / static_cast<double>(channels_[i] - k_[i]) >=
                     crit_sum_[i] / (static_cast<double>(crit_steps_) * static_cast<double>(k_[i]))) {
        ++yes;
      }
    }
    return static_cast<double>(yes) / static_cast<double>(k_.size());
  }

  // Checkpoints: the statistics as they are, and put back.
  [[nodiscard]] const std::vector<double>& crit_sums() const noexcept { return crit_sum_; }
  [[nodiscard]] const std::vector<double>& rest_sums() const noexcept { return rest_sum_; }
  [[nodiscard]] std::int64_t crit_steps() const noexcept { return crit_steps_; }
  /// `crit` and `rest` hold matrices() values each; `crit_steps` >= 0.
  void restore(const double* crit, const double* rest, std::int64_t crit_steps) {
    constexpr const char* fn = "zenflow::zen_auto_voter::restore";
    detail::require(crit != nullptr || k_.empty(), fn, "crit", "must not be null");
    detail::require(rest != nullptr || k_.empty(), fn, "rest", "must not be null");
    detail::require(crit_steps >= 0, fn, "crit_steps", "must be >= 0");
    std::copy_n(crit, k_.size(), crit_sum_.begin());
    std::copy_n(rest, k_.size(), rest_sum_.begin());
    crit_steps_ = crit_steps;
  }

private:
  static std::vector<std::int64_t> checked_k(std::vector<std::int64_t>& k,
                                             const std::vector<std::int64_t>& channels) {
    constexpr const char* fn = "zenflow::zen_auto_voter";
    detail::require(k.size() == channels.size(), fn, "channels", "must have as many entries as k");
    for (std::size_t i = 0; i < k.size(); ++i) {
      detail::require(k[i] >= 1, fn, "k", "entry " + std::to_string(i) + " must be >= 1");
      detail::require(k[i] <= channels[i], fn, "k", "entry " + std::to_string(i) + " must be <= channels");
    }
    return std::move(k);
  }

  std::vector<std::int64_t> k_;
  std::vector<std::int64_t> channels_;
  std::vector<double> crit_sum_;
  std::vector<double> rest_sum_;
  std::int64_t crit_steps_ = 0;
};

ZF_NAMESPACE_END
