/// @file
/// The device plan's selection steps and state transfers: the top-k of a matrix's scores, the
/// migration of the rows that change sides (in place), the host set's upload, and the reads and
/// writes of the device-resident state (engine::state(), checkpoints). Written once over the
/// backend; included by device_plan_impl.hpp. migrate() reads as its parts: the index lists,
/// leaving rows home, kept rows moved, entering rows installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <zenflow/engine/detail/plan/device_plan_decl.hpp>
#include <zenflow/engine/detail/plan/moment_rows.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
void device_plan<Backend>::importance(channel_norm kind, cudaStream_t stream) {
  importance_ = kind;
  if (kind == channel_norm::l1) { // the prologue computed squared L2: L1 of every matrix instead
    for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
      using T = decltype(tag);
      std::vector<std::size_t> matrices;
      std::size_t moved = 0;
      for (const std::size_t p : members) {
        if (info(p).matrix) {
          matrices.push_back(p);
          moved += static_cast<std::size_t>(info(p).elements()) * sizeof(T);
        }
      }
      if (matrices.empty()) {
        return;
      }
      b_.run(
          stream, moved, "zenflow::engine: channel_norms_batched",
          [items = norm_items<T>(matrices), temp = temp_.data(), bytes = temp_.size()](auto prim, auto on) {
            std::size_t temp_bytes = bytes;
            return prim.template channel_norms_batched<channel_norm::l1>(
                temp, temp_bytes, items.data(), static_cast<std::int64_t>(items.size()),
                channel_norm_extras{}, on);
          });
    });
  }
}

template <class Backend>
topk_item device_plan<Backend>::topk_of(std::size_t p) const {
  const auto& w = whole_[p];
  if (w.channels > 0) {
    return {w.scores, w.channels, w.k, nullptr, nullptr, w.rescans};
  }
  return {dev_[p].scores.data(), info(p).channels, info(p).device_capacity, nullptr, nullptr, wide_of_[p]};
}

template <class Backend>
bool device_plan<Backend>::select_top(std::vector<std::vector<std::int32_t>>& sets,
                                      std::size_t& d2h,
                                      cudaStream_t stream) {
  // sq_l2: a channel whose fp32 score overflowed ranks by its fp64 rescan (zero where the score
  // is finite: only +Inf scores read it), computed here unless plan_inputs gave them.
  const bool wide = importance_ == channel_norm::sq_l2;
  if (wide && wide_count_ > 0) {
    b_.run(stream, 0, "zenflow::engine: sq_rescan",
           [items = wide_items_.data(), n = wide_count_, max = wide_max_](auto prim, auto on) {
             return prim.sq_norm_rescan(items, n, max, on);
           });
  }
  std::vector<topk_item> items;
  std::vector<std::size_t> which;
  std::size_t at = 0;
  for (std::size_t p = 0; p < dev_.size(); ++p) {
    const param_info& pi = info(p);
    if (pi.matrix) {
      items.push_back(topk_of(p));
      items.back().indices = sel_idx_.data() + at;
      items.back().wide = wide ? items.back().wide : nullptr;
      which.push_back(p);
      at += static_cast<std::size_t>(items.back().k);
    }
  }
  std::size_t scanned = 0;
  for (const auto& it : items) {
    scanned += static_cast<std::size_t>(it.n) * 4;
  }
  b_.run(stream, scanned, "zenflow::engine: topk_segmented",
         [items, temp = temp_.data(), bytes = temp_.size()](auto prim, auto on) {
           std::size_t temp_bytes = bytes;
           return prim.topk_segmented(temp, temp_bytes, items.data(), static_cast<std::int64_t>(items.size()),
                                      topk_order::ascending_index, on);
         });
  // The sets and the flag in one readback: the selection step's one wait.
  b_.copy_d2d(sel_idx_.data() + at, step_record_layout::skip(record_words()), 4, stream);
  b_.copy_d2h(h_sel_.data(), sel_idx_.data(), (at + 1) * 4, stream);
  b_.synchronize(stream);
  d2h += (at + 1) * 4;
  sets.assign(dev_.size(), {});
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::int32_t* first = h_sel_.data() + (items[i].indices - sel_idx_.data());
    const auto& w = whole_[which[i]];
    if (w.channels == 0) {
      sets[which[i]].assign(first, first + items[i].k);
      continue;
    }
    // A range of the matrix: the top-k's channels in it (ascending), as range indices.
    const auto lo = static_cast<std::int32_t>(w.first);
    const auto hi = static_cast<std::int32_t>(w.first + info(which[i]).channels);
    auto& set = sets[which[i]];
    for (const std::int32_t* c = first; c != first + items[i].k; ++c) {
      if (*c >= lo && *c < hi) {
        set.push_back(*c - lo);
      }
    }
  }
  lists_at_ = 0; // the last selection's lists were copied before this wait
  std::uint32_t skip = 0;
  std::memcpy(&skip, h_sel_.data() + at, 4);
  return skip != 0;
}

/// A migration's index lists, written into the host lists at its matrix's own place: what the
/// device reads ([leave | keep old | keep new | enter | new set] at `base` in the host and device
/// lists; `dev` points there, each list at its offset from it), and the host rows of the leaving
/// and entering rows (`leave_ch`, `enter_ch`: indices into the host rows); and the matrix's
/// compact device rows they move (master, m, v: `cap` rows of `len`) and counts.
struct migration_lists {
  std::size_t base = 0;
  const std::int32_t* dev = nullptr;
  std::size_t words = 0;
  std::int64_t leave = 0, keep_old = 0, keep_new = 0, enter = 0, sel = 0;
  std::int64_t nl = 0, nk = 0, ne = 0; // rows leaving, kept, entering
  std::vector<std::int32_t> leave_ch, enter_ch;
  std::int64_t len = 0, cap = 0;
  float* rows[3] = {};
  std::int32_t* counts = nullptr;
};

template <class Backend>
template <class M, class W>
std::pair<std::size_t, std::size_t> device_plan<Backend>::migrate(std::size_t p,
                                                                  const std::vector<std::int32_t>& old_sel,
                                                                  const std::vector<std::int32_t>& new_sel,
                                                                  const basic_channel_state<M>& host_rows,
                                                                  std::int64_t host_first,
                                                                  const entering_rows<W>* on_device,
                                                                  cudaStream_t stream) {
  auto& d = dev_[p];
  migration_lists l = index_lists(old_sel, new_sel, host_rows.channels, host_first);
  l.len = info(p).channel_len;
  l.cap = info(p).device_capacity;
  l.rows[0] = d.master.data();
  l.rows[1] = d.m.data();
  l.rows[2] = d.v.data();
  l.counts = d.counts.data();
  if (dense_slot_[p] >= 0) { // a vector's count lives in the dense array: d.counts stages it
    b_.copy_d2d(d.counts.data(), counts_of(p), 4, stream);
  }
  b_.copy_h2d(lists_.data() + l.base, h_lists_.data() + l.base, l.words * 4, stream);
  rows_home(l, host_rows, stream);
  move_kept_rows(l, stream);
  install_entering_rows(l, host_rows, on_device, stream);
  if (dense_slot_[p] >= 0) {
    b_.copy_d2d(counts_of(p), d.counts.data(), 4, stream);
  }
  b_.copy_d2d(d.sel.data(), l.dev + l.sel, new_sel.size() * 4, stream);
  d.k = static_cast<std::int64_t>(new_sel.size());
  batch_.dirty = true;
  b_.copier().record(migrated_, stream);
  migration_recorded_ = true;
  const std::size_t row = static_cast<std::size_t>(l.len) * 12 + 4;
  return {static_cast<std::size_t>(l.nl) * row,
          (on_device != nullptr ? 0 : static_cast<std::size_t>(l.ne) * row) + l.words * 4};
}

