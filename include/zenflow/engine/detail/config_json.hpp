/// @file
/// Definitions of zenflow::config's members: validation and the DeepSpeed JSON reader/writer.
/// Included at the end of <zenflow/engine/config.hpp>; not a public header on its own.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::string_view zenflow_block_path = "zero_optimization.zenflow";

/// Throws "zenflow::config: key '<key>' <why>".
[[noreturn]] inline void config_fail(std::string_view key, std::string_view why) {
  std::string msg = "zenflow::config: key '";
  msg += key;
  msg += "' ";
  msg += why;
  throw invalid_argument(msg);
}

inline std::string zenflow_key(std::string_view name) {
  std::string k(zenflow_block_path);
  k += '.';
  k += name;
  return k;
}

/// A short rendering of a JSON value for error messages.
inline std::string json_excerpt(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) {
    s = s.substr(0, 57) + "...";
  }
  return std::string(v.type_name()) + " " + s;
}

template <class T>
std::string value_text(T v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

inline double json_number(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number()) {
    config_fail(key, "must be a number, got " + json_excerpt(v));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) {
    config_fail(key, "must be finite, got " + json_excerpt(v));
  }
  return d;
}

/// A number that must also be representable as a finite float.
inline float json_float(const nlohmann::json& v, const std::string& key) {
  const double d = json_number(v, key);
  if (std::fabs(d) > static_cast<double>(FLT_MAX)) {
    config_fail(key, "is out of the float range, got " + json_excerpt(v));
  }
  return static_cast<float>(d);
}

inline std::int64_t json_integer(const nlohmann::json& v, const std::string& key) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      config_fail(key, "is out of range, got " + json_excerpt(v));
    }
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) {
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    // 4.0 is read as 4 (as pydantic does); 4.5 is not an integer.
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      return static_cast<std::int64_t>(d);
    }
  }
  config_fail(key, "must be an integer, got " + json_excerpt(v));
}

/// An integer in [lo, hi] (checked here because the field it goes to may be narrower).
inline std::int64_t
json_integer_in(const nlohmann::json& v, const std::string& key, std::int64_t lo, std::int64_t hi) {
  const std::int64_t i = json_integer(v, key);
  if (i < lo || i > hi) {
    config_fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                         std::to_string(i));
  }
  return i;
}

/// A step count >= 1 or the string "auto" (returned as 0).
inline std::int64_t json_interval_or_auto(const nlohmann::json& v, const std::string& key) {
  if (v.is_string()) {
    if (v.get<std::string>() != "auto") {
      config_fail(key, "must be an integer >= 1 or \"auto\", got " + json_excerpt(v));
    }
    return 0;
  }
  if (!v.is_number()) {
    config_fail(key, "must be an integer >= 1 or \"auto\", got " + json_excerpt(v));
  }
  return json_integer_in(v, key, 1, config::max_steps_value);
}

inline bool json_bool(const nlohmann::json& v, const std::string& key) {
  if (!v.is_boolean()) {
    config_fail(key, "must be true or false, got " + json_excerpt(v));
  }
  return v.get<bool>();
}

inline std::string json_string(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) {
    config_fail(key, "must be a string, got " + json_excerpt(v));
  }
  return v.get<std::string>();
}

/// Looks `s` up in {name, value} pairs; rejects anything else, listing the accepted names.
template <class E>
E json_enum(const nlohmann::json& v,
            const std::string& key,
            std::initializer_list<std::pair<std::string_view, E>> names) {
  std::string accepted;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    for (const auto& [name, value] : names) {
      if (s == name) {
        return value;
      }
    }
  }
  for (const auto& [name, value] : names) {
    (void)value;
    accepted += accepted.empty() ? "" : ", ";
    accepted += '"';
    accepted += name;
    accepted += '"';
  }
  config_fail(key, "must be one of " + accepted + ", got " + json_excerpt(v));
}

inline const nlohmann::json*
json_object_member(const nlohmann::json& obj, const char* name, const std::string& key) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) {
    return nullptr;
  }
  if (!it->is_object()) {
    config_fail(key, "must be an object, got " + json_excerpt(*it));
  }
  return &*it;
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

inline std::string param_group_key(std::size_t i, std::string_view field) {
  std::string k = zenflow_key("param_groups") + "[" + std::to_string(i) + "]";
  if (!field.empty()) {
    k += '.';
    k += field;
  }
  return k;
}

