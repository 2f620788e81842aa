/// @file
/// Member definitions of `detail::device_owner_reduction` (device_owner_reduction.hpp): setup's
/// allocations, a selection's entering rows, and the rebuild of the index lists, the reduction's
/// layout and the masses' descriptors when a host set changed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/dp/device_owner_reduction_decl.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Comm, class Host>
std::size_t device_owner_reduction<Backend, Comm, Host>::setup(const context& ctx) {
  ctx_ = ctx;
  const auto& params = *ctx.params;
  block_ = ctx.block;
  me_ = ctx.comm->rank();
  ranks_ = ctx.comm->size();
  slot_bytes_ = ctx.slot_bytes;
  const int ranks = ranks_;
  const std::size_t slot_bytes = slot_bytes_;
  chan_off_.assign(params.size(), -1);
  // Everything at its largest (a host set of every channel: the warm-up's, offload_sync's), so
  // that nothing is allocated after initialize().
  std::int64_t channels = 0, all = 0, entering = 0, split_params = 0, slots = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    all += pi.channels;
    if (split(pi)) {
      chan_off_[p] = channels;
      channels += pi.channels;
      entering += pi.device_capacity;
      ++split_params;
      slots += (pi.channels + pi.rows_per_slot(slot_bytes) - 1) / pi.rows_per_slot(slot_bytes);
    }
  }
  matrices_ = std::count_if(params.begin(), params.end(), [](const param_info& pi) { return pi.matrix; });
  scores_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(channels, 1)));
  rescan_ = dbuf<double>(scores_.size());
  row_l1_ = dbuf<float>(scores_.size());
  idx_ = dbuf<std::int32_t>(static_cast<std::size_t>(std::max<std::int64_t>(all, 1)));
  enter_idx_ = dbuf<std::int32_t>(static_cast<std::size_t>(std::max<std::int64_t>(entering, 1)));
  rest_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(matrices_, 1)));
  junk_ = dbuf<float>(rest_.size());
  slot_sums_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(slots, 1)));
  const auto items = static_cast<std::size_t>(std::max<std::int64_t>(split_params, 1));
  // A selection's entering rows: this rank's of each split matrix, and every other owner's.
  enter_gathers_ = row_copy_table<Backend>(items);
  enter_scatters_ = row_copy_table<Backend>(items * static_cast<std::size_t>(std::max(ranks - 1, 1)));
  rescan_items_ = dbuf<sq_rescan_item>(items);
  own_l1_ = dbuf<l1_mass_item>(items);
  matrix_calls_ = dbuf<l1_mass_item>(items);
  slot_calls_ = dbuf<l1_mass_item>(slot_sums_.size());
  for (mirror& m : mirrors_) { // pinned, at their largest: what the uploads read
    m.idx_up = hbuf<std::int32_t>(idx_.size());
    m.rescans_up = hbuf<sq_rescan_item>(rescan_items_.size());
    m.own_l1_up = hbuf<l1_mass_item>(own_l1_.size());
    m.slots_up = hbuf<l1_mass_item>(slot_calls_.size());
    m.matrices_up = hbuf<l1_mass_item>(matrix_calls_.size());
  }
  enter_idx_up_ = hbuf<std::int32_t>(enter_idx_.size());
  inputs_.score_rescans.assign(params.size(), nullptr);
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (chan_off_[p] >= 0) {
      inputs_.score_rescans[p] = rescan_.data() + chan_off_[p];
    }
  }
  versions_.assign(params.size(), ~std::uint64_t{0});
  return (scores_.size() + row_l1_.size() + idx_.size() + enter_idx_.size()) * 4 + rescan_.size() * 8 +
         (rest_.size() + junk_.size() + slot_sums_.size()) * 4 +
         items * (sizeof(sq_rescan_item) + 2 * sizeof(l1_mass_item)) +
         slot_calls_.size() * sizeof(l1_mass_item) +
         (enter_gathers_.items.size() + enter_scatters_.items.size()) * sizeof(row_copy_item);
}

