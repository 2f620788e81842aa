/// @file
/// Dispatch of the optimizer launchers (`<zenflow/optim/adamw.cuh>`, `<zenflow/optim/channels.cuh>`)
/// after validation: vector-path decisions, grid shapes and the launches of the kernels in
/// `adamw_kernels.cuh`.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/detail/adamw_kernels.cuh>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::optim {
template <class M>
[[nodiscard]] bool rows_vectorizable(const channel_matrix<M>& mat) {
  return mat.layout == channel_layout::contiguous && aligned(mat.data, 4 * sizeof(M)) && mat.ld % 4 == 0 &&
         mat.channel_len % 4 == 0;
}

[[nodiscard]] inline cudaError_t
launch_counts(std::int32_t* counts, std::int64_t n, const std::uint32_t* skip, cudaStream_t stream) {
  if (n == 0) {
    return cudaSuccess;
  }
  ZF_LAUNCH(static_cast<unsigned>((n + block_threads - 1) / block_threads), block_threads, 0, stream,
            advance_counts)
  (counts, n, skip);
  return launch_status();
}

[[nodiscard]] inline std::int64_t row_split(std::int64_t L) {
  return std::max<std::int64_t>(1, (L + block_elems - 1) / block_elems);
}

template <class T>
[[nodiscard]] cudaError_t dispatch_adamw_dense(const adamw_tensor<T>* tensors,
                                               int count,
                                               std::int32_t* d_counts,
                                               const adamw_hparams& hp,
                                               const float* d_grad_scale,
                                               const std::uint32_t* d_skip,
                                               cudaStream_t stream) {
  int t = 0;
  while (t < count) {
    dense_launch<T> L{};
    L.hp = hp;
    L.first = t;
    std::int64_t blocks = 0;
    while (t < count && L.count < dense_max_tensors) {
      const adamw_tensor<T>& d = tensors[t];
      const std::int64_t nb = (d.size + block_elems - 1) / block_elems;
      if (L.count > 0 && blocks + nb > max_blocks_per_launch) {
        break;
      }
      L.tensors[L.count] = d;
      L.block_start[L.count] = blocks;
      const bool vec = aligned(d.master, 16) && aligned(d.m, 16) && aligned(d.v, 16) &&
                       aligned(d.grads, 4 * sizeof(T)) &&
                       (d.weights == nullptr || aligned(d.weights, 4 * sizeof(T)));
      if (vec) {
        L.vector_ok |= std::uint64_t{1} << L.count;
      }
      blocks += nb;
      ++L.count;
      ++t;
    }
    L.block_start[L.count] = blocks;
    if (blocks > 0) {
      ZF_LAUNCH(static_cast<unsigned>(blocks), block_threads, 0, stream, adamw_dense_kernel<T>)
      (L, d_counts, d_grad_scale, d_skip);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
    }
  }
  return launch_counts(d_counts, count, d_skip, stream);
}

template <class T>
[[nodiscard]] cudaError_t dispatch_adamw_selective(channel_matrix<T> weights,
                                                   channel_matrix<const T> grads,
                                                   const std::int32_t* d_idx,
                                                   std::int64_t k,
                                                   float* d_master,
                                                   float* d_m,
                                                   float* d_v,
                                                   std::int32_t* d_counts,
                                                   const adamw_hparams& hp,
                                                   const float* d_grad_scale,
                                                   const std::uint32_t* d_skip,
                                                   float* d_l1_mass,
                                                   cudaStream_t stream) {
  const std::int64_t L = weights.channel_len;
  const bool rows =
      weights.layout == channel_layout::contiguous && grads.layout == channel_layout::contiguous;
  if (k == 0 || L == 0) {
    return launch_counts(d_counts, k, d_skip, stream);
  }
  if (rows) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(weights) && rows_vectorizable(grads) && aligned(d_master, 16) &&
                     aligned(d_m, 16) && aligned(d_v, 16);
    ZF_LAUNCH(static_cast<unsigned>(k * split), block_threads, 0, stream, adamw_selective_rows_kernel<T>)
    (weights, grads, d_idx, split, d_master, d_m, d_v, d_counts, hp, d_grad_scale, d_skip, d_l1_mass, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((k + tile - 1) / tile),
                    static_cast<unsigned>((L + tile - 1) / tile));
    ZF_LAUNCH(grid, dim3(tile, tile_rows), 0, stream, adamw_selective_tiles_kernel<T>)
    (weights, grads, d_idx, k, d_master, d_m, d_v, d_counts, hp, d_grad_scale, d_skip, d_l1_mass);
  }
  if (const cudaError_t e = launch_status(); e != cudaSuccess) {
    return e;
  }
  return launch_counts(d_counts, k, d_skip, stream);
}

template <class T>
[[nodiscard]] cudaError_t dispatch_adamw_selective_batched(const adamw_selective_item<T>* d_items,
                                                           int count,
                                                           std::int64_t blocks,
                                                           const adamw_hparams& hp,
                                                           const float* d_grad_scale,
                                                           const std::uint32_t* d_skip,
                                                           cudaStream_t stream) {
  if (count == 0 || blocks == 0) {
    return cudaSuccess;
  }
  // Grid-stride: a grid of at most 2^20 blocks covers any number of rows.
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(blocks, std::int64_t{1} << 20));
  ZF_LAUNCH(grid, block_threads, 0, stream, adamw_selective_batched_kernel<T>)
  (d_items, count, blocks, hp, d_grad_scale, d_skip);
  return launch_status();
}

template <class Tin, class Tout>
[[nodiscard]] cudaError_t dispatch_gather_channels(channel_matrix<const Tin> src,
                                                   const std::int32_t* d_idx,
                                                   std::int64_t count,
                                                   Tout* d_dst,
                                                   float* d_l1_mass,
                                                   cudaStream_t stream) {
  const std::int64_t L = src.channel_len;
  if (count == 0 || L == 0) {
    return cudaSuccess;
  }
  if (src.layout == channel_layout::contiguous) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(src) && aligned(d_dst, 4 * sizeof(Tout));
    ZF_LAUNCH(static_cast<unsigned>(count * split), block_threads, 0, stream, gather_rows_kernel<Tin, Tout>)
    (src, d_idx, split, d_dst, d_l1_mass, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((count + tile - 1) / tile),
                    static_cast<unsigned>(std::min<std::int64_t>((L + tile - 1) / tile, 65535)));
    ZF_LAUNCH(grid, dim3(tile, tile_rows), 0, stream, gather_tiles_kernel<Tin, Tout>)
    (src, d_idx, count, d_dst, d_l1_mass);
  }
  return launch_status();
}

template <class Tin, class Tout>
[[nodiscard]] cudaError_t dispatch_scatter_channels(const Tin* d_src,
                                                    const std::int32_t* d_idx,
                                                    std::int64_t count,
                                                    channel_matrix<Tout> dst,
                                                    cudaStream_t stream) {
  const std::int64_t L = dst.channel_len;
  if (count == 0 || L == 0) {
    return cudaSuccess;
  }
  if (dst.layout == channel_layout::contiguous) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(dst) && aligned(d_src, 4 * sizeof(Tin));
    ZF_LAUNCH(static_cast<unsigned>(count * split), block_threads, 0, stream, scatter_rows_kernel<Tin, Tout>)
    (d_src, d_idx, split, dst, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((count + tile - 1) / tile),
                    static_cast<unsigned>(std::min<std::int64_t>((L + tile - 1) / tile, 65535)));
    ZF_LAUNCH(grid, dim3(tile, tile_rows), 0, stream, scatter_tiles_kernel<Tin, Tout>)
    (d_src, d_idx, count, dst);
  }
  return launch_status();
}
} // namespace detail::optim

ZF_NAMESPACE_END
