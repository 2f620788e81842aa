/// @file
/// Definitions of zenflow::config's DeepSpeed JSON reader and writer (needs nlohmann-json: link
/// zenflow::json). Included at the end of detail/config_impl.hpp (so of <zenflow/engine/config.hpp>)
/// when ZENFLOW_WITH_JSON is 1; not a public header on its own.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/config_impl.hpp>
#include <zenflow/engine/detail/config_json_values.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

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

/// zenflow_ext.param_groups: an array of {"match", "lr_scale"?, "weight_decay"?}
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
      config_fail(param_group_key(i, "", key), "must be an object, got " + json_excerpt(g));
    }
    param_group pg;
    bool has_match = false;
    for (const auto& [name, x] : g.items()) {
      const std::string k = param_group_key(i, name, key);
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
      config_fail(param_group_key(i, "match", key), "is required in a parameter group");
    }
    groups.push_back(std::move(pg));
  }
  return groups;
}

/// What one read needs besides the config: the options, where to record sources, the keys
/// read so far from each zenflow place.
struct json_reader {
  const config_read_options& options;
  config_sources* sources;
  std::set<std::string> in_zenflow_block; // extension keys found in their deprecated place
  std::string mode_key;                   // the JSON path that set the mode, if one did

  void record(const std::string& setting, const std::string& key) const {
    if (sources != nullptr) {
      sources->set(setting, key);
    }
  }

  /// Something the reader ignores or tolerates: an error with `strict`, else a warning logged
  /// through the log hook (and kept in `sources`).
  void warn(const std::string& key, const std::string& why) const {
    if (options.strict) {
      config_fail(key, why + " [strict: rejected]");
    }
    std::string msg = "zenflow::config: key '" + key + "' " + why;
    log(log_level::warning, msg);
    if (sources != nullptr) {
      sources->warnings.push_back(std::move(msg));
    }
  }
};

/// Reads zenflow's own key `name` (a member of extension_keys, and where a future key of
/// zenflow_ext goes) into `c`; `key` is its JSON path for messages. False if `name` is not one.
inline bool
read_extension_key(const std::string& name, const nlohmann::json& v, const std::string& key, config& c) {
  if (name == "host_lr_scale") {
    c.host_lr_scale = json_enum<host_lr_scaling>(v, key,
                                                 {{"linear", host_lr_scaling::linear},
                                                  {"sqrt", host_lr_scaling::sqrt},
                                                  {"none", host_lr_scaling::none},
                                                  {"capped", host_lr_scaling::capped},
                                                  {"snr", host_lr_scaling::snr}});
  } else if (name == "max_update_interval") {
    c.max_update_interval = json_integer_in(v, key, 1, config::max_steps_value);
  } else if (name == "min_update_interval") {
    c.min_update_interval = json_integer_in(v, key, 1, config::max_steps_value);
  } else if (name == "host_moments_per_step") {
    c.host_moments_per_step = json_bool(v, key);
  } else if (name == "select_on_mass_drop") {
    c.select_on_mass_drop = json_number(v, key); // the range: validate()
  } else if (name == "min_select_interval") {
    c.min_select_interval = json_integer_in(v, key, 1, config::max_steps_value);
  } else if (name == "host_moments") {
    c.host_moments = json_enum<moment_precision>(
        v, key, {{"fp32", moment_precision::fp32}, {"bf16", moment_precision::bf16}});
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
    c.ring_slots = static_cast<std::int32_t>(json_integer_in(v, key, 0, 1024)); // 1: validate() rejects it
  } else if (name == "host_threads") {
    c.host_threads = static_cast<unsigned>(json_integer_in(v, key, 0, 4096));
  } else if (name == "param_groups") {
    c.param_groups = read_param_groups(v, key);
  } else {
    return false;
  }
  return true;
}

/// zero_optimization.zenflow: DeepSpeed's keys with DeepSpeed's ranges; zenflow's own keys are
/// still read here (their old place) with a deprecation warning.
inline void read_zenflow_block(const nlohmann::json& zf, config& c, json_reader& r) {
  for (const auto& [name, v] : zf.items()) {
    const std::string key = zenflow_key(name);
    if (v.is_string() && v.get<std::string>() == "auto" && listed(deepspeed_zenflow_keys, name) &&
        name != "select_strategy" && name != "select_interval" && name != "update_interval") {
      // DeepSpeed's config models drop "auto" values (Hugging Face's placeholders): the default.
      r.record(name, key + " \"auto\" (DeepSpeed's default)");
      continue;
    }
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
      if (json_bool(v, key)) {
        config_fail(key,
                    "is true, which zenflow does not support: DeepSpeed's offload keeps the selected "
                    "channels' optimizer state in pinned host memory, so that every step's device update "
                    "reads and writes it over PCIe; zenflow keeps the selected channels' fp32 master and "
                    "moments on the GPU (12 bytes x topk_ratio per matrix parameter, the point of the "
                    "split: they update in place with no PCIe traffic). Set it to false or remove it");
      }
    } else if (name == "auto_ratio") {
      c.auto_ratio = json_number(v, key);
    } else if (name == "pt_reserved_cores_perc") {
      c.pt_reserved_cores_perc = json_number(v, key);
    } else if (name == "steps_per_epoch") {
      c.steps_per_epoch = v.is_null() ? 0 : json_integer_in(v, key, 1, config::max_steps_value);
    } else if (read_extension_key(name, v, key, c)) {
      r.warn(key, "is deprecated here: DeepSpeed rejects unknown keys in its zenflow block, so the file "
                  "cannot run under DeepSpeed; move it to '" +
                      std::string(extension_block) + "." + name + "' (read here for now)");
      r.in_zenflow_block.insert(name);
      if (name == "mode") {
        r.mode_key = key;
      }
    } else {
      config_fail(key,
                  "is not a known key of the zenflow block" +
                      did_you_mean(name, {deepspeed_zenflow_keys, extension_keys}) +
                      " (DeepSpeed's keys: topk_ratio, select_strategy, select_interval, update_interval, "
                      "full_warm_up_rounds, overlap_step, offload, auto_ratio, pt_reserved_cores_perc, "
                      "steps_per_epoch; zenflow's own go in " +
                      std::string(extension_block) + ")");
    }
    r.record(name, key);
  }
}

/// zenflow_ext: zenflow's own keys. Unknown keys are errors (the block is ours).
inline void read_extension_block(const nlohmann::json& ext, config& c, json_reader& r) {
  for (const auto& [name, v] : ext.items()) {
    const std::string key = std::string(extension_block) + "." + name;
    if (listed(deepspeed_zenflow_keys, name)) {
      config_fail(key, "is one of DeepSpeed's zenflow keys: put it in '" + zenflow_key(name) +
                           "', where DeepSpeed reads it too");
    }
    if (r.in_zenflow_block.count(name) != 0) {
      config_fail(key, "is also given as '" + zenflow_key(name) + "' (its deprecated place): keep one");
    }
    if (!read_extension_key(name, v, key, c)) {
      config_fail(key, "is not a known key of " + std::string(extension_block) +
                           did_you_mean(name, {extension_keys, deepspeed_zenflow_keys}) +
                           " (known: host_lr_scale, max_update_interval, min_update_interval, importance, "
                           "host_moments_per_step, host_moments, mode, upload, ring_slot_bytes, ring_slots, "
                           "host_threads, param_groups, select_on_mass_drop, min_select_interval)");
    }
    if (name == "mode") {
      r.mode_key = key;
    }
    r.record(name, key);
  }
}

