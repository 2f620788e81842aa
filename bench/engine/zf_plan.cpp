/// @file
/// zf_plan: the planner (zenflow::plan, <zenflow/engine/plan.hpp>) on the command line. From a
/// model's shapes, the machine and the settings: host and device bytes per parameter, bytes moved
/// per step, the pipeline bound, whether the run is stall-free, and the smallest change that makes
/// it so. docs/planning.md.
///
///   zf_plan --preset 7b --machine workstation --step-ms 1500
///   zf_plan --params 1e9 --layers 24 --hidden 2048 --host-gbps 100 --pcie-gbps 25 --step-ms 400 --json
///
/// Exit status 0 (whatever the verdict), 2 after a bad option (named on stderr, nothing planned).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/plan.hpp>

namespace {

void usage(const char* program) {
  std::printf(
      "%s (--preset 1b|7b|13b|70b | --params N --layers L [--hidden H])\n"
      "    [--machine dgx-h100|workstation] [--host-gbps G] [--pcie-gbps G] [--gpus N]\n"
      "    [--host-mem-gb G] [--gpu-mem-gb G] (--step-ms C | --tokens T [--tflops F])\n"
      "    [--mode zenflow|offload_sync|gpu_adamw] [--topk-ratio R] [--update-interval S]\n"
      "    [--moments fp32|bf16|int8] [--accumulate host|device] [--upload whole_window|chunk_ring]\n"
      "    [--host-accumulators 1|2] [--ring-slot-bytes B] [--max-interval S] [--zero 2|3]\n"
      "    [--reduce-bucket-bytes B] [--reduce-in-place true|false] [--shard-headroom H]\n"
      "    [--overlap-step true|false] [--json]\n"
      "  --machine: dgx-h100 = 8 GPUs of 80 GB, 2 TB host, 600 GB/s host (2 sockets x 300), 25 GB/s PCIe,\n"
      "             400 TFLOP/s achieved per GPU; workstation = 1 GPU of 80 GB, 128 GB host, 100 GB/s host,\n"
      "             25 GB/s PCIe, 400 TFLOP/s. Explicit options override it.\n"
      "  --tokens T: C = 6 x params x T / (TFLOP/s), T tokens per GPU per step.\n"
      "  --zero 3: the sharded engine (ZeRO-3) over --gpus ranks: each GPU its shard; 2 (default):\n"
      "            owner_partition, each GPU the whole model.\n"
      "  --reduce-bucket-bytes, --reduce-in-place: ZeRO-2's fp32 reduction bucket (25 MiB) and where\n"
      "            the mean goes (true: your gradient buffers); --shard-headroom: ZeRO-3's device rows\n"
      "            above a shard's share of k (0.25): config's reduce_bucket_bytes, reduce_in_place,\n"
      "            shard_state_headroom.\n"
      "  --overlap-step: true (the default here: the stall-free pipeline) or false (the engine's default:\n"
      "            synchronous windows, the step that closes a window waits for its host job).\n",
      program);
}

struct cli {
  std::string preset;
  double params = 0;
  std::int64_t layers = 0, hidden = 0;
  std::string machine;
  std::optional<double> host_gbps, pcie_gbps, host_mem_gb, gpu_mem_gb, step_ms, tokens, tflops;
  std::optional<std::int64_t> gpus;
  zenflow::plan_config cfg;
  std::int64_t max_interval = 64;
  bool json = false;
};

int refuse(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program, what.c_str());
  usage(program);
  return 2;
}

