/// @file
/// Umbrella header for the CUDA side of zenflow (needs nvcc): the host-side umbrella plus every
/// kernel launcher (`zenflow::device::*`) and the engine's `cuda_backend`.
#pragma once

#include <zenflow/engine/engine.cuh>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>
#include <zenflow/zenflow.hpp>
