/// @file
/// Zen-auto's and select_on_mass_drop's masses under the sharded policy (ZeRO-3, sharded.hpp).
/// A rank's own update and packs add the masses of its shard's rows only, and a float sum depends
/// on its order, so the ranks' partial sums cannot be added into one rank's bits. Instead, on each
/// step that reads the masses, every rank computes the mass of each of its shard's rows (l1_row,
/// the order the update and the packs use: its device-set rows, then its host-set rows, each
/// ascending), the ranks all-gather them with each rank's device-set count (one float per
/// channel, one collective for every matrix), and every rank adds them in one rank's order
/// (shard_masses_of: the device set ascending for the crit mass, the host set ascending in the
/// packs' calls for the rest mass) over its record's crit and rest words. Stream-ordered on a
/// device communicator; a host communicator waits for the stream before the gather.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/dp/shard_mass.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Comm, class Host>
class shard_masses {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  template <class T>
  using hbuf = typename Backend::template host_buffer<T>;

public:
  /// At initialize(), after verify(): `counts[m][r]` is rank r's channels of the m-th matrix.
  /// Allocates everything the steps use and uploads the fixed tables (blocking). Returns the
  /// device bytes.
  std::size_t setup(const Backend& b,
                    Comm& comm,
                    const std::vector<param_info>& params,
                    const Host& host,
                    const std::vector<std::vector<std::size_t>>& counts,
                    std::size_t slot_bytes) {
    comm_ = &comm;
    params_ = &params;
    host_ = &host;
    const auto R = static_cast<std::size_t>(comm.size());
    const auto me = static_cast<std::size_t>(comm.rank());
    matrices_.clear();
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (params[p].matrix) {
        matrices_.push_back(p);
      }
    }
    const std::size_t M = matrices_.size();
    // Rank r's part of the gathered buffer: its M device-set counts, then its rows matrix by matrix.
    seg_counts_.assign(R, M);
    for (std::size_t m = 0; m < M; ++m) {
      for (std::size_t r = 0; r < R; ++r) {
        seg_counts_[r] += counts[m][r];
      }
    }
    seg_at_.assign(R, 0);
    for (std::size_t r = 1; r < R; ++r) {
      seg_at_[r] = seg_at_[r - 1] + seg_counts_[r - 1];
    }
    const std::size_t total = seg_at_[R - 1] + seg_counts_[R - 1];
    std::vector<shard_mass_part> parts(std::max<std::size_t>(M * R, 1));
    std::vector<std::size_t> rows_at(R);
    for (std::size_t r = 0; r < R; ++r) {
      rows_at[r] = seg_at_[r] + M;
    }
    std::vector<shard_mass_item> items(std::max<std::size_t>(M, 1));
    for (std::size_t m = 0; m < M; ++m) {
      for (std::size_t r = 0; r < R; ++r) {
        parts[m * R + r] = {static_cast<std::int64_t>(seg_at_[r] + m), static_cast<std::int64_t>(rows_at[r]),
                            static_cast<std::int64_t>(counts[m][r])};
        rows_at[r] += counts[m][r];
      }
    }
    parts_ = dbuf<shard_mass_part>(parts.size());
    items_ = dbuf<shard_mass_item>(items.size());
    for (std::size_t m = 0; m < M; ++m) {
      const param_info& pi = params[matrices_[m]];
      items[m] = {parts_.data() + m * R, static_cast<int>(R), pi.rows_per_slot(slot_bytes),
                  static_cast<std::int64_t>(m)};
    }
    // This rank's rows: an index list per matrix (its device set, then its host set), each row's
    // mass at its place in its part of the gathered buffer (one table per buffer).
    std::size_t mine = 0;
    for (std::size_t m = 0; m < M; ++m) {
      mine += counts[m][me];
      max_rows_ = std::max(max_rows_, static_cast<std::int64_t>(counts[m][me]));
    }
    idx_ = dbuf<std::int32_t>(std::max<std::size_t>(mine, 1));
    h_idx_ = hbuf<std::int32_t>(idx_.size() + std::max<std::size_t>(M, 1)); // the list, then the counts
    junk_ = dbuf<float>(std::max<std::size_t>(M, 1));
    std::vector<l1_mass_item> calls(std::max<std::size_t>(M, 1));
    for (int buf = 0; buf < 2; ++buf) {
      gathered_[buf] = dbuf<float>(std::max<std::size_t>(total, 1));
      calls_[buf] = dbuf<l1_mass_item>(calls.size());
      std::size_t at = 0;
      for (std::size_t m = 0; m < M; ++m) {
        const param_info& pi = params[matrices_[m]];
        calls[m] = {pi.step_grads,
                    pi.type,
                    pi.channels,
                    pi.channel_len,
                    pi.ld,
                    pi.layout,
                    pi.layout == channel_layout::contiguous, // device_plan::mass_args' order
                    idx_.data() + at,
                    pi.channels,
                    gathered_[buf].data() + parts[m * R + me].rows_at,
                    nullptr,
                    junk_.data() + m};
        at += counts[m][me];
      }
      b.copy_h2d(calls_[buf].data(), calls.data(), calls.size() * sizeof(l1_mass_item), nullptr);
    }
    b.copy_h2d(parts_.data(), parts.data(), parts.size() * sizeof(shard_mass_part), nullptr);
    b.copy_h2d(items_.data(), items.data(), items.size() * sizeof(shard_mass_item), nullptr);
    b.synchronize(nullptr);
    versions_.assign(params.size(), ~std::uint64_t{0});
    return 2 * gathered_[0].size() * 4 + idx_.size() * 4 + junk_.size() * 4 +
           2 * calls.size() * sizeof(l1_mass_item) + parts.size() * sizeof(shard_mass_part) +
           items.size() * sizeof(shard_mass_item);
  }

  /// A step that reads the masses, after its update and packs were enqueued: this rank's row
  /// masses on `stream`, gathered, then `order()` (the pack stream waits for `stream`) and every
  /// matrix's crit and rest words of the record written on `pack_stream`. Returns the bytes sent.
  template <class Order>
  std::uint64_t
  write(device_plan<Backend>& plan, cudaStream_t stream, cudaStream_t pack_stream, Order&& order) {
    const Backend& b = plan.backend();
    rebuild(b, stream);
    // Two buffers in turn: the last reader of this one was the step two writes ago, whose record
    // copy (after the pack stream) the plan's begin_step waited for before this step's record.
    cur_ ^= 1;
    const int M = static_cast<int>(matrices_.size());
    const auto me = static_cast<std::size_t>(comm_->rank());
    float* g = gathered_[cur_].data();
    if (stale_counts_[cur_]) { // this rank's device-set counts: each gather leaves them in place
      b.copy_h2d(g + seg_at_[me], h_idx_.data() + idx_.size(), matrices_.size() * 4, stream);
      stale_counts_[cur_] = false;
    }
    b.zero(junk_.data(), junk_.size() * 4, stream);
    b.run(stream, 0, "zenflow::engine: l1_mass_batched",
          [calls = calls_[cur_].data(), M, max = max_rows_](auto prim, auto on) {
            return prim.l1_mass_batched(calls, M, max, on);
          });
    if constexpr (!Comm::is_device) {
      b.synchronize(stream); // a host communicator reads the buffer when called
    }
    all_gather(*comm_, g + seg_at_[me], g, std::span<const std::size_t>(seg_counts_), stream);
    order();
    const auto rec = plan.exposed();
    b.run(pack_stream, 0, "zenflow::engine: shard_masses",
          [items = items_.data(), M, g, skip = rec.record_skip(), crit = rec.record_crit(),
           rest = rec.record_rest()](auto prim, auto on) {
            return shard_masses_on(prim, items, M, g, skip, crit, rest, on);
          });
    return seg_counts_[me] * 4;
  }

