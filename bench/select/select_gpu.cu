// GPU select area: channel norms of bf16 gradients (bytes/s and fraction of the device copy
// bandwidth measured in the same run) and radix top-k (time, reads of N per call). The torch
// baseline for top-k is bench/select/torch_topk.py, run in the same session on the GPU machine.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>

#include "support/harness.hpp"

namespace {

double copy_bandwidth() {
  static const double bw = zf_bench::measure_device_copy_bandwidth();
  return bw;
}

template <class T>
zenflow::device_buffer<T> random_device(std::size_t n, cudaStream_t s, bool square = false) {
  std::vector<T> h(n);
  std::mt19937 gen(3);
  std::normal_distribution<float> d;
  for (auto& x : h) {
    const float v = d(gen);
    x = zenflow::from_float<T>(square ? v * v : v);
  }
  zenflow::device_buffer<T> b(n, s);
  zenflow::detail::check(cudaMemcpyAsync(b.data(), h.data(), n * sizeof(T), cudaMemcpyHostToDevice, s),
                         "upload");
  zenflow::detail::check(cudaStreamSynchronize(s), "upload");
  return b;
}

void report_norms(benchmark::State& state, double read_bytes) {
  zf_bench::set_bytes_per_iteration(state, read_bytes);
  // The copy rate counts read + write; a read-only kernel at the same HBM rate reaches 1.0.
  state.counters["frac_of_copy_bw"] =
      benchmark::Counter(read_bytes / copy_bandwidth(), benchmark::Counter::kIsIterationInvariantRate);
}

template <zenflow::channel_layout Layout>
void gpu_channel_norms_bf16(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const std::int64_t channels = state.range(0), len = state.range(1);
  zenflow::stream s;
  auto g = random_device<zenflow::bfloat16>(static_cast<std::size_t>(channels * len), s);
  zenflow::device_buffer<float> scores(static_cast<std::size_t>(channels), s), total(1, s);
  zenflow::device_buffer<std::uint32_t> flag(1, s);
  const std::int64_t ld = Layout == zenflow::channel_layout::contiguous ? len : channels;
  std::size_t bytes = 0;
  ZF_CUDA_TRY(
      zenflow::device::channel_norms(nullptr, bytes, g.data(), channels, len, ld, Layout, scores.data()));
  zenflow::device_buffer<std::byte> temp(bytes, s);
  const bool extras = state.range(2) != 0;
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::channel_norms(
        temp.data(), bytes, g.data(), channels, len, ld, Layout, scores.data(),
        extras ? zenflow::channel_norm_extras{total.data(), flag.data()} : zenflow::channel_norm_extras{},
        st));
  });
  report_norms(state, 2.0 * static_cast<double>(channels * len));
}
BENCHMARK(gpu_channel_norms_bf16<zenflow::channel_layout::contiguous>)
    ->Name("gpu_channel_norms_bf16_contiguous")
    ->ArgNames({"channels", "len", "extras"})
    ->Args({4096, 4096, 0})
    ->Args({4096, 4096, 1})
    ->Args({4096, 11008, 1})
    ->Args({11008, 4096, 1})
    ->Args({8192, 28672, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(gpu_channel_norms_bf16<zenflow::channel_layout::strided>)
    ->Name("gpu_channel_norms_bf16_strided")
    ->ArgNames({"channels", "len", "extras"})
    ->Args({4096, 4096, 1})
    ->Args({4096, 11008, 1})
    ->Args({8192, 28672, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

/// A batch of `layers` 4096 x 4096 bf16 gradients in one call.
void gpu_channel_norms_bf16_batched(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const int layers = static_cast<int>(state.range(0));
  const std::int64_t channels = 4096, len = 4096;
  zenflow::stream s;
  auto g = random_device<zenflow::bfloat16>(static_cast<std::size_t>(layers * channels * len), s);
  zenflow::device_buffer<float> scores(static_cast<std::size_t>(layers * channels), s), total(layers, s);
  zenflow::device_buffer<std::uint32_t> flag(layers, s);
  std::vector<zenflow::channel_norm_item<zenflow::bfloat16>> items;
  for (int l = 0; l < layers; ++l) {
    items.push_back({g.data() + l * channels * len, channels, len, len, zenflow::channel_layout::contiguous,
                     scores.data() + l * channels});
  }
  std::size_t bytes = 0;
  ZF_CUDA_TRY(zenflow::device::channel_norms_batched(nullptr, bytes, items.data(), layers));
  zenflow::device_buffer<std::byte> temp(bytes, s);
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::channel_norms_batched(temp.data(), bytes, items.data(), layers,
                                                       {total.data(), flag.data()}, st));
  });
  report_norms(state, 2.0 * static_cast<double>(layers * channels * len));
}
BENCHMARK(gpu_channel_norms_bf16_batched)
    ->ArgName("layers")
    ->Arg(32)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void gpu_topk(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const std::int64_t n = state.range(0);
  const std::int64_t k = std::max<std::int64_t>(1, n * state.range(1) / 100);
  zenflow::stream s;
  auto scores = random_device<float>(static_cast<std::size_t>(n), s, true);
  zenflow::device_buffer<std::int32_t> idx(static_cast<std::size_t>(k), s);
  zenflow::device_buffer<float> val(static_cast<std::size_t>(k), s);
  std::size_t bytes = 0;
  ZF_CUDA_TRY(zenflow::device::topk(nullptr, bytes, scores.data(), n, k, idx.data(), val.data()));
  zenflow::device_buffer<std::byte> temp(bytes, s);
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::topk(temp.data(), bytes, scores.data(), n, k, idx.data(), val.data(),
                                      zenflow::topk_order::ascending_index, st));
  });
  zf_bench::set_bytes_per_iteration(state, 4.0 * static_cast<double>(n));
  // Full reads of the scores per call: histogram, gather and write passes (candidate passes read
  // one top-level bucket, not counted here).
  state.counters["reads_of_N"] = n > zenflow::detail::topk_one_block_max_n ? 3 : 0;
  state.counters["k"] = static_cast<double>(k);
}
BENCHMARK(gpu_topk)
    ->ArgNames({"n", "k_percent"})
    ->ArgsProduct({{1 << 20, 1 << 22, 1 << 24}, {1, 5, 10}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

/// The engine's selection: one top-k per matrix (k = 10% of each), in one call.
void gpu_topk_segmented(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const int layers = static_cast<int>(state.range(0));
  const std::int64_t n = state.range(1);
  zenflow::stream s;
  auto scores = random_device<float>(static_cast<std::size_t>(layers * n), s, true);
  zenflow::device_buffer<std::int32_t> idx(static_cast<std::size_t>(layers * n / 10), s);
  std::vector<zenflow::topk_item> items;
  for (int l = 0; l < layers; ++l) {
    items.push_back({scores.data() + l * n, n, n / 10, idx.data() + l * (n / 10), nullptr});
  }
  std::size_t bytes = 0;
  ZF_CUDA_TRY(zenflow::device::topk_segmented(nullptr, bytes, items.data(), layers));
  zenflow::device_buffer<std::byte> temp(bytes, s);
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    ZF_CUDA_TRY(zenflow::device::topk_segmented(temp.data(), bytes, items.data(), layers,
                                                zenflow::topk_order::ascending_index, st));
  });
  zf_bench::set_bytes_per_iteration(state, 4.0 * static_cast<double>(layers * n));
}
BENCHMARK(gpu_topk_segmented)
    ->ArgNames({"layers", "n"})
    ->Args({128, 4096})
    ->Args({128, 11008})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace
