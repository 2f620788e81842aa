/// @file
/// Zen-auto's L1 masses (docs/design.md, "Zen-auto"): per matrix and per step, `crit` = |g|_1 of
/// the device (selected) channels and `rest` = |g|_1 of the host channels, each added into a
/// float in one fixed order, so that every backend and every thread count gives the same bits:
/// each row summed apart (`l1_mass_item::lanes` picks the row's order), then the rows in order
/// from the first, then that sum added to the mass. The masses are of the raw gradient; the voter
/// and the trigger take them times coef_t.
///
/// These are the masses `host::adamw_selective(..., l1_mass)` and
/// `host::gather_channels(..., l1_mass)` compute fused with their pass over the rows (same bits);
/// the device launchers of those two sum theirs with float atomics (no fixed order), so on the
/// device a loop that wants the host's bits passes them no mass and calls `device::l1_mass`
/// beside them.
///
/// This header holds the host twins (namespace `zenflow::host`; `pool`: nullptr runs on the calling
/// thread); the CUDA launchers are in `<zenflow/schedule/l1_mass.cuh>`.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/schedule/detail/checks.hpp>
#include <zenflow/schedule/detail/l1_mass_body.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Host twin of `zenflow::device::l1_mass`: `item.row_l1[r]` = |row idx[r]|_1 for every row,
/// then `*item.l1` += their sum in row order. Nothing when `item.l1` is null, `item.count` is 0 or
/// `*item.skip` is non-zero.
///
/// @param item  the call (host memory; `make_l1_mass_item` builds one from a channel_matrix)
/// @param pool  threads to use (rows split over them); nullptr: the calling thread
/// Aliasing: `row_l1` and `l1` must not overlap each other or the gradient.
[[nodiscard]] inline cudaError_t l1_mass(const l1_mass_item& item, worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::l1_mass";
  if (const cudaError_t e = detail::check_l1_mass_item(fn, nullptr, 0, item); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_l1_mass_indices(fn, nullptr, 0, item); e != cudaSuccess) {
    return e;
  }
  detail::host_l1_mass(item, pool);
  return cudaSuccess;
}

/// Host twin of `zenflow::device::l1_mass_batched`: `l1_mass` of every item, in item order.
///
/// @param items     `count` calls (host memory); an item with a null `l1` does nothing
/// @param count     >= 0
/// @param max_rows  >= every item's `count` (the device launcher sizes its grid by it)
/// @param pool      threads to use; nullptr: the calling thread
[[nodiscard]] inline cudaError_t l1_mass_batched(const l1_mass_item* items,
                                                 std::int64_t count,
                                                 std::int64_t max_rows,
                                                 worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::l1_mass_batched";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  ZF_EXPECT_ARG(max_rows >= 0, fn, "max_rows", "must be >= 0");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = detail::check_l1_mass_item(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
    if (const cudaError_t e = detail::check_l1_mass_indices(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
    ZF_EXPECT_ARG(items[i].l1 == nullptr || items[i].count <= max_rows, fn, "max_rows",
                  "is smaller than an item's count");
  }
  for (std::int64_t i = 0; i < count; ++i) {
    detail::host_l1_mass(items[i], pool);
  }
  return cudaSuccess;
}

/// Host twin of `zenflow::device::l1_mass_add_rows_batched`: the second half of `l1_mass` alone,
/// for row masses computed elsewhere (data parallel: summed across ranks): `*items[i].l1` +=
/// items[i].row_l1[0..count) in row order, in item order. `grad`, `idx` and the shape are not read.
///
/// @param items  `count` calls (host memory); an item with a null `l1` does nothing
/// @param count  >= 0
/// @param pool   unused (a sum in order is one thread's work); kept for the launcher shape
[[nodiscard]] inline cudaError_t
l1_mass_add_rows_batched(const l1_mass_item* items, std::int64_t count, worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::l1_mass_add_rows_batched";
  (void)pool;
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  for (std::int64_t i = 0; i < count; ++i) {
    ZF_EXPECT_ARG(items[i].l1 == nullptr || items[i].count >= 0, fn, detail::item_arg("items", i, "count"),
                  "must be >= 0");
    ZF_EXPECT_ARG(items[i].l1 == nullptr || items[i].row_l1 != nullptr || items[i].count == 0, fn,
                  detail::item_arg("items", i, "row_l1"), "must not be null");
  }
  for (std::int64_t i = 0; i < count; ++i) {
    detail::host_l1_add_rows(items[i]);
  }
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
