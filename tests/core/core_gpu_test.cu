// gpu tier for the core headers: device buffers, pinned memory, streams/events and the device
// side of the dtype conversions, each also under CUDA graph capture.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/memory.hpp>

#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

template <class T>
__global__ void round_trip_kernel(const float* in, T* narrow, float* wide, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    narrow[i] = zenflow::from_float<T>(in[i]);
    wide[i] = zenflow::to_float(narrow[i]);
  }
}

class core_gpu : public zf_test::gpu_test {};

TEST_F(core_gpu, device_buffer_round_trip_through_pinned_memory) {
  zenflow::stream s;
  const std::size_t n = 1 << 20;
  zenflow::pinned_buffer<float> host(n), back(n);
  ASSERT_TRUE(host.pinned());
  const auto values = zf_test::random_values<float>(n, zf_test::base_seed());
  std::copy(values.begin(), values.end(), host.data());
  zenflow::device_buffer<float> dev(n, s);
  ZF_CUDA_TRY(cudaMemcpyAsync(dev.data(), host.data(), host.bytes(), cudaMemcpyHostToDevice, s));
  ZF_CUDA_TRY(cudaMemcpyAsync(back.data(), dev.data(), dev.bytes(), cudaMemcpyDeviceToHost, s));
  s.synchronize();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], values[i]) << i;
  }
  zenflow::device_buffer<float> moved(std::move(dev));
  EXPECT_EQ(dev.data(), nullptr);
  EXPECT_EQ(moved.size(), n);
}

TEST_F(core_gpu, event_orders_two_streams) {
  zenflow::stream producer, consumer;
  zenflow::event done;
  const std::size_t n = 1 << 22;
  zenflow::device_buffer<std::uint8_t> dev(n, producer);
  zenflow::pinned_buffer<std::uint8_t> host(n);
  ZF_CUDA_TRY(cudaMemsetAsync(dev.data(), 0x5a, n, producer));
  done.record(producer);
  ZF_CUDA_TRY(cudaStreamWaitEvent(consumer, done, 0));
  ZF_CUDA_TRY(cudaMemcpyAsync(host.data(), dev.data(), n, cudaMemcpyDeviceToHost, consumer));
  consumer.synchronize();
  EXPECT_TRUE(done.ready());
  for (std::size_t i = 0; i < n; i += 4099) {
    ASSERT_EQ(host[i], 0x5a);
  }
}

template <class T>
void check_device_conversions(bool in_graph) {
  zenflow::stream s;
  const std::int64_t n = 100003;
  auto values = zf_test::random_values<float>(static_cast<std::size_t>(n), zf_test::base_seed() + 7, 1000.0f);
  values[0] = 65520.0f; // overflow boundary of half
  values[1] = 1e-9f;    // underflow
  values[2] = -0.0f;
  zenflow::pinned_buffer<float> in(n), wide(n);
  zenflow::pinned_buffer<T> narrow(n);
  std::copy(values.begin(), values.end(), in.data());
  zenflow::device_buffer<float> d_in(n, s), d_wide(n, s);
  zenflow::device_buffer<T> d_narrow(n, s);
  auto enqueue = [&](cudaStream_t st) {
    ZF_CUDA_TRY(cudaMemcpyAsync(d_in.data(), in.data(), in.bytes(), cudaMemcpyHostToDevice, st));
    round_trip_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, st>>>(d_in.data(), d_narrow.data(),
                                                                                 d_wide.data(), n);
    ZF_CUDA_TRY(cudaGetLastError());
    ZF_CUDA_TRY(
        cudaMemcpyAsync(narrow.data(), d_narrow.data(), d_narrow.bytes(), cudaMemcpyDeviceToHost, st));
    ZF_CUDA_TRY(cudaMemcpyAsync(wide.data(), d_wide.data(), d_wide.bytes(), cudaMemcpyDeviceToHost, st));
  };
  if (in_graph) {
    zf_test::run_in_graph(s, enqueue);
  } else {
    enqueue(s);
    s.synchronize();
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const T host_narrow = zenflow::from_float<T>(values[i]);
    ASSERT_EQ(zenflow::bit_pattern(narrow[i]), zenflow::bit_pattern(host_narrow))
        << "i=" << i << " x=" << values[i];
    ASSERT_EQ(wide[i], zenflow::to_float(host_narrow)) << i;
  }
}

TEST_F(core_gpu, device_conversions_match_the_host_bits) {
  check_device_conversions<zenflow::half>(false);
  check_device_conversions<zenflow::bfloat16>(false);
  check_device_conversions<float>(false);
}

TEST_F(core_gpu, device_conversions_match_the_host_bits_under_graph_capture) {
  check_device_conversions<zenflow::half>(true);
  check_device_conversions<zenflow::bfloat16>(true);
}

} // namespace
