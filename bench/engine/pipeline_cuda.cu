/// @file
/// The pipeline benchmark on a GPU (issue 11, "the same benchmark on the CUDA backend"): the modes,
/// model shape, timed loop, columns and JSON of zf_bench_pipeline (pipeline.cpp, the emulated
/// device), with zenflow::engine<cuda_backend> on a real device:
///
/// - the model's compute is modelled as there: a forward of (1 - backward share) x C and one backward
///   op per matrix, each a one-thread kernel that holds the training stream for its share of C (the
///   device's global timer). It occupies one multiprocessor, so the engine's kernels on its other
///   streams run beside it as they would beside a real backward, without its memory traffic: the
///   step measured here is the engine's cost with the model's compute taken out, not a trainer's;
/// - PCIe is real, and B (per direction) is measured in the same run: plain pinned copies of 256 MiB
///   on a stream of their own, the median of 5, the bound's wire terms use those;
/// - K: the training stream's time from the end of the backward to the end of step() (CUDA events),
///   the device's own kernels on the path to the next forward;
/// - device memory per parameter both as the engine reports it and as read off the device
///   (cudaMemGetInfo before the engine is made and after the warm-up steps).
///
///   build/gpu/bench/engine/zf_bench_pipeline_cuda --params 1000 --json gpu.json
///       C defaults to the larger of (1 - 0.1) x model / B_down and the host accumulation of one step
///       at r = 0.1 (issue 11's steady state asks for C at least the wire's and the host's time)
///   python3 bench/engine/plot_pipeline.py --ratio gpu.json out.png
///
/// Without a device it says so and exits with status 1: zf_bench_pipeline runs the same modes on
/// the emulated device.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/engine/engine.cuh>

#include "pipeline_report.hpp"

namespace {

using namespace zf_bench_pipeline;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "zf_bench_pipeline_cuda: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ inline unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// The modelled compute: holds the stream for `ns` nanoseconds of the device's global timer.
__global__ void modelled_compute_kernel(long long ns) {
  const unsigned long long t0 = global_timer_ns();
  while (global_timer_ns() - t0 < static_cast<unsigned long long>(ns)) {
    __nanosleep(512);
  }
}

/// The emulated program's values, from a counter-based hash instead of its sequential generator
/// (each element on its own thread): weights 0.02 u, gradients 1e-3 u, u uniform in [-0.5, 0.5),
/// every 17th channel's gradients 8x (a few important channels).
__global__ void fill_kernel(bf16* w, bf16* g, std::int64_t n, std::int64_t channel_len, std::uint64_t seed) {
  const auto stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1); // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>((z >> 40) & 0xffffff) / 16777216.0f - 0.5f;
    const float skew = (i / channel_len) % 17 == 0 ? 8.0f : 1.0f;
    w[i] = zenflow::from_float<bf16>(0.02f * u);
    g[i] = zenflow::from_float<bf16>(1e-3f * skew * u);
  }
}

