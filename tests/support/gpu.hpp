/// @file
/// The `gpu` test tier: a fixture that skips without a device, unless ZENFLOW_REQUIRE_GPU=1
/// turns the skip into a failure, and a helper that runs stream work under CUDA graph capture.
///
/// The same test bodies also run on the kernel emulator (<zenflow/emu/emulator.hpp>): a `.cu` test
/// compiled by the host compiler (tests/emu) gets the emulated half of this header, where
/// `zf_test::stream` is a stream of an emulated device, `zf_test::device_buffer` its memory,
/// filled with 0xff bytes (as fresh device memory holds garbage; AddressSanitizer sees an access
/// past it), and a graph capture runs the work directly (capture is not emulated). Test bodies use these
/// names, never zenflow::stream or zenflow::device_buffer.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <zenflow/core/device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>

#if !defined(__CUDACC__)
#  include <zenflow/core/emulated_device.hpp>
#  include <zenflow/emu/emulator.hpp>
#  include <zenflow/engine/emulated_backend.hpp>
#endif

namespace zf_test {

inline bool gpu_required() {
  const char* v = std::getenv("ZENFLOW_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

#if defined(__CUDACC__)

/// True when the test bodies run on the kernel emulator (a host compiler), not on a GPU.
inline constexpr bool emulated = false;
/// The largest case (in elements) a test body runs: every case on a GPU.
inline constexpr std::int64_t max_case_elements = std::int64_t{1} << 62;
/// True on the emulator under ThreadSanitizer or AddressSanitizer (tens of times slower again).
inline constexpr bool sanitized = false;

using stream = zenflow::stream;
template <class T>
using device_buffer = zenflow::device_buffer<T>;

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
device_buffer<T> upload(const std::vector<T>& v, cudaStream_t s) {
  device_buffer<T> d(v.size(), s);
  if (!v.empty()) {
    ZF_CUDA_TRY(cudaMemcpyAsync(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  return d;
}

/// The contents of `d` after the work enqueued on `s` so far (blocks).
template <class T>
std::vector<T> download(const device_buffer<T>& d, cudaStream_t s) {
  std::vector<T> v(d.size());
  if (!v.empty()) {
    ZF_CUDA_TRY(cudaMemcpyAsync(v.data(), d.data(), v.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
  }
  ZF_CUDA_TRY(cudaStreamSynchronize(s));
  return v;
}

/// `cudaMemsetAsync` (the emulated half: on the emulated device's stream).
inline cudaError_t memset_async(void* p, int value, std::size_t bytes, cudaStream_t s) {
  return cudaMemsetAsync(p, value, bytes, s);
}

#else // the kernel emulator

inline constexpr bool emulated = true;
/// On the emulator a kernel's threads are CPU fibers (a fraction of a microsecond each where a GPU
/// has thousands at once, tens under a sanitizer): the cases up to 4M elements, 128K under
/// ThreadSanitizer or AddressSanitizer. The smaller cases take the kernels' same paths.
inline constexpr bool sanitized = ZF_EMU_TSAN || ZF_EMU_ASAN;
inline constexpr std::int64_t max_case_elements = sanitized ? std::int64_t{1} << 17 : std::int64_t{1} << 22;

/// The emulated GPU of the test process, current on the thread of every gpu test (its launches
/// go onto its streams, in stream order, as on a GPU).
inline zenflow::emulated_device& emulated_gpu() {
  static zenflow::emulated_device device;
  return device;
}

/// A stream of the emulated GPU.
class stream {
public:
  stream() : handle_(emulated_gpu().create_stream()) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { emulated_gpu().destroy_stream(handle_); }
  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  operator cudaStream_t() const noexcept { return handle_; } // NOLINT: a stream is used as its handle
  void synchronize() const { emulated_gpu().synchronize_stream(handle_); }

private:
  cudaStream_t handle_;
};

/// "Device" memory: allocated from the emulated GPU, 0xff bytes until written (as cudaMalloc's
/// garbage; under AddressSanitizer an access past it is reported). Freeing waits for the device.
template <class T>
class device_buffer : public zenflow::detail::emulated_garbage_buffer<T> {
public:
  device_buffer() = default;
  explicit device_buffer(std::size_t count, cudaStream_t /*stream-ordered on a GPU*/ = nullptr)
      : zenflow::detail::emulated_garbage_buffer<T>(count) {}
};

/// Base fixture: the emulated GPU current on the test's thread; no report left by its launches.
class gpu_test : public ::testing::Test {
protected:
  void SetUp() override {
    emulated_gpu().make_current();
    zenflow::emu::clear_reports();
  }
  void TearDown() override {
    emulated_gpu().synchronize();
    const auto reports = zenflow::emu::reports();
    for (const auto& r : reports) {
      ADD_FAILURE() << r;
    }
  }
};

/// Graph capture is not emulated: the work runs directly, then the stream is waited for.
template <class F>
void run_in_graph(cudaStream_t stream, F&& enqueue) {
  enqueue(stream);
  emulated_gpu().synchronize_stream(stream);
}

template <class T>
device_buffer<T> upload(const std::vector<T>& v, cudaStream_t s) {
  device_buffer<T> d(v.size(), s);
  if (!v.empty()) {
    emulated_gpu().copy(d.data(), v.data(), v.size() * sizeof(T), zenflow::copy_direction::host_to_device, s);
  }
  return d;
}

template <class T>
std::vector<T> download(const device_buffer<T>& d, cudaStream_t s) {
  std::vector<T> v(d.size());
  if (!v.empty()) {
    emulated_gpu().copy(v.data(), d.data(), v.size() * sizeof(T), zenflow::copy_direction::device_to_host, s);
  }
  emulated_gpu().synchronize_stream(s);
  return v;
}

inline cudaError_t memset_async(void* p, int value, std::size_t bytes, cudaStream_t s) {
  return zenflow::emu::detail::memset_async(p, value, bytes, s);
}

#endif

/// A dimension of a generated case: `n`, a third of it on the emulator under a sanitizer.
constexpr std::int64_t shrink(std::int64_t n) {
  return sanitized ? (n / 3 > 0 ? n / 3 : 1) : n;
}
/// Whether case `i` of a sweep runs: every case; one in four on the emulator under a sanitizer,
/// on a diagonal (i % 4 == i / 4 % 4), so that each of an inner loop's four first choices stays.
constexpr bool sampled(int i) {
  return !sanitized || i % 4 == (i / 4) % 4;
}

/// Runs `enqueue(stream)` directly or inside a captured graph, then waits: every gpu test body
/// runs both ways.
template <class F>
void run(cudaStream_t s, bool graph, F&& enqueue) {
  if (graph) {
    run_in_graph(s, enqueue);
  } else {
    enqueue(s);
#if defined(__CUDACC__)
    ZF_CUDA_TRY(cudaStreamSynchronize(s));
#else
    emulated_gpu().synchronize_stream(s);
#endif
  }
}

} // namespace zf_test
