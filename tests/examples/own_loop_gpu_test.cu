// gpu tier of examples/own_loop: the loop's device half on CUDA (on_cuda.cuh) against the engine
// on the host backend (own_loop_cases.hpp), the same model, gradients and settings: the weights
// after every step and the optimizer state at the end, bit for bit. The gradients go up before
// each step, the weights come down after it.
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>

#include "own_loop/on_cuda.cuh"
#include "own_loop_cases.hpp"
#include "support/gpu.hpp"

namespace {

using namespace zf_own_loop_test;

template <class T>
struct device_mirror {
  cudaStream_t stream;
  std::vector<zenflow::device_buffer<T>> w, g;
  std::vector<std::vector<T>> now;
  explicit device_mirror(cudaStream_t s) : stream(s) {
    for (const auto& x : initial_weights<T>()) {
      w.push_back(zf_test::upload(x, s));
      g.emplace_back(x.size(), s);
      now.emplace_back(x.size());
    }
  }
  T* weights(std::size_t p) { return w[p].data(); }
  const T* grads(std::size_t p) { return g[p].data(); }
  void grads_written(std::size_t p, const std::vector<T>& src) {
    ZF_CUDA_TRY(
        cudaMemcpyAsync(g[p].data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    ZF_CUDA_TRY(cudaStreamSynchronize(stream)); // `src` is rewritten by the next step
  }
  const std::vector<T>& weights_now(std::size_t p) {
    now[p] = zf_test::download(w[p], stream);
    return now[p];
  }
};

class own_loop_gpu : public zf_test::gpu_test {};

template <class T>
void run(bool overlap) {
  zenflow::stream s;
  device_mirror<T> mirror(s.get());
  run_against_engine<T>(overlap, own_loop::on_cuda{s.get()}, mirror);
}

TEST_F(own_loop_gpu, equals_the_host_engine_bit_for_bit_fp32_overlap) {
  run<float>(true);
}
TEST_F(own_loop_gpu, equals_the_host_engine_bit_for_bit_bf16_no_overlap) {
  run<zenflow::bfloat16>(false);
}

} // namespace