inline void read_optimizer_block(const nlohmann::json& opt, config& c, const json_reader& r) {
  const auto type_it = opt.find("type");
  if (type_it == opt.end()) {
    config_fail("optimizer.type", "is required in an optimizer block");
  }
  const std::string type = ascii_lower(json_string(*type_it, "optimizer.type"));
  r.record("optimizer.type", "optimizer.type");
  if (type != "adam" && type != "adamw") {
    config_fail("optimizer.type",
                "must be \"Adam\" or \"AdamW\" (zenflow runs Adam only), got " + json_excerpt(*type_it));
  }
  adamw_hparams h = config::deepspeed_adam_defaults();
  bool adam_w_mode = true; // DeepSpeed's default: "Adam" means AdamW unless adam_w_mode is false
  if (const nlohmann::json* params = json_object_member(opt, "params", "optimizer.params")) {
    for (const auto& [name, v] : params->items()) {
      const std::string key = "optimizer.params." + name;
      if (name == "lr" || name == "betas" || name == "eps" || name == "weight_decay") {
        r.record(key, key);
      } else if (name == "adam_w_mode") {
        r.record("optimizer.type", "optimizer.type and optimizer.params.adam_w_mode");
      }
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
        config_fail(key,
                    "is not a known Adam parameter" + did_you_mean(name, {adam_param_keys}) +
                        " (known: lr, betas, eps, weight_decay, adam_w_mode, torch_adam, bias_correction, "
                        "amsgrad, maximize, fused, foreach, capturable)");
      }
    }
  }
  h.decoupled = type == "adamw" || adam_w_mode;
  c.adam = h;
}

inline void read_precision_blocks(const nlohmann::json& ds, config& c, const json_reader& r) {
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
      r.record("fp16.loss_scale", "fp16.loss_scale");
    }
  }
  if (fp16 && bf16) {
    config_fail("bf16.enabled", "and fp16.enabled are both true");
  }
}

} // namespace detail

inline config config::from_deepspeed_json(const nlohmann::json& ds,
                                          const config_read_options& options,
                                          config_sources* sources) {
  using detail::config_fail;
  if (!ds.is_object()) {
    config_fail("<root>", "must be a JSON object (a DeepSpeed config), got " + detail::json_excerpt(ds));
  }
  // Everything is read into locals: on error neither the caller's sources nor anything else changed.
  config_sources src;
  src.origin = "JSON value";
  src.deepspeed_defaults = true;
  detail::json_reader r{options, sources != nullptr ? &src : nullptr, {}, {}};
  config c = deepspeed_defaults();
  bool has_zenflow = false;
  bool has_zero = false;
  bool offload_cpu = false;
  const nlohmann::json* zero = detail::json_object_member(ds, "zero_optimization", "zero_optimization");
  if (zero != nullptr) {
    has_zero = true;
    if (const nlohmann::json* off =
            detail::json_object_member(*zero, "offload_optimizer", "zero_optimization.offload_optimizer")) {
      if (const auto it = off->find("device"); it != off->end() && !it->is_null()) {
        offload_cpu = detail::json_string(*it, "zero_optimization.offload_optimizer.device") == "cpu";
      }
    }
    if (const nlohmann::json* zf =
            detail::json_object_member(*zero, "zenflow", std::string(detail::zenflow_block_path))) {
      has_zenflow = true;
      detail::read_zenflow_block(*zf, c, r);
    }
  }
  if (const nlohmann::json* ext = detail::json_object_member(ds, "zenflow_ext", "zenflow_ext")) {
    detail::read_extension_block(*ext, c, r);
  }
  const bool mode_given = !r.mode_key.empty();
  std::string mode_reason;
  if (mode_given) {
    mode_reason = "set by " + r.mode_key;
  } else if (has_zenflow) {
    c.mode = optimizer_mode::zenflow;
    mode_reason = "the file has a zero_optimization.zenflow block";
  } else {
    // No zenflow block: the DeepSpeed run this file describes is one of our baselines.
    c.mode = offload_cpu ? optimizer_mode::offload_sync : optimizer_mode::gpu_adamw;
    mode_reason = offload_cpu ? "no zero_optimization.zenflow block, and zero_optimization.offload_optimizer."
                                "device is \"cpu\": DeepSpeed's ZeRO-Offload"
                              : "no zero_optimization.zenflow block and no CPU offload: DeepSpeed's "
                                "optimizer on the GPU";
  }
  if (!mode_given) {
    r.record("mode", "inferred from the file (see mode above)");
  }
  const std::string baseline_note =
      has_zenflow || mode_given
          ? std::string()
          : "; without it this file runs the " + std::string(to_string(c.mode)) + " baseline";
  // What DeepSpeed would reject or ignore and we would otherwise read past in silence.
  for (const auto& [name, v] : ds.items()) {
    (void)v;
    if (!detail::listed(detail::deepspeed_top_level_keys, name) && name != detail::extension_block) {
      const std::string_view near = detail::nearest_key(
          name, {detail::deepspeed_top_level_keys, std::span(&detail::extension_block, 1)});
      r.warn(name, "is not a DeepSpeed or zenflow top-level key and is ignored" + detail::suggestion(near) +
                       (near == "zero_optimization" && !has_zero ? baseline_note : std::string()));
    }
  }
  if (zero != nullptr) {
    for (const auto& [name, v] : zero->items()) {
      (void)v;
      if (!detail::listed(detail::deepspeed_zero_keys, name)) {
        const std::string_view near = detail::nearest_key(name, {detail::deepspeed_zero_keys});
        r.warn("zero_optimization." + name,
               "is not a key of DeepSpeed's zero_optimization (DeepSpeed rejects it) and is ignored" +
                   detail::suggestion(near) + (near == "zenflow" ? baseline_note : std::string()));
      }
    }
  }
  if (has_zenflow && !offload_cpu) {
    // DeepSpeed raises "Zenflow must be used with cpu offload"; zenflow runs the file anyway.
    r.warn(std::string(detail::zenflow_block_path),
           "is given without zero_optimization.offload_optimizer.device \"cpu\", which DeepSpeed rejects "
           "(ZenFlow needs CPU offload there); zenflow runs it as ZenFlow");
  }
  if (const nlohmann::json* opt = detail::json_object_member(ds, "optimizer", "optimizer")) {
    detail::read_optimizer_block(*opt, c, r);
  }
  if (const auto it = ds.find("gradient_clipping"); it != ds.end() && !it->is_null()) {
    c.gradient_clipping = detail::json_float(*it, "gradient_clipping");
    r.record("gradient_clipping", "gradient_clipping");
  }
  detail::read_precision_blocks(ds, c, r);
  c.validate();
  if (sources != nullptr) {
    src.mode_reason = std::move(mode_reason);
    *sources = std::move(src);
  }
  return c;
}

