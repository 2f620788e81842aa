/// @file
/// The engine on a GPU: `zenflow::engine<zenflow::cuda_backend>`. Parameters are device
/// pointers; the device plan's work is stream-ordered on the user's stream, the D2H ring copies
/// on a copy stream of its own, and a host window's new weights go up on an upload stream of
/// their own (enqueued by the job's thread, scattered at the boundary on the user's stream after
/// an event). The training thread blocks only in the counted stalls (docs/engine-semantics.md).
/// Data parallel over NCCL: `zenflow::engine<zenflow::cuda_backend, zenflow::nccl_communicator>`
/// (comm/nccl_communicator.cuh); this header includes the data-parallel side.
#pragma once

#include <zenflow/engine/cuda_backend.cuh>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/engine.hpp>
