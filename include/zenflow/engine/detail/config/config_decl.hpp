/// @file
/// The declarations of <zenflow/engine/config.hpp> (zenflow::config, its enums and
/// config_sources): read that header's comment. Includes no definition: config.hpp adds them
/// (detail/config/config_impl.hpp and the files after it), and every detail header of the
/// configuration includes this one, never config.hpp, so that the include graph has no circle.
#pragma once

#if !defined(ZENFLOW_WITH_JSON)
#  if __has_include(<nlohmann/json.hpp>)
#    define ZENFLOW_WITH_JSON 1
#  else
#    define ZENFLOW_WITH_JSON 0
#  endif
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if ZENFLOW_WITH_JSON
#  include <nlohmann/json.hpp>
#endif

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN

/// When the important channels are re-selected. JSON: "step" | "epoch" | "auto".
enum class select_strategy : std::uint8_t {
  step,     ///< every `select_interval` steps
  epoch,    ///< every `select_interval` epochs of `steps_per_epoch` steps ("auto" interval = 1 epoch)
  automatic ///< once per epoch; without a known epoch length every `auto_select_fallback_steps`
};

/// How the host job's learning rate is scaled by its window's step count n_w.
/// JSON: "linear" (lr * n_w) | "sqrt" (lr * sqrt(n_w)) | "none" (DeepSpeed's behaviour) |
/// "capped" (lr * min(n_w, host_lr_cap)) | "snr" (per matrix and window, lr * clamp(n_w * rho, 1,
/// n_w) with rho = |sum of the window's gradients|_1 / sum of their |g|_1 over the host channels:
/// n_w where the gradients agree, ~sqrt(n_w) where they are noise). Chosen in docs/defaults.md.
enum class host_lr_scaling : std::uint8_t { linear, sqrt, none, capped, snr };

/// The factor the host job's learning rate is multiplied by for a window of `n_w` steps. For "snr",
/// `coherence` is the window's rho (|sum g|_1 / sum |g|_1, in [0, 1]); the other rules ignore it.
[[nodiscard]] double host_lr_factor(host_lr_scaling rule, std::int64_t n_w, double coherence = 1.0) noexcept;

/// The cap of host_lr_scaling::capped: the host step grows with the window like "linear" up to
/// this many steps, then stays (a long Zen-auto window of noisy channels must not move n_w x).
inline constexpr std::int64_t host_lr_cap = 4;

inline double host_lr_factor(host_lr_scaling rule, std::int64_t n_w, double coherence) noexcept {
  const auto n = static_cast<double>(n_w);
  switch (rule) {
  case host_lr_scaling::linear:
    return n;
  case host_lr_scaling::sqrt:
    return std::sqrt(n);
  case host_lr_scaling::capped:
    return std::min(n, static_cast<double>(host_lr_cap));
  case host_lr_scaling::snr:
    // NaN-safe clamp: a window without mass (coherence 0 or NaN) moves like "none".
    return std::isfinite(coherence) ? std::clamp(n * coherence, 1.0, std::max(n, 1.0)) : 1.0;
  case host_lr_scaling::none:
    break;
  }
  return 1.0;
}

/// What the engine runs: ZenFlow, or one of the two baselines every benchmark compares against.
/// JSON (`zenflow_ext.mode`): "zenflow" | "offload_sync" | "gpu_adamw".
enum class optimizer_mode : std::uint8_t {
  zenflow,      ///< ZenFlow's step (docs/design.md)
  offload_sync, ///< ZeRO-Offload-like: every step full gradients down, host AdamW, weights up
  gpu_adamw     ///< GPU-resident dense AdamW on everything every step
};

/// How a host window's new weights travel up. JSON: "whole_window" | "chunk_ring".
enum class upload_policy : std::uint8_t { whole_window, chunk_ring };

/// Where the unselected channels' gradients are summed over a window. JSON
/// (`zenflow_ext.accumulate`): "host" | "device". `device` keeps fp32 window sums of the host
/// set on the device (two: 8 bytes per unselected element) and sends one down per window instead
/// of every step's packed gradients: no host accumulation pass, one host sum buffer instead of
/// two, the same bits as `host` (docs/planning.md, docs/config.md). Single rank only.
enum class accumulation_site : std::uint8_t { host, device };

/// How the host keeps the Adam moments m and v of its channels; the arithmetic is fp32 either way.
/// JSON (`zenflow_ext.host_moments`): "fp32" | "bf16" | "int8". bf16 halves them (8 instead of 12
/// bytes of host state, 20 instead of 28 bytes moved per parameter per host update), stored with
/// stochastic rounding (docs/primitives.md, "Fewer bytes per parameter"); int8 keeps a byte each
/// plus an fp32 scale per 64 elements of a row (6.125 bytes of host state; block-wise absmax,
/// v as sqrt(v): core/detail/moment_q8.hpp). The device keeps fp32. Data parallel runs all three:
/// ZeRO-2 (owner_partition) and ZeRO-3 (sharded) give every rank a one-rank engine's bits on the
/// mean gradient (blocks lie within rows; a row crosses ranks widened to fp32, exactly). The
/// default is bf16 (2026-11-29: within 0.03% of fp32's loss in every measured run, docs/defaults.md).
enum class moment_precision : std::uint8_t { fp32, bf16, int8 };

/// Per-parameter hyper-parameters for the parameters whose registration name matches `match`
/// (`zenflow_ext.param_groups`; docs/config.md). `match` with a `*` or `?` is a glob over
/// the whole name, else a substring of it; the first group that matches a name wins. A field
/// left unset keeps the default (lr_scale 1, the optimizer's weight_decay).
struct param_group {
  std::string match = {};
  std::optional<float> lr_scale = std::nullopt;     ///< multiplies the step's lr for these parameters, >= 0
  std::optional<float> weight_decay = std::nullopt; ///< their weight decay, >= 0
};

struct config_sources;

/// How the DeepSpeed reader treats what it does not use.
struct config_read_options {
  /// false: an unknown top-level or `zero_optimization` key (a misspelt `zenflw` block, a
  /// `gradient_cliping`), a zenflow key in its deprecated place, or a zenflow block without CPU
  /// offload (DeepSpeed rejects it) is logged as a warning through the log hook and ignored (or
  /// read). true: each of them is an error (zenflow::invalid_argument naming the key).
  bool strict = false;
};

/// The engine's configuration. Defaults are the C++ defaults (docs/config.md); a DeepSpeed file
/// read by `from_deepspeed_json` takes DeepSpeed's defaults for DeepSpeed's keys it does not set
/// (`deepspeed_defaults()`). `validate()` checks every field.
struct config {
  optimizer_mode mode = optimizer_mode::zenflow;

  // --- zero_optimization.zenflow (DeepSpeed names; "auto" -> 0 for the intervals) ---
  double topk_ratio = 0.1;                             ///< [0, 1]; k >= 1 (topk())
  select_strategy select = select_strategy::automatic; ///< "select_strategy"
  std::int64_t select_interval = 0;                    ///< 0 = "auto"
  std::int64_t update_interval = 0;                    ///< 0 = "auto" (Zen-auto)
  std::int64_t full_warm_up_rounds = 0;                ///< >= 0
  /// false (DeepSpeed's default too, since 2026-11-29): each window's host AdamW runs at its close
  /// and the step waits for it. true: it runs during the next window (stall-free, one window
  /// stale), which costs accuracy where a step moves the weights far (docs/accuracy.md).
  bool overlap_step = false;
  double auto_ratio = 0.99;            ///< [0, 1]; 0: close at min_update_interval
  double pt_reserved_cores_perc = 0.5; ///< [0, 1]; 1: the host pool gets one thread
  std::int64_t steps_per_epoch = 0;    ///< 0 = unknown ("epoch" then rejected)

  // --- zenflow_ext (zenflow's own keys, a top-level block DeepSpeed ignores) ---
  host_lr_scaling host_lr_scale = host_lr_scaling::linear; ///< the host job's lr x f(n_w) (docs/defaults.md)
  std::int64_t max_update_interval = 2;                    ///< Zen-auto's longest window (docs/defaults.md)
  std::int64_t min_update_interval = 1;                    ///< Zen-auto's shortest window
  /// true: a host window's moments decay by beta^n_w and its channels' counts advance by n_w (a
  /// window stands for its n_w steps, docs/defaults.md); false: by beta and 1, once per window.
  bool host_moments_per_step = true;
  moment_precision host_moments = moment_precision::bf16; ///< storage of the host's m and v
  /// The host's fp32 window accumulators with overlap_step and host accumulation (JSON
  /// `zenflow_ext.host_accumulators`): 1 (default), one buffer that the closed window's job reads
  /// while the next window's first good step waits, parameter by parameter, for the rows it writes
  /// (4 bytes per unselected element); 2, the next window fills its own (8 bytes, the job may take
  /// the whole next window). The same bits either way (docs/planning.md).
  std::int32_t host_accumulators = 1;
  channel_norm importance = channel_norm::sq_l2; ///< "sq_l2" | "l1"
  /// (0, 1]: an extra selection when the device set's share of the gradient mass falls below this
  /// fraction of its share just after the last selection (docs/engine-semantics.md, 5); 0 = off.
  /// 0.5: never fired on charlm or the regression, re-selects where channels drift (docs/defaults.md).
  double select_on_mass_drop = 0.5;
  /// The fewest steps from a selection to one that select_on_mass_drop triggers (>= 1).
  std::int64_t min_select_interval = 16;

  // --- optimizer block and top-level gradient_clipping / fp16 / bf16 ---
  /// "optimizer.params" (lr is informational: step() passes each step's lr). Defaults: DeepSpeed's
  /// CPU Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0, decoupled = AdamW).
  adamw_hparams adam = deepspeed_adam_defaults();
  float gradient_clipping = 0.0f; ///< max global L2 norm of the unscaled gradients, 0 = off
  float loss_scale = 1.0f;        ///< static loss scale the gradients carry ("fp16.loss_scale")
  /// zenflow_ext.param_groups: per-parameter lr scale and weight decay by name.
  std::vector<param_group> param_groups;

  // --- transport (zenflow_ext too) ---
  upload_policy upload = upload_policy::whole_window;
  accumulation_site accumulate = accumulation_site::host; ///< "host" | "device"
  std::int64_t ring_slot_bytes = 4 << 20;                 ///< [4 KiB, 1 GiB], a multiple of 256
  /// [2, 1024] slots of the D2H ring and the device staging, or 0 (auto): the host ring holds two
  /// steps of D2H and the staging one, so that step() need not wait for PCIe (docs/config.md).
  std::int32_t ring_slots = 0;
  /// Data parallel (ZeRO-2, docs/data-parallel.md): the fp32 bucket that every rank's gradients
  /// are reduced through, a row at least ([256, 2^31), a multiple of 4; DDP's bucket_cap_mb is 25).
  std::int64_t reduce_bucket_bytes = 25 << 20;
  /// Data parallel: the mean gradient is written into your gradient buffers (as DDP does), where
  /// step() reads it; false: into engine buffers of the gradients' size (yours stay your rank's).
  bool reduce_in_place = true;
  /// ZeRO-3 (the sharded engine): each rank reserves device state for its share of each matrix's
  /// top-k (k x its rows / all rows) and this fraction of it more ([0, 100]); a selection that puts
  /// more of a matrix's top-k in one shard grows that shard's state (docs/data-parallel.md).
  double shard_state_headroom = 0.25;
  unsigned host_threads = 0; ///< 0 = derived from pt_reserved_cores_perc; <= 4096
  /// true: the engine's host threads (pools, consumer, window executor) run only on the cores
  /// pt_reserved_cores_perc leaves them, the last of the process's allowed cores (as DeepSpeed's
  /// ZenFlow binds its optimizer process); the training thread is left as it is
  /// (pin_to_training_cores). false: the threads run wherever the system puts them.
  bool pin_host_threads = false;

  /// Selection interval used when `select = automatic` and no epoch length is known: "once per
  /// epoch" (docs/design.md) needs an epoch; rather than never re-selecting (DeepSpeed's bug) we
  /// re-select every this many steps (at least one fixed window).
  static constexpr std::int64_t auto_select_fallback_steps = 100;
  /// Largest value of any step-valued key (keeps every product of two of them in int64).
  static constexpr std::int64_t max_steps_value = 2147483647;

  /// DeepSpeed's CPU Adam defaults, used for keys missing from "optimizer.params".
  static adamw_hparams deepspeed_adam_defaults() noexcept;

  /// The C++ defaults with DeepSpeed's defaults for the keys of DeepSpeed's zenflow block
  /// (topk_ratio 0.1, "auto" x 3, full_warm_up_rounds 0, overlap_step false, auto_ratio 0.99,
  /// pt_reserved_cores_perc 0.5, steps_per_epoch unknown): what a DeepSpeed file starts from.
  static config deepspeed_defaults() noexcept;

  /// Throws zenflow::invalid_argument naming the key (DeepSpeed's JSON path) on any invalid value.
  void validate() const;

  /// True when the selection trigger of `select_on_mass_drop` is on.
  [[nodiscard]] bool mass_trigger() const noexcept { return select_on_mass_drop > 0.0; }

  /// True when Zen-auto chooses the window lengths (`update_interval` "auto").
  [[nodiscard]] bool auto_update() const noexcept { return update_interval == 0; }

  /// Steps between two selection steps, resolved from the strategy (always >= 1).
  [[nodiscard]] std::int64_t select_interval_steps() const noexcept;

  /// True when step `t` (0-based, every step() call counts, skipped ones too) is a scheduled
  /// selection step: `t >= full_warm_up_rounds` and `(t - full_warm_up_rounds)` is a multiple of
  /// `select_interval_steps()` (the schedule layer's `zenflow::is_selection_step`).
  [[nodiscard]] bool is_selection_step(std::int64_t t) const noexcept;

