/// @file
/// A re-selection's migration with the owner partition (owner_partition.hpp, docs/data-parallel-design.md):
/// the rows that enter a matrix's device set come from their owners, every rank installs them
/// (the device state is replicated), and a row that leaves goes home to its owner only.
///
/// The entering rows are gathered straight into a device staging buffer: master, m, v and count
/// each in one all-gather, whose blocks in rank order are the rows in ascending channel order,
/// the order device_plan::migrate() installs them in (widening bf16 moments there). Over a device
/// communicator each rank copies only its own rows up (its share of the entering state crosses
/// PCIe once) and the gathers run on the device; over a host communicator the gathered rows go up
/// in one copy. The host sources of the copies up stay in `pending`, pinned (a selection_staging
/// sized at setup: a copy from pageable memory would run synchronously, and an allocation in a
/// step would synchronise the device), until the next selection, whose top-k waits for the
/// stream anyway; a selection that moves more than it holds waits for the stream where it runs
/// out (its copies done) and reuses it: the first selection after the warm-up, whose every row
/// enters, on a large model.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/plan/moment_rows.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The host sources of a selection's copies up (pinned, `Backend::host_buffer`), handed out in
/// pieces until clear() (the next selection, once its top-k has waited for the stream). Sized at
/// setup to hold one matrix's migration at least (owner_partition: and reduce_bucket_bytes); a
/// piece that does not fit after what was handed out waits for the stream (whose copies read
/// them) and starts over; one larger than the whole comes from pageable memory instead (correct,
/// but its copy runs synchronously: the emulated device counts it).
template <class Backend>
class selection_staging {
public:
  selection_staging() = default;
  explicit selection_staging(std::size_t bytes) : pinned_(std::max<std::size_t>(bytes, 1)) {}
  /// `bytes` of host memory, 16-byte aligned, valid until clear() or a take() that waits for
  /// `stream` (`b`) to start over.
  std::byte* take(std::size_t bytes, const Backend& b, cudaStream_t stream) {
    std::size_t at = (used_ + 15) / 16 * 16;
    if (at + bytes > pinned_.size() && bytes <= pinned_.size()) {
      b.synchronize(stream); // the copies up from what was handed out are done
      at = 0;
    }
    if (at + bytes <= pinned_.size()) {
      used_ = at + bytes;
      return pinned_.data() + at;
    }
    return overflow_.emplace_back(bytes).data();
  }
  /// Its pinned bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return pinned_.size() > 1 ? pinned_.size() : 0; }
  void clear() {
    used_ = 0;
    overflow_.clear();
  }
  /// What one matrix's migration may take: its own rows and (host communicator) all entering rows,
  /// at most its device capacity, with fp32 moments, and the alignment.
  [[nodiscard]] static std::size_t bound(const param_info& pi, bool all_rows_too) {
    const auto rows = static_cast<std::size_t>(std::max<std::int64_t>(pi.device_capacity, 0));
    const std::size_t one = rows * (12u * static_cast<std::size_t>(pi.channel_len) + 4u) + 16u;
    return all_rows_too ? 2 * one : one;
  }

private:
  typename Backend::template host_buffer<std::byte> pinned_;
  std::size_t used_ = 0;
  std::deque<std::vector<std::byte>> overflow_;
};

/// What migrate_partitioned() moved: device->host and host->device bytes, and the bytes this
/// rank sent to the gathers.
struct partitioned_migration_bytes {
  std::size_t down = 0;
  std::size_t up = 0;
  std::uint64_t sent = 0;
};

