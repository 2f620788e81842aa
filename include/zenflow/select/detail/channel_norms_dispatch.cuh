/// @file
/// Planning and dispatch of the channel-norm launchers (`<zenflow/select/channel_norms.cuh>`):
/// how each item is split into blocks (a function of its shape only), how much scratch it needs,
/// and the batched launches of the kernels in `channel_norms_kernels.cuh`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/select/detail/channel_norms_kernels.cuh>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// How a strided item is split: column blocks of 32 x vw columns, and the rows in the chunks of
/// norm_order.hpp (a function of the shape only, so the order, and the bits, are the host's).
template <class T>
struct strided_plan {
  std::int32_t vw; // columns per thread: 16-byte loads when every row is 16-byte aligned
  std::int32_t col_blocks;
  std::int32_t rows_per_chunk;
  std::int32_t chunks;
};

template <class T>
[[nodiscard]] strided_plan<T> plan_strided(const channel_norm_item<T>& it) {
  const bool aligned = reinterpret_cast<std::uintptr_t>(it.grad) % 16 == 0 &&
                       (it.ld * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  strided_plan<T> p{};
  p.vw = aligned ? vec_elems<T> : 1;
  p.col_blocks = static_cast<std::int32_t>((it.channels + 32 * p.vw - 1) / (32 * p.vw));
  const std::int64_t rpc = strided_rows_per_chunk<T>(it.channels, it.channel_len);
  if (rpc == 0) {
    return p;
  }
  p.rows_per_chunk = static_cast<std::int32_t>(std::min<std::int64_t>(rpc, INT32_MAX));
  p.chunks = static_cast<std::int32_t>((it.channel_len + rpc - 1) / rpc);
  return p;
}

/// Contiguous items: one warp per channel (norm_order.hpp's 64 lanes).
template <class T>
[[nodiscard]] constexpr std::int32_t contiguous_group(const channel_norm_item<T>&) {
  return 32;
}

template <class T>
[[nodiscard]] std::size_t norm_scratch_bytes(const channel_norm_item<T>& it) {
  if (it.layout != channel_layout::strided) {
    return 0;
  }
  const auto p = plan_strided(it);
  return align_up(static_cast<std::size_t>(p.chunks) * static_cast<std::size_t>(it.channels) * sizeof(float));
}

template <class T>
[[nodiscard]] std::size_t norm_temp_bytes(const channel_norm_item<T>* items, std::int64_t count) {
  std::size_t bytes = 256; // slack to align the caller's pointer
  for (std::int64_t i = 0; i < count; ++i) {
    bytes += norm_scratch_bytes(items[i]);
  }
  return std::max(bytes, min_temp_bytes);
}

template <channel_norm Norm, class T>
[[nodiscard]] cudaError_t dispatch_norms(void* d_temp,
                                         const channel_norm_item<T>* items,
                                         std::int64_t count,
                                         channel_norm_extras extras,
                                         cudaStream_t stream) {
  if (count == 0) {
    return cudaSuccess;
  }
  std::byte* base = align_pointer(d_temp);
  if (extras.nonfinite != nullptr) {
    if (const cudaError_t e = memset_async(extras.nonfinite, 0, static_cast<std::size_t>(count) * 4, stream);
        e != cudaSuccess) {
      return e;
    }
  }
  // Main pass: contiguous and strided items, up to 32 per launch, in item order.
  norm_launch<T> contig{}, strided{};
  norm_finish_launch finish{};
  std::int64_t contig_blocks = 0, strided_blocks = 0, finish_blocks = 0;
  auto flush_contig = [&]() -> cudaError_t {
    if (contig.count > 0 && contig_blocks > 0) {
      ZF_LAUNCH(static_cast<unsigned>(contig_blocks), norm_block, 0, stream, contiguous_norms_kernel<Norm, T>)
      (contig);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
    }
    contig = {};
    contig_blocks = 0;
    return cudaSuccess;
  };
  auto flush_strided = [&]() -> cudaError_t {
    if (strided.count > 0 && strided_blocks > 0) {
      ZF_LAUNCH(static_cast<unsigned>(strided_blocks), norm_block, 0, stream, strided_norms_kernel<Norm, T>)
      (strided);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
    }
    if (finish.count > 0 && finish_blocks > 0) {
      ZF_LAUNCH(static_cast<unsigned>(finish_blocks), norm_block, 0, stream, strided_finish_kernel)(finish);
      if (const cudaError_t e = launch_status(); e != cudaSuccess) {
        return e;
      }
    }
    strided = {};
    finish = {};
    strided_blocks = 0;
    finish_blocks = 0;
    return cudaSuccess;
  };
  std::byte* scratch = base;
  for (std::int64_t i = 0; i < count; ++i) {
    const auto& it = items[i];
    std::uint32_t* flag = extras.nonfinite != nullptr ? extras.nonfinite + i : nullptr;
    if (it.channels == 0) {
      continue;
    }
    if (it.layout == channel_layout::contiguous) {
      const std::int32_t group = contiguous_group(it);
      const std::int64_t blocks = (it.channels + (norm_block / group) - 1) / (norm_block / group);
      auto& li = contig.item[contig.count++];
      li.grad = it.grad;
      li.out = it.scores;
      li.ld = it.ld;
      li.len = it.channel_len;
      li.block_begin = contig_blocks;
      li.flag = flag;
      li.channels = static_cast<std::int32_t>(it.channels);
      li.group = group;
      li.rows_per_chunk = 0;
      li.col_blocks = 0;
      contig_blocks += blocks;
      if (contig.count == norm_batch_max || contig_blocks > (std::int64_t{1} << 30)) {
        if (const cudaError_t e = flush_contig(); e != cudaSuccess) {
          return e;
        }
      }
    } else {
      const auto p = plan_strided(it);
      auto* partials = reinterpret_cast<float*>(scratch);
      scratch += norm_scratch_bytes(it);
      auto& fi = finish.item[finish.count++];
      fi.partials = partials;
      fi.scores = it.scores;
      fi.block_begin = finish_blocks;
      fi.channels = static_cast<std::int32_t>(it.channels);
      fi.chunks = p.chunks;
      finish_blocks += (it.channels + norm_block - 1) / norm_block;
      if (p.chunks > 0) {
        auto& li = strided.item[strided.count++];
        li.grad = it.grad;
        li.out = partials;
        li.ld = it.ld;
        li.len = it.channel_len;
        li.block_begin = strided_blocks;
        li.flag = flag;
        li.channels = static_cast<std::int32_t>(it.channels);
        li.group = p.vw;
        li.rows_per_chunk = p.rows_per_chunk;
        li.col_blocks = p.col_blocks;
        strided_blocks += static_cast<std::int64_t>(p.col_blocks) * p.chunks;
      }
      if (finish.count == norm_batch_max || strided_blocks > (std::int64_t{1} << 30)) {
        if (const cudaError_t e = flush_strided(); e != cudaSuccess) {
          return e;
        }
      }
    }
  }
  if (const cudaError_t e = flush_contig(); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = flush_strided(); e != cudaSuccess) {
    return e;
  }
  if (extras.total != nullptr) {
    norm_total_launch tl{};
    for (std::int64_t i = 0; i < count; ++i) {
      tl.scores[tl.count] = items[i].scores;
      tl.total[tl.count] = extras.total + i;
      tl.channels[tl.count] = static_cast<std::int32_t>(items[i].channels);
      if (++tl.count == norm_batch_max || i + 1 == count) {
        ZF_LAUNCH(static_cast<unsigned>(tl.count), norm_block, 0, stream, norm_total_kernel)(tl);
        if (const cudaError_t e = launch_status(); e != cudaSuccess) {
          return e;
        }
        tl = {};
      }
    }
  }
  return cudaSuccess;
}

} // namespace detail

ZF_NAMESPACE_END
