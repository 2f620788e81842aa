/// @file
/// The data-parallel engine: `engine<Backend, owner_partition<Comm>>` (or `engine<Backend, Comm>`)
/// with the owner partition's side (detail/dp/owner_partition.hpp; docs/data-parallel.md). Include
/// it with the communicator's header (comm/mpi_communicator.hpp, comm/nccl_communicator.cuh).
#pragma once

#include <zenflow/engine/detail/dp/owner_partition.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/parallel.hpp>
