/// @file
/// The engine's configuration: a plain struct, and a reader for DeepSpeed JSON configs
/// (`zero_optimization.zenflow`, `optimizer`, `gradient_clipping`, `fp16`/`bf16`), so that an
/// existing DeepSpeed config file can be used as it is.
///
/// Every key, its default, its range and what is rejected: docs/config.md. Invalid values throw
/// `zenflow::invalid_argument` whose message names the key by its DeepSpeed JSON path, e.g.
/// `zero_optimization.zenflow.topk_ratio`; nothing is constructed on error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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
/// JSON: "linear" (lr * n_w, default) | "sqrt" (lr * sqrt(n_w)) | "none" (DeepSpeed's behaviour).
enum class host_lr_scaling : std::uint8_t { linear, sqrt, none };

/// What the engine runs: ZenFlow, or one of the two baselines every benchmark compares against.
/// JSON (zenflow extension key "mode"): "zenflow" | "offload_sync" | "gpu_adamw".
enum class optimizer_mode : std::uint8_t {
  zenflow,      ///< SPEC.md's step
  offload_sync, ///< ZeRO-Offload-like: every step full gradients down, host AdamW, weights up
  gpu_adamw     ///< GPU-resident dense AdamW on everything every step
};

/// How a host window's new weights travel up. JSON: "whole_window" | "chunk_ring".
enum class upload_policy : std::uint8_t { whole_window, chunk_ring };

/// Per-parameter hyper-parameters for the parameters whose registration name matches `match`
/// (zenflow extension "param_groups"; docs/config.md). `match` with a `*` or `?` is a glob over
/// the whole name, else a substring of it; the first group that matches a name wins. A field
/// left unset keeps the default (lr_scale 1, the optimizer's weight_decay).
struct param_group {
  std::string match = {};
  std::optional<float> lr_scale = std::nullopt;     ///< multiplies the step's lr for these parameters, >= 0
  std::optional<float> weight_decay = std::nullopt; ///< their weight decay, >= 0
};

/// The engine's configuration. Defaults are SPEC.md's; `validate()` checks every field.
struct config {
  optimizer_mode mode = optimizer_mode::zenflow;

  // --- zero_optimization.zenflow (DeepSpeed names; "auto" -> 0 for the intervals) ---
  double topk_ratio = 0.1;                                 ///< (0, 1]
  select_strategy select = select_strategy::automatic;     ///< "select_strategy"
  std::int64_t select_interval = 0;                        ///< 0 = "auto"
  std::int64_t update_interval = 0;                        ///< 0 = "auto" (Zen-auto)
  std::int64_t full_warm_up_rounds = 0;                    ///< >= 0
  bool overlap_step = true;                                ///< DeepSpeed's default is false; ours true
  double auto_ratio = 0.99;                                ///< (0, 1]
  double pt_reserved_cores_perc = 0.5;                     ///< [0, 1)
  host_lr_scaling host_lr_scale = host_lr_scaling::linear; ///< zenflow extension
  std::int64_t max_update_interval = 16;                   ///< zenflow extension: Zen-auto's longest window
  std::int64_t min_update_interval = 1;                    ///< zenflow extension: Zen-auto's shortest window
  std::int64_t steps_per_epoch = 0;                        ///< 0 = unknown ("epoch" then rejected)
  channel_norm importance = channel_norm::sq_l2;           ///< zenflow extension: "sq_l2" | "l1"

  // --- optimizer block and top-level gradient_clipping / fp16 / bf16 ---
  /// "optimizer.params" (lr is informational: step() passes each step's lr). Defaults: DeepSpeed's
  /// CPU Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0, decoupled = AdamW).
  adamw_hparams adam = deepspeed_adam_defaults();
  float gradient_clipping = 0.0f; ///< max global L2 norm of the unscaled gradients, 0 = off
  float loss_scale = 1.0f;        ///< static loss scale the gradients carry ("fp16.loss_scale")
  /// zenflow extension "param_groups": per-parameter lr scale and weight decay by name.
  std::vector<param_group> param_groups;

