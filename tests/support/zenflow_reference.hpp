/// @file
/// An independent float64 reference of ZenFlow's step (docs/design.md), for the engine's tests.
///
/// Written from the design (docs/design.md: "One step", "Zen-auto", "host_lr_scale", and every row
/// of "What zenflow does differently from DeepSpeed"), not from the engine's code: no zenflow
/// internals but the config struct (and its schedule helpers) and the dtype rounding. Every
/// quantity is a double (masters, moments, accumulator, coefficient, Zen-auto statistics); working
/// weights are the masters rounded double -> float -> dtype, written when the engine writes them.
/// Where the design leaves a choice open (docs/engine-semantics.md, which the engine follows too):
///  - t counts every step() call, skipped ones included. A bad step (a NaN/Inf anywhere: the norm
///    is a double, finite gradients never overflow it) changes no weight, moment, count,
///    accumulator or Zen-auto statistic, but counts toward warm-up, the selection schedule and the
///    window's length; the boundary actions of its step number (close, jobs, drain) still happen.
///  - coef_t = min(1, clip / (||G_t|| / loss_scale + 1e-6)) / loss_scale (global norm over all
///    parameters), on every path (device, host accumulator, warm-up, vectors, baselines).
///  - Parameter groups: lr x lr_scale on every path (the host window's before host_lr_scale's);
///    set_lr_scale() changes it from the next step (a window's host update takes the scale of the
///    step that closes it, as it takes that step's lr).
///  - Per-step inputs (step_inputs, the engine's step_options): a loss scale that is not finite and
///    > 0, or found_inf, makes a bad step; max_norm replaces the config's clipping (inf: none); a
///    parameter without a gradient (no_grad, its gradient zeros) is not updated where it lives on
///    the device (vectors, device channels: no count, no moment, no weight change) and its host
///    channels add zero; a window in none of whose steps it had a gradient does not update it on
///    the host (a synchronous step: that step).
///  - Selection steps: t >= W and (t - W) % config::select_interval_steps() == 0. At one, first
///    the previous window has closed (at t - 1), then every host job is drained and applied, then
///    the top-k of step t's raw gradient scores is taken (k = config::topk, ties to the lower
///    index, indices ascending); state moves, it is never reset. A bad selection step leaves the
///    selection pending until the next good step. The new window starts at the selection step, t
///    its first step, with the new set.
///  - A window closes at the end of step t when t + 1 is a selection step, or after S steps
///    (fixed), or by Zen-auto; its job averages the accumulator over its n_w non-skipped steps,
///    with lr of step t times n_w (linear) / sqrt(n_w) / 1; n_w = 0 means no job at all.
///  - overlap: at a close, job w-1's weights are written, then job w is computed and held; its
///    weights are written at the next close or drain (selection step, flush; flush() does not
///    close the open window).
///  - Zen-auto: per matrix, mean = (sum of crit_s over good steps since the last selection, up to
///    t-2) / (count x k), sum = (sum of rest_s over the window's good steps up to t-2) / (c - k),
///    masses are L1 of coef_s * G_s; a matrix votes when it has a mean sample and sum >= mean (k ==
///    c: always); close when len >= max_update_interval, or len >= min_update_interval and
///    double(votes) / double(matrices) >= auto_ratio (1 with no matrix).
///  - select_on_mass_drop f > 0: at the end of step t (set current, t+1 not scheduled, t+1 - the
///    last selection step >= min_select_interval), t+1 is a selection step when the good steps s
///    after the last selection with s <= t-2 make >= 2 blocks of 4 and the last complete block's
///    sum crit / sum (crit + rest) (every matrix) < f x the first block's (both sums > 0).
///  - host_moments "bf16" and "int8" (docs/primitives.md, "Fewer bytes per parameter"): m and v are
///    rounded where the host stores them, after each host update and when a row leaves the device
///    set; the device holds what it gets (tests/support/bf16_moments_reference.hpp,
///    int8_moments_reference.hpp say how).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>