/// The zenflow extension "param_groups": an array of {"match", "lr_scale"?, "weight_decay"?}
/// objects; any other key is rejected by name. Values are range-checked by config::validate().
inline std::vector<param_group> read_param_groups(const nlohmann::json& v, const std::string& key) {
  if (!v.is_array()) {
    config_fail(key, "must be an array of {\"match\", \"lr_scale\", \"weight_decay\"} objects, got " +
                         json_excerpt(v));
  }
  std::vector<param_group> groups;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& g = v[i];
    if (!g.is_object()) {
      config_fail(param_group_key(i, ""), "must be an object, got " + json_excerpt(g));
    }
    param_group pg;
    bool has_match = false;
    for (const auto& [name, x] : g.items()) {
      const std::string k = param_group_key(i, name);
      if (name == "match") {
        pg.match = json_string(x, k);
        has_match = true;
      } else if (name == "lr_scale") {
        pg.lr_scale = json_float(x, k);
      } else if (name == "weight_decay") {
        pg.weight_decay = json_float(x, k);
      } else {
        config_fail(k, "is not a known key of a parameter group (known: match, lr_scale, weight_decay)");
      }
    }
    if (!has_match) {
      config_fail(param_group_key(i, "match"), "is required in a parameter group");
    }
    groups.push_back(std::move(pg));
  }
  return groups;
}

inline void read_zenflow_block(const nlohmann::json& zf, config& c) {
  for (const auto& [name, v] : zf.items()) {
    const std::string key = zenflow_key(name);
    if (name == "topk_ratio") {
      c.topk_ratio = json_number(v, key);
    } else if (name == "select_strategy") {
      c.select = json_enum<select_strategy>(v, key,
                                            {{"step", select_strategy::step},
                                             {"epoch", select_strategy::epoch},
                                             {"auto", select_strategy::automatic}});
    } else if (name == "select_interval") {
      c.select_interval = json_interval_or_auto(v, key);
    } else if (name == "update_interval") {
      c.update_interval = json_interval_or_auto(v, key);
    } else if (name == "full_warm_up_rounds") {
      c.full_warm_up_rounds = json_integer_in(v, key, 0, config::max_steps_value);
    } else if (name == "overlap_step") {
      c.overlap_step = json_bool(v, key);
    } else if (name == "offload") {
      // DeepSpeed: keep the selected channels' optimizer state on the host. Ours is k channels'
      // worth and lives on the device; the key is read (so existing files load) and has no effect.
      (void)json_bool(v, key);
    } else if (name == "auto_ratio") {
      c.auto_ratio = json_number(v, key);
    } else if (name == "pt_reserved_cores_perc") {
      c.pt_reserved_cores_perc = json_number(v, key);
    } else if (name == "steps_per_epoch") {
      c.steps_per_epoch = v.is_null() ? 0 : json_integer_in(v, key, 1, config::max_steps_value);
    } else if (name == "host_lr_scale") {
      c.host_lr_scale = json_enum<host_lr_scaling>(v, key,
                                                   {{"linear", host_lr_scaling::linear},
                                                    {"sqrt", host_lr_scaling::sqrt},
                                                    {"none", host_lr_scaling::none}});
    } else if (name == "max_update_interval") {
      c.max_update_interval = json_integer_in(v, key, 1, config::max_steps_value);
    } else if (name == "min_update_interval") {
      c.min_update_interval = json_integer_in(v, key, 1, config::max_steps_value);
    } else if (name == "importance") {
      c.importance =
          json_enum<channel_norm>(v, key, {{"sq_l2", channel_norm::sq_l2}, {"l1", channel_norm::l1}});
    } else if (name == "mode") {
      c.mode = json_enum<optimizer_mode>(v, key,
                                         {{"zenflow", optimizer_mode::zenflow},
                                          {"offload_sync", optimizer_mode::offload_sync},
                                          {"gpu_adamw", optimizer_mode::gpu_adamw}});
    } else if (name == "upload") {
      c.upload = json_enum<upload_policy>(
          v, key, {{"whole_window", upload_policy::whole_window}, {"chunk_ring", upload_policy::chunk_ring}});
    } else if (name == "ring_slot_bytes") {
      c.ring_slot_bytes = json_integer_in(v, key, 4096, std::int64_t{1} << 30);
    } else if (name == "ring_slots") {
      c.ring_slots = static_cast<std::int32_t>(json_integer_in(v, key, 2, 1024));
    } else if (name == "host_threads") {
      c.host_threads = static_cast<unsigned>(json_integer_in(v, key, 0, 4096));
    } else if (name == "param_groups") {
      c.param_groups = read_param_groups(v, key);
    } else {
      config_fail(key,
                  "is not a known key of the zenflow block (DeepSpeed keys: topk_ratio, select_strategy, "
                  "select_interval, update_interval, full_warm_up_rounds, overlap_step, offload, "
                  "auto_ratio, pt_reserved_cores_perc, steps_per_epoch; zenflow extensions: "
                  "host_lr_scale, max_update_interval, min_update_interval, importance, mode, upload, "
                  "ring_slot_bytes, ring_slots, host_threads, param_groups)");
    }
  }
}

