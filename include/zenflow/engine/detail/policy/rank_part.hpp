/// @file
/// What one rank's checkpoint file holds of each matrix (rank_part), which each data-parallel
/// policy says of its own rank (parallel_side.hpp: checkpoint_part) and the checkpoint's reader
/// recovers from any world's files (io/reshard_part.hpp), so that an engine of any policy and
/// world size assembles its part from the files of any other.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One rank's file's part of a matrix, in the whole matrix's channels: the rank registered
/// [first, first + channels) (a sharded rank its shard, else the whole matrix), which its device
/// sets and host-set positions count from, and keeps the host rows (master, moments, counts, the
/// window's sums) of [host_first, host_first + host_count) (the owner partition's block, else all
/// it registered). With the owner partition every rank also holds the whole device set: the same
/// rows in every file.
struct rank_part {
  std::int64_t first = 0;
  std::int64_t channels = 0;
  std::int64_t host_first = 0;
  std::int64_t host_count = 0;
};

/// The part of a rank that registered `pi` and keeps the host rows of all of it (one rank, a shard).
inline rank_part whole_part(const param_info& pi) {
  return {pi.shard_first, pi.channels, pi.shard_first, pi.channels};
}

} // namespace detail
ZF_NAMESPACE_END
