/// @file
/// Host twins of the device optimizer launchers (optim/adamw.cuh): dense multi-tensor AdamW,
/// selective-channel AdamW, and gather/scatter of channels. Same arguments and validation as the
/// launchers, with a `worker_pool*` (nullptr = the calling thread) instead of a stream, and host
/// pointers where the launcher takes device pointers. Same arithmetic (math/adam.hpp), so the
/// host and device results agree bit for bit on the weights, masters and moments.
///
/// One difference: the host twins also check that every channel index is in [0, channels)
/// (the device launchers cannot read device memory before launching; there an index out of
/// range is undefined behaviour).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/optim/detail/checks.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Dense AdamW over `count` tensors (the engine's vector parameters; the whole model during
/// warm-up). Tensor t uses update count `d_counts[t] + 1`, and `d_counts[t]` is advanced.
/// A skipped step (`*d_skip != 0`) writes nothing at all.
///
/// @param tensors   host array of `count` descriptors (pointers: host memory here).
/// @param d_counts  per-tensor update counts (int32), advanced when not skipped.
/// @param d_grad_scale nullable (1.0): gradient multiplier (unscaling x clipping).
/// @param d_skip    nullable (not skipped): non-zero skips the whole step.
template <class T>
[[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                      int count,
                                      std::int32_t* d_counts,
                                      const adamw_hparams& hp,
                                      const float* d_grad_scale,
                                      const std::uint32_t* d_skip,
                                      worker_pool* pool) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  if (const cudaError_t e = detail::check_dense("zenflow::host::adamw_dense", tensors, count, d_counts, hp);
      e != cudaSuccess) {
    return e;
  }
  if (count == 0 || (d_skip != nullptr && *d_skip != 0)) {
    return cudaSuccess;
  }
  const float scale = d_grad_scale != nullptr ? *d_grad_scale : 1.0f;
  struct piece {
    int tensor;
    std::int64_t begin, end;
  };
  std::vector<piece> pieces;
  std::vector<adam_constants> consts(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) {
    consts[static_cast<std::size_t>(t)] = make_adam_constants(hp, d_counts[t] + 1);
    for (std::int64_t b = 0; b < tensors[t].size; b += detail::cpu_grain) {
      pieces.push_back({t, b, std::min(tensors[t].size, b + detail::cpu_grain)});
    }
  }
  parallel_for(
      pool, static_cast<std::int64_t>(pieces.size()), 1, [&](std::int64_t p, std::int64_t, std::int64_t) {
        const piece& pc = pieces[static_cast<std::size_t>(p)];
        const adamw_tensor<T>& d = tensors[pc.tensor];
        detail::cpu::adam_span<T, T>(d.master + pc.begin, d.m + pc.begin, d.v + pc.begin, d.grads + pc.begin,
                                     d.weights == nullptr ? nullptr : d.weights + pc.begin, pc.end - pc.begin,
                                     consts[static_cast<std::size_t>(pc.tensor)], scale);
      });
  for (int t = 0; t < count; ++t) {
    d_counts[t] += 1;
  }
  return cudaSuccess;
}

/// Selective AdamW: the `k` channels `d_idx` of a channel matrix, with their fp32 state in
/// compact rows (row r = channel d_idx[r]). One pass: read the channel's gradient, update the
/// compact master/m/v with count `d_counts[r] + 1`, write the new working weights in place,
/// advance `d_counts[r]`. Unlisted channels are not touched. A skipped step writes nothing
/// (d_l1_mass included).
///
/// @param weights  working weights (either layout), updated in place on the listed channels.
/// @param grads    gradients, same shape (either layout).
/// @param d_idx    k distinct channel indices (sorted ascending is the fast order).
/// @param d_master,d_m,d_v compact fp32 state, k x channel_len.
/// @param d_counts per-row update counts.
/// @param d_l1_mass nullable: sum of |grad| over the listed channels (raw gradient, before
///                  d_grad_scale) is ADDED to *d_l1_mass (Zen-auto's "crit"); summed in a fixed
///                  order (deterministic).
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
                                          worker_pool* pool) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::adamw_selective";
  if (const cudaError_t e =
          detail::check_selective(fn, weights, grads, d_idx, k, d_master, d_m, d_v, d_counts, hp);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, d_idx, k, weights.channels); e != cudaSuccess) {
    return e;
  }
  if (k == 0 || (d_skip != nullptr && *d_skip != 0)) {
    return cudaSuccess;
  }
  const float scale = d_grad_scale != nullptr ? *d_grad_scale : 1.0f;
  const std::int64_t L = weights.channel_len;
  const bool fast =
      weights.layout == channel_layout::contiguous && grads.layout == channel_layout::contiguous;
  std::vector<float> row_l1(d_l1_mass != nullptr ? static_cast<std::size_t>(k) : 0u);
  parallel_for(pool, k, detail::rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = d_idx[r];
      const adam_constants kc = make_adam_constants(hp, d_counts[r] + 1);
      float* master = d_master + r * L;
      float* m = d_m + r * L;
      float* v = d_v + r * L;
      if (fast) {
        const T* g = grads.data + c * grads.ld;
        if (d_l1_mass != nullptr) {
          row_l1[static_cast<std::size_t>(r)] = detail::cpu::l1_span<T>(g, L);
        }
        detail::cpu::adam_span<T, T>(master, m, v, g, weights.data + c * weights.ld, L, kc, scale);
      } else {
        float l1 = 0.0f;
        for (std::int64_t i = 0; i < L; ++i) {
          const float g = to_float(grads(c, i));
          l1 += g < 0.0f ? -g : g;
          weights(c, i) = from_float<T>(adam_update(master[i], m[i], v[i], g, scale, kc));
        }
        if (d_l1_mass != nullptr) {
          row_l1[static_cast<std::size_t>(r)] = l1;
        }
      }
      d_counts[r] += 1;
    }
  });
  if (d_l1_mass != nullptr) {
    float sum = 0.0f;
    for (const float x : row_l1) {
      sum += x;
    }
    *d_l1_mass += sum;
  }
  return cudaSuccess;
}

