/// @file
/// The engine's emulated backend: the engine on an `emulated_device` (core/emulated_device.hpp).
/// "Device" memory is host memory; every stream is an executor thread of the device; kernels
/// (the host twins of the primitives) and copies are enqueued there and run later, in stream
/// order; events complete when their stream reaches them. The engine's consumer thread, the
/// host job's uploads on a stream of their own and the D2H ring's producer/consumer protocol run
/// exactly as on CUDA, on a machine without a GPU (and under ThreadSanitizer, with the device's
/// jitter making copies land late). With the device's timing model a step's timeline has a GPU's
/// shape (PCIe per direction, memory bandwidth, launch latency, modelled compute).
///
/// As on a GPU, the user's own work must be stream-ordered too: write the gradients of a step on
/// the stream given to step() (`emulated_device::launch`), or synchronize that stream before
/// writing them on the host and before reading the weights after a step.
///
/// The engine's buffers are the device's allocations (device memory, and pinned host memory for
/// its host buffers), as on CUDA: each allocation and free synchronises the device and is
/// counted, and a copy from or to host memory that is not pinned runs synchronously and is
/// counted (`emulated_device::stats()`, docs/emulated-device.md). Constructing the backend makes
/// its device current on the calling thread (as a CUDA device is current): buffers go to the
/// device current on the thread that constructs them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/transport/emulated_copy_backend.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// An owning, move-only allocation of `size()` value-initialised elements from the calling
/// thread's current emulated device (`emulated_device::current()`), as `device_buffer` and
/// `pinned_buffer` are on CUDA: allocated and freed through the device (each synchronises it and
/// is counted), pinned host memory when `Kind` is `emulated_memory::pinned`. Without a current
/// device: plain host memory (pageable, not counted). The device must outlive the buffer.
template <class T, emulated_memory Kind>
class emulated_buffer {
public:
  using value_type = T;
  emulated_buffer() = default;
  explicit emulated_buffer(std::size_t count) : size_(count) {
    if (count == 0) {
      return;
    }
    device_ = emulated_device::current();
    void* p = device_ != nullptr ? device_->allocate(count * sizeof(T), Kind)
                                 : ::operator new (count * sizeof(T), std::align_val_t{alignment});
    data_ = static_cast<T*>(p);
    std::uninitialized_value_construct_n(data_, count);
  }
  emulated_buffer(const emulated_buffer&) = delete;
  emulated_buffer& operator=(const emulated_buffer&) = delete;
  emulated_buffer(emulated_buffer&& o) noexcept { swap(o); }
  emulated_buffer& operator=(emulated_buffer&& o) noexcept {
    emulated_buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~emulated_buffer() { reset(); }

  /// Frees through the device (synchronising it), or to the heap.
  void reset() noexcept {
    if (data_ != nullptr) {
      std::destroy_n(data_, size_);
      if (device_ != nullptr) {
        try {
          device_->free(data_);
        } catch (...) { // NOLINT(bugprone-empty-catch): a free from a host task, reported there
        }
      } else {
        ::operator delete (data_, std::align_val_t{alignment});
      }
    }
    data_ = nullptr;
    size_ = 0;
    device_ = nullptr;
  }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  [[nodiscard]] T* begin() noexcept { return data_; }
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  [[nodiscard]] const T* begin() const noexcept { return data_; }
  [[nodiscard]] const T* end() const noexcept { return data_ + size_; }

private:
  static constexpr std::size_t alignment = emulated_device::alignment;
  void swap(emulated_buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  emulated_device* device_ = nullptr;
};
/// Device memory as `emulated_buffer`, but 0xff bytes until written, as `cudaMallocAsync` returns
/// garbage (emulated_cuda_backend's buffers, the emulated gpu tests').
template <class T>
class emulated_garbage_buffer : public emulated_buffer<T, emulated_memory::device> {
  static_assert(std::is_trivially_copyable_v<T>, "device memory holds trivially copyable values");

public:
  emulated_garbage_buffer() = default;
  explicit emulated_garbage_buffer(std::size_t count) : emulated_buffer<T, emulated_memory::device>(count) {
    if (count > 0) {
      std::memset(static_cast<void*>(this->data()), 0xff, count * sizeof(T));
    }
  }
};
} // namespace detail

/// What the engine asked of an emulated backend, counted (a test hook: the number of device
/// operations and of host waits must not grow with the number of parameters). `runs`: operations
/// of the plan (`run`: a primitive or a small kernel of the plan, what the CUDA backend launches);
/// `waits`: host waits for the device (`synchronize` of a stream, `synchronize_all`). Event waits
/// of the consumer and the host job are theirs, not the training thread's, and are not counted.
struct emulated_backend_counts {
  std::atomic<std::uint64_t> runs{0};
  std::atomic<std::uint64_t> waits{0};
  /// `runs` by the operation's name ("zenflow::engine: adamw_selective", ...).
  [[nodiscard]] std::map<std::string, std::uint64_t> runs_by_name() const {
    const std::lock_guard lock(mutex);
    return by_name;
  }
  /// The threads that entered as the engine's own (`enter_engine_thread`: the D2H consumer, the
  /// host job's), each once per entry.
  [[nodiscard]] std::map<std::thread::id, std::uint64_t> engine_threads() const {
    const std::lock_guard lock(mutex);
    return entered;
  }
  mutable std::mutex mutex;
  std::map<std::string, std::uint64_t> by_name;
  std::map<std::thread::id, std::uint64_t> entered;
};

/// Emulated backend of `zenflow::engine`: see the file comment. The device must outlive every
/// engine on it. A primitive that fails on the device's thread makes the device's error sticky;
/// the engine sees it at its next synchronising call (as with an asynchronous CUDA error).
class emulated_backend : public detail::host_memory {
public:
  static constexpr bool is_device = true;
  using copy_backend_type = emulated_copy_backend;
  /// The device's memory (see the file comment): device allocations, and pinned host ones.
  template <class T>
  using device_buffer = detail::emulated_buffer<T, emulated_memory::device>;
  template <class T>
  using host_buffer = detail::emulated_buffer<T, emulated_memory::pinned>;