inline void read_optimizer_block(const nlohmann::json& opt, config& c) {
  const auto type_it = opt.find("type");
  if (type_it == opt.end()) {
    config_fail("optimizer.type", "is required in an optimizer block");
  }
  const std::string type = ascii_lower(json_string(*type_it, "optimizer.type"));
  if (type != "adam" && type != "adamw") {
    config_fail("optimizer.type",
                "must be \"Adam\" or \"AdamW\" (zenflow runs Adam only), got " + json_excerpt(*type_it));
  }
  adamw_hparams h = config::deepspeed_adam_defaults();
  bool adam_w_mode = true; // DeepSpeed's default: "Adam" means AdamW unless adam_w_mode is false
  if (const nlohmann::json* params = json_object_member(opt, "params", "optimizer.params")) {
    for (const auto& [name, v] : params->items()) {
      const std::string key = "optimizer.params." + name;
      if (name == "lr") {
        h.lr = json_float(v, key);
      } else if (name == "betas") {
        if (!v.is_array() || v.size() != 2) {
          config_fail(key, "must be an array of two numbers, got " + json_excerpt(v));
        }
        h.beta1 = json_float(v[0], key);
        h.beta2 = json_float(v[1], key);
      } else if (name == "eps") {
        h.eps = json_float(v, key);
      } else if (name == "weight_decay") {
        h.weight_decay = json_float(v, key);
      } else if (name == "adam_w_mode") {
        adam_w_mode = json_bool(v, key);
      } else if (name == "torch_adam" || name == "fused" || name == "foreach" || name == "capturable") {
        (void)json_bool(v, key); // implementation choices of torch/DeepSpeed: no effect on the result
      } else if (name == "bias_correction") {
        if (!json_bool(v, key)) {
          config_fail(key, "must be true: zenflow always applies Adam's bias correction");
        }
      } else if (name == "amsgrad" || name == "maximize") {
        if (json_bool(v, key)) {
          config_fail(key, "is not supported (must be false)");
        }
      } else {
        config_fail(key, "is not a known Adam parameter (known: lr, betas, eps, weight_decay, adam_w_mode, "
                         "torch_adam, bias_correction, amsgrad, maximize, fused, foreach, capturable)");
      }
    }
  }
  h.decoupled = type == "adamw" || adam_w_mode;
  c.adam = h;
}

inline void read_precision_blocks(const nlohmann::json& ds, config& c) {
  bool fp16 = false;
  bool bf16 = false;
  if (const nlohmann::json* b = json_object_member(ds, "bf16", "bf16")) {
    if (const auto it = b->find("enabled"); it != b->end()) {
      bf16 = json_bool(*it, "bf16.enabled");
    }
  }
  if (const nlohmann::json* f = json_object_member(ds, "fp16", "fp16")) {
    if (const auto it = f->find("enabled"); it != f->end()) {
      fp16 = json_bool(*it, "fp16.enabled");
    }
    if (fp16) {
      const auto ls = f->find("loss_scale");
      const double scale = ls == f->end() ? 0.0 : json_number(*ls, "fp16.loss_scale");
      if (scale == 0.0) {
        config_fail("fp16.loss_scale",
                    "is 0 (dynamic loss scaling, DeepSpeed's default), which zenflow does not "
                    "support: give the static scale the gradients carry (> 0)");
      }
      c.loss_scale = json_float(*ls, "fp16.loss_scale");
    }
  }
  if (fp16 && bf16) {
    config_fail("bf16.enabled", "and fp16.enabled are both true");
  }
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
  const double p = topk_ratio * static_cast<double>(channels) * (1.0 + 8.0 * DBL_EPSILON);
  const auto k = static_cast<std::int64_t>(std::floor(p));
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
  const double n = std::floor(static_cast<double>(hardware_threads) * (1.0 - pt_reserved_cores_perc));
  return std::max(1u, static_cast<unsigned>(std::max(0.0, n)));
}

