/// @file
/// Member definitions of `detail::device_plan` (device_plan.hpp): setup, the step's operations
/// and the upload, written once over the backend (selection, migration and state transfers:
/// device_plan_migrate.hpp).
#pragma once

#include <zenflow/engine/detail/device_plan.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
void device_plan<Backend>::setup(const std::vector<param_info>& params,
                                 std::size_t staging_bytes,
                                 memory_usage& mem,
                                 const plan_inputs& inputs) {
  params_ = &params;
  dev_.resize(params.size());
  std::int64_t matrices = 0;
  std::int64_t max_rows = 1;
  std::int64_t max_cap_elems = 1;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
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
      if (upload_chunk_bytes_ == 0) {
        d.upload = dbuf<std::byte>(static_cast<std::size_t>(pi.channels) * pi.channel_bytes());
        mem.device_upload += d.upload.size();
      }
      mem.device_scratch += d.host_set.size() * 4;
    }
    max_rows = std::max(max_rows, pi.channels);
    if (pi.host_side) { // the stage carries a migration's rows: only parameters with a host side migrate
      max_cap_elems = std::max<std::int64_t>(max_cap_elems, pi.device_capacity * pi.channel_len);
    }
  }
  layout_.matrices = matrices;
  if (upload_chunk_bytes_ > 0) {
    upload_chunk_ = dbuf<std::byte>(upload_chunk_bytes_);
    mem.device_upload += upload_chunk_.size();
  }
  // The vectors' update counts, one contiguous array (slots grouped by dtype): one dense AdamW
  // call per run. d.counts stays their staging for migrate().
  dense_order_ = dense_order(params);
  dense_slot_.assign(params.size(), -1);
  for (std::size_t i = 0; i < dense_order_.size(); ++i) {
    dense_slot_[dense_order_[i]] = static_cast<std::int64_t>(i);
  }
  dense_counts_ = dbuf<std::int32_t>(std::max<std::size_t>(dense_order_.size(), 1));
  mem.device_vector_state += dense_counts_.size() * 4;
  for (auto& r : record_) {
    r = dbuf<float>(static_cast<std::size_t>(layout_.words()));
  }
  early_rest_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(matrices, 1)));
  b_.zero(early_rest_.data(), early_rest_.size() * 4, nullptr);
  {
    // Zen-auto's per-row masses (detail/l1_mass.hpp): a call has at most `channels` rows;
    // step()'s packs and grad_ready()'s packs each have their own (they may run on different
    // streams; the update's are batch_row_l1_).
    std::int64_t rows = 1;
    for (const auto& pi : params) {
      rows = pi.matrix ? std::max(rows, pi.channels) : rows;
    }
    for (auto& m : mass_rows_) {
      m = dbuf<float>(static_cast<std::size_t>(rows));
    }
    // Their packs' tickets (l1_mass_args::ticket): zero between packs.
    pack_tickets_ = dbuf<std::uint32_t>(2);
    b_.zero(pack_tickets_.data(), pack_tickets_.size() * 4, nullptr);
  }
  totals_ = dbuf<double>(params.size());
  flags_ = dbuf<std::uint32_t>(params.size());
  {
    // The squared-norm totals' descriptors: fixed from registration on, uploaded once.
    std::vector<sq_total_item> items(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      items[p] = {pi.step_grads, dev_[p].scores.data(),
                  pi.channels,   pi.channel_len,
                  pi.ld,         pi.layout,
                  pi.type,       p < inputs.score_rescans.size() ? inputs.score_rescans[p] : nullptr};
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
    mem.device_scratch += wide_.size() * 8 + wide_items_.size() * sizeof(sq_rescan_item);
    b_.synchronize(nullptr); // `items` and `wide_items` are freed next
  }
  stage_ = dbuf<float>(static_cast<std::size_t>(3 * max_cap_elems));
  stage_counts_ = dbuf<std::int32_t>(static_cast<std::size_t>(max_rows));
  h_stage_ = hbuf<float>(static_cast<std::size_t>(3 * max_cap_elems));
  h_stage_counts_ = hbuf<std::int32_t>(static_cast<std::size_t>(max_rows));
  h_word_ = hbuf<std::uint32_t>(1);
  staging_ = dbuf<std::byte>(staging_bytes * slots_);
  staging_bytes_ = staging_bytes;
  const copier_type c = b_.copier();
  events_.resize(slots_ + 2);
  for (auto& e : events_) {
    c.create_event(e);
  }
  event_used_.assign(events_.size(), false);
  device_ = b_.current_device();
  upload_stream_ = c.create_stream(0);
  upload_stream_created_ = true;
  c.create_event(copied_);
  c.create_event(scattered_);
  // Temporary storage: the largest of the norms (per dtype group) and top-k queries.
  std::size_t need = 0;
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    std::vector<channel_norm_item<T>> items = norm_items<T>(members);
    std::size_t bytes = 0;
    check(b_.query([&](auto prim, auto on) {
      return prim.template channel_norms_batched<channel_norm::sq_l2>(
          nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size()), channel_norm_extras{}, on);
    }),
          "zenflow::engine: channel_norms_batched");
    need = std::max(need, bytes);
  });
  // And the L1 importance of a selection step (select_all: the matrices of each dtype group).
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    std::vector<std::size_t> group_matrices;
    for (const std::size_t p : members) {
      if (params[p].matrix) {
        group_matrices.push_back(p);
      }
    }
    std::vector<channel_norm_item<T>> items = norm_items<T>(group_matrices);
    std::size_t bytes = 0;
    check(b_.query([&](auto prim, auto on) {
      return prim.template channel_norms_batched<channel_norm::l1>(
          nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size()), channel_norm_extras{}, on);
    }),
          "zenflow::engine: channel_norms_batched");
    need = std::max(need, bytes);
  });
  temp_ = dbuf<std::byte>(std::max<std::size_t>(need, 256));
  {
    // The batched update's tables, sized for every parameter that may have rows on the device.
    std::size_t all = 0;
    std::size_t rows = 0;
    for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
      using T = decltype(tag);
      std::size_t n = 0;
      for (const std::size_t p : members) {
        if (!params[p].device_dense && params[p].device_capacity > 0) {
          ++n;
          rows += static_cast<std::size_t>(params[p].device_capacity);
        }
      }
      table<T>().d = dbuf<adamw_selective_item<T>>(std::max<std::size_t>(n, 1));
      table<T>().h = hbuf<adamw_selective_item<T>>(std::max<std::size_t>(n, 1));
      mem.device_scratch += table<T>().d.size() * sizeof(adamw_selective_item<T>);
      all += n;
    });
    for (int r = 0; r < 2; ++r) {
      batch_mass_[r] = dbuf<l1_mass_args>(std::max<std::size_t>(all, 1));
      h_batch_mass_[r] = hbuf<l1_mass_args>(std::max<std::size_t>(all, 1));
    }
    batch_row_l1_ = dbuf<float>(std::max<std::size_t>(rows, 1));
    mem.device_scratch += 2 * batch_mass_[0].size() * sizeof(l1_mass_args) + batch_row_l1_.size() * 4;
    c.create_event(batch_copied_);
  }
  {
    // A selection's buffers: every matrix's new set (and the skip flag) in one readback; the
    // migrations' index lists ([leave | keep old | keep new | enter | new set]: at most 3 x k) and
    // host sets side by side.
    std::size_t sets = 1;
    std::size_t lists = 1;
    std::vector<topk_item> items;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      if (pi.matrix) {
        items.push_back({dev_[p].scores.data(), pi.channels, pi.device_capacity, nullptr, nullptr});
        sets += static_cast<std::size_t>(pi.device_capacity);
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
    std::size_t at = 0;
    for (auto& it : items) {
      it.indices = sel_idx_.data() + at;
      at += static_cast<std::size_t>(it.k);
    }
    std::size_t bytes = 0;
    check(b_.query([&](auto prim, auto on) {
      return prim.topk_segmented(nullptr, bytes, items.data(), static_cast<std::int64_t>(items.size()),
                                 topk_order::ascending_index, on);
    }),
          "zenflow::engine: topk_segmented");
    if (bytes > temp_.size()) {
      temp_ = dbuf<std::byte>(bytes);
    }
    c.create_event(migrated_);
    c.create_event(tail_);
  }
  mem.device_staging += staging_.size();
  mem.device_scratch += temp_.size() + 2 * record_[0].size() * 4 + early_rest_.size() * 4 +
                        2 * mass_rows_[0].size() * 4 + pack_tickets_.size() * 4 + totals_.size() * 8 +
                        sq_items_.size() * sizeof(sq_total_item) + flags_.size() * 4 + stage_.size() * 4 +
                        stage_counts_.size() * 4;
  b_.synchronize_all(); // allocations and their first writes done
}

