/// @file
/// Descriptors shared by the selection launchers (`zenflow::device`) and their host twins
/// (`zenflow::host`): channel-norm items and extras, top-k items and order.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/norms.hpp>

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

/// Order of the selected indices in the output.
enum class topk_order : std::uint8_t {
  /// No order is promised (today both backends write ascending indices: it costs nothing).
  unsorted,
  /// Indices ascending (what the engine wants: a sorted channel set).
  ascending_index,
};

/// One segment of a segmented (batched) top-k: the `k` largest of `n` scores.
struct topk_item {
  const float* scores = nullptr;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int32_t* indices = nullptr; ///< `k` indices out (into `scores`)
  float* values = nullptr;         ///< `k` values out, or nullptr
  /// Nullable (`topk_segmented` only): `n` fp64 values, read where the score is +Inf (an fp32
  /// sum that overflowed), each such score's value recomputed in fp64. +Inf scores still rank
  /// above every other score, and among themselves by this value (larger first, ties to the
  /// lower index, NaN lowest) instead of by index alone (`detail/radix_math.hpp`).
  const double* wide = nullptr;
};

ZF_NAMESPACE_END
