// Host backend of the select area: channel norms (bf16 gradients, both layouts) and top-k, on
// all cores. The channel norms rotate over about 1 GiB of gradient copies, so that every call
// reads from DRAM (one reused matrix would measure the cache), and report `fraction_of_read_bw`:
// their read rate over a plain vectorised read loop run alongside at the same sizes and rotation.
#include <algorithm>
#include <cstdint>
#include <cstring>
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

template <zenflow::channel_layout Layout>
void host_channel_norms_bf16(benchmark::State& state) {
  const std::int64_t channels = state.range(0), len = state.range(1);
  const auto elems = static_cast<std::size_t>(channels * len);
  std::vector<zenflow::bfloat16> first(elems);
  std::mt19937 gen(1);
  std::normal_distribution<float> d;
  for (auto& x : first) {
    x = zenflow::from_float<zenflow::bfloat16>(d(gen));
  }
  // About 1 GiB of copies, used in turn.
  const std::size_t copies = std::max<std::size_t>(2, (std::size_t{1} << 30) / (2 * elems));
  std::vector<std::vector<std::uint16_t>> grads(copies, std::vector<std::uint16_t>(elems));
  for (auto& c : grads) {
    std::memcpy(c.data(), first.data(), 2 * elems);
  }
  std::vector<float> scores(static_cast<std::size_t>(channels));
  const std::int64_t ld = Layout == zenflow::channel_layout::contiguous ? len : channels;
  std::size_t bytes = 0;
  (void)zenflow::host::channel_norms(nullptr, bytes, first.data(), channels, len, ld, Layout, scores.data());
  std::vector<std::byte> temp(bytes);
  float total = 0;
  std::uint32_t flag = 0;
  std::size_t next = 0;
  for (auto _ : state) {
    const auto* g = reinterpret_cast<const zenflow::bfloat16*>(grads[next].data());
    next = (next + 1) % copies;
    const cudaError_t e = zenflow::host::channel_norms(temp.data(), bytes, g, channels, len, ld, Layout,
                                                       scores.data(), {&total, &flag}, &pool());
    if (e != cudaSuccess) {
      state.SkipWithError("channel_norms failed");
      return;
    }
    benchmark::DoNotOptimize(scores.data());
  }
  const double read = 2.0 * static_cast<double>(channels * len);
  zf_bench::set_bytes_per_iteration(state, read);
  const double read_bw = zf_bench::measure_host_read_bandwidth(pool(), grads, std::int64_t{1} << 16);
  state.counters["read_bw_GBps"] = read_bw / 1e9;
  state.counters["fraction_of_read_bw"] =
      benchmark::Counter(read / read_bw, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copies"] = static_cast<double>(copies);
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
