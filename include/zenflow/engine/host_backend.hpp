/// @file
/// The engine's host backend: "device" memory is host memory and every operation runs on the
/// calling thread when it is enqueued (streams are ignored, events are empty). The engine's
/// device plan runs on it unchanged, with the host twins of the primitives, so that the whole
/// algorithm is tested without a GPU. For the engine's real concurrency on a CPU (streams as
/// threads, copies that land later) use `emulated_backend`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/step_kernels.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// Host backend of `zenflow::engine`: parameters are host pointers; see the file comment.
class host_backend {
public:
  static constexpr bool is_device = false;
  using copy_backend_type = host_copy_backend;
  template <class T>
  using device_buffer = std::vector<T>;
  template <class T>
  using host_buffer = std::vector<T>;

  [[nodiscard]] copy_backend_type copier() const noexcept { return {}; }
  template <class T>
  [[nodiscard]] device_buffer<T> device_alloc(std::size_t n) const {
    return device_buffer<T>(n);
  }
  template <class T>
  [[nodiscard]] host_buffer<T> host_alloc(std::size_t n) const {
    return host_buffer<T>(n);
  }

  void copy_d2h(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void copy_h2d(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes, cudaStream_t) const noexcept {
    if (bytes > 0) {
      std::memset(dst, 0, bytes);
    }
  }
  void synchronize(cudaStream_t) const noexcept {}
  void synchronize_all() const noexcept {}
  [[nodiscard]] int current_device() const noexcept { return 0; }
  void bind_device(int) const noexcept {}

  // ---- the plan's small operations ----
  void sq_totals(const detail::sq_total_item* items, int n, double* totals, cudaStream_t) const {
    detail::host_sq_totals(items, n, totals);
  }
  void finish_scalars(const double* totals,
                      int n,
                      const std::uint32_t* flags,
                      int flag_count,
                      float loss_scale,
                      float max_norm,
                      float* record,
                      int mass_words,
                      cudaStream_t) const {
    detail::host_finish_scalars(totals, n, flags, flag_count, loss_scale, max_norm, record, mass_words);
  }
  void adopt_early_mass(float* early, float* rest, int n, cudaStream_t) const {
    detail::host_adopt_early_mass(early, rest, n);
  }
  void iota(std::int32_t* out, std::int64_t n, cudaStream_t) const { detail::host_iota(out, n); }
  void move_counts(const std::int32_t* src,
                   const std::int32_t* src_idx,
                   std::int32_t* dst,
                   const std::int32_t* dst_idx,
                   std::int64_t n,
                   cudaStream_t) const {
    detail::host_move_counts(src, src_idx, dst, dst_idx, n);
  }

  // ---- the primitives: their host twins, on the calling thread ----
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms_batched(void* temp,
                                                  std::size_t& temp_bytes,
                                                  const channel_norm_item<T>* items,
                                                  std::int64_t count,
                                                  channel_norm_extras extras,
                                                  cudaStream_t) const {
    return host::channel_norms_batched<Norm, T>(temp, temp_bytes, items, count, extras, nullptr);
  }
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms(
      void* temp, std::size_t& temp_bytes, channel_matrix<const T> grad, float* scores, cudaStream_t) const {
    return host::channel_norms<Norm, T>(temp, temp_bytes, grad.data, grad.channels, grad.channel_len, grad.ld,
                                        grad.layout, scores, {}, nullptr);
  }
  [[nodiscard]] cudaError_t topk(void* temp,
                                 std::size_t& temp_bytes,
                                 const float* scores,
                                 std::int64_t n,
                                 std::int64_t k,
                                 std::int32_t* indices,
                                 cudaStream_t) const {
    return host::topk(temp, temp_bytes, scores, n, k, indices, nullptr, topk_order::ascending_index, nullptr);
  }
  template <class T>
  [[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                        int count,
                                        std::int32_t* counts,
                                        const adamw_hparams& hp,
                                        const float* grad_scale,
                                        const std::uint32_t* skip,
                                        cudaStream_t) const {
    return host::adamw_dense<T>(tensors, count, counts, hp, grad_scale, skip, nullptr);
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
                                            cudaStream_t) const {
    return host::adamw_selective<T>(weights, grads, idx, k, state.master, state.m, state.v, state.counts, hp,
                                    grad_scale, skip, l1_mass, nullptr);
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                            const std::int32_t* idx,
                                            std::int64_t count,
                                            Tout* dst,
                                            float* l1_mass,
                                            cudaStream_t) const {
    return host::gather_channels<Tin, Tout>(src, idx, count, dst, l1_mass, nullptr);
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t scatter_channels(const Tin* src,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             channel_matrix<Tout> dst,
                                             cudaStream_t) const {
    return host::scatter_channels<Tin, Tout>(src, idx, count, dst, nullptr);
  }

private:
  static void move(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes > 0) {
      std::memmove(dst, src, bytes);
    }
  }
};

static_assert(engine_backend<host_backend>);

ZF_NAMESPACE_END