private:
  /// After a host set changed (a selection, initialize, a checkpoint's load): this rank's index
  /// lists up, and its device-set counts staged for each buffer's next use (the other buffer may
  /// still be read on the pack stream). The pinned staging is rewritten only then: its last copies
  /// were enqueued before the selection's readback, or initialize's or load's synchronize, all of
  /// which waited for the stream.
  void rebuild(const Backend& b, cudaStream_t stream) {
    const auto& params = *params_;
    const Host& host = *host_;
    bool same = true;
    for (const std::size_t p : matrices_) {
      same = same && versions_[p] == host[p].host_set_version;
    }
    if (same) {
      return;
    }
    const std::size_t M = matrices_.size();
    std::int32_t* list = h_idx_.data();
    std::int32_t* device_counts = h_idx_.data() + idx_.size();
    std::size_t at = 0;
    for (std::size_t m = 0; m < M; ++m) {
      const std::size_t p = matrices_[m];
      const auto& hs = host[p].host_set;
      versions_[p] = host[p].host_set_version;
      auto next = hs.begin();
      std::int32_t k = 0;
      for (std::int32_t c = 0; c < params[p].channels; ++c) { // the device set: not in the host set
        if (next != hs.end() && *next == c) {
          ++next;
        } else {
          list[at++] = c;
          ++k;
        }
      }
      for (const std::int32_t c : hs) {
        list[at++] = c;
      }
      device_counts[m] = k;
    }
    b.copy_h2d(idx_.data(), list, at * 4, stream);
    stale_counts_[0] = stale_counts_[1] = true;
  }

  Comm* comm_ = nullptr;
  const std::vector<param_info>* params_ = nullptr;
  const Host* host_ = nullptr;
  std::vector<std::size_t> matrices_;   // the parameters that are matrices, in record order
  std::vector<std::size_t> seg_counts_; // per rank: floats in the gathered buffer
  std::vector<std::size_t> seg_at_;     // per rank: where they start
  std::vector<std::uint64_t> versions_; // per parameter: the host set the lists were built from
  std::int64_t max_rows_ = 0;
  dbuf<float> gathered_[2];
  dbuf<l1_mass_item> calls_[2];
  dbuf<shard_mass_part> parts_;
  dbuf<shard_mass_item> items_;
  dbuf<std::int32_t> idx_;
  dbuf<float> junk_; // the calls' sums (each row's mass is what is gathered)
  hbuf<std::int32_t> h_idx_;
  bool stale_counts_[2] = {true, true};
  int cur_ = 0;
};

} // namespace detail
ZF_NAMESPACE_END