/// device_plan::migrate() of matrix `p` (device set h.sel -> new_sel) with its host state split
/// by owner: `h` holds this rank's block (h.shard.first, h.shard.channels; moments hm, hv of type M),
/// `block_of(r)` is rank r's {first channel, channels}. Entering rows cross as wire_moment_t<M>
/// (int8 rows widened to fp32 by their owner: the device keeps fp32). `stage` (device memory) holds the
/// matrix's entering rows, at most its device capacity x (12 x channel_len + 4) bytes. A
/// collective: every rank calls it with the same sets.
template <class M, class Backend, class Comm, class HostParam, class BlockOf, class Stage>
partitioned_migration_bytes migrate_partitioned(device_plan<Backend>& plan,
                                                Comm& comm,
                                                std::size_t p,
                                                const param_info& pi,
                                                HostParam& h,
                                                moment_ptr_t<M> hm,
                                                moment_ptr_t<M> hv,
                                                const std::vector<std::int32_t>& new_sel,
                                                BlockOf&& block_of,
                                                Stage& stage,
                                                selection_staging<Backend>& pending,
                                                cudaStream_t stream) {
  using W = wire_moment_t<M>;
  const basic_channel_state<M> rows_here{h.master.data(), hm, hv, h.counts.data(), h.shard.channels,
                                         pi.channel_len};
  std::vector<std::int32_t> enter;
  std::set_difference(new_sel.begin(), new_sel.end(), h.sel.begin(), h.sel.end(), std::back_inserter(enter));
  if (enter.empty()) { // the same on every rank (the same sets): no rank gathers
    const auto [down, up] = plan.migrate(p, h.sel, new_sel, rows_here, h.shard.first,
                                         static_cast<const entering_rows<W>*>(nullptr), stream);
    return {down, up, 0};
  }
  const auto L = static_cast<std::size_t>(pi.channel_len);
  const auto R = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  std::vector<std::size_t> rows(R); // entering rows per owner
  for (std::size_t r = 0; r < R; ++r) {
    const auto [first, count] = block_of(static_cast<int>(r));
    rows[r] = static_cast<std::size_t>(std::lower_bound(enter.begin(), enter.end(), first + count) -
                                       std::lower_bound(enter.begin(), enter.end(), first));
  }
  // Rows of the owners before this rank: where this rank's block starts in each array.
  const std::size_t before =
      std::accumulate(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(me), std::size_t{0});
  // n rows as [master n x L fp32 | m n x L | v n x L (type W) | n counts]: each array's byte
  // offset, and the total.
  const auto layout = [L](std::size_t n) {
    return std::array<std::size_t, 5>{0, n * L * 4, n * L * (4 + sizeof(W)), n * L * (4 + 2 * sizeof(W)),
                                      n * (L * (4 + 2 * sizeof(W)) + 4)};
  };
  const std::array<std::size_t, 4> width = {L * 4, L * sizeof(W), L * sizeof(W), 4}; // one row's
  const std::size_t mine = rows[me];
  const auto all_at = layout(enter.size());
  const auto own_at = layout(mine);
  // This rank's rows, as they are stored on the host, and over a host communicator everyone's
  // gathered after them: one piece, valid together.
  const std::size_t own_bytes = (own_at[4] + 15) / 16 * 16;
  std::byte* const own = pending.take(own_bytes + (Comm::is_device ? 0 : all_at[4]), plan.backend(), stream);
  for (std::size_t e = 0; e < mine; ++e) {
    const auto c = static_cast<std::size_t>(enter[before + e] - h.shard.first);
    std::memcpy(own + own_at[0] + e * width[0], h.master.data() + c * L, width[0]);
    if constexpr (std::is_same_v<M, int8_moment>) { // widened by the owner (4-byte aligned rows)
      const auto at = static_cast<std::int64_t>(c * L);
      load_moment_row(reinterpret_cast<float*>(own + own_at[1] + e * width[1]), hm + at, L);
      load_moment_row(reinterpret_cast<float*>(own + own_at[2] + e * width[2]), hv + at, L);
    } else {
      std::memcpy(own + own_at[1] + e * width[1], hm + c * L, width[1]);
      std::memcpy(own + own_at[2] + e * width[2], hv + c * L, width[2]);
    }
    std::memcpy(own + own_at[3] + e * width[3], &h.counts[c], width[3]);
  }
  std::byte* const staged = stage.data();
  std::byte* gathered_host = nullptr;
  if constexpr (!Comm::is_device) {
    gathered_host = own + own_bytes;
  }
  for (std::size_t a = 0; a < 4; ++a) {
    std::vector<std::size_t> sizes(R);
    for (std::size_t r = 0; r < R; ++r) {
      sizes[r] = rows[r] * width[a];
    }
    if constexpr (Comm::is_device) { // this rank's block up, then the gather in place
      std::byte* const block_in_stage = staged + all_at[a] + before * width[a];
      plan.backend().copy_h2d(block_in_stage, own + own_at[a], mine * width[a], stream);
      comm.all_gather_bytes(block_in_stage, staged + all_at[a], sizes, stream);
    } else { // gathered on the host (blocking), up below
      comm.all_gather_bytes(own + own_at[a], gathered_host + all_at[a], sizes, stream);
    }
  }
  if constexpr (!Comm::is_device) {
    plan.backend().copy_h2d(staged, gathered_host, all_at[4], stream);
  }
  const entering_rows<W> entering{reinterpret_cast<const float*>(staged + all_at[0]),
                                  reinterpret_cast<const W*>(staged + all_at[1]),
                                  reinterpret_cast<const W*>(staged + all_at[2]),
                                  reinterpret_cast<const std::int32_t*>(staged + all_at[3])};
  const auto [down, up] = plan.migrate(p, h.sel, new_sel, rows_here, h.shard.first, &entering, stream);
  // Up: the lists, and the rows: this rank's own (device communicator) or all of them.
  return {down, up + (Comm::is_device ? own_at[4] : all_at[4]), own_at[4]};
}

} // namespace detail
ZF_NAMESPACE_END