/// Reads the command line; -1 to go on, else the exit status.
int parse(int argc, char** argv, cli& c) {
  const char* prog = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      usage(prog);
      return 0;
    }
    if (a == "--json") {
      c.json = true;
      continue;
    }
    static const char* const valued[] = {"--preset",
                                         "--params",
                                         "--layers",
                                         "--hidden",
                                         "--machine",
                                         "--host-gbps",
                                         "--pcie-gbps",
                                         "--gpus",
                                         "--host-mem-gb",
                                         "--gpu-mem-gb",
                                         "--step-ms",
                                         "--tokens",
                                         "--tflops",
                                         "--mode",
                                         "--topk-ratio",
                                         "--update-interval",
                                         "--moments",
                                         "--accumulate",
                                         "--upload",
                                         "--ring-slot-bytes",
                                         "--max-interval",
                                         "--zero",
                                         "--reduce-bucket-bytes",
                                         "--reduce-in-place",
                                         "--shard-headroom",
                                         "--host-accumulators",
                                         "--overlap-step"};
    bool known = false;
    for (const char* v : valued) {
      known = known || a == v;
    }
    if (!known) {
      return refuse(prog, a + ": unknown option");
    }
    if (i + 1 >= argc) {
      return refuse(prog, a + ": needs a value");
    }
    const std::string v = argv[++i];
    const auto real = [&]() -> std::optional<double> {
      try {
        std::size_t used = 0;
        const double x = std::stod(v, &used);
        if (used == v.size() && std::isfinite(x)) {
          return x;
        }
      } catch (const std::exception&) {
      }
      return std::nullopt;
    };
    const auto positive = [&](std::optional<double>& out) {
      out = real();
      return out.has_value() && *out > 0;
    };
    const auto integer = [&](std::int64_t& out, std::int64_t lo) {
      const auto x = real();
      if (!x || *x != std::floor(*x) || *x < static_cast<double>(lo) || *x > 9e15) {
        return false;
      }
      out = static_cast<std::int64_t>(*x);
      return true;
    };
    bool ok = true;
    std::string why = "must be positive";
    if (a == "--preset") {
      c.preset = v;
      ok = false;
      for (const auto n : zenflow::plan_model::preset_names()) {
        ok = ok || v == n;
      }
      why = "expected 1b, 7b, 13b or 70b";
    } else if (a == "--params") {
      std::optional<double> x;
      ok = positive(x) && *x >= 1;
      c.params = ok ? *x : 0;
      why = "must be >= 1";
    } else if (a == "--layers") {
      ok = integer(c.layers, 1);
    } else if (a == "--hidden") {
      ok = integer(c.hidden, 1);
    } else if (a == "--machine") {
      c.machine = v;
      ok = v == "dgx-h100" || v == "workstation";
      why = "expected dgx-h100 or workstation";
    } else if (a == "--host-gbps") {
      ok = positive(c.host_gbps);
    } else if (a == "--pcie-gbps") {
      ok = positive(c.pcie_gbps);
    } else if (a == "--host-mem-gb") {
      ok = positive(c.host_mem_gb);
    } else if (a == "--gpu-mem-gb") {
      ok = positive(c.gpu_mem_gb);
    } else if (a == "--step-ms") {
      ok = positive(c.step_ms);
    } else if (a == "--tokens") {
      ok = positive(c.tokens);
    } else if (a == "--tflops") {
      ok = positive(c.tflops);
    } else if (a == "--gpus") {
      std::int64_t n = 0;
      ok = integer(n, 1) && n <= 4096;
      c.gpus = n;
      why = "must be an integer in [1, 4096]";
    } else if (a == "--mode") {
      ok = v == "zenflow" || v == "offload_sync" || v == "gpu_adamw";
      c.cfg.mode = v == "offload_sync" ? zenflow::optimizer_mode::offload_sync
                   : v == "gpu_adamw"  ? zenflow::optimizer_mode::gpu_adamw
                                       : zenflow::optimizer_mode::zenflow;
      why = "expected zenflow, offload_sync or gpu_adamw";
    } else if (a == "--topk-ratio") {
      const auto x = real();
      ok = x && *x >= 0 && *x <= 1;
      c.cfg.topk_ratio = ok ? *x : 0;
      why = "must be in [0, 1]";
    } else if (a == "--update-interval") {
      ok = integer(c.cfg.update_interval, 1);
      why = "must be an integer >= 1";
    } else if (a == "--max-interval") {
      ok = integer(c.max_interval, 1) && c.max_interval <= 100000;
      why = "must be an integer in [1, 100000]";
    } else if (a == "--moments") {
      ok = v == "fp32" || v == "bf16" || v == "int8";
      c.cfg.moments = v == "bf16"   ? zenflow::plan_moments::bf16
                      : v == "int8" ? zenflow::plan_moments::int8
                                    : zenflow::plan_moments::fp32;
      why = "expected fp32, bf16 or int8";
    } else if (a == "--accumulate") {
      ok = v == "host" || v == "device";
      c.cfg.accumulate =
          v == "device" ? zenflow::plan_accumulation::device : zenflow::plan_accumulation::host;
      why = "expected host or device";
    } else if (a == "--upload") {
      ok = v == "whole_window" || v == "chunk_ring";
      c.cfg.upload =
          v == "chunk_ring" ? zenflow::upload_policy::chunk_ring : zenflow::upload_policy::whole_window;
      why = "expected whole_window or chunk_ring";
    } else if (a == "--host-accumulators") {
      ok = v == "1" || v == "2";
      c.cfg.host_accumulators = v == "2" ? 2 : 1;
      why = "expected 1 or 2";
    } else if (a == "--zero") {
      ok = v == "2" || v == "3";
      c.cfg.sharded = v == "3";
      why = "expected 2 or 3";
    } else if (a == "--reduce-bucket-bytes") {
      ok = integer(c.cfg.reduce_bucket_bytes, 256) && c.cfg.reduce_bucket_bytes < (std::int64_t{1} << 31) &&
           c.cfg.reduce_bucket_bytes % 4 == 0;
      why = "must be in [256, 2^31) and a multiple of 4";
    } else if (a == "--overlap-step") {
      ok = v == "true" || v == "false";
      c.cfg.overlap_step = v == "true";
      why = "expected true or false";
    } else if (a == "--reduce-in-place") {
      ok = v == "true" || v == "false";
      c.cfg.reduce_in_place = v == "true";
      why = "expected true or false";
    } else if (a == "--shard-headroom") {
      const auto x = real();
      ok = x && *x >= 0 && *x <= 100;
      c.cfg.shard_state_headroom = ok ? *x : 0;
      why = "must be in [0, 100]";
    } else { // --ring-slot-bytes
      ok = integer(c.cfg.ring_slot_bytes, 4096) && c.cfg.ring_slot_bytes <= (std::int64_t{1} << 30) &&
           c.cfg.ring_slot_bytes % 256 == 0;
      why = "must be in [4096, 2^30] and a multiple of 256";
    }
    if (!ok) {
      return refuse(prog, a + ": " + why + ", got '" + v + "'");
    }
  }
  if (c.preset.empty() == (c.params == 0)) {
    return refuse(prog, c.preset.empty() ? "--preset or --params: give one (the model)"
                                         : "--preset and --params: give one, not both");
  }
  if (c.params > 0 && c.layers == 0) {
    return refuse(prog, "--layers: needed with --params");
  }
  if (c.preset.size() > 0 && (c.layers > 0 || c.hidden > 0)) {
    return refuse(prog, "--layers/--hidden: only with --params");
  }
  if (c.step_ms.has_value() == c.tokens.has_value()) {
    return refuse(prog, "--step-ms or --tokens: give one (the device's step time)");
  }
  return -1;
}