template <class Backend>
void device_plan<Backend>::init_device_state(std::size_t p, cudaStream_t stream) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  const std::int64_t cap = pi.device_capacity;
  iota(d.sel.data(), cap, stream);
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    gather(read_only(pi.weight_matrix<T>()), d.sel.data(), cap, d.master.data(), nullptr, stream);
  });
  b_.zero(d.m.data(), d.m.size() * 4, stream);
  b_.zero(d.v.data(), d.v.size() * 4, stream);
  b_.zero(d.counts.data(), d.counts.size() * 4, stream);
  if (dense_slot_[p] >= 0) {
    b_.zero(counts_of(p), 4, stream);
  }
  d.k = cap;
  batch_dirty_ = true;
  b_.copier().record(tail_, stream);
}

template <class Backend>
std::size_t device_plan<Backend>::download_weights(std::size_t p, float* dst, cudaStream_t stream) {
  const param_info& pi = info(p);
  const auto n = static_cast<std::size_t>(pi.elements());
  dbuf<float> tmp(n);
  dbuf<std::int32_t> all(static_cast<std::size_t>(pi.channels));
  hbuf<float> host(n);
  // CUDA allocates them stream-ordered on the null stream: done before `stream` may use them.
  b_.synchronize(nullptr);
  iota(all.data(), pi.channels, stream);
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    gather(read_only(pi.weight_matrix<T>()), all.data(), pi.channels, tmp.data(), nullptr, stream);
  });
  b_.copy_d2h(host.data(), tmp.data(), n * 4, stream);
  b_.synchronize(stream);
  std::memcpy(dst, host.data(), n * 4);
  return pi.bytes();
}

