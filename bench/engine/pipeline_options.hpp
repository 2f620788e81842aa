// The pipeline benchmark's command line and modes, shared by its two programs (zf_bench_pipeline,
// zf_bench_pipeline_cuda): the options and their parsing, the model's side, the standard modes and
// each mode's engine settings. What the programs measure and report: pipeline_report.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <zenflow/engine/config.hpp>

namespace zf_bench_pipeline {

struct options {
  double params_m = 24.0; // millions of matrix parameters
  int layers = 6;         // square matrices
  int steps = 28;         // per mode, the first `warmup` excluded
  int warmup = 8;         // selection at t = 0 and the first windows
  double compute_ms = 0;  // C; 0: the program's default (each program says which)
  double pcie_gbps = 0.0; // B per direction, GB/s; 0: the program's default
  unsigned host_threads = 2;
  // The emulated device's multiprocessors: a pool its kernels (host twins) spread over; 0: each
  // kernel on its stream's thread alone. zf_bench_pipeline only.
  unsigned device_threads = 0;
  int ring_slots = 0; // 0 = the engine's default
  std::int64_t ring_slot_bytes = 0;
  std::string json = "pipeline.json";
  std::string only;  // run only modes whose label contains this
  std::string trace; // write the engine's pipeline trace (Chrome JSON) of this mode's steady state
  std::string trace_mode = "zenflow S=4 r=0.1";
  bool chunk_ring = false; // --upload chunk_ring
  // The modelled pass: a forward of (1 - backward_share) x C, then one backward op per matrix
  // (last layer first), so that with --grad-ready each matrix is announced as its backward ends.
  double backward_share = 2.0 / 3.0;
  bool grad_ready = false;
  // --release-by-caller: gradient_release::by_caller, the trainer releasing the gradients after
  // the forward, so that the forward runs beside the last step's packs (docs/engine.md).
  bool release_by_caller = false;
  // --sync-windows: overlap_step false (each window's host AdamW before the next step), the
  // library's default since 2026-11-29; without it the overlapped windows this benchmark was made for.
  bool sync_windows = false;
  std::int64_t select_interval = 0; // 0: the library's default (one selection in a short run)
  double mass_drop = 0.0;           // config::select_on_mass_drop (0: off)
  zenflow::moment_precision host_moments = zenflow::moment_precision::fp32; // --host-moments
  std::int32_t host_accumulators = 1; // --host-accumulators (config::host_accumulators)
  zenflow::accumulation_site accumulate = zenflow::accumulation_site::host; // --accumulate
};

inline void usage(const char* program) {
  std::printf(
      "%s [--params M] [--layers N] [--steps N] [--warmup N] [--compute-ms C]\n"
      "    [--pcie-gbps B] [--host-threads N] [--device-threads N] [--ring-slots N]\n"
      "    [--ring-slot-bytes N]\n"
      "    [--upload whole_window|chunk_ring] [--grad-ready] [--backward-share F]\n"
      "    [--select-interval N] [--mass-drop F] [--host-moments fp32|bf16|int8] [--accumulate host|device]\n"
      "    [--host-accumulators 1|2]\n"
      "    [--release-by-caller] [--sync-windows]\n"
      "    [--only LABEL-SUBSTRING]\n"
      "    [--trace FILE [--trace-mode LABEL]] [--json FILE]\n",
      program);
}

/// Reads the command line into `o`; returns -1 to go on, else the exit status: 0 after --help, 2
/// after a bad option (named on stderr, with the usage on stdout; nothing run).
inline int parse_options(int argc, char** argv, options& o) {
  const auto refuse = [&](const std::string& what) {
    std::fprintf(stderr, "%s: %s\n", argv[0], what.c_str());
    usage(argv[0]);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      usage(argv[0]);
      return 0;
    }
    if (a == "--grad-ready" || a == "--release-by-caller" || a == "--sync-windows") {
      (a == "--grad-ready"          ? o.grad_ready
       : a == "--release-by-caller" ? o.release_by_caller
                                    : o.sync_windows) = true;
      continue;
    }
    static const char* const valued[] = {
        "--params",    "--layers",          "--steps",          "--warmup",         "--compute-ms",
        "--pcie-gbps", "--host-threads",    "--device-threads", "--ring-slots",     "--ring-slot-bytes",
        "--upload",    "--select-interval", "--mass-drop",      "--backward-share", "--host-moments",
        "--only",      "--trace",           "--trace-mode",     "--accumulate",     "--host-accumulators",
        "--json"};
    if (std::find(std::begin(valued), std::end(valued), a) == std::end(valued)) {
      return refuse(a + ": unknown option");
    }
    if (i + 1 >= argc) {
      return refuse(a + ": needs a value");
    }
    const std::string v = argv[++i];
    try {
      std::size_t used = 0;
      // A number with nothing after it (std::stod alone would take "12abc" as 12).
      const auto number = [&](auto parse) {
        const auto x = parse(v, &used);
        if (used != v.size()) {
          throw std::invalid_argument(v);
        }
        return x;
      };
      const auto real = [&] {
        return number([](const std::string& t, std::size_t* n) { return std::stod(t, n); });
      };
      const auto integer = [&] {
        return number([](const std::string& t, std::size_t* n) { return std::stoll(t, n); });
      };
      if (a == "--params") {
        o.params_m = real();
      } else if (a == "--layers") {
        o.layers = static_cast<int>(integer());
      } else if (a == "--steps") {
        o.steps = static_cast<int>(integer());
      } else if (a == "--warmup") {
        o.warmup = static_cast<int>(integer());
      } else if (a == "--compute-ms") {
        o.compute_ms = real();
      } else if (a == "--pcie-gbps") {
        o.pcie_gbps = real();
      } else if (a == "--host-threads" || a == "--device-threads") {
        const long long t = integer();
        if (t < 0) {
          return refuse(a + ": must not be negative, got " + v);
        }
        (a == "--host-threads" ? o.host_threads : o.device_threads) = static_cast<unsigned>(t);
      } else if (a == "--ring-slots") {
        o.ring_slots = static_cast<int>(integer());
      } else if (a == "--ring-slot-bytes") {
        o.ring_slot_bytes = integer();
      } else if (a == "--upload") {
        if (v != "whole_window" && v != "chunk_ring") {
          return refuse("--upload: expected whole_window or chunk_ring, got '" + v + "'");
        }
        o.chunk_ring = v == "chunk_ring";
      } else if (a == "--select-interval") {
        o.select_interval = integer();
      } else if (a == "--mass-drop") {
        o.mass_drop = real();
      } else if (a == "--backward-share") {
        o.backward_share = real();
      } else if (a == "--host-moments") {
        if (v != "fp32" && v != "bf16" && v != "int8") {
          return refuse("--host-moments: expected fp32, bf16 or int8, got '" + v + "'");
        }
        o.host_moments = v == "bf16"   ? zenflow::moment_precision::bf16
                         : v == "int8" ? zenflow::moment_precision::int8
                                       : zenflow::moment_precision::fp32;
      } else if (a == "--host-accumulators") {
        if (v != "1" && v != "2") {
          return refuse("--host-accumulators: expected 1 or 2, got '" + v + "'");
        }
        o.host_accumulators = v == "2" ? 2 : 1;
      } else if (a == "--accumulate") {
        if (v != "host" && v != "device") {
          return refuse("--accumulate: expected host or device, got '" + v + "'");
        }
        o.accumulate = v == "device" ? zenflow::accumulation_site::device : zenflow::accumulation_site::host;
      } else if (a == "--only") {
        o.only = v;
      } else if (a == "--trace") {
        o.trace = v;
      } else if (a == "--trace-mode") {
        o.trace_mode = v;
      } else { // "--json", the last of `valued`
        o.json = v;
      }
    } catch (const std::exception&) { // std::invalid_argument, std::out_of_range
      return refuse(a + ": not a number in range: '" + v + "'");
    }
  }
  // Each bad value named, and nothing run.
  const struct {
    bool bad;
    const char* what;
  } checks[] = {{!(o.params_m > 0), "--params: must be positive"},
                {o.layers <= 0, "--layers: must be positive"},
                {o.steps <= 0, "--steps: must be positive"},
                {o.warmup < 0, "--warmup: must not be negative"},
                {!(o.compute_ms >= 0), "--compute-ms: must not be negative"},
                {!(o.pcie_gbps >= 0), "--pcie-gbps: must not be negative"},
                {!(o.backward_share >= 0 && o.backward_share <= 1), "--backward-share: must be in [0, 1]"}};
  for (const auto& c : checks) {
    if (c.bad) {
      std::fprintf(stderr, "%s: %s\n", argv[0], c.what);
      return 2;
    }
  }
  return -1;
}

