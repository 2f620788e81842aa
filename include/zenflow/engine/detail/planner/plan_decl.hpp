/// @file
/// The declarations of <zenflow/engine/plan.hpp> (the planner's model, hardware, configuration,
/// result and suggestion): read that header's comment. The formulas, detail/planner/plan_impl.hpp,
/// include this header and never plan.hpp, so that the include graph has no circle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/config.hpp>

ZF_NAMESPACE_BEGIN

/// `count` matrices of `channels` channels of `channel_len` elements (a Linear weight [out, in]:
/// out channels of length in).
struct plan_matrix {
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t count = 1;
};

/// `count` vector parameters (biases, norms) of `elements` each.
struct plan_vector {
  std::int64_t elements = 0;
  std::int64_t count = 1;
};

/// A model's parameters as the planner sees them: matrices and vectors in the working precision.
struct plan_model {
  std::string name;
  std::vector<plan_matrix> matrices;
  std::vector<plan_vector> vectors;
  std::int64_t elem_bytes = 2; ///< working precision: 2 (bf16, fp16) or 4

  /// Elements of every matrix; of every parameter.
  [[nodiscard]] double matrix_params() const noexcept;
  [[nodiscard]] double params() const noexcept;

  /// A LLaMA-style decoder: per layer q, o (hidden x hidden), k, v (kv_dim x hidden), gate, up
  /// (intermediate x hidden), down (hidden x intermediate), two norms; the embedding and the
  /// output head (vocab x hidden; one when tied) and the final norm.
  [[nodiscard]] static plan_model transformer(std::string name,
                                              std::int64_t layers,
                                              std::int64_t hidden,
                                              std::int64_t intermediate,
                                              std::int64_t vocab,
                                              std::int64_t kv_dim,
                                              bool tied_embeddings);
  /// "1b" (LLaMA-3.2-1B's shapes), "7b", "13b", "70b" (LLaMA-2's); throws
  /// zenflow::invalid_argument naming 'preset' for another name.
  [[nodiscard]] static plan_model preset(std::string_view name);
  /// The names preset() accepts.
  [[nodiscard]] static std::vector<std::string_view> preset_names();
  /// `layers` matrices of `hidden` channels, ceil(params / (layers x hidden)) long (the pipeline
  /// benchmark's model with hidden = that length).
  [[nodiscard]] static plan_model uniform(double params, std::int64_t layers, std::int64_t hidden);
};

/// What the run has. Bandwidths in bytes per second, memories in bytes (0: not checked).
struct plan_hardware {
  double host_bytes_per_s = 0;    ///< host memory bandwidth the host optimizer gets (the whole node)
  double pcie_bytes_per_s = 0;    ///< per direction, per GPU
  double step_s = 0;              ///< the device's forward + backward of one step (C)
  double host_memory_bytes = 0;   ///< the node's host memory
  double device_memory_bytes = 0; ///< one GPU's memory
  std::int64_t gpus = 1;          ///< data-parallel ranks sharing the host (docs/data-parallel.md)
};

/// How the host keeps the Adam moments (config::host_moments).
enum class plan_moments : std::uint8_t { fp32, bf16, int8 };
/// Where a window's unselected gradients are summed (config::accumulate; device: one rank only).
enum class plan_accumulation : std::uint8_t { host, device };