  /// Channels selected in a matrix of `channels` channels: `zenflow::topk_count(topk_ratio,
  /// channels)` (schedule/step_schedule.hpp: DeepSpeed's `int(topk_ratio * channels)`, then at
  /// least 1 and at most `channels`; 0 for `channels <= 0`).
  [[nodiscard]] std::int64_t topk(std::int64_t channels) const noexcept;

  /// The first of `param_groups` whose `match` matches `name`, or null.
  [[nodiscard]] const param_group* find_param_group(std::string_view name) const noexcept;

  /// Host optimizer threads: `host_threads`, or when 0, DeepSpeed's split of the cores:
  /// the training thread reserves ceil(pt_reserved_cores_perc * hardware_threads) of them (the
  /// double product), the pool gets the rest, at least 1 (so 1.0 leaves the pool one thread).
  [[nodiscard]] unsigned resolved_host_threads(unsigned hardware_threads) const noexcept;

#if ZENFLOW_WITH_JSON
  /// Parses a whole DeepSpeed config (zero_optimization.zenflow, zenflow_ext, optimizer,
  /// gradient_clipping, fp16/bf16 loss scale where static), starting from
  /// `deepspeed_defaults()`. Unknown keys inside the zenflow block, zenflow_ext and
  /// optimizer.params, wrong types and values out of range are rejected by name (with the
  /// nearest known key). Unknown top-level and zero_optimization keys are logged as warnings
  /// (errors with `options.strict`). Returns a validated config; `sources`, when given, receives
  /// where each value came from (for describe()). Without a zenflow block the mode is the
  /// DeepSpeed baseline the file describes: offload_sync when
  /// zero_optimization.offload_optimizer.device is "cpu", else gpu_adamw (zenflow_ext.mode wins).
  static config from_deepspeed_json(const nlohmann::json& ds,
                                    const config_read_options& options = {},
                                    config_sources* sources = nullptr);
  /// Same, from JSON text; a syntax error is an invalid_argument too.
  static config from_deepspeed_json_string(std::string_view text,
                                           const config_read_options& options = {},
                                           config_sources* sources = nullptr);
  /// Same, from a file; an unreadable file is an invalid_argument naming the path.
  static config from_deepspeed_json_file(const std::string& path,
                                         const config_read_options& options = {},
                                         config_sources* sources = nullptr);

  /// The JSON that `from_deepspeed_json` reads back into this config, readable by DeepSpeed:
  /// DeepSpeed's keys in zero_optimization.zenflow, zenflow's own in the top-level zenflow_ext,
  /// optimizer, gradient_clipping, fp16 when loss_scale != 1.
  [[nodiscard]] nlohmann::json to_deepspeed_json() const;
#endif

  /// A human-readable summary of this configuration, several lines: the resolved mode (what
  /// runs: ZenFlow with overlapped or synchronous host windows, Zen-auto or fixed windows, the
  /// selection interval in steps; or a baseline) and every setting with where it came from: what
  /// `sources` recorded (the JSON path, or a caller's note such as a command-line flag),
  /// DeepSpeed's default for a key a DeepSpeed file left out, the C++ default, or "set by the
  /// caller" for a value that differs from the default with no recorded origin; then the
  /// reader's warnings.
  [[nodiscard]] std::string describe(const config_sources* sources = nullptr) const;
};

/// Where the values of a config read from JSON came from; filled by `from_deepspeed_json`,
/// read by `config::describe`. Keys are the settings' names as describe() prints them: the JSON
/// key for the zenflow keys (`topk_ratio`, `host_lr_scale`, ...), the JSON path for the others
/// (`optimizer.params.lr`, `gradient_clipping`, `fp16.loss_scale`).
struct config_sources {
  std::string origin;                         ///< "file ds.json", "JSON text", "JSON value"
  bool deepspeed_defaults = false;            ///< read as a DeepSpeed file: its defaults apply
  std::map<std::string, std::string> setting; ///< setting -> where it was set (a JSON path, a flag)
  std::string mode_reason;                    ///< why the mode is what it is
  std::vector<std::string> warnings;          ///< every warning the reader logged, in order
  /// Records that `name` was set by `where` (a caller that overrides a value, e.g. a flag).
  void set(const std::string& name, const std::string& where) { setting[name] = where; }
};

/// JSON spellings of the enums.
[[nodiscard]] std::string_view to_string(select_strategy v) noexcept;
[[nodiscard]] std::string_view to_string(host_lr_scaling v) noexcept;
[[nodiscard]] std::string_view to_string(optimizer_mode v) noexcept;
[[nodiscard]] std::string_view to_string(upload_policy v) noexcept;
[[nodiscard]] std::string_view to_string(accumulation_site v) noexcept;
[[nodiscard]] std::string_view to_string(moment_precision v) noexcept;

ZF_NAMESPACE_END
