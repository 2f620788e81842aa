/// @file
/// Definitions of zenflow::config's members that need no JSON: defaults, validation, the derived
/// quantities and the enums' spellings. Included at the end of <zenflow/engine/config.hpp>; then
/// includes describe() (detail/config_describe.hpp) and, when ZENFLOW_WITH_JSON is 1, the JSON
/// reader's definitions (detail/config_json.hpp): a chain rather than several includes in
/// config.hpp, so that each header also compiles on its own.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/config_fail.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::string_view zenflow_block_path = "zero_optimization.zenflow";
/// zenflow's own keys live in this top-level block: DeepSpeed's pydantic models forbid unknown
/// keys inside zero_optimization (and its zenflow block), but its top-level config is a plain
/// dict read key by key, so an unknown top-level block is ignored there.
inline constexpr std::string_view extension_block = "zenflow_ext";

/// The keys of DeepSpeed's ZenFlowConfig (deepspeed/runtime/zenflow/zenflow_config.py).
inline constexpr std::string_view deepspeed_zenflow_keys[] = {
    "topk_ratio",   "select_strategy", "select_interval",        "update_interval", "full_warm_up_rounds",
    "overlap_step", "offload",         "pt_reserved_cores_perc", "auto_ratio",      "steps_per_epoch"};

/// zenflow's own keys (zenflow_ext; formerly inside the zenflow block, still read there).
inline constexpr std::string_view extension_keys[] = {"host_lr_scale",
                                                      "max_update_interval",
                                                      "min_update_interval",
                                                      "importance",
                                                      "mode",
                                                      "upload",
                                                      "ring_slot_bytes",
                                                      "ring_slots",
                                                      "host_threads",
                                                      "param_groups",
                                                      "host_moments_per_step",
                                                      "host_moments",
                                                      "select_on_mass_drop",
                                                      "min_select_interval"};

/// DeepSpeed's top-level keys (deepspeed/runtime/config.py and the configs it reads), for the
/// warning on an unknown one. Names only; a key missing here costs a warning, not an error.
inline constexpr std::string_view deepspeed_top_level_keys[] = {"train_batch_size",
                                                                "train_micro_batch_size_per_gpu",
                                                                "gradient_accumulation_steps",
                                                                "managed_gradient_accumulation",
                                                                "steps_per_print",
                                                                "dump_state",
                                                                "disable_allgather",
                                                                "communication_data_type",
                                                                "seq_parallel_communication_data_type",
                                                                "prescale_gradients",
                                                                "gradient_predivide_factor",
                                                                "gradient_allreduce_op",
                                                                "sparse_gradients",
                                                                "zero_optimization",
                                                                "activation_checkpointing",
                                                                "comms_logger",
                                                                "tensorboard",
                                                                "wandb",
                                                                "csv_monitor",
                                                                "comet",
                                                                "gradient_clipping",
                                                                "fp16",
                                                                "bf16",
                                                                "bfloat16",
                                                                "amp",
                                                                "torch_autocast",
                                                                "compression_training",
                                                                "graph_harvesting",
                                                                "optimizer",
                                                                "zero_allow_untested_optimizer",
                                                                "zero_force_ds_cpu_optimizer",
                                                                "scheduler",
                                                                "flops_profiler",
                                                                "wall_clock_breakdown",
                                                                "memory_breakdown",
                                                                "autotuning",
                                                                "eigenvalue",
                                                                "quantize_training",
                                                                "use_data_before_expert_parallelism",
                                                                "hybrid_engine",
                                                                "sparse_attention",
                                                                "pipeline",
                                                                "progressive_layer_drop",
                                                                "curriculum_learning",
                                                                "data_efficiency",
                                                                "checkpoint",
                                                                "data_types",
                                                                "aio",
                                                                "dataloader_drop_last",
                                                                "log_level",
                                                                "nebula",
                                                                "datastates_ckpt",
                                                                "weight_quantization",
                                                                "compile",
                                                                "timers",
                                                                "tensor_parallel",
                                                                "expert_parallel",
                                                                "elasticity",
                                                                "vocabulary_size",
                                                                "sequence_parallel_size"};

