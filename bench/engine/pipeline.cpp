/// @file
/// The pipeline benchmark (issue 11): the engine on the emulated device with a timing model, so
/// that a model of tens of millions of parameters on a CPU has the shape of a 7B model on a GPU.
///
/// Per step: a modelled forward + backward of C ms on the training stream
/// (`emulated_device::compute`), then `step()`, then a wait for the stream (a trainer reading its
/// loss). PCIe is modelled at B bytes/s per direction; by default B is chosen so that one step's
/// gradients at r = 0.1, (1 - 0.1) x model, take C on the wire (7B bf16 on PCIe Gen5: 12.6 GB /
/// 25 GB/s ~ 0.5 s, about a step). Everything else is real: the packs, the copies' memcpy, the
/// consumer's accumulation and the host AdamW run on this machine's cores.
///
/// Modes: gpu_adamw, offload_sync, zenflow (S = 2, 4, auto; r = 0.05, 0.1). Per mode: step time
/// (median and mean over the steady state), the engine's counted stall share, bytes per step and
/// the ratio to the pipeline bound max(C, down / B, up / B, host window / S, accumulation), where
/// "host window / S" is the engine's host-window seconds per step and "accumulation" a standalone
/// timing of the same accumulation (host::accumulate_channels over the unselected rows) with the
/// consumer's thread count. Beside it, labelled apart and not issue 11's: "bound+K", the same max
/// with C + K for C, where K is the emulated device's own kernel time (its kernels are host code on
/// this machine's cores, microseconds on a GPU) between a backward's end and the next forward,
/// measured from the device's timeline in the same run (kernel_ms_after_backward).
///
/// Memory and the planner (issue 35, docs/planning.md): "host B/p" is everything the engine holds
/// on the host (state, accumulators, pinned ring, upload buffer); the JSON records each buffer, the
/// planner's count of it, and the process's resident memory before the engine and after the
/// warm-up (check_pipeline_json.py --rss-within F). "pred ms" is zenflow::plan's step for the mode
/// (device step C + K, B, the host bandwidth of this run's accumulation), "x pred" the mean step
/// over it, '!' past 10% for ZenFlow at a fixed S (--prediction-within F checks it).
///
///   build/cpu/bench/engine/zf_bench_pipeline --json out.json
///   build/cpu/bench/engine/zf_bench_pipeline --params 100 --compute-ms 750 --json 100M.json
///       (the model sizes, 50M-200M, with C = 7.5 ms per million parameters: the emulated
///       kernels then take ~4% of C, about a GPU's share at 7B; docs/benchmarks.md)
///   build/cpu/bench/engine/zf_bench_pipeline --device-threads 2 ...
///       (the emulated device's kernels spread over a pool of 2 threads, as a kernel over a GPU's
///       SMs; default 0: each kernel on its stream's thread, as every recorded run before
///       2026-11-25 14:24 UTC)
///   python3 bench/engine/plot_pipeline.py out.json out.png
///   python3 bench/engine/check_pipeline_json.py out.json --standard-modes
///       (the JSON against its own raw columns and the byte formulas; ctest cpu.bench.pipeline_json)
///
/// zf_bench_pipeline_cuda (pipeline_cuda.cu) runs the same modes, loop and columns on a GPU; what
/// the two share is in pipeline_report.hpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>

#if defined(__GLIBC__)
#  include <malloc.h> // malloc_trim: the previous mode's freed memory back to the system
#endif

#include "pipeline_report.hpp"
#include "pipeline_timeline.hpp"

namespace {

using namespace zf_bench_pipeline;

/// What the timed loop needs of the emulated device: its modelled compute and the timeline's
/// tracing from the first timed step on (for the D2H tail and K).
struct emulated_pass {
  zenflow::emulated_device& device;
  bool tracing = false; // the engine's pipeline trace of this mode
  zenflow::engine<zenflow::emulated_backend>* zf = nullptr;