  // --- transport (zenflow extensions) ---
  upload_policy upload = upload_policy::whole_window;
  std::int64_t ring_slot_bytes = 4 << 20; ///< [4 KiB, 1 GiB], a multiple of 256
  std::int32_t ring_slots = 8;            ///< [2, 1024]
  unsigned host_threads = 0;              ///< 0 = derived from pt_reserved_cores_perc; <= 4096

  /// Selection interval used when `select = automatic` and no epoch length is known: SPEC's
  /// "once per epoch" needs an epoch; rather than never re-selecting (DeepSpeed's bug) we
  /// re-select every this many steps (at least one fixed window).
  static constexpr std::int64_t auto_select_fallback_steps = 100;
  /// Largest value of any step-valued key (keeps every product of two of them in int64).
  static constexpr std::int64_t max_steps_value = 2147483647;

  /// DeepSpeed's CPU Adam defaults, used for keys missing from "optimizer.params".
  static adamw_hparams deepspeed_adam_defaults() noexcept;

  /// Throws zenflow::invalid_argument naming the key (DeepSpeed's JSON path) on any invalid value.
  void validate() const;

  /// True when Zen-auto chooses the window lengths (`update_interval` "auto").
  [[nodiscard]] bool auto_update() const noexcept { return update_interval == 0; }

  /// Steps between two selection steps, resolved from the strategy (always >= 1).
  [[nodiscard]] std::int64_t select_interval_steps() const noexcept;

  /// True when step `t` (0-based, every step() call counts, skipped ones too) is a scheduled
  /// selection step: `t >= full_warm_up_rounds` and `(t - full_warm_up_rounds)` is a multiple of
  /// `select_interval_steps()`.
  [[nodiscard]] bool is_selection_step(std::int64_t t) const noexcept;

  /// Channels selected in a matrix of `channels` channels: max(1, floor(topk_ratio * channels)),
  /// at most `channels` (the product is nudged up by a few ulps so that e.g. 0.57 * 100 gives 57).
  [[nodiscard]] std::int64_t topk(std::int64_t channels) const noexcept;

  /// The first of `param_groups` whose `match` matches `name`, or null.
  [[nodiscard]] const param_group* find_param_group(std::string_view name) const noexcept;

  /// Host optimizer threads: `host_threads`, or when 0,
  /// max(1, floor(hardware_threads * (1 - pt_reserved_cores_perc))).
  [[nodiscard]] unsigned resolved_host_threads(unsigned hardware_threads) const noexcept;

  /// Parses a whole DeepSpeed config (zero_optimization.zenflow, optimizer, gradient_clipping,
  /// fp16/bf16 loss scale where static); unknown keys inside the zenflow block and in
  /// optimizer.params are rejected by name; wrong types rejected by name. Returns a validated
  /// config. Without a zenflow block the mode is the DeepSpeed baseline the file describes:
  /// offload_sync when zero_optimization.offload_optimizer.device is "cpu", else gpu_adamw.
  static config from_deepspeed_json(const nlohmann::json& ds);
  /// Same, from JSON text; a syntax error is an invalid_argument too.
  static config from_deepspeed_json_string(std::string_view text);
  /// Same, from a file; an unreadable file is an invalid_argument naming the path.
  static config from_deepspeed_json_file(const std::string& path);

  /// The DeepSpeed JSON that `from_deepspeed_json` reads back into this config (zenflow block
  /// with every extension key, optimizer, gradient_clipping, fp16 when loss_scale != 1).
  [[nodiscard]] nlohmann::json to_deepspeed_json() const;
};

/// JSON spellings of the enums.
[[nodiscard]] std::string_view to_string(select_strategy v) noexcept;
[[nodiscard]] std::string_view to_string(host_lr_scaling v) noexcept;
[[nodiscard]] std::string_view to_string(optimizer_mode v) noexcept;
[[nodiscard]] std::string_view to_string(upload_policy v) noexcept;

ZF_NAMESPACE_END

#include <zenflow/engine/detail/config_json.hpp>
