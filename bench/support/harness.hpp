/// @file
/// Google Benchmark helpers shared by every zenflow benchmark.
///
/// GPU cases time with CUDA events and report manual time (`UseManualTime()`), flush L2 before
/// each iteration so that a kernel is measured against HBM, not against the cache, and report
/// bytes/s. Every ratio a benchmark reports is against a baseline measured in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <zenflow/core/device.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/worker_pool.hpp>

namespace zf_bench {

/// Marks the case skipped (with a reason in the JSON) when there is no device. Returns true
/// when the caller should return.
inline bool skip_without_gpu(benchmark::State& state) {
  if (!zenflow::cuda_available()) {
    state.SkipWithError("no CUDA device");
    return true;
  }
  return false;
}

/// Bytes moved per iteration -> bytes_per_second (Google Benchmark's own) and a GB/s counter.
inline void set_bytes_per_iteration(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["GB"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_iter"] = bytes;
}

/// Overwrites a buffer twice the L2 size so that the next kernel starts from a cold cache.
class l2_flusher {
public:
  explicit l2_flusher(cudaStream_t s) {
    zenflow::device_info info;
    if (zenflow::query_device(0, info)) {
      buffer_ = zenflow::device_buffer<std::byte>(std::max<std::size_t>(2 * info.l2_bytes, 1 << 20), s);
    }
  }
  void flush(cudaStream_t s) {
    if (!buffer_.empty()) {
      (void)cudaMemsetAsync(buffer_.data(), 0, buffer_.bytes(), s);
    }
  }

private:
  zenflow::device_buffer<std::byte> buffer_;
};

/// Runs the benchmark loop for GPU work: `enqueue(stream)` once per iteration, timed with events
/// (L2 flushed outside the timed region), reported as manual time.
template <class F>
void gpu_loop(benchmark::State& state, cudaStream_t s, F&& enqueue, bool flush_l2 = true) {
  l2_flusher flusher(s);
  zenflow::event start(cudaEventDefault), stop(cudaEventDefault);
  enqueue(s); // warm-up: first launch costs module loading
  zenflow::detail::throw_if(cudaStreamSynchronize(s), "warm-up");
  for (auto _ : state) {
    if (flush_l2) {
      flusher.flush(s);
    }
    start.record(s);
    enqueue(s);
    stop.record(s);
    stop.synchronize();
    float ms = 0;
    zenflow::detail::throw_if(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
}

/// Device-to-device copy bandwidth (read + write bytes per second) over `bytes`: the ceiling
/// every device-memory-bound kernel is compared with.
inline double measure_device_copy_bandwidth(std::size_t bytes = std::size_t{1} << 30, int reps = 10) {
  zenflow::stream s;
  zenflow::device_buffer<std::byte> a(bytes, s), b(bytes, s);
  zenflow::event start(cudaEventDefault), stop(cudaEventDefault);
  zenflow::detail::throw_if(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s), "copy");
  start.record(s);
  for (int i = 0; i < reps; ++i) {
    zenflow::detail::throw_if(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s),
                              "copy");
  }
  stop.record(s);
  stop.synchronize();
  float ms = 0;
  zenflow::detail::throw_if(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return 2.0 * static_cast<double>(bytes) * reps / (static_cast<double>(ms) * 1e-3);
}

/// STREAM-like triad a = b + s * c on the host with `pool`: the ceiling for memory-bound host
/// kernels such as the CPU AdamW. Counts 16 bytes per element: b and c read, a written, and a
/// read for ownership before it is written (write-allocate caches), which in-place kernels like
/// AdamW (every written line was just read) do not pay; STREAM's 12 would understate the ceiling.
inline double
measure_host_triad_bandwidth(zenflow::worker_pool& pool, std::int64_t n = 1 << 25, int reps = 5) {
  std::vector<float> a(static_cast<std::size_t>(n)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  const std::int64_t grain = 1 << 16;
  auto triad = [&] {
    pool.parallel_for(n, grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        a[static_cast<std::size_t>(i)] =
            b[static_cast<std::size_t>(i)] + 3.0f * c[static_cast<std::size_t>(i)];
      }
    });
  };
  triad(); // first touch
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    triad();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 16.0 * static_cast<double>(n) / sec);
  }
  benchmark::DoNotOptimize(a.data());
  return best;
}

/// One pool of every core for a benchmark binary's host cases.
inline zenflow::worker_pool& host_pool() {
  static zenflow::worker_pool pool(0);
  return pool;
}

/// The host triad ceiling, measured once per binary (see measure_host_triad_bandwidth).
inline double host_triad_bandwidth() {
  static const double bw = measure_host_triad_bandwidth(host_pool());
  return bw;
}

} // namespace zf_bench
