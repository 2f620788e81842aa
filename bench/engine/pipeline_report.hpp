// The pipeline benchmark's parts shared by its two programs (issue 11): zf_bench_pipeline, the
// engine on the emulated device's timing model (pipeline.cpp), and zf_bench_pipeline_cuda, the
// engine on a GPU (pipeline_cuda.cu). Both run the same modes over the same model shape, time
// the same loop (a compute of C ms in a forward and one backward op per matrix, step(), a wait for
// the stream), and report the same columns against the same bound, so that their tables and
// JSON files compare line for line (plot_pipeline.py reads either). Their command line and modes:
// pipeline_options.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/plan.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/optim/channels.hpp>

#include "pipeline_options.hpp"

namespace zf_bench_pipeline {

using clock_type = std::chrono::steady_clock;
using bf16 = zenflow::bfloat16;

inline double median(std::vector<double> v) {
  if (v.empty()) {
    return 0.0;
  }
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct result {
  mode_spec spec;
  double step_ms_median = 0, step_ms_mean = 0, step_ms_min = 0, step_ms_max = 0;
  double stall_share = 0, stall_ms_per_step = 0;
  double d2h_bytes_per_step = 0, h2d_bytes_per_step = 0;
  double host_window_ms_per_step = 0, accumulate_ms = 0;
  double bound_ms = 0, ratio_to_bound = 0;
  // A second bound, labelled as such (not issue 11's): C + the device's own kernel time after the
  // backward (measured in this run) in place of C.
  double kernel_ms = 0, kernel_train_ms = 0, bound_kernels_ms = 0, ratio_to_bound_kernels = 0;
  std::string bound_kernels_term;
  // Device memory per parameter: the user's bf16 weights and gradients (4 B) plus every buffer the
  // engine owns on the device; dense AdamW on the GPU holds 16 B (4 + fp32 master, m, v).
  double device_bytes_per_param = 0;
  // The same read off the device (cudaMemGetInfo: what the engine took, after the warm-up steps);
  // NaN where there is no device to ask (the emulated one).
  double device_bytes_per_param_measured = std::nan("");
  // Host optimizer state per parameter (fp32 master + m, v + counts: ~12 B, ~8 B with bf16 moments)
  // and the host AdamW's time per host job (a window, or an offload_sync step).
  double host_state_bytes_per_param = 0, host_window_ms_per_job = 0;
  // Everything the engine holds on the host per parameter (stats().memory.host_total(): state,
  // accumulators, pinned ring, upload buffer, landing), the "host B/p" column.
  double host_bytes_per_param = 0;
  // The process's resident memory (/proc/self/statm) before the engine was built and after the
  // warm-up steps, against what the engine counts (host_total(), plus device_total() where the
  // device's memory is this process's: the emulated device). NaN where not measured.
  double rss_before_bytes = std::nan(""), rss_at_warm_bytes = std::nan(""), rss_counted_bytes = std::nan("");
  bool device_memory_in_rss = false;
  // Resident memory the engine does not count but the device holds for it (the emulated device's
  // quarantine of freed memory); the check allows it on top of the relative tolerance.
  double rss_allowance_bytes = 0;
  // The planner's prediction (zenflow::plan) for this mode from the device's step C + K, B and the
  // host bandwidth the standalone accumulation reached in this run; checked against the mean step
  // for ZenFlow at a fixed S (prediction_checked), flagged past 10%.
  zenflow::plan_result plan{};
  double host_bytes_per_s = 0;
  bool prediction_checked = false;
  zenflow::memory_usage memory{}; // the engine's buffers, by kind
  std::string bound_term;
  // The D2H tail: from the end of a step's backward to the end of that step's last D2H copy
  // (median over the timed steps), against one layer's backward. NaN where not measured.
  double d2h_tail_ms = std::nan(""), layer_backward_ms = 0;
  std::int64_t selections = 0, mass_drop_selections = 0; // in the timed steps
  std::vector<double> step_ms;
  std::vector<double> stall_ms;
};

/// Seconds that one step's accumulation takes on the host: acc += coef * slot over the unselected
/// rows of every matrix (bf16 slots), with `threads` threads (median of 5).
inline double time_accumulation(std::int64_t hidden, int layers, double r, unsigned threads) {
  const std::int64_t k =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(r * static_cast<double>(hidden)));
  const std::int64_t rows = hidden - k;
  // One accumulator and one slot run per matrix, as in the engine (a model's worth: from DRAM).
  std::vector<std::vector<float>> acc(static_cast<std::size_t>(layers));
  std::vector<std::vector<bf16>> slot(static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    acc[static_cast<std::size_t>(l)].assign(static_cast<std::size_t>(hidden * hidden), 0.0f);
    slot[static_cast<std::size_t>(l)].assign(static_cast<std::size_t>(rows * hidden),
                                             zenflow::from_float<bf16>(0.5f));
  }
  std::vector<std::int32_t> idx(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    idx[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + k);
  }
  std::unique_ptr<zenflow::worker_pool> pool;
  if (threads > 1) {
    pool = std::make_unique<zenflow::worker_pool>(threads);
  }
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = clock_type::now();
    for (int l = 0; l < layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      if (zenflow::host::accumulate_channels<bf16>(acc[li].data(), hidden, hidden, slot[li].data(),
                                                   idx.data(), rows, 1.0f, pool.get()) != cudaSuccess) {
        std::fputs("accumulate_channels failed\n", stderr);
        std::exit(1);
      }
    }
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(t);
}

/// The process's resident bytes (/proc/self/statm); NaN where it cannot be read.
inline double rss_bytes() {
  std::ifstream f("/proc/self/statm");
  double size = 0, resident = 0;
  if (!(f >> size >> resident)) {
    return std::nan("");
  }
  return resident * 4096.0;
}

/// The modelled pass's two durations: the forward, and one matrix's backward.
struct pass_times {
  std::chrono::nanoseconds forward, layer_backward;
};
inline pass_times pass_times_of(const options& o) {
  return {
      std::chrono::nanoseconds(static_cast<std::int64_t>(o.compute_ms * (1.0 - o.backward_share) * 1e6)),
      std::chrono::nanoseconds(static_cast<std::int64_t>(o.compute_ms * o.backward_share / o.layers * 1e6))};
}

/// The timed loop, the same on every device: per step a modelled forward, one backward op per
/// matrix (each announced with grad_ready() when asked), step(), and a wait for the stream (a
/// trainer reading its loss). `dev` supplies what differs: compute(stream, ns, name),
/// sync_stream(stream), on_timed_start() (the first timed step is next), after_backward(stream)
/// and after_step(stream) (marks on the stream). Fills the step times and the stats-derived
/// columns of `res`.
template <class Engine, class Device>
void timed_steps(const options& o,
                 Engine& zf,
                 const std::vector<zenflow::param_id>& ids,
                 cudaStream_t stream,
                 Device& dev,
                 double params,
                 result& res) {
  const pass_times pass = pass_times_of(o);
  res.layer_backward_ms = static_cast<double>(pass.layer_backward.count()) * 1e-6;
  zenflow::stats at_warm{};
  clock_type::time_point warm_t0{};
  for (int t = 0; t < o.warmup + o.steps; ++t) {
    if (t == o.warmup) {
      if (!std::isnan(res.rss_before_bytes)) {
        dev.sync_stream(stream);
        res.rss_at_warm_bytes = rss_bytes();
      }
      dev.on_timed_start();
      at_warm = zf.stats();
      warm_t0 = clock_type::now();
    }
    const auto t0 = clock_type::now();
    dev.compute(stream, pass.forward, "forward");
    if (o.release_by_caller) {
      zf.release_gradients(stream); // the backward writes the gradients next
    }
    for (int l = o.layers - 1; l >= 0; --l) {
      dev.compute(stream, pass.layer_backward, "backward");
      if (o.grad_ready) {
        zf.grad_ready(ids[static_cast<std::size_t>(l)], stream);
      }
    }
    dev.after_backward(stream);
    const zenflow::step_report rep = zf.step(1e-4f, stream);
    dev.after_step(stream);
    dev.sync_stream(stream); // the trainer reads its loss
    const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (t >= o.warmup) {
      res.step_ms.push_back(ms);
      res.stall_ms.push_back(rep.stall_s * 1e3);
    }
  }
  const double wall = std::chrono::duration<double>(clock_type::now() - warm_t0).count();
  const zenflow::stats& s = zf.stats();
  const double steps = o.steps;
  res.step_ms_median = median(res.step_ms);
  res.step_ms_mean = wall * 1e3 / steps;
  res.step_ms_min = *std::min_element(res.step_ms.begin(), res.step_ms.end());
  res.step_ms_max = *std::max_element(res.step_ms.begin(), res.step_ms.end());
  res.stall_ms_per_step = (s.stall_s - at_warm.stall_s) * 1e3 / steps;
  res.stall_share = (s.stall_s - at_warm.stall_s) / wall;
  res.d2h_bytes_per_step = static_cast<double>(s.d2h_bytes - at_warm.d2h_bytes) / steps;
  res.h2d_bytes_per_step = static_cast<double>(s.h2d_bytes - at_warm.h2d_bytes) / steps;
  res.host_window_ms_per_step = (s.host_window_s - at_warm.host_window_s) * 1e3 / steps;
  res.device_bytes_per_param = (4.0 * params + static_cast<double>(s.memory.device_total())) / params;
  res.memory = s.memory;
  res.selections = s.selections - at_warm.selections;
  res.mass_drop_selections = s.mass_drop_selections - at_warm.mass_drop_selections;
  res.host_state_bytes_per_param = static_cast<double>(s.memory.host_state) / params;
  res.host_bytes_per_param = static_cast<double>(s.memory.host_total()) / params;
  res.rss_counted_bytes =
      static_cast<double>(at_warm.memory.host_total()) +
      (res.device_memory_in_rss ? static_cast<double>(at_warm.memory.device_total()) : 0.0);
  res.host_window_ms_per_job = s.host_jobs > at_warm.host_jobs
                                   ? (s.host_window_s - at_warm.host_window_s) * 1e3 /
                                         static_cast<double>(s.host_jobs - at_warm.host_jobs)
                                   : 0.0;
}

/// Issue 11's pipeline bound max(C, down / B, up / B, host window / S, accumulation), with the
/// wire's measured or modelled bandwidth per direction; beside it the same max with C + K for C
/// (res.kernel_ms, the device's own kernel time after the backward), labelled apart.
inline void set_bounds(result& res,
                       double compute_ms,
                       double down_bytes_per_s,
                       double up_bytes_per_s,
                       bool host_accumulates = true) {
  zenflow::pipeline_terms terms{compute_ms, res.d2h_bytes_per_step / down_bytes_per_s * 1e3,
                                res.h2d_bytes_per_step / up_bytes_per_s * 1e3, res.host_window_ms_per_step,
                                host_accumulates ? res.accumulate_ms : 0.0};
  const zenflow::pipeline_bound_value b = zenflow::pipeline_bound(terms);
  res.bound_ms = b.value;
  res.bound_term = std::string(b.term);
  res.ratio_to_bound = res.step_ms_mean / res.bound_ms;
  terms.compute = compute_ms + res.kernel_ms;
  const zenflow::pipeline_bound_value k = zenflow::pipeline_bound(terms);
  res.bound_kernels_ms = k.value;
  res.bound_kernels_term = k.term == "compute" ? std::string("compute+kernels") : std::string(k.term);
  res.ratio_to_bound_kernels = res.step_ms_mean / res.bound_kernels_ms;
}

/// The benchmark's model for the planner: `layers` square bf16 matrices of side `hidden`.
inline zenflow::plan_model plan_model_of(const options& o, std::int64_t hidden) {
  return zenflow::plan_model::uniform(static_cast<double>(hidden * hidden) * o.layers, o.layers, hidden);
}

/// The planner's view of one mode (its settings as the engine got them; S "auto" planned at
/// Zen-auto's shortest window, not checked), with this run's C, B and host bandwidth.
inline zenflow::plan_result plan_of(const options& o,
                                    const mode_spec& spec,
                                    std::int64_t hidden,
                                    double compute_ms,
                                    double pcie_bytes_per_s,
                                    double host_bytes_per_s) {
  zenflow::plan_hardware hw;
  hw.host_bytes_per_s = host_bytes_per_s;
  hw.pcie_bytes_per_s = pcie_bytes_per_s;
  hw.step_s = compute_ms * 1e-3;
  return zenflow::plan(plan_model_of(o, hidden), hw, zenflow::plan_config::of(config_of(o, spec)));
}

/// Fills the planner's columns of `res` for a device step of `compute_ms`: the host bandwidth is the one the
/// standalone accumulation reached (its bytes, from the planner, over its time; the planner's host terms are
/// bytes over that), the prediction is checked for ZenFlow at a fixed S.
inline void set_prediction(
    result& res, const options& o, std::int64_t hidden, double compute_ms, double pcie_bytes_per_s) {
  options host_acc = o; // the standalone accumulation's bytes are the host mode's (device: none)
  host_acc.accumulate = zenflow::accumulation_site::host;
  const auto first = plan_of(host_acc, res.spec, hidden, compute_ms, pcie_bytes_per_s, 1.0);
  res.host_bytes_per_s = res.accumulate_ms > 0
                             ? first.traffic.accumulate_per_step / (res.accumulate_ms * 1e-3)
                             : 1e12; // gpu_adamw: no host work
  res.plan = plan_of(o, res.spec, hidden, compute_ms, pcie_bytes_per_s, res.host_bytes_per_s);
  res.prediction_checked = res.spec.mode == zenflow::optimizer_mode::zenflow && res.spec.S > 0;
}

/// The mean step over the planner's predicted step.
inline double ratio_to_prediction(const result& r) {
  return r.step_ms_mean / (r.plan.predicted_step_s * 1e3);
}

/// The columns after a mode's run, the same on every device: the standalone host accumulation of
/// one step (offload modes: every channel; ZenFlow: the unselected ones) and the bounds.
inline void finish_result(result& res,
                          const options& o,
                          std::int64_t hidden,
                          unsigned acc_threads,
                          double down_bytes_per_s,
                          double up_bytes_per_s) {
  if (res.spec.mode != zenflow::optimizer_mode::gpu_adamw) {
    const double r = res.spec.mode == zenflow::optimizer_mode::zenflow ? res.spec.r : 0.0;
    res.accumulate_ms = time_accumulation(hidden, o.layers, r, acc_threads) * 1e3;
  }
  // accumulate = device (ZenFlow): no host accumulation in the step; the standalone one is timed
  // still, for the host bandwidth the planner's window term divides by.
  set_bounds(res, o.compute_ms, down_bytes_per_s, up_bytes_per_s,
             o.accumulate == zenflow::accumulation_site::host ||
                 res.spec.mode != zenflow::optimizer_mode::zenflow);
  // The device's step as the planner takes it: C plus the device's own kernel time after the
  // backward, K (measured in this run; microseconds on a GPU, host code on the emulated device).
  set_prediction(res, o, hidden, o.compute_ms + res.kernel_ms, std::min(down_bytes_per_s, up_bytes_per_s));
}

inline void print_table_header() {
  std::printf("%-20s %9s %9s %7s %9s %9s %9s %9s %9s %-13s %7s %7s %8s %9s %8s %7s %9s %9s %9s %7s\n", "mode",
              "median", "mean", "stall%", "down MB", "up MB", "win/S ms", "acc ms", "bound ms", "bound",
              "x bound", "dev B/p", "host B/p", "job ms", "tail ms", "K ms", "bound+K", "x bnd+K", "pred ms",
              "x pred");
}

inline void print_row(const result& r) {
  const double x_pred = ratio_to_prediction(r);
  std::printf("%-20s %9.2f %9.2f %7.2f %9.2f %9.2f %9.2f %9.2f %9.2f %-13s %7.3f %7.2f %8.2f %9.2f %8.2f "
              "%7.2f %9.2f %9.3f %9.2f %6.3f%s\n",
              r.spec.label.c_str(), r.step_ms_median, r.step_ms_mean, 100.0 * r.stall_share,
              r.d2h_bytes_per_step / 1e6, r.h2d_bytes_per_step / 1e6, r.host_window_ms_per_step,
              r.accumulate_ms, r.bound_ms, r.bound_term.c_str(), r.ratio_to_bound, r.device_bytes_per_param,
              r.host_bytes_per_param, r.host_window_ms_per_job, r.d2h_tail_ms, r.kernel_ms,
              r.bound_kernels_ms, r.ratio_to_bound_kernels, r.plan.predicted_step_s * 1e3, x_pred,
              !r.prediction_checked            ? " "
              : std::abs(x_pred - 1.0) <= 0.10 ? " "
                                               : "!");
  std::fflush(stdout);
}

inline std::string json_array(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    s << (i ? "," : "") << v[i];
  }
  s << "]";
  return s.str();
}