/// Packs the `count` channels `d_idx` of `src` into compact rows of `d_dst` (row r = channel
/// d_idx[r], count x channel_len), converting Tin -> Tout (RNE when narrowing). Used to pack the
/// unselected gradients for the device-to-host copy and to move state rows when the selection
/// changes. `d_l1_mass` (nullable): sum of |src| over the packed channels is ADDED to it
/// (Zen-auto's "rest"; fixed summation order).
template <class Tin, class Tout>
[[nodiscard]] cudaError_t gather_channels(channel_matrix<const Tin> src,
                                          const std::int32_t* d_idx,
                                          std::int64_t count,
                                          Tout* d_dst,
                                          float* d_l1_mass,
                                          worker_pool* pool) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::gather_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "src", src, d_idx, count, d_dst, "d_dst");
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, d_idx, count, src.channels); e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = src.channel_len;
  std::vector<float> row_l1(d_l1_mass != nullptr ? static_cast<std::size_t>(count) : 0u);
  parallel_for(pool, count, detail::rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = d_idx[r];
      float l1 = 0.0f;
      if (src.layout == channel_layout::contiguous) {
        l1 = detail::cpu::convert_span<Tin, Tout>(src.data + c * src.ld, d_dst + r * L, L,
                                                  d_l1_mass != nullptr);
      } else {
        for (std::int64_t i = 0; i < L; ++i) {
          const float x = to_float(src(c, i));
          l1 += x < 0.0f ? -x : x;
          d_dst[r * L + i] = from_float<Tout>(x);
        }
      }
      if (d_l1_mass != nullptr) {
        row_l1[static_cast<std::size_t>(r)] = l1;
      }
    }
  });
  if (d_l1_mass != nullptr) {
    float sum = 0.0f;
    for (const float x : row_l1) {
      sum += x;
    }
    *d_l1_mass += sum;
  }
  return cudaSuccess;
}

/// Unpacks compact rows `d_src` (count x channel_len, row r = channel d_idx[r]) into the
/// channels `d_idx` of `dst`, converting Tin -> Tout (RNE when narrowing). Used to apply an
/// uploaded block of new weights to the unselected channels, and to put state rows back.
template <class Tin, class Tout>
[[nodiscard]] cudaError_t scatter_channels(const Tin* d_src,
                                           const std::int32_t* d_idx,
                                           std::int64_t count,
                                           channel_matrix<Tout> dst,
                                           worker_pool* pool) {
  static_assert(is_working_type_v<Tin> && is_working_type_v<Tout>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::scatter_channels";
  if (const cudaError_t e = detail::check_channel_copy(fn, "dst", dst, d_idx, count, d_src, "d_src");
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, d_idx, count, dst.channels); e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = dst.channel_len;
  parallel_for(pool, count, detail::rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = d_idx[r];
      if (dst.layout == channel_layout::contiguous) {
        (void)detail::cpu::convert_span<Tin, Tout>(d_src + r * L, dst.data + c * dst.ld, L, false);
      } else {
        for (std::int64_t i = 0; i < L; ++i) {
          dst(c, i) = from_float<Tout>(to_float(d_src[r * L + i]));
        }
      }
    }
  });
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
