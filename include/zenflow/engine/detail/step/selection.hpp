/// @file
/// A selection step's host-side work: the new device set of every matrix from the device plan's
/// segmented top-k, and the migration of the rows that change sides (their master, moments and count), the
/// host sets following. The caller has made sure the consumer reads no host set meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/step/call_cost.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Installs every matrix's new device set `sets[p]` (from device_plan::select_all) and migrates
/// the rows that leave or enter it between `host` and the device (through the parallel side
/// `par`, which knows which rank keeps which rows: policy/parallel_side.hpp), stream-ordered (no
/// wait); vectors on the device keep {0}. Bytes copied go to `cost`.
template <engine_backend Backend, class HostSide, class ParallelSide>
void migrate_selection(device_plan<Backend>& plan,
                       const std::vector<param_info>& params,
                       HostSide& host,
                       ParallelSide& par,
                       std::vector<std::vector<std::int32_t>>& sets,
                       cudaStream_t stream,
                       call_cost& cost) {
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    auto& h = host[p];
    std::vector<std::int32_t> new_sel;
    if (pi.matrix) {
      new_sel = std::move(sets[p]);
    } else if (pi.device_dense) {
      new_sel = {0};
    } else {
      continue;
    }
    if (new_sel == h.sel) {
      continue;
    }
    if (pi.host_side) {
      const auto [down, up] = par.migrate(p, new_sel, stream);
      cost.d2h += down;
      cost.h2d += up;
      h.set_host_set(complement(new_sel, pi.channels));
      cost.h2d += plan.set_host_set(p, h.host_set, stream);
    }
    h.sel = std::move(new_sel);
  }
}

} // namespace detail
ZF_NAMESPACE_END