/// A number for JSON: NaN (not measured on this device) is null.
inline std::string json_number(double v) {
  if (std::isnan(v)) {
    return "null";
  }
  std::ostringstream s;
  s << v;
  return s.str();
}

/// The planner's prediction and counts for one mode, a JSON object.
inline std::string json_plan(const result& r) {
  const zenflow::plan_result& p = r.plan;
  std::ostringstream s;
  s.precision(10);
  s << "{\"host_bytes_per_s\": " << r.host_bytes_per_s
    << ", \"update_interval\": " << p.config.update_interval
    << ", \"predicted_step_ms\": " << p.predicted_step_s * 1e3 << ", \"bound_term\": \"" << p.bound.term
    << "\", \"terms_ms\": {\"compute\": " << p.terms.compute * 1e3 << ", \"d2h\": " << p.terms.d2h * 1e3
    << ", \"h2d\": " << p.terms.h2d * 1e3 << ", \"host_window\": " << p.terms.host_window * 1e3
    << ", \"accumulate\": " << p.terms.accumulate * 1e3
    << "}, \"d2h_bytes_per_step\": " << p.traffic.d2h_per_step
    << ", \"h2d_bytes_per_step\": " << p.traffic.h2d_per_step
    << ", \"host_bytes\": {\"state\": " << p.host.state << ", \"accumulators\": " << p.host.accumulators
    << ", \"ring\": " << p.host.ring << ", \"upload\": " << p.host.upload
    << "}, \"host_bytes_per_param\": " << p.host_bytes_per_param()
    << ", \"device_engine_bytes\": " << p.device.engine()
    << ", \"stall_free\": " << (p.stall_free ? "true" : "false")
    << ", \"checked\": " << (r.prediction_checked ? "true" : "false")
    << ", \"x_predicted\": " << ratio_to_prediction(r)
    << ", \"within_10pct\": " << (std::abs(ratio_to_prediction(r) - 1.0) <= 0.10 ? "true" : "false") << "}";
  return s.str();
}

