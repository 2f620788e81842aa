/// @file
/// The planner's formulas (engine/plan.hpp). Each count mirrors an allocation of the engine:
/// engine::initialize (host state, accumulators, upload), device_plan::setup (device state,
/// staging, upload, the larger scratch buffers), detail::resolve_d2h_slots (called as is: the ring
/// and the staging). The traffic: docs/planning.md, "What the planner counts".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/planner/plan_decl.hpp>
#include <zenflow/engine/detail/planner/plan_parallel.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN

inline double plan_model::matrix_params() const noexcept {
  double n = 0;
  for (const auto& m : matrices) {
    n += static_cast<double>(m.channels) * static_cast<double>(m.channel_len) * static_cast<double>(m.count);
  }
  return n;
}

inline double plan_model::params() const noexcept {
  double n = matrix_params();
  for (const auto& v : vectors) {
    n += static_cast<double>(v.elements) * static_cast<double>(v.count);
  }
  return n;
}

inline plan_model plan_model::transformer(std::string name,
                                          std::int64_t layers,
                                          std::int64_t hidden,
                                          std::int64_t intermediate,
                                          std::int64_t vocab,
                                          std::int64_t kv_dim,
                                          bool tied_embeddings) {
  plan_model m;
  m.name = std::move(name);
  m.matrices = {{hidden, hidden, 2 * layers},       // q, o
                {kv_dim, hidden, 2 * layers},       // k, v
                {intermediate, hidden, 2 * layers}, // gate, up
                {hidden, intermediate, layers},     // down
                {vocab, hidden, tied_embeddings ? 1 : 2}};
  m.vectors = {{hidden, 2 * layers + 1}};
  return m;
}

inline std::vector<std::string_view> plan_model::preset_names() {
  return {"1b", "7b", "13b", "70b"};
}

inline plan_model plan_model::preset(std::string_view name) {
  if (name == "1b") { // LLaMA-3.2-1B: grouped-query attention, tied embeddings
    return transformer("1b", 16, 2048, 8192, 128256, 512, true);
  }
  if (name == "7b") { // LLaMA-2 7B
    return transformer("7b", 32, 4096, 11008, 32000, 4096, false);
  }
  if (name == "13b") {
    return transformer("13b", 40, 5120, 13824, 32000, 5120, false);
  }
  if (name == "70b") { // grouped-query attention: 8 KV heads of 128
    return transformer("70b", 80, 8192, 28672, 32000, 1024, false);
  }
  detail::fail_argument("zenflow::plan_model::preset", "name",
                        "must be one of 1b, 7b, 13b, 70b, got '" + std::string(name) + "'");
}

inline plan_model plan_model::uniform(double params, std::int64_t layers, std::int64_t hidden) {
  detail::require(std::isfinite(params) && params >= 1, "zenflow::plan_model::uniform", "params",
                  "must be >= 1");
  detail::require(layers >= 1, "zenflow::plan_model::uniform", "layers", "must be >= 1");
  detail::require(hidden >= 1, "zenflow::plan_model::uniform", "hidden", "must be >= 1");
  const double len = std::ceil(params / (static_cast<double>(layers) * static_cast<double>(hidden)));
  detail::require(len <= 1e12, "zenflow::plan_model::uniform", "params", "is too large for these matrices");
  plan_model m;
  m.name = "uniform";
  m.matrices = {{hidden, static_cast<std::int64_t>(len), layers}};
  return m;
}

inline plan_config plan_config::of(const config& c) noexcept {
  plan_config p;
  p.mode = c.mode;
  p.topk_ratio = c.topk_ratio;
  p.update_interval = c.update_interval > 0 ? c.update_interval : c.min_update_interval;
  p.moments = static_cast<plan_moments>(c.host_moments); // the same three, in the same order
  p.accumulate =
      c.accumulate == accumulation_site::device ? plan_accumulation::device : plan_accumulation::host;
  p.upload = c.upload;
  p.ring_slot_bytes = c.ring_slot_bytes;
  p.ring_slots = c.ring_slots;
  p.overlap_step = c.overlap_step;
  p.reduce_bucket_bytes = c.reduce_bucket_bytes;
  p.reduce_in_place = c.reduce_in_place;
  p.shard_state_headroom = c.shard_state_headroom;
  p.host_accumulators = c.host_accumulators;
  return p;
}

