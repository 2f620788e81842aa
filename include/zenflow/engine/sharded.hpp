/// @file
/// The sharded engine (ZeRO-3): `engine<Backend, sharded<Comm>>` with the sharded policy's side
/// (detail/dp/sharded.hpp; docs/data-parallel.md). Each rank registers its shard of every matrix
/// (`param_options::shard`, the ranges of comm/shard.hpp's shard_channels) with the shard's mean
/// gradient (reduce_scatter_shard), and every vector whole. Include it with the communicator's
/// header (comm/mpi_communicator.hpp).
#pragma once

#include <zenflow/engine/detail/dp/sharded.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/parallel.hpp>