inline void config::validate() const {
  using detail::config_fail;
  using detail::value_text;
  using detail::zenflow_key;
  const auto check = [](bool ok, std::string_view key, const std::string& why) {
    if (!ok) {
      config_fail(key, why);
    }
  };
  const auto in_steps = [&](std::int64_t v, std::int64_t lo, const char* name) {
    check(v >= lo && v <= max_steps_value, zenflow_key(name),
          "must be in [" + std::to_string(lo) + ", " + std::to_string(max_steps_value) + "], got " +
              std::to_string(v));
  };

  check(mode == optimizer_mode::zenflow || mode == optimizer_mode::offload_sync ||
            mode == optimizer_mode::gpu_adamw,
        zenflow_key("mode"), "is not a valid optimizer_mode");
  check(std::isfinite(topk_ratio) && topk_ratio > 0.0 && topk_ratio <= 1.0, zenflow_key("topk_ratio"),
        "must be in (0, 1], got " + value_text(topk_ratio));
  check(select == select_strategy::step || select == select_strategy::epoch ||
            select == select_strategy::automatic,
        zenflow_key("select_strategy"), "is not a valid select_strategy");
  in_steps(select_interval, 0, "select_interval");
  in_steps(update_interval, 0, "update_interval");
  in_steps(full_warm_up_rounds, 0, "full_warm_up_rounds");
  in_steps(steps_per_epoch, 0, "steps_per_epoch");
  in_steps(min_update_interval, 1, "min_update_interval");
  in_steps(max_update_interval, 1, "max_update_interval");
  check(max_update_interval >= min_update_interval, zenflow_key("max_update_interval"),
        "must be >= min_update_interval (" + std::to_string(min_update_interval) + "), got " +
            std::to_string(max_update_interval));
  check(std::isfinite(auto_ratio) && auto_ratio > 0.0 && auto_ratio <= 1.0, zenflow_key("auto_ratio"),
        "must be in (0, 1], got " + value_text(auto_ratio));
  check(
      std::isfinite(pt_reserved_cores_perc) && pt_reserved_cores_perc >= 0.0 && pt_reserved_cores_perc < 1.0,
      zenflow_key("pt_reserved_cores_perc"), "must be in [0, 1), got " + value_text(pt_reserved_cores_perc));
  check(host_lr_scale == host_lr_scaling::linear || host_lr_scale == host_lr_scaling::sqrt ||
            host_lr_scale == host_lr_scaling::none,
        zenflow_key("host_lr_scale"), "is not a valid host_lr_scaling");
  check(importance == channel_norm::sq_l2 || importance == channel_norm::l1, zenflow_key("importance"),
        "must be sq_l2 or l1");

  // The selection schedule (SPEC.md "Configuration").
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
          "gives " + std::to_string(si) + " steps between selections, shorter than min_update_interval (" +
              std::to_string(min_update_interval) + ")");
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

  // Transport.
  check(upload == upload_policy::whole_window || upload == upload_policy::chunk_ring, zenflow_key("upload"),
        "is not a valid upload_policy");
  check(ring_slot_bytes >= 4096 && ring_slot_bytes <= (std::int64_t{1} << 30) && ring_slot_bytes % 256 == 0,
        zenflow_key("ring_slot_bytes"),
        "must be a multiple of 256 in [4096, 2^30], got " + std::to_string(ring_slot_bytes));
  check(ring_slots >= 2 && ring_slots <= 1024, zenflow_key("ring_slots"),
        "must be in [2, 1024], got " + std::to_string(ring_slots));
  check(host_threads <= 4096, zenflow_key("host_threads"),
        "must be in [0, 4096] (0 = derived), got " + std::to_string(host_threads));
}

