/// @file
/// The host implementations of dense and selective AdamW (`zenflow::host::adamw_dense`,
/// `adamw_selective` in `<zenflow/optim/adamw.hpp>`), after validation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/detail/cpu_simd.hpp>
#include <zenflow/optim/detail/host_grain.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

template <class T>
[[nodiscard]] cudaError_t host_adamw_dense(const adamw_tensor<T>* tensors,
                                           int count,
                                           std::int32_t* counts,
                                           const adamw_hparams& hp,
                                           const float* grad_scale,
                                           const std::uint32_t* skip,
                                           worker_pool* pool) {
  if (count == 0 || (skip != nullptr && *skip != 0)) {
    return cudaSuccess;
  }
  const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
  struct piece {
    int tensor;
    std::int64_t begin, end;
  };
  std::vector<piece> pieces;
  std::vector<adam_constants> consts(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) {
    consts[static_cast<std::size_t>(t)] = make_adam_constants(hp, counts[t] + 1);
    for (std::int64_t b = 0; b < tensors[t].size; b += cpu_grain) {
      pieces.push_back({t, b, std::min(tensors[t].size, b + cpu_grain)});
    }
  }
  parallel_for(pool, static_cast<std::int64_t>(pieces.size()), 1,
               [&](std::int64_t p, std::int64_t, std::int64_t) {
                 const piece& pc = pieces[static_cast<std::size_t>(p)];
                 const adamw_tensor<T>& d = tensors[pc.tensor];
                 cpu::adam_span<T, T>(d.master + pc.begin, d.m + pc.begin, d.v + pc.begin, d.grads + pc.begin,
                                      d.weights == nullptr ? nullptr : d.weights + pc.begin,
                                      pc.end - pc.begin, consts[static_cast<std::size_t>(pc.tensor)], scale);
               });
  for (int t = 0; t < count; ++t) {
    counts[t] += 1;
  }
  return cudaSuccess;
}

template <class T>
[[nodiscard]] cudaError_t host_adamw_selective(channel_matrix<T> weights,
                                               channel_matrix<const T> grads,
                                               const std::int32_t* idx,
                                               std::int64_t k,
                                               float* master_rows,
                                               float* m_rows,
                                               float* v_rows,
                                               std::int32_t* counts,
                                               const adamw_hparams& hp,
                                               const float* grad_scale,
                                               const std::uint32_t* skip,
                                               float* l1_mass,
                                               worker_pool* pool) {
  if (k == 0 || (skip != nullptr && *skip != 0)) {
    return cudaSuccess;
  }
  const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
  const std::int64_t L = weights.channel_len;
  const bool fast =
      weights.layout == channel_layout::contiguous && grads.layout == channel_layout::contiguous;
  std::vector<float> row_l1(l1_mass != nullptr ? static_cast<std::size_t>(k) : 0u);
  parallel_for(pool, k, rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = idx[r];
      const adam_constants kc = make_adam_constants(hp, counts[r] + 1);
      float* master = master_rows + r * L;
      float* m = m_rows + r * L;
      float* v = v_rows + r * L;
      if (fast) {
        const T* g = grads.data + c * grads.ld;
        if (l1_mass != nullptr) {
          row_l1[static_cast<std::size_t>(r)] = cpu::l1_span<T>(g, L);
        }
        cpu::adam_span<T, T>(master, m, v, g, weights.data + c * weights.ld, L, kc, scale);
      } else {
        float l1 = 0.0f;
        for (std::int64_t i = 0; i < L; ++i) {
          const float g = to_float(grads(c, i));
          l1 += g < 0.0f ? -g : g;
          weights(c, i) = from_float<T>(adam_update(master[i], m[i], v[i], g, scale, kc));
        }
        if (l1_mass != nullptr) {
          row_l1[static_cast<std::size_t>(r)] = l1;
        }
      }
      counts[r] += 1;
    }
  });
  if (l1_mass != nullptr) {
    float sum = 0.0f;
    for (const float x : row_l1) {
      sum += x;
    }
    *l1_mass += sum;
  }
  return cudaSuccess;
}

} // namespace detail

ZF_NAMESPACE_END