/// One direction's bandwidth of plain pinned copies, bytes/s: the median of 5 after one warm-up.
struct wire {
  double down = 0, up = 0;
};
wire measure_wire(std::size_t bytes) {
  zenflow::stream s;
  zenflow::pinned_buffer<std::byte> host(bytes);
  zenflow::device_buffer<std::byte> dev(bytes, s);
  zenflow::event a(cudaEventDefault), b(cudaEventDefault);
  auto time = [&](bool down) {
    std::vector<double> t;
    for (int rep = 0; rep < 6; ++rep) {
      a.record(s);
      check(down ? cudaMemcpyAsync(host.data(), dev.data(), bytes, cudaMemcpyDeviceToHost, s)
                 : cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync");
      b.record(s);
      b.synchronize();
      float ms = 0;
      check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
      if (rep > 0) {
        t.push_back(static_cast<double>(bytes) / (ms * 1e-3));
      }
    }
    return median(t);
  };
  wire w;
  w.down = time(true);
  w.up = time(false);
  dev.reset();
  s.synchronize();
  return w;
}

std::size_t free_device_bytes() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

/// What the timed loop needs of the GPU: the modelled compute, K from a pair of timing events
/// around step() on the training stream, and the device memory the engine holds once warm.
struct gpu_pass {
  zenflow::engine<zenflow::cuda_backend>* zf = nullptr;
  bool tracing = false;
  std::size_t free_before_engine = 0;
  std::size_t engine_bytes = 0; // read at the first timed step
  zenflow::event backward_end{cudaEventDefault}, step_end{cudaEventDefault};
  bool timed = false;
  std::vector<double> k_ms;

  void compute(cudaStream_t s, std::chrono::nanoseconds ns, const char*) {
    modelled_compute_kernel<<<1, 1, 0, s>>>(static_cast<long long>(ns.count()));
    check(cudaGetLastError(), "modelled_compute_kernel");
  }
  void sync_stream(cudaStream_t s) {
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (timed) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, backward_end, step_end), "cudaEventElapsedTime");
      k_ms.push_back(ms);
    }
  }
  void on_timed_start() {
    const std::size_t free_now = free_device_bytes(); // every stream idle: a clean start
    engine_bytes = free_before_engine > free_now ? free_before_engine - free_now : 0;
    if (tracing) {
      zf->start_trace();
    }
    timed = true;
  }
  void after_backward(cudaStream_t s) { backward_end.record(s); }
  void after_step(cudaStream_t s) { step_end.record(s); }
};

