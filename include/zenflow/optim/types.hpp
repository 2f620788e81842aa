/// @file
/// Descriptors shared by the device optimizer launchers and their host twins.
#pragma once

#include <cstdint>
#include <type_traits>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN

/// One tensor of a dense (multi-tensor) AdamW call. Every pointer is device memory for the
/// device launcher, host memory for the host twin.
template <class T>
struct adamw_tensor {
  /// Working weights, written with the new master rounded to T (nullable: no working copy).
  /// May alias `master` when T is float.
  T* weights = nullptr;
  /// Gradients in working precision (not modified).
  const T* grads = nullptr;
  /// fp32 master weights, first and second moments (updated in place; must not alias each other).
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  /// Number of elements.
  std::int64_t size = 0;
};

/// The rows a selective update works on: `count` channels `idx` of a matrix (distinct, ascending
/// is the fast order) and their fp32 state in compact rows, row r = channel idx[r]
/// (`count x channel_len` master, m, v; one update count per row).
struct selected_rows {
  const std::int32_t* idx = nullptr;
  std::int64_t count = 0;
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::int32_t* counts = nullptr;
};

/// The step's scalars where the step computed them (device memory on the device; each nullable):
/// the gradient scale (loss-scale unscaling x clipping; null = 1) and the skip flag (non-zero: a
/// NaN/Inf step, nothing is written; null = never skip).
struct step_scalars {
  const float* grad_scale = nullptr;
  const std::uint32_t* skip = nullptr;
};

/// One matrix of a batched selective AdamW call (`adamw_selective_batched`: every matrix of a step
/// in one launch per working type). Its hyper-parameters are the call's with its own learning
/// rate, float(hp.lr * lr_scale), and its own weight decay. Pointers: device memory for the
/// device launcher (the descriptors themselves too), host memory for the host twin.
template <class T>
struct adamw_selective_item {
  channel_matrix<T> weights;
  channel_matrix<const T> grads;
  selected_rows rows;
  float lr_scale = 1.0f;
  float weight_decay = 0.0f;
  /// The device launch's first block for this matrix: written by
  /// `adamw_selective_batch_blocks` (host arithmetic), read by the kernel.
  std::int64_t block_begin = 0;
};

/// Rows per block of a strided matrix in `adamw_selective_batched` (the 32 x 32 tile).
inline constexpr std::int64_t selective_batch_tile = 32;

namespace detail {
/// The item of a batched launch that block `b` belongs to: the last whose `block_begin` is <= b
/// (`items` in launch order, the first starting at block 0; an item of no blocks starts where the
/// next one does and is never chosen). A binary search, on the device by every block.
template <class Item>
ZF_HOST_DEVICE int item_of_block(const Item* items, int n, std::int64_t b) {
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (items[mid].block_begin <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// Item `it`'s hyper-parameters in a batched call with `hp`: its lr float(hp.lr * lr_scale) (one
/// correctly rounded product on host and device, a subnormal kept: mul_f, not __fmul_rn, which is
/// mul.rn.ftz.f32 under -ftz=true) and its weight decay.
template <class Item>
ZF_HOST_DEVICE adamw_hparams item_hparams(adamw_hparams hp, const Item& it) {
  hp.lr = mul_f(hp.lr, it.lr_scale);
  hp.weight_decay = it.weight_decay;
  return hp;
}
} // namespace detail

/// Largest tensor a dense call accepts (2^40 elements).
inline constexpr std::int64_t max_dense_tensor_size = std::int64_t{1} << 40;

/// Where moments of type M live: M*, or for int8_moment a detail::q8_ptr (codes and scales).
template <class M>
struct moment_ptr {
  using type = M*;
};
template <>
struct moment_ptr<int8_moment> {
  using type = detail::q8_ptr;
};
template <class M>
using moment_ptr_t = typename moment_ptr<M>::type;

/// The moment type M of a moment_ptr_t<M> (the inverse of moment_ptr_t).
template <class P>
struct moment_of {
  using type = std::remove_cv_t<std::remove_pointer_t<P>>;
};
template <>
struct moment_of<detail::q8_ptr> {
  using type = int8_moment;
};
template <class P>
using moment_of_t = typename moment_of<std::remove_cv_t<P>>::type;

/// The full-size host optimizer state of one matrix parameter: `channels x channel_len` fp32
/// master, m and v (row c = channel c, contiguous) and one Adam update count per channel.
/// Moments M are float, or on the host bfloat16 (`host_moments = bf16`: 8 instead of 12 bytes of
/// host state per parameter; arithmetic stays fp32, see core/detail/moment_rounding.hpp) or
/// int8_moment (codes and block scales: core/detail/moment_q8.hpp).
template <class M>
struct basic_channel_state {
  float* master = nullptr;
  moment_ptr_t<M> m{};
  moment_ptr_t<M> v{};
  std::int32_t* counts = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
};
using channel_state = basic_channel_state<float>;
using channel_state_bf16m = basic_channel_state<bfloat16>;

ZF_NAMESPACE_END
