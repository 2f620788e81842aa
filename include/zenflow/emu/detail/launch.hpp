/// @file
/// The kernel emulator's launches (runtime.hpp has the whole picture): a grid's configuration
/// checked against an H100's limits, its blocks run in order or shuffled (block_scheduler.hpp),
/// the detectors' reports turned into the launch's error, and the launch site the seam in
/// core/kernel.hpp expands to; `cudaMemsetAsync`'s and `cudaGetLastError`'s twins.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <vector_types.h>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/emu/detail/block_scheduler.hpp>
#include <zenflow/emu/detail/runtime.hpp>

ZF_NAMESPACE_BEGIN
namespace emu {
namespace detail {

/// Runs the grid of `L` on the calling OS thread (blocks in order, or shuffled). Detector
/// reports are collected in `L.reports`.
inline void run_grid(launch_state& L) {
  executor& ex = this_executor();
  if (ex.running) {
    throw cuda_error(cudaErrorNotPermitted, "zenflow::emu: a kernel launched from inside a kernel");
  }
  ex.running = true;
  struct reset {
    executor& e;
    ~reset() {
      e.running = false;
      e.block = nullptr;
      e.thread = nullptr;
      e.slot = nullptr;
    }
  } on_exit{ex};
  tsan_release(&L.begin_sync);
  {
    const tsan_ignore ig; // the scheduler's own state: shared with the fibers, hidden from TSan
    const std::uint64_t blocks = static_cast<std::uint64_t>(L.grid.x) * L.grid.y * L.grid.z;
    std::vector<std::uint64_t> order;
    if (L.opts.order == thread_order::shuffled) {
      order.resize(blocks);
      for (std::uint64_t i = 0; i < blocks; ++i) {
        order[i] = i;
      }
      std::mt19937_64 rng(mix(L.opts.seed ^ hash_name(L.name)));
      std::shuffle(order.begin(), order.end(), rng);
    }
    for (std::uint64_t k = 0; k < blocks; ++k) {
      const std::uint64_t i = order.empty() ? k : order[k];
      const uint3 idx{static_cast<unsigned>(i % L.grid.x), static_cast<unsigned>((i / L.grid.x) % L.grid.y),
                      static_cast<unsigned>(i / (static_cast<std::uint64_t>(L.grid.x) * L.grid.y))};
      block_scheduler s(L, idx);
      s.run();
    }
  }
  tsan_acquire(&L.end_sync);
}

/// The problems of a launch configuration (empty: none), as CUDA's launch would refuse it.
inline cudaError_t check_config(const launch_state& L, std::size_t param_bytes, std::string& why) {
  const dim3 g = L.grid, b = L.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    why = "a grid or block dimension is 0";
    return cudaErrorInvalidConfiguration;
  }
  if (static_cast<std::uint64_t>(b.x) * b.y * b.z > device_limits::max_threads_per_block) {
    why = std::to_string(static_cast<std::uint64_t>(b.x) * b.y * b.z) +
          " threads per block exceed the 1024 of a block";
    return cudaErrorInvalidConfiguration;
  }
  if (b.x > device_limits::max_block_x || b.y > device_limits::max_block_y ||
      b.z > device_limits::max_block_z) {
    why = "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) +
          ") exceeds the block dimensions (1024, 1024, 64)";
    return cudaErrorInvalidConfiguration;
  }
  if (g.x > device_limits::max_grid_x || g.y > device_limits::max_grid_y || g.z > device_limits::max_grid_z) {
    why = "grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," + std::to_string(g.z) +
          ") exceeds the grid dimensions (2^31 - 1, 65535, 65535)";
    return cudaErrorInvalidConfiguration;
  }
  if (L.dynamic_smem > device_limits::shared_bytes) {
    why = std::to_string(L.dynamic_smem) + " bytes of dynamic shared memory exceed the " +
          std::to_string(device_limits::shared_bytes) +
          " a block gets without cudaFuncAttributeMaxDynamicSharedMemorySize (not modelled)";
    return cudaErrorInvalidValue;
  }
  if (param_bytes > device_limits::param_bytes) {
    why = std::to_string(param_bytes) + " bytes of kernel parameters exceed " +
          std::to_string(device_limits::param_bytes);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

inline void record_reports(const std::vector<std::string>& reports, const std::string& kernel) {
  log_state& g = log();
  const std::lock_guard lock(g.mutex);
  g.kernels.insert(kernel);
  g.reports.insert(g.reports.end(), reports.begin(), reports.end());
}

/// Runs a launch now, on the calling thread; throws `cuda_error(cudaErrorLaunchFailure)` with the
/// first report when a detector fired (the rest in `emu::reports()`).
inline void execute(launch_state& L) {
  run_grid(L);
  record_reports(L.reports, base_name(L.name.c_str()));
  if (L.thrown) {
    std::rethrow_exception(L.thrown);
  }
  if (!L.reports.empty()) {
    std::string what = L.reports.front();
    if (L.reports.size() > 1) {
      what += " (and " + std::to_string(L.reports.size() - 1) + " more: zenflow::emu::reports())";
    }
    throw cuda_error(cudaErrorLaunchFailure, what);
  }
}

template <class T>
dim3 to_dim3(const T& v) {
  if constexpr (std::is_same_v<T, dim3>) {
    return v;
  } else if constexpr (std::is_same_v<T, uint3>) {
    return dim3(v.x, v.y, v.z);
  } else {
    return dim3(static_cast<unsigned>(v));
  }
}

/// A launch site (ZF_LAUNCH under a host compiler): the configuration, then the arguments.
template <class Body>
class launch_site {
public:
  template <class G, class B>
  launch_site(const G& grid,
              const B& block,
              std::size_t smem,
              cudaStream_t stream,
              const char* name,
              const char* file,
              int line,
              Body body)
      : grid_(to_dim3(grid)), block_(to_dim3(block)), smem_(smem), stream_(stream), name_(name), file_(file),
        line_(line), body_(std::move(body)) {}

  /// The kernel's arguments, copied once (as CUDA copies them to the parameter space); every
  /// thread calls the kernel with them. Enqueued on `stream` when an emulated device is current
  /// on a thread outside its streams, else run now.
  template <class... Args>
  void operator()(Args&&... args) {
    auto L = std::make_shared<launch_state>();
    L->grid = grid_;
    L->block = block_;
    L->dynamic_smem = smem_;
    L->name = name_;
    L->file = file_;
    L->line = line_;
    {
      const std::lock_guard lock(log().mutex);
      L->opts = log().opts;
    }
    std::string why;
    const std::size_t param_bytes = (0 + ... + ((sizeof(std::decay_t<Args>) + 7) / 8 * 8));
    if (const cudaError_t e = check_config(*L, param_bytes, why); e != cudaSuccess) {
      L->report(why);
      record_reports(L->reports, base_name(name_));
      last_error() = e;
      return;
    }
    using params_t = std::tuple<std::decay_t<Args>...>;
    struct job {
      Body body;
      params_t params;
      static void invoke(void* self) {
        auto& j = *static_cast<const job*>(self);
        std::apply([&](const auto&... a) { j.body(a...); }, j.params);
      }
    };
    auto j = std::make_shared<job>(job{body_, params_t(std::forward<Args>(args)...)});
    L->invoke = &job::invoke;
    L->invoke_arg = j.get();
    emulated_device* device = emulated_device::current();
    if (device != nullptr && !zenflow::detail::on_emulated_stream_thread()) {
      device->launch(
          stream_, [L, j] { execute(*L); }, 0, std::string("kernel ") + base_name(name_));
      return;
    }
    execute(*L);
  }

private:
  dim3 grid_, block_;
  std::size_t smem_;
  cudaStream_t stream_;
  const char* name_;
  const char* file_;
  int line_;
  Body body_;
};

template <class G, class B, class Body>
launch_site<Body> make_launch_site(const G& grid,
                                   const B& block,
                                   std::size_t smem,
                                   cudaStream_t stream,
                                   const char* name,
                                   const char* file,
                                   int line,
                                   Body body) {
  return launch_site<Body>(grid, block, smem, stream, name, file, line, std::move(body));
}

/// `cudaMemsetAsync`'s twin: on the current emulated device's stream, or now.
inline cudaError_t memset_async(void* p, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) {
    return cudaSuccess;
  }
  if (p == nullptr) {
    return cudaErrorInvalidValue;
  }
  emulated_device* device = emulated_device::current();
  if (device != nullptr && !zenflow::detail::on_emulated_stream_thread()) {
    device->launch(
        stream, [p, value, bytes] { std::memset(p, value, bytes); }, bytes, "memset");
    return cudaSuccess;
  }
  std::memset(p, value, bytes);
  return cudaSuccess;
}

/// `cudaGetLastError`'s twin for the emulator's launches.
inline cudaError_t take_last_error() noexcept {
  const cudaError_t e = last_error();
  last_error() = cudaSuccess;
  return e;
}

} // namespace detail
} // namespace emu
ZF_NAMESPACE_END
