// CPU optimizer benchmarks: the plain AdamW step (64M fp32 parameters, all cores) on every SIMD
// path, and the fused ZenFlow host window against the unfused sequence (accumulate pass, Adam
// pass, pack pass, zero pass). Each reports `fraction_of_ceiling`: its bytes/s over the ceiling
// measured in the same binary by a loop with the kernel's own read/write mix and sizes
// (zf_bench::measure_host_stream_ceiling), not a triad.
//
// Baselines are measured, never typed in: DeepSpeed's CPU Adam by zf_host_sweep (host_sweep.cpp)
// in the same run as zenflow's, torch.optim.AdamW by bench/optim/torch_adamw.py.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

#include "support/harness.hpp"

namespace {

using zenflow::bfloat16;

zenflow::worker_pool& pool() {
  return zf_bench::host_pool();
}

/// Parallel first touch, so that pages land where the threads that use them run.
template <class T>
std::vector<T> make(std::int64_t n, float value) {
  std::vector<T> v(static_cast<std::size_t>(n));
  pool().parallel_for(n, 1 << 20, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      v[static_cast<std::size_t>(i)] = zenflow::from_float<T>(value + 1e-7f * static_cast<float>(i % 1000));
    }
  });
  return v;
}

// Arg 0: SIMD path (0 scalar, 1 avx2, 2 avx512); Arg 1: 1 = also write bf16 working weights.
void BM_cpu_adamw_step_64M(benchmark::State& state) {
  const auto path = static_cast<zenflow::host::simd_path>(state.range(0));
  if (!zenflow::host::force_simd_path(path)) {
    state.SkipWithError("SIMD path not supported on this CPU");
    return;
  }
  const bool with_out = state.range(1) != 0;
  const std::int64_t n = std::int64_t{64} << 20;
  auto p = make<float>(n, 0.5f);
  auto m = make<float>(n, 0.0f);
  auto v = make<float>(n, 0.0f);
  auto g = make<float>(n, 0.01f);
  std::vector<bfloat16> out(with_out ? static_cast<std::size_t>(n) : 0u);
  zenflow::adamw_hparams hp;
  hp.weight_decay = 0.01f;
  std::int32_t count = 1;
  // The ceiling at the same size and mix: p m v read and written, g read (+ out written).
  const double bw =
      with_out ? zf_bench::measure_host_stream_ceiling<3, 1, 0, 1>(pool(), n, zenflow::detail::cpu_grain)
               : zf_bench::measure_host_stream_ceiling<3, 1, 0, 0>(pool(), n, zenflow::detail::cpu_grain);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = zenflow::host::adamw_span<float, bfloat16>(p.data(), m.data(), v.data(), g.data(),
                                                                     with_out ? out.data() : nullptr, n,
                                                                     count++, hp, 1.0f, &pool());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (e != cudaSuccess) {
      state.SkipWithError("adamw_span failed");
      break;
    }
    state.SetIterationTime(sec);
  }
  const double bytes =
      static_cast<double>(n) * (28.0 + (with_out ? 2.0 : 0.0)); // r: p m v g, w: p m v (+out)
  zf_bench::set_bytes_per_iteration(state, bytes);
  state.counters["ceiling_GBps"] = bw / 1e9;
  state.counters["fraction_of_ceiling"] =
      benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = pool().size();
  zenflow::host::reset_simd_path();
}
BENCHMARK(BM_cpu_adamw_step_64M)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->ArgNames({"path", "bf16_out"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

// The fused window against the unfused sequence on a 4096 x 4096 matrix, 90% of the channels
// unselected, bf16 slots and upload buffer. Reports both times and the speedup (goal >= 1.3x).
void BM_window_fused_vs_unfused(benchmark::State& state) {
  const std::int64_t channels = state.range(0), len = state.range(1);
  const std::int64_t n = channels * len;
  auto master = make<float>(n, 0.5f);
  auto m = make<float>(n, 0.0f);
  auto v = make<float>(n, 0.0f);
  auto acc = make<float>(n, 0.0f);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(channels), 3);
  std::vector<std::int32_t> idx;
  for (std::int64_t c = 0; c < channels; ++c) {
    if (c % 10 != 0) {
      idx.push_back(static_cast<std::int32_t>(c));
    }
  }
  const auto count = static_cast<std::int64_t>(idx.size());
  auto slot = make<bfloat16>(count * len, 0.01f);
  auto upload = make<bfloat16>(count * len, 0.0f);
  zenflow::channel_state st{master.data(), m.data(), v.data(), counts.data(), channels, len};
  zenflow::adamw_hparams hp;
  const std::int32_t steps = 4;
  // The ceiling at the window's size and mix: acc p m v read and written, slot read, upload written.
  const double bw =
      zf_bench::measure_host_stream_ceiling<4, 0, 1, 1>(pool(), count * len, zenflow::detail::cpu_grain);
  double fused_total = 0, unfused_total = 0;
  for (auto _ : state) {
    // Fused.
    auto t0 = std::chrono::steady_clock::now();
    if (zenflow::host::adamw_window<bfloat16, bfloat16>(st, acc.data(), idx.data(), count, slot.data(), 0.5f,
                                                        steps, hp, upload.data(), &pool()) != cudaSuccess) {
      state.SkipWithError("adamw_window failed");
      break;
    }
    const double fused = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Unfused: accumulate pass, Adam pass over the unselected rows, pack pass, zero pass.
    t0 = std::chrono::steady_clock::now();
    (void)zenflow::host::accumulate_channels<bfloat16>(acc.data(), channels, len, slot.data(), idx.data(),
                                                       count, 0.5f, &pool());
    const std::int64_t rows = zenflow::detail::rows_per_chunk(len);
    pool().parallel_for(count, rows, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) {
        const std::int64_t o = static_cast<std::int64_t>(idx[static_cast<std::size_t>(r)]) * len;
        const auto k = zenflow::make_adam_constants(
            hp, counts[static_cast<std::size_t>(idx[static_cast<std::size_t>(r)])] + 1);
        zenflow::detail::cpu::adam_span<float, float>(master.data() + o, m.data() + o, v.data() + o,
                                                      acc.data() + o, nullptr, len, k, 1.0f / steps);
      }
    });
    (void)zenflow::host::gather_channels<float, bfloat16>(
        zenflow::make_channel_matrix<const float>(master.data(), channels, len), idx.data(), count,
        upload.data(), nullptr, &pool());
    pool().parallel_for(count, rows, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) {
        std::memset(acc.data() + static_cast<std::int64_t>(idx[static_cast<std::size_t>(r)]) * len, 0,
                    static_cast<std::size_t>(len) * sizeof(float));
      }
    });
    const double unfused = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fused_total += fused;
    unfused_total += unfused;
    state.SetIterationTime(fused);
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["fused_ms"] = 1e3 * fused_total / it;
  state.counters["unfused_ms"] = 1e3 * unfused_total / it;
  state.counters["speedup"] = unfused_total / fused_total;
  // Fused traffic: r acc p m v slot, w acc p m v upload = 32 + 2 + 2 bytes per element.
  zf_bench::set_bytes_per_iteration(state, static_cast<double>(count * len) * 36.0);
  state.counters["ceiling_GBps"] = bw / 1e9;
  state.counters["fraction_of_ceiling"] = benchmark::Counter(static_cast<double>(count * len) * 36.0 / bw,
                                                             benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_window_fused_vs_unfused)
    ->Args({4096, 4096})
    ->Args({11008, 4096})
    ->ArgNames({"channels", "len"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

} // namespace
