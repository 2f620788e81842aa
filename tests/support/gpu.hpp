/// @file
/// The `gpu` test tier: a fixture that skips without a device, unless ZENFLOW_REQUIRE_GPU=1
/// turns the skip into a failure, and a helper that runs stream work under CUDA graph capture.
#pragma once

#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <zenflow/core/device.hpp>
#include <zenflow/core/error.hpp>

namespace zf_test {

inline bool gpu_required() {
  const char* v = std::getenv("ZENFLOW_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

/// Base fixture of every gpu test.
class gpu_test : public ::testing::Test {
protected:
  void SetUp() override {
    if (!zenflow::cuda_available()) {
      if (gpu_required()) {
        FAIL() << "ZENFLOW_REQUIRE_GPU=1 but no CUDA device is usable";
      }
      GTEST_SKIP() << "no CUDA device (set ZENFLOW_REQUIRE_GPU=1 to fail instead)";
    }
  }
};

/// Records what `enqueue(stream)` puts on `stream` into a CUDA graph, launches the graph once and
/// waits for it. Launchers that are capture-safe (no sync, no allocation) pass; others fail here.
template <class F>
void run_in_graph(cudaStream_t stream, F&& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ZF_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue(stream);
  ZF_CUDA_TRY(cudaStreamEndCapture(stream, &graph));
  ZF_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
  ZF_CUDA_TRY(cudaGraphLaunch(exec, stream));
  ZF_CUDA_TRY(cudaStreamSynchronize(stream));
  ZF_CUDA_TRY(cudaGraphExecDestroy(exec));
  ZF_CUDA_TRY(cudaGraphDestroy(graph));
}

} // namespace zf_test