template <class Backend>
void device_plan<Backend>::norms(cudaStream_t stream) {
  std::size_t offset = 0;
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    std::vector<channel_norm_item<T>> items = norm_items<T>(members);
    std::size_t moved = 0;
    for (const auto& it : items) {
      moved += static_cast<std::size_t>(it.channels * it.channel_len) * sizeof(T);
    }
    const channel_norm_extras extras{nullptr, flags_.data() + offset};
    b_.run(stream, moved, "zenflow::engine: channel_norms_batched",
           [items, extras, temp = temp_.data(), bytes = temp_.size()](auto prim, auto on) {
             std::size_t temp_bytes = bytes;
             return prim.template channel_norms_batched<channel_norm::sq_l2>(
                 temp, temp_bytes, items.data(), static_cast<std::int64_t>(items.size()), extras, on);
           });
    offset += members.size();
  });
}

template <class Backend>
void device_plan<Backend>::scalars(float loss_scale, float max_norm, cudaStream_t stream) {
  const auto offset = params_->size(); // every parameter has its flag
  const auto n = static_cast<int>(params_->size());
  b_.run(stream, 0, "zenflow::engine: sq_totals",
         [items = sq_items_.data(), n, totals = totals_.data()](auto prim, auto on) {
           return prim.sq_totals(items, n, totals, on);
         });
  const step_scalars_args scalars{
      totals_.data(), n,        flags_.data(),  static_cast<int>(offset),
      loss_scale,     max_norm, record_words(), static_cast<int>(layout_.matrices)};
  b_.run(stream, 0, "zenflow::engine: finish_scalars",
         [scalars](auto prim, auto on) { return prim.finish_scalars(scalars, on); });
}