#include "support/bf16_moments_reference.hpp"
#include "support/int8_moments_reference.hpp"
#include "support/reference_math.hpp"

namespace zf_test {

/// A parameter's own hyper-parameters (a parameter group): lr = the step's x `lr_scale` on every
/// path, weight decay `weight_decay` (unset: the config's).
struct param_hyper {
  double lr_scale = 1.0;
  std::optional<double> weight_decay;
};

/// What one step takes beyond its gradients and lr (the engine's step_options): this step's loss
/// scale and clipping threshold (unset: the config's), a scaler's found-inf, and the parameters
/// without a gradient.
struct step_inputs {
  std::optional<double> loss_scale;
  std::optional<double> max_norm;
  bool found_inf = false;
  std::vector<std::size_t> no_grad;
};

/// The float64 ZenFlow reference (and the two baselines, by `config::mode`).
class zenflow_reference {
public:
  struct counters {
    std::int64_t steps = 0;                   ///< step() calls
    std::int64_t skipped_steps = 0;           ///< steps with a NaN/Inf gradient
    std::int64_t selections = 0;              ///< selections performed
    std::int64_t mass_drop_selections = 0;    ///< of them, triggered by select_on_mass_drop
    std::int64_t drains = 0;                  ///< drains at scheduled selection steps
    std::int64_t windows_closed = 0;          ///< window closes (empty windows included)
    std::int64_t host_jobs = 0;               ///< non-empty host jobs (n_w > 0)
    std::vector<std::int64_t> window_lengths; ///< length in steps of every closed window
  };

  explicit zenflow_reference(const zenflow::config& cfg) : cfg_(cfg) { cfg_.validate(); }

  /// A matrix of `channels` channels of `channel_len` elements; `initial` is channel-major
  /// (channel j = elements [j * channel_len, (j + 1) * channel_len)). Returns its index.
  std::size_t add_matrix(std::int64_t channels,
                         std::int64_t channel_len,
                         zenflow::dtype dt,
                         const std::vector<float>& initial,
                         const param_hyper& hyper = {}) {
    if (channels < 1 || channel_len < 1) {
      throw std::invalid_argument("zenflow_reference::add_matrix: channels and channel_len must be >= 1");
    }
    return add(true, channels, channel_len, dt, initial, hyper);
  }

  /// A vector parameter of `n` elements (always updated densely every step).
  std::size_t add_vector(std::int64_t n,
                         zenflow::dtype dt,
                         const std::vector<float>& initial,
                         const param_hyper& hyper = {}) {
    if (n < 1) {
      throw std::invalid_argument("zenflow_reference::add_vector: n must be >= 1");
    }
    return add(false, 1, n, dt, initial, hyper);
  }

  /// Parameter p's lr scale from the next step on.
  void set_lr_scale(std::size_t p, double lr_scale) { params_.at(p).lr_scale = lr_scale; }

  /// One training step: `grads[p]` holds parameter p's gradient (working-precision values, the
  /// layout of add_matrix), `lr` the step's learning rate, `in` its other inputs.
  void step(const std::vector<std::vector<float>>& grads, double lr, const step_inputs& in = {}) {
    if (grads.size() != params_.size()) {
      throw std::invalid_argument("zenflow_reference::step: one gradient per parameter expected");
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (grads[i].size() != params_[i].w.size()) {
        throw std::invalid_argument("zenflow_reference::step: gradient " + std::to_string(i) +
                                    " has the wrong size");
      }
    }
    const std::int64_t t = stats_.steps++;
    last_selected_ = false;
    last_closed_ = false;
    last_skipped_ = false;

    bool bad = false;
    double sq = 0.0;
    for (const auto& g : grads) {
      for (const float x : g) {
        bad = bad || !std::isfinite(x);
        sq += static_cast<double>(x) * x;
      }
    }
    double ls = in.loss_scale.value_or(static_cast<double>(cfg_.loss_scale));
    if (!(ls > 0.0 && std::isfinite(ls)) || in.found_inf) {
      bad = true;
      ls = 1.0;
    }
    const double clip = in.max_norm.value_or(static_cast<double>(cfg_.gradient_clipping));
    double coef = 1.0 / ls;
    if (!bad && clip > 0.0 && std::isfinite(clip)) {
      const double norm = std::sqrt(sq) / ls;
      coef = std::min(1.0, clip / (norm + 1e-6)) / ls;
    }
    std::vector<char> absent(params_.size(), 0);
    for (const std::size_t i : in.no_grad) {
      absent.at(i) = 1;
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].had_grad = params_[i].had_grad || absent[i] == 0;
    }
    last_coef_ = bad ? 0.0 : coef;
    if (bad) {
      ++stats_.skipped_steps;
      last_skipped_ = true;
    }

    if (cfg_.mode != zenflow::optimizer_mode::zenflow || t < cfg_.full_warm_up_rounds) {
      if (!bad) {
        const bool host = cfg_.mode != zenflow::optimizer_mode::gpu_adamw; // warm-up runs on the host
        for (std::size_t i = 0; i < params_.size(); ++i) {
          if (absent[i] == 0) {
            dense_update(params_[i], grads[i], coef, lr * params_[i].lr_scale, host);
          }
        }
      }
      for (param& p : params_) { // a synchronous step is a window of its own
        p.had_grad = false;
      }
      return;
    }

    // --- ZenFlow phase ---
    if (cfg_.is_selection_step(t) || t == triggered_) {
      drain();
      ++stats_.drains;
      selection_pending_ = true;
      pending_triggered_ = !cfg_.is_selection_step(t);
    }
    if (selection_pending_ && !bad) {
      stats_.mass_drop_selections += pending_triggered_ ? 1 : 0;
      share_steps_.clear();
      sel_step_ = t;
      select(grads);
      selection_pending_ = false;
      last_selected_ = true;
    }
    if (window_len_ == 0) {
      window_start_ = t;
    }
    ++window_len_;
    held_masses now{t, {}, {}};
    if (!bad) {
      ++window_good_;
      for (std::size_t i = 0; i < params_.size(); ++i) {
        param& p = params_[i];
        const auto& g = grads[i];
        if (!p.matrix) {
          if (absent[i] == 0) {
            dense_update(p, g, coef, lr * p.lr_scale);
          }
          continue;
        }
        double crit = 0.0;
        double rest = 0.0;
        for (std::int64_t j = 0; j < p.channels; ++j) {
          double mass = 0.0;
          if (p.is_sel[static_cast<std::size_t>(j)] != 0) {
            if (absent[i] != 0) { // not stepped on the device (its gradient and mass are zero)
              continue;
            }
            const std::int32_t c = ++p.count[static_cast<std::size_t>(j)];
            for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
              const auto u = static_cast<std::size_t>(e);
              const double gs = coef * static_cast<double>(g[u]);
              mass += std::fabs(gs);
              reference_adam(p.master[u], p.m[u], p.v[u], gs, lr * p.lr_scale, c, p.adam);
              p.w[u] = round_to_dtype(p.master[u], p.dt);
            }
            crit += mass;
          } else {
            for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
              const auto u = static_cast<std::size_t>(e);
              const double gs = coef * static_cast<double>(g[u]);
              mass += std::fabs(gs);
              p.acc[u] += gs;
            }
            rest += mass;
          }
        }
        now.crit.push_back(crit);
        now.rest.push_back(rest);
        p.window_rest += rest;
      }
    }

    // Close decision at the end of step t: data of steps <= t - 2 only (a lag of two): step t-2's
    // masses join the sums if it is a good step since the last selection (crit) and of this
    // window (rest).
    for (const held_masses& h : held_) {
      if (h.step != t - 2) {
        continue;
      }
      std::size_t m = 0;
      if (sel_step_ >= 0 && h.step > sel_step_) { // select_on_mass_drop's per-step sums
        double c = 0.0, n = 0.0;
        for (std::size_t i = 0; i < h.crit.size(); ++i) {
          c += h.crit[i];
          n += h.crit[i] + h.rest[i];
        }
        share_steps_.push_back({c, n});
      }
      for (param& p : params_) {
        if (!p.matrix) {
          continue;
        }
        if (sel_step_ >= 0 && h.step >= sel_step_) {
          p.crit_sum += h.crit[m];
          ++p.crit_n;
        }
        if (h.step >= window_start_) {
          p.rest_sum += h.rest[m];
        }
        ++m;
      }
    }
    std::erase_if(held_, [&](const held_masses& h) { return h.step <= t - 2; });
    if (!bad) {
      held_.push_back(std::move(now));
    }
    bool close = cfg_.is_selection_step(t + 1);
    if (!close && !selection_pending_ && mass_dropped(t)) {
      triggered_ = t + 1;
      close = true;
    }
    if (!close) {
      if (cfg_.auto_update()) {
        close = zen_auto_closes();
      } else {
        close = window_len_ >= cfg_.update_interval;
      }
    }
    if (close) {
      close_window(lr);
    }
  }

  /// Waits for every host job and writes its weights (does not close the open window).
  void flush() { drain(); }

  [[nodiscard]] std::size_t num_params() const { return params_.size(); }
  [[nodiscard]] bool is_matrix(std::size_t p) const { return params_.at(p).matrix; }
  /// Working weights as the engine's buffers hold them (exact dtype values).
  [[nodiscard]] const std::vector<double>& weights(std::size_t p) const { return params_.at(p).w; }
  [[nodiscard]] const std::vector<double>& masters(std::size_t p) const { return params_.at(p).master; }
  [[nodiscard]] const std::vector<double>& exp_avg(std::size_t p) const { return params_.at(p).m; }
  [[nodiscard]] const std::vector<double>& exp_avg_sq(std::size_t p) const { return params_.at(p).v; }
  /// Adam update counts: one per channel (matrix) or a single one (vector).
  [[nodiscard]] const std::vector<std::int32_t>& counts(std::size_t p) const { return params_.at(p).count; }
  /// The current selection of a matrix, ascending (empty for vectors and before the first one).
  [[nodiscard]] const std::vector<std::int32_t>& selected(std::size_t p) const { return params_.at(p).sel; }
  /// The unselected channels' accumulator (sum of coef_t * G_t over the open window).
  [[nodiscard]] const std::vector<double>& accumulator(std::size_t p) const { return params_.at(p).acc; }

  [[nodiscard]] const counters& stats() const { return stats_; }
  [[nodiscard]] bool last_step_skipped() const { return last_skipped_; }
  [[nodiscard]] bool last_step_selected() const { return last_selected_; }
  [[nodiscard]] bool last_step_closed_window() const { return last_closed_; }
  [[nodiscard]] double last_coef() const { return last_coef_; }
  /// Steps in the open window so far (skipped ones included), and its non-skipped steps.
  [[nodiscard]] std::int64_t window_length() const { return window_len_; }
  [[nodiscard]] std::int64_t window_good_steps() const { return window_good_; }
  /// True while a submitted host job's weights are not yet written (overlap only).
  [[nodiscard]] bool job_pending() const { return pending_.any; }
  [[nodiscard]] const zenflow::config& cfg() const { return cfg_; }

private:
  struct param {
    bool matrix = false;
    std::int64_t channels = 1;
    std::int64_t len = 0;
    zenflow::dtype dt = zenflow::dtype::f32;
    double lr_scale = 1.0;       ///< param_hyper::lr_scale
    zenflow::adamw_hparams adam; ///< the config's, with the parameter's weight decay
    std::vector<double> w, master, m, v, acc;
    std::vector<std::int32_t> count;
    std::vector<char> is_sel;
    std::vector<std::int32_t> sel;
    double crit_sum = 0.0; ///< Zen-auto: crit over good steps since the last selection (to t-2)
    std::int64_t crit_n = 0;
    double rest_sum = 0.0;    ///< Zen-auto: rest over the window's good steps (to t-2)
    double window_rest = 0.0; ///< host_lr_scale "snr": rest over all of the window's good steps
    bool had_grad = false;    ///< a gradient in one of the open window's steps (step_inputs::no_grad)
  };

  struct job_result {
    bool any = false;
    std::vector<std::vector<double>> w;     ///< per param: new working weights
    std::vector<std::vector<char>> touched; ///< per param: channels this job wrote
  };

  std::size_t add(bool matrix,
                  std::int64_t channels,
                  std::int64_t len,
                  zenflow::dtype dt,
                  const std::vector<float>& initial,
                  const param_hyper& hyper) {
    if (stats_.steps != 0) {
      throw std::logic_error("zenflow_reference: parameters must be added before the first step");
    }
    const auto n = static_cast<std::size_t>(channels * len);
    if (initial.size() != n) {
      throw std::invalid_argument("zenflow_reference: initial weights have the wrong size");
    }
    param p;
    p.matrix = matrix;
    p.channels = channels;
    p.len = len;
    p.dt = dt;
    p.lr_scale = hyper.lr_scale;
    p.adam = cfg_.adam;
    if (hyper.weight_decay) {
      p.adam.weight_decay = static_cast<float>(*hyper.weight_decay);
    }
    p.w.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      p.w[i] = round_to_dtype(initial[i], dt);
    }
    p.master = p.w;
    p.m.assign(n, 0.0);
    p.v.assign(n, 0.0);
    p.acc.assign(n, 0.0);
    p.count.assign(static_cast<std::size_t>(channels), 0);
    p.is_sel.assign(static_cast<std::size_t>(channels), 0);
    params_.push_back(std::move(p));
    return params_.size() - 1;
  }

  void dense_update(param& p, const std::vector<float>& g, double coef, double lr, bool host = false) {
    for (std::int64_t j = 0; j < p.channels; ++j) {
      const std::int32_t c = ++p.count[static_cast<std::size_t>(j)];
      for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
        const auto u = static_cast<std::size_t>(e);
        reference_adam(p.master[u], p.m[u], p.v[u], coef * static_cast<double>(g[u]), lr, c, p.adam);
        if (host) {
          store_host_moments(p, u, c);
        }
        p.w[u] = round_to_dtype(p.master[u], p.dt);
      }
      if (host) {
        store_host_row(p, j, c, true);
      }
    }
  }

  /// Row j's moments as the host stores them with int8 moments (whole blocks: after the row's
  /// update of count `c`, or to nearest when it comes home from the device).
  void store_host_row(param& p, std::int64_t j, std::int32_t c, bool stochastic) const {
    if (cfg_.host_moments == zenflow::moment_precision::int8) {
      const auto o = static_cast<std::size_t>(j * p.len);
      host_row_int8(p.m.data() + o, p.v.data() + o, p.len, o, static_cast<std::uint32_t>(c), stochastic);
    }
  }

  /// Element u's moments as the host stores them after an update of count `c`.
  void store_host_moments(param& p, std::size_t u, std::int32_t c) const {
    if (cfg_.host_moments == zenflow::moment_precision::bf16) {
      p.m[u] = host_moment_bf16(p.m[u], u, static_cast<std::uint32_t>(c), 0);
      p.v[u] = host_moment_bf16(p.v[u], u, static_cast<std::uint32_t>(c), 1);
    }
  }

  void select(const std::vector<std::vector<float>>& grads) {
    ++stats_.selections;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      param& p = params_[i];
      if (!p.matrix) {
        continue;
      }
      p.sel = reference_topk_channels(grads[i], p.channels, p.len, cfg_.topk(p.channels), cfg_.importance);
      std::vector<char> was = p.is_sel;
      std::fill(p.is_sel.begin(), p.is_sel.end(), 0);
      for (const std::int32_t j : p.sel) {
        p.is_sel[static_cast<std::size_t>(j)] = 1;
      }
      for (std::int64_t j = 0; j < p.channels; ++j) { // rows going home narrow to the host's moments
        if (was[static_cast<std::size_t>(j)] != 0 && p.is_sel[static_cast<std::size_t>(j)] == 0) {
          store_host_row(p, j, 0, false);
        }
        if (was[static_cast<std::size_t>(j)] != 0 && p.is_sel[static_cast<std::size_t>(j)] == 0 &&
            cfg_.host_moments == zenflow::moment_precision::bf16) {
          for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
            p.m[static_cast<std::size_t>(e)] = moment_bf16_nearest(p.m[static_cast<std::size_t>(e)]);
            p.v[static_cast<std::size_t>(e)] = moment_bf16_nearest(p.v[static_cast<std::size_t>(e)]);
          }
        }
      }
      // State moves with the channel (master, m, v, count stay as they are); the accumulator
      // is empty here: the window started at this selection step and held only skipped steps.
      p.crit_sum = 0.0;
      p.crit_n = 0;
    }
  }

  /// select_on_mass_drop's decision at the end of step t, from every landed step since the selection.
  [[nodiscard]] bool mass_dropped(std::int64_t t) const {
    const std::size_t blocks = share_steps_.size() / 4;
    if (cfg_.select_on_mass_drop <= 0.0 || sel_step_ < 0 || t + 1 - sel_step_ < cfg_.min_select_interval ||
        blocks < 2) {
      return false;
    }
    double sum[2][2] = {};
    for (std::size_t i = 0; i < 4; ++i) {
      for (int k = 0; k < 2; ++k) {
        sum[0][k] += share_steps_[i][k];
        sum[1][k] += share_steps_[4 * (blocks - 1) + i][k];
      }
    }
    return sum[0][1] > 0.0 && sum[1][1] > 0.0 &&
           sum[1][0] / sum[1][1] < cfg_.select_on_mass_drop * (sum[0][0] / sum[0][1]);
  }

  [[nodiscard]] bool zen_auto_closes() const {
    if (window_len_ >= cfg_.max_update_interval) {
      return true;
    }
    if (window_len_ < cfg_.min_update_interval) {
      return false;
    }
    std::int64_t matrices = 0;
    std::int64_t votes = 0;
    for (const param& p : params_) {
      if (!p.matrix) {
        continue;
      }
      ++matrices;
      const std::int64_t k = cfg_.topk(p.channels);
      if (k == p.channels) {
        ++votes;
        continue;
      }
      if (p.crit_n == 0) {
        continue;
      }
      const double mean = p.crit_sum / (static_cast<double>(p.crit_n) * static_cast<double>(k));
      const double sum = p.rest_sum / static_cast<double>(p.channels - k);
      if (sum >= mean) {
        ++votes;
      }
    }
    if (matrices == 0) {
      return true;
    }
    return static_cast<double>(votes) / static_cast<double>(matrices) >= cfg_.auto_ratio;
  }

  void write(job_result& r) {
    if (!r.any) {
      return;
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      param& p = params_[i];
      if (r.touched[i].empty()) {
        continue;
      }
      for (std::int64_t j = 0; j < p.channels; ++j) {
        if (r.touched[i][static_cast<std::size_t>(j)] != 0) {
          for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
            p.w[static_cast<std::size_t>(e)] = r.w[i][static_cast<std::size_t>(e)];
          }
        }
      }
    }
    r = job_result{};
  }

  void drain() { write(pending_); }

  void close_window(double lr) {
    job_result job;
    if (window_good_ > 0) {
      const double n = static_cast<double>(window_good_);
      double scale = 1.0;
      switch (cfg_.host_lr_scale) {
      case zenflow::host_lr_scaling::linear:
        scale = n;
        break;
      case zenflow::host_lr_scaling::sqrt:
        scale = std::sqrt(n);
        break;
      case zenflow::host_lr_scaling::none:
        scale = 1.0;
        break;
      case zenflow::host_lr_scaling::capped:
        scale = std::min(n, 4.0);
        break;
      case zenflow::host_lr_scaling::snr:
        scale = -1.0; // per matrix, below
        break;
      }
      job.w.resize(params_.size());
      job.touched.resize(params_.size());
      for (std::size_t i = 0; i < params_.size(); ++i) {
        param& p = params_[i];
        if (!p.matrix || !p.had_grad) {
          continue;
        }
        double host_lr = lr * scale;
        if (scale < 0.0) { // "snr": n x |sum of the window's gradients|_1 / sum of their |g|_1, in [1, n]
          double acc_l1 = 0.0;
          for (const double x : p.acc) {
            acc_l1 += std::fabs(x);
          }
          const double rho = acc_l1 / p.window_rest;
          host_lr = lr * (std::isfinite(rho) ? std::min(std::max(n * rho, 1.0), n) : 1.0);
        }
        job.w[i].assign(p.w.size(), 0.0);
        job.touched[i].assign(static_cast<std::size_t>(p.channels), 0);
        for (std::int64_t j = 0; j < p.channels; ++j) {
          if (p.is_sel[static_cast<std::size_t>(j)] != 0) {
            continue;
          }
          job.any = true;
          job.touched[i][static_cast<std::size_t>(j)] = 1;
          const auto steps = static_cast<std::int32_t>(cfg_.host_moments_per_step ? window_good_ : 1);
          const std::int32_t c = p.count[static_cast<std::size_t>(j)] += steps;
          for (std::int64_t e = j * p.len; e < (j + 1) * p.len; ++e) {
            const auto u = static_cast<std::size_t>(e);
            reference_adam(p.master[u], p.m[u], p.v[u], p.acc[u] / n, host_lr * p.lr_scale, c, p.adam, steps);
            store_host_moments(p, u, c);
            job.w[i][u] = round_to_dtype(p.master[u], p.dt);
          }
          store_host_row(p, j, c, true);
        }
      }
      if (job.any) {
        ++stats_.host_jobs;
      }
    }
    for (param& p : params_) {
      std::fill(p.acc.begin(), p.acc.end(), 0.0);
      p.rest_sum = 0.0;
      p.window_rest = 0.0;
      p.had_grad = false;
    }
    if (cfg_.overlap_step) {
      write(pending_); // job w-1 first
      pending_ = std::move(job);
    } else {
      write(job);
    }
    ++stats_.windows_closed;
    stats_.window_lengths.push_back(window_len_);
    window_len_ = 0;
    window_good_ = 0;
    last_closed_ = true;
  }

  zenflow::config cfg_;
  std::vector<param> params_;
  counters stats_;
  job_result pending_;
  bool selection_pending_ = false;
  std::int64_t window_len_ = 0;
  std::int64_t window_start_ = 0; ///< the open window's first step
  std::int64_t sel_step_ = -1;    ///< the step of the last performed selection
  /// Zen-auto: a good step's masses per matrix (registration order), held until step + 2.
  struct held_masses {
    std::int64_t step = 0;
    std::vector<double> crit, rest;
  };
  std::vector<held_masses> held_;
  std::vector<std::array<double, 2>> share_steps_; ///< select_on_mass_drop: (crit, crit + rest) per good step
  std::int64_t triggered_ = -1;                    ///< the step select_on_mass_drop made a selection step
  bool pending_triggered_ = false;
  std::int64_t window_good_ = 0;
  bool last_selected_ = false;
  bool last_closed_ = false;
  bool last_skipped_ = false;
  double last_coef_ = 0.0;
};

} // namespace zf_test