/// DeepSpeed's DeepSpeedZeroConfig fields and their aliases (deepspeed/runtime/zero/config.py).
inline constexpr std::string_view deepspeed_zero_keys[] = {"stage",
                                                           "contiguous_gradients",
                                                           "reduce_scatter",
                                                           "reduce_bucket_size",
                                                           "use_multi_rank_bucket_allreduce",
                                                           "allgather_partitions",
                                                           "allgather_bucket_size",
                                                           "overlap_comm",
                                                           "load_from_fp32_weights",
                                                           "elastic_checkpoint",
                                                           "offload_param",
                                                           "offload_optimizer",
                                                           "zenflow",
                                                           "sub_group_size",
                                                           "cpu_offload_param",
                                                           "cpu_offload_use_pin_memory",
                                                           "cpu_offload",
                                                           "prefetch_bucket_size",
                                                           "stage3_prefetch_bucket_size",
                                                           "param_persistence_threshold",
                                                           "stage3_param_persistence_threshold",
                                                           "model_persistence_threshold",
                                                           "stage3_model_persistence_threshold",
                                                           "max_live_parameters",
                                                           "stage3_max_live_parameters",
                                                           "max_reuse_distance",
                                                           "stage3_max_reuse_distance",
                                                           "gather_16bit_weights_on_model_save",
                                                           "stage3_gather_16bit_weights_on_model_save",
                                                           "module_granularity_threshold",
                                                           "stage3_module_granularity_threshold",
                                                           "use_all_reduce_for_fetch_params",
                                                           "stage3_use_all_reduce_for_fetch_params",
                                                           "allgather_sequential",
                                                           "stage3_allgather_sequential",
                                                           "stage3_gather_fp16_weights_on_model_save",
                                                           "ignore_unused_parameters",
                                                           "legacy_stage1",
                                                           "round_robin_gradients",
                                                           "zero_hpz_partition_size",
                                                           "zero_quantized_weights",
                                                           "zero_quantized_nontrainable_weights",
                                                           "zero_quantized_gradients",
                                                           "zeropp_loco_param",
                                                           "mics_shard_size",
                                                           "mics_hierarchical_params_gather",
                                                           "memory_efficient_linear",
                                                           "pipeline_loading_checkpoint",
                                                           "override_module_apply",
                                                           "log_trace_cache_warnings",
                                                           "enable_sanity_checks",
                                                           "save_muon_momentum_buffer_in_memory",
                                                           "leaf_module"};

inline constexpr std::string_view adam_param_keys[] = {
    "lr",      "betas",    "eps",   "weight_decay", "adam_w_mode", "torch_adam", "bias_correction",
    "amsgrad", "maximize", "fused", "foreach",      "capturable"};

/// Edit distance with adjacent transpositions (optimal string alignment): "tpok" is one edit
/// from "topk".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (std::size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

/// The known key nearest to `name`, or "" when none is near: the fewest edits, if within
/// max(2, |name| / 3); else a key that `name` begins (at least 4 characters: "topk" for
/// "topk_ratio"), the shortest. Ties: the first listed.
inline std::string_view nearest_key(std::string_view name,
                                    std::initializer_list<std::span<const std::string_view>> lists) {
  std::string_view best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  std::string_view prefixed;
  for (const auto& list : lists) {
    for (const std::string_view k : list) {
      const std::size_t d = edit_distance(name, k);
      if (d < best_d) {
        best_d = d;
        best = k;
      }
      if (name.size() >= 4 && k.substr(0, name.size()) == name &&
          (prefixed.empty() || k.size() < prefixed.size())) {
        prefixed = k;
      }
    }
  }
  return best_d <= std::max<std::size_t>(2, name.size() / 3) ? best : prefixed;
}

/// " (did you mean 'near'?)", or "" when `near` is empty.
inline std::string suggestion(std::string_view near) {
  return near.empty() ? std::string() : " (did you mean '" + std::string(near) + "'?)";
}

/// " (did you mean 'x'?)", or "" when nothing is near.
inline std::string did_you_mean(std::string_view name,
                                std::initializer_list<std::span<const std::string_view>> lists) {
  const std::string_view k = nearest_key(name, lists);
  return k.empty() ? std::string() : " (did you mean '" + std::string(k) + "'?)";
}

