/// @file
/// Channel-norm reducers: one fp32 importance score per gradient channel (squared L2 or L1),
/// optionally with the per-matrix total (for the global gradient norm) and a NaN/Inf flag fused
/// into the same read of the gradient.
///
/// This header holds the argument types, the validation shared with the CUDA launchers
/// (`<zenflow/select/channel_norms.cuh>`, namespace `zenflow::device`) and the host backend
/// (namespace `zenflow::host`), which runs the same per-element arithmetic
/// (`math/norms.hpp`) on host memory, vectorised with run-time SIMD dispatch
/// (`detail/norm_simd.hpp`) and split over a `worker_pool`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/select/detail/norm_simd.hpp>

ZF_NAMESPACE_BEGIN

/// One matrix of a batched channel-norm call: `channels x channel_len` gradient elements in
/// `layout` with leading dimension `ld` (see `channel_layout`), and `channels` output scores.
template <class T>
struct channel_norm_item {
  const T* grad = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  float* scores = nullptr;
};

/// Optional outputs computed in the same read of the gradient; a null pointer skips one.
/// For a batched call each points to one entry per item.
struct channel_norm_extras {
  /// Sum of the item's channel scores (the squared global norm of the item for `sq_l2`).
  float* total = nullptr;
  /// 1 when any element of the item is NaN or infinite, else 0.
  std::uint32_t* nonfinite = nullptr;
};

