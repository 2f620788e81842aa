/// @file
/// Argument checks shared by the selection launchers and their host twins, so that both reject
/// the same arguments with the same message (only the function name differs).
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// The name of field `field` of item `i` of a batch ("items[3].grad"), or `field` alone for the
/// single-item entry points (`batch_name == nullptr`).
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

inline constexpr std::int64_t topk_max_n = std::int64_t{1} << 31; // indices are int32

[[nodiscard]] inline cudaError_t
check_topk_item(const char* function, const char* batch_name, std::int64_t i, const topk_item& it) {
  ZF_EXPECT_ARG(it.n >= 0, function, item_arg(batch_name, i, "n"), "must be >= 0");
  ZF_EXPECT_ARG(it.n < topk_max_n, function, item_arg(batch_name, i, "n"), "must be < 2^31 (int32 indices)");
  ZF_EXPECT_ARG(it.k >= 0, function, item_arg(batch_name, i, "k"), "must be >= 0");
  ZF_EXPECT_ARG(it.k <= it.n, function, item_arg(batch_name, i, "k"), "must be <= n");
  ZF_EXPECT_ARG(it.scores != nullptr || it.n == 0, function, item_arg(batch_name, i, "scores"),
                "must not be null");
  ZF_EXPECT_ARG(it.indices != nullptr || it.k == 0, function, item_arg(batch_name, i, "indices"),
                "must not be null");
  return cudaSuccess;
}

[[nodiscard]] inline cudaError_t check_topk_order(const char* function, topk_order order) {
  ZF_EXPECT_ARG(order == topk_order::unsorted || order == topk_order::ascending_index, function, "order",
                "must be unsorted or ascending_index");
  return cudaSuccess;
}

} // namespace detail

ZF_NAMESPACE_END