template <class Backend>
void device_plan<Backend>::update(float lr, const adamw_hparams& base, cudaStream_t stream) {
  float* rec = record_words();
  const float* coef = step_record_layout::coef(rec);
  const std::uint32_t* skip = step_record_layout::skip(rec);
  // The vectors: one adamw_dense call per run of device-resident vectors of one dtype and one set
  // of hyper-parameters (a run is contiguous in the count array; in practice one per group).
  std::size_t i = 0;
  while (i < dense_order_.size()) {
    const std::size_t first = i;
    const param_info& lead = info(dense_order_[i]);
    const dtype type = lead.type;
    while (i < dense_order_.size() && dev_[dense_order_[i]].k != 0 && info(dense_order_[i]).type == type &&
           info(dense_order_[i]).same_hparams(lead)) {
      ++i;
    }
    if (i == first) { // a vector not on the device (yet)
      ++i;
      continue;
    }
    dispatch_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      std::vector<adamw_tensor<T>> tensors;
      tensors.reserve(i - first);
      for (std::size_t j = first; j < i; ++j) {
        const param_info& pi = info(dense_order_[j]);
        auto& d = dev_[dense_order_[j]];
        tensors.push_back({static_cast<T*>(pi.weights), static_cast<const T*>(pi.step_grads), d.master.data(),
                           d.m.data(), d.v.data(), pi.channel_len});
      }
      std::size_t moved = 0;
      for (const auto& t : tensors) {
        moved += static_cast<std::size_t>(t.size) * (24 + 2 * sizeof(T));
      }
      b_.run(stream, moved, "zenflow::engine: adamw_dense",
             [tensors, counts = dense_counts_.data() + first, hp = lead.hparams(base, lr), coef,
              skip](auto prim, auto on) {
               return prim.adamw_dense(tensors.data(), static_cast<int>(tensors.size()), counts, hp, coef,
                                       skip, on);
             });
    });
  }
  // The matrices: one batched selective AdamW per working type (P4; the counts advance in it),
  // whatever the number of matrices, with their Zen-auto crit masses.
  if (batch_dirty_) {
    build_batch(stream);
  }
  adamw_hparams hp = base;
  hp.lr = lr;
  const step_scalars scalars{coef, skip};
  for_each_group([&](auto tag, const std::vector<std::size_t>&) {
    using T = decltype(tag);
    const batch_table<T>& bt = table<T>();
    if (bt.count == 0) {
      return;
    }
    b_.run(stream, bt.bytes, "zenflow::engine: adamw_selective",
           [items = static_cast<const adamw_selective_item<T>*>(bt.d.data()), n = bt.count,
            blocks = bt.blocks, rows = bt.max_rows, hp, scalars,
            masses = static_cast<const l1_mass_args*>(batch_mass_[cur_record_].data()) +
                     bt.mass_first](auto prim, auto on) {
             return prim.adamw_selective_batched_mass(items, n, blocks, rows, hp, scalars, masses, on);
           });
  });
  b_.copier().record(tail_, stream);
}

template <class Backend>
void device_plan<Backend>::build_batch(cudaStream_t stream) {
  const copier_type c = b_.copier();
  if (batch_recorded_) {
    // The last table's copy read the host tables. It ran long ago: a device set changes only at a
    // selection step, whose readback waited for the stream (or at initialize / a restore, which wait).
    c.synchronize(batch_copied_);
  }
  std::size_t mass = 0;
  std::size_t row = 0;
  for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
    using T = decltype(tag);
    batch_table<T>& bt = table<T>();
    bt.count = 0;
    bt.max_rows = 0;
    bt.bytes = 0;
    bt.mass_first = mass;
    for (const std::size_t p : members) {
      if (!batched(p)) {
        continue;
      }
      const param_info& pi = info(p);
      auto& d = dev_[p];
      bt.h[static_cast<std::size_t>(bt.count)] = {
          pi.weight_matrix<T>(),
          pi.grad_matrix<T>(),
          {d.sel.data(), d.k, d.master.data(), d.m.data(), d.v.data(), d.counts.data()},
          pi.lr_scale,
          pi.weight_decay,
          0};
      for (int r = 0; r < 2; ++r) {
        float* rec = record_[r].data();
        h_batch_mass_[r][mass] = mass_args(p, d.sel.data(), d.k, batch_row_l1_.data() + row,
                                           step_record_layout::skip(rec), layout_.crit(rec, d.matrix_index));
      }
      ++bt.count;
      ++mass;
      row += static_cast<std::size_t>(d.k);
      bt.max_rows = std::max(bt.max_rows, d.k);
      bt.bytes += static_cast<std::size_t>(d.k * pi.channel_len) * (24 + 2 * sizeof(T));
    }
    bt.blocks = adamw_selective_batch_blocks(bt.h.data(), bt.count);
    b_.copy_h2d(bt.d.data(), bt.h.data(),
                static_cast<std::size_t>(bt.count) * sizeof(adamw_selective_item<T>), stream);
  });
  for (int r = 0; r < 2; ++r) {
    b_.copy_h2d(batch_mass_[r].data(), h_batch_mass_[r].data(), mass * sizeof(l1_mass_args), stream);
  }
  c.record(batch_copied_, stream);
  batch_recorded_ = true;
  batch_dirty_ = false;
}

template <class Backend>
void device_plan<Backend>::pack(
    std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, bool early, cudaStream_t stream) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  float* mass = early ? early_rest_.data() + d.matrix_index : layout_.rest(record_words(), d.matrix_index);
  l1_mass_args m =
      mass_args(p, d.host_set.data() + begin, end - begin, mass_rows_[early ? 1 : 0].data(), nullptr, mass);
  m.ticket = pack_tickets_.data() + (early ? 1 : 0); // the CUDA backend's pack adds the mass itself
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    const auto src = pi.grad_matrix<T>();
    const std::int32_t* idx = d.host_set.data() + begin;
    const std::int64_t count = end - begin;
    T* out = reinterpret_cast<T*>(dst);
    b_.run(stream, static_cast<std::size_t>(count * src.channel_len) * 2 * sizeof(T),
           "zenflow::engine: gather_channels",
           [=](auto prim, auto on) { return prim.gather_channels_mass(src, idx, count, out, m, on); });
  });
}

