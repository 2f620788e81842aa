// Host backend of the select area: channel norms (bf16 gradients, both layouts) and top-k,
// on all cores, against the host triad bandwidth measured in the same run.
#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>

#include "support/harness.hpp"

namespace {

zenflow::worker_pool& pool() {
  return zf_bench::host_pool();
}
double triad_bandwidth() {
  return zf_bench::host_triad_bandwidth();
}

template <zenflow::channel_layout Layout>
void host_channel_norms_bf16(benchmark::State& state) {
  const std::int64_t channels = state.range(0), len = state.range(1);
  std::vector<zenflow::bfloat16> g(static_cast<std::size_t>(channels * len));
  std::mt19937 gen(1);
  std::normal_distribution<float> d;
  for (auto& x : g) {
    x = zenflow::from_float<zenflow::bfloat16>(d(gen));
  }
  std::vector<float> scores(static_cast<std::size_t>(channels));
  const std::int64_t ld = Layout == zenflow::channel_layout::contiguous ? len : channels;
  std::size_t bytes = 0;
  (void)zenflow::host::channel_norms(nullptr, bytes, g.data(), channels, len, ld, Layout, scores.data());
  std::vector<std::byte> temp(bytes);
  float total = 0;
  std::uint32_t flag = 0;
  for (auto _ : state) {
    const cudaError_t e = zenflow::host::channel_norms(temp.data(), bytes, g.data(), channels, len, ld,
                                                       Layout, scores.data(), {&total, &flag}, &pool());
    if (e != cudaSuccess) {
      state.SkipWithError("channel_norms failed");
      return;
    }
    benchmark::DoNotOptimize(scores.data());
  }
  const double read = 2.0 * static_cast<double>(channels * len);
  zf_bench::set_bytes_per_iteration(state, read);
  state.counters["frac_of_triad_bw"] =
      benchmark::Counter(read / triad_bandwidth(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = pool().size();
}
BENCHMARK(host_channel_norms_bf16<zenflow::channel_layout::contiguous>)
    ->Name("host_channel_norms_bf16_contiguous")
    ->Args({4096, 4096})
    ->Args({4096, 11008})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(host_channel_norms_bf16<zenflow::channel_layout::strided>)
    ->Name("host_channel_norms_bf16_strided")
    ->Args({4096, 4096})
    ->Args({4096, 11008})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void host_topk(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const std::int64_t k = std::max<std::int64_t>(1, n * state.range(1) / 100);
  std::vector<float> s(static_cast<std::size_t>(n));
  std::mt19937 gen(2);
  std::normal_distribution<float> d;
  for (auto& x : s) {
    const float v = d(gen);
    x = v * v; // squared-norm-like scores
  }
  std::vector<std::int32_t> idx(static_cast<std::size_t>(k));
  std::size_t bytes = 0;
  (void)zenflow::host::topk(nullptr, bytes, s.data(), n, k, idx.data());
  std::vector<std::byte> temp(bytes);
  for (auto _ : state) {
    if (zenflow::host::topk(temp.data(), bytes, s.data(), n, k, idx.data(), nullptr,
                            zenflow::topk_order::ascending_index, &pool()) != cudaSuccess) {
      state.SkipWithError("topk failed");
      return;
    }
    benchmark::DoNotOptimize(idx.data());
  }
  zf_bench::set_bytes_per_iteration(state, 4.0 * static_cast<double>(n));
  state.counters["k"] = static_cast<double>(k);
}
BENCHMARK(host_topk)
    ->ArgsProduct({{1 << 20, 1 << 22}, {1, 5, 10}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace
