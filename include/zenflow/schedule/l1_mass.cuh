/// @file
/// CUDA launchers of Zen-auto's L1 masses (namespace `zenflow::device`; the host twins and the
/// order are described in `<zenflow/schedule/l1_mass.hpp>`, the kernels are in
/// `detail/l1_mass_kernels.cuh`).
///
/// Arguments are validated before anything is launched (device-memory tables are not read by the
/// host: their counts and pointers are checked, the items are not). Stream-ordered on `stream`:
/// no allocation, no synchronisation, safe under CUDA graph capture. Each row is summed apart and
/// one thread adds the rows in order: the host twins' bits, run to run, no atomics.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/schedule/detail/checks.hpp>
#include <zenflow/schedule/detail/l1_mass_kernels.cuh>
#include <zenflow/schedule/l1_mass.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// `item.row_l1[r]` = |row idx[r]|_1 for every row, then `*item.l1` += their sum in row order:
/// two launches (the rows, then one thread). Nothing when `item.l1` is null or `item.count` is 0;
/// nothing is written when `*item.skip` is non-zero.
///
/// @param item    the call, its pointers device memory (the descriptor itself is passed by value)
/// @param stream  stream everything is ordered on
/// The indices must be in [0, channels) (unchecked: device memory). Aliasing: `row_l1` and `l1`
/// must not overlap each other or the gradient.
[[nodiscard]] inline cudaError_t l1_mass(const l1_mass_item& item, cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::l1_mass";
  if (const cudaError_t e = detail::check_l1_mass_item(fn, nullptr, 0, item); e != cudaSuccess) {
    return e;
  }
  return detail::schedule_kernels::launch_l1_mass(item, stream);
}

/// `l1_mass` of a table of calls in two launches (every row of every call, then one thread per
/// call adding its rows in order).
///
/// @param d_items   `count` calls: a device array (unchecked: device memory); an item with a null
///                  `l1` does nothing; no two items may add into one mass
/// @param count     in [0, 2^31)
/// @param max_rows  >= every item's `count` (sizes the grid)
/// @param stream    stream everything is ordered on
[[nodiscard]] inline cudaError_t l1_mass_batched(const l1_mass_item* d_items,
                                                 std::int64_t count,
                                                 std::int64_t max_rows,
                                                 cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::l1_mass_batched";
  ZF_EXPECT_ARG(count >= 0 && count < (std::int64_t{1} << 31), fn, "count", "must be in [0, 2^31)");
  ZF_EXPECT_ARG(d_items != nullptr || count == 0, fn, "d_items", "must not be null");
  ZF_EXPECT_ARG(max_rows >= 0 && max_rows < (std::int64_t{1} << 31), fn, "max_rows", "must be in [0, 2^31)");
  return detail::schedule_kernels::launch_l1_mass_batched(d_items, count, max_rows, stream);
}

/// The second half of `l1_mass` alone, for row masses computed elsewhere: `*items[i].l1` +=
/// items[i].row_l1[0..count) in row order. One launch, one thread per item.
///
/// @param d_items  `count` calls: a device array (unchecked); a null `l1` does nothing
/// @param count    in [0, 2^31)
/// @param stream   stream everything is ordered on
[[nodiscard]] inline cudaError_t
l1_mass_add_rows_batched(const l1_mass_item* d_items, std::int64_t count, cudaStream_t stream = nullptr) {
  constexpr const char* fn = "zenflow::device::l1_mass_add_rows_batched";
  ZF_EXPECT_ARG(count >= 0 && count < (std::int64_t{1} << 31), fn, "count", "must be in [0, 2^31)");
  ZF_EXPECT_ARG(d_items != nullptr || count == 0, fn, "d_items", "must not be null");
  return detail::schedule_kernels::launch_l1_add_rows_batched(d_items, count, stream);
}

} // namespace device

ZF_NAMESPACE_END
