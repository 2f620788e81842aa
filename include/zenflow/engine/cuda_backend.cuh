/// @file
/// The engine's CUDA backend: device memory, CUDA streams and events, and the primitives' device
/// launchers, all stream-ordered on the stream given. The device plan (detail/device_plan.hpp)
/// decides what runs where; this file only says how on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/kernels.cuh>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/optim/types.hpp>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// CUDA backend of `zenflow::engine`: parameters are device pointers of the device current when
/// the engine is initialized.
class cuda_backend {
public:
  static constexpr bool is_device = true;
  using copy_backend_type = cuda_copy_backend;
  template <class T>
  using device_buffer = zenflow::device_buffer<T>;
  template <class T>
  using host_buffer = pinned_buffer<T>;

  [[nodiscard]] copy_backend_type copier() const noexcept { return {}; }
  template <class T>
  [[nodiscard]] device_buffer<T> device_alloc(std::size_t n) const {
    return device_buffer<T>(n);
  }
  template <class T>
  [[nodiscard]] host_buffer<T> host_alloc(std::size_t n) const {
    return host_buffer<T>(n);
  }

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
      detail::check(cudaMemsetAsync(dst, 0, bytes, s), "zenflow::cuda_backend: cudaMemsetAsync");
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

  // ---- the plan's small operations: kernels.cuh ----
  void sq_totals(const detail::sq_total_item* items, int n, double* totals, cudaStream_t s) const {
    if (n > 0) {
      detail::engine_kernels::sq_totals_kernel<<<static_cast<unsigned>(n), detail::sq_total_lanes, 0, s>>>(
          items, totals);
      detail::check(cudaGetLastError(), "zenflow::cuda_backend: sq_totals_kernel");
    }
  }
  void finish_scalars(const double* totals,
                      int n,
                      const std::uint32_t* flags,
                      int flag_count,
                      float loss_scale,
                      float max_norm,
                      float* record,
                      int mass_words,
                      cudaStream_t s) const {
    detail::engine_kernels::finish_scalars_kernel<<<1, 128, 0, s>>>(totals, n, flags, flag_count, loss_scale,
                                                                    max_norm, record, mass_words);
    detail::check(cudaGetLastError(), "zenflow::cuda_backend: finish_scalars_kernel");
  }
  void adopt_early_mass(float* early, float* rest, int n, cudaStream_t s) const {
    if (n > 0) {
      detail::engine_kernels::adopt_early_mass_kernel<<<1, 128, 0, s>>>(early, rest, n);
      detail::check(cudaGetLastError(), "zenflow::cuda_backend: adopt_early_mass_kernel");
    }
  }
  void iota(std::int32_t* out, std::int64_t n, cudaStream_t s) const {
    if (n > 0) {
      detail::engine_kernels::iota_kernel<<<blocks(n), 256, 0, s>>>(out, n);
      detail::check(cudaGetLastError(), "zenflow::cuda_backend: iota_kernel");
    }
  }
  void move_counts(const std::int32_t* src,
                   const std::int32_t* src_idx,
                   std::int32_t* dst,
                   const std::int32_t* dst_idx,
                   std::int64_t n,
                   cudaStream_t s) const {
    if (n > 0) {
      detail::engine_kernels::move_counts_kernel<<<blocks(n), 256, 0, s>>>(src, src_idx, dst, dst_idx, n);
      detail::check(cudaGetLastError(), "zenflow::cuda_backend: move_counts_kernel");
    }
  }

  // ---- the primitives' device launchers ----
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms_batched(void* temp,
                                                  std::size_t& temp_bytes,
                                                  const channel_norm_item<T>* items,
                                                  std::int64_t count,
                                                  channel_norm_extras extras,
                                                  cudaStream_t s) const {
    return device::channel_norms_batched<Norm, T>(temp, temp_bytes, items, count, extras, s);
  }
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms(void* temp,
                                          std::size_t& temp_bytes,
                                          channel_matrix<const T> grad,
                                          float* scores,
                                          cudaStream_t s) const {
    return device::channel_norms<Norm, T>(temp, temp_bytes, grad.data, grad.channels, grad.channel_len,
                                          grad.ld, grad.layout, scores, {}, s);
  }
  [[nodiscard]] cudaError_t topk(void* temp,
                                 std::size_t& temp_bytes,
                                 const float* scores,
                                 std::int64_t n,
                                 std::int64_t k,
                                 std::int32_t* indices,
                                 cudaStream_t s) const {
    return device::topk(temp, temp_bytes, scores, n, k, indices, nullptr, topk_order::ascending_index, s);
  }
  template <class T>
  [[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                        int count,
                                        std::int32_t* counts,
                                        const adamw_hparams& hp,
                                        const float* grad_scale,
                                        const std::uint32_t* skip,
                                        cudaStream_t s) const {
    return device::adamw_dense<T>(tensors, count, counts, hp, grad_scale, skip, s);
  }
  template <class T>
  [[nodiscard]] cudaError_t adamw_selective(channel_matrix<T> weights,
                                            channel_matrix<const T> grads,
                                            const std::int32_t* idx,
                                            std::int64_t k,
                                            const channel_state& state,
                                            const adamw_hparams& hp,
                                            const float* grad_scale,
                                            const std::uint32_t* skip,
                                            float* l1_mass,
                                            cudaStream_t s) const {
    return device::adamw_selective<T>(weights, grads, idx, k, state.master, state.m, state.v, state.counts,
                                      hp, grad_scale, skip, l1_mass, s);
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                            const std::int32_t* idx,
                                            std::int64_t count,
                                            Tout* dst,
                                            float* l1_mass,
                                            cudaStream_t s) const {
    return device::gather_channels<Tin, Tout>(src, idx, count, dst, l1_mass, s);
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t scatter_channels(const Tin* src,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             channel_matrix<Tout> dst,
                                             cudaStream_t s) const {
    return device::scatter_channels<Tin, Tout>(src, idx, count, dst, s);
  }

private:
  static unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + 255) / 256); }
  static void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (bytes > 0) {
      detail::check(cudaMemcpyAsync(dst, src, bytes, kind, s), "zenflow::cuda_backend: cudaMemcpyAsync");
    }
  }
};

static_assert(engine_backend<cuda_backend>);

ZF_NAMESPACE_END