inline pipeline_bound_value pipeline_bound(const pipeline_terms& t) noexcept {
  const std::pair<double, std::string_view> terms[] = {{t.compute, "compute"},
                                                       {t.d2h, "d2h"},
                                                       {t.h2d, "h2d"},
                                                       {t.host_window, "host_window/S"},
                                                       {t.accumulate, "accumulate"}};
  const auto* it = std::max_element(std::begin(terms), std::end(terms),
                                    [](const auto& a, const auto& b) { return a.first < b.first; });
  return {it->first, it->second};
}

inline std::string_view to_string(plan_moments v) noexcept {
  switch (v) {
  case plan_moments::bf16:
    return "bf16";
  case plan_moments::int8:
    return "int8";
  case plan_moments::fp32:
    break;
  }
  return "fp32";
}

inline std::string_view to_string(plan_accumulation v) noexcept {
  return v == plan_accumulation::device ? "device" : "host";
}

namespace detail {

/// Host bytes per stored moment (one of m, v).
inline double plan_moment_bytes(const plan_config& c) noexcept {
  switch (c.moments) {
  case plan_moments::bf16:
    return 2.0;
  case plan_moments::int8:
    return 1.0 + 4.0 / static_cast<double>(c.int8_block);
  case plan_moments::fp32:
    break;
  }
  return 4.0;
}

/// Host memory bytes a window's AdamW reads and writes per element: the window's gradient sum
/// (fp32), master and moments read; master, moments and the new working-precision weight written
/// (the accumulator is left as it is: the next window's first step writes it, window_acc::keep).
inline double plan_window_bytes(const plan_config& c, double elem_bytes) noexcept {
  const double mb = plan_moment_bytes(c);
  return 4.0 + (4.0 + 2.0 * mb) + (4.0 + 2.0 * mb) + elem_bytes;
}

/// Host memory bytes one step's accumulation reads and writes per element: the landed gradient
/// (working precision) read, the fp32 accumulator read and written.
inline double plan_accumulate_bytes(double elem_bytes) noexcept {
  return elem_bytes + 8.0;
}

inline void plan_validate(const plan_model& model, const plan_hardware& hw, const plan_config& cfg) {
  constexpr std::string_view fn = "zenflow::plan";
  require(!model.matrices.empty() || !model.vectors.empty(), fn, "model", "has no parameters");
  require(model.elem_bytes == 2 || model.elem_bytes == 4, fn, "model",
          "elem_bytes must be 2 (bf16, fp16) or 4 (fp32), got " + std::to_string(model.elem_bytes));
  for (const auto& m : model.matrices) {
    require(m.channels >= 1 && m.channel_len >= 1 && m.count >= 1, fn, "model",
            "has a matrix with a non-positive channels, channel_len or count");
  }
  for (const auto& v : model.vectors) {
    require(v.elements >= 1 && v.count >= 1, fn, "model",
            "has a vector with a non-positive elements or count");
  }
  const auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  require(positive(hw.host_bytes_per_s), fn, "hardware", "host_bytes_per_s must be positive");
  require(positive(hw.pcie_bytes_per_s), fn, "hardware", "pcie_bytes_per_s must be positive");
  require(positive(hw.step_s), fn, "hardware", "step_s must be positive");
  require(std::isfinite(hw.host_memory_bytes) && hw.host_memory_bytes >= 0, fn, "hardware",
          "host_memory_bytes must be >= 0 (0: not checked)");
  require(std::isfinite(hw.device_memory_bytes) && hw.device_memory_bytes >= 0, fn, "hardware",
          "device_memory_bytes must be >= 0 (0: not checked)");
  require(hw.gpus >= 1, fn, "hardware", "gpus must be >= 1");
  require(cfg.topk_ratio >= 0 && cfg.topk_ratio <= 1, fn, "config", "topk_ratio must be in [0, 1]");
  require(cfg.update_interval >= 1, fn, "config", "update_interval must be >= 1");
  require(cfg.ring_slot_bytes >= 4096 && cfg.ring_slot_bytes <= (std::int64_t{1} << 30) &&
              cfg.ring_slot_bytes % 256 == 0,
          fn, "config", "ring_slot_bytes must be in [4 KiB, 1 GiB] and a multiple of 256");
  require(cfg.ring_slots == 0 || (cfg.ring_slots >= 2 && cfg.ring_slots <= 1024), fn, "config",
          "ring_slots must be 0 (auto) or in [2, 1024]");
  require(cfg.int8_block >= 1, fn, "config", "int8_block must be >= 1");
  require(cfg.reduce_bucket_bytes >= 256 && cfg.reduce_bucket_bytes < (std::int64_t{1} << 31) &&
              cfg.reduce_bucket_bytes % 4 == 0,
          fn, "config", "reduce_bucket_bytes must be a multiple of 4 in [256, 2^31)");
  require(std::isfinite(cfg.shard_state_headroom) && cfg.shard_state_headroom >= 0 &&
              cfg.shard_state_headroom <= 100,
          fn, "config", "shard_state_headroom must be in [0, 100]");
  if (hw.gpus > 1 && !cfg.sharded) {
    for (const auto& m : model.matrices) {
      require(m.channel_len * 4 <= cfg.reduce_bucket_bytes, fn, "config",
              "reduce_bucket_bytes is smaller than one row in fp32 (" + std::to_string(m.channel_len) +
                  " x 4 B)");
    }
  }
  require(cfg.host_accumulators == 1 || cfg.host_accumulators == 2, fn, "config",
          "host_accumulators must be 1 or 2, got " + std::to_string(cfg.host_accumulators));
  if (cfg.mode != optimizer_mode::gpu_adamw) {
    for (const auto& m : model.matrices) {
      require(m.channel_len * model.elem_bytes <= cfg.ring_slot_bytes, fn, "config",
              "ring_slot_bytes is smaller than one channel (" + std::to_string(m.channel_len) + " x " +
                  std::to_string(model.elem_bytes) + " B)");
    }
  }
}

/// The model as the engine's parameter registry after initialize() would hold it (device
/// capacity, host side), for resolve_d2h_slots.
inline std::vector<param_info> plan_params(const plan_model& model, const config& e) {
  const bool gpu = e.mode == optimizer_mode::gpu_adamw;
  const dtype t = model.elem_bytes == 4 ? dtype::f32 : dtype::bf16;
  std::vector<param_info> out;
  for (const auto& m : model.matrices) {
    param_info pi;
    pi.matrix = true;
    pi.type = t;
    pi.channels = m.channels;
    pi.channel_len = m.channel_len;
    pi.ld = m.channel_len;
    pi.device_capacity = pi.matrix_capacity(e);
    pi.host_side = !gpu;
    out.insert(out.end(), static_cast<std::size_t>(m.count), pi);
  }
  for (const auto& v : model.vectors) {
    param_info pi;
    pi.type = t;
    pi.channels = 1;
    pi.channel_len = v.elements;
    pi.ld = v.elements;
    pi.device_capacity = e.mode == optimizer_mode::offload_sync ? 0 : 1;
    pi.device_dense = pi.device_capacity == 1;
    pi.host_side = e.mode == optimizer_mode::offload_sync;
    out.insert(out.end(), static_cast<std::size_t>(v.count), pi);
  }
  return out;
}

/// Data parallel: every rank's GPU bytes from the one-rank figures in `r.device`
/// (plan_parallel.hpp), `r.device` the largest of each term.
inline void plan_parallel_plan(plan_result& r,
                               const std::vector<param_info>& params,
                               const std::vector<d2h_slots>& per_rank,
                               const plan_config& cfg,
                               double eb,
                               double slot,
                               int gpus) {
  if (gpus <= 1 && !cfg.sharded) {
    return;
  }
  plan_parallel_settings ps;
  ps.ranks = gpus;
  ps.sharded = cfg.sharded;
  ps.gpu_adamw = cfg.mode == optimizer_mode::gpu_adamw;
  ps.whole_window = cfg.upload == upload_policy::whole_window;
  ps.elem_bytes = eb;
  ps.bucket_bytes = static_cast<std::size_t>(cfg.reduce_bucket_bytes);
  ps.in_place = cfg.reduce_in_place;
  ps.headroom = cfg.shard_state_headroom;
  ps.slot_bytes = static_cast<std::size_t>(cfg.ring_slot_bytes);
  const auto dp = plan_data_parallel_device(params, ps);
  const plan_device_bytes one = r.device;
  plan_device_bytes most{};
  const auto up = [](double& a, double b) { a = std::max(a, b); };
  for (std::size_t q = 0; q < dp.size(); ++q) {
    plan_device_bytes d = one;
    const auto& x = dp[q];
    d.staging = static_cast<double>(per_rank[std::min(q, per_rank.size() - 1)].staging) * slot;
    d.scratch += x.scratch;
    d.reduction = x.reduction;
    if (cfg.sharded) { // its shard-sized buffers (the host side is owner_partition's)
      d.weights_and_grads = x.weights_and_grads;
      d.selected_state = x.selected_state;
      d.upload = x.upload + (cfg.upload == upload_policy::chunk_ring ? slot : 0.0);
    }
    r.device_by_rank.push_back(d);
    up(most.weights_and_grads, d.weights_and_grads);
    up(most.selected_state, d.selected_state);
    up(most.vector_state, d.vector_state);
    up(most.staging, d.staging);
    up(most.upload, d.upload);
    up(most.scratch, d.scratch);
    up(most.accumulators, d.accumulators);
    up(most.reduction, d.reduction);
  }
  r.device = most;
  if (!cfg.sharded && !ps.gpu_adamw) { // ZeRO-2: every rank's selection staging (NCCL's)
    r.host.staging = static_cast<double>(gpus) * owner_host_staging(params, ps.bucket_bytes, true);
  }
}

/// DeepSpeed's bytes for the same model over `N` GPUs of one node (docs/planning.md, "DeepSpeed
/// beside zenflow"). ZeRO-Offload: DeepSpeed's estimator for ZeRO-2 with the optimizer on the CPU
/// (estimate_zero2_model_states_mem_needs, documented in its memory guide) at an
/// additional_buffer_factor of 1: per GPU 2 B a parameter (its fp16 weights; gradients pass through
/// its reduce buckets), per node max(4 N, 16) B (fp32 master, gradient partition, m, v; 4 B a GPU
/// when that is more). ZenFlow (zenflow_stage_1_and_2.py, ZenFlowSelectiveAdamW, from its source):
/// the GPU adds for the selected share r of every matrix its m and v in the weights' dtype, the
/// selected gradient and a copy of the selected weights (8 r B, 2-byte weights; 4 r with its
/// `offload`, not modelled); the host with overlap_step keeps two fp32 gradient buffers, a stale
/// fp32 master and two sets of m and v (32 B), else ZeRO-Offload's 16.
inline void plan_deepspeed(plan_result& r, const plan_config& cfg, double N) {
  const double P = r.params;
  r.deepspeed_offload_device = 2.0 * P;
  r.deepspeed_offload_host = std::max(4.0 * N, 16.0) * P;
  r.deepspeed_zenflow_device = (2.0 + 8.0 * cfg.topk_ratio) * P;
  r.deepspeed_zenflow_host = (cfg.overlap_step ? 32.0 : 16.0) * P;
}

} // namespace detail

