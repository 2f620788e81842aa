/// @file
/// Argument checks shared by the schedule's launchers and their host twins, so that both reject
/// the same arguments with the same message (only the function name differs). The host twins
/// check every item (host memory); the launchers, whose items are in device memory, check what
/// the host can see (counts, pointers to the tables, the scalars).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/schedule/detail/step_scalars_body.hpp>
#include <zenflow/schedule/types.hpp>
#include <zenflow/select/detail/checks.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A gradient's shape as the items describe it: counts >= 0, a known layout and dtype, `ld` wide
/// enough for the layout.
[[nodiscard]] inline cudaError_t check_item_shape(const char* function,
                                                  const char* batch_name,
                                                  std::int64_t i,
                                                  std::int64_t channels,
                                                  std::int64_t channel_len,
                                                  std::int64_t ld,
                                                  channel_layout layout,
                                                  dtype type,
                                                  const char* prefix = "") {
  const auto name = [&](const char* field) {
    return item_arg(batch_name, i, (std::string(prefix) + field).c_str());
  };
  ZF_EXPECT_ARG(channels >= 0 && channels < (std::int64_t{1} << 31), function, name("channels"),
                "must be in [0, 2^31)");
  ZF_EXPECT_ARG(channel_len >= 0, function, name("channel_len"), "must be >= 0");
  ZF_EXPECT_ARG(layout == channel_layout::contiguous || layout == channel_layout::strided, function,
                name("layout"), "must be contiguous or strided");
  ZF_EXPECT_ARG(type == dtype::f32 || type == dtype::f16 || type == dtype::bf16, function, name("type"),
                "must be f32, f16 or bf16");
  if (layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(ld >= channel_len, function, name("ld"), "must be >= channel_len for contiguous channels");
  } else {
    ZF_EXPECT_ARG(ld >= channels, function, name("ld"), "must be >= channels for strided channels");
  }
  return cudaSuccess;
}

[[nodiscard]] inline cudaError_t check_sq_total_item(const char* function,
                                                     const char* batch_name,
                                                     std::int64_t i,
                                                     const sq_total_item& it,
                                                     const char* prefix = "") {
  if (const cudaError_t e = check_item_shape(function, batch_name, i, it.channels, it.channel_len, it.ld,
                                             it.layout, it.type, prefix);
      e != cudaSuccess) {
    return e;
  }
  const auto name = [&](const char* field) {
    return item_arg(batch_name, i, (std::string(prefix) + field).c_str());
  };
  ZF_EXPECT_ARG(it.scores != nullptr || it.channels == 0, function, name("scores"), "must not be null");
  ZF_EXPECT_ARG(it.grad != nullptr || it.rescan != nullptr || it.channels == 0 || it.channel_len == 0,
                function, name("grad"), "must not be null (without `rescan` the gradient is read)");
  return cudaSuccess;
}

[[nodiscard]] inline cudaError_t
check_sq_rescan_item(const char* function, const char* batch_name, std::int64_t i, const sq_rescan_item& it) {
  if (const cudaError_t e = check_sq_total_item(function, batch_name, i, it.src, "src."); e != cudaSuccess) {
    return e;
  }
  ZF_EXPECT_ARG(it.src.grad != nullptr || it.count == 0 || it.src.channel_len == 0, function,
                item_arg(batch_name, i, "src.grad"), "must not be null (a rescan reads the gradient)");
  ZF_EXPECT_ARG(it.first >= 0 && it.count >= 0 && it.first + it.count <= it.src.channels, function,
                item_arg(batch_name, i, "count"),
                "must keep [first, first + count) inside [0, src.channels)");
  ZF_EXPECT_ARG(it.out != nullptr || it.count == 0, function, item_arg(batch_name, i, "out"),
                "must not be null");
  return cudaSuccess;
}

[[nodiscard]] inline cudaError_t
check_l1_mass_item(const char* function, const char* batch_name, std::int64_t i, const l1_mass_item& it) {
  if (it.l1 == nullptr) {
    return cudaSuccess; // an item without a mass does nothing (a batch's unused entry)
  }
  if (const cudaError_t e =
          check_item_shape(function, batch_name, i, it.channels, it.channel_len, it.ld, it.layout, it.type);
      e != cudaSuccess) {
    return e;
  }
  ZF_EXPECT_ARG(it.count >= 0 && it.count <= it.channels, function, item_arg(batch_name, i, "count"),
                "must be in [0, channels]");
  ZF_EXPECT_ARG(it.grad != nullptr || it.count == 0 || it.channel_len == 0, function,
                item_arg(batch_name, i, "grad"), "must not be null");
  ZF_EXPECT_ARG(it.idx != nullptr || it.count == 0, function, item_arg(batch_name, i, "idx"),
                "must not be null");
  ZF_EXPECT_ARG(it.row_l1 != nullptr || it.count == 0, function, item_arg(batch_name, i, "row_l1"),
                "must not be null");
  ZF_EXPECT_ARG(!it.lanes || it.layout == channel_layout::contiguous, function,
                item_arg(batch_name, i, "lanes"),
                "needs contiguous channels (the 16-lane order reads a row as one run)");
  return cudaSuccess;
}

/// An item's indices, on the host: inside [0, channels).
[[nodiscard]] inline cudaError_t
check_l1_mass_indices(const char* function, const char* batch_name, std::int64_t i, const l1_mass_item& it) {
  if (it.l1 == nullptr) {
    return cudaSuccess;
  }
  for (std::int64_t r = 0; r < it.count; ++r) {
    ZF_EXPECT_ARG(it.idx[r] >= 0 && it.idx[r] < it.channels, function, item_arg(batch_name, i, "idx"),
                  "holds an index outside [0, channels)");
  }
  return cudaSuccess;
}

/// compute_step_header's arguments (the same on both sides: the tables are not read here).
[[nodiscard]] inline cudaError_t check_step_header_args(const char* function, const step_header_args& a) {
  ZF_EXPECT_ARG(a.n >= 0, function, "tensors", "must be >= 0");
  ZF_EXPECT_ARG(a.totals != nullptr || a.n == 0, function, "totals", "must not be null");
  ZF_EXPECT_ARG(a.flag_count >= 0, function, "flag_count", "must be >= 0");
  ZF_EXPECT_ARG(a.flags != nullptr || a.flag_count == 0, function, "flags", "must not be null");
  ZF_EXPECT_ARG(std::isfinite(a.loss_scale) && a.loss_scale > 0.0f, function, "loss_scale",
                "must be finite and > 0");
  ZF_EXPECT_ARG(std::isfinite(a.max_norm) && a.max_norm >= 0.0f, function, "max_norm",
                "must be finite and >= 0 (0: no clipping)");
  ZF_EXPECT_ARG(a.header != nullptr, function, "header", "must not be null");
  ZF_EXPECT_ARG(a.zero_count >= 0, function, "zero_count", "must be >= 0");
  ZF_EXPECT_ARG(a.zero != nullptr || a.zero_count == 0, function, "zero", "must not be null");
  return cudaSuccess;
}

} // namespace detail
ZF_NAMESPACE_END
