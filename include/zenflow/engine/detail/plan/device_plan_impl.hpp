/// @file
/// Member definitions of `detail::device_plan` (device_plan.hpp): the step's operations and the
/// primitive calls they share, written once over the backend (setup: device_plan_setup.hpp; the
/// upload: device_plan_upload.hpp; selection, migration and state transfers:
/// device_plan_migrate.hpp).
#pragma once

#include <zenflow/engine/detail/plan/device_plan_decl.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

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
  batch_.dirty = true;
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
void device_plan<Backend>::scalars(const step_scalar_inputs& in, cudaStream_t stream) {
  const auto n = static_cast<std::int64_t>(params_->size()); // every parameter has its total and flag
  // (The operations keep their names in the pipeline trace: sq_totals, finish_scalars.)
  b_.run(stream, 0, "zenflow::engine: sq_totals",
         [items = sq_items_.data(), n, totals = totals_.data()](auto prim, auto on) {
           return prim.sq_norm_totals(items, n, totals, on);
         });
  // The header, and the crit masses zeroed in the same launch (the update adds into them next).
  b_.run(stream, 0, "zenflow::engine: finish_scalars",
         [totals = totals_.data(), n, flags = flags_.data(), loss_scale = in.loss_scale,
          max_norm = in.max_norm, header = step_record_layout::header(record_words()),
          crit = layout_.crit(record_words(), 0), matrices = layout_.matrices,
          io = step_scale_io{in.loss_scale_at, in.found_inf}](auto prim, auto on) {
           return prim.compute_step_header(totals, n, flags, n, loss_scale, max_norm, header, crit, matrices,
                                           on, io);
         });
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
    while (i < dense_order_.size() && dev_[dense_order_[i]].k != 0 && !without_grad(dense_order_[i]) &&
           info(dense_order_[i]).type == type && info(dense_order_[i]).same_hparams(lead)) {
      ++i;
    }
    if (i == first) { // a vector not on the device (yet), or without a gradient this step
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
  if (batch_.dirty) {
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
            masses = static_cast<const l1_mass_item*>(batch_.mass[cur_record_].data()) +
                     bt.mass_first](auto prim, auto on) {
             return prim.adamw_selective_batched_mass(items, n, blocks, rows, hp, scalars, masses, on);
           });
  });
  b_.copier().record(tail_, stream);
}

template <class Backend>
void device_plan<Backend>::build_batch(cudaStream_t stream) {
  const copier_type c = b_.copier();
  if (batch_.recorded) {
    // The last table's copy read the host tables. It ran long ago: a device set changes only at a
    // selection step, whose readback waited for the stream (or at initialize / a restore, which wait).
    c.synchronize(batch_.copied);
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
        batch_.h_mass[r][mass] = mass_args(p, d.sel.data(), d.k, batch_.row_l1.data() + row,
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
    b_.copy_h2d(batch_.mass[r].data(), batch_.h_mass[r].data(), mass * sizeof(l1_mass_item), stream);
  }
  c.record(batch_.copied, stream);
  batch_.recorded = true;
  batch_.dirty = false;
}

template <class Backend>
void device_plan<Backend>::begin_rest_masses(bool adopt_early, cudaStream_t stream) {
  if (layout_.matrices == 0) {
    return;
  }
  float* rest = layout_.rest(record_words(), 0);
  if (!adopt_early) {
    b_.zero(rest, static_cast<std::size_t>(layout_.matrices) * 4, stream);
    return;
  }
  b_.run(stream, 0, "zenflow::engine: adopt_early_mass",
         [early = early_rest_.data(), rest, n = static_cast<int>(layout_.matrices)](auto prim, auto on) {
           return prim.adopt_early_mass(early, rest, n, on);
         });
}

template <class Backend>
void device_plan<Backend>::pack(
    std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, bool early, cudaStream_t stream) {
  const param_info& pi = info(p);
  auto& d = dev_[p];
  float* mass = early ? early_rest_.data() + d.matrix_index : layout_.rest(record_words(), d.matrix_index);
  const l1_mass_item m =
      mass_args(p, d.host_set.data() + begin, end - begin, mass_rows_[early ? 1 : 0].data(), nullptr, mass);
  std::uint32_t* ticket =
      pack_tickets_.data() + (early ? 1 : 0); // the CUDA backend's pack adds the mass itself
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    const auto src = pi.grad_matrix<T>();
    const std::int32_t* idx = d.host_set.data() + begin;
    const std::int64_t count = end - begin;
    T* out = reinterpret_cast<T*>(dst);
    b_.run(stream, static_cast<std::size_t>(count * src.channel_len) * 2 * sizeof(T),
           "zenflow::engine: gather_channels", [=](auto prim, auto on) {
             return prim.gather_channels_mass(src, idx, count, out, m, ticket, on);
           });
  });
}