result
run_mode(const options& o, const mode_spec& spec, std::int64_t hidden, const wire& B, unsigned acc_threads) {
  zenflow::stream st;
  const zenflow::config cfg = config_of(o, spec);
  const auto n = static_cast<std::size_t>(hidden * hidden);
  std::vector<zenflow::device_buffer<bf16>> w, g;
  w.reserve(static_cast<std::size_t>(o.layers));
  g.reserve(static_cast<std::size_t>(o.layers));
  for (int l = 0; l < o.layers; ++l) {
    w.emplace_back(n, st);
    g.emplace_back(n, st);
    fill_kernel<<<1024, 256, 0, st>>>(w.back().data(), g.back().data(), static_cast<std::int64_t>(n), hidden,
                                      12345u + static_cast<std::uint64_t>(l));
    check(cudaGetLastError(), "fill_kernel");
  }
  const double params = static_cast<double>(n) * o.layers;
  result res;
  res.spec = spec;
  {
    gpu_pass pass;
    pass.free_before_engine = free_device_bytes();
    zenflow::engine<zenflow::cuda_backend> zf(cfg);
    pass.zf = &zf;
    pass.tracing = !o.trace.empty() && spec.label == o.trace_mode;
    if (o.release_by_caller) {
      zf.set_gradient_release(zenflow::gradient_release::by_caller);
    }
    std::vector<zenflow::param_id> ids;
    for (int l = 0; l < o.layers; ++l) {
      ids.push_back(zf.add_matrix(w[static_cast<std::size_t>(l)].data(),
                                  g[static_cast<std::size_t>(l)].data(), hidden, hidden));
    }
    zf.initialize(st);
    timed_steps(o, zf, ids, st, pass, params, res);
    res.kernel_train_ms = median(pass.k_ms);
    res.kernel_ms = res.kernel_train_ms; // the training stream's: the other streams are not timed here
    res.device_bytes_per_param_measured = (4.0 * params + static_cast<double>(pass.engine_bytes)) / params;
    zf.release_gradients(st);
    zf.flush(st);
    st.synchronize();
    if (pass.tracing) {
      zf.write_trace(o.trace);
    }
  }
  st.synchronize();
  finish_result(res, o, hidden, acc_threads, B.down, B.up);
  return res;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  o.host_threads = zenflow::config{}.host_threads; // the library's default here (the GPU machine's cores)
  if (const int rc = parse_options(argc, argv, o); rc >= 0) {
    return rc;
  }
  if (o.device_threads != 0) {
    std::fprintf(stderr,
                 "zf_bench_pipeline_cuda: --device-threads is the emulated device's (zf_bench_pipeline)\n");
    return 2;
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(
        stderr,
        "zf_bench_pipeline_cuda: no CUDA device (%s: %s): this benchmark needs a GPU; zf_bench_pipeline "
        "runs the same modes on the emulated device\n",
        e != cudaSuccess ? cudaGetErrorName(e) : "cudaErrorNoDevice",
        e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
    return 1;
  }
  cudaDeviceProp prop{};
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const std::int64_t hidden = hidden_of(o);
  const double model_bytes = 2.0 * static_cast<double>(hidden * hidden) * o.layers; // bf16
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  zenflow::config probe;
  probe.host_threads = o.host_threads;
  const unsigned acc_threads = probe.resolved_host_threads(hw);

  wire B = measure_wire(std::size_t{256} << 20);
  const wire measured = B;
  if (o.pcie_gbps > 0) {
    B.down = B.up = o.pcie_gbps * 1e9; // the bound's wire terms at a bandwidth of the caller's
  }
  double acc_r01_ms = 0;
  if (o.compute_ms == 0) {
    acc_r01_ms = time_accumulation(hidden, o.layers, 0.1, acc_threads) * 1e3;
    o.compute_ms = std::max(0.9 * model_bytes / B.down * 1e3, acc_r01_ms);
  }
  const zenflow::config defaults;
  std::printf(
      "pipeline on %s (%d multiprocessors, %.1f GiB): %d matrices %lld x %lld bf16 (%.1fM params, %.1f MB), "
      "C = %.1f ms%s, B = %.2f GB/s down, %.2f GB/s up (%s), host threads %u (%s), accumulation threads %u, "
      "ring_slots %d x %lld B, hw threads %u\n",
      prop.name, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30), o.layers,
      static_cast<long long>(hidden), static_cast<long long>(hidden),
      static_cast<double>(hidden * hidden) * o.layers / 1e6, model_bytes / 1e6, o.compute_ms,
      acc_r01_ms > 0 ? " (the larger of 0.9 x model / B_down and one step's accumulation at r = 0.1)" : "",
      B.down / 1e9, B.up / 1e9, o.pcie_gbps > 0 ? "given" : "measured: pinned copies of 256 MiB", acc_threads,
      o.host_threads == 0 ? "the library's default" : "given", acc_threads,
      o.ring_slots > 0 ? o.ring_slots : defaults.ring_slots,
      static_cast<long long>(o.ring_slot_bytes > 0 ? o.ring_slot_bytes : defaults.ring_slot_bytes), hw);
  print_settings(o);
  std::printf(
      "bound: issue 11's max(C, down/B, up/B, host window/S, accumulation); K: the training stream's time "
      "from the backward's end to step()'s end (CUDA events, median); bound+K: the same max with C + K for "
      "C; dev B/p as the engine reports it (measured off the device: in the JSON)\n");
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::ostringstream head;
  head.precision(10);
  head << "{\n  \"benchmark\": \"zf_bench_pipeline_cuda\",\n  \"machine\": \"" << prop.name << ", " << hw
       << "-thread host\",\n  \"cuda_driver\": " << driver << ",\n  \"cuda_runtime\": " << runtime
       << ",\n  \"pcie_bytes_per_second\": " << B.down << ",\n  \"pcie_down_bytes_per_second\": " << B.down
       << ",\n  \"pcie_up_bytes_per_second\": " << B.up
       << ",\n  \"pcie_down_measured_bytes_per_second\": " << measured.down
       << ",\n  \"pcie_up_measured_bytes_per_second\": " << measured.up;
  run_modes(o, head.str(), json_settings(o, hidden, model_bytes, o.compute_ms, acc_threads), model_bytes,
            [&](const mode_spec& spec) { return run_mode(o, spec, hidden, B, acc_threads); });
  return 0;
}
