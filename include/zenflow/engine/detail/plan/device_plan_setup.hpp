/// @file
/// `detail::device_plan::setup` (device_plan.hpp) and its parts, written once over the backend:
/// everything the plan allocates, sized once from the registered parameters. The upload path's
/// part is in device_plan_upload.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <zenflow/engine/detail/plan/device_plan_decl.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
void device_plan<Backend>::setup(const std::vector<param_info>& params,
                                 std::size_t staging_bytes,
                                 memory_usage& mem,
                                 const plan_inputs& inputs) {
  params_ = &params;
  mem_ = &mem;
  whole_ = inputs.whole;
  whole_.resize(params.size());
  setup_param_state(mem);
  setup_dense_counts(mem);
  setup_records_and_masses(mem);
  setup_sq_tables(inputs, mem);
  setup_staging(staging_bytes, mem);
  setup_upload(mem);
  setup_batch_tables(mem);
  setup_selection(mem);
  setup_temp(mem);
  b_.synchronize_all(); // allocations and their first writes done
}

template <class Backend>
std::size_t
device_plan<Backend>::grow_device_rows(std::size_t p, std::int64_t old_capacity, cudaStream_t stream) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  const auto cap = static_cast<std::size_t>(pi.device_capacity);
  const auto old_cap = static_cast<std::size_t>(old_capacity);
  if (cap <= old_cap) {
    return 0;
  }
  // A matrix with no device rows has no slot in the update's tables (setup_batch_tables): only a
  // shard of no channels reserves none, and nothing is ever selected into it.
  require(old_cap > 0, "zenflow::engine", "device_capacity", "grows from zero rows (an internal error)");
  b_.synchronize(stream);
  wait_own_work(); // nothing reads the rows, the stage or the lists while they move
  // The allocations on the plan's device (the caller's current one may be another), which is
  // current again after (CUDA: the caller's device; the emulated device stays current).
  const int caller = b_.current_device();
  b_.bind_device(upload_.device);
  const auto L = static_cast<std::size_t>(pi.channel_len);
  const auto k = static_cast<std::size_t>(d.k);
  const auto grow = [&](auto& buf, std::size_t n, std::size_t keep) {
    using T = std::remove_reference_t<decltype(*buf.data())>;
    dbuf<T> next(n);
    b_.synchronize(nullptr); // CUDA allocates stream-ordered on the null stream
    if (keep > 0) {
      b_.copy_d2d(next.data(), buf.data(), keep * sizeof(T), stream);
    }
    b_.synchronize(stream);
    buf = std::move(next);
  };
  grow(d.master, cap * L, k * L);
  grow(d.m, cap * L, k * L);
  grow(d.v, cap * L, k * L);
  grow(d.counts, cap, k);
  grow(d.sel, cap, k);
  std::size_t added = (cap - old_cap) * (L * 12 + 8);
  mem_->device_selected_state += added;
  // The parts sized by every capacity (setup_staging, setup_selection, setup_batch_tables).
  std::size_t scratch = 0;
  if (pi.host_side && 3 * cap * L > stage_.size()) {
    scratch += (3 * cap * L - stage_.size()) * 4;
    stage_ = dbuf<float>(3 * cap * L);
    h_stage_ = hbuf<float>(3 * cap * L);
  }
  if (pi.host_side) {
    const std::size_t lists = lists_.size() + 3 * (cap - old_cap);
    scratch += (lists - lists_.size()) * 4;
    lists_ = dbuf<std::int32_t>(lists);
    h_lists_ = hbuf<std::int32_t>(lists);
  }
  if (!pi.device_dense) {
    const std::size_t rows = batch_.row_l1.size() + (old_cap == 0 ? cap : cap - old_cap);
    scratch += (rows - batch_.row_l1.size()) * 4;
    batch_.row_l1 = dbuf<float>(rows);
  }
  b_.synchronize(nullptr);
  b_.bind_device(caller);
  mem_->device_scratch += scratch;
  batch_.dirty = true; // the update's tables point at the rows
  return added + scratch;
}

template <class Backend>
void device_plan<Backend>::setup_param_state(memory_usage& mem) {
  dev_.resize(params_->size());
  std::int64_t matrices = 0;
  for (std::size_t p = 0; p < params_->size(); ++p) {
    const param_info& pi = info(p);
    auto& d = dev_[p];
    const auto cap = static_cast<std::size_t>(pi.device_capacity);
    const auto rows = cap * static_cast<std::size_t>(pi.channel_len);
    if (pi.matrix) {
      d.matrix_index = matrices++;
    }
    d.master = dbuf<float>(rows);
    d.m = dbuf<float>(rows);
    d.v = dbuf<float>(rows);
    d.counts = dbuf<std::int32_t>(cap);
    d.sel = dbuf<std::int32_t>(cap);
    d.scores = dbuf<float>(static_cast<std::size_t>(pi.matrix ? pi.channels : 1));
    (pi.matrix ? mem.device_selected_state : mem.device_vector_state) += rows * 12 + cap * 4 + cap * 4;
    mem.device_scratch += d.scores.size() * 4;
    if (pi.host_side) {
      d.host_set = dbuf<std::int32_t>(static_cast<std::size_t>(pi.channels));
      mem.device_scratch += d.host_set.size() * 4;
    }
  }
  layout_.matrices = matrices;
}

template <class Backend>
void device_plan<Backend>::setup_dense_counts(memory_usage& mem) {
  // Slots grouped by dtype; d.counts stays their staging for migrate().
  dense_order_ = dense_order(*params_);
  dense_slot_.assign(params_->size(), -1);
  for (std::size_t i = 0; i < dense_order_.size(); ++i) {
    dense_slot_[dense_order_[i]] = static_cast<std::int64_t>(i);
  }
  dense_counts_ = dbuf<std::int32_t>(std::max<std::size_t>(dense_order_.size(), 1));
  mem.device_vector_state += dense_counts_.size() * 4;
}

template <class Backend>
void device_plan<Backend>::setup_records_and_masses(memory_usage& mem) {
  for (auto& r : record_) {
    r = dbuf<float>(static_cast<std::size_t>(layout_.words()));
  }
  early_rest_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(layout_.matrices, 1)));
  b_.zero(early_rest_.data(), early_rest_.size() * 4, nullptr);
  // Zen-auto's per-row masses (schedule/l1_mass.hpp): a call has at most `channels` rows; step()'s
  // packs and grad_ready()'s packs each have their own (they may run on different streams; the
  // update's are the batch tables').
  std::int64_t rows = 1;
  for (const auto& pi : *params_) {
    rows = pi.matrix ? std::max(rows, pi.channels) : rows;
  }
  for (auto& m : mass_rows_) {
    m = dbuf<float>(static_cast<std::size_t>(rows));
  }
  // Their packs' tickets (the CUDA backend's pack_mass_kernel): zero between packs.
  pack_tickets_ = dbuf<std::uint32_t>(2);
  b_.zero(pack_tickets_.data(), pack_tickets_.size() * 4, nullptr);
  mem.device_scratch += 2 * record_[0].size() * 4 + early_rest_.size() * 4 + 2 * mass_rows_[0].size() * 4 +
                        pack_tickets_.size() * 4;
}

template <class Backend>
void device_plan<Backend>::setup_sq_tables(const plan_inputs& inputs, memory_usage& mem) {
  const std::vector<param_info>& params = *params_;
  totals_ = dbuf<double>(params.size());
  flags_ = dbuf<std::uint32_t>(params.size());
  // The squared-norm totals' descriptors: fixed from registration on, uploaded once.
  std::vector<sq_total_item> items(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    items[p] = {pi.step_grads, dev_[p].scores.data(),
                pi.channels,   pi.channel_len,
                pi.ld,         pi.layout,
                pi.type,       p < inputs.score_rescans.size() ? inputs.score_rescans[p] : nullptr};
    if (const auto& w = whole_[p]; w.channels > 0) { // a range: the whole matrix's (its rescans given)
      items[p].scores = w.scores;
      items[p].channels = w.channels;
      items[p].rescan = w.rescans;
    }
  }
  sq_items_ = dbuf<sq_total_item>(items.size());
  b_.copy_h2d(sq_items_.data(), items.data(), items.size() * sizeof(items[0]), nullptr);
  // A selection's rescans of the matrices whose squared totals rescan their gradient.
  std::size_t wide_total = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].matrix && items[p].rescan == nullptr) {
      wide_total += static_cast<std::size_t>(params[p].channels);
    }
  }
  wide_ = dbuf<double>(std::max<std::size_t>(wide_total, 1));
  wide_of_.assign(params.size(), nullptr);
  std::vector<sq_rescan_item> wide_items;
  std::size_t off = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].matrix) {
      continue;
    }
    if (items[p].rescan != nullptr) {
      wide_of_[p] = items[p].rescan;
      continue;
    }
    wide_of_[p] = wide_.data() + off;
    wide_items.push_back({items[p], 0, params[p].channels, wide_.data() + off});
    wide_max_ = std::max(wide_max_, params[p].channels);
    off += static_cast<std::size_t>(params[p].channels);
  }
  wide_count_ = static_cast<int>(wide_items.size());
  wide_items_ = dbuf<sq_rescan_item>(std::max<std::size_t>(wide_items.size(), 1));
  if (!wide_items.empty()) {
    b_.copy_h2d(wide_items_.data(), wide_items.data(), wide_items.size() * sizeof(wide_items[0]), nullptr);
  }
  mem.device_scratch += wide_.size() * 8 + wide_items_.size() * sizeof(sq_rescan_item) + totals_.size() * 8 +
                        sq_items_.size() * sizeof(sq_total_item) + flags_.size() * 4;
  b_.synchronize(nullptr); // `items` and `wide_items` are freed next
}

template <class Backend>
void device_plan<Backend>::setup_staging(std::size_t staging_bytes, memory_usage& mem) {
  // The migration's stage carries the rows of one matrix's migration: only parameters with a
  // host side migrate.
  std::int64_t max_rows = 1;
  std::int64_t max_cap_elems = 1;
  for (const auto& pi : *params_) {
    max_rows = std::max(max_rows, pi.channels);
    if (pi.host_side) {
      max_cap_elems = std::max<std::int64_t>(max_cap_elems, pi.device_capacity * pi.channel_len);
    }
  }
  stage_ = dbuf<float>(static_cast<std::size_t>(3 * max_cap_elems));
  stage_counts_ = dbuf<std::int32_t>(static_cast<std::size_t>(max_rows));
  h_stage_ = hbuf<float>(static_cast<std::size_t>(3 * max_cap_elems));
  h_stage_counts_ = hbuf<std::int32_t>(static_cast<std::size_t>(max_rows));
  mem.device_scratch += stage_.size() * 4 + stage_counts_.size() * 4;
  // The packed gradients' slots, one per D2H ring slot, and the events of the slots and records.
  staging_ = dbuf<std::byte>(staging_bytes * slots_);
  staging_bytes_ = staging_bytes;
  mem.device_staging += staging_.size();
  const copier_type c = b_.copier();
  events_.resize(slots_ + 2);
  for (auto& e : events_) {
    c.create_event(e);
  }
  event_used_.assign(events_.size(), false);
}