/// The settings both programs record, as JSON members (each line ",\n  \"key\": value"), after the
/// program's own (`head`: from "{" to its last member, no trailing comma).
inline std::string json_settings(
    const options& o, std::int64_t hidden, double model_bytes, double compute_ms, unsigned acc_threads) {
  const zenflow::config defaults;
  std::ostringstream out;
  out.precision(10);
  out << ",\n  \"number_digits\": 10,\n  \"matrices\": " << o.layers << ",\n  \"hidden\": " << hidden
      << ",\n  \"params\": " << hidden * hidden * o.layers << ",\n  \"model_bytes\": " << model_bytes
      << ",\n  \"compute_ms\": " << compute_ms << ",\n  \"host_threads\": " << o.host_threads
      << ",\n  \"accumulate_threads\": " << acc_threads
      << ",\n  \"ring_slots\": " << (o.ring_slots > 0 ? o.ring_slots : defaults.ring_slots)
      << ",\n  \"ring_slot_bytes\": "
      << (o.ring_slot_bytes > 0 ? o.ring_slot_bytes : defaults.ring_slot_bytes) << ",\n  \"upload\": \""
      << (o.chunk_ring ? "chunk_ring" : "whole_window") << "\""
      << ",\n  \"grad_ready\": " << (o.grad_ready ? "true" : "false") << ",\n  \"gradient_release\": \""
      << (o.release_by_caller ? "by_caller" : "at_step") << "\""
      << ",\n  \"overlap_step\": " << (o.sync_windows ? "false" : "true")
      << ",\n  \"backward_share\": " << o.backward_share << ",\n  \"select_interval\": " << o.select_interval
      << ",\n  \"mass_drop\": " << o.mass_drop << ",\n  \"host_moments\": \""
      << zenflow::to_string(o.host_moments) << "\",\n  \"host_accumulators\": " << o.host_accumulators
      << ",\n  \"accumulate\": \"" << zenflow::to_string(o.accumulate) << "\""
      << ",\n  \"steps\": " << o.steps << ",\n  \"warmup\": " << o.warmup;
  return out.str();
}

/// gpu_adamw's and offload_sync's results among `results`, where they ran.
struct baselines {
  const result* gpu = nullptr;
  const result* sync = nullptr;
};
inline baselines baselines_of(const std::vector<result>& results) {
  baselines b;
  for (const auto& r : results) {
    b.gpu = r.spec.label == "gpu_adamw" ? &r : b.gpu;
    b.sync = r.spec.label == "offload_sync" ? &r : b.sync;
  }
  return b;
}

/// Writes the JSON file: `head` (the program's members, from "{"), then the shared settings,
/// then one object per mode with its ratios to gpu_adamw and offload_sync when they ran. The
/// programs write it again after each mode, so that a run cut short keeps the modes it finished.
inline void write_json(const std::string& path,
                       const std::string& head,
                       const std::string& settings,
                       const std::vector<result>& results,
                       double model_bytes) {
  const auto [gpu, sync] = baselines_of(results);
  std::ofstream out(path);
  out.precision(10);
  out << head << settings << ",\n  \"modes\": [";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    out << (i ? "," : "") << "\n    {\"label\": \"" << r.spec.label << "\", \"topk_ratio\": " << r.spec.r
        << ", \"update_interval\": " << r.spec.S << ", \"step_ms_median\": " << r.step_ms_median
        << ", \"step_ms_mean\": " << r.step_ms_mean << ", \"step_ms_min\": " << r.step_ms_min
        << ", \"step_ms_max\": " << r.step_ms_max << ", \"stall_share\": " << r.stall_share
        << ", \"stall_ms_per_step\": " << r.stall_ms_per_step
        << ", \"d2h_bytes_per_step\": " << r.d2h_bytes_per_step
        << ", \"h2d_bytes_per_step\": " << r.h2d_bytes_per_step
        << ", \"pcie_model_ratio\": " << (r.d2h_bytes_per_step + r.h2d_bytes_per_step) / model_bytes
        << ", \"host_window_ms_per_step\": " << r.host_window_ms_per_step
        << ", \"accumulate_ms\": " << r.accumulate_ms << ", \"bound_ms\": " << r.bound_ms
        << ", \"bound_term\": \"" << r.bound_term << "\", \"ratio_to_bound\": " << r.ratio_to_bound
        << ", \"kernel_ms_after_backward\": " << r.kernel_ms
        << ", \"kernel_ms_after_backward_training_stream\": " << r.kernel_train_ms
        << ", \"bound_with_kernels_ms\": " << r.bound_kernels_ms << ", \"bound_with_kernels_term\": \""
        << r.bound_kernels_term << "\", \"ratio_to_bound_with_kernels\": " << r.ratio_to_bound_kernels
        << ", \"device_bytes_per_param\": " << r.device_bytes_per_param
        << ", \"device_bytes_per_param_measured\": " << json_number(r.device_bytes_per_param_measured)
        << ", \"d2h_tail_ms\": " << json_number(r.d2h_tail_ms)
        << ", \"layer_backward_ms\": " << r.layer_backward_ms
        << ", \"host_state_bytes_per_param\": " << r.host_state_bytes_per_param
        << ", \"host_bytes_per_param\": " << r.host_bytes_per_param
        << ", \"host_bytes\": {\"state\": " << r.memory.host_state
        << ", \"accumulators\": " << r.memory.host_accumulators << ", \"ring\": " << r.memory.host_ring
        << ", \"upload\": " << r.memory.host_upload << ", \"landing\": " << r.memory.host_landing << "}"
        << ", \"rss_before_bytes\": " << json_number(r.rss_before_bytes)
        << ", \"rss_at_warm_bytes\": " << json_number(r.rss_at_warm_bytes) << ", \"rss_counted_bytes\": "
        << json_number(r.rss_before_bytes > 0 ? r.rss_counted_bytes : std::nan(""))
        << ", \"rss_counts_device\": " << (r.device_memory_in_rss ? "true" : "false")
        << ", \"rss_allowance_bytes\": " << r.rss_allowance_bytes << ", \"plan\": " << json_plan(r)
        << ", \"host_window_ms_per_job\": " << r.host_window_ms_per_job
        << ", \"selections\": " << r.selections << ", \"mass_drop_selections\": " << r.mass_drop_selections
        << ", \"device_bytes\": {\"selected_state\": " << r.memory.device_selected_state
        << ", \"vector_state\": " << r.memory.device_vector_state
        << ", \"staging\": " << r.memory.device_staging << ", \"upload\": " << r.memory.device_upload
        << ", \"scratch\": " << r.memory.device_scratch << ", \"window_sum\": " << r.memory.device_window_sum
        << "}";
    if (gpu != nullptr) {
      out << ", \"x_gpu_adamw\": " << r.step_ms_mean / gpu->step_ms_mean;
    }
    if (sync != nullptr) {
      out << ", \"offload_sync_over_this\": " << sync->step_ms_mean / r.step_ms_mean;
    }
    out << ", \"step_ms\": " << json_array(r.step_ms) << ", \"stall_ms\": " << json_array(r.stall_ms) << "}";
  }
  out << "\n  ]\n}\n";
}

