// GPU optimizer benchmarks: dense multi-tensor AdamW bytes/s against the device-to-device copy
// ceiling measured in the same run, and selective AdamW for k = 1/5/10% of the channels against
// the dense step on the same matrix (goal: time ~ k / channels of dense). torch.optim.AdamW
// (fused=True) is measured by bench/optim/torch_adamw.py --device cuda in the same session.
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include <zenflow/optim/adamw.cuh>

#include "support/harness.hpp"

namespace {

using zenflow::bfloat16;

double copy_ceiling() {
  static const double bw = zf_bench::measure_device_copy_bandwidth();
  return bw;
}

struct dense_set {
  zenflow::device_buffer<bfloat16> w, g;
  zenflow::device_buffer<float> p, m, v;
  zenflow::device_buffer<std::int32_t> counts;
  std::vector<zenflow::adamw_tensor<bfloat16>> tensors;

  dense_set(std::int64_t total, int pieces, cudaStream_t s)
      : w(static_cast<std::size_t>(total), s), g(static_cast<std::size_t>(total), s),
        p(static_cast<std::size_t>(total), s), m(static_cast<std::size_t>(total), s),
        v(static_cast<std::size_t>(total), s), counts(static_cast<std::size_t>(pieces), s) {
    zenflow::detail::check(cudaMemsetAsync(g.data(), 0x3c, g.bytes(), s), "memset");
    zenflow::detail::check(cudaMemsetAsync(p.data(), 0, p.bytes(), s), "memset");
    zenflow::detail::check(cudaMemsetAsync(m.data(), 0, m.bytes(), s), "memset");
    zenflow::detail::check(cudaMemsetAsync(v.data(), 0, v.bytes(), s), "memset");
    zenflow::detail::check(cudaMemsetAsync(counts.data(), 0, counts.bytes(), s), "memset");
    const std::int64_t each = total / pieces;
    for (int i = 0; i < pieces; ++i) {
      const std::int64_t o = i * each;
      tensors.push_back({w.data() + o, g.data() + o, p.data() + o, m.data() + o, v.data() + o, each});
    }
  }
};

// Arg 0: total parameters (M); Arg 1: number of tensors.
void BM_gpu_adamw_dense(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  zenflow::stream s;
  const std::int64_t total = state.range(0) << 20;
  const int pieces = static_cast<int>(state.range(1));
  dense_set d(total, pieces, s);
  zenflow::adamw_hparams hp;
  hp.weight_decay = 0.01f;
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    zenflow::detail::check(zenflow::device::adamw_dense<bfloat16>(d.tensors.data(), pieces, d.counts.data(),
                                                                  hp, nullptr, nullptr, st),
                           "adamw_dense");
  });
  const double bytes = static_cast<double>(total) * 28.0; // r: g(2) p m v; w: p m v w(2)
  zf_bench::set_bytes_per_iteration(state, bytes);
  state.counters["copy_ceiling_GBps"] = copy_ceiling() / 1e9;
  state.counters["fraction_of_copy"] =
      benchmark::Counter(bytes / copy_ceiling(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gpu_adamw_dense)
    ->Args({256, 1})
    ->Args({256, 64})
    ->Args({16, 200})
    ->ArgNames({"Mparams", "tensors"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Selective AdamW on a channels x len bf16 matrix; Arg 2: k in per mille of the channels
// (1000 = every channel, the dense reference on the same matrix through the same kernel).
void BM_gpu_adamw_selective(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  zenflow::stream s;
  const std::int64_t channels = state.range(0), len = state.range(1);
  const std::int64_t k = std::max<std::int64_t>(1, channels * state.range(2) / 1000);
  zenflow::device_buffer<bfloat16> w(static_cast<std::size_t>(channels * len), s), g(w.size(), s);
  zenflow::device_buffer<float> p(static_cast<std::size_t>(k * len), s), m(p.size(), s), v(p.size(), s);
  zenflow::device_buffer<std::int32_t> idx(static_cast<std::size_t>(k), s),
      counts(static_cast<std::size_t>(k), s);
  std::vector<std::int32_t> h_idx(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < k; ++r) {
    h_idx[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r * channels / k); // spread out, sorted
  }
  zenflow::detail::check(cudaMemcpyAsync(idx.data(), h_idx.data(), idx.bytes(), cudaMemcpyHostToDevice, s),
                         "copy");
  zenflow::detail::check(cudaMemsetAsync(g.data(), 0x3c, g.bytes(), s), "memset");
  zenflow::detail::check(cudaMemsetAsync(p.data(), 0, p.bytes(), s), "memset");
  zenflow::detail::check(cudaMemsetAsync(m.data(), 0, m.bytes(), s), "memset");
  zenflow::detail::check(cudaMemsetAsync(v.data(), 0, v.bytes(), s), "memset");
  zenflow::detail::check(cudaMemsetAsync(counts.data(), 0, counts.bytes(), s), "memset");
  zenflow::device_buffer<float> l1(1, s);
  zenflow::adamw_hparams hp;
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    zenflow::detail::check(zenflow::device::adamw_selective<bfloat16>(
                               zenflow::make_channel_matrix(w.data(), channels, len),
                               zenflow::make_channel_matrix<const bfloat16>(g.data(), channels, len),
                               {idx.data(), k, p.data(), m.data(), v.data(), counts.data()}, hp, {},
                               l1.data(), st),
                           "adamw_selective");
  });
  const double bytes = static_cast<double>(k * len) * 28.0;
  zf_bench::set_bytes_per_iteration(state, bytes);
  state.counters["k"] = static_cast<double>(k);
  state.counters["k_fraction"] = static_cast<double>(k) / static_cast<double>(channels);
  state.counters["fraction_of_copy"] =
      benchmark::Counter(bytes / copy_ceiling(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gpu_adamw_selective)
    ->ArgsProduct({{16384}, {4096}, {10, 50, 100, 1000}})
    ->ArgNames({"channels", "len", "k_permille"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Packing the unselected gradients (90% of the channels) for the device-to-host copy.
void BM_gpu_gather_unselected(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  zenflow::stream s;
  const std::int64_t channels = 16384, len = 4096;
  std::vector<std::int32_t> h_idx;
  for (std::int64_t c = 0; c < channels; ++c) {
    if (c % 10 != 0) {
      h_idx.push_back(static_cast<std::int32_t>(c));
    }
  }
  const auto count = static_cast<std::int64_t>(h_idx.size());
  zenflow::device_buffer<bfloat16> g(static_cast<std::size_t>(channels * len), s),
      packed(static_cast<std::size_t>(count * len), s);
  zenflow::device_buffer<std::int32_t> idx(h_idx.size(), s);
  zenflow::device_buffer<float> l1(1, s);
  zenflow::detail::check(cudaMemcpyAsync(idx.data(), h_idx.data(), idx.bytes(), cudaMemcpyHostToDevice, s),
                         "copy");
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    zenflow::detail::check(zenflow::device::gather_channels<bfloat16, bfloat16>(
                               zenflow::make_channel_matrix<const bfloat16>(g.data(), channels, len),
                               idx.data(), count, packed.data(), l1.data(), st),
                           "gather");
  });
  const double bytes = static_cast<double>(count * len) * 4.0;
  zf_bench::set_bytes_per_iteration(state, bytes);
  state.counters["fraction_of_copy"] =
      benchmark::Counter(bytes / copy_ceiling(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_gpu_gather_unselected)->UseManualTime()->Unit(benchmark::kMicrosecond);

} // namespace