template <class Backend>
migration_lists device_plan<Backend>::index_lists(const std::vector<std::int32_t>& old_sel,
                                                  const std::vector<std::int32_t>& new_sel,
                                                  std::int64_t host_channels,
                                                  std::int64_t host_first) {
  std::vector<std::int32_t> leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch;
  diff_selection(old_sel, new_sel, leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < leave_ch.size(); ++i) {
    if (leave_ch[i] >= host_first && leave_ch[i] < host_first + host_channels) {
      leave_pos[kept] = leave_pos[i];
      leave_ch[kept++] = leave_ch[i] - static_cast<std::int32_t>(host_first);
    }
  }
  leave_pos.resize(kept);
  leave_ch.resize(kept);
  for (auto& c : enter_ch) { // indices into host_rows (read only without on_device)
    c -= static_cast<std::int32_t>(host_first);
  }
  // At this matrix's own place in the lists: the copy up runs later, and nothing rewrites it before.
  migration_lists l;
  std::int32_t* hi = h_lists_.data() + lists_at_;
  l.base = lists_at_;
  l.dev = lists_.data() + lists_at_;
  std::int64_t o = 0;
  const auto put = [&](const std::vector<std::int32_t>& v) {
    std::copy(v.begin(), v.end(), hi + o);
    const std::int64_t at = o;
    o += static_cast<std::int64_t>(v.size());
    return at;
  };
  l.leave = put(leave_pos);
  l.keep_old = put(keep_old);
  l.keep_new = put(keep_new);
  l.enter = put(enter_pos);
  l.sel = put(new_sel);
  l.words = static_cast<std::size_t>(o);
  lists_at_ += l.words;
  l.nl = static_cast<std::int64_t>(leave_pos.size());
  l.nk = static_cast<std::int64_t>(keep_old.size());
  l.ne = static_cast<std::int64_t>(enter_pos.size());
  l.leave_ch = std::move(leave_ch);
  l.enter_ch = std::move(enter_ch);
  return l;
}

// The host side of the stage (h_stage_, h_stage_counts_) is read and written only by the copies
// and host tasks of the migration's stream, in stream order: the next matrix reuses it safely.

