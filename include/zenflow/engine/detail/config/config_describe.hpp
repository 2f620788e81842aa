/// @file
/// zenflow::config::describe(): the resolved configuration as text (the mode and why, the host
/// windows, every setting and where it came from). Included by <zenflow/engine/config.hpp>.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/config/config_decl.hpp>
#include <zenflow/engine/detail/config/config_impl.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// The shortest decimal that reads back as `v` (0.1 prints as 0.1).
template <class T>
std::string shortest(T v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

inline std::string interval_text(std::int64_t v) {
  return v == 0 ? std::string("\"auto\"") : std::to_string(v);
}

/// A float as nlohmann-json writes it (the double's shortest decimal, ".0" on integral values), so
/// that groups_text() reads as the JSON writer's output.
inline std::string json_number_text(float v) {
  std::string t = shortest(static_cast<double>(v));
  if (t.find_first_of(".eEn") == std::string::npos) {
    t += ".0";
  }
  return t;
}

/// The parameter groups as one line of JSON ("none" when there is none), as nlohmann-json dumps
/// them (keys sorted); written by hand so that describe() needs no JSON library.
inline std::string groups_text(const config& c) {
  if (c.param_groups.empty()) {
    return "none";
  }
  std::string out = "[";
  for (const param_group& g : c.param_groups) {
    out += out.size() > 1 ? "," : "";
    out += "{";
    if (g.lr_scale) {
      out += "\"lr_scale\":" + json_number_text(*g.lr_scale) + ",";
    }
    out += "\"match\":\"";
    for (const char ch : g.match) { // JSON string escapes for the characters a name may hold
      if (ch == '"' || ch == '\\') {
        out += '\\';
      }
      out += ch;
    }
    out += "\"";
    if (g.weight_decay) {
      out += ",\"weight_decay\":" + json_number_text(*g.weight_decay);
    }
    out += "}";
  }
  return out + "]";
}

/// describe()'s rows: setting name, this config's value, the reference default's value.
inline std::vector<std::array<std::string, 3>> setting_rows(const config& c, const config& d) {
  const auto adam_type = [](const adamw_hparams& h) {
    return std::string(h.decoupled ? "AdamW" : "Adam (L2)");
  };
  const auto betas = [](const adamw_hparams& h) {
    return "[" + shortest(h.beta1) + ", " + shortest(h.beta2) + "]";
  };
  const auto norm = [](channel_norm n) { return std::string(n == channel_norm::l1 ? "l1" : "sq_l2"); };
  const auto spe = [](std::int64_t v) { return v == 0 ? std::string("unknown") : std::to_string(v); };
  const auto off_or = [](double v) { return v == 0.0 ? std::string("0 (off)") : shortest(v); };
  const auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  return {
      {"mode", std::string(to_string(c.mode)), std::string(to_string(d.mode))},
      {"topk_ratio", shortest(c.topk_ratio), shortest(d.topk_ratio)},
      {"select_strategy", std::string(to_string(c.select)), std::string(to_string(d.select))},
      {"select_interval", interval_text(c.select_interval), interval_text(d.select_interval)},
      {"update_interval", interval_text(c.update_interval), interval_text(d.update_interval)},
      {"full_warm_up_rounds", std::to_string(c.full_warm_up_rounds), std::to_string(d.full_warm_up_rounds)},
      {"overlap_step", b(c.overlap_step), b(d.overlap_step)},
      {"auto_ratio", shortest(c.auto_ratio), shortest(d.auto_ratio)},
      {"pt_reserved_cores_perc", shortest(c.pt_reserved_cores_perc), shortest(d.pt_reserved_cores_perc)},
      {"steps_per_epoch", spe(c.steps_per_epoch), spe(d.steps_per_epoch)},
      {"host_lr_scale", std::string(to_string(c.host_lr_scale)), std::string(to_string(d.host_lr_scale))},
      {"max_update_interval", std::to_string(c.max_update_interval), std::to_string(d.max_update_interval)},
      {"min_update_interval", std::to_string(c.min_update_interval), std::to_string(d.min_update_interval)},
      {"importance", norm(c.importance), norm(d.importance)},
      {"host_moments_per_step", b(c.host_moments_per_step), b(d.host_moments_per_step)},
      {"host_moments", std::string(to_string(c.host_moments)), std::string(to_string(d.host_moments))},
      {"select_on_mass_drop", off_or(c.select_on_mass_drop), off_or(d.select_on_mass_drop)},
      {"min_select_interval", std::to_string(c.min_select_interval), std::to_string(d.min_select_interval)},
      {"upload", std::string(to_string(c.upload)), std::string(to_string(d.upload))},
      {"accumulate", std::string(to_string(c.accumulate)), std::string(to_string(d.accumulate))},
      {"host_accumulators", std::to_string(c.host_accumulators), std::to_string(d.host_accumulators)},
      {"ring_slot_bytes", std::to_string(c.ring_slot_bytes), std::to_string(d.ring_slot_bytes)},
      {"ring_slots", std::to_string(c.ring_slots), std::to_string(d.ring_slots)},
      {"reduce_bucket_bytes", std::to_string(c.reduce_bucket_bytes), std::to_string(d.reduce_bucket_bytes)},
      {"reduce_in_place", b(c.reduce_in_place), b(d.reduce_in_place)},
      {"shard_state_headroom", shortest(c.shard_state_headroom), shortest(d.shard_state_headroom)},
      {"param_groups", groups_text(c), groups_text(d)},
      {"host_threads",
       c.host_threads == 0 ? "0 (from pt_reserved_cores_perc)" : std::to_string(c.host_threads),
       d.host_threads == 0 ? "0 (from pt_reserved_cores_perc)" : std::to_string(d.host_threads)},
      {"pin_host_threads", b(c.pin_host_threads), b(d.pin_host_threads)},
      {"optimizer.type", adam_type(c.adam), adam_type(d.adam)},
      {"optimizer.params.lr", shortest(c.adam.lr) + " (step() takes each step's lr)",
       shortest(d.adam.lr) + " (step() takes each step's lr)"},
      {"optimizer.params.betas", betas(c.adam), betas(d.adam)},
      {"optimizer.params.eps", shortest(c.adam.eps), shortest(d.adam.eps)},
      {"optimizer.params.weight_decay", shortest(c.adam.weight_decay), shortest(d.adam.weight_decay)},
      {"gradient_clipping", c.gradient_clipping == 0.0f ? "0 (off)" : shortest(c.gradient_clipping),
       d.gradient_clipping == 0.0f ? "0 (off)" : shortest(d.gradient_clipping)},
      {"fp16.loss_scale", shortest(c.loss_scale), shortest(d.loss_scale)},
  };
}

} // namespace detail

inline std::string config::describe(const config_sources* sources) const {
  const bool from_json = sources != nullptr && sources->deepspeed_defaults;
  // A DeepSpeed file starts from DeepSpeed's defaults; a C++ config from config{}.
  const config reference = from_json ? deepspeed_defaults() : config{};
  const auto origin_of = [&](const std::string& name) -> std::string {
    if (sources != nullptr) {
      if (const auto it = sources->setting.find(name); it != sources->setting.end()) {
        return it->second;
      }
    }
    return std::string();
  };
  std::ostringstream os;
  os << "zenflow configuration"
     << (sources != nullptr && !sources->origin.empty() ? ", read from " + sources->origin : "") << "\n";

  // The resolved mode: what runs.
  os << "mode: " << to_string(mode);
  if (sources != nullptr && !sources->mode_reason.empty()) {
    os << " (" << sources->mode_reason << ")";
  }
  os << "\n";
  switch (mode) {
  case optimizer_mode::gpu_adamw:
    os << "  dense AdamW on the device for every parameter, every step; nothing is offloaded (a baseline)\n";
    break;
  case optimizer_mode::offload_sync:
    os << "  ZeRO-Offload-like baseline: every step all gradients go to the host, host AdamW updates every "
          "channel, the weights come back before the step returns\n";
    break;
  case optimizer_mode::zenflow: {
    os << "  on the device, every step: k = int(topk_ratio x channels) channels per matrix (at least 1; "
          "topk_ratio "
       << detail::shortest(topk_ratio) << "); the other channels: host AdamW windows\n";
    if (full_warm_up_rounds > 0) {
      os << "  warm-up: the first " << full_warm_up_rounds
         << " steps run plain synchronous offloaded AdamW on every channel\n";
    }
    os << "  host windows: ";
    if (overlap_step) {
      os << "overlapped (overlap_step true): a window's host AdamW runs during the next window and its "
            "weights land at that window's close (exactly one window stale)";
    } else {
      os << "synchronous (overlap_step false): each window's host AdamW runs at its close and the step "
            "waits for it";
    }
    const std::string overlap_origin = origin_of("overlap_step");
    if (from_json && overlap_origin.empty()) {
      os << "; overlap_step is not in the file, so DeepSpeed's default (false) applies, as DeepSpeed would "
            "run it: set \"overlap_step\": true to overlap";
    }
    os << "\n  window length: ";
    if (auto_update()) {
      os << "Zen-auto (update_interval \"auto\"): " << min_update_interval << " to " << max_update_interval
         << " steps, closing once a share " << detail::shortest(auto_ratio) << " of the matrices vote"
         << (auto_ratio == 0.0 ? " (0: every window closes at min_update_interval)" : "");
    } else {
      os << update_interval << " steps (update_interval)";
    }
    os << "\n  selection: every " << select_interval_steps() << " steps from step " << full_warm_up_rounds
       << " (select_strategy \"" << to_string(select) << "\"";
    if (select == select_strategy::automatic && steps_per_epoch == 0) {
      os << ", no steps_per_epoch: every max(" << auto_select_fallback_steps << ", update_interval) steps";
    }
    os << ")";
    if (mass_trigger()) {
      os << ", and when the device set's share of the gradient mass falls below "
         << detail::shortest(select_on_mass_drop) << " x its share after the last selection, at least "
         << min_select_interval << " steps after it (select_on_mass_drop)";
    }
    os << "\n";
    os << "  host lr: x "
       << (host_lr_scale == host_lr_scaling::linear ? "n_w (the window's steps)"
           : host_lr_scale == host_lr_scaling::sqrt ? "sqrt(n_w)"
                                                    : "1 (DeepSpeed's behaviour)")
       << " (host_lr_scale " << to_string(host_lr_scale) << ")\n";
    break;
  }
  }

  // Every setting, with where it came from.
  os << "settings:\n";
  for (const auto& [name, value, def] : detail::setting_rows(*this, reference)) {
    std::string where = origin_of(name);
    if (where.empty()) {
      if (value != def) {
        where = "set by the caller";
      } else if (from_json && detail::listed(detail::deepspeed_zenflow_keys, name)) {
        where = "DeepSpeed's default";
      } else if (from_json && name.rfind("optimizer.", 0) == 0) {
        where = "DeepSpeed's default";
      } else {
        where = "default";
      }
    }
    const auto pad = [](const std::string& text, std::size_t width) {
      return text + std::string(text.size() < width ? width - text.size() : 1, ' ');
    };
    os << "  " << pad(name, 31) << pad(value, 16) << "[" << where << "]\n";
  }
  if (sources != nullptr && !sources->warnings.empty()) {
    os << "warnings:\n";
    for (const auto& w : sources->warnings) {
      os << "  " << w << "\n";
    }
  }
  return os.str();
}

ZF_NAMESPACE_END
