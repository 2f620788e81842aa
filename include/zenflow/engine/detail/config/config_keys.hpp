/// @file
/// The names of the configuration's JSON keys: the blocks zenflow reads, the keys of each
/// (DeepSpeed's zenflow block, zenflow_ext, optimizer.params) and DeepSpeed's own (top level,
/// zero_optimization), for the warning on an unknown one; the near-miss suggestion of an error
/// ("did you mean"), and the JSON paths that messages name. Apart from config_impl.hpp (the
/// members' definitions), so that these long lists are one place of their own; the reader
/// (detail/config/config_json.hpp) and validate() use them, and tests/docs/check_docs.py compares them
/// with docs/config.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>

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
                                                      "accumulate",
                                                      "host_accumulators",
                                                      "ring_slot_bytes",
                                                      "ring_slots",
                                                      "reduce_bucket_bytes",
                                                      "reduce_in_place",
                                                      "shard_state_headroom",
                                                      "host_threads",
                                                      "pin_host_threads",
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

ZF_NAMESPACE_END
