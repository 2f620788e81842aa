/// @file
/// The device plan's batched update state (device_plan.hpp: build_batch, update): per working
/// type, the table of the fused selective AdamW over every matrix whose rows live on the device,
/// and Zen-auto's mass calls of those matrices. The training thread alone reads and writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
struct batch_tables {
  /// The table for the matrices of working type T (P4): one descriptor per matrix whose rows
  /// live on the device, rebuilt on the host when a device set changes and copied up on the
  /// step's stream (`copied` guards the host copy).
  template <class T>
  struct table {
    typename Backend::template device_buffer<adamw_selective_item<T>> d;
    typename Backend::template host_buffer<adamw_selective_item<T>> h;
    int count = 0;
    std::int64_t blocks = 0;    // of the launch (adamw_selective_batch_blocks)
    std::int64_t max_rows = 0;  // of one matrix (the masses' grid)
    std::size_t bytes = 0;      // moved (the emulated device's timing model)
    std::size_t mass_first = 0; // its first entry in the mass tables
  };
  template <class T>
  table<T>& of() {
    if constexpr (std::is_same_v<T, float>) {
      return f32;
    } else if constexpr (std::is_same_v<T, half>) {
      return f16;
    } else {
      return bf16;
    }
  }

  table<float> f32;
  table<half> f16;
  table<bfloat16> bf16;
  // Zen-auto's mass calls per record parity (they point into it), their host copies, and the
  // per-row masses of every matrix side by side.
  typename Backend::template device_buffer<l1_mass_item> mass[2];
  typename Backend::template host_buffer<l1_mass_item> h_mass[2];
  typename Backend::template device_buffer<float> row_l1;
  bool dirty = true;     // a device set changed: rebuild before the next update
  bool recorded = false; // `copied` was recorded
  typename Backend::copy_backend_type::event_type copied{};
};

} // namespace detail
ZF_NAMESPACE_END