std::string gb(double bytes) {
  std::ostringstream s;
  s.precision(bytes >= 1e11 ? 4 : 3);
  s << bytes / 1e9;
  return s.str();
}

void print(const cli& c,
           const zenflow::plan_model& m,
           const zenflow::plan_hardware& hw,
           const zenflow::plan_result& r,
           const zenflow::plan_suggestion& s) {
  const double P = r.params;
  std::printf("model %s: %.3fB parameters (%.3fB in matrices), %lld B per weight\n", m.name.c_str(), P / 1e9,
              m.matrix_params() / 1e9, static_cast<long long>(m.elem_bytes));
  std::printf("machine%s%s: %lld GPU(s), host %.0f GB/s, PCIe %.1f GB/s per direction per GPU, C = %.1f ms, "
              "host memory %s GB, GPU memory %s GB\n",
              c.machine.empty() ? "" : " ", c.machine.c_str(), static_cast<long long>(hw.gpus),
              hw.host_bytes_per_s / 1e9, hw.pcie_bytes_per_s / 1e9, hw.step_s * 1e3,
              hw.host_memory_bytes > 0 ? gb(hw.host_memory_bytes).c_str() : "(unchecked)",
              hw.device_memory_bytes > 0 ? gb(hw.device_memory_bytes).c_str() : "(unchecked)");
  const auto& k = r.config;
  std::printf("config: %s, r = %g, S = %lld, moments %s, accumulate %s, host accumulators %d, upload %s, "
              "ZeRO-%d, %s windows\n\n",
              std::string(zenflow::to_string(k.mode)).c_str(), k.topk_ratio,
              static_cast<long long>(k.update_interval), std::string(zenflow::to_string(k.moments)).c_str(),
              std::string(zenflow::to_string(k.accumulate)).c_str(), k.host_accumulators,
              std::string(zenflow::to_string(k.upload)).c_str(), k.sharded ? 3 : 2,
              k.overlap_step ? "overlapped" : "synchronous");
  std::printf("%-34s %9s %10s\n", "host (the node)", "B/param", "GB");
  const auto row = [&](const char* what, double bytes) {
    std::printf("  %-32s %9.2f %10s\n", what, bytes / P, gb(bytes).c_str());
  };
  row("state (master, m, v, counts)", r.host.state);
  row("accumulators", r.host.accumulators);
  row("pinned D2H ring", r.host.ring);
  row(k.upload == zenflow::upload_policy::whole_window ? "upload stage" : "upload buffer", r.host.upload);
  if (r.host.staging > 0) {
    row("selection staging", r.host.staging);
  }
  row("total", r.host.total());
  std::printf("%-34s %9s %10s\n", "device (one GPU; no activations)", "B/param", "GB");
  row("weights + gradients", r.device.weights_and_grads);
  row("selected state", r.device.selected_state);
  row("vector state", r.device.vector_state);
  row("staging", r.device.staging);
  row("upload", r.device.upload);
  row("scratch", r.device.scratch);
  if (r.device.accumulators > 0) {
    row("accumulators", r.device.accumulators);
  }
  if (r.device.reduction > 0) {
    row("reduction buckets", r.device.reduction);
  }
  row("total", r.device.total());
  // DeepSpeed for the same model and machine (docs/planning.md, "DeepSpeed beside zenflow"):
  // ZeRO-Offload by its own estimator (estimate_zero2_model_states_mem_needs, buffer factor 1),
  // its ZenFlow from its source. Host: the node's; GPU: one GPU's, without activations.
  std::printf("%-34s %9s %10s %9s %10s\n", "beside DeepSpeed", "host B/p", "host GB", "GPU B/p", "GPU GB");
  const auto beside = [&](const char* what, double host, double device) {
    std::printf("  %-32s %9.2f %10s %9.2f %10s\n", what, host / P, gb(host).c_str(), device / P,
                gb(device).c_str());
  };
  beside("zenflow (this plan)", r.host.total(), r.device.total());
  beside("DeepSpeed ZeRO-Offload", r.deepspeed_offload_host, r.deepspeed_offload_device);
  beside("DeepSpeed ZenFlow", r.deepspeed_zenflow_host, r.deepspeed_zenflow_device);
  std::printf("\n%-34s %10s %10s\n", "per step", "GB", "ms");
  std::printf("  %-32s %10s %10.1f\n", "compute (C)", "", r.terms.compute * 1e3);
  std::printf("  %-32s %10s %10.1f\n", "down (one GPU)", gb(r.traffic.d2h_per_step).c_str(),
              r.terms.d2h * 1e3);
  std::printf("  %-32s %10s %10.1f\n", "up (one GPU)", gb(r.traffic.h2d_per_step).c_str(), r.terms.h2d * 1e3);
  // GB: a step's share of the window's traffic; ms: the time the job has per step it may take
  // (one accumulator buffer: the whole job, in the next window's first step; two: over S).
  const bool one_step = k.mode == zenflow::optimizer_mode::zenflow && k.overlap_step &&
                        k.host_accumulators == 1 && k.accumulate == zenflow::plan_accumulation::host;
  std::printf("  %-32s %10s %10.1f\n",
              one_step ? "host window, whole (host memory)" : "host window / S (host memory)",
              gb(r.traffic.host_window_per_step).c_str(), r.terms.host_window * 1e3);
  std::printf("  %-32s %10s %10.1f\n", "accumulation (host memory)",
              gb(r.traffic.accumulate_per_step).c_str(), r.terms.accumulate * 1e3);
  std::printf("\nbound %.1f ms (%s); predicted step %.1f ms; stall-free: %s; fits host: %s; fits GPU: %s\n",
              r.bound.value * 1e3, std::string(r.bound.term).c_str(), r.predicted_step_s * 1e3,
              r.stall_free ? "yes" : "no", r.fits_host ? "yes" : "no", r.fits_device ? "yes" : "no");
  for (const auto& n : r.not_implemented) {
    std::printf("NOT IMPLEMENTED in the engine yet: %s\n", n.c_str());
  }
  if (s.found) {
    std::printf("suggestion: %s (then S = %lld, moments %s, upload %s, accumulate %s, ZeRO-%d: host %.2f "
                "B/param, GPU %.2f B/param, bound %.1f ms)\n",
                s.change.c_str(), static_cast<long long>(s.result.config.update_interval),
                std::string(zenflow::to_string(s.result.config.moments)).c_str(),
                std::string(zenflow::to_string(s.result.config.upload)).c_str(),
                std::string(zenflow::to_string(s.result.config.accumulate)).c_str(),
                s.result.config.sharded ? 3 : 2, s.result.host_bytes_per_param(),
                s.result.device_bytes_per_param(), s.result.bound.value * 1e3);
    for (const auto& n : s.result.not_implemented) {
      std::printf("  the suggestion needs what the engine does not implement yet: %s\n", n.c_str());
    }
  } else {
    std::printf("suggestion: %s\n", s.change.c_str());
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    out += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
  }
  return out + "\"";
}