inline bool listed(std::span<const std::string_view> list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

inline std::string zenflow_key(std::string_view name) {
  std::string k(zenflow_block_path);
  k += '.';
  k += name;
  return k;
}

template <class T>
std::string value_text(T v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

inline std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return s;
}

/// True when `name` matches `pattern`: a glob over the whole name when the pattern holds `*`
/// (any run) or `?` (any one character), else a substring of the name.
inline bool param_name_matches(std::string_view pattern, std::string_view name) noexcept {
  if (pattern.find_first_of("*?") == std::string_view::npos) {
    return name.find(pattern) != std::string_view::npos;
  }
  // Iterative glob with one backtrack point (the last `*`): linear in practice, no recursion.
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

/// `base[i].field` (`base[i]` for an empty field); validate() names groups by their place in
/// zenflow_ext.
inline std::string
param_group_key(std::size_t i, std::string_view field, std::string_view base = "zenflow_ext.param_groups") {
  std::string k = std::string(base) + "[" + std::to_string(i) + "]";
  if (!field.empty()) {
    k += '.';
    k += field;
  }
  return k;
}

} // namespace detail

inline adamw_hparams config::deepspeed_adam_defaults() noexcept {
  // DeepSpeed's CPU Adam defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0, AdamW.
  adamw_hparams h{};
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.0f;
  h.decoupled = true;
  return h;
}

inline config config::deepspeed_defaults() noexcept {
  // DeepSpeed's ZenFlowConfig defaults, whatever the C++ defaults of these fields become.
  config c;
  c.topk_ratio = 0.1;
  c.select = select_strategy::automatic;
  c.select_interval = 0;
  c.update_interval = 0;
  c.full_warm_up_rounds = 0;
  c.overlap_step = false;
  c.auto_ratio = 0.99;
  c.pt_reserved_cores_perc = 0.5;
  c.steps_per_epoch = 0;
  c.adam = deepspeed_adam_defaults();
  return c;
}

inline std::string_view to_string(select_strategy v) noexcept {
  switch (v) {
  case select_strategy::step:
    return "step";
  case select_strategy::epoch:
    return "epoch";
  case select_strategy::automatic:
    return "auto";
  }
  return "?";
}

inline std::string_view to_string(host_lr_scaling v) noexcept {
  switch (v) {
  case host_lr_scaling::linear:
    return "linear";
  case host_lr_scaling::sqrt:
    return "sqrt";
  case host_lr_scaling::none:
    return "none";
  case host_lr_scaling::capped:
    return "capped";
  case host_lr_scaling::snr:
    return "snr";
  }
  return "?";
}

inline std::string_view to_string(optimizer_mode v) noexcept {
  switch (v) {
  case optimizer_mode::zenflow:
    return "zenflow";
  case optimizer_mode::offload_sync:
    return "offload_sync";
  case optimizer_mode::gpu_adamw:
    return "gpu_adamw";
  }
  return "?";
}

inline std::string_view to_string(upload_policy v) noexcept {
  switch (v) {
  case upload_policy::whole_window:
    return "whole_window";
  case upload_policy::chunk_ring:
    return "chunk_ring";
  }
  return "?";
}

inline std::string_view to_string(moment_precision v) noexcept {
  switch (v) {
  case moment_precision::fp32:
    return "fp32";
  case moment_precision::bf16:
    return "bf16";
  }
  return "?";
}

inline std::int64_t config::select_interval_steps() const noexcept {
  std::int64_t s = 1;
  switch (select) {
  case select_strategy::step:
    s = select_interval;
    break;
  case select_strategy::epoch:
    s = (select_interval == 0 ? 1 : select_interval) * steps_per_epoch;
    break;
  case select_strategy::automatic:
    s = steps_per_epoch > 0 ? steps_per_epoch : std::max(auto_select_fallback_steps, update_interval);
    break;
  }
  return std::max<std::int64_t>(1, s);
}

inline bool config::is_selection_step(std::int64_t t) const noexcept {
  return t >= full_warm_up_rounds && (t - full_warm_up_rounds) % select_interval_steps() == 0;
}

inline std::int64_t config::topk(std::int64_t channels) const noexcept {
  if (channels <= 0) {
    return 0;
  }
  // Python's int(topk_ratio * channels): one IEEE double product, truncated toward zero.
  const double product = topk_ratio * static_cast<double>(channels);
  const auto k = static_cast<std::int64_t>(product);
  return std::clamp<std::int64_t>(k, 1, channels);
}

inline const param_group* config::find_param_group(std::string_view name) const noexcept {
  for (const param_group& g : param_groups) {
    if (detail::param_name_matches(g.match, name)) {
      return &g;
    }
  }
  return nullptr;
}

inline unsigned config::resolved_host_threads(unsigned hardware_threads) const noexcept {
  if (host_threads != 0) {
    return host_threads;
  }
  // DeepSpeed reserves math.ceil(pt_reserved_cores_perc * cores) for the training thread.
  const double reserved = std::ceil(pt_reserved_cores_perc * static_cast<double>(hardware_threads));
  const double left = static_cast<double>(hardware_threads) -
                      std::clamp(reserved, 0.0, static_cast<double>(hardware_threads));
  return std::max(1u, static_cast<unsigned>(left));
}

inline void config::validate() const {
  using detail::config_fail;
  using detail::value_text;
  using detail::zenflow_key;
  const auto ext_key = [](const char* name) { return std::string(detail::extension_block) + "." + name; };
  const auto check = [](bool ok, std::string_view key, const std::string& why) {
    if (!ok) {
      config_fail(key, why);
    }
  };
  const auto in_steps = [&](std::int64_t v, std::int64_t lo, const std::string& key) {
    check(v >= lo && v <= max_steps_value, key,
          "must be in [" + std::to_string(lo) + ", " + std::to_string(max_steps_value) + "], got " +
              std::to_string(v));
  };

  check(mode == optimizer_mode::zenflow || mode == optimizer_mode::offload_sync ||
            mode == optimizer_mode::gpu_adamw,
        ext_key("mode"), "is not a valid optimizer_mode");
  check(std::isfinite(topk_ratio) && topk_ratio >= 0.0 && topk_ratio <= 1.0, zenflow_key("topk_ratio"),
        "must be in [0, 1], got " + value_text(topk_ratio));
  check(select == select_strategy::step || select == select_strategy::epoch ||
            select == select_strategy::automatic,
        zenflow_key("select_strategy"), "is not a valid select_strategy");
  in_steps(select_interval, 0, zenflow_key("select_interval"));
  in_steps(update_interval, 0, zenflow_key("update_interval"));
  in_steps(full_warm_up_rounds, 0, zenflow_key("full_warm_up_rounds"));
  in_steps(steps_per_epoch, 0, zenflow_key("steps_per_epoch"));
  in_steps(min_update_interval, 1, ext_key("min_update_interval"));
  in_steps(max_update_interval, 1, ext_key("max_update_interval"));
  check(max_update_interval >= min_update_interval, ext_key("max_update_interval"),
        "must be >= min_update_interval (" + std::to_string(min_update_interval) + "), got " +
            std::to_string(max_update_interval));
  check(std::isfinite(auto_ratio) && auto_ratio >= 0.0 && auto_ratio <= 1.0, zenflow_key("auto_ratio"),
        "must be in [0, 1], got " + value_text(auto_ratio));
  check(
      std::isfinite(pt_reserved_cores_perc) && pt_reserved_cores_perc >= 0.0 && pt_reserved_cores_perc <= 1.0,
      zenflow_key("pt_reserved_cores_perc"), "must be in [0, 1], got " + value_text(pt_reserved_cores_perc));
  check(host_lr_scale == host_lr_scaling::linear || host_lr_scale == host_lr_scaling::sqrt ||
            host_lr_scale == host_lr_scaling::none || host_lr_scale == host_lr_scaling::capped ||
            host_lr_scale == host_lr_scaling::snr,
        ext_key("host_lr_scale"), "is not a valid host_lr_scaling");
  check(importance == channel_norm::sq_l2 || importance == channel_norm::l1, ext_key("importance"),
        "must be sq_l2 or l1");
  check(std::isfinite(select_on_mass_drop) && select_on_mass_drop >= 0.0 && select_on_mass_drop <= 1.0,
        ext_key("select_on_mass_drop"),
        "must be in [0, 1] (0 = off), got " + value_text(select_on_mass_drop));
  in_steps(min_select_interval, 1, ext_key("min_select_interval"));

  // The selection schedule (docs/config.md, "Selection schedule").
  switch (select) {
  case select_strategy::step:
    check(select_interval >= 1, zenflow_key("select_interval"),
          "must be an integer >= 1 when select_strategy is \"step\", got \"auto\"");
    break;
  case select_strategy::epoch:
    check(steps_per_epoch >= 1, zenflow_key("select_strategy"),
          "is \"epoch\" but the epoch length is unknown: set " + zenflow_key("steps_per_epoch") +
              " (DeepSpeed would silently never re-select)");
    break;
  case select_strategy::automatic:
    check(select_interval == 0, zenflow_key("select_interval"),
          "must be \"auto\" when select_strategy is \"auto\" (once per epoch), got " +
              std::to_string(select_interval) +
              "; use select_strategy \"step\" or \"epoch\" for a fixed interval");
    break;
  }
  const std::int64_t si = select_interval_steps();
  // The key that set the selection interval, for the message.
  const std::string si_key = select == select_strategy::step ? zenflow_key("select_interval")
                             : select == select_strategy::epoch
                                 ? zenflow_key("select_interval") + "' x '" + zenflow_key("steps_per_epoch")
                                 : zenflow_key("steps_per_epoch");
  if (update_interval > 0) {
    check(si >= update_interval, si_key,
          "gives " + std::to_string(si) + " steps between selections, shorter than update_interval (" +
              std::to_string(update_interval) + ")");
  } else {
    check(si >= min_update_interval, si_key,
          "gives " + std::to_string(si) + " steps between selections, shorter than " +
              ext_key("min_update_interval") + " (" + std::to_string(min_update_interval) + ")");
  }

  // Optimizer.
  check(std::isfinite(adam.lr) && adam.lr >= 0.0f, "optimizer.params.lr",
        "must be finite and >= 0, got " + value_text(adam.lr));
  check(std::isfinite(adam.beta1) && adam.beta1 >= 0.0f && adam.beta1 < 1.0f, "optimizer.params.betas",
        "[0] must be in [0, 1), got " + value_text(adam.beta1));
  check(std::isfinite(adam.beta2) && adam.beta2 >= 0.0f && adam.beta2 < 1.0f, "optimizer.params.betas",
        "[1] must be in [0, 1), got " + value_text(adam.beta2));
  check(std::isfinite(adam.eps) && adam.eps > 0.0f, "optimizer.params.eps",
        "must be finite and > 0, got " + value_text(adam.eps));
  check(std::isfinite(adam.weight_decay) && adam.weight_decay >= 0.0f, "optimizer.params.weight_decay",
        "must be finite and >= 0, got " + value_text(adam.weight_decay));
  check(std::isfinite(gradient_clipping) && gradient_clipping >= 0.0f, "gradient_clipping",
        "must be finite and >= 0 (0 = off), got " + value_text(gradient_clipping));
  check(std::isfinite(loss_scale) && loss_scale > 0.0f, "fp16.loss_scale",
        "must be finite and > 0, got " + value_text(loss_scale));
  for (std::size_t i = 0; i < param_groups.size(); ++i) {
    const param_group& g = param_groups[i];
    check(!g.match.empty(), detail::param_group_key(i, "match"), "must not be empty");
    check(!g.lr_scale || (std::isfinite(*g.lr_scale) && *g.lr_scale >= 0.0f),
          detail::param_group_key(i, "lr_scale"),
          "must be finite and >= 0, got " + value_text(g.lr_scale.value_or(0)));
    check(!g.weight_decay || (std::isfinite(*g.weight_decay) && *g.weight_decay >= 0.0f),
          detail::param_group_key(i, "weight_decay"),
          "must be finite and >= 0, got " + value_text(g.weight_decay.value_or(0)));
  }

  check(host_moments == moment_precision::fp32 || host_moments == moment_precision::bf16,
        ext_key("host_moments"), "is not a valid moment_precision (\"fp32\" or \"bf16\")");

  // Transport.
  check(upload == upload_policy::whole_window || upload == upload_policy::chunk_ring, ext_key("upload"),
        "is not a valid upload_policy");
  check(ring_slot_bytes >= 4096 && ring_slot_bytes <= (std::int64_t{1} << 30) && ring_slot_bytes % 256 == 0,
        ext_key("ring_slot_bytes"),
        "must be a multiple of 256 in [4096, 2^30], got " + std::to_string(ring_slot_bytes));
  check(ring_slots == 0 || (ring_slots >= 2 && ring_slots <= 1024), ext_key("ring_slots"),
        "must be 0 (auto) or in [2, 1024], got " + std::to_string(ring_slots));
  check(host_threads <= 4096, ext_key("host_threads"),
        "must be in [0, 4096] (0 = derived), got " + std::to_string(host_threads));
}

ZF_NAMESPACE_END

// describe(): the resolved configuration as text.
#include <zenflow/engine/detail/config_describe.hpp>

#if ZENFLOW_WITH_JSON
#  include <zenflow/engine/detail/config_json.hpp>
#endif