namespace detail {

/// Temporary storage is never reported as 0 bytes, so that a caller who allocates what the size
/// query said never passes a null `temp` again (which would only repeat the query).
inline constexpr std::size_t min_temp_bytes = 256;

/// `v` rounded up to a multiple of `a` (scratch carving).
[[nodiscard]] constexpr std::size_t align_up(std::size_t v, std::size_t a = 256) {
  return (v + a - 1) / a * a;
}

[[nodiscard]] inline std::string item_arg(const char* batch_name, std::int64_t i, const char* field) {
  if (batch_name == nullptr) {
    return field;
  }
  return std::string(batch_name) + "[" + std::to_string(i) + "]." + field;
}

/// Validates one matrix; `batch_name == nullptr` names the arguments as the single-matrix entry
/// points do (`grad`, `channels`, ...), else as `items[i].grad`, ...
template <class T>
[[nodiscard]] cudaError_t check_norm_item(const char* function,
                                          const char* batch_name,
                                          std::int64_t i,
                                          const channel_norm_item<T>& it) {
  ZF_EXPECT_ARG(it.channels >= 0, function, item_arg(batch_name, i, "channels"), "must be >= 0");
  ZF_EXPECT_ARG(it.channel_len >= 0, function, item_arg(batch_name, i, "channel_len"), "must be >= 0");
  ZF_EXPECT_ARG(it.layout == channel_layout::contiguous || it.layout == channel_layout::strided, function,
                item_arg(batch_name, i, "layout"), "must be contiguous or strided");
  if (it.layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(it.ld >= it.channel_len && it.ld >= 0, function, item_arg(batch_name, i, "ld"),
                  "must be >= channel_len for contiguous channels");
  } else {
    ZF_EXPECT_ARG(it.ld >= it.channels && it.ld >= 0, function, item_arg(batch_name, i, "ld"),
                  "must be >= channels for strided channels");
  }
  ZF_EXPECT_ARG(it.grad != nullptr || it.channels == 0 || it.channel_len == 0, function,
                item_arg(batch_name, i, "grad"), "must not be null");
  ZF_EXPECT_ARG(it.scores != nullptr || it.channels == 0, function, item_arg(batch_name, i, "scores"),
                "must not be null");
  // 32-bit in-kernel channel and row counters (2^31 channels is far beyond any model).
  ZF_EXPECT_ARG(it.channels < (std::int64_t{1} << 31), function, item_arg(batch_name, i, "channels"),
                "must be < 2^31");
  return cudaSuccess;
}

template <class T>
[[nodiscard]] cudaError_t check_norm_batch(const char* function,
                                           const char* batch_name,
                                           const channel_norm_item<T>* items,
                                           std::int64_t count) {
  ZF_EXPECT_ARG(count >= 0, function, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, function, batch_name == nullptr ? "items" : batch_name,
                "must not be null");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = check_norm_item(function, batch_name, i, items[i]); e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

/// True when any element of the `rows x w` block at `p` (leading dimension `ld`) is NaN or
/// infinite: the exact test on raw bits, run only on channels whose score is not finite.
template <class T>
bool host_block_nonfinite(const T* p, std::int64_t ld, std::int64_t rows, std::int64_t w) {
  for (std::int64_t r = 0; r < rows; ++r) {
    bool bad = false;
    for (std::int64_t j = 0; j < w; ++j) {
      bad |= is_nonfinite(p[r * ld + j]);
    }
    if (bad) {
      return true;
    }
  }
  return false;
}

/// One matrix on the host. `total`/`nonfinite` may be null.
///
/// The loops run on the best SIMD path of the CPU (`detail/norm_simd.hpp`; every path writes the
/// same bits). The NaN/Inf flag costs no extra pass: every term is >= 0 or NaN, so a NaN or
/// infinite element always makes its channel's score NaN or infinite, and only channels with a
/// non-finite score (a bad element, or a sum that overflowed) are rescanned with the bit test.
template <channel_norm Norm, class T>
void host_norm_item(const channel_norm_item<T>& it,
                    float* total,
                    std::uint32_t* nonfinite,
                    worker_pool* pool) {
  const bool check = nonfinite != nullptr;
  const std::int64_t channels = it.channels;
  const std::int64_t len = it.channel_len;
  const host::simd_path path = host::active_simd_path();
  constexpr std::int64_t work_per_chunk = 1 << 16; // elements: enough to amortise a dispatch
  std::vector<unsigned char> bad;
  if (it.layout == channel_layout::contiguous) {
    const std::int64_t grain = std::max<std::int64_t>(1, work_per_chunk / std::max<std::int64_t>(len, 1));
    bad.assign(static_cast<std::size_t>(worker_pool::chunk_count(channels, grain)), 0);
    parallel_for(pool, channels, grain, [&](std::int64_t chunk, std::int64_t lo, std::int64_t hi) {
      bool b = false;
      for (std::int64_t c = lo; c < hi; ++c) {
        const T* p = it.grad + c * it.ld;
        const float score = norm_contiguous_score<Norm>(path, p, len);
        it.scores[c] = score;
        if (check && !b && is_nonfinite(score)) {
          b = host_block_nonfinite(p, 0, 1, len);
        }
      }
      bad[static_cast<std::size_t>(chunk)] = b ? 1 : 0;
    });
  } else {
    // Rows are contiguous: walk them in order and keep one accumulator per column of a block
    // of columns (unit stride, so the inner loop vectorises). Each column adds its rows in order
    // whatever the block width, so the width (wide blocks: long unit-stride runs per row; at
    // least one block per thread) changes no bits.
    constexpr std::int64_t max_cols = 2048;
    const std::int64_t threads = pool != nullptr ? static_cast<std::int64_t>(pool->size()) : 1;
    const std::int64_t cols =
        std::clamp<std::int64_t>(((channels + threads - 1) / threads + 15) / 16 * 16, 256, max_cols);
    const std::int64_t blocks = (channels + cols - 1) / cols;
    bad.assign(static_cast<std::size_t>(blocks), 0);
    parallel_for(pool, blocks, 1, [&](std::int64_t chunk, std::int64_t lo, std::int64_t) {
      const std::int64_t c0 = lo * cols;
      const std::int64_t w = std::min(cols, channels - c0);
      float acc[max_cols] = {};
      norm_strided_accumulate<Norm>(path, it.grad + c0, it.ld, len, w, acc);
      bool b = false;
      if (check && std::any_of(acc, acc + w, [](float v) { return is_nonfinite(v); })) {
        b = host_block_nonfinite(it.grad + c0, it.ld, len, w);
      }
      std::copy(acc, acc + w, it.scores + c0);
      bad[static_cast<std::size_t>(chunk)] = b ? 1 : 0;
    });
  }
  if (total != nullptr) {
    double s = 0; // float64 in channel order: the most accurate total, and deterministic
    for (std::int64_t c = 0; c < channels; ++c) {
      s += static_cast<double>(it.scores[c]);
    }
    *total = static_cast<float>(s);
  }
  if (nonfinite != nullptr) {
    *nonfinite = std::any_of(bad.begin(), bad.end(), [](unsigned char v) { return v != 0; }) ? 1u : 0u;
  }
}

} // namespace detail

namespace host {

/// Host twin of `zenflow::device::channel_norms_batched`: scores every channel of every item.
///
/// @param temp        scratch (unused by the host backend, but the two-phase shape is kept):
///                    nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `temp` in bytes
/// @param items       `count` matrices (host array of descriptors; the data is host memory)
/// @param count       number of items, >= 0
/// @param extras      optional per-item totals and NaN/Inf flags (`count` entries each)
/// @param pool        threads to use; nullptr runs on the calling thread
/// Deterministic: the result does not depend on the number of threads. Scores must not alias
/// gradients.
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms_batched(void* temp,
                                                std::size_t& temp_bytes,
                                                const channel_norm_item<T>* items,
                                                std::int64_t count,
                                                channel_norm_extras extras = {},
                                                worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::channel_norms_batched";
  if (const cudaError_t e = detail::check_norm_batch(fn, "items", items, count); e != cudaSuccess) {
    return e;
  }
  if (temp == nullptr) {
    temp_bytes = detail::min_temp_bytes;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= detail::min_temp_bytes, fn, "temp_bytes",
                "is smaller than the size query returned");
  for (std::int64_t i = 0; i < count; ++i) {
    detail::host_norm_item<Norm>(items[i], extras.total ? extras.total + i : nullptr,
                                 extras.nonfinite ? extras.nonfinite + i : nullptr, pool);
  }
  return cudaSuccess;
}

/// Host twin of `zenflow::device::channel_norms`: one score per channel of one matrix.
///
/// @param temp         scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes   size of `temp` in bytes
/// @param grad         `channels x channel_len` gradient (host memory) in `layout`, leading dimension `ld`
/// @param channels     number of channels (scores), >= 0
/// @param channel_len  elements per channel, >= 0
/// @param ld           >= channel_len (contiguous) or >= channels (strided)
/// @param layout       contiguous channels or strided (column) channels
/// @param scores       `channels` fp32 scores out
/// @param extras       optional total (1 float) and NaN/Inf flag (1 word)
/// @param pool         threads to use; nullptr runs on the calling thread
template <channel_norm Norm = channel_norm::sq_l2, class T>
[[nodiscard]] cudaError_t channel_norms(void* temp,
                                        std::size_t& temp_bytes,
                                        const T* grad,
                                        std::int64_t channels,
                                        std::int64_t channel_len,
                                        std::int64_t ld,
                                        channel_layout layout,
                                        float* scores,
                                        channel_norm_extras extras = {},
                                        worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::channel_norms";
  const channel_norm_item<T> it{grad, channels, channel_len, ld, layout, scores};
  if (const cudaError_t e = detail::check_norm_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  if (temp == nullptr) {
    temp_bytes = detail::min_temp_bytes;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= detail::min_temp_bytes, fn, "temp_bytes",
                "is smaller than the size query returned");
  detail::host_norm_item<Norm>(it, extras.total, extras.nonfinite, pool);
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