template <class Backend>
void device_plan<Backend>::wait_host_reads() noexcept {
  try {
    wait_upload_done();
  } catch (...) { // NOLINT(bugprone-empty-catch): a failed device has nothing left to copy
  }
  try {
    wait_migration();
  } catch (...) { // NOLINT(bugprone-empty-catch): as above
  }
}

template <class Backend>
void device_plan<Backend>::wait_own_work() noexcept {
  if (!upload_.stream_created) {
    return; // never set up: nothing was enqueued
  }
  const copier_type c = b_.copier();
  // Each wait apart: after a device error the first would throw, and the rest must still wait.
  const auto quietly = [](auto&& wait) {
    try {
      wait();
    } catch (...) { // NOLINT(bugprone-empty-catch): the error was reported where it happened
    }
  };
  for (auto& e : events_) {
    quietly([&] { c.synchronize(e); });
  }
  for (event_type* e : {&upload_.copied, &upload_.scattered, &batch_.copied, &migrated_, &tail_}) {
    quietly([&] { c.synchronize(*e); });
  }
  quietly([&] { b_.synchronize(upload_.stream); });
}

template <class Backend>
template <class Tin, class Tout>
void device_plan<Backend>::gather(channel_matrix<const Tin> src,
                                  const std::int32_t* idx,
                                  std::int64_t count,
                                  Tout* dst,
                                  float* l1_mass,
                                  cudaStream_t s) {
  b_.run(s, static_cast<std::size_t>(count * src.channel_len) * (sizeof(Tin) + sizeof(Tout)),
         "zenflow::engine: gather_channels",
         [=](auto prim, auto on) { return prim.gather_channels(src, idx, count, dst, l1_mass, on); });
}

template <class Backend>
template <class Tin, class Tout>
void device_plan<Backend>::scatter(
    const Tin* src, const std::int32_t* idx, std::int64_t count, channel_matrix<Tout> dst, cudaStream_t s) {
  b_.run(s, static_cast<std::size_t>(count * dst.channel_len) * (sizeof(Tin) + sizeof(Tout)),
         "zenflow::engine: scatter_channels",
         [=](auto prim, auto on) { return prim.scatter_channels(src, idx, count, dst, on); });
}

template <class Backend>
void device_plan<Backend>::iota(std::int32_t* out, std::int64_t n, cudaStream_t s) {
  b_.run(s, static_cast<std::size_t>(n) * 4, "zenflow::engine: iota",
         [=](auto prim, auto on) { return prim.iota(out, n, on); });
}

template <class Backend>
void device_plan<Backend>::move_counts(const std::int32_t* src,
                                       const std::int32_t* src_idx,
                                       std::int32_t* dst,
                                       const std::int32_t* dst_idx,
                                       std::int64_t n,
                                       cudaStream_t s) {
  const count_moves m{src, src_idx, dst, dst_idx, n};
  b_.run(s, static_cast<std::size_t>(n) * 8, "zenflow::engine: move_counts",
         [m](auto prim, auto on) { return prim.move_counts(m, on); });
}

template <class Backend>
l1_mass_item device_plan<Backend>::mass_args(std::size_t p,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             float* row_l1,
                                             const std::uint32_t* skip,
                                             float* l1) const {
  const param_info& pi = info(p);
  const bool lanes = pi.layout == channel_layout::contiguous;
  return {pi.step_grads, pi.type, pi.channels, pi.channel_len, pi.ld, pi.layout,
          lanes,         idx,     count,       row_l1,         skip,  l1};
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
