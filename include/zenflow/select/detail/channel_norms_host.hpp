/// @file
/// The host backend of the channel-norm reducers (`zenflow::host::channel_norms*`): the same
/// per-element arithmetic as the kernels (`math/norms.hpp`), vectorised with run-time SIMD
/// dispatch (`norm_simd.hpp`) and split over a `worker_pool`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/select/detail/norm_order.hpp>
#include <zenflow/select/detail/norm_simd.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

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
    // Rows are contiguous: walk them with one accumulator per column of a block of columns (unit
    // stride, so the inner loop vectorises), in norm_order.hpp's order, the kernels': per chunk of
    // rows, each of the 8 row lanes adds its rows in order; the chunk's sum is the lanes in
    // order, the score the chunks' sums in order. The block width (wide blocks: long unit-stride
    // runs per row; at least one block per thread) changes no bits.
    constexpr std::int64_t max_cols = 2048;
    const std::int64_t threads = pool != nullptr ? static_cast<std::int64_t>(pool->size()) : 1;
    const std::int64_t cols =
        std::clamp<std::int64_t>(((channels + threads - 1) / threads + 15) / 16 * 16, 256, max_cols);
    const std::int64_t blocks = (channels + cols - 1) / cols;
    const std::int64_t rows_per_chunk = strided_rows_per_chunk<T>(channels, len);
    bad.assign(static_cast<std::size_t>(blocks), 0);
    parallel_for(pool, blocks, 1, [&](std::int64_t chunk, std::int64_t lo, std::int64_t) {
      const std::int64_t c0 = lo * cols;
      const std::int64_t w = std::min(cols, channels - c0);
      std::vector<float> lanes(static_cast<std::size_t>(strided_row_lanes * w));
      float acc[max_cols] = {};
      for (std::int64_t r0 = 0; r0 < len; r0 += rows_per_chunk) {
        const std::int64_t r1 = std::min(len, r0 + rows_per_chunk);
        std::fill(lanes.begin(), lanes.end(), 0.0f);
        for (std::int64_t y = 0; y < strided_row_lanes && r0 + y < r1; ++y) {
          const std::int64_t rows = (r1 - r0 - y + strided_row_lanes - 1) / strided_row_lanes;
          norm_strided_accumulate<Norm>(path, it.grad + (r0 + y) * it.ld + c0, it.ld * strided_row_lanes, rows, w,
                                        lanes.data() + y * w);
        }
        for (std::int64_t j = 0; j < w; ++j) {
          float sum = 0.0f;
          for (std::int64_t y = 0; y < strided_row_lanes; ++y) {
            sum = sum + lanes[static_cast<std::size_t>(y * w + j)];
          }
          acc[j] = acc[j] + sum;
        }
      }
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

ZF_NAMESPACE_END
