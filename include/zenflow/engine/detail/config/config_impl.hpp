/// @file
/// Definitions of zenflow::config's members that need no JSON: defaults, validation, the derived
/// quantities and the enums' spellings (the JSON keys' names and the "did you mean" of an
/// error: detail/config/config_keys.hpp). Included by <zenflow/engine/config.hpp> after the
/// declarations (detail/config/config_decl.hpp); describe() and the JSON reader's definitions are
/// the headers that include this one, so that each compiles on its own and none includes back.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/detail/config/config_decl.hpp>
#include <zenflow/engine/detail/config/config_fail.hpp>
#include <zenflow/engine/detail/config/config_keys.hpp>
#include <zenflow/schedule/step_schedule.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

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

inline std::string_view to_string(accumulation_site v) noexcept {
  switch (v) {
  case accumulation_site::host:
    return "host";
  case accumulation_site::device:
    return "device";
  }
  return "?";
}

inline std::string_view to_string(moment_precision v) noexcept {
  switch (v) {
  case moment_precision::fp32:
    return "fp32";
  case moment_precision::bf16:
    return "bf16";
  case moment_precision::int8:
    return "int8";
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
  return zenflow::is_selection_step(t, full_warm_up_rounds, select_interval_steps());
}

inline std::int64_t config::topk(std::int64_t channels) const noexcept {
  return topk_count(topk_ratio, channels);
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

  check(host_moments == moment_precision::fp32 || host_moments == moment_precision::bf16 ||
            host_moments == moment_precision::int8,
        ext_key("host_moments"), "is not a valid moment_precision (\"fp32\", \"bf16\" or \"int8\")");

  // Transport.
  check(upload == upload_policy::whole_window || upload == upload_policy::chunk_ring, ext_key("upload"),
        "is not a valid upload_policy");
  check(accumulate == accumulation_site::host || accumulate == accumulation_site::device,
        ext_key("accumulate"), "is not a valid accumulation_site (\"host\" or \"device\")");
  check(host_accumulators == 1 || host_accumulators == 2, ext_key("host_accumulators"),
        "must be 1 or 2, got " + std::to_string(host_accumulators));
  check(ring_slot_bytes >= 4096 && ring_slot_bytes <= (std::int64_t{1} << 30) && ring_slot_bytes % 256 == 0,
        ext_key("ring_slot_bytes"),
        "must be a multiple of 256 in [4096, 2^30], got " + std::to_string(ring_slot_bytes));
  check(ring_slots == 0 || (ring_slots >= 2 && ring_slots <= 1024), ext_key("ring_slots"),
        "must be 0 (auto) or in [2, 1024], got " + std::to_string(ring_slots));
  check(reduce_bucket_bytes >= 256 && reduce_bucket_bytes < (std::int64_t{1} << 31) &&
            reduce_bucket_bytes % 4 == 0,
        ext_key("reduce_bucket_bytes"),
        "must be a multiple of 4 in [256, 2^31), got " + std::to_string(reduce_bucket_bytes));
  check(std::isfinite(shard_state_headroom) && shard_state_headroom >= 0.0 && shard_state_headroom <= 100.0,
        ext_key("shard_state_headroom"), "must be in [0, 100], got " + value_text(shard_state_headroom));
  check(host_threads <= 4096, ext_key("host_threads"),
        "must be in [0, 4096] (0 = derived), got " + std::to_string(host_threads));
  // ceil(1.0 x n) = n: whatever the cores, pinning would leave the host threads none.
  check(!pin_host_threads || pt_reserved_cores_perc < 1.0, zenflow_key("pt_reserved_cores_perc"),
        "must be < 1 with zenflow_ext.pin_host_threads (1 reserves every core for training and leaves "
        "the host threads none), got " +
            value_text(pt_reserved_cores_perc));
}

ZF_NAMESPACE_END