template <class Backend>
void device_plan<Backend>::begin_uploads() {
  b_.bind_device(device_);
  if (scatter_recorded_) {
    b_.copier().stream_wait(upload_stream_, scattered_);
  }
}

template <class Backend>
std::size_t
device_plan<Backend>::upload(std::size_t p, const std::byte* src, std::int64_t begin, std::int64_t end) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  const std::size_t at = static_cast<std::size_t>(begin) * pi.channel_bytes();
  const std::size_t bytes = static_cast<std::size_t>(end - begin) * pi.channel_bytes();
  if (upload_chunk_bytes_ > 0) {
    d.upload_src = src; // copied up at the boundary (apply_upload)
    return bytes;
  }
  b_.copy_h2d(d.upload.data() + at, src + at, bytes, upload_stream_);
  return bytes;
}

template <class Backend>
void device_plan<Backend>::end_uploads() {
  if (upload_chunk_bytes_ > 0) {
    return; // nothing was copied yet
  }
  b_.copier().record(copied_, upload_stream_);
  copy_recorded_ = true;
}

template <class Backend>
void device_plan<Backend>::begin_apply(cudaStream_t stream) {
  if (copy_recorded_) {
    b_.copier().stream_wait(stream, copied_);
  }
}

template <class Backend>
std::size_t
device_plan<Backend>::apply_upload(std::size_t p, std::int64_t begin, std::int64_t end, cudaStream_t stream) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    if (upload_chunk_bytes_ == 0) {
      scatter(reinterpret_cast<const T*>(d.upload.data()) + begin * pi.channel_len, d.host_set.data() + begin,
              end - begin, pi.weight_matrix<T>(), stream);
      return;
    }
    // chunk_ring: up and scattered one chunk at a time; the next copy into the chunk follows the
    // scatter that read it in stream order.
    const auto rows =
        static_cast<std::int64_t>(upload_chunk_bytes_ / pi.channel_bytes()); // >= 1: registration
    for (std::int64_t b = begin; b < end; b += rows) {
      const std::int64_t n = std::min(rows, end - b);
      b_.copy_h2d(upload_chunk_.data(), d.upload_src + static_cast<std::size_t>(b) * pi.channel_bytes(),
                  static_cast<std::size_t>(n) * pi.channel_bytes(), stream);
      scatter(reinterpret_cast<const T*>(upload_chunk_.data()), d.host_set.data() + b, n,
              pi.weight_matrix<T>(), stream);
    }
  });
  return static_cast<std::size_t>(end - begin) * pi.channel_bytes();
}

template <class Backend>
void device_plan<Backend>::end_apply(cudaStream_t stream) {
  b_.copier().record(scattered_, stream);
  scatter_recorded_ = true;
}

template <class Backend>
void device_plan<Backend>::wait_upload_done() {
  if (copy_recorded_) {
    b_.copier().synchronize(copied_);
  }
  if (upload_chunk_bytes_ > 0 && scatter_recorded_) {
    b_.copier().synchronize(scattered_); // the boundary's copies read the host buffers before it
  }
}

template <class Backend>
template <class F>
void device_plan<Backend>::for_each_group(F&& f) {
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    std::vector<std::size_t> members;
    for (std::size_t p = 0; p < params_->size(); ++p) {
      if (info(p).type == t) {
        members.push_back(p);
      }
    }
    if (!members.empty()) {
      dispatch_dtype(t, [&](auto tag) { f(tag, members); });
    }
  }
}

template <class Backend>
template <class T>
std::vector<channel_norm_item<T>> device_plan<Backend>::norm_items(const std::vector<std::size_t>& members) {
  std::vector<channel_norm_item<T>> items;
  for (const std::size_t p : members) {
    const param_info& pi = info(p);
    items.push_back({static_cast<const T*>(pi.step_grads), pi.channels, pi.channel_len, pi.ld, pi.layout,
                     dev_[p].scores.data()});
  }
  return items;
}

} // namespace detail
ZF_NAMESPACE_END

#include <zenflow/engine/detail/device_plan_migrate.hpp>
