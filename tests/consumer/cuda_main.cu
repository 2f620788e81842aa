// A downstream CUDA source: zenflow headers that need C++20 (memory.hpp's std::span among them), a
// kernel of its own that uses zenflow's host+device arithmetic, and a launcher whose argument
// check runs without a device. Kept to a few headers: CI compiles it four times.
#include <cstdio>
#include <string>

#include <zenflow/core/device.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/select/channel_norms.cuh>

__global__ void round_to_bf16(const float* in, zenflow::bfloat16* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] = zenflow::from_float<zenflow::bfloat16>(in[i]);
  }
}

int main() {
  // A negative channel count is rejected on the host, before anything touches the device.
  std::size_t temp_bytes = 0;
  const zenflow::bfloat16 grad[4] = {};
  float scores[2] = {};
  const cudaError_t e = zenflow::device::channel_norms(nullptr, temp_bytes, grad, -1, 2, 2,
                                                       zenflow::channel_layout::contiguous, scores);
  const std::string& msg = zenflow::last_error_message();
  if (e != cudaErrorInvalidValue || msg.find("channels") == std::string::npos) {
    std::printf("zenflow cuda consumer: expected cudaErrorInvalidValue naming 'channels', got %d '%s'\n",
                static_cast<int>(e), msg.c_str());
    return 1;
  }
  // The kernel is only launched where there is a device (CI has none).
  if (zenflow::device_count() > 0) {
    float* d_in = nullptr;
    zenflow::bfloat16* d_out = nullptr;
    const float in = 1.00390625f;
    zenflow::bfloat16 out{};
    if (cudaMalloc(&d_in, sizeof(float)) != cudaSuccess || cudaMalloc(&d_out, sizeof(out)) != cudaSuccess ||
        cudaMemcpy(d_in, &in, sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      std::printf("zenflow cuda consumer: cudaMalloc/cudaMemcpy failed\n");
      return 1;
    }
    round_to_bf16<<<1, 32>>>(d_in, d_out, 1);
    if (cudaMemcpy(&out, d_out, sizeof(out), cudaMemcpyDeviceToHost) != cudaSuccess ||
        zenflow::to_float(out) != 1.0f) {
      std::printf("zenflow cuda consumer: the kernel did not round 1.00390625 to 1.0\n");
      return 1;
    }
    cudaFree(d_in);
    cudaFree(d_out);
  }
  std::printf("zenflow cuda consumer ok (%d CUDA devices)\n", zenflow::device_count());
  return 0;
}