std::string json_plan(const zenflow::plan_result& r) {
  std::ostringstream o;
  o.precision(10);
  const auto& k = r.config;
  o << "{\"mode\": \"" << zenflow::to_string(k.mode) << "\", \"topk_ratio\": " << k.topk_ratio
    << ", \"update_interval\": " << k.update_interval << ", \"moments\": \"" << zenflow::to_string(k.moments)
    << "\", \"accumulate\": \"" << zenflow::to_string(k.accumulate)
    << "\", \"host_accumulators\": " << k.host_accumulators << ", \"upload\": \""
    << zenflow::to_string(k.upload) << "\", \"zero\": " << (k.sharded ? 3 : 2)
    << ", \"overlap_step\": " << (k.overlap_step ? "true" : "false") << ", \"params\": " << r.params
    << ", \"host_bytes\": {\"state\": " << r.host.state << ", \"accumulators\": " << r.host.accumulators
    << ", \"ring\": " << r.host.ring << ", \"upload\": " << r.host.upload
    << ", \"staging\": " << r.host.staging << ", \"total\": " << r.host.total()
    << "}, \"host_bytes_per_param\": " << r.host_bytes_per_param()
    << ", \"device_bytes\": {\"weights_and_grads\": " << r.device.weights_and_grads
    << ", \"selected_state\": " << r.device.selected_state << ", \"vector_state\": " << r.device.vector_state
    << ", \"staging\": " << r.device.staging << ", \"upload\": " << r.device.upload
    << ", \"scratch\": " << r.device.scratch << ", \"accumulators\": " << r.device.accumulators
    << ", \"reduction\": " << r.device.reduction << ", \"total\": " << r.device.total()
    << "}, \"device_bytes_per_param\": " << r.device_bytes_per_param()
    << ", \"reduce_bucket_bytes\": " << k.reduce_bucket_bytes
    << ", \"reduce_in_place\": " << (k.reduce_in_place ? "true" : "false")
    << ", \"deepspeed\": {\"zero_offload\": {\"host_bytes\": " << r.deepspeed_offload_host
    << ", \"device_bytes\": " << r.deepspeed_offload_device
    << "}, \"zenflow\": {\"host_bytes\": " << r.deepspeed_zenflow_host
    << ", \"device_bytes\": " << r.deepspeed_zenflow_device << "}}"
    << ", \"ring_slots\": " << r.ring_slots << ", \"staging_slots\": " << r.staging_slots
    << ", \"d2h_bytes_per_step\": " << r.traffic.d2h_per_step
    << ", \"h2d_bytes_per_step\": " << r.traffic.h2d_per_step
    << ", \"host_window_bytes_per_step\": " << r.traffic.host_window_per_step
    << ", \"accumulate_bytes_per_step\": " << r.traffic.accumulate_per_step
    << ", \"terms_ms\": {\"compute\": " << r.terms.compute * 1e3 << ", \"d2h\": " << r.terms.d2h * 1e3
    << ", \"h2d\": " << r.terms.h2d * 1e3 << ", \"host_window\": " << r.terms.host_window * 1e3
    << ", \"accumulate\": " << r.terms.accumulate * 1e3 << "}, \"bound_ms\": " << r.bound.value * 1e3
    << ", \"bound_term\": \"" << r.bound.term << "\", \"predicted_step_ms\": " << r.predicted_step_s * 1e3
    << ", \"stall_free\": " << (r.stall_free ? "true" : "false")
    << ", \"fits_host\": " << (r.fits_host ? "true" : "false")
    << ", \"fits_device\": " << (r.fits_device ? "true" : "false") << ", \"not_implemented\": [";
  for (std::size_t i = 0; i < r.not_implemented.size(); ++i) {
    o << (i ? ", " : "") << json_string(r.not_implemented[i]);
  }
  o << "]}";
  return o.str();
}

} // namespace

