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

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/step_kernels.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>
#include <zenflow/transport/emulated_copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// Emulated backend of `zenflow::engine`: see the file comment. The device must outlive every
/// engine on it. A primitive that fails on the device's thread makes the device's error sticky;
/// the engine sees it at its next synchronising call (as with an asynchronous CUDA error).
class emulated_backend {
public:
  static constexpr bool is_device = true;
  using copy_backend_type = emulated_copy_backend;
  template <class T>
  using device_buffer = std::vector<T>;
  template <class T>
  using host_buffer = std::vector<T>;

  explicit emulated_backend(emulated_device& device) noexcept : device_(&device) {}

  [[nodiscard]] emulated_device& device() const noexcept { return *device_; }
  [[nodiscard]] copy_backend_type copier() const noexcept { return copy_backend_type{*device_}; }
  template <class T>
  [[nodiscard]] device_buffer<T> device_alloc(std::size_t n) const {
    return device_buffer<T>(n);
  }
  template <class T>
  [[nodiscard]] host_buffer<T> host_alloc(std::size_t n) const {
    return host_buffer<T>(n);
  }

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
    kernel(s, bytes, "memset", [dst, bytes] {
      if (bytes > 0) {
        std::memset(dst, 0, bytes);
      }
    });
  }
  void synchronize(cudaStream_t s) const { device_->synchronize_stream(s); }
  void synchronize_all() const { device_->synchronize(); }
  [[nodiscard]] int current_device() const noexcept { return 0; }
  void bind_device(int) const noexcept {}

  // ---- the plan's small operations: the host loops, on the stream's thread ----
  void sq_totals(const detail::sq_total_item* items, int n, double* totals, cudaStream_t s) const {
    kernel(s, 0, "sq_totals", [items, n, totals] { detail::host_sq_totals(items, n, totals); });
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
    kernel(s, 0, "finish_scalars", [=] {
      detail::host_finish_scalars(totals, n, flags, flag_count, loss_scale, max_norm, record, mass_words);
    });
  }
  void adopt_early_mass(float* early, float* rest, int n, cudaStream_t s) const {
    kernel(s, 0, "adopt_early_mass", [=] { detail::host_adopt_early_mass(early, rest, n); });
  }
  void iota(std::int32_t* out, std::int64_t n, cudaStream_t s) const {
    kernel(s, static_cast<std::size_t>(n) * 4, "iota", [=] { detail::host_iota(out, n); });
  }
  void move_counts(const std::int32_t* src,
                   const std::int32_t* src_idx,
                   std::int32_t* dst,
                   const std::int32_t* dst_idx,
                   std::int64_t n,
                   cudaStream_t s) const {
    kernel(s, static_cast<std::size_t>(n) * 8, "move_counts",
           [=] { detail::host_move_counts(src, src_idx, dst, dst_idx, n); });
  }

  // ---- the primitives: their host twins, enqueued (a temp-size query answers at once) ----
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms_batched(void* temp,
                                                  std::size_t& temp_bytes,
                                                  const channel_norm_item<T>* items,
                                                  std::int64_t count,
                                                  channel_norm_extras extras,
                                                  cudaStream_t s) const {
    if (temp == nullptr) {
      return host::channel_norms_batched<Norm, T>(nullptr, temp_bytes, items, count, extras, nullptr);
    }
    std::vector<channel_norm_item<T>> copy(items, items + count); // the caller's array is gone by then
    std::size_t bytes = 0;
    for (const auto& it : copy) {
      bytes += static_cast<std::size_t>(it.channels * it.channel_len) * sizeof(T);
    }
    kernel(s, bytes, "channel_norms_batched", [temp, temp_bytes, copy = std::move(copy), extras] {
      std::size_t tb = temp_bytes;
      detail::check(host::channel_norms_batched<Norm, T>(
                        temp, tb, copy.data(), static_cast<std::int64_t>(copy.size()), extras, nullptr),
                    "zenflow::emulated_backend: channel_norms_batched");
    });
    return cudaSuccess;
  }
  template <channel_norm Norm, class T>
  [[nodiscard]] cudaError_t channel_norms(void* temp,
                                          std::size_t& temp_bytes,
                                          channel_matrix<const T> grad,
                                          float* scores,
                                          cudaStream_t s) const {
    if (temp == nullptr) {
      return host::channel_norms<Norm, T>(nullptr, temp_bytes, grad.data, grad.channels, grad.channel_len,
                                          grad.ld, grad.layout, scores, {}, nullptr);
    }
    kernel(s, static_cast<std::size_t>(grad.channels * grad.channel_len) * sizeof(T), "channel_norms",
           [temp, temp_bytes, grad, scores] {
             std::size_t tb = temp_bytes;
             detail::check(host::channel_norms<Norm, T>(temp, tb, grad.data, grad.channels, grad.channel_len,
                                                        grad.ld, grad.layout, scores, {}, nullptr),
                           "zenflow::emulated_backend: channel_norms");
           });
    return cudaSuccess;
  }
  [[nodiscard]] cudaError_t topk(void* temp,
                                 std::size_t& temp_bytes,
                                 const float* scores,
                                 std::int64_t n,
                                 std::int64_t k,
                                 std::int32_t* indices,
                                 cudaStream_t s) const {
    if (temp == nullptr) {
      return host::topk(nullptr, temp_bytes, scores, n, k, indices, nullptr, topk_order::ascending_index,
                        nullptr);
    }
    kernel(s, static_cast<std::size_t>(n) * 4, "topk", [=] {
      std::size_t tb = temp_bytes;
      detail::check(
          host::topk(temp, tb, scores, n, k, indices, nullptr, topk_order::ascending_index, nullptr),
          "zenflow::emulated_backend: topk");
    });
    return cudaSuccess;
  }
  template <class T>
  [[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                        int count,
                                        std::int32_t* counts,
                                        const adamw_hparams& hp,
                                        const float* grad_scale,
                                        const std::uint32_t* skip,
                                        cudaStream_t s) const {
    std::vector<adamw_tensor<T>> copy(tensors, tensors + count);
    std::size_t bytes = 0;
    for (const auto& t : copy) {
      bytes += static_cast<std::size_t>(t.size) * (24 + 2 * sizeof(T));
    }
    kernel(s, bytes, "adamw_dense", [copy = std::move(copy), counts, hp, grad_scale, skip] {
      detail::check(host::adamw_dense<T>(copy.data(), static_cast<int>(copy.size()), counts, hp, grad_scale,
                                         skip, nullptr),
                    "zenflow::emulated_backend: adamw_dense");
    });
    return cudaSuccess;
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
    kernel(s, static_cast<std::size_t>(k * weights.channel_len) * (24 + 2 * sizeof(T)), "adamw_selective",
           [=] {
             detail::check(host::adamw_selective<T>(weights, grads, idx, k, state.master, state.m, state.v,
                                                    state.counts, hp, grad_scale, skip, l1_mass, nullptr),
                           "zenflow::emulated_backend: adamw_selective");
           });
    return cudaSuccess;
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                            const std::int32_t* idx,
                                            std::int64_t count,
                                            Tout* dst,
                                            float* l1_mass,
                                            cudaStream_t s) const {
    kernel(s, static_cast<std::size_t>(count * src.channel_len) * (sizeof(Tin) + sizeof(Tout)),
           "gather_channels", [=] {
             detail::check(host::gather_channels<Tin, Tout>(src, idx, count, dst, l1_mass, nullptr),
                           "zenflow::emulated_backend: gather_channels");
           });
    return cudaSuccess;
  }
  template <class Tin, class Tout>
  [[nodiscard]] cudaError_t scatter_channels(const Tin* src,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             channel_matrix<Tout> dst,
                                             cudaStream_t s) const {
    kernel(s, static_cast<std::size_t>(count * dst.channel_len) * (sizeof(Tin) + sizeof(Tout)),
           "scatter_channels", [=] {
             detail::check(host::scatter_channels<Tin, Tout>(src, idx, count, dst, nullptr),
                           "zenflow::emulated_backend: scatter_channels");
           });
    return cudaSuccess;
  }

private:
  template <class F>
  void kernel(cudaStream_t s, std::size_t bytes, const char* name, F&& body) const {
    device_->launch(s, std::function<void()>(std::forward<F>(body)), bytes, name);
  }

  emulated_device* device_;
};

static_assert(engine_backend<emulated_backend>);

ZF_NAMESPACE_END
