/// @file
/// Where the engine's host threads run (config `pin_host_threads`, `pt_reserved_cores_perc`):
/// resolved once, at initialize(), before anything is allocated or started, from the calling
/// thread's affinity mask (the process's cores, as a launcher's binding left them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/config/config_fail.hpp>
#include <zenflow/engine/detail/config/config_keys.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The placement `cfg` asks for on this process. Pinned: the workers get the last cores of the
/// allowed mask (DeepSpeed's split, core/placement.hpp), each host pool `host_threads` threads or
/// one per worker core. Not pinned: `resolved_host_threads(hardware_concurrency)` threads, placed
/// by the system. The NUMA nodes are those of the worker cores.
/// @throws invalid_argument naming pt_reserved_cores_perc when pinning would leave no core.
[[nodiscard]] inline host_placement resolve_host_placement(const config& cfg) {
  const std::vector<int> allowed = allowed_cores();
  host_placement out;
  if (!cfg.pin_host_threads) {
    out.threads = cfg.resolved_host_threads(std::max(1u, std::thread::hardware_concurrency()));
    out.worker_cores = allowed;
    out.training_cores = allowed;
  } else {
    const auto n = static_cast<std::int64_t>(allowed.size());
    const std::int64_t reserved = training_core_count(n, cfg.pt_reserved_cores_perc);
    if (reserved >= n) {
      config_fail(zenflow_key("pt_reserved_cores_perc"),
                  "reserves " + std::to_string(reserved) + " of the process's " + std::to_string(n) +
                      " allowed cores for training and leaves the pinned host threads none "
                      "(zenflow_ext.pin_host_threads): lower it, or allow the process more cores");
    }
    core_split split = reserve_training_cores(allowed, cfg.pt_reserved_cores_perc);
    out.pinned = true;
    out.threads = cfg.host_threads != 0 ? cfg.host_threads : static_cast<unsigned>(split.workers.size());
    out.worker_cores = std::move(split.workers);
    out.training_cores = std::move(split.training);
  }
  out.numa_nodes = numa_nodes_of(out.worker_cores);
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
