/// @file
/// Device optimizer launchers: dense multi-tensor AdamW, selective-channel AdamW, and
/// gather/scatter of channels (ZenFlow's state migration and weight upload). Host twins with the
/// same arguments are in optim/adamw.hpp; both share math/adam.hpp, so they agree bit for bit on
/// weights, masters and moments.
///
/// Every launcher: validates its arguments before launching (cudaErrorInvalidValue, message in
/// zenflow::last_error_message(), nothing written); is stream-ordered (no synchronisation, no
/// allocation, safe under CUDA graph capture); reads the per-step scalars (gradient scale, skip
/// flag) from device memory inside the kernels, so the caller never synchronises for them.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/detail/adamw_kernels.cuh>
#include <zenflow/optim/detail/checks.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::optim {
[[nodiscard]] inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

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
  advance_counts<<<static_cast<unsigned>((n + block_threads - 1) / block_threads), block_threads, 0,
                   stream>>>(counts, n, skip);
  return cudaGetLastError();
}

[[nodiscard]] inline std::int64_t row_split(std::int64_t L) {
  return std::max<std::int64_t>(1, (L + block_elems - 1) / block_elems);
}
} // namespace detail::optim

namespace device {

/// Dense AdamW over `count` tensors in as few launches as the kernel-parameter space allows (48
/// tensors per launch; descriptors passed by value, no allocation, no copy), plus one launch that
/// advances the counts. Tensor t uses update count `d_counts[t] + 1`. 16-byte vector access for
/// every tensor whose pointers allow it (fp32 arrays 16-byte aligned, T arrays 4-element
/// aligned), a scalar path otherwise. A skipped step (`*d_skip != 0`) writes nothing.
///
/// @param tensors  host array of `count` descriptors (pointers: device memory); read during the
///                 call only.
/// @param d_counts device array of `count` int32 update counts, advanced unless skipped.
/// @param d_grad_scale device scalar (nullable: 1.0), multiplies every gradient.
/// @param d_skip   device flag (nullable: not skipped).
/// Deterministic (element-wise). Tensors must not overlap one another.
template <class T>
[[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                      int count,
                                      std::int32_t* d_counts,
                                      const adamw_hparams& hp,
                                      const float* d_grad_scale,
                                      const std::uint32_t* d_skip,
                                      cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  if (const cudaError_t e = detail::check_dense("zenflow::device::adamw_dense", tensors, count, d_counts, hp);
      e != cudaSuccess) {
    return e;
  }
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
      adamw_dense_kernel<T>
          <<<static_cast<unsigned>(blocks), block_threads, 0, stream>>>(L, d_counts, d_grad_scale, d_skip);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
        return e;
      }
    }
  }
  return launch_counts(d_counts, count, d_skip, stream);
}

/// Selective AdamW on the `k` channels `d_idx` of a matrix, their fp32 state in compact rows
/// (row r = channel d_idx[r], k x channel_len). One fused pass reads each selected channel's
/// gradient once, updates master/m/v with count `d_counts[r] + 1`, and writes the new working
/// weights in place; a second tiny launch advances `d_counts`. Unlisted channels are untouched.
/// Contiguous layouts (both matrices) are the fast path (row blocks, 16-byte access when rows
/// are aligned and channel_len % 4 == 0); any strided matrix takes a 32x32 tile path through
/// shared memory. A skipped step writes nothing (d_l1_mass included).
///
/// @param d_idx     k distinct channel indices in [0, channels) (sorted ascending: best locality).
///                  Not checked (device memory): an index out of range is undefined behaviour.
/// @param d_l1_mass nullable: sum of |grad| over the selected channels (raw, before the scale)
///                  ADDED to *d_l1_mass (one float atomic per block: last bits may vary by run).
template <class T>
[[nodiscard]] cudaError_t adamw_selective(channel_matrix<T> weights,
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
                                          cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::adamw_selective";
  if (const cudaError_t e =
          detail::check_selective(fn, weights, grads, d_idx, k, d_master, d_m, d_v, d_counts, hp);
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = weights.channel_len;
  const bool rows =
      weights.layout == channel_layout::contiguous && grads.layout == channel_layout::contiguous;
  if (!rows) {
    ZF_EXPECT_ARG((L + tile - 1) / tile <= 65535, fn, "channel_len",
                  "is too large for the strided path (> 2^21)");
  } else {
    ZF_EXPECT_ARG(k * row_split(L) <= max_blocks_per_launch, fn, "k", "times channel_len is too large");
  }
  if (k == 0 || L == 0) {
    return launch_counts(d_counts, k, d_skip, stream);
  }
  if (rows) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(weights) && rows_vectorizable(grads) && aligned(d_master, 16) &&
                     aligned(d_m, 16) && aligned(d_v, 16);
    adamw_selective_rows_kernel<T><<<static_cast<unsigned>(k * split), block_threads, 0, stream>>>(
        weights, grads, d_idx, split, d_master, d_m, d_v, d_counts, hp, d_grad_scale, d_skip, d_l1_mass, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((k + tile - 1) / tile),
                    static_cast<unsigned>((L + tile - 1) / tile));
    adamw_selective_tiles_kernel<T><<<grid, dim3(tile, tile_rows), 0, stream>>>(
        weights, grads, d_idx, k, d_master, d_m, d_v, d_counts, hp, d_grad_scale, d_skip, d_l1_mass);
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return e;
  }
  return launch_counts(d_counts, k, d_skip, stream);
}

