// Host memory bandwidth: the ceiling that host kernels (CPU AdamW, accumulation, packing) are
// measured against. A STREAM-like triad over all cores and a single-thread memcpy.
#include <cstring>
#include <vector>

#include "support/harness.hpp"

namespace {

void host_triad(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  zenflow::worker_pool pool;
  std::vector<float> a(static_cast<std::size_t>(n)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  for (auto _ : state) {
    pool.parallel_for(n, 1 << 16, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        a[static_cast<std::size_t>(i)] =
            b[static_cast<std::size_t>(i)] + 3.0f * c[static_cast<std::size_t>(i)];
      }
    });
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.counters["threads"] = pool.size();
  zf_bench::set_bytes_per_iteration(state, 16.0 * static_cast<double>(n)); // with a's read for ownership
}
BENCHMARK(host_triad)->Arg(1 << 24)->Arg(1 << 26)->Unit(benchmark::kMillisecond)->UseRealTime();

void host_memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  zf_bench::set_bytes_per_iteration(state, 2.0 * static_cast<double>(bytes));
}
BENCHMARK(host_memcpy)->Arg(1 << 28)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace
