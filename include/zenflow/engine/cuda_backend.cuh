/// @file
/// The engine's CUDA backend: device memory, CUDA streams and events, and the primitives' device
/// launchers, all stream-ordered on the stream given. The device plan (detail/plan/device_plan.hpp)
/// decides what runs where; this file only says how on a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/cuda_timeline.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/engine/detail/plan/kernels.cuh>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/optim/channels.cuh>
#include <zenflow/optim/types.hpp>
#include <zenflow/schedule/l1_mass.cuh>
#include <zenflow/schedule/step_scalars.cuh>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// The primitive set of the CUDA backend: the device launchers of the primitives (select/, optim/,
/// schedule/) and the kernels of the plan's small operations (kernels.cuh), with
/// `host_primitives`' names and arguments (detail/plan/host_primitives.hpp), the last one a stream.
struct device_primitives {
  using exec_type = cudaStream_t;

  ZF_ENGINE_PRIMITIVES_FROM(device)

  // The update and the pack with Zen-auto's mass: the fused kernels without their mass (it was
  // summed with float atomics, in an order that varied run to run), then the mass in the host
  // twins' order (device::l1_mass): the same bits as the host backend, at the price of one more
  // read of the rows.
  template <class T>
  static cudaError_t adamw_selective_mass(channel_matrix<T> w,
                                          channel_matrix<const T> g,
                                          const selected_rows& rows,
                                          const adamw_hparams& hp,
                                          step_scalars scalars,
                                          const l1_mass_item& mass,
                                          cudaStream_t s) {
    if (const cudaError_t e = device::adamw_selective(w, g, rows, hp, scalars, nullptr, s);
        e != cudaSuccess) {
      return e;
    }
    return device::l1_mass(mass, s);
  }
  /// Every matrix of one working type: one launch of the batched update (counts advanced in it),
  /// then the masses of every item in two launches, in the host twins' order.
  template <class T>
  static cudaError_t adamw_selective_batched_mass(const adamw_selective_item<T>* items,
                                                  int count,
                                                  std::int64_t blocks,
                                                  std::int64_t max_rows,
                                                  const adamw_hparams& hp,
                                                  step_scalars scalars,
                                                  const l1_mass_item* masses,
                                                  cudaStream_t s) {
    if (const cudaError_t e = device::adamw_selective_batched(items, count, blocks, hp, scalars, s);
        e != cudaSuccess) {
      return e;
    }
    return masses == nullptr ? cudaSuccess : device::l1_mass_batched(masses, count, max_rows, s);
  }
  /// The pack: with a mass and a ticket (device_plan's packs: a zeroed word per stream of packs),
  /// the copy and the mass in one launch (pack_mass_kernel); else the gather, then the mass in two.
  template <class Tin, class Tout>
  static cudaError_t gather_channels_mass(channel_matrix<const Tin> src,
                                          const std::int32_t* idx,
                                          std::int64_t count,
                                          Tout* dst,
                                          const l1_mass_item& mass,
                                          std::uint32_t* ticket,
                                          cudaStream_t s) {
    if constexpr (std::is_same_v<Tin, Tout>) {
      if (mass.l1 != nullptr && ticket != nullptr && count > 0 && src.channel_len > 0) {
        row_copy_item it{const_cast<void*>(static_cast<const void*>(src.data)),
                         dtype_of<Tin>(),
                         src.channels,
                         src.channel_len,
                         src.ld,
                         src.layout,
                         idx,
                         count,
                         dst,
                         dtype_of<Tin>(),
                         0};
        const std::int64_t copy_blocks = row_copy_item_blocks(it);
        const std::int64_t mass_blocks = schedule_kernels::l1_rows_blocks(count, mass.lanes);
        ZF_LAUNCH(static_cast<unsigned>(copy_blocks + mass_blocks), 256, 0, s,
                  engine_kernels::pack_mass_kernel<Tin>)
        (it, copy_blocks, mass, ticket, mass_blocks);
        return launch_status();
      }
    }
    if (const cudaError_t e = device::gather_channels(src, idx, count, dst, nullptr, s); e != cudaSuccess) {
      return e;
    }
    return device::l1_mass(mass, s);
  }

  /// f(i) for every item i of [0, n), a thread per item (host_primitives' twin runs them in order).
  template <class F>
  static cudaError_t for_each_item(int n, const F& f, cudaStream_t s) {
    if (n > 0) {
      ZF_LAUNCH(static_cast<unsigned>((n + 31) / 32), 32, 0, s, engine_kernels::for_each_item_kernel<F>)
      (f, n);
    }
    return launch_status();
  }
  /// Rows of a table of matrices to or from packed fp32 (row_copies.hpp; `items` in device
  /// memory, their `block_begin` from row_copy_blocks, `blocks` its total): one launch.
  static cudaError_t copy_rows_batched(
      const row_copy_item* items, int n, std::int64_t blocks, row_copy_direction dir, cudaStream_t s) {
    if (n > 0 && blocks > 0) {
      // Grid-stride: a grid of at most 2^20 blocks covers any number of rows.
      const auto grid = static_cast<unsigned>(std::min<std::int64_t>(blocks, std::int64_t{1} << 20));
      ZF_LAUNCH(grid, 256, 0, s, engine_kernels::row_copy_batched_kernel)(items, n, blocks, dir);
    }
    return launch_status();
  }
  static cudaError_t adopt_early_mass(float* early, float* rest, int n, cudaStream_t s) {
    if (n > 0) {
      ZF_LAUNCH(1, 128, 0, s, engine_kernels::adopt_early_mass_kernel)(early, rest, n);
    }
    return launch_status();
  }
  static cudaError_t add_window_sum(const window_sum_args& a, dtype type, cudaStream_t s) {
    if (a.n > 0) {
      // Grid-stride: at most 2^20 blocks cover any window sum.
      const auto grid =
          static_cast<unsigned>(std::min<std::int64_t>((a.n + 255) / 256, std::int64_t{1} << 20));
      dispatch_dtype(type, [&](auto tag) {
        ZF_LAUNCH(grid, 256, 0, s, engine_kernels::add_window_sum_kernel<decltype(tag)>)(a);
      });
    }
    return launch_status();
  }
  static cudaError_t count_window_step(const float* record, std::uint32_t* steps, cudaStream_t s) {
    ZF_LAUNCH(1, 1, 0, s, engine_kernels::count_window_step_kernel)(record, steps);
    return launch_status();
  }
  static cudaError_t iota(std::int32_t* out, std::int64_t n, cudaStream_t s) {
    if (n > 0) {
      ZF_LAUNCH(blocks(n), 256, 0, s, engine_kernels::iota_kernel)(out, n);
    }
    return launch_status();
  }
  static cudaError_t move_counts(const count_moves& m, cudaStream_t s) {
    if (m.n > 0) {
      ZF_LAUNCH(blocks(m.n), 256, 0, s, engine_kernels::move_counts_kernel)(m);
    }
    return launch_status();
  }

private:
  static unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + 255) / 256); }
};
} // namespace detail

/// CUDA backend of `zenflow::engine`: parameters are device pointers of the device current when
/// the engine is initialized. Copies of a backend share its stream timeline (the pipeline trace's
/// device tracks, timed by CUDA events: engine::start_trace turns it on).
class cuda_backend {
public:
  static constexpr bool is_device = true;
  using copy_backend_type = cuda_copy_backend;
  template <class T>
  using device_buffer = zenflow::device_buffer<T>;
  template <class T>
  using host_buffer = pinned_buffer<T>;

  [[nodiscard]] copy_backend_type copier() const noexcept { return {timeline_.get()}; }
  /// The streams' timeline of the pipeline trace (off until engine::start_trace()).
  [[nodiscard]] detail::cuda_timeline& timeline() const noexcept { return *timeline_; }

  void copy_d2h(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    copy(dst, src, bytes, cudaMemcpyDeviceToHost, s);
  }
  void copy_h2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    copy(dst, src, bytes, cudaMemcpyHostToDevice, s);
  }
  void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) const {
    copy(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
  }
  void zero(void* dst, std::size_t bytes, cudaStream_t s) const {
    if (bytes > 0) {
      timeline_->bracket(s, detail::timeline_op::kind::kernel, "memset", bytes, [&] {
        detail::check(detail::memset_async(dst, 0, bytes, s), "zenflow::cuda_backend: cudaMemsetAsync");
      });
    }
  }
  void synchronize(cudaStream_t s) const {
    detail::check(cudaStreamSynchronize(s), "zenflow::cuda_backend: cudaStreamSynchronize");
  }
  void synchronize_all() const {
    detail::check(cudaDeviceSynchronize(), "zenflow::cuda_backend: cudaDeviceSynchronize");
  }
  [[nodiscard]] int current_device() const {
    int d = 0;
    detail::check(cudaGetDevice(&d), "zenflow::cuda_backend: cudaGetDevice");
    return d;
  }
  /// The job's thread may not have made the engine's device current (the user's may not be 0).
  void bind_device(int d) const { detail::check(cudaSetDevice(d), "zenflow::cuda_backend: cudaSetDevice"); }
  /// First thing on a thread the engine owns (the D2H consumer, the host job's): device `d` made
  /// current (a thread starts on device 0, whose context a first CUDA call would create there), and
  /// the thread's stream-capture mode relaxed, so that its event queries and copies do not break a
  /// capture the user runs in global mode on another thread (cudaThreadExchangeStreamCaptureMode).
  void enter_engine_thread(int d) const {
    bind_device(d);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    detail::check(cudaThreadExchangeStreamCaptureMode(&mode),
                  "zenflow::cuda_backend: cudaThreadExchangeStreamCaptureMode");
  }

  /// Host work in stream order (`f()`, copied): a host function on `s` (cudaLaunchHostFunc), run
  /// by the driver's thread once what was enqueued before it is done; `f` makes no CUDA call.
  template <class F>
  void host_task(cudaStream_t s, const char* name, F&& f) const {
    auto* task = new std::function<void()>(std::forward<F>(f));
    const cudaError_t e = cudaLaunchHostFunc(
        s,
        [](void* arg) {
          auto* t = static_cast<std::function<void()>*>(arg);
          try {
            (*t)();
          } catch (...) { // NOLINT(bugprone-empty-catch): a host function cannot report; f copies memory
          }
          delete t;
        },
        task);
    if (e != cudaSuccess) {
      delete task;
      detail::check(e, name);
    }
  }

  /// An operation of the plan, `op(primitives, exec)`: the device launchers, stream-ordered on `s`.
  template <class Op>
  void run(cudaStream_t s, std::size_t bytes, const char* name, Op&& op) const {
    timeline_->bracket(s, detail::timeline_op::kind::kernel, name, bytes,
                       [&] { detail::check(std::forward<Op>(op)(detail::device_primitives{}, s), name); });
  }
  /// A host-side query of an operation (temporary storage sizes), answered now.
  template <class Op>
  [[nodiscard]] cudaError_t query(Op&& op) const {
    return std::forward<Op>(op)(detail::device_primitives{}, cudaStream_t{nullptr});
  }

private:
  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s) const {
    if (bytes > 0) {
      using op = detail::timeline_op::kind;
      const op what = kind == cudaMemcpyDeviceToHost   ? op::copy_d2h
                      : kind == cudaMemcpyHostToDevice ? op::copy_h2d
                                                       : op::copy_d2d;
      // Unnamed: the trace names a copy by its kind ("copy D2H", ...).
      timeline_->bracket(s, what, nullptr, bytes, [&] {
        detail::check(cudaMemcpyAsync(dst, src, bytes, kind, s), "zenflow::cuda_backend: cudaMemcpyAsync");
      });
    }
  }

  std::shared_ptr<detail::cuda_timeline> timeline_ = std::make_shared<detail::cuda_timeline>();
};

static_assert(engine_backend<cuda_backend>);

ZF_NAMESPACE_END
