/// @file
/// Umbrella header for the host side of zenflow: everything that compiles with the host
/// compiler alone (core types, the host backend of every primitive, transport, the engine on
/// the host backend, the communicator concept with its one-rank model and the emulated device's,
/// the channel partition, the sharded-weights helpers).
/// `<zenflow/zenflow.cuh>` adds the CUDA launchers and the CUDA engine backend.
#pragma once

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/comm/partition.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/comm/shard_prefetcher.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/cpu_simd.hpp>
#include <zenflow/core/device.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/gradient_release.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/params.hpp>
#include <zenflow/engine/plan.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/schedule/l1_mass.hpp>
#include <zenflow/schedule/mass_trigger.hpp>
#include <zenflow/schedule/step_scalars.hpp>
#include <zenflow/schedule/step_schedule.hpp>
#include <zenflow/schedule/types.hpp>
#include <zenflow/schedule/zen_auto.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>
#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/emulated_copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>
#include <zenflow/transport/window_queue.hpp>
