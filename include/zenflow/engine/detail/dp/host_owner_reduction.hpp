/// @file
/// The owner partition's step over a host communicator (docs/data-parallel-design.md, "The engine,
/// data parallel"): the gradients' reduction (grad_buckets.hpp) all-reduces the rows every rank
/// needs (the device sets', the vectors') and reduce-scatters the host sets' rows by owner, so
/// each rank holds the mean of its own unselected rows only (all its D2H stream, its consumer and
/// its window need). The step's decisions that read other rows get one float per channel
/// instead, each with the bits a one-rank run fed the mean gradient computes:
/// - the scores (per-channel squared L2 of the mean; a selection step's L1 importance likewise):
///   each owner's block all-gathered; a score that is not finite makes the global norm rescan
///   that row (math/norms.hpp), so such rows themselves come from their owners (all ranks see the
///   same scores: they agree on which);
/// - the NaN/Inf flags: or-reduced (exact; the other blocks' unselected rows are zeros here);
/// - a selection step's entering rows (host-set rows that join a device set): from their owners,
///   once the new sets are known, before the device update reads them;
/// - the rest masses (Zen-auto, select_on_mass_drop): each owner's per-row L1 of its unselected
///   rows all-gathered, then every rank adds them in the one-rank order (per D2H slot in row
///   order, the slots in order) and writes them over the record's rest words after the packs.
/// Host communicators only (host and emulated backends: the buffers are host memory, read after
/// the stream is synchronized). The owner_reduction concept's host model (owner_reduction.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/detail/dp/owner_reduction.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/schedule/l1_mass.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Comm, class Host>
class host_owner_reduction {
  using context = owner_context<Backend, Comm, Host>;
  using block_fn = owner_block_fn;

public:
  /// At setup: the pinned staging of write_rest() (one float per matrix), so that no step
  /// allocates (a pinned allocation synchronises the whole device, as cudaHostAlloc does).
  /// Returns the device bytes allocated: none.
  std::size_t setup(const context& ctx) {
    ctx_ = ctx;
    const auto& params = *ctx.params;
    const auto matrices = static_cast<std::size_t>(
        std::count_if(params.begin(), params.end(), [](const param_info& pi) { return pi.matrix; }));
    h_rest_ = typename Backend::template host_buffer<float>(std::max<std::size_t>(matrices, 1));
    return 0;
  }

  /// Nothing for the plan's setup (the rescans of non-finite scores stay the plan's own).
  [[nodiscard]] plan_inputs inputs() const { return {}; }

  /// After the prologue's norms (scores and flags) on the mean gradient: the scores by owner,
  /// the flags or-reduced, the rows of non-finite scores from their owners; with `rest` (Zen-auto
  /// or select_on_mass_drop after the warm-up) write_rest() adds the rest masses. Synchronizes
  /// `stream`. Returns the bytes this rank sent.
  std::uint64_t finish_norms(bool rest, cudaStream_t stream) {
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    const auto plan = ctx_.plan->exposed();
    ctx_.backend().synchronize(stream);
    std::uint64_t sent = gather_scores();
    comm.all_reduce_max(plan.flags(), params.size(), nullptr); // 0/1 flags: the max is the or
    sent += 4u * params.size();
    sent += fetch_rows(unselected_rows_by_owner(
        [&](std::size_t p, std::int64_t c) { return !is_finite(plan.scores(p)[c]); }));
    rest_ready_ = rest;
    return sent;
  }

  /// A selection step, between the plan's importance and its top-k: with the L1 importance
  /// (computed after the prologue, from zeros on the other blocks' host-set rows) the scores by
  /// owner again; with sq_l2 finish_norms() did. Synchronizes `stream`. Returns the bytes sent.
  std::uint64_t complete_importance(channel_norm kind, cudaStream_t stream) {
    if (kind == channel_norm::sq_l2) {
      return 0;
    }
    ctx_.backend().synchronize(stream);
    return gather_scores();
  }

  /// A selection step, its new device sets `sets` chosen (before the migration): the rows that
  /// enter a device set were host-set rows, so only their owners hold their mean; every rank
  /// fetches them into its mean gradient (the device update reads them). Returns the bytes sent.
  std::uint64_t fetch_entering(const std::vector<std::vector<std::int32_t>>& sets, cudaStream_t) {
    return fetch_rows(unselected_rows_by_owner([&](std::size_t p, std::int64_t c) {
      return p < sets.size() &&
             std::binary_search(sets[p].begin(), sets[p].end(), static_cast<std::int32_t>(c));
    }));
  }

  /// After the step's packs (which added masses of zeros on the other blocks' rows), with the
  /// `rest` of finish_norms(): the one-rank rest masses over the host sets as they are now (a
  /// selection step's new ones), written over the record's rest words on `pack_stream` (computed
  /// on the host: nothing for `stream` to order). Returns the bytes sent.
  template <class Order>
  std::uint64_t write_rest(cudaStream_t /*stream*/, cudaStream_t pack_stream, Order&& /*order*/) {
    if (!rest_ready_) {
      return 0;
    }
    rest_ready_ = false;
    const std::uint64_t sent = rest_masses();
    if (rest_.empty()) {
      return sent;
    }
    // Pinned at setup (one float per matrix). The copy reads h_rest_ when the stream runs it;
    // the next write is after a synchronize.
    std::copy(rest_.begin(), rest_.end(), h_rest_.data());
    ctx_.backend().copy_h2d(ctx_.plan->exposed().record_rest(), h_rest_.data(), rest_.size() * 4,
                            pack_stream);
    return sent;
  }

private:
  [[nodiscard]] static bool split(const param_info& pi) noexcept { return context::split(pi); }

  /// f(c) for the host-set channels of split matrix `pi` inside `blk` (ascending).
  template <class HostParam, class F>
  static void for_owned_unselected(const param_info& pi,
                                   const HostParam& h,
                                   std::pair<std::int64_t, std::int64_t> blk,
                                   F&& f) {
    if (!split(pi)) {
      return;
    }
    auto lo = std::lower_bound(h.host_set.begin(), h.host_set.end(), blk.first);
    const auto hi = std::lower_bound(lo, h.host_set.end(), blk.first + blk.second);
    for (; lo != hi; ++lo) {
      f(static_cast<std::int64_t>(*lo));
    }
  }