  void compute(cudaStream_t s, std::chrono::nanoseconds ns, const char* name) { device.compute(s, ns, name); }
  void sync_stream(cudaStream_t s) { device.synchronize_stream(s); }
  void on_timed_start() {
    device.synchronize();
    if (tracing) {
      zf->start_trace(); // the engine's pipeline trace, with the device's streams
    }
    device.set_tracing(true); // the device's ops, for the D2H tail
  }
  void after_backward(cudaStream_t) {}
  void after_step(cudaStream_t) {}
};

result
run_mode(const options& o, const mode_spec& spec, std::int64_t hidden, double B, unsigned acc_threads) {
  zenflow::emulated_timing timing;
  timing.d2h_bytes_per_second = B;
  timing.h2d_bytes_per_second = B;
  zenflow::emulated_device device(timing);
  device.set_tracing(false);
  const bool tracing = !o.trace.empty() && spec.label == o.trace_mode;
  cudaStream_t stream = device.create_stream();

  const zenflow::config cfg = config_of(o, spec);
  const auto n = static_cast<std::size_t>(hidden * hidden);
  std::vector<std::vector<bf16>> w(static_cast<std::size_t>(o.layers)), g(static_cast<std::size_t>(o.layers));
  std::uint64_t seed = 12345;
  for (int l = 0; l < o.layers; ++l) {
    w[static_cast<std::size_t>(l)].resize(n);
    g[static_cast<std::size_t>(l)].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>((seed >> 40) & 0xffffff) / 16777216.0f - 0.5f;
      const auto channel = static_cast<std::int64_t>(i) / hidden;
      const float skew = channel % 17 == 0 ? 8.0f : 1.0f; // a few important channels
      w[static_cast<std::size_t>(l)][i] = zenflow::from_float<bf16>(0.02f * u);
      g[static_cast<std::size_t>(l)][i] = zenflow::from_float<bf16>(1e-3f * skew * u);
    }
  }
  result res;
  res.spec = spec;
  std::unique_ptr<zenflow::worker_pool> sms;
  if (o.device_threads > 0) {
    sms = std::make_unique<zenflow::worker_pool>(o.device_threads);
  }
  // The emulated device's memory is this process's: its growth from here is the engine's host and
  // device buffers (the weights and gradients above are already resident).
  // glibc keeps freed heap pages resident (the previous mode's engine): hand them back first.
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  res.device_memory_in_rss = true;
  // The emulated device keeps up to 64 MiB of freed memory poisoned and resident (its use-after-free
  // quarantine, core/detail/emulated_quarantine.hpp): not the engine's, allowed by the resident-memory check.
  res.rss_allowance_bytes = 64.0 * 1024 * 1024;
  res.rss_before_bytes = rss_bytes();
  {
    zenflow::engine<zenflow::emulated_backend> zf(cfg, zenflow::emulated_backend{device, nullptr, sms.get()});
    if (o.release_by_caller) {
      zf.set_gradient_release(zenflow::gradient_release::by_caller);
    }
    std::vector<zenflow::param_id> ids;
    for (int l = 0; l < o.layers; ++l) {
      ids.push_back(zf.add_matrix(w[static_cast<std::size_t>(l)].data(),
                                  g[static_cast<std::size_t>(l)].data(), hidden, hidden));
    }
    zf.initialize(stream);
    static bool placement_printed = false; // every mode's engine is placed alike: the settings, once
    if (!std::exchange(placement_printed, true)) {
      std::printf("host threads: %s\n", zf.stats().placement.describe().c_str());
    }
    emulated_pass pass{device, tracing, &zf};
    timed_steps(o, zf, ids, stream, pass, static_cast<double>(n) * o.layers, res);
    device.synchronize();
    device.set_tracing(false);
    zf.release_gradients(stream);
    zf.flush(stream);
    device.synchronize();
    const std::vector<zenflow::emulated_op> ops = device.trace();
    res.d2h_tail_ms = d2h_tail_ms(ops, static_cast<double>(pass_times_of(o).forward.count()));
    const kernel_time k = kernel_ms_after_backward(ops);
    res.kernel_ms = k.all_ms;
    res.kernel_train_ms = k.train_ms;
    if (tracing) {
      zf.write_trace(o.trace); // Chrome trace JSON (bench/engine/plot_trace.py renders it)
    }
  }
  finish_result(res, o, hidden, acc_threads, B, B);
  return res;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) {
    return rc;
  }
  if (o.compute_ms == 0) {
    o.compute_ms = 60; // C
  }
  const std::int64_t hidden = hidden_of(o);
  const double model_bytes = 2.0 * static_cast<double>(hidden * hidden) * o.layers; // bf16
  const double B = o.pcie_gbps > 0 ? o.pcie_gbps * 1e9 : 0.9 * model_bytes / (o.compute_ms * 1e-3);
  const zenflow::config defaults;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  // The consumer accumulates over a pool of its own, as many threads as the window job's pool.
  zenflow::config probe;
  probe.host_threads = o.host_threads;
  const unsigned acc_threads = probe.resolved_host_threads(hw);

  std::printf(
      "pipeline: %d matrices %lld x %lld bf16 (%.1fM params, %.1f MB), C = %.1f ms, B = %.3f GB/s per "
      "direction, host threads %u, accumulation threads %u, device kernel threads %u (0: each kernel on its "
      "stream's thread), ring_slots %d (0 = auto) x %lld B, hw threads %u\n",
      o.layers, static_cast<long long>(hidden), static_cast<long long>(hidden),
      static_cast<double>(hidden * hidden) * o.layers / 1e6, model_bytes / 1e6, o.compute_ms, B / 1e9,
      o.host_threads, acc_threads, o.device_threads, o.ring_slots > 0 ? o.ring_slots : defaults.ring_slots,
      static_cast<long long>(o.ring_slot_bytes > 0 ? o.ring_slot_bytes : defaults.ring_slot_bytes), hw);
  print_settings(o);
  std::printf("bound: issue 11's max(C, down/B, up/B, host window/S, accumulation); K: the emulated device's "
              "kernel time (host code here) from a backward's end to the next forward (median, this run); "
              "bound+K: the same max with C + K for C\n");
  std::ostringstream head;
  head.precision(10);
  head << "{\n  \"benchmark\": \"zf_bench_pipeline\",\n  \"machine\": \"emulated device on a " << hw
       << "-thread CPU\",\n  \"pcie_bytes_per_second\": " << B
       << ",\n  \"device_threads\": " << o.device_threads;
  run_modes(o, head.str(), json_settings(o, hidden, model_bytes, o.compute_ms, acc_threads), model_bytes,
            [&](const mode_spec& spec) { return run_mode(o, spec, hidden, B, acc_threads); });
  return 0;
}