inline plan_result plan(const plan_model& model, const plan_hardware& hw, const plan_config& cfg) {
  detail::plan_validate(model, hw, cfg);
  config e;
  e.mode = cfg.mode;
  e.topk_ratio = cfg.topk_ratio;
  e.ring_slot_bytes = cfg.ring_slot_bytes;
  e.ring_slots = cfg.ring_slots;
  e.upload = cfg.upload;
  const bool zen = cfg.mode == optimizer_mode::zenflow;
  const bool sync = cfg.mode == optimizer_mode::offload_sync;
  const bool gpu_only = cfg.mode == optimizer_mode::gpu_adamw;
  const bool device_acc = zen && cfg.accumulate == plan_accumulation::device;
  const auto params = detail::plan_params(model, e);
  const auto slot = static_cast<double>(cfg.ring_slot_bytes);
  // Per rank (data parallel over hw.gpus: each rank's block); the largest is one GPU's staging.
  const auto per_rank = detail::resolve_rank_d2h_slots(
      e, params, static_cast<std::size_t>(cfg.ring_slot_bytes), static_cast<int>(hw.gpus));
  detail::d2h_slots slots{};
  double ring_slots_node = 0;
  for (const auto& rs : per_rank) {
    slots.ring = std::max(slots.ring, rs.ring);
    slots.staging = std::max(slots.staging, rs.staging);
    ring_slots_node += static_cast<double>(rs.ring);
  }
  const double eb = static_cast<double>(model.elem_bytes);
  const double mb = detail::plan_moment_bytes(cfg);
  const auto N = static_cast<double>(hw.gpus);
  const double S = zen ? static_cast<double>(cfg.update_interval) : 1.0;
  // One rank keeps exactly the unselected rows in its accumulators; a data-parallel rank (or a
  // shard) its block's capacity, the whole block (engine_core::initialize).
  const bool blocks = hw.gpus > 1 || cfg.sharded;
  const bool overlap = zen && cfg.overlap_step;
  const double accumulators = overlap && !device_acc && cfg.host_accumulators == 2 ? 2.0 : 1.0;
  // whole_window: the job's weights go up through the upload stage's pinned chunks, one stage
  // per rank (the modelled node's ranks gather on their devices); chunk_ring reads a host buffer
  // at the boundary.
  const bool staged = cfg.upload == upload_policy::whole_window;

  plan_result r;
  r.config = cfg;
  r.params = model.params();
  r.ring_slots = static_cast<std::int64_t>(slots.ring);
  r.staging_slots = static_cast<std::int64_t>(slots.staging);
  plan_host_bytes& host = r.host;
  plan_device_bytes& dev = r.device;
  plan_traffic& tr = r.traffic;
  dev.weights_and_grads = 2.0 * eb * r.params;
  double sets = 1, lists = 1, max_cap_elems = 1, max_rows = 1, mass_rows = 0, dense = 0;
  double unselected = 0; // elements whose gradients go to the host each step (all ranks)
  for (const auto& pi : params) {
    const auto cap = static_cast<double>(pi.device_capacity);
    const auto channels = static_cast<double>(pi.channels);
    const auto len = static_cast<double>(pi.channel_len);
    const double n = channels * len;
    (pi.matrix ? dev.selected_state : dev.vector_state) += cap * len * 12.0 + cap * 8.0;
    dev.scratch += (pi.matrix ? channels : 1.0) * 4.0; // scores
    dev.scratch += pi.matrix ? channels * 8.0 : 0.0;   // a selection's fp64 rescans (topk_item::wide)
    if (pi.matrix) {
      sets += cap;
    }
    if (pi.device_dense) {
      dense += 1;
    } else if (pi.device_capacity > 0) {
      mass_rows += cap;
    }
    max_rows = std::max(max_rows, channels);
    if (!pi.host_side) {
      continue;
    }
    max_cap_elems = std::max(max_cap_elems, cap * len);
    lists += 3.0 * cap + channels;
    dev.scratch += channels * 4.0; // host set
    if (cfg.upload == upload_policy::whole_window) {
      dev.upload += n * eb;
    }
    // Host: the full-size state (partitioned over the ranks: the node holds one copy), the
    // accumulators, and each rank's upload buffer.
    const double q8 = cfg.moments == plan_moments::int8; // int8: two fp32 scales per 64 of a row
    host.state += q8 * channels * 8.0 * std::ceil(len / static_cast<double>(cfg.int8_block)) +
                  n * (4.0 + 2.0 * (q8 ? 1.0 : mb)) + channels * 4.0;
    const double rows = zen ? (channels - cap) * len : n;
    // The accumulators hold the host set's rows: one rank's are the unselected rows; a block's
    // capacity is all of its rows (the node: every row once). Device accumulation: the window
    // sum lands in one such buffer, and the device sums the host set's rows in two sums (the
    // closed window's goes down beside the next).
    host.accumulators += (blocks ? n : rows) * 4.0 * accumulators;
    if (device_acc) {
      dev.accumulators += rows * 8.0;
    }
    if (!staged) {
      // chunk_ring: one rank keeps every host-set row's new weights; over a device communicator
      // (NCCL) each rank its share only: one copy on the node.
      host.upload += n * eb;
    }
    unselected += rows;
  }
  dev.vector_state += std::max(dense, 1.0) * 4.0; // the vectors' update counts
  dev.accumulators += device_acc ? 4.0 : 0.0;     // the window's count of good steps
  dev.upload += cfg.upload == upload_policy::chunk_ring ? slot : 0.0;
  dev.staging = static_cast<double>(slots.staging) * slot;
  dev.scratch += (sets + lists) * 4.0 + 3.0 * max_cap_elems * 4.0 + max_rows * 4.0 + mass_rows * 4.0;
  host.ring = ring_slots_node * slot;
  host.upload += staged && !gpu_only ? N * static_cast<double>(detail::upload_stage_chunks) * slot : 0.0;
  detail::plan_parallel_plan(r, params, per_rank, cfg, eb, slot, static_cast<int>(hw.gpus));
  detail::plan_deepspeed(r, cfg, N);

  // Per step: over one GPU's link its block's share (docs/data-parallel.md); through the host's
  // memory every rank's.
  tr.d2h_per_step = unselected * (device_acc ? 4.0 / S : eb) / N;
  tr.h2d_per_step = unselected * eb / S / N;
  tr.host_window_per_step = unselected * detail::plan_window_bytes(cfg, eb) / S;
  tr.accumulate_per_step = device_acc ? 0.0 : unselected * detail::plan_accumulate_bytes(eb);

  pipeline_terms& t = r.terms;
  t.compute = hw.step_s;
  t.d2h = tr.d2h_per_step / hw.pcie_bytes_per_s;
  t.h2d = tr.h2d_per_step / hw.pcie_bytes_per_s;
  t.host_window = tr.host_window_per_step / hw.host_bytes_per_s;
  if (overlap && !device_acc && cfg.host_accumulators == 1) {
    // One buffer: the next window's first step waits until the job has read it, so the job
    // (which keeps pace with its staged copies up) has about one step, not S.
    t.host_window = std::max(t.host_window * S, staged ? t.h2d * S : 0.0);
  }
  t.accumulate = tr.accumulate_per_step / hw.host_bytes_per_s;
  r.bound = pipeline_bound(t);
  const double stages = std::max({t.d2h, t.h2d, t.host_window, t.accumulate});
  r.predicted_step_s = sync ? t.compute + t.d2h + t.h2d + t.host_window + t.accumulate : r.bound.value;
  r.stall_free = zen ? stages <= t.compute * (1.0 + 1e-12) : !sync;
  if (zen && !cfg.overlap_step) {
    // Synchronous windows (the engine's default since 2026-11-29, docs/accuracy.md): the step that
    // closes a window waits for the window's host AdamW and its copy up, so per step their time
    // over S adds to the stages that still overlap the compute (the copies down, the accumulation).
    r.predicted_step_s = std::max({t.compute, t.d2h, t.accumulate}) + t.host_window + t.h2d;
    r.stall_free = false;
  }
  r.fits_host = hw.host_memory_bytes == 0 || host.total() <= hw.host_memory_bytes;
  r.fits_device = hw.device_memory_bytes == 0 || dev.total() <= hw.device_memory_bytes;
  if (zen && cfg.moments == plan_moments::int8 && cfg.int8_block != 64) {
    r.not_implemented.push_back("int8 host moments with an fp32 scale per " + std::to_string(cfg.int8_block) +
                                " elements (the engine's blocks are 64)");
  }
  if (device_acc && (N > 1 || cfg.sharded)) {
    r.not_implemented.push_back("device accumulation with data parallel (modelled: the engine runs it on "
                                "one rank, the window's fp32 sum down once per window)");
  }
  return r;
}

