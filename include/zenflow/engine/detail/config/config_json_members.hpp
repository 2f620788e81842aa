/// @file
/// Definitions of zenflow::config's DeepSpeed JSON members (needs nlohmann-json: link
/// zenflow::json): the reader's entry points (from_deepspeed_json and its string and file forms:
/// the blocks in order, the mode a file implies, the warnings on keys DeepSpeed would reject or
/// ignore) and the writer (to_deepspeed_json). The blocks' readers are in detail/config/config_json.hpp,
/// which this header includes; <zenflow/engine/config.hpp> includes both. Not a public header on its own.
#pragma once

#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/detail/config/config_decl.hpp>
#include <zenflow/engine/detail/config/config_fail.hpp>
#include <zenflow/engine/detail/config/config_json.hpp>
#include <zenflow/engine/detail/config/config_json_values.hpp>
#include <zenflow/engine/detail/config/config_keys.hpp>

ZF_NAMESPACE_BEGIN

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
  ext["accumulate"] = std::string(to_string(accumulate));
  ext["host_accumulators"] = host_accumulators;
  ext["ring_slot_bytes"] = ring_slot_bytes;
  ext["ring_slots"] = ring_slots;
  ext["reduce_bucket_bytes"] = reduce_bucket_bytes;
  ext["reduce_in_place"] = reduce_in_place;
  ext["shard_state_headroom"] = shard_state_headroom;
  ext["host_threads"] = host_threads;
  ext["pin_host_threads"] = pin_host_threads;
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