template <class Backend, class Comm, class Host>
std::uint64_t device_owner_reduction<Backend, Comm, Host>::fetch_entering(
    const std::vector<std::vector<std::int32_t>>& sets, cudaStream_t stream) {
  const Backend& b = ctx_.backend();
  auto& comm = *ctx_.comm;
  const auto& params = *ctx_.params;
  const Host& host = *ctx_.host;
  // Per owner r, per matrix p: the entering rows (ascending), their place in the staging bytes.
  // Rows of a 4-byte type must start 4-byte aligned there (a GPU's float access): with such a
  // matrix among the split ones, each matrix's rows take a multiple of 4 bytes (2 bytes of
  // padding after an odd number of 2-byte elements; none in an engine of one working type).
  const auto R = static_cast<std::size_t>(ranks_);
  std::size_t align = 1;
  for (const auto& pi : params) {
    align = split(pi) && dtype_size(pi.type) == 4 ? 4 : align;
  }
  const auto padded = [align](std::size_t bytes) { return (bytes + align - 1) / align * align; };
  std::vector<std::int32_t> idx;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> at(R); // {idx offset, count} per p
  for (std::size_t r = 0; r < R; ++r) {
    at[r].assign(params.size(), {0, 0});
    for (std::size_t p = 0; p < params.size() && p < sets.size(); ++p) {
      if (!split(params[p])) {
        continue;
      }
      const auto [first, count] = block_(p, static_cast<int>(r));
      const auto& hs = host[p].host_set;
      const std::size_t start = idx.size();
      for (auto c = std::lower_bound(hs.begin(), hs.end(), first); c != hs.end() && *c < first + count; ++c) {
        if (std::binary_search(sets[p].begin(), sets[p].end(), *c)) {
          idx.push_back(*c);
        }
      }
      at[r][p] = {start, idx.size() - start};
    }
  }
  if (idx.empty()) {
    return 0; // every rank computes the same lists: every rank skips the collective
  }
  std::copy(idx.begin(), idx.end(), enter_idx_up_.data()); // pinned (setup), at most enter_idx_'s size
  b.copy_h2d(enter_idx_.data(), enter_idx_up_.data(), idx.size() * 4, stream);
  // As many matrices at a time as the staging holds (one always does: it holds a device set's
  // fp32 state), each group one all-gather: the rows in owner order, each owner's matrix by matrix
  // in the working type, this rank's gathered there from its mean gradient, the others' scattered
  // from there into it after the all-gather; one batched row copy each way per group, every
  // group's items uploaded at once, so that the groups follow each other in stream order with
  // no host wait between them.
  auto* stage = ctx_.stage;
  struct group {
    std::vector<std::size_t> sizes;
    std::size_t mine_at = 0;
  };
  std::vector<group> groups;
  std::vector<row_copy_item> mine, others;
  std::vector<int> n_mine, n_others;
  for (std::size_t p0 = 0; p0 < params.size();) {
    std::size_t p1 = p0, bytes = 0;
    for (; p1 < params.size(); ++p1) {
      std::size_t add = 0;
      for (std::size_t r = 0; r < R; ++r) {
        add += padded(at[r][p1].second * params[p1].channel_bytes());
      }
      if (p1 > p0 && bytes + add > ctx_.stage_bytes) {
        break;
      }
      bytes += add;
    }
    require(bytes <= ctx_.stage_bytes, "zenflow::engine", "stage",
            "holds fewer bytes than one matrix's entering rows (an internal error)");
    group gr;
    gr.sizes.assign(R, 0);
    const std::size_t mine_first = mine.size(), others_first = others.size();
    std::size_t off = 0;
    for (std::size_t r = 0; r < R; ++r) {
      gr.mine_at = static_cast<int>(r) == me_ ? off : gr.mine_at;
      for (std::size_t p = p0; p < p1; ++p) {
        const auto [i, n] = at[r][p];
        const auto& pi = params[p];
        if (n > 0) {
          (static_cast<int>(r) == me_ ? mine : others)
              .push_back({const_cast<void*>(pi.step_grads), pi.type, pi.channels, pi.channel_len, pi.ld,
                          pi.layout, enter_idx_.data() + i, static_cast<std::int64_t>(n), stage + off,
                          pi.type});
        }
        const std::size_t rows = padded(n * pi.channel_bytes());
        gr.sizes[r] += rows;
        off += rows;
      }
    }
    p0 = p1;
    if (off > 0) { // the same on every rank
      n_mine.push_back(static_cast<int>(mine.size() - mine_first));
      n_others.push_back(static_cast<int>(others.size() - others_first));
      groups.push_back(std::move(gr));
    }
  }
  const auto gathers = enter_gathers_.assign_ranges(b, mine, n_mine, stream);
  const auto scatters = enter_scatters_.assign_ranges(b, others, n_others, stream);
  std::uint64_t sent = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    enter_gathers_.run_range(b, gathers[g], row_copy_direction::gather, stream,
                             "zenflow::engine: entering rows' gradients");
    comm.all_gather_bytes(stage + groups[g].mine_at, stage, groups[g].sizes, stream);
    enter_scatters_.run_range(b, scatters[g], row_copy_direction::scatter, stream,
                              "zenflow::engine: entering rows' gradients");
    sent += groups[g].sizes[static_cast<std::size_t>(me_)];
  }
  b.synchronize(stream); // `idx` and the tables' host copies are freed on return
  return sent;
}

