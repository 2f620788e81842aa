// Device and PCIe copy bandwidth: the ceilings that later benchmarks report fractions of.
// D2D (HBM read + write), H2D and D2H from pinned memory, and D2H into pageable memory for
// contrast (what an offload engine without pinned staging would get).
#include "support/harness.hpp"

namespace {

void gpu_copy_d2d(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  zenflow::stream s;
  zenflow::device_buffer<std::byte> a(bytes, s), b(bytes, s);
  zf_bench::gpu_loop(state, s, [&](cudaStream_t st) {
    zenflow::detail::check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st), "d2d");
  });
  zf_bench::set_bytes_per_iteration(state, 2.0 * static_cast<double>(bytes));
}
BENCHMARK(gpu_copy_d2d)->Arg(1 << 26)->Arg(1 << 30)->UseManualTime()->Unit(benchmark::kMicrosecond);

template <cudaMemcpyKind kind, bool pinned>
void gpu_copy_pcie(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  zenflow::stream s;
  zenflow::device_buffer<std::byte> dev(bytes, s);
  zenflow::pinned_buffer<std::byte> pinned_host(pinned ? bytes : 0);
  std::vector<std::byte> pageable(pinned ? 0 : bytes);
  std::byte* host = pinned ? pinned_host.data() : pageable.data();
  zf_bench::gpu_loop(
      state, s,
      [&](cudaStream_t st) {
        void* dst =
            kind == cudaMemcpyHostToDevice ? static_cast<void*>(dev.data()) : static_cast<void*>(host);
        const void* src = kind == cudaMemcpyHostToDevice ? static_cast<const void*>(host) : dev.data();
        zenflow::detail::check(cudaMemcpyAsync(dst, src, bytes, kind, st), "pcie copy");
      },
      false);
  zf_bench::set_bytes_per_iteration(state, static_cast<double>(bytes));
}
BENCHMARK(gpu_copy_pcie<cudaMemcpyHostToDevice, true>)
    ->Name("gpu_copy_h2d_pinned")
    ->Arg(1 << 22)
    ->Arg(1 << 28)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(gpu_copy_pcie<cudaMemcpyDeviceToHost, true>)
    ->Name("gpu_copy_d2h_pinned")
    ->Arg(1 << 22)
    ->Arg(1 << 28)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(gpu_copy_pcie<cudaMemcpyDeviceToHost, false>)
    ->Name("gpu_copy_d2h_pageable")
    ->Arg(1 << 28)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace
