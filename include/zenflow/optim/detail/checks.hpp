/// @file
/// Argument checks shared by the device launchers and their host twins, so that both reject the
/// same arguments with the same message. Only the names differ: the function's, and the pointer
/// arguments' (`d_idx` on the device, `idx` on the host): `ptr` is the prefix, "d_" or "".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

[[nodiscard]] inline cudaError_t check_hparams(std::string_view fn, const adamw_hparams& hp) {
  if (const char* bad = invalid_adamw_hparam(hp)) {
    return reject(fn, bad,
                  "is out of range (lr >= 0, 0 <= beta < 1, eps > 0, weight_decay >= 0, all finite)");
  }
  return cudaSuccess;
}

/// `ptr` + `name`: a pointer argument as the caller's signature names it.
[[nodiscard]] inline std::string ptr_arg(std::string_view ptr, std::string_view name) {
  std::string s(ptr);
  s += name;
  return s;
}

template <class T>
[[nodiscard]] cudaError_t check_dense(std::string_view fn,
                                      std::string_view ptr,
                                      const adamw_tensor<T>* tensors,
                                      int count,
                                      const std::int32_t* counts,
                                      const adamw_hparams& hp) {
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(tensors != nullptr || count == 0, fn, "tensors", "must not be null");
  ZF_EXPECT_ARG(counts != nullptr || count == 0, fn, ptr_arg(ptr, "counts"), "must not be null");
  if (const cudaError_t e = check_hparams(fn, hp); e != cudaSuccess) {
    return e;
  }
  for (int t = 0; t < count; ++t) {
    const adamw_tensor<T>& d = tensors[t];
    ZF_EXPECT_ARG(d.size >= 0, fn, "tensors[].size", "must be >= 0");
    ZF_EXPECT_ARG(d.size <= max_dense_tensor_size, fn, "tensors[].size", "is too large (> 2^40 elements)");
    if (d.size > 0) {
      ZF_EXPECT_ARG(d.grads != nullptr, fn, "tensors[].grads", "must not be null");
      ZF_EXPECT_ARG(d.master != nullptr, fn, "tensors[].master", "must not be null");
      ZF_EXPECT_ARG(d.m != nullptr, fn, "tensors[].m", "must not be null");
      ZF_EXPECT_ARG(d.v != nullptr, fn, "tensors[].v", "must not be null");
    }
  }
  return cudaSuccess;
}

template <class T, class G>
[[nodiscard]] cudaError_t check_selective(std::string_view fn,
                                          std::string_view ptr,
                                          const channel_matrix<T>& weights,
                                          const channel_matrix<G>& grads,
                                          const std::int32_t* idx,
                                          std::int64_t k,
                                          const float* master,
                                          const float* m,
                                          const float* v,
                                          const std::int32_t* counts,
                                          const adamw_hparams& hp) {
  if (const cudaError_t e = check_channel_matrix(fn, "weights", weights.data, weights.channels,
                                                 weights.channel_len, weights.ld, weights.layout);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = check_channel_matrix(fn, "grads", grads.data, grads.channels, grads.channel_len,
                                                 grads.ld, grads.layout);
      e != cudaSuccess) {
    return e;
  }
  ZF_EXPECT_ARG(grads.channels == weights.channels && grads.channel_len == weights.channel_len, fn, "grads",
                "must have the shape of weights (channels, channel_len)");
  ZF_EXPECT_ARG(k >= 0 && k <= weights.channels, fn, ptr_arg(ptr, "count"), "must be in [0, channels]");
  ZF_EXPECT_ARG(k <= INT32_MAX, fn, ptr_arg(ptr, "count"), "must fit in int32");
  ZF_EXPECT_ARG(idx != nullptr || k == 0, fn, ptr_arg(ptr, "idx"), "must not be null");
  ZF_EXPECT_ARG(counts != nullptr || k == 0, fn, ptr_arg(ptr, "counts"), "must not be null");
  const bool has_state = k > 0 && weights.channel_len > 0;
  ZF_EXPECT_ARG(master != nullptr || !has_state, fn, ptr_arg(ptr, "master"), "must not be null");
  ZF_EXPECT_ARG(m != nullptr || !has_state, fn, ptr_arg(ptr, "m"), "must not be null");
  ZF_EXPECT_ARG(v != nullptr || !has_state, fn, ptr_arg(ptr, "v"), "must not be null");
  return check_hparams(fn, hp);
}

/// gather/scatter: the channel matrix, the index list and the compact buffer.
template <class M>
[[nodiscard]] cudaError_t check_channel_copy(std::string_view fn,
                                             std::string_view ptr,
                                             std::string_view matrix_name,
                                             const channel_matrix<M>& mat,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             const void* compact,
                                             std::string_view compact_name) {
  if (const cudaError_t e =
          check_channel_matrix(fn, matrix_name, mat.data, mat.channels, mat.channel_len, mat.ld, mat.layout);
      e != cudaSuccess) {
    return e;
  }
  ZF_EXPECT_ARG(count >= 0 && count <= mat.channels, fn, "count", "must be in [0, channels]");
  ZF_EXPECT_ARG(idx != nullptr || count == 0, fn, ptr_arg(ptr, "idx"), "must not be null");
  ZF_EXPECT_ARG(compact != nullptr || count == 0 || mat.channel_len == 0, fn, ptr_arg(ptr, compact_name),
                "must not be null");
  return cudaSuccess;
}

/// Host-only: every index in [0, channels) (device launchers cannot read device memory).
[[nodiscard]] inline cudaError_t
check_indices_host(std::string_view fn, const std::int32_t* idx, std::int64_t count, std::int64_t channels) {
  for (std::int64_t i = 0; i < count; ++i) {
    ZF_EXPECT_ARG(idx[i] >= 0 && idx[i] < channels, fn, "idx", "holds an index outside [0, channels)");
  }
  return cudaSuccess;
}

} // namespace detail

ZF_NAMESPACE_END