template <class Backend>
void device_plan<Backend>::setup_batch_tables(memory_usage& mem) {
  std::size_t all = 0;
  std::size_t rows = 0;
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    std::size_t n = 0;
    for (const std::size_t p : members) {
      if (!info(p).device_dense && info(p).device_capacity > 0) {
        ++n;
        rows += static_cast<std::size_t>(info(p).device_capacity);
      }
    }
    table<T>().d = dbuf<adamw_selective_item<T>>(std::max<std::size_t>(n, 1));
    table<T>().h = hbuf<adamw_selective_item<T>>(std::max<std::size_t>(n, 1));
    mem.device_scratch += table<T>().d.size() * sizeof(adamw_selective_item<T>);
    all += n;
  });
  for (int r = 0; r < 2; ++r) {
    batch_.mass[r] = dbuf<l1_mass_item>(std::max<std::size_t>(all, 1));
    batch_.h_mass[r] = hbuf<l1_mass_item>(std::max<std::size_t>(all, 1));
  }
  batch_.row_l1 = dbuf<float>(std::max<std::size_t>(rows, 1));
  mem.device_scratch += 2 * batch_.mass[0].size() * sizeof(l1_mass_item) + batch_.row_l1.size() * 4;
  b_.copier().create_event(batch_.copied);
}

template <class Backend>
void device_plan<Backend>::setup_selection(memory_usage& mem) {
  // Every matrix's new set (and the skip flag) in one readback; the migrations' index lists
  // ([leave | keep old | keep new | enter | new set]: at most 3 x k) and host sets side by side.
  std::size_t sets = 1;
  std::size_t lists = 1;
  for (std::size_t p = 0; p < params_->size(); ++p) {
    const param_info& pi = info(p);
    if (pi.matrix) {
      sets += static_cast<std::size_t>(topk_of(p).k);
    }
    if (pi.host_side) {
      lists += static_cast<std::size_t>(3 * pi.device_capacity + pi.channels);
    }
  }
  sel_idx_ = dbuf<std::int32_t>(sets);
  h_sel_ = hbuf<std::int32_t>(sets);
  lists_ = dbuf<std::int32_t>(lists);
  h_lists_ = hbuf<std::int32_t>(lists);
  mem.device_scratch += (sets + lists) * 4;
  const copier_type c = b_.copier();
  c.create_event(migrated_);
  c.create_event(tail_);
}

template <class Backend>
void device_plan<Backend>::setup_temp(memory_usage& mem) {
  std::size_t need = 0;
  // The norms of every gradient (per dtype group: the prologue) and the L1 importance of a
  // selection step (the matrices of each dtype group: select_all).
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    std::vector<std::size_t> group_matrices;
    for (const std::size_t p : members) {
      if (info(p).matrix) {
        group_matrices.push_back(p);
      }
    }
    const auto query = [&](auto kind, const std::vector<std::size_t>& of) {
      std::vector<channel_norm_item<T>> items = norm_items<T>(of);
      std::size_t bytes = 0;
      check(b_.query([&](auto prim, auto on) {
        return prim.template channel_norms_batched<decltype(kind)::value>(
            nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size()), channel_norm_extras{}, on);
      }),
            "zenflow::engine: channel_norms_batched");
      need = std::max(need, bytes);
    };
    query(std::integral_constant<channel_norm, channel_norm::sq_l2>{}, members);
    query(std::integral_constant<channel_norm, channel_norm::l1>{}, group_matrices);
  });
  // The top-k of every matrix at once (select_top), into the sets' readback buffer.
  std::vector<topk_item> items;
  std::size_t at = 0;
  for (std::size_t p = 0; p < params_->size(); ++p) {
    const param_info& pi = info(p);
    if (pi.matrix) {
      items.push_back(topk_of(p));
      items.back().indices = sel_idx_.data() + at;
      at += static_cast<std::size_t>(items.back().k);
    }
  }
  std::size_t bytes = 0;
  check(b_.query([&](auto prim, auto on) {
    return prim.topk_segmented(nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size()),
                               topk_order::ascending_index, on);
  }),
        "zenflow::engine: topk_segmented");
  temp_ = dbuf<std::byte>(std::max({need, std::size_t{256}, bytes}));
  mem.device_scratch += temp_.size();
}

} // namespace detail
ZF_NAMESPACE_END