/// The settings the planner reads.
struct plan_config {
  optimizer_mode mode = optimizer_mode::zenflow;
  double topk_ratio = 0.1;                   ///< r, in [0, 1]; k = config::topk(channels)
  std::int64_t update_interval = 4;          ///< S >= 1 (Zen-auto's windows: plan at its shortest)
  plan_moments moments = plan_moments::bf16; ///< the engine's default (config::host_moments)
  plan_accumulation accumulate = plan_accumulation::host;
  upload_policy upload = upload_policy::whole_window;
  std::int64_t ring_slot_bytes = 4 << 20;
  std::int32_t ring_slots = 0; ///< 0: the engine's automatic sizing
  /// true: the window's host job runs beside the next window (stall-free), which the planner plans
  /// by default; the engine's default is false since 2026-11-29 (synchronous windows, for accuracy
  /// at high learning rates: docs/accuracy.md), and plan_config::of(config) takes the config's.
  /// false: the step that closes a window waits for its host job (predicted_step_s adds it).
  bool overlap_step = true;
  /// config::host_accumulators: 1, one fp32 buffer of the unselected rows, which the next window's
  /// first step writes once the job has read it (so the job must fit in about one step); 2, one
  /// each (the job may take the whole next window, S steps).
  std::int32_t host_accumulators = 1;
  std::int64_t int8_block = 64; ///< elements per fp32 scale of the int8 moments (the engine's: 64)
  /// ZeRO-3 over plan_hardware::gpus ranks (the sharded engine, docs/data-parallel.md): each GPU
  /// holds its shard of the weights, gradients and upload buffer (the largest rank's), the device
  /// state of its share of each matrix's k (shard_state_headroom more); host and PCIe as
  /// owner_partition's. Off: ZeRO-2.
  bool sharded = false;
  /// ZeRO-2 over gpus > 1 ranks: the fp32 reduction bucket (config::reduce_bucket_bytes) and
  /// where the mean goes (config::reduce_in_place: your gradient buffers, or mean buffers of
  /// their size on the GPU).
  std::int64_t reduce_bucket_bytes = 25 << 20;
  bool reduce_in_place = true;
  /// ZeRO-3: the device rows reserved above a shard's share of k (config::shard_state_headroom).
  double shard_state_headroom = 0.25;

  /// The settings of an engine config (`update_interval` 0, Zen-auto, becomes min_update_interval).
  [[nodiscard]] static plan_config of(const config& c) noexcept;
};

/// The terms of the pipeline bound, in any one unit of time: the device step C, the D2H and H2D
/// copies of a step, the host window's time per step it has (its window's time / S; with one
/// accumulator buffer and overlap, its whole time, and at least its staged upload's: the next
/// window's first step waits for it), the host accumulation of a step.
struct pipeline_terms {
  double compute = 0, d2h = 0, h2d = 0, host_window = 0, accumulate = 0;
};

/// The bound and its largest term's name ("compute", "d2h", "h2d", "host_window/S", "accumulate";
/// the first of equal terms).
struct pipeline_bound_value {
  double value = 0;
  std::string_view term;
};

/// Issue 11's pipeline bound max(C, down / B, up / B, host window / S, accumulation): no pipeline
/// of these stages can run a step faster. The pipeline benchmark's bound is this function.
[[nodiscard]] pipeline_bound_value pipeline_bound(const pipeline_terms& t) noexcept;

/// Host bytes (the whole node: every rank's ring and upload buffer) by buffer, as the engine counts
/// them in stats().memory.host_*.
struct plan_host_bytes {
  double state = 0;        ///< fp32 master + m, v + counts
  double accumulators = 0; ///< fp32 window accumulators of the unselected rows (one rank; a rank's
                           ///< block with data parallel), or device accumulation's landed sum
  double ring = 0;         ///< pinned D2H ring
  double upload = 0;       ///< the upload stage's pinned chunks (whole_window), or the upload buffer
  /// ZeRO-2 over gpus > 1: each rank's pinned staging of a selection's entering rows
  /// (stats().memory.host_staging)
  double staging = 0;
  [[nodiscard]] double total() const noexcept { return state + accumulators + ring + upload + staging; }
};

/// One GPU's bytes: the user's weights and gradients plus what stats().memory.device_* counts
/// (activations are not modelled).
struct plan_device_bytes {
  double weights_and_grads = 0;
  double selected_state = 0; ///< fp32 master, m, v of the selected channels + counts and indices
  double vector_state = 0;
  double staging = 0;
  double upload = 0;
  double scratch = 0;      ///< scores, host sets, selection lists, migration stage (the larger parts)
  double accumulators = 0; ///< device accumulation's two fp32 window sums and its count of steps
  /// ZeRO-2: the fp32 reduction bucket and its receive buffer, their index lists and copy tables
  /// (and the mean buffers without reduce_in_place): stats().memory.device_reduction
  double reduction = 0;
  [[nodiscard]] double engine() const noexcept {
    return selected_state + vector_state + staging + upload + scratch + accumulators + reduction;
  }
  [[nodiscard]] double total() const noexcept { return weights_and_grads + engine(); }
};