inline plan_suggestion
suggest(const plan_model& model, const plan_hardware& hw, const plan_config& cfg, std::int64_t max_interval) {
  detail::require(max_interval >= 1, "zenflow::suggest", "max_interval", "must be >= 1");
  plan_suggestion out;
  out.result = plan(model, hw, cfg);
  if (cfg.mode != optimizer_mode::zenflow) {
    out.found = out.result.feasible();
    out.change = out.found ? "none" : "no change of S, moments or accumulation applies to this mode";
    return out;
  }
  struct choice {
    plan_moments moments;
    plan_accumulation accumulate;
    upload_policy upload;
    bool in_place;
    bool sharded;
  };
  // The changes that cost no device memory first (the upload through the ring, bf16 moments, then
  // int8), then device accumulation (8 B per unselected element on the device) with each; over
  // several GPUs, ZeRO-2's mean written into the gradients (reduce_in_place) before each, and
  // ZeRO-3 (the trainer gathers and scatters the shards) after all of them.
  const bool several = hw.gpus > 1;
  std::vector<choice> tries;
  for (const bool z3 : {cfg.sharded, cfg.sharded || several}) {
    for (const plan_accumulation a : {cfg.accumulate, plan_accumulation::device}) {
      for (const plan_moments m : {cfg.moments, plan_moments::bf16, plan_moments::int8}) {
        for (const upload_policy u : {cfg.upload, upload_policy::chunk_ring}) {
          for (const bool ip : {cfg.reduce_in_place, cfg.reduce_in_place || several}) {
            const bool seen = std::any_of(tries.begin(), tries.end(), [&](const choice& c) {
              return c.moments == m && c.accumulate == a && c.upload == u && c.in_place == ip &&
                     c.sharded == z3;
            });
            if (!seen && static_cast<int>(m) >= static_cast<int>(cfg.moments)) {
              tries.push_back({m, a, u, ip, z3});
            }
          }
        }
      }
    }
  }
  // What the engine implements first; then, if nothing else fits, what it only models.
  for (const bool modelled : {false, true}) {
    for (const auto& [m, a, u, ip, z3] : tries) {
      plan_config c = cfg;
      c.moments = m;
      c.accumulate = a;
      c.upload = u;
      c.reduce_in_place = ip;
      c.sharded = z3;
      for (std::int64_t s = 1; s <= max_interval; ++s) {
        c.update_interval = s;
        plan_result p = plan(model, hw, c);
        if (!p.feasible() || p.not_implemented.empty() == modelled) {
          continue;
        }
        std::string change = s == cfg.update_interval ? std::string() : "S = " + std::to_string(s);
        const auto also = [&](const std::string& what) { change += (change.empty() ? "" : ", ") + what; };
        if (m != cfg.moments) {
          also("moments " + std::string(to_string(m)));
        }
        if (u != cfg.upload) {
          also("upload " + std::string(to_string(u)));
        }
        if (a != cfg.accumulate) {
          also("accumulate " + std::string(to_string(a)));
        }
        if (ip != cfg.reduce_in_place) {
          also("reduce_in_place");
        }
        if (z3 != cfg.sharded) {
          also("ZeRO-3");
        }
        out.found = true;
        out.change = change.empty() ? "none" : change;
        out.result = std::move(p);
        return out;
      }
    }
  }
  out.change = "none found (S up to " + std::to_string(max_interval) +
               ", every moment precision, upload and accumulation" + (several ? ", ZeRO-2 and ZeRO-3)" : ")");
  return out;
}

ZF_NAMESPACE_END