/// The table of each mode's mean step over gpu_adamw's and offload_sync's over it.
inline void print_ratios(const std::vector<result>& results) {
  const auto [gpu, sync] = baselines_of(results);
  if (gpu != nullptr || sync != nullptr) {
    std::printf("%-20s %12s %16s\n", "mode", "x gpu_adamw", "offload_sync / it");
    for (const auto& r : results) {
      std::printf("%-20s %12.3f %16.3f\n", r.spec.label.c_str(),
                  gpu ? r.step_ms_mean / gpu->step_ms_mean : 0.0,
                  sync ? sync->step_ms_mean / r.step_ms_mean : 0.0);
    }
  }
}

/// Runs every standard mode that --only lets through (`run_mode(spec)` gives its result), printing
/// each row as it ends and rewriting the JSON after each; then the ratios.
template <class RunMode>
void run_modes(const options& o,
               const std::string& head,
               const std::string& settings,
               double model_bytes,
               RunMode&& run_mode) {
  print_table_header();
  std::vector<result> results;
  for (const auto& spec : standard_modes()) {
    if (!o.only.empty() && spec.label.find(o.only) == std::string::npos) {
      continue;
    }
    results.push_back(run_mode(spec));
    print_row(results.back());
    write_json(o.json, head, settings, results, model_bytes);
  }
  print_ratios(results);
  std::printf("wrote %s\n", o.json.c_str());
}

