/// @file
/// A sharded matrix's Zen-auto masses (ZeRO-3, shard_masses.hpp) from every rank's row masses
/// (the schedule layer's l1_row values), written once as a host+device body that the backend's
/// generic for_each_item runs a matrix per item: in order on the host and emulated backends'
/// primitive set (plan/host_primitives.hpp), a thread per matrix on the CUDA backend's
/// (cuda_backend.cuh, plan/kernels.cuh's for_each_item_kernel). The plan knows nothing of it.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A sharded matrix's masses (ZeRO-3: shard_masses.hpp) from every rank's row masses,
/// gathered: rank r's part holds, at `count_at`, its device-set row count (int32 bits), and at
/// `rows_at` its `rows` row masses (l1_row's values), its device-set rows ascending, then its
/// host-set rows ascending. The ranks' shards are contiguous and in rank order, so the parts in
/// rank order list each set in the order one rank holding the whole matrix walks it.
struct shard_mass_part {
  std::int64_t count_at = 0;
  std::int64_t rows_at = 0;
  std::int64_t rows = 0;
};
struct shard_mass_item {
  const shard_mass_part* parts = nullptr; ///< `ranks` of them, in rank order
  int ranks = 0;
  std::int64_t per_slot = 1; ///< host-set rows per pack call (param_info::rows_per_slot)
  std::int64_t matrix = 0;   ///< its crit and rest words
};

/// One rank's record masses of `it` (whole matrix): the crit mass as the fused update's one call
/// adds it (the device-set rows in order, that sum into the zeroed word; nothing when `*skip`),
/// the rest mass as the packs add it (the host-set rows in calls of `per_slot`, each call's sum
/// into the zeroed word).
ZF_HOST_DEVICE inline void shard_masses_of(
    const shard_mass_item& it, const float* gathered, const std::uint32_t* skip, float* crit, float* rest) {
  float s = 0.0f;
  for (int r = 0; r < it.ranks; ++r) {
    const shard_mass_part part = it.parts[r];
    std::int32_t k = 0;
    std::memcpy(&k, gathered + part.count_at, 4);
    for (std::int64_t j = 0; j < k; ++j) {
      s = add_f(s, gathered[part.rows_at + j]);
    }
  }
  crit[it.matrix] = *skip != 0 ? 0.0f : add_f(0.0f, s);
  float mass = 0.0f;
  float call = 0.0f;
  std::int64_t in_call = 0;
  for (int r = 0; r < it.ranks; ++r) {
    const shard_mass_part part = it.parts[r];
    std::int32_t k = 0;
    std::memcpy(&k, gathered + part.count_at, 4);
    for (std::int64_t j = k; j < part.rows; ++j) {
      call = add_f(call, gathered[part.rows_at + j]);
      if (++in_call == it.per_slot) {
        mass = add_f(mass, call);
        call = 0.0f;
        in_call = 0;
      }
    }
  }
  rest[it.matrix] = in_call > 0 ? add_f(mass, call) : mass;
}

/// shard_masses_of over a table of items: for_each_item's body, item i a matrix.
struct shard_masses_body {
  const shard_mass_item* items = nullptr;
  const float* gathered = nullptr;
  const std::uint32_t* skip = nullptr;
  float* crit = nullptr;
  float* rest = nullptr;

  ZF_HOST_DEVICE void operator()(int i) const { shard_masses_of(items[i], gathered, skip, crit, rest); }
};

/// The record masses of `n` sharded matrices (`items`, `gathered`, `skip`, `crit` and `rest` in
/// the memory of primitive set `Prim`: host_primitives or the CUDA backend's device_primitives),
/// on `on` (a worker pool or nullptr; a stream). Stream-ordered on a device; returns its status.
template <class Prim>
cudaError_t shard_masses_on(Prim prim,
                            const shard_mass_item* items,
                            int n,
                            const float* gathered,
                            const std::uint32_t* skip,
                            float* crit,
                            float* rest,
                            typename Prim::exec_type on) {
  return prim.for_each_item(n, shard_masses_body{items, gathered, skip, crit, rest}, on);
}

} // namespace detail
ZF_NAMESPACE_END