  /// Per owner, the {parameter, channel} of its host-set rows of split matrices with keep(p, c).
  template <class Keep>
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> unselected_rows_by_owner(Keep&& keep) const {
    const int ranks = ctx_.comm->size();
    const auto& params = *ctx_.params;
    const Host& host = *ctx_.host;
    const block_fn& block = ctx_.block;
    std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> rows(static_cast<std::size_t>(ranks));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      for (std::size_t p = 0; p < params.size(); ++p) {
        for_owned_unselected(params[p], host[p], block(p, static_cast<int>(r)), [&](std::int64_t c) {
          if (keep(p, c)) {
            rows[r].emplace_back(p, c);
          }
        });
      }
    }
    return rows;
  }

  /// Byte offset of element (c, i) of `pi`'s gradient.
  static std::size_t element_at(const param_info& pi, std::int64_t c, std::int64_t i) {
    const std::int64_t e = pi.layout == channel_layout::contiguous ? c * pi.ld + i : i * pi.ld + c;
    return static_cast<std::size_t>(e) * pi.elem_bytes();
  }

  /// Each score of a split matrix from its owner's block (one float per channel, in rank order),
  /// into every rank's scores(p). Returns the bytes sent.
  std::uint64_t gather_scores() {
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    const block_fn& block = ctx_.block;
    const auto plan = ctx_.plan->exposed();
    const auto ranks = static_cast<std::size_t>(comm.size());
    const auto me = comm.rank();
    std::vector<std::size_t> sizes(ranks, 0);
    std::vector<float> all;
    std::size_t at = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      at = static_cast<int>(r) == me ? all.size() : at;
      for (std::size_t p = 0; p < params.size(); ++p) {
        if (split(params[p])) {
          const auto [first, count] = block(p, static_cast<int>(r));
          const float* s = plan.scores(p) + first;
          all.insert(all.end(), s, s + count);
          sizes[r] += static_cast<std::size_t>(count) * 4;
        }
      }
    }
    comm.all_gather_bytes(all.data() + at, all.data(), sizes, nullptr);
    std::size_t g = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      for (std::size_t p = 0; p < params.size(); ++p) {
        if (split(params[p])) {
          const auto [first, count] = block(p, static_cast<int>(r));
          std::copy_n(all.data() + g, count, plan.scores(p) + first);
          g += static_cast<std::size_t>(count);
        }
      }
    }
    return sizes[static_cast<std::size_t>(me)];
  }

  /// The gradient rows `rows[r]` ({parameter, channel}, owned by rank r) copied from their owners
  /// into every rank's gradient (working type: the owner's bits). Nothing crosses when there is
  /// none (every rank computes the same lists, so every rank skips the collective).
  std::uint64_t fetch_rows(const std::vector<std::vector<std::pair<std::size_t, std::int64_t>>>& rows) {
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    const auto ranks = static_cast<std::size_t>(comm.size());
    if (std::all_of(rows.begin(), rows.end(), [](const auto& v) { return v.empty(); })) {
      return 0;
    }
    std::vector<std::size_t> sizes(ranks, 0);
    std::size_t total = 0;
    std::size_t at = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      at = static_cast<int>(r) == comm.rank() ? total : at;
      for (const auto& [p, c] : rows[r]) {
        sizes[r] += params[p].channel_bytes();
      }
      total += sizes[r];
    }
    std::vector<std::byte> buf(total);
    auto walk = [&](std::size_t r, std::size_t o, bool out) {
      for (const auto& [p, c] : rows[r]) {
        const param_info& pi = params[p];
        auto* g = static_cast<std::byte*>(const_cast<void*>(pi.step_grads)); // the mean buffer
        for (std::int64_t i = 0; i < pi.channel_len; ++i, o += pi.elem_bytes()) {
          std::byte* e = g + element_at(pi, c, i);
          if (out) {
            std::memcpy(buf.data() + o, e, pi.elem_bytes());
          } else {
            std::memcpy(e, buf.data() + o, pi.elem_bytes());
          }
        }
      }
    };
    const auto me = static_cast<std::size_t>(comm.rank());
    walk(me, at, true);
    comm.all_gather_bytes(buf.data() + at, buf.data(), sizes, nullptr);
    for (std::size_t r = 0, o = 0; r < ranks; o += sizes[r], ++r) {
      if (r != me) {
        walk(r, o, false);
      }
    }
    return sizes[me];
  }

  /// Zen-auto's rest mass of every matrix with the one-rank bits: the owners' per-row L1 of their
  /// host-set rows (l1_row: the packs' order) all-gathered, then per D2H slot the rows in order
  /// from 0, the slots added in order into the mass from 0 (d2h_stream's push_gradients).
  std::uint64_t rest_masses() {
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    const Host& host = *ctx_.host;
    const block_fn& block = ctx_.block;
    const std::size_t slot_bytes = ctx_.slot_bytes;
    const auto ranks = static_cast<std::size_t>(comm.size());
    const auto me = comm.rank();
    std::vector<std::size_t> sizes(ranks, 0);
    std::vector<float> all;
    std::size_t at = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t start = all.size();
      at = static_cast<int>(r) == me ? start : at;
      for (std::size_t p = 0; p < params.size(); ++p) {
        const param_info& pi = params[p];
        const auto& h = host[p];
        // Row `pos` of the host set, in the packs' order (lanes for contiguous channels).
        const l1_mass_item a{pi.step_grads,
                             pi.type,
                             pi.channels,
                             pi.channel_len,
                             pi.ld,
                             pi.layout,
                             pi.layout == channel_layout::contiguous,
                             h.host_set.data()};
        const auto blk = block(p, static_cast<int>(r));
        auto pos = static_cast<std::int64_t>(
            std::lower_bound(h.host_set.begin(), h.host_set.end(), blk.first) - h.host_set.begin());
        for_owned_unselected(pi, h, blk, [&](std::int64_t) {
          all.push_back(static_cast<int>(r) == me ? l1_row(a, pos) : 0.0f); // others': gathered
          ++pos;
        });
      }
      sizes[r] = (all.size() - start) * 4;
    }
    comm.all_gather_bytes(all.data() + at, all.data(), sizes, nullptr);
    // Back into host-set order per matrix: the blocks are contiguous and in rank order, so the
    // gathered rows of a matrix are its host set in order, rank by rank.
    rest_.clear();
    std::vector<std::size_t> cursor(ranks, 0);
    for (std::size_t r = 1; r < ranks; ++r) {
      cursor[r] = cursor[r - 1] + sizes[r - 1] / 4;
    }
    for (std::size_t p = 0; p < params.size(); ++p) {
      const param_info& pi = params[p];
      if (!pi.matrix) {
        continue;
      }
      std::vector<float> row_l1;
      for (std::size_t r = 0; r < ranks; ++r) {
        for_owned_unselected(pi, host[p], block(p, static_cast<int>(r)),
                             [&](std::int64_t) { row_l1.push_back(all[cursor[r]++]); });
      }
      float mass = 0.0f;
      const auto n = static_cast<std::int64_t>(row_l1.size());
      const std::int64_t per_slot = pi.rows_per_slot(slot_bytes); // the packs' calls, summed alike
      for (std::int64_t s = 0; s < n; s += per_slot) {
        float sum = 0.0f;
        for (std::int64_t r = s; r < std::min(n, s + per_slot); ++r) {
          sum += row_l1[static_cast<std::size_t>(r)];
        }
        mass += sum;
      }
      rest_.push_back(mass);
    }
    return sizes[static_cast<std::size_t>(me)];
  }

  std::vector<float> rest_; // per matrix, for write_rest()
  bool rest_ready_ = false;
  context ctx_;
  typename Backend::template host_buffer<float> h_rest_;
};

} // namespace detail
ZF_NAMESPACE_END