/// Bytes a step moves: over one GPU's PCIe link, and through the host's memory (all ranks).
struct plan_traffic {
  double d2h_per_step = 0;
  double h2d_per_step = 0;
  double host_window_per_step = 0; ///< the host AdamW's reads and writes, over S
  double accumulate_per_step = 0;  ///< the host accumulation's reads and writes
};

/// What `plan` computes.
struct plan_result {
  plan_config config;
  double params = 0;
  plan_host_bytes host;
  plan_device_bytes device;
  plan_traffic traffic;
  std::int64_t ring_slots = 0,
               staging_slots = 0; ///< per rank as the engine resolves them (the largest block's)
  /// Data parallel (gpus > 1): every rank's GPU bytes (`device` holds the largest of each term).
  std::vector<plan_device_bytes> device_by_rank;
  /// DeepSpeed's bytes for the same model and machine, from its documented memory model
  /// (docs/planning.md, "DeepSpeed beside zenflow"): ZeRO-Offload (ZeRO-2, offload_optimizer cpu)
  /// by DeepSpeed's own estimator without its 1.5x buffer factor; ZenFlow (ZeRO-2, overlap_step)
  /// from its source. Host: the node's; GPU: one GPU's, activations excluded as ours.
  double deepspeed_offload_host = 0, deepspeed_offload_device = 0;
  double deepspeed_zenflow_host = 0, deepspeed_zenflow_device = 0;
  pipeline_terms terms;       ///< seconds
  pipeline_bound_value bound; ///< seconds
  /// The step time to expect: the bound for ZenFlow and gpu_adamw (the device's optimizer time is
  /// not modelled), C + down + host + up for offload_sync (no overlap).
  double predicted_step_s = 0;
  bool stall_free = false; ///< ZenFlow whose every stage fits in C (gpu_adamw: true; offload_sync: false)
  bool fits_host = true, fits_device = true; ///< within plan_hardware's memories (true when 0)
  std::vector<std::string> not_implemented;  ///< modelled options the engine does not have yet
  [[nodiscard]] double host_bytes_per_param() const noexcept { return host.total() / params; }
  [[nodiscard]] double device_bytes_per_param() const noexcept { return device.total() / params; }
  /// Stall-free and within both memories.
  /// Within both memories, and stall-free where the configuration asks for the overlapped pipeline
  /// (synchronous windows stall by design: their price is in predicted_step_s).
  [[nodiscard]] bool feasible() const noexcept {
    const bool sync_windows = config.mode == optimizer_mode::zenflow && !config.overlap_step;
    return (stall_free || sync_windows) && fits_host && fits_device;
  }
};

/// Plans one configuration. Throws zenflow::invalid_argument naming the argument ('model',
/// 'hardware', 'config') and the field for an empty model, a non-positive bandwidth or step
/// time, r outside [0, 1], S < 1, a ring slot smaller than a channel.
[[nodiscard]] plan_result plan(const plan_model& model, const plan_hardware& hw, const plan_config& cfg);

/// The first feasible configuration (stall-free, within both memories), changing as little as it
/// can: the smallest S in [1, max_interval] with the given moments, upload and accumulation
/// (possibly smaller than the given S); else the upload through the ring (chunk_ring: less device
/// memory), bf16 moments, then int8, then device accumulation (device memory) with each,
/// each at its smallest S. Modes other than zenflow: the plan of the given configuration, found
/// when it is feasible.
struct plan_suggestion {
  bool found = false;
  plan_result result; ///< the suggested configuration's plan (found), else the given one's
  std::string change; ///< what changed, in words ("none", "S = 2", "S = 3, moments bf16", ...)
};
[[nodiscard]] plan_suggestion suggest(const plan_model& model,
                                      const plan_hardware& hw,
                                      const plan_config& cfg,
                                      std::int64_t max_interval = 64);

/// Spellings: "fp32" | "bf16" | "int8", "host" | "device".
[[nodiscard]] std::string_view to_string(plan_moments v) noexcept;
[[nodiscard]] std::string_view to_string(plan_accumulation v) noexcept;

ZF_NAMESPACE_END