template <class Backend>
template <class M>
void device_plan<Backend>::rows_home(migration_lists& l,
                                     const basic_channel_state<M>& host_rows,
                                     cudaStream_t stream) {
  const std::int64_t nl = l.nl;
  const std::int64_t L = l.len;
  if (nl == 0) {
    return;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(L) * 4;
  float* const hs = h_stage_.data();
  std::int32_t* const hc = h_stage_counts_.data();
  for (int a = 0; a < 3; ++a) {
    gather(compact(static_cast<const float*>(l.rows[a]), l.cap, L), l.dev + l.leave, nl,
           stage_.data() + a * nl * L, nullptr, stream);
  }
  move_counts(l.counts, l.dev + l.leave, stage_counts_.data(), nullptr, nl, stream);
  b_.copy_d2h(hs, stage_.data(), static_cast<std::size_t>(3 * nl) * row_bytes, stream);
  b_.copy_d2h(hc, stage_counts_.data(), static_cast<std::size_t>(nl) * 4, stream);
  b_.host_task(stream, "zenflow::engine: migration, leaving rows home",
               [host_rows, hs, hc, L, nl, row_bytes, leave_ch = std::move(l.leave_ch)] {
                 for (std::int64_t r = 0; r < nl; ++r) {
                   const std::int64_t c = leave_ch[static_cast<std::size_t>(r)];
                   std::memcpy(host_rows.master + c * L, hs + r * L, row_bytes);
                   store_moment_rows(host_rows.m + c * L, host_rows.v + c * L, hs + (nl + r) * L,
                                     hs + (2 * nl + r) * L, static_cast<std::size_t>(L));
                   host_rows.counts[c] = hc[r];
                 }
               });
}

template <class Backend>
void device_plan<Backend>::move_kept_rows(const migration_lists& l, cudaStream_t stream) {
  // In place: each array's kept rows are all gathered into the stage before the scatter writes
  // any of them (stream order), and the rows they land on were kept rows (already gathered) or
  // leaving rows (already home). No second set of buffers: the stage holds the largest matrix's
  // selected state, not every matrix's.
  if (l.nk == 0) {
    return;
  }
  for (float* rows : l.rows) {
    gather(compact(static_cast<const float*>(rows), l.cap, l.len), l.dev + l.keep_old, l.nk, stage_.data(),
           nullptr, stream);
    scatter(stage_.data(), l.dev + l.keep_new, l.nk, compact(rows, l.cap, l.len), stream);
  }
  move_counts(l.counts, l.dev + l.keep_old, stage_counts_.data(), nullptr, l.nk, stream);
  move_counts(stage_counts_.data(), nullptr, l.counts, l.dev + l.keep_new, l.nk, stream);
}

template <class Backend>
template <class M, class W>
void device_plan<Backend>::install_entering_rows(migration_lists& l,
                                                 const basic_channel_state<M>& host_rows,
                                                 const entering_rows<W>* on_device,
                                                 cudaStream_t stream) {
  const std::int64_t ne = l.ne;
  const std::int64_t L = l.len;
  const std::int32_t* at = l.dev + l.enter;
  if (ne > 0 && on_device != nullptr) { // gathered from their owners already
    scatter(on_device->master, at, ne, compact(l.rows[0], l.cap, L), stream);
    scatter(on_device->m, at, ne, compact(l.rows[1], l.cap, L), stream);
    scatter(on_device->v, at, ne, compact(l.rows[2], l.cap, L), stream);
    move_counts(on_device->counts, nullptr, l.counts, at, ne, stream);
  } else if (ne > 0) { // staged by a host task from the host rows, in stream order
    const std::size_t row_bytes = static_cast<std::size_t>(L) * 4;
    float* const hs = h_stage_.data();
    std::int32_t* const hc = h_stage_counts_.data();
    b_.host_task(stream, "zenflow::engine: migration, entering rows staged",
                 [host_rows, hs, hc, L, ne, row_bytes, enter_ch = std::move(l.enter_ch)] {
                   for (std::int64_t r = 0; r < ne; ++r) {
                     const std::int64_t c = enter_ch[static_cast<std::size_t>(r)];
                     std::memcpy(hs + r * L, host_rows.master + c * L, row_bytes);
                     load_moment_row(hs + (ne + r) * L, host_rows.m + c * L, static_cast<std::size_t>(L));
                     load_moment_row(hs + (2 * ne + r) * L, host_rows.v + c * L, static_cast<std::size_t>(L));
                     hc[r] = host_rows.counts[c];
                   }
                 });
    b_.copy_h2d(stage_.data(), hs, static_cast<std::size_t>(3 * ne) * row_bytes, stream);
    b_.copy_h2d(stage_counts_.data(), hc, static_cast<std::size_t>(ne) * 4, stream);
    for (int a = 0; a < 3; ++a) {
      scatter(stage_.data() + a * ne * L, at, ne, compact(l.rows[a], l.cap, L), stream);
    }
    move_counts(stage_counts_.data(), nullptr, l.counts, at, ne, stream);
  }
}

template <class Backend>
std::size_t device_plan<Backend>::set_host_set(std::size_t p,
                                               const std::vector<std::int32_t>& host_set,
                                               cudaStream_t stream) {
  auto& d = dev_[p];
  if (lists_at_ + host_set.size() > h_lists_.size()) {
    // Only outside a selection step (initialize, a restore), whose lists are sized for one pass:
    // the copies of the earlier lists are done once the stream is.
    b_.synchronize(stream);
    lists_at_ = 0;
  }
  std::int32_t* h = h_lists_.data() + lists_at_; // its own place: the copy runs later
  std::copy(host_set.begin(), host_set.end(), h);
  lists_at_ += host_set.size();
  b_.copy_h2d(d.host_set.data(), h, host_set.size() * 4, stream);
  return host_set.size() * 4;
}

template <class Backend>
template <class M>
param_state device_plan<Backend>::read_full_state(std::size_t p,
                                                  const basic_channel_state<M>* host_rows,
                                                  cudaStream_t stream) {
  const param_info& pi = info(p);
  const auto n = static_cast<std::size_t>(pi.elements());
  const auto channels = static_cast<std::size_t>(pi.channels);
  wait_migration(); // the host rows are final once the last migration's host tasks ran
  param_state out;
  if (host_rows != nullptr) {
    out.master.assign(host_rows->master, host_rows->master + n);
    out.m.resize(n);
    out.v.resize(n);
    load_moment_row(out.m.data(), host_rows->m, n); // bf16 host moments widen exactly
    load_moment_row(out.v.data(), host_rows->v, n);
    out.counts.assign(host_rows->counts, host_rows->counts + channels);
  } else {
    out.master.assign(n, 0.0f);
    out.m = out.master;
    out.v = out.master;
    out.counts.assign(channels, 0);
  }
  std::vector<float> dm, d1, d2;
  std::vector<std::int32_t> dc, ds;
  read_device_state(p, dm, d1, d2, dc, ds, stream);
  const auto L = static_cast<std::size_t>(pi.channel_len);
  for (std::size_t r = 0; r < ds.size(); ++r) {
    const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(ds[r]) * L);
    const auto from = static_cast<std::ptrdiff_t>(r * L);
    std::copy_n(dm.begin() + from, L, out.master.begin() + at);
    std::copy_n(d1.begin() + from, L, out.m.begin() + at);
    std::copy_n(d2.begin() + from, L, out.v.begin() + at);
    out.counts[static_cast<std::size_t>(ds[r])] = dc[r];
  }
  return out;
}

