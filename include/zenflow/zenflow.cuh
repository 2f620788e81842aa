/// @file
/// Umbrella header for the CUDA side of zenflow (needs nvcc): the host-side umbrella plus every
/// kernel launcher (`zenflow::device::*`), the engine's `cuda_backend`, and the sharded-weights
/// helpers' kernels (for a CUDA communicator).
#pragma once

#include <zenflow/comm/shard.cuh>
#include <zenflow/engine/engine.cuh>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/schedule/l1_mass.cuh>
#include <zenflow/schedule/step_scalars.cuh>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>
#include <zenflow/zenflow.hpp>
