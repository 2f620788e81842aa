/// @file
/// How many ranks an engine trains with: its data-parallel policy, the engine's second template
/// argument (docs/data-parallel.md).
/// - `single_rank` (the default): one process, one device. The engine compiles none of the
///   data-parallel code.
/// - `owner_partition<Comm>`: every rank registers the same parameters and steps together over the
///   communicator `Comm`; the step reads the mean of every rank's gradient, and each rank keeps the
///   host optimizer state of its block of every host-side matrix's channels (ZeRO-2's split of the
///   optimizer state). Include <zenflow/engine/data_parallel.hpp> for it. A communicator type
///   given as the policy means owner_partition of it: `engine<host_backend, mpi_communicator>`.
/// - `sharded<Comm>` (ZeRO-3): each rank registers only its shard of every matrix (a contiguous
///   range of channels, `param_options::shard`) with the shard's mean gradient; vectors are
///   replicated. The clip norm, the NaN/Inf skip and each matrix's top-k stay global, so every
///   rank's rows equal those of one rank training the whole model on the mean gradient. Include
///   <zenflow/engine/sharded.hpp> for it.
#pragma once

#include <type_traits>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/backend.hpp>

ZF_NAMESPACE_BEGIN

/// One rank: no communicator, no reduction, the whole host state on this process.
struct single_rank {};

/// Data parallel over `Comm` with the host state partitioned by channel owner. The engine's
/// constructor takes the `Comm` (its memory must be the backend's: local/mpi_communicator for the
/// host and emulated backends, local_device/nccl_communicator for the CUDA backend).
template <communicator Comm>
struct owner_partition {
  using communicator_type = Comm;
};

/// Sharded weights over `Comm` (ZeRO-3; docs/data-parallel.md): local/mpi_communicator on the
/// host and emulated backends, emulated_device_communicator on the emulated backend,
/// local_device/nccl_communicator on the CUDA backend.
template <communicator Comm>
struct sharded {
  using communicator_type = Comm;
};

/// The one-rank communicator that matches a backend's memory: host memory (host, emulated
/// backends) or device memory (CUDA).
template <class Backend>
using default_communicator_t = std::conditional_t<std::is_base_of_v<detail::host_memory, Backend>,
                                                  local_communicator,
                                                  local_device_communicator>;

namespace detail {
template <class P>
struct parallel_policy {
  using type = P;
};
template <class P>
requires communicator<P>
struct parallel_policy<P> {
  using type = owner_partition<P>;
};
template <class P>
inline constexpr bool is_owner_partition_v = false;
template <class Comm>
inline constexpr bool is_owner_partition_v<owner_partition<Comm>> = true;
template <class P>
inline constexpr bool is_sharded_v = false;
template <class Comm>
inline constexpr bool is_sharded_v<sharded<Comm>> = true;
} // namespace detail

/// The policy an engine's second template argument names: `single_rank`, `owner_partition<C>`,
/// `sharded<C>`, or a communicator `C` (owner_partition<C>).
template <class P>
using parallel_policy_t = typename detail::parallel_policy<P>::type;

/// True for the policies the engine knows.
template <class P>
concept parallel_policy =
    std::is_same_v<P, single_rank> || detail::is_owner_partition_v<P> || detail::is_sharded_v<P>;

ZF_NAMESPACE_END
