/// @file
/// What the engine reports: per-step and cumulative PCIe bytes, stall and host-window time,
/// window and selection bookkeeping, skipped steps, and the memory each buffer takes.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/placement.hpp>

ZF_NAMESPACE_BEGIN

/// Bytes held by each buffer the engine owns (the user's weights and gradients excluded).
struct memory_usage {
  std::size_t device_selected_state = 0; ///< fp32 master/m/v + counts + indices of the selected channels
  std::size_t device_vector_state = 0;   ///< fp32 master/m/v of the vector parameters
  std::size_t device_staging = 0;        ///< pack staging ring (gradients on their way down)
  std::size_t device_upload = 0;         ///< upload buffer (new weights of the unselected channels)
  std::size_t device_scratch = 0;        ///< norms, scores, top-k temporaries, per-step scalars
  std::size_t device_window_sum = 0;     ///< accumulate = device: the two fp32 window sums of the host sets
  /// Data parallel (ZeRO-2): the fp32 reduction bucket, its receive buffer, their index lists and
  /// copy tables, and with reduce_in_place false the mean buffers (docs/data-parallel.md)
  std::size_t device_reduction = 0;
  std::size_t host_state = 0;        ///< fp32 master, m/v (fp32, bf16, int8 + scales), counts
  std::size_t host_accumulators = 0; ///< fp32 gradient accumulators (two when overlapping)
  std::size_t host_ring = 0;         ///< pinned D2H ring
  std::size_t host_upload = 0;       ///< pinned upload buffer
  std::size_t host_landing = 0;      ///< gradients announced by grad_ready() until their step's coef (lazy)
  /// Data parallel (ZeRO-2): a selection's pinned staging of the entering rows' state
  std::size_t host_staging = 0;
  [[nodiscard]] std::size_t device_total() const noexcept {
    return device_selected_state + device_vector_state + device_staging + device_upload + device_scratch +
           device_window_sum + device_reduction;
  }
  [[nodiscard]] std::size_t host_total() const noexcept {
    return host_state + host_accumulators + host_ring + host_upload + host_landing + host_staging;
  }
};

/// Why a selection was made (step_report::selection_reason).
enum class selection_cause : std::uint8_t {
  none,     ///< no selection at this step
  schedule, ///< a scheduled selection step (select_strategy / select_interval), or one carried past bad steps
  mass_drop ///< the trigger of select_on_mass_drop: the device set had lost its share of the mass
};

/// One step as the engine saw it when `step()` returned.
struct step_report {
  std::int64_t step = -1;         ///< index t of the step (0-based, skipped steps included)
  bool warm_up = false;           ///< a plain offloaded AdamW step
  bool selection = false;         ///< the selection was (re)computed at this step
  bool window_closed = false;     ///< this step closed a host window
  bool skip_known = false;        ///< `skipped` is meaningful (always on the host backend)
  bool skipped = false;           ///< NaN/Inf gradients: nothing was updated
  std::uint64_t d2h_bytes = 0;    ///< device -> host bytes enqueued by this step
  std::uint64_t h2d_bytes = 0;    ///< host -> device bytes enqueued by this step
  double stall_s = 0.0;           ///< time the calling thread waited on the host side
  std::uint64_t comm_bytes = 0;   ///< bytes this rank put into collectives (data parallel)
  std::int64_t window_length = 0; ///< steps in the current window so far (this one included)
  std::int64_t selection_age = 0; ///< steps since the current selection was made (0 at it)
  selection_cause selection_reason = selection_cause::none; ///< why `selection` (none when it is false)
};

/// Cumulative counters plus the last step.
struct stats {
  step_report last{};
  std::int64_t steps = 0;
  std::int64_t skipped_steps =
      0; ///< NaN/Inf steps seen so far (on the CUDA backend: as the host learns them)
  std::int64_t selections = 0;
  std::int64_t mass_drop_selections = 0; ///< of `selections`, those select_on_mass_drop triggered
  std::int64_t windows_closed = 0;
  std::int64_t host_jobs = 0; ///< host windows run (warm-up and offload_sync steps included)
  std::uint64_t d2h_bytes = 0;
  std::uint64_t h2d_bytes = 0;
  double stall_s = 0.0;
  std::uint64_t comm_bytes = 0; ///< bytes this rank put into collectives (initialize() included)
  double host_window_s = 0.0;   ///< total time spent inside host window jobs
  double last_host_window_s = 0.0;
  std::int64_t last_window_length = 0;    ///< length of the last closed window
  std::uint64_t model_bytes = 0;          ///< working-precision bytes of every registered parameter
  std::int64_t max_staleness_windows = 0; ///< most windows a host job's result was applied after its close
  /// ZeRO-3: matrices whose device rows on this rank grew past its share, a selection (or a loaded
  /// checkpoint) having put more of their top-k in its shard (docs/data-parallel.md)
  std::int64_t device_rows_grown = 0;
  memory_usage memory{};
  /// Where the host threads run (config pin_host_threads): set by initialize(); `describe()`
  /// prints it, `pin_to_training_cores(placement)` pins the training thread to the rest.
  host_placement placement{};

  /// Mean PCIe bytes per step (both directions) as a multiple of the model size.
  [[nodiscard]] double pcie_model_ratio() const noexcept {
    if (steps == 0 || model_bytes == 0) {
      return 0.0;
    }
    return static_cast<double>(d2h_bytes + h2d_bytes) / static_cast<double>(steps) /
           static_cast<double>(model_bytes);
  }
};

ZF_NAMESPACE_END