template <class Backend, class Comm, class Host>
void device_owner_reduction<Backend, Comm, Host>::rebuild(cudaStream_t stream) {
  const Backend& b = ctx_.backend();
  const auto& params = *ctx_.params;
  const Host& host = *ctx_.host;
  const auto plan = ctx_.plan->exposed();
  bool same = true;
  for (std::size_t p = 0; p < params.size(); ++p) {
    same = same && versions_[p] == host[p].host_set_version;
  }
  if (same) {
    return;
  }
  const auto R = static_cast<std::size_t>(ranks_);
  mirror_ ^= 1;
  auto& h = mirrors_[mirror_];
  h.idx.clear();
  h.rescans.clear();
  h.own_l1.clear();
  h.slots.clear();
  h.matrices.clear();
  lists_.assign(params.size(), {});
  rows_total_ = 0;
  rescan_max_ = own_l1_max_ = 0;
  // Per parameter its all-reduced rows, then the host-set rows: the owners' blocks in rank order.
  std::vector<std::int64_t> row_at(params.size(), 0), slots_at(params.size(), 0);
  std::int64_t slots = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    auto& l = lists_[p];
    const auto& hs = host[p].host_set;
    versions_[p] = host[p].host_set_version;
    l.pos.assign(R, 0);
    const std::size_t start = h.idx.size();
    auto next = hs.begin();
    for (std::int32_t c = 0; c < pi.channels; ++c) { // the rows all-reduced, ascending
      const bool unselected = split(pi) && next != hs.end() && *next == c;
      next += unselected ? 1 : 0;
      if (!unselected) {
        h.idx.push_back(c);
      }
    }
    l.dense = static_cast<std::int64_t>(h.idx.size() - start);
    l.idx = idx_.data() + start; // the host set follows: the owners' blocks in rank order
    if (!split(pi)) {
      continue;
    }
    h.idx.insert(h.idx.end(), hs.begin(), hs.end());
    std::int64_t own_rows = 0;
    for (std::size_t r = 0; r < R; ++r) {
      const auto [first, count] = block_(p, static_cast<int>(r));
      const auto lo = std::lower_bound(hs.begin(), hs.end(), first);
      const auto hi = std::lower_bound(lo, hs.end(), first + count);
      l.pos[r] = lo - hs.begin();
      own_rows = static_cast<int>(r) == me_ ? hi - lo : own_rows;
    }
    const auto n = static_cast<std::int64_t>(hs.size());
    row_at[p] = rows_total_;
    rows_total_ += n;
    const sq_total_item src{pi.step_grads, plan.scores(p), pi.channels, pi.channel_len,
                            pi.ld,         pi.layout,      pi.type,     nullptr};
    const auto [first, count] = block_(p, me_);
    h.rescans.push_back({src, first, count, rescan_.data() + chan_off_[p]});
    rescan_max_ = std::max(rescan_max_, count);
    const auto me = static_cast<std::size_t>(me_);
    l1_mass_item own{pi.step_grads,
                     pi.type,
                     pi.channels,
                     pi.channel_len,
                     pi.ld,
                     pi.layout,
                     pi.layout == channel_layout::contiguous};
    own.idx = l.idx + l.dense + l.pos[me];
    own.count = own_rows;
    own.row_l1 = row_l1_.data() + row_at[p] + l.pos[me];
    own.l1 = junk_.data() + h.own_l1.size(); // the rows are what is wanted here, not their sum
    h.own_l1.push_back(own);
    own_l1_max_ = std::max(own_l1_max_, own.count);
    slots_at[p] = slots;
    slots += n == 0 ? 0 : (n + pi.rows_per_slot(slot_bytes_) - 1) / pi.rows_per_slot(slot_bytes_);
  }
  // The rest masses: per D2H slot the rows in order, then per matrix the slots in order.
  for (std::size_t p = 0, m = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    if (!pi.matrix) {
      continue;
    }
    if (split(pi) && !host[p].host_set.empty()) {
      const auto n = static_cast<std::int64_t>(host[p].host_set.size());
      const std::int64_t per_slot = pi.rows_per_slot(slot_bytes_);
      l1_mass_item sum{};
      for (std::int64_t s = 0, k = 0; s < n; s += per_slot, ++k) {
        sum.row_l1 = row_l1_.data() + row_at[p] + s;
        sum.count = std::min(n, s + per_slot) - s;
        sum.l1 = slot_sums_.data() + slots_at[p] + k;
        h.slots.push_back(sum);
      }
      sum.row_l1 = slot_sums_.data() + slots_at[p];
      sum.count = (n + per_slot - 1) / per_slot;
      sum.l1 = rest_.data() + m;
      h.matrices.push_back(sum);
    }
    ++m;
  }
  rescan_count_ = h.rescans.size();
  own_l1_count_ = h.own_l1.size();
  slot_call_count_ = h.slots.size();
  matrix_call_count_ = h.matrices.size();
  upload(b, idx_, h.idx, h.idx_up, stream);
  upload(b, rescan_items_, h.rescans, h.rescans_up, stream);
  upload(b, own_l1_, h.own_l1, h.own_l1_up, stream);
  upload(b, slot_calls_, h.slots, h.slots_up, stream);
  upload(b, matrix_calls_, h.matrices, h.matrices_up, stream);
}

} // namespace detail
ZF_NAMESPACE_END