/// Packs the `count` channels `d_idx` of `src` into compact rows `d_dst` (count x channel_len,
/// row r = channel d_idx[r]), converting Tin -> Tout (RNE when narrowing). Packs the unselected
/// gradients for the device-to-host copy, and moves state rows when the selection changes.
/// @param d_l1_mass nullable: sum of |src| over the packed channels ADDED to it (Zen-auto's
///                  "rest"; float atomics, last bits may vary by run).
template <class Tin, class Tout>
[[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                          const std::int32_t* d_idx,
                                          std::int64_t count,
                                          Tout* d_dst,
                                          float* d_l1_mass,
                                          cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::gather_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "src", src, d_idx, count, d_dst, "d_dst");
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = src.channel_len;
  if (src.layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(count * row_split(L) <= max_blocks_per_launch, fn, "count",
                  "times channel_len is too large");
  } else {
    ZF_EXPECT_ARG((L + tile - 1) / tile <= 65535, fn, "channel_len",
                  "is too large for the strided path (> 2^21)");
  }
  if (count == 0 || L == 0) {
    return cudaSuccess;
  }
  if (src.layout == channel_layout::contiguous) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(src) && aligned(d_dst, 4 * sizeof(Tout));
    gather_rows_kernel<Tin, Tout><<<static_cast<unsigned>(count * split), block_threads, 0, stream>>>(
        src, d_idx, split, d_dst, d_l1_mass, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((count + tile - 1) / tile),
                    static_cast<unsigned>((L + tile - 1) / tile));
    gather_tiles_kernel<Tin, Tout>
        <<<grid, dim3(tile, tile_rows), 0, stream>>>(src, d_idx, count, d_dst, d_l1_mass);
  }
  return cudaGetLastError();
}

/// Unpacks compact rows `d_src` (count x channel_len, row r = channel d_idx[r]) into the channels
/// `d_idx` of `dst`, converting Tin -> Tout (RNE when narrowing): applies an uploaded block of
/// new weights to the unselected channels, or puts state rows back. `d_src` must not overlap dst.
template <class Tin, class Tout>
[[nodiscard]] cudaError_t scatter_channels(const Tin* d_src,
                                           const std::int32_t* d_idx,
                                           std::int64_t count,
                                           channel_matrix<Tout> dst,
                                           cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::scatter_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "dst", dst, d_idx, count, d_src, "d_src");
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = dst.channel_len;
  if (dst.layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(count * row_split(L) <= max_blocks_per_launch, fn, "count",
                  "times channel_len is too large");
  } else {
    ZF_EXPECT_ARG((L + tile - 1) / tile <= 65535, fn, "channel_len",
                  "is too large for the strided path (> 2^21)");
  }
  if (count == 0 || L == 0) {
    return cudaSuccess;
  }
  if (dst.layout == channel_layout::contiguous) {
    const std::int64_t split = row_split(L);
    const bool vec = rows_vectorizable(dst) && aligned(d_src, 4 * sizeof(Tin));
    scatter_rows_kernel<Tin, Tout>
        <<<static_cast<unsigned>(count * split), block_threads, 0, stream>>>(d_src, d_idx, split, dst, vec);
  } else {
    const dim3 grid(static_cast<unsigned>((count + tile - 1) / tile),
                    static_cast<unsigned>((L + tile - 1) / tile));
    scatter_tiles_kernel<Tin, Tout><<<grid, dim3(tile, tile_rows), 0, stream>>>(d_src, d_idx, count, dst);
  }
  return cudaGetLastError();
}

} // namespace device

ZF_NAMESPACE_END
