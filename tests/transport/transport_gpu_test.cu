// gpu tier for transport: the D2H ring with real streams and events (cuda_copy_backend),
// streamed while a compute kernel runs on another stream, every word checked against a host
// reference; copy_stream fork/join, also under CUDA graph capture. (The ring itself blocks on
// the host, so it is not capturable; its protocol is covered on the host backends by the cpu
// tests.)
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>
#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>

#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using backend = zenflow::cuda_copy_backend;

ZF_HOST_DEVICE inline std::uint32_t pattern(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + i;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<std::uint32_t>(x ^ (x >> 31));
}

__global__ void fill_kernel(std::uint32_t* out, std::int64_t n, std::uint64_t seed, std::int64_t offset) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    out[i] = pattern(seed, static_cast<std::uint64_t>(offset + i));
  }
}

// Compute that keeps the SMs busy for a while: the copies must overlap it, not wait for it.
__global__ void busy_kernel(float* x, std::int64_t n, int iters) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int k = 0; k < iters; ++k) {
      v = v * 0.999f + 0.001f;
    }
    x[i] = v;
  }
}

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>((n + 255) / 256);
}

class transport_gpu : public zf_test::gpu_test {};

TEST_F(transport_gpu, d2h_ring_streams_chunks_while_a_kernel_runs) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::int64_t chunk = 1 << 18; // words: 1 MiB
  const std::int64_t chunks = 48;
  zenflow::stream compute, busy;
  zenflow::copy_stream<backend> copies;
  zenflow::device_buffer<std::uint32_t> d_src(static_cast<std::size_t>(chunk * chunks), compute);
  zenflow::device_buffer<float> d_busy(1 << 20, busy);
  ZF_CUDA_TRY(cudaMemsetAsync(d_busy.data(), 0, d_busy.bytes(), busy));
  zenflow::d2h_ring<zenflow::ring_meta, backend> ring(4, chunk * sizeof(std::uint32_t));
  ASSERT_TRUE(ring.pinned());

  std::atomic<std::int64_t> mismatched_words{0};
  std::atomic<std::int64_t> order_errors{0};
  std::int64_t received = 0;
  std::thread consumer([&] {
    while (auto r = ring.next()) {
      const auto c = static_cast<std::int64_t>(r->sequence);
      if (r->meta.step != c || r->meta.begin != c * chunk || r->meta.end != (c + 1) * chunk ||
          r->bytes != static_cast<std::size_t>(chunk) * sizeof(std::uint32_t)) {
        ++order_errors;
      }
      const auto* words = reinterpret_cast<const std::uint32_t*>(r->data);
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < chunk; ++i) {
        bad += words[i] != pattern(seed, static_cast<std::uint64_t>(c * chunk + i)) ? 1 : 0;
      }
      mismatched_words += bad;
      ring.release(*r);
      ++received;
    }
  });

  busy_kernel<<<blocks_for(1 << 20), 256, 0, busy>>>(d_busy.data(), 1 << 20, 100000);
  ZF_CUDA_TRY(cudaGetLastError());
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::uint32_t* src = d_src.data() + c * chunk;
    fill_kernel<<<blocks_for(chunk), 256, 0, compute>>>(src, chunk, seed, c * chunk);
    ZF_CUDA_TRY(cudaGetLastError());
    copies.wait_for(compute); // the copy starts once this chunk is written, not before
    zenflow::ring_meta meta;
    meta.step = c;
    meta.begin = c * chunk;
    meta.end = (c + 1) * chunk;
    (void)ring.push(src, static_cast<std::size_t>(chunk) * sizeof(std::uint32_t), meta, copies);
  }
  ring.close();
  consumer.join();
  busy.synchronize();
  EXPECT_EQ(received, chunks);
  EXPECT_EQ(order_errors.load(), 0);
  EXPECT_EQ(mismatched_words.load(), 0);
  EXPECT_EQ(ring.stats().released, static_cast<std::uint64_t>(chunks));
}

void copy_stream_fork_join(bool in_graph) {
  const std::uint64_t seed = zf_test::base_seed() + 3;
  const std::int64_t n = 1 << 20;
  zenflow::stream s;
  zenflow::copy_stream<backend> copies;
  zenflow::device_buffer<std::uint32_t> d(n, s);
  zenflow::pinned_buffer<std::uint32_t> h(n);
  std::fill(h.data(), h.data() + n, 0u);
  auto enqueue = [&](cudaStream_t st) {
    fill_kernel<<<blocks_for(n), 256, 0, st>>>(d.data(), n, seed, 0);
    ZF_CUDA_TRY(cudaGetLastError());
    copies.wait_for(st);
    ZF_CUDA_TRY(cudaMemcpyAsync(h.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, copies));
    copies.join_into(st);
  };
  if (in_graph) {
    zf_test::run_in_graph(s, enqueue);
  } else {
    enqueue(s);
    s.synchronize(); // join_into: waiting for s covers the copy stream's copy
  }
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], pattern(seed, static_cast<std::uint64_t>(i))) << i;
  }
}

TEST_F(transport_gpu, copy_stream_forks_after_and_joins_into_the_compute_stream) {
  copy_stream_fork_join(false);
}

TEST_F(transport_gpu, copy_stream_fork_join_under_graph_capture) {
  copy_stream_fork_join(true);
}

} // namespace
