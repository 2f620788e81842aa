/// @file
/// RAII owners for device memory, pinned host memory, streams and events.
///
/// These are the convenience layer: they throw `zenflow::cuda_error` on failure. Launchers never
/// allocate; the caller owns every buffer, typically through these types.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <utility>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/emulated_pinned.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// True for the errors that mean "this machine has no usable CUDA", as opposed to a real failure.
[[nodiscard]] inline bool is_no_cuda_error(cudaError_t status) noexcept {
  return status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice ||
         status == cudaErrorInitializationError || status == cudaErrorStubLibrary;
}
} // namespace detail

/// Owning, move-only device allocation of `size()` elements, stream-ordered
/// (`cudaMallocAsync` / `cudaFreeAsync` on the stream given at construction).
template <class T>
class device_buffer {
public:
  device_buffer() = default;
  /// Allocates `count` elements on `stream`. Throws `cuda_error` on failure.
  explicit device_buffer(std::size_t count, cudaStream_t stream = nullptr) : size_(count), stream_(stream) {
    if (count > 0) {
      void* p = nullptr;
      detail::check(cudaMallocAsync(&p, count * sizeof(T), stream),
                    "zenflow::device_buffer: cudaMallocAsync");
      data_ = static_cast<T*>(p);
    }
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept { swap(o); }
  device_buffer& operator=(device_buffer&& o) noexcept {
    device_buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~device_buffer() { reset(); }

  /// Frees on the owning stream (stream-ordered: no synchronisation).
  void reset() noexcept {
    if (data_ != nullptr) {
      (void)cudaFreeAsync(data_, stream_);
    }
    data_ = nullptr;
    size_ = 0;
  }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
  void swap(device_buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(stream_, o.stream_);
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
};

/// Owning, move-only page-locked host allocation (`cudaHostAlloc`).
///
/// Without a CUDA driver it falls back to 4 KiB-aligned pageable memory so that the host backend
/// runs the same code; `pinned()` says which one you got, and the first fallback in a process is
/// reported once on stderr. An `emulated_device` treats the fallback as pinned (what a GPU
/// machine would have pinned): its copies from and to it run asynchronously.
template <class T>
class pinned_buffer {
public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t count, unsigned flags = cudaHostAllocPortable) : size_(count) {
    if (count == 0) {
      return;
    }
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, count * sizeof(T), flags);
    if (status == cudaSuccess) {
      data_ = static_cast<T*>(p);
      pinned_ = true;
      return;
    }
    (void)cudaGetLastError();
    if (!detail::is_no_cuda_error(status)) {
      detail::check(status, "zenflow::pinned_buffer: cudaHostAlloc");
    }
    const std::size_t bytes = (count * sizeof(T) + alignment - 1) / alignment * alignment;
    data_ = static_cast<T*>(std::aligned_alloc(alignment, bytes));
    if (data_ == nullptr) {
      throw std::bad_alloc();
    }
    // What a GPU machine would have pinned: an emulated device's copies treat it as pinned, and
    // it is resident from the start, as page-locked memory is (a process's measured footprint is
    // then the one it would have beside a GPU).
    std::memset(static_cast<void*>(data_), 0, bytes);
    detail::emulated_pinned_ranges::instance().add(data_, bytes);
    note_fallback(status);
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  pinned_buffer(pinned_buffer&& o) noexcept { swap(o); }
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    pinned_buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~pinned_buffer() { reset(); }

  void reset() noexcept {
    if (data_ != nullptr) {
      if (pinned_) {
        (void)cudaFreeHost(data_);
      } else {
        detail::emulated_pinned_ranges::instance().remove(data_);
        std::free(data_);
      }
    }
    data_ = nullptr;
    size_ = 0;
    pinned_ = false;
  }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// True when the memory is page-locked (DMA-able); false on the no-driver fallback.
  [[nodiscard]] bool pinned() const noexcept { return pinned_; }
  [[nodiscard]] std::span<T> span() noexcept { return {data_, size_}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, size_}; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

  static constexpr std::size_t alignment = 4096;

private:
  static void note_fallback(cudaError_t status) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      // Expected without a GPU (info); a failure on a machine with a driver deserves a warning.
      const bool no_device = status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice;
      log(no_device ? log_level::info : log_level::warning, std::string("cudaHostAlloc unavailable (") +
                                                                cudaGetErrorName(status) +
                                                                "); pinned_buffer uses pageable memory");
    }
  }
  void swap(pinned_buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(pinned_, o.pinned_);
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  bool pinned_ = false;
};

/// Owning CUDA stream (non-blocking with respect to the legacy default stream by default).
class stream {
public:
  explicit stream(unsigned flags = cudaStreamNonBlocking, int priority = 0) {
    detail::check(cudaStreamCreateWithPriority(&handle_, flags, priority),
                  "zenflow::stream: cudaStreamCreateWithPriority");
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  stream& operator=(stream&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  ~stream() {
    if (handle_ != nullptr) {
      (void)cudaStreamDestroy(handle_);
    }
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  operator cudaStream_t() const noexcept { return handle_; } // NOLINT: a stream is used as its handle
  void synchronize() const { detail::check(cudaStreamSynchronize(handle_), "zenflow::stream::synchronize"); }

private:
  cudaStream_t handle_ = nullptr;
};

/// Owning CUDA event (timing disabled by default: cheaper to record and to wait on).
class event {
public:
  explicit event(unsigned flags = cudaEventDisableTiming) {
    detail::check(cudaEventCreateWithFlags(&handle_, flags), "zenflow::event: cudaEventCreateWithFlags");
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  ~event() {
    if (handle_ != nullptr) {
      (void)cudaEventDestroy(handle_);
    }
  }
  [[nodiscard]] cudaEvent_t get() const noexcept { return handle_; }
  operator cudaEvent_t() const noexcept { return handle_; } // NOLINT: an event is used as its handle
  void record(cudaStream_t s) { detail::check(cudaEventRecord(handle_, s), "zenflow::event::record"); }
  void synchronize() const { detail::check(cudaEventSynchronize(handle_), "zenflow::event::synchronize"); }
  /// True once the work before the last record has completed.
  [[nodiscard]] bool ready() const {
    const cudaError_t s = cudaEventQuery(handle_);
    if (s == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    detail::check(s, "zenflow::event::ready");
    return true;
  }

private:
  cudaEvent_t handle_ = nullptr;
};

ZF_NAMESPACE_END
