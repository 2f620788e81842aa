/// @file
/// The owner reduction: how a data-parallel step with the owner partition (owner_partition.hpp)
/// reduces the gradients and completes the step's per-channel decisions from rows only their
/// owners hold (docs/data-parallel-design.md). One concept, two models, one per kind of communicator:
/// - host_owner_reduction (host_owner_reduction.hpp): a host communicator (MPI) on the host and
///   emulated backends, on host buffers after the stream is synchronized;
/// - device_owner_reduction (device_owner_reduction.hpp): a device communicator (NCCL; on the
///   emulated device, emulated_device_communicator), stream-ordered in device memory.
/// Both take their inputs once (owner_context, at setup) and give every rank the bits a one-rank
/// run fed the mean gradient computes.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Channels [first, first + count) of parameter p owned by rank r.
using owner_block_fn = std::function<std::pair<std::int64_t, std::int64_t>(std::size_t, int)>;

/// What an owner reduction works on, fixed at initialize(): the engine's parameters (their
/// `step_grads`: the mean gradient, grad_buckets.hpp), device plan and host sets (read at each
/// call: a selection changes them), the communicator, who owns which channels, a device staging
/// buffer for a selection's entering rows (at least one matrix's device set in fp32 state: the
/// parallel side's), and the D2H ring's slot size (the rest masses follow the packs' slot
/// boundaries). Every pointer outlives the reduction.
template <class Backend, class Comm, class Host>
struct owner_context {
  Comm* comm = nullptr;
  device_plan<Backend>* plan = nullptr;
  const std::vector<param_info>* params = nullptr;
  const Host* host = nullptr;
  owner_block_fn block;
  std::byte* stage = nullptr;
  std::size_t stage_bytes = 0;
  std::size_t slot_bytes = 0;

  [[nodiscard]] const Backend& backend() const { return plan->backend(); }
  /// Split by owner: the host-side matrices (their host set by owner, the rest all-reduced).
  [[nodiscard]] static bool split(const param_info& pi) noexcept { return pi.matrix && pi.host_side; }
};

/// setup() allocates (device bytes) and keeps the context; inputs() is what the plan's setup
/// takes from the reduction. One step's calls, after the gradients' reduction (grad_buckets.hpp),
/// in their order (each returns the bytes this rank sent):
/// finish_norms() as the plan's after_norms hook (`rest`: the step
/// reads the rest masses); on a selection step complete_importance() as the after_importance hook,
/// then fetch_entering() once the new sets are known; write_rest() after the packs were enqueued
/// (`order()` makes `pack_stream` wait for `stream`).
template <class R, class Ctx>
concept owner_reduction = requires(R& r,
                                   const Ctx& ctx,
                                   cudaStream_t s,
                                   bool rest,
                                   channel_norm kind,
                                   const std::vector<std::vector<std::int32_t>>& sets,
                                   void (*order)()) {
  { r.setup(ctx) } -> std::same_as<std::size_t>;
  { r.inputs() } -> std::convertible_to<plan_inputs>;
  { r.finish_norms(rest, s) } -> std::same_as<std::uint64_t>;
  { r.complete_importance(kind, s) } -> std::same_as<std::uint64_t>;
  { r.fetch_entering(sets, s) } -> std::same_as<std::uint64_t>;
  { r.write_rest(s, s, order) } -> std::same_as<std::uint64_t>;
};

} // namespace detail
ZF_NAMESPACE_END
