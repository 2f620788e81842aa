/// @file
/// One parameter's host state: its full-size host optimizer state, its window accumulators, its
/// channel sets and row shard, its upload buffer and its landing buffer (empty for a parameter
/// that lives on the device only). Owned by the training thread, which lends parts of it out; by
/// field, who writes it when:
///
///   master, moments, counts  the window job (run_host_window, its rows only) while a job runs; the
///                            training thread (initialize(), a selection's migration, a restore)
///                            only while none runs
///   acc, rest_l1             the consumer while the window is open, then the window job
///                            (window_accumulators, host/handover.hpp); their size, the training
///                            thread when the host set changes (fit)
///   matrix_index, sel, host_set, host_set_version, shard
///                            the training thread, with every pushed slot consumed and no job
///                            running (channel_sets)
///   upload                   the window job; read after the window queue says it is done, at a
///                            boundary (the copy up, data parallel's gather), or by a checkpoint
///   land                     sized by the training thread, then the consumer's (landing_buffer)
///
/// The hand-overs are bases, so that the fields keep their names for the engine's other parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/handover.hpp>
#include <zenflow/engine/detail/host/host_moments.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class HostBuffer>
struct host_param : window_accumulators, channel_sets {
  std::vector<float> master;
  host_moments moments; ///< m and v, fp32 or bf16 (config::host_moments)
  std::vector<std::int32_t> counts;
  /// The window's new working weights, host-set order: positions [upload_origin(),
  /// upload_origin() + upload_rows()).
  HostBuffer upload;
  /// `upload` holds this rank's share only (data parallel over a device communicator: the other
  /// shares are gathered on the device), sized for its block; else every host-set position.
  bool upload_share = false;
  bool upload_buffered = true; ///< `upload` is allocated (layout::buffered)
  landing_buffer land;         ///< gradients announced early, until the step's coef arrives

  /// How initialize() lays out a parameter's host buffers.
  struct layout {
    std::int64_t acc_rows = 0; ///< rows of the window accumulators (host-set rows it will hold)
    bool two = false;          ///< a second accumulator: the window job runs beside the next window's sums
    bool exact = false;        ///< the accumulators follow the host set's row count exactly (one rank)
    bool buffered = true;      ///< an upload buffer (else the job's weights go up through the
                               ///< plan's upload stage, device_plan_upload.hpp)
    bool share = false;        ///< the upload buffer holds this rank's share only
  };

  /// initialize(), after its rows (master, shard, host set) are set: zeroed moments (`cfg`'s
  /// precision) and counts, the accumulators and the upload buffer as `lay` says, of
  /// `channel_bytes` per row of its `channels`; their bytes added to `mem`.
  void allocate_state(const config& cfg,
                      std::int64_t channel_len,
                      std::int64_t channels,
                      std::size_t channel_bytes,
                      const layout& lay,
                      memory_usage& mem) {
    const std::size_t n = master.size();
    moments.assign(n, cfg.host_moments, static_cast<std::size_t>(channel_len));
    counts.assign(static_cast<std::size_t>(shard.channels), 0);
    two = lay.two;
    exact = lay.exact;
    for (std::size_t i = 0; i < (two ? 2u : 1u); ++i) {
      acc[i].assign(static_cast<std::size_t>(lay.acc_rows * channel_len), 0.0f);
    }
    upload_share = lay.share;
    upload_buffered = lay.buffered;
    if (lay.buffered) {
      upload = HostBuffer(static_cast<std::size_t>(lay.share ? shard.channels : channels) * channel_bytes);
    }
    mem.host_state += host_state_bytes(cfg.host_moments, counts.size(), channel_len);
    mem.host_accumulators += accumulator_bytes();
    mem.host_upload += upload.size();
  }

  /// The job's new weights are kept in `upload` (else they go up through the plan's stage).
  [[nodiscard]] bool buffered_upload() const noexcept { return upload_buffered; }

  /// The host-set position of `upload`'s first row.
  [[nodiscard]] std::int64_t upload_origin() const noexcept { return upload_share ? shard.pos : 0; }
  /// The rows of `upload` in use: this rank's share of the host set, or all of it.
  [[nodiscard]] std::int64_t upload_rows() const noexcept {
    return upload_share ? shard.end() - shard.pos : static_cast<std::int64_t>(host_set.size());
  }
};

} // namespace detail
ZF_NAMESPACE_END