inline config config::from_deepspeed_json(const nlohmann::json& ds) {
  using detail::config_fail;
  if (!ds.is_object()) {
    config_fail("<root>", "must be a JSON object (a DeepSpeed config), got " + detail::json_excerpt(ds));
  }
  config c;
  bool has_zenflow = false;
  bool offload_cpu = false;
  if (const nlohmann::json* zero = detail::json_object_member(ds, "zero_optimization", "zero_optimization")) {
    if (const nlohmann::json* off =
            detail::json_object_member(*zero, "offload_optimizer", "zero_optimization.offload_optimizer")) {
      if (const auto it = off->find("device"); it != off->end() && !it->is_null()) {
        offload_cpu = detail::json_string(*it, "zero_optimization.offload_optimizer.device") == "cpu";
      }
    }
    if (const nlohmann::json* zf =
            detail::json_object_member(*zero, "zenflow", std::string(detail::zenflow_block_path))) {
      has_zenflow = true;
      detail::read_zenflow_block(*zf, c);
    }
  }
  if (!has_zenflow) {
    // No zenflow block: the DeepSpeed run this file describes is one of our baselines.
    c.mode = offload_cpu ? optimizer_mode::offload_sync : optimizer_mode::gpu_adamw;
  }
  if (const nlohmann::json* opt = detail::json_object_member(ds, "optimizer", "optimizer")) {
    detail::read_optimizer_block(*opt, c);
  }
  if (const auto it = ds.find("gradient_clipping"); it != ds.end() && !it->is_null()) {
    c.gradient_clipping = detail::json_float(*it, "gradient_clipping");
  }
  detail::read_precision_blocks(ds, c);
  c.validate();
  return c;
}

inline config config::from_deepspeed_json_string(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number that overflows a double (1e400): both bad input.
    detail::config_fail("<root>", std::string("is not valid JSON: ") + e.what());
  }
  return from_deepspeed_json(j);
}

inline config config::from_deepspeed_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw invalid_argument("zenflow::config: cannot open config file '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return from_deepspeed_json_string(text.str());
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(e.what()) + " (in " + path + ")");
  }
}

inline nlohmann::json config::to_deepspeed_json() const {
  nlohmann::json zf;
  zf["topk_ratio"] = topk_ratio;
  zf["select_strategy"] = std::string(to_string(select));
  zf["select_interval"] = select_interval == 0 ? nlohmann::json("auto") : nlohmann::json(select_interval);
  zf["update_interval"] = update_interval == 0 ? nlohmann::json("auto") : nlohmann::json(update_interval);
  zf["full_warm_up_rounds"] = full_warm_up_rounds;
  zf["overlap_step"] = overlap_step;
  zf["auto_ratio"] = auto_ratio;
  zf["pt_reserved_cores_perc"] = pt_reserved_cores_perc;
  zf["steps_per_epoch"] = steps_per_epoch == 0 ? nlohmann::json(nullptr) : nlohmann::json(steps_per_epoch);
  zf["host_lr_scale"] = std::string(to_string(host_lr_scale));
  zf["max_update_interval"] = max_update_interval;
  zf["min_update_interval"] = min_update_interval;
  zf["importance"] = importance == channel_norm::l1 ? "l1" : "sq_l2";
  zf["mode"] = std::string(to_string(mode));
  zf["upload"] = std::string(to_string(upload));
  zf["ring_slot_bytes"] = ring_slot_bytes;
  zf["ring_slots"] = ring_slots;
  zf["host_threads"] = host_threads;
  if (!param_groups.empty()) {
    nlohmann::json groups = nlohmann::json::array();
    for (const param_group& g : param_groups) {
      nlohmann::json j;
      j["match"] = g.match;
      if (g.lr_scale) {
        j["lr_scale"] = *g.lr_scale;
      }
      if (g.weight_decay) {
        j["weight_decay"] = *g.weight_decay;
      }
      groups.push_back(std::move(j));
    }
    zf["param_groups"] = std::move(groups);
  }

  nlohmann::json ds;
  ds["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}, {"zenflow", zf}};
  ds["optimizer"] = {{"type", adam.decoupled ? "AdamW" : "Adam"},
                     {"params",
                      {{"lr", adam.lr},
                       {"betas", {adam.beta1, adam.beta2}},
                       {"eps", adam.eps},
                       {"weight_decay", adam.weight_decay},
                       {"adam_w_mode", adam.decoupled}}}};
  ds["gradient_clipping"] = gradient_clipping;
  if (loss_scale != 1.0f) {
    ds["fp16"] = {{"enabled", true}, {"loss_scale", loss_scale}};
  }
  return ds;
}

ZF_NAMESPACE_END