/// The square matrices' side for `params_m` million parameters over `layers` matrices (a multiple
/// of 64, at least 64).
inline std::int64_t hidden_of(const options& o) {
  const auto hidden = static_cast<std::int64_t>(std::sqrt(o.params_m * 1e6 / o.layers));
  return std::max<std::int64_t>(64, hidden / 64 * 64);
}

struct mode_spec {
  std::string label;
  zenflow::optimizer_mode mode;
  double r = 0.1;
  std::int64_t S = 4; // 0 = auto
};

/// gpu_adamw, offload_sync, then zenflow at S = 2, 4, auto for r = 0.05 and 0.1.
inline std::vector<mode_spec> standard_modes() {
  std::vector<mode_spec> specs = {{"gpu_adamw", zenflow::optimizer_mode::gpu_adamw, 0.1, 0},
                                  {"offload_sync", zenflow::optimizer_mode::offload_sync, 0.1, 0}};
  for (const double r : {0.05, 0.1}) {
    for (const std::int64_t S : {std::int64_t{2}, std::int64_t{4}, std::int64_t{0}}) {
      std::ostringstream l;
      l << "zenflow S=" << (S == 0 ? std::string("auto") : std::to_string(S)) << " r=" << r;
      specs.push_back({l.str(), zenflow::optimizer_mode::zenflow, r, S});
    }
  }
  return specs;
}

/// The engine's settings for one mode under the options.
inline zenflow::config config_of(const options& o, const mode_spec& spec) {
  zenflow::config cfg;
  cfg.mode = spec.mode;
  cfg.topk_ratio = spec.r;
  cfg.update_interval = spec.S;
  // Pinned either way: the overlapped design is what this benchmark was made to time; the library's
  // default became synchronous windows on 2026-11-29 for accuracy (docs/accuracy.md).
  cfg.overlap_step = !o.sync_windows;
  cfg.host_threads = o.host_threads;
  if (o.ring_slots > 0) {
    cfg.ring_slots = o.ring_slots;
  }
  if (o.ring_slot_bytes > 0) {
    cfg.ring_slot_bytes = o.ring_slot_bytes;
  }
  if (o.chunk_ring) {
    cfg.upload = zenflow::upload_policy::chunk_ring;
  }
  if (o.select_interval > 0) {
    cfg.select = zenflow::select_strategy::step;
    cfg.select_interval = o.select_interval;
  }
  cfg.host_moments = o.host_moments;
  cfg.accumulate = o.accumulate;
  cfg.host_accumulators = o.host_accumulators;
  cfg.select_on_mass_drop = o.mass_drop;
  return cfg;
}

} // namespace zf_bench_pipeline
