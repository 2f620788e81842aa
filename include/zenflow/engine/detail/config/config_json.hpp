/// @file
/// The DeepSpeed JSON reader's blocks (needs nlohmann-json: link zenflow::json): one function per
/// block of the file (zero_optimization.zenflow, zenflow_ext, optimizer, fp16/bf16), each reading
/// its keys into a config with their ranges and messages. Included by <zenflow/engine/config.hpp>
/// when ZENFLOW_WITH_JSON is 1, before detail/config/config_json_members.hpp (zenflow::config's JSON
/// members, which call these and include this header); not a public header on its own.
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

#include <nlohmann/json.hpp>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/detail/config/config_decl.hpp>
#include <zenflow/engine/detail/config/config_impl.hpp>
#include <zenflow/engine/detail/config/config_json_values.hpp>
#include <zenflow/engine/detail/config/config_keys.hpp>

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
    c.host_moments = json_enum<moment_precision>(v, key,
                                                 {{"fp32", moment_precision::fp32},
                                                  {"bf16", moment_precision::bf16},
                                                  {"int8", moment_precision::int8}});
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
  } else if (name == "accumulate") {
    c.accumulate = json_enum<accumulation_site>(
        v, key, {{"host", accumulation_site::host}, {"device", accumulation_site::device}});
  } else if (name == "host_accumulators") {
    c.host_accumulators = static_cast<std::int32_t>(json_integer_in(v, key, 1, 2));
  } else if (name == "ring_slot_bytes") {
    c.ring_slot_bytes = json_integer_in(v, key, 4096, std::int64_t{1} << 30);
  } else if (name == "ring_slots") {
    c.ring_slots = static_cast<std::int32_t>(json_integer_in(v, key, 0, 1024)); // 1: validate() rejects it
  } else if (name == "reduce_bucket_bytes") {
    c.reduce_bucket_bytes = json_integer_in(v, key, 256, (std::int64_t{1} << 31) - 4); // % 4: validate()
  } else if (name == "reduce_in_place") {
    c.reduce_in_place = json_bool(v, key);
  } else if (name == "shard_state_headroom") {
    c.shard_state_headroom = json_number(v, key); // the range: validate()
  } else if (name == "host_threads") {
    c.host_threads = static_cast<unsigned>(json_integer_in(v, key, 0, 4096));
  } else if (name == "pin_host_threads") {
    c.pin_host_threads = json_bool(v, key);
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
      config_fail(key,
                  "is not a known key of " + std::string(extension_block) +
                      did_you_mean(name, {extension_keys, deepspeed_zenflow_keys}) +
                      " (known: host_lr_scale, max_update_interval, min_update_interval, importance, "
                      "host_moments_per_step, host_moments, mode, upload, accumulate, host_accumulators, "
                      "ring_slot_bytes, ring_slots, "
                      "reduce_bucket_bytes, reduce_in_place, shard_state_headroom, host_threads, "
                      "pin_host_threads, param_groups, select_on_mass_drop, min_select_interval)");
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

ZF_NAMESPACE_END
