/// @file
/// The primitive set the host and emulated backends run the device plan's operations with: the
/// host twins of the primitives (zenflow::host::*: select/, optim/ and the schedule's step
/// scalars and L1 masses) and the host loops of the plan's small operations (step_kernels.hpp). Its CUDA
/// counterpart, `device_primitives`, is in cuda_backend.cuh: the same member names and arguments, so that the
/// plan writes each operation once as `[=](auto prim, auto on) { return prim.name(args..., on); }`, where
/// `on` is the last argument of the primitive (a worker pool here, nullptr: the calling thread; a stream
/// there).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/plan/step_kernels.hpp>
#include <zenflow/engine/detail/plan/window_sum.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/optim/detail/cpu_simd.hpp>
#include <zenflow/optim/detail/host_grain.hpp>
#include <zenflow/schedule/l1_mass.hpp>
#include <zenflow/schedule/step_scalars.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>

/// The forwarding members of a primitive set: the primitives of namespace `zenflow::NS` (host or
/// device: the same names and arguments), so that the two sets are written once.
#define ZF_ENGINE_FORWARD(NS, name)                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t name(A&&... a) {                                                                        \
    return NS::name(std::forward<A>(a)...);                                                                  \
  }
#define ZF_ENGINE_PRIMITIVES_FROM(NS)                                                                        \
  template <channel_norm Norm, class... A>                                                                   \
  static cudaError_t channel_norms(A&&... a) {                                                               \
    return NS::channel_norms<Norm>(std::forward<A>(a)...);                                                   \
  }                                                                                                          \
  template <channel_norm Norm, class... A>                                                                   \
  static cudaError_t channel_norms_batched(A&&... a) {                                                       \
    return NS::channel_norms_batched<Norm>(std::forward<A>(a)...);                                           \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t topk(A&&... a) {                                                                        \
    return NS::topk(std::forward<A>(a)...);                                                                  \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t topk_segmented(A&&... a) {                                                              \
    return NS::topk_segmented(std::forward<A>(a)...);                                                        \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t adamw_dense(A&&... a) {                                                                 \
    return NS::adamw_dense(std::forward<A>(a)...);                                                           \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t adamw_selective(A&&... a) {                                                             \
    return NS::adamw_selective(std::forward<A>(a)...);                                                       \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t gather_channels(A&&... a) {                                                             \
    return NS::gather_channels(std::forward<A>(a)...);                                                       \
  }                                                                                                          \
  template <class... A>                                                                                      \
  static cudaError_t scatter_channels(A&&... a) {                                                            \
    return NS::scatter_channels(std::forward<A>(a)...);                                                      \
  }                                                                                                          \
  ZF_ENGINE_FORWARD(NS, sq_norm_totals)                                                                      \
  ZF_ENGINE_FORWARD(NS, sq_norm_rescan)                                                                      \
  ZF_ENGINE_FORWARD(NS, compute_step_header)                                                                 \
  ZF_ENGINE_FORWARD(NS, l1_mass)                                                                             \
  ZF_ENGINE_FORWARD(NS, l1_mass_batched)                                                                     \
  ZF_ENGINE_FORWARD(NS, l1_mass_add_rows_batched)

ZF_NAMESPACE_BEGIN
namespace detail {

/// The primitive set of the host and emulated backends. Its members that are not plain forwards
/// (the masses beside the updates) and device_primitives' (cuda_backend.cuh) are twins on purpose:
/// the same signatures, so that the plan calls `prim.name(args..., on)` once for every backend, and
/// bodies that differ where the two compute the same bits by different routes (fused here, row
/// by row there); only the signatures repeat.
struct host_primitives {
  using exec_type = worker_pool*;

  ZF_ENGINE_PRIMITIVES_FROM(host)

  // The update and the pack with Zen-auto's mass: the host twins compute it fused, in the order
  // of the schedule's l1_mass, which the CUDA backend runs row by row (`mass.row_l1` unused here).
  template <class T>
  static cudaError_t adamw_selective_mass(channel_matrix<T> w,
                                          channel_matrix<const T> g,
                                          const selected_rows& rows,
                                          const adamw_hparams& hp,
                                          step_scalars scalars,
                                          const l1_mass_item& mass,
                                          exec_type on) {
    return host::adamw_selective(w, g, rows, hp, scalars, mass.l1, on);
  }
  /// Every matrix of one working type (the batched update, P4): each item's mass fused with its
  /// update as in adamw_selective_mass, `masses[i].l1` (`masses` nullable).
  template <class T>
  static cudaError_t adamw_selective_batched_mass(const adamw_selective_item<T>* items,
                                                  int count,
                                                  std::int64_t /*blocks*/,
                                                  std::int64_t /*max_rows*/,
                                                  const adamw_hparams& hp,
                                                  step_scalars scalars,
                                                  const l1_mass_item* masses,
                                                  exec_type on) {
    std::vector<float*> l1(static_cast<std::size_t>(count), nullptr);
    for (int i = 0; masses != nullptr && i < count; ++i) {
      l1[static_cast<std::size_t>(i)] = masses[i].l1;
    }
    return host::adamw_selective_batched(items, count, hp, scalars, l1.data(), on);
  }
  template <class Tin, class Tout>
  static cudaError_t gather_channels_mass(channel_matrix<const Tin> src,
                                          const std::int32_t* idx,
                                          std::int64_t count,
                                          Tout* dst,
                                          const l1_mass_item& mass,
                                          std::uint32_t* /*ticket*/,
                                          exec_type on) {
    return host::gather_channels(src, idx, count, dst, mass.l1, on);
  }

  /// f(i) for every item i of [0, n), in order on the calling thread (the CUDA twin runs a thread
  /// per item: `f` is a ZF_HOST_DEVICE functor whose items are independent).
  template <class F>
  static cudaError_t for_each_item(int n, const F& f, exec_type) {
    for (int i = 0; i < n; ++i) {
      f(i);
    }
    return cudaSuccess;
  }
  /// Rows of a table of matrices to or from packed fp32 (row_copies.hpp): the host twins of
  /// gather_channels / scatter_channels item by item.
  static cudaError_t copy_rows_batched(
      const row_copy_item* items, int n, std::int64_t /*blocks*/, row_copy_direction dir, exec_type on) {
    return host_copy_rows_batched(items, n, dir, on);
  }
  static cudaError_t adopt_early_mass(float* early, float* rest, int n, exec_type) {
    host_adopt_early_mass(early, rest, n);
    return cudaSuccess;
  }
  /// Device accumulation (window_sum.hpp): a step's packed rows of working type `type` into the
  /// window sum, then, once per step, the window's count of good steps. The host twin is the host
  /// accumulation's own SIMD spans (element-wise fma, so the same bits as the body on any path and
  /// any chunking), spread over the pool.
  static cudaError_t add_window_sum(const window_sum_args& a, dtype type, exec_type on) {
    if (a.n == 0 || *step_record_layout::skip(a.record) != 0) {
      return cudaSuccess;
    }
    const float coef = a.record[step_record_layout::coef_word];
    const bool first = *a.steps == 0;
    dispatch_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(a.rows);
      parallel_for(on, a.n, cpu_grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
        if (first) {
          cpu::assign_span<T>(a.sum + lo, g + lo, coef, hi - lo);
        } else {
          cpu::accumulate_span<T>(a.sum + lo, g + lo, coef, hi - lo);
        }
      });
    });
    return cudaSuccess;
  }
  static cudaError_t count_window_step(const float* record, std::uint32_t* steps, exec_type) {
    window_sum_count(record, steps);
    return cudaSuccess;
  }
  static cudaError_t iota(std::int32_t* out, std::int64_t n, exec_type) {
    host_iota(out, n);
    return cudaSuccess;
  }
  static cudaError_t move_counts(const count_moves& m, exec_type) {
    host_move_counts(m);
    return cudaSuccess;
  }
};

} // namespace detail
ZF_NAMESPACE_END