inline config config::from_deepspeed_json_string(std::string_view text,
                                                 const config_read_options& options,
                                                 config_sources* sources) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number that overflows a double (1e400): both bad input.
    detail::config_fail("<root>", std::string("is not valid JSON: ") + e.what());
  }
  config c = from_deepspeed_json(j, options, sources);
  if (sources != nullptr) {
    sources->origin = "JSON text";
  }
  return c;
}

inline config config::from_deepspeed_json_file(const std::string& path,
                                               const config_read_options& options,
                                               config_sources* sources) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw invalid_argument("zenflow::config: cannot open config file '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    config c = from_deepspeed_json_string(text.str(), options, sources);
    if (sources != nullptr) {
      sources->origin = "file " + path;
    }
    return c;
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(e.what()) + " (in " + path + ")");
  }
}

inline nlohmann::json config::to_deepspeed_json() const {
  // DeepSpeed's keys where DeepSpeed reads them; every one written, so that DeepSpeed's defaults
  // (overlap_step false) never replace ours when the file is read back.
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

  nlohmann::json ext;
  ext["mode"] = std::string(to_string(mode));
  ext["host_lr_scale"] = std::string(to_string(host_lr_scale));
  ext["max_update_interval"] = max_update_interval;
  ext["min_update_interval"] = min_update_interval;
  ext["importance"] = importance == channel_norm::l1 ? "l1" : "sq_l2";
  ext["host_moments_per_step"] = host_moments_per_step;
  ext["host_moments"] = std::string(to_string(host_moments));
  ext["select_on_mass_drop"] = select_on_mass_drop;
  ext["min_select_interval"] = min_select_interval;
  ext["upload"] = std::string(to_string(upload));
  ext["ring_slot_bytes"] = ring_slot_bytes;
  ext["ring_slots"] = ring_slots;
  ext["host_threads"] = host_threads;
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
    ext["param_groups"] = std::move(groups);
  }

  nlohmann::json ds;
  ds["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}, {"zenflow", zf}};
  ds[std::string(detail::extension_block)] = ext;
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