int main(int argc, char** argv) {
  cli c;
  if (const int rc = parse(argc, argv, c); rc >= 0) {
    return rc;
  }
  // The machine's figures, then the explicit options over them.
  zenflow::plan_hardware hw;
  double tflops = 400;
  if (c.machine == "dgx-h100") {
    hw = {600e9, 25e9, 0, 2000e9, 80e9, 8};
  } else if (c.machine == "workstation") {
    hw = {100e9, 25e9, 0, 128e9, 80e9, 1};
  }
  hw.host_bytes_per_s = c.host_gbps ? *c.host_gbps * 1e9 : hw.host_bytes_per_s;
  hw.pcie_bytes_per_s = c.pcie_gbps ? *c.pcie_gbps * 1e9 : hw.pcie_bytes_per_s;
  hw.host_memory_bytes = c.host_mem_gb ? *c.host_mem_gb * 1e9 : hw.host_memory_bytes;
  hw.device_memory_bytes = c.gpu_mem_gb ? *c.gpu_mem_gb * 1e9 : hw.device_memory_bytes;
  hw.gpus = c.gpus ? *c.gpus : hw.gpus;
  tflops = c.tflops ? *c.tflops : tflops;
  if (hw.host_bytes_per_s <= 0) {
    return refuse(argv[0], "--host-gbps: needed (or --machine)");
  }
  if (hw.pcie_bytes_per_s <= 0) {
    return refuse(argv[0], "--pcie-gbps: needed (or --machine)");
  }
  try {
    const zenflow::plan_model m =
        c.preset.empty()
            ? zenflow::plan_model::uniform(
                  c.params, c.layers,
                  c.hidden > 0 ? c.hidden
                               : std::max<std::int64_t>(64, static_cast<std::int64_t>(std::sqrt(
                                                                c.params / static_cast<double>(c.layers))) /
                                                                64 * 64))
            : zenflow::plan_model::preset(c.preset);
    hw.step_s = c.step_ms ? *c.step_ms * 1e-3 : 6.0 * m.params() * *c.tokens / (tflops * 1e12);
    const zenflow::plan_result r = zenflow::plan(m, hw, c.cfg);
    const zenflow::plan_suggestion s = zenflow::suggest(m, hw, c.cfg, c.max_interval);
    if (c.json) {
      std::ostringstream o;
      o.precision(10);
      o << "{\"model\": " << json_string(m.name) << ", \"params\": " << m.params()
        << ", \"machine\": " << json_string(c.machine)
        << ", \"hardware\": {\"host_bytes_per_s\": " << hw.host_bytes_per_s
        << ", \"pcie_bytes_per_s\": " << hw.pcie_bytes_per_s << ", \"step_ms\": " << hw.step_s * 1e3
        << ", \"host_memory_bytes\": " << hw.host_memory_bytes
        << ", \"device_memory_bytes\": " << hw.device_memory_bytes << ", \"gpus\": " << hw.gpus
        << "},\n \"plan\": " << json_plan(r)
        << ",\n \"suggestion\": {\"found\": " << (s.found ? "true" : "false")
        << ", \"change\": " << json_string(s.change) << ", \"plan\": " << json_plan(s.result) << "}}\n";
      std::fputs(o.str().c_str(), stdout);
    } else {
      print(c, m, hw, r, s);
    }
  } catch (const zenflow::invalid_argument& e) {
    return refuse(argv[0], e.what());
  }
  return 0;
}
