/// @file
/// The `gpu` test tier: a fixture that skips without a device, unless ZENFLOW_REQUIRE_GPU=1
/// turns the skip into a failure, and a helper that runs stream work under CUDA graph capture.
#pragma once

#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <zenflow/core/device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>

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

/// A device copy of `v`, enqueued on `s` (the buffer is stream-ordered on `s` too).
template <class T>
zenflow::device_buffer<T> upload(const std::vector<T>& v, cudaStream_t s) {
  zenflow::device_buffer<T> d(v.size(), s);
  if (!v.empty()) {
    ZF_CUDA_TRY(cudaMemcpyAsync(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  return d;
}

/// The contents of `d` after the work enqueued on `s` so far (blocks).
template <class T>
std::vector<T> download(const zenflow::device_buffer<T>& d, cudaStream_t s) {
  std::vector<T> v(d.size());
  if (!v.empty()) {
    ZF_CUDA_TRY(cudaMemcpyAsync(v.data(), d.data(), v.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
  }
  ZF_CUDA_TRY(cudaStreamSynchronize(s));
  return v;
}

/// Runs `enqueue(stream)` directly or inside a captured graph, then waits: every gpu test body
/// runs both ways.
template <class F>
void run(cudaStream_t s, bool graph, F&& enqueue) {
  if (graph) {
    run_in_graph(s, enqueue);
  } else {
    enqueue(s);
    ZF_CUDA_TRY(cudaStreamSynchronize(s));
  }
}

} // namespace zf_test
