/// @file
/// The owner partition's step over a device communicator (NCCL; on the emulated device,
/// emulated_device_communicator): owner_reduction.hpp's design (docs/data-parallel.md),
/// stream-ordered in device memory, with no host wait on a plain step.
/// - The gradients' reduction (grad_buckets.hpp) all-reduces the rows every rank needs (the device
///   sets', the vectors') and reduce-scatters the host sets' rows by owner: this rank's mean
///   gradient holds zeros on the other blocks' host-set rows.
/// - The step's decisions that read other blocks' rows get one number per channel, and each gets
///   the bits a one-rank run computes without a gather's re-layout: every rank keeps its block's
///   values, zeros elsewhere, and the ranks sum them. Each value is the sum of one rank's value
///   and zeros, and x + 0 = x exactly for every x >= +0, NaN and Inf included, in any order: an
///   exact gather in parameter order, one collective each:
///   - the scores (the prologue's squared L2; a selection's L1 importance);
///   - the fp64 rescans of non-finite scores (math/norms.hpp), which the squared totals read
///     instead of the rows this rank does not hold (so no row crosses for an overflowed score);
///   - the rest masses' per-row L1 over the host sets (Zen-auto, select_on_mass_drop), then added
///     per D2H slot in row order and the slots in order (d2h_stream's packs), in two batched
///     launches, and written over the record after the packs.
///   The NaN/Inf flags are or-reduced.
/// - A selection step's entering rows (host-set rows that join a device set) come from their
///   owners (an all-gather by owner in the working type; a selection step waits anyway).
///
/// The index lists' and the masses' descriptors are built on the host and copied up on the stream
/// from one of two host mirrors in turn: a host set changes only at a selection or a restore, both
/// of which wait for the stream, so the copy from the other mirror is done before it is rewritten.
/// The copies read pinned staging allocated at setup (a copy from pageable memory would run
/// synchronously, and an allocation in a step would synchronise the device). The owner_reduction
/// concept's device model (owner_reduction.hpp).
#pragma once

// The class, then its members' definitions (which include the class, never this header).
#include <zenflow/engine/detail/dp/device_owner_reduction_decl.hpp>
#include <zenflow/engine/detail/dp/device_owner_reduction_impl.hpp>
