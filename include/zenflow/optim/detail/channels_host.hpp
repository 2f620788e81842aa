/// @file
/// The host implementations of the channel copies (`zenflow::host::gather_channels`,
/// `scatter_channels`, `accumulate_channels` in `<zenflow/optim/channels.hpp>`), after validation.
#pragma once

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

namespace host {
/// How accumulate_channels combines a slot with the accumulator.
enum class accumulate_mode : std::uint8_t {
  add,    ///< acc += coef * slot
  assign, ///< acc = coef * slot, without reading acc: the first step of a window (6 instead of
          ///< 10 bytes per element for a bf16 slot); the same bits as `add` into a zeroed acc
};

} // namespace host

namespace detail {

template <class Tin, class Tout>
[[nodiscard]] cudaError_t host_gather_channels(channel_matrix<const Tin> src,
                                               const std::int32_t* idx,
                                               std::int64_t count,
                                               Tout* dst,
                                               float* l1_mass,
                                               worker_pool* pool) {
  const std::int64_t L = src.channel_len;
  std::vector<float> row_l1(l1_mass != nullptr ? static_cast<std::size_t>(count) : 0u);
  parallel_for(pool, count, rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = idx[r];
      float l1 = 0.0f;
      if (src.layout == channel_layout::contiguous) {
        l1 = cpu::convert_span<Tin, Tout>(src.data + c * src.ld, dst + r * L, L, l1_mass != nullptr);
      } else {
        for (std::int64_t i = 0; i < L; ++i) {
          const float x = to_float(src(c, i));
          l1 += x < 0.0f ? -x : x;
          dst[r * L + i] = from_float<Tout>(x);
        }
      }
      if (l1_mass != nullptr) {
        row_l1[static_cast<std::size_t>(r)] = l1;
      }
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

template <class Tin, class Tout>
[[nodiscard]] cudaError_t host_scatter_channels(const Tin* src,
                                                const std::int32_t* idx,
                                                std::int64_t count,
                                                channel_matrix<Tout> dst,
                                                worker_pool* pool) {
  const std::int64_t L = dst.channel_len;
  parallel_for(pool, count, rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = idx[r];
      if (dst.layout == channel_layout::contiguous) {
        (void)cpu::convert_span<Tin, Tout>(src + r * L, dst.data + c * dst.ld, L, false);
      } else {
        for (std::int64_t i = 0; i < L; ++i) {
          dst(c, i) = from_float<Tout>(to_float(src[r * L + i]));
        }
      }
    }
  });
  return cudaSuccess;
}

template <class S>
[[nodiscard]] cudaError_t host_accumulate_channels(float* acc,
                                                   std::int64_t channel_len,
                                                   const S* slot,
                                                   const std::int32_t* idx,
                                                   std::int64_t count,
                                                   float coef,
                                                   worker_pool* pool,
                                                   host::accumulate_mode mode) {
  const std::int64_t L = channel_len;
  parallel_for(pool, count, rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      float* row = acc + static_cast<std::int64_t>(idx[r]) * L;
      if (mode == host::accumulate_mode::assign) {
        cpu::assign_span<S>(row, slot + r * L, coef, L);
      } else {
        cpu::accumulate_span<S>(row, slot + r * L, coef, L);
      }
    }
  });
  return cudaSuccess;
}

} // namespace detail

ZF_NAMESPACE_END
