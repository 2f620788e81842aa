/// @file
/// Google Benchmark helpers shared by every zenflow benchmark.
///
/// GPU cases time with CUDA events and report manual time (`UseManualTime()`), flush L2 before
/// each iteration so that a kernel is measured against HBM, not against the cache, and report
/// bytes/s. Every ratio a benchmark reports is against a baseline measured in the same run.
#pragma once

#include <algorithm>
#include <bit>
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
  zenflow::detail::check(cudaStreamSynchronize(s), "warm-up");
  for (auto _ : state) {
    if (flush_l2) {
      flusher.flush(s);
    }
    start.record(s);
    enqueue(s);
    stop.record(s);
    stop.synchronize();
    float ms = 0;
    zenflow::detail::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
}

/// Device-to-device copy bandwidth (read + write bytes per second) over `bytes`: the ceiling
/// every device-memory-bound kernel is compared with.
inline double measure_device_copy_bandwidth(std::size_t bytes = std::size_t{1} << 30, int reps = 10) {
  zenflow::stream s;
  zenflow::device_buffer<std::byte> a(bytes, s), b(bytes, s);
  zenflow::event start(cudaEventDefault), stop(cudaEventDefault);
  zenflow::detail::check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s), "copy");
  start.record(s);
  for (int i = 0; i < reps; ++i) {
    zenflow::detail::check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s), "copy");
  }
  stop.record(s);
  stop.synchronize();
  float ms = 0;
  zenflow::detail::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return 2.0 * static_cast<double>(bytes) * reps / (static_cast<double>(ms) * 1e-3);
}

/// Median of `reps` timings (seconds) of `fn`, after one untimed call.
template <class F>
double median_seconds(F&& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// The memory ceiling of an in-place host kernel, measured with the kernel's own traffic and
/// sizes (not a triad, whose mix and sizes differ): `RW` fp32 arrays read and written in place,
/// `R` fp32 arrays read, `R16` 16-bit arrays read, `W16` 16-bit arrays written only, `n`
/// elements each, split over `pool` in chunks of `grain`, with next to no arithmetic. Returns
/// bytes/s counted as the kernels count them (8 per RW, 4 per R, 2 per R16 and W16 element).
template <int RW, int R, int R16, int W16>
double
measure_host_stream_ceiling(zenflow::worker_pool& pool, std::int64_t n, std::int64_t grain, int reps = 7) {
  static_assert(RW >= 1 && RW <= 4 && R <= 1 && R16 <= 1 && W16 <= 1);
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::vector<float>> rw(RW);
  std::vector<float> r(R > 0 ? N : 0);
  std::vector<std::uint16_t> r16(R16 > 0 ? N : 0), w16(W16 > 0 ? N : 0);
  // First touch in the pool's chunks, as the kernels' benchmarks do.
  for (auto& a : rw) {
    a.resize(N);
  }
  pool.parallel_for(n, grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (auto i = lo; i < hi; ++i) {
      const auto k = static_cast<std::size_t>(i);
      for (auto& a : rw) {
        a[k] = 1.0f;
      }
      if constexpr (R > 0) {
        r[k] = 1e-3f;
      }
      if constexpr (R16 > 0) {
        r16[k] = 0x3a83; // ~1e-3 as bfloat16
      }
      if constexpr (W16 > 0) {
        w16[k] = 0;
      }
    }
  });
  auto pass = [&] {
    pool.parallel_for(n, grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      float* __restrict a0 = rw[0].data();
      float* __restrict a1 = rw[RW > 1 ? 1 : 0].data();
      float* __restrict a2 = rw[RW > 2 ? 2 : 0].data();
      float* __restrict a3 = rw[RW > 3 ? 3 : 0].data();
      const float* __restrict b = r.data();
      const std::uint16_t* __restrict h = r16.data();
      std::uint16_t* __restrict o = w16.data();
      for (auto i = lo; i < hi; ++i) {
        float x = 0.0f;
        if constexpr (R > 0) {
          x += b[i];
        }
        if constexpr (R16 > 0) {
          x += std::bit_cast<float>(static_cast<std::uint32_t>(h[i]) << 16);
        }
        a0[i] += x;
        if constexpr (RW > 1) {
          a1[i] += x;
        }
        if constexpr (RW > 2) {
          a2[i] += x;
        }
        if constexpr (RW > 3) {
          a3[i] += x;
        }
        if constexpr (W16 > 0) {
          o[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(a0[i]) >> 16);
        }
      }
    });
  };
  const double sec = median_seconds(pass, reps);
  benchmark::DoNotOptimize(rw[0].data());
  benchmark::DoNotOptimize(w16.data());
  return (8.0 * RW + 4.0 * R + 2.0 * R16 + 2.0 * W16) * static_cast<double>(n) / sec;
}

/// Sum of `n` bfloat16 bit patterns as floats: a plain read loop, compiled for AVX-512, AVX2 and
/// the baseline, picked at run time (16 independent sums, so that it vectorises).
__attribute__((target_clones("avx512f", "avx2", "default"))) static float sum_bf16(const std::uint16_t* h,
                                                                                   std::int64_t n) {
  float acc[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      acc[j] += std::bit_cast<float>(static_cast<std::uint32_t>(h[i + j]) << 16);
    }
  }
  for (; i < n; ++i) {
    acc[0] += std::bit_cast<float>(static_cast<std::uint32_t>(h[i]) << 16);
  }
  float s = 0.0f;
  for (float a : acc) {
    s += a;
  }
  return s;
}

/// Read bandwidth of a plain vectorised read loop over the 16-bit `buffers` (rotating, one per
/// call, `n` elements each), split over `pool` in chunks of `grain`: the yardstick of read-only
/// host kernels such as the bf16 channel norms, measured at their sizes and with their rotation.
inline double measure_host_read_bandwidth(zenflow::worker_pool& pool,
                                          const std::vector<std::vector<std::uint16_t>>& buffers,
                                          std::int64_t grain,
                                          int reps = 0) {
  const auto n = static_cast<std::int64_t>(buffers.front().size());
  std::vector<float> partial(static_cast<std::size_t>(zenflow::worker_pool::chunk_count(n, grain)));
  std::size_t next = 0;
  auto pass = [&] {
    const std::uint16_t* __restrict h = buffers[next].data();
    next = (next + 1) % buffers.size();
    pool.parallel_for(n, grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      partial[static_cast<std::size_t>(c)] = sum_bf16(h + lo, hi - lo);
    });
  };
  reps = reps > 0 ? reps : static_cast<int>(2 * buffers.size());
  const double sec = median_seconds(pass, reps);
  benchmark::DoNotOptimize(partial.data());
  return 2.0 * static_cast<double>(n) / sec;
}

/// One pool of every core for a benchmark binary's host cases.
inline zenflow::worker_pool& host_pool() {
  static zenflow::worker_pool pool(0);
  return pool;
}

} // namespace zf_bench
