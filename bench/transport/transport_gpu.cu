// GPU transport benchmarks: bandwidth through the pinned rings (real streams and events) against
// one plain pinned cudaMemcpyAsync of the same bytes measured in the same run (goal: >= 95%),
// and the overlap of ring copies with a concurrent compute kernel.
//
// Ring cases are timed on the wall clock (manual time): they include the host side of the
// protocol (event waits, slot hand-offs), which is what the training loop pays.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>

#include "support/harness.hpp"

namespace {

using backend = zenflow::cuda_copy_backend;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t total_bytes = std::size_t{1} << 30;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Best of `reps` single plain copies of `bytes` (events): the ceiling the rings are measured against.
double plain_copy_bps(
    void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s, int reps = 3) {
  zenflow::event start(cudaEventDefault), stop(cudaEventDefault);
  zenflow::detail::check(cudaMemcpyAsync(dst, src, bytes, kind, s), "warm-up copy");
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    start.record(s);
    zenflow::detail::check(cudaMemcpyAsync(dst, src, bytes, kind, s), "plain copy");
    stop.record(s);
    stop.synchronize();
    float ms = 0;
    zenflow::detail::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::max(best, static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3));
  }
  return best;
}

// All of `d_src` through the ring in `slot_bytes` chunks; the consumer releases each slot as soon
// as its event completed. Returns wall seconds.
double ring_d2h_once(zenflow::d2h_ring<zenflow::ring_meta, backend>& ring,
                     const std::byte* d_src,
                     std::size_t bytes,
                     cudaStream_t copies) {
  const std::size_t chunk = ring.slot_bytes();
  const std::size_t chunks = (bytes + chunk - 1) / chunk;
  const auto t0 = clock_type::now();
  std::thread consumer([&] {
    for (std::size_t c = 0; c < chunks; ++c) {
      auto r = ring.next();
      benchmark::DoNotOptimize(r->data[0]);
      ring.release(*r);
    }
  });
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t n = std::min(chunk, bytes - c * chunk);
    (void)ring.push(d_src + c * chunk, n, {}, copies);
  }
  consumer.join();
  return seconds_since(t0);
}

void gpu_ring_d2h_bandwidth(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const auto slot_bytes = static_cast<std::size_t>(state.range(0));
  const auto slots = static_cast<std::size_t>(state.range(1));
  zenflow::copy_stream<backend> copies;
  zenflow::device_buffer<std::byte> d_src(total_bytes, copies);
  zenflow::detail::check(cudaMemsetAsync(d_src.data(), 1, total_bytes, copies), "memset");
  double plain = 0;
  {
    zenflow::pinned_buffer<std::byte> host(total_bytes);
    plain = plain_copy_bps(host.data(), d_src.data(), total_bytes, cudaMemcpyDeviceToHost, copies);
  }
  zenflow::d2h_ring<zenflow::ring_meta, backend> ring(slots, slot_bytes);
  (void)ring_d2h_once(ring, d_src.data(), total_bytes / 8, copies); // warm-up
  const auto blocked0 = ring.stats().producer_blocked_ns;
  double seconds = 0;
  for (auto _ : state) {
    const double s = ring_d2h_once(ring, d_src.data(), total_bytes, copies);
    state.SetIterationTime(s);
    seconds += s;
  }
  zf_bench::set_bytes_per_iteration(state, static_cast<double>(total_bytes));
  const double ring_bps =
      static_cast<double>(total_bytes) * static_cast<double>(state.iterations()) / seconds;
  state.counters["plain_GBps"] = plain / 1e9;
  state.counters["fraction_of_plain"] = ring_bps / plain;
  state.counters["producer_blocked_ms"] =
      benchmark::Counter(static_cast<double>(ring.stats().producer_blocked_ns - blocked0) * 1e-6,
                         benchmark::Counter::kAvgIterations);
  state.counters["pinned"] = ring.pinned() ? 1 : 0;
}
BENCHMARK(gpu_ring_d2h_bandwidth)
    ->ArgsProduct({{1 << 20, 4 << 20, 16 << 20}, {2, 4, 8}})
    ->ArgNames({"slot_bytes", "slots"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Arithmetic only (registers), so that it competes with the copies for nothing but scheduling.
__global__ void busy_kernel(float* x, std::int64_t n, int iters) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int k = 0; k < iters; ++k) {
      v = v * 0.9999f + 0.0001f;
    }
    x[i] = v;
  }
}

// Overlap: a compute kernel calibrated to last about as long as the ring transfer, run alone,
// the transfer alone, then both at once. overlap = (kernel + copy - both) / min(kernel, copy):
// 1 when the copy hides entirely behind the kernel, 0 when they serialise. copy_kept is the
// ring's bandwidth while the kernel runs over its bandwidth alone.
void gpu_ring_overlap_with_kernel(benchmark::State& state) {
  if (zf_bench::skip_without_gpu(state)) {
    return;
  }
  const std::size_t bytes = std::size_t{256} << 20;
  zenflow::stream compute;
  zenflow::copy_stream<backend> copies;
  zenflow::device_buffer<std::byte> d_src(bytes, copies);
  zenflow::detail::check(cudaMemsetAsync(d_src.data(), 3, bytes, copies), "memset");
  const std::int64_t n = 1 << 20;
  zenflow::device_buffer<float> d_x(static_cast<std::size_t>(n), compute);
  zenflow::detail::check(cudaMemsetAsync(d_x.data(), 0, d_x.bytes(), compute), "memset");
  copies.synchronize();
  compute.synchronize();
  zenflow::d2h_ring<zenflow::ring_meta, backend> ring(4, 4 << 20);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);

  auto kernel_seconds = [&](int iters) {
    const auto t0 = clock_type::now();
    busy_kernel<<<blocks, 256, 0, compute>>>(d_x.data(), n, iters);
    zenflow::detail::check(cudaGetLastError(), "busy_kernel");
    compute.synchronize();
    return seconds_since(t0);
  };
  (void)kernel_seconds(100); // module load
  const double copy_alone = ring_d2h_once(ring, d_src.data(), bytes, copies);
  const int probe = 20000;
  const double probe_s = kernel_seconds(probe);
  const int iters = std::max(1, static_cast<int>(probe * copy_alone / probe_s));
  const double kernel_alone = kernel_seconds(iters);

  double both = 0, copy_with_kernel = 0;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    busy_kernel<<<blocks, 256, 0, compute>>>(d_x.data(), n, iters);
    zenflow::detail::check(cudaGetLastError(), "busy_kernel");
    const double c = ring_d2h_once(ring, d_src.data(), bytes, copies);
    compute.synchronize();
    const double b = seconds_since(t0);
    state.SetIterationTime(b);
    both += b;
    copy_with_kernel += c;
  }
  const double it = static_cast<double>(std::max<std::int64_t>(state.iterations(), 1));
  both /= it;
  copy_with_kernel /= it;
  state.counters["kernel_ms"] = kernel_alone * 1e3;
  state.counters["copy_ms"] = copy_alone * 1e3;
  state.counters["both_ms"] = both * 1e3;
  state.counters["overlap"] = (kernel_alone + copy_alone - both) / std::min(kernel_alone, copy_alone);
  state.counters["copy_kept"] = copy_alone / copy_with_kernel;
}
BENCHMARK(gpu_ring_overlap_with_kernel)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

} // namespace