  /// Makes `device` current on the calling thread (`emulated_device::make_current`): the engine's
  /// buffers are its allocations.
  /// `counts` (nullable, must outlive the engine): what the engine asks, counted.
  /// `kernel_threads` (nullable, must outlive the engine): the device's multiprocessors. The plan's
  /// operations (the host twins) run their parallel-fors on this pool, as a kernel spreads over a
  /// GPU's SMs; without it each runs on its stream's thread alone. Results are the same bits
  /// either way (the twins' chunks do not depend on the thread count). Operations of two streams
  /// that run at once share the pool: the second one's chunks run on its own stream's thread.
  explicit emulated_backend(emulated_device& device,
                            emulated_backend_counts* counts = nullptr,
                            worker_pool* kernel_threads = nullptr) noexcept
      : device_(&device), counts_(counts), kernel_threads_(kernel_threads) {
    device.make_current();
  }

  [[nodiscard]] emulated_device& device() const noexcept { return *device_; }
  /// The streams' timeline of the pipeline trace: the emulated device's own record.
  [[nodiscard]] emulated_device& timeline() const noexcept { return *device_; }
  [[nodiscard]] copy_backend_type copier() const noexcept { return copy_backend_type{*device_}; }

  void copy_d2h(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    device_->copy(dst, src, bytes, copy_direction::device_to_host, s);
  }
  void copy_h2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    device_->copy(dst, src, bytes, copy_direction::host_to_device, s);
  }
  void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    device_->copy_device(dst, src, bytes, s);
  }
  void zero(void* dst, std::size_t bytes, cudaStream_t s) const {
    device_->launch(
        s,
        [dst, bytes] {
          if (bytes > 0) {
            std::memset(dst, 0, bytes);
          }
        },
        bytes, "memset");
  }
  void synchronize(cudaStream_t s) const {
    count(&emulated_backend_counts::waits);
    device_->synchronize_stream(s);
  }
  void synchronize_all() const {
    count(&emulated_backend_counts::waits);
    device_->synchronize();
  }
  [[nodiscard]] int current_device() const noexcept { return 0; }
  /// Makes the device current on the calling thread (the engine's job threads).
  void bind_device(int) const noexcept { device_->make_current(); }
  /// Makes the device current; counted (`emulated_backend_counts::engine_threads`).
  void enter_engine_thread(int) const {
    device_->make_current();
    if (counts_ != nullptr) {
      const std::lock_guard lock(counts_->mutex);
      ++counts_->entered[std::this_thread::get_id()];
    }
  }

  /// Host work in stream order (`f()`, copied): on `s`'s thread once what was enqueued before it
  /// has run (a host function, not a kernel: not counted in `runs`).
  template <class F>
  void host_task(cudaStream_t s, const char* name, F&& f) const {
    device_->launch(s, std::function<void()>(std::forward<F>(f)), 0, name);
  }

  /// An operation of the plan, `op(primitives, exec)`: the host twins, run later on `s`'s thread,
  /// in stream order, charged `bytes` of device bandwidth by the timing model. `op` is copied (it
  /// must capture by value: the caller's locals are gone by then). A failure there makes the
  /// device's error sticky; the engine sees it at its next synchronising call.
  template <class Op>
  void run(cudaStream_t s, std::size_t bytes, const char* name, Op&& op) const {
    note_run(name);
    device_->launch(s, std::function<void()>([op = std::forward<Op>(op), name, pool = kernel_threads_] {
                      detail::check(op(detail::host_primitives{}, pool), name);
                    }),
                    bytes, name);
  }
  /// A host-side query of an operation (temporary storage sizes), answered now.
  template <class Op>
  [[nodiscard]] cudaError_t query(Op&& op) const {
    return std::forward<Op>(op)(detail::host_primitives{}, static_cast<worker_pool*>(nullptr));
  }

protected:
  /// A run of the plan, counted (`emulated_backend_counts::runs`, by name).
  void note_run(const char* name) const {
    count(&emulated_backend_counts::runs);
    if (counts_ != nullptr) {
      const std::lock_guard lock(counts_->mutex);
      ++counts_->by_name[name];
    }
  }

private:
  void count(std::atomic<std::uint64_t> emulated_backend_counts::*which) const noexcept {
    if (counts_ != nullptr) {
      (counts_->*which).fetch_add(1, std::memory_order_relaxed);
    }
  }

  emulated_device* device_;
  emulated_backend_counts* counts_ = nullptr;
  worker_pool* kernel_threads_ = nullptr;
};

static_assert(engine_backend<emulated_backend>);

ZF_NAMESPACE_END
