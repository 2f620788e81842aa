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
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/host_primitives.hpp>
#include <zenflow/transport/emulated_copy_backend.hpp>

ZF_NAMESPACE_BEGIN

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

  /// `counts` (nullable, must outlive the engine): what the engine asks, counted.
  /// `kernel_threads` (nullable, must outlive the engine): the device's multiprocessors. The plan's
  /// operations (the host twins) run their parallel-fors on this pool, as a kernel spreads over a
  /// GPU's SMs; without it each runs on its stream's thread alone. Results are the same bits
  /// either way (the twins' chunks do not depend on the thread count). Operations of two streams
  /// that run at once share the pool: the second one's chunks run on its own stream's thread.
  explicit emulated_backend(emulated_device& device,
                            emulated_backend_counts* counts = nullptr,
                            worker_pool* kernel_threads = nullptr) noexcept
      : device_(&device), counts_(counts), kernel_threads_(kernel_threads) {}

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
  void bind_device(int) const noexcept {}
  /// Nothing to make current here; counted (`emulated_backend_counts::engine_threads`).
  void enter_engine_thread(int) const {
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
    count(&emulated_backend_counts::runs);
    if (counts_ != nullptr) {
      const std::lock_guard lock(counts_->mutex);
      ++counts_->by_name[name];
    }
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