template <class Backend>
void device_plan<Backend>::read_device_state(std::size_t p,
                                             std::vector<float>& master,
                                             std::vector<float>& m,
                                             std::vector<float>& v,
                                             std::vector<std::int32_t>& counts,
                                             std::vector<std::int32_t>& sel,
                                             cudaStream_t stream) {
  const auto& d = dev_[p];
  const auto n = static_cast<std::size_t>(d.k * info(p).channel_len);
  const auto k = static_cast<std::size_t>(d.k);
  master.resize(n);
  m.resize(n);
  v.resize(n);
  counts.resize(k);
  sel.resize(k);
  // Pageable destinations: the copies complete before the synchronize returns on every backend.
  b_.copy_d2h(master.data(), d.master.data(), n * 4, stream);
  b_.copy_d2h(m.data(), d.m.data(), n * 4, stream);
  b_.copy_d2h(v.data(), d.v.data(), n * 4, stream);
  b_.copy_d2h(counts.data(), dense_slot_[p] >= 0 ? counts_of(p) : d.counts.data(), k * 4, stream);
  b_.copy_d2h(sel.data(), d.sel.data(), k * 4, stream);
  b_.synchronize(stream);
}

template <class Backend>
void device_plan<Backend>::write_device_state(std::size_t p,
                                              const device_state_rows& rows,
                                              cudaStream_t stream) {
  auto& d = dev_[p];
  const std::int64_t k = rows.k;
  const auto n = static_cast<std::size_t>(k * info(p).channel_len);
  if (k > 0) {
    b_.copy_h2d(d.master.data(), rows.master, n * 4, stream);
    b_.copy_h2d(d.m.data(), rows.m, n * 4, stream);
    b_.copy_h2d(d.v.data(), rows.v, n * 4, stream);
    b_.copy_h2d(dense_slot_[p] >= 0 ? counts_of(p) : d.counts.data(), rows.counts,
                static_cast<std::size_t>(k) * 4, stream);
    b_.copy_h2d(d.sel.data(), rows.sel, static_cast<std::size_t>(k) * 4, stream);
  }
  d.k = k;
  batch_.dirty = true;
  b_.synchronize(stream);
}

} // namespace detail
ZF_NAMESPACE_END