/// The settings lines both programs print before the table (the program prints its first line:
/// the model, C, B and the device).
inline void print_settings(const options& o) {
  std::printf("host moments %s; accumulate %s; host accumulators %d; ",
              std::string(zenflow::to_string(o.host_moments)).c_str(),
              std::string(zenflow::to_string(o.accumulate)).c_str(), o.host_accumulators);
  std::printf("upload %s; dev B/p: device memory per parameter (user's bf16 weights and gradients + the "
              "engine's device buffers; dense AdamW: 16)\n",
              o.chunk_ring ? "chunk_ring" : "whole_window");
  std::printf(
      "host B/p: everything the engine holds on the host per parameter (state, accumulators, pinned "
      "ring, upload); pred: the planner's step (zenflow::plan from C + K, B and the host bandwidth of "
      "this run's accumulation), x pred: mean / pred, '!' past 10%% (ZenFlow at a fixed S)\n");
  std::printf("gradient release: %s; host windows: %s\n",
              o.release_by_caller ? "by_caller (after the forward)" : "at_step",
              o.sync_windows ? "synchronous (overlap_step false)" : "overlapped (overlap_step true)");
  std::printf("backward: %.0f%% of C in %d ops of %.2f ms (one per matrix, last first)%s; tail: end of the "
              "step's last D2H copy after the end of its backward (median; nan: not measured here)\n",
              100.0 * o.backward_share, o.layers, o.compute_ms * o.backward_share / o.layers,
              o.grad_ready ? ", each matrix announced with grad_ready() as its backward ends" : "");
}

} // namespace zf_bench_pipeline
