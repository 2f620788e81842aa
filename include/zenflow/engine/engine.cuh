/// @file
/// The engine's CUDA backend: parameters are device pointers; every device operation is a
/// stream-ordered launch of a primitive (zenflow::device::channel_norms_batched, topk,
/// adamw_selective, adamw_dense, gather_channels, scatter_channels) on the user's stream; the
/// D2H ring copies on a copy stream of its own, and a host window's new weights go up on an
/// upload stream of its own (enqueued by the job's thread, scattered at the boundary on the
/// user's stream after an event), all guarded by events. The training thread blocks only
/// in the counted stalls: the drain and the index/state round trips of a selection step, a
/// pending selection's skip-flag read, a synchronous window (offload_sync, warm-up,
/// overlap_step = false), and a host job not finished when its close comes.
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
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/engine/detail/kernels.cuh>
#include <zenflow/engine/engine.hpp>
#include <zenflow/optim/adamw.cuh>
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// CUDA backend of `zenflow::engine`. See the file comment for what blocks.
class cuda_backend {
public:
  static constexpr bool is_device = true;
  using copy_backend_type = cuda_copy_backend;
  template <class T>
  using host_buffer = pinned_buffer<T>;

  explicit cuda_backend(const config& cfg) : slots_(static_cast<std::size_t>(cfg.ring_slots)) {}
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;
  ~cuda_backend() {
    (void)cudaDeviceSynchronize(); // nothing may still use what is freed next
    for (auto& e : events_) {
      if (e != nullptr) {
        (void)cudaEventDestroy(e);
      }
    }
    for (cudaEvent_t e : {copied_, scattered_}) {
      if (e != nullptr) {
        (void)cudaEventDestroy(e);
      }
    }
    if (upload_stream_ != nullptr) {
      (void)cudaStreamDestroy(upload_stream_);
    }
  }

  void setup(const std::vector<detail::param_info>& params, std::size_t staging_bytes, memory_usage& mem) {
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
      d.master = device_buffer<float>(rows);
      d.m = device_buffer<float>(rows);
      d.v = device_buffer<float>(rows);
      d.master2 = device_buffer<float>(rows);
      d.m2 = device_buffer<float>(rows);
      d.v2 = device_buffer<float>(rows);
      d.counts = device_buffer<std::int32_t>(cap);
      d.counts2 = device_buffer<std::int32_t>(cap);
      d.sel = device_buffer<std::int32_t>(cap);
      d.scores = device_buffer<float>(static_cast<std::size_t>(pi.matrix ? pi.channels : 1));
      (pi.matrix ? mem.device_selected_state : mem.device_vector_state) +=
          2 * (rows * 12 + cap * 4) + cap * 4;
      mem.device_scratch += d.scores.bytes();
      if (pi.host_side) {
        d.host_set = device_buffer<std::int32_t>(static_cast<std::size_t>(pi.channels));
        d.upload = device_buffer<std::byte>(static_cast<std::size_t>(pi.channels) * pi.channel_bytes());
        mem.device_upload += d.upload.bytes();
        mem.device_scratch += d.host_set.bytes();
      }
      max_rows = std::max(max_rows, pi.channels);
      max_cap_elems = std::max<std::int64_t>(max_cap_elems, pi.device_capacity * pi.channel_len);
    }
    layout_.matrices = matrices;
    // The vectors' update counts, one contiguous array (slots grouped by dtype): one dense AdamW
    // call per dtype. d.counts stays their staging for migrate().
    dense_order_ = detail::dense_order(params);
    dense_slot_.assign(params.size(), -1);
    for (std::size_t i = 0; i < dense_order_.size(); ++i) {
      dense_slot_[dense_order_[i]] = static_cast<std::int64_t>(i);
    }
    dense_counts_ = device_buffer<std::int32_t>(std::max<std::size_t>(dense_order_.size(), 1));
    mem.device_vector_state += dense_counts_.bytes();
    for (auto& r : record_) {
      r = device_buffer<float>(static_cast<std::size_t>(layout_.words()));
    }
    early_rest_ = device_buffer<float>(static_cast<std::size_t>(std::max<std::int64_t>(matrices, 1)));
    detail::throw_if(
        cudaMemsetAsync(early_rest_.data(), 0, early_rest_.bytes(), nullptr), // after its allocation
        "zenflow::cuda_backend: cudaMemsetAsync");
    totals_ = device_buffer<double>(params.size());
    flags_ = device_buffer<std::uint32_t>(params.size());
    {
      // The squared-norm totals' descriptors: fixed from registration on, uploaded once.
      std::vector<detail::engine_kernels::sq_total_item> items(params.size());
      for (std::size_t p = 0; p < params.size(); ++p) {
        const auto& pi = params[p];
        items[p] = {pi.grads, dev_[p].scores.data(), pi.channels, pi.channel_len, pi.ld, pi.layout, pi.type};
      }
      sq_items_ = device_buffer<detail::engine_kernels::sq_total_item>(items.size());
      detail::throw_if(
          cudaMemcpy(sq_items_.data(), items.data(), items.size() * sizeof(items[0]), cudaMemcpyHostToDevice),
          "zenflow::cuda_backend: cudaMemcpy");
    }
    idx_ = device_buffer<std::int32_t>(static_cast<std::size_t>(5 * max_rows));
    h_idx_ = pinned_buffer<std::int32_t>(static_cast<std::size_t>(5 * max_rows));
    stage_ = device_buffer<float>(static_cast<std::size_t>(3 * max_cap_elems));
    stage_counts_ = device_buffer<std::int32_t>(static_cast<std::size_t>(max_rows));
    h_stage_ = pinned_buffer<float>(static_cast<std::size_t>(3 * max_cap_elems));
    h_stage_counts_ = pinned_buffer<std::int32_t>(static_cast<std::size_t>(max_rows));
    h_word_ = pinned_buffer<std::uint32_t>(1);
    staging_ = device_buffer<std::byte>(staging_bytes * slots_);
    staging_bytes_ = staging_bytes;
    events_.assign(slots_ + 2, nullptr);
    for (auto& e : events_) {
      detail::throw_if(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
                       "zenflow::cuda_backend: cudaEventCreateWithFlags");
    }
    event_used_.assign(events_.size(), false);
    detail::throw_if(cudaGetDevice(&device_), "zenflow::cuda_backend: cudaGetDevice");
    detail::throw_if(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking),
                     "zenflow::cuda_backend: cudaStreamCreateWithFlags");
    for (cudaEvent_t* e : {&copied_, &scattered_}) {
      detail::throw_if(cudaEventCreateWithFlags(e, cudaEventDisableTiming | cudaEventBlockingSync),
                       "zenflow::cuda_backend: cudaEventCreateWithFlags");
    }
    // Temporary storage: the largest of the norms (per dtype group) and top-k queries.
    std::size_t need = 0;
    for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
      using T = decltype(tag);
      std::vector<channel_norm_item<T>> items = norm_items<T>(members);
      std::size_t b = 0;
      detail::check_status(device::channel_norms_batched<channel_norm::sq_l2, T>(
                               nullptr, b, items.data(), static_cast<std::int64_t>(items.size())),
                           "zenflow::cuda_backend: channel_norms_batched");
      need = std::max(need, b);
    });
    for (const auto& pi : params) {
      if (pi.matrix) {
        std::size_t b = 0;
        detail::check_status(device::topk(nullptr, b,
                                          dev_[static_cast<std::size_t>(&pi - params.data())].scores.data(),
                                          pi.channels, pi.device_capacity, idx_.data()),
                             "zenflow::cuda_backend: topk");
        need = std::max(need, b);
        detail::dispatch_dtype(pi.type, [&](auto tag) {
          using T = decltype(tag);
          std::size_t nb = 0;
          detail::check_status(device::channel_norms<channel_norm::l1, T>(
                                   nullptr, nb, static_cast<const T*>(pi.grads), pi.channels, pi.channel_len,
                                   pi.ld, pi.layout,
                                   dev_[static_cast<std::size_t>(&pi - params.data())].scores.data()),
                               "zenflow::cuda_backend: channel_norms");
          need = std::max(need, nb);
        });
      }
    }
    temp_ = device_buffer<std::byte>(std::max<std::size_t>(need, 256));
    mem.device_staging += staging_.bytes();
    mem.device_scratch += temp_.bytes() + 2 * record_[0].bytes() + early_rest_.bytes() + totals_.bytes() +
                          sq_items_.bytes() + flags_.bytes() + idx_.bytes() + stage_.bytes() +
                          stage_counts_.bytes();
    detail::throw_if(cudaDeviceSynchronize(), "zenflow::cuda_backend::setup"); // allocations done
  }

  [[nodiscard]] const detail::step_record_layout& record_layout() const noexcept { return layout_; }
  [[nodiscard]] const void* record() const noexcept { return record_[cur_record_].data(); }
  [[nodiscard]] std::size_t staging_slots() const noexcept { return slots_; }

  /// Staging slot `i`, after the copy that last read it (the pack on `stream` waits for it).
  [[nodiscard]] std::byte* staging(std::size_t i, cudaStream_t stream) {
    wait_event(i, stream);
    return staging_.data() + i * staging_bytes_;
  }
  /// The D2H copy from staging slot `i` was enqueued on `copy_stream`.
  void staging_pushed(std::size_t i, cudaStream_t copy_stream) { record_event(i, copy_stream); }

  /// Step `t` starts: its record is the buffer of its parity, free once step t-2's copies are done.
  void begin_step(std::int64_t t, cudaStream_t stream) {
    cur_record_ = static_cast<std::size_t>(t & 1);
    wait_event(slots_ + cur_record_, stream);
  }
  /// The current record's last copy was enqueued on `copy_stream`.
  void record_pushed(cudaStream_t copy_stream) { record_event(slots_ + cur_record_, copy_stream); }

  void init_device_state(std::size_t p, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::int64_t cap = pi.device_capacity;
    launch_iota(d.sel.data(), cap, stream);
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      const channel_matrix<const T> w{static_cast<const T*>(pi.weights), pi.channels, pi.channel_len, pi.ld,
                                      pi.layout};
      detail::check_status(
          device::gather_channels<T, float>(w, d.sel.data(), cap, d.master.data(), nullptr, stream),
          "zenflow::cuda_backend: gather_channels");
    });
    detail::throw_if(cudaMemsetAsync(d.m.data(), 0, d.m.bytes(), stream), "zenflow::cuda_backend: memset");
    detail::throw_if(cudaMemsetAsync(d.v.data(), 0, d.v.bytes(), stream), "zenflow::cuda_backend: memset");
    detail::throw_if(cudaMemsetAsync(d.counts.data(), 0, d.counts.bytes(), stream),
                     "zenflow::cuda_backend: memset");
    if (dense_slot_[p] >= 0) {
      detail::throw_if(cudaMemsetAsync(counts_of(p), 0, 4, stream), "zenflow::cuda_backend: memset");
    }
    d.k = cap;
  }

  std::size_t download_weights(std::size_t p, float* dst, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    const auto n = static_cast<std::size_t>(pi.elements());
    device_buffer<float> tmp(n, stream);
    device_buffer<std::int32_t> all(static_cast<std::size_t>(pi.channels), stream);
    pinned_buffer<float> host(n);
    launch_iota(all.data(), pi.channels, stream);
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      const channel_matrix<const T> w{static_cast<const T*>(pi.weights), pi.channels, pi.channel_len, pi.ld,
                                      pi.layout};
      detail::check_status(
          device::gather_channels<T, float>(w, all.data(), pi.channels, tmp.data(), nullptr, stream),
          "zenflow::cuda_backend: gather_channels");
    });
    detail::throw_if(cudaMemcpyAsync(host.data(), tmp.data(), n * 4, cudaMemcpyDeviceToHost, stream),
                     "zenflow::cuda_backend: cudaMemcpyAsync");
    detail::throw_if(cudaStreamSynchronize(stream), "zenflow::cuda_backend: cudaStreamSynchronize");
    std::memcpy(dst, host.data(), n * 4);
    return pi.bytes();
  }

  /// The scores and NaN/Inf flags of every gradient (one batched call per dtype), the fp64
  /// per-tensor squared totals (sq_totals_kernel: the host backend's arithmetic, so a finite
  /// gradient's norm cannot overflow), then coef_t and bad_t into the record.
  void prologue(float loss_scale, float max_norm, cudaStream_t stream) {
    std::size_t offset = 0;
    for_each_group([&](auto tag, const std::vector<std::size_t>& members) {
      using T = decltype(tag);
      std::vector<channel_norm_item<T>> items = norm_items<T>(members);
      std::size_t b = temp_.bytes();
      detail::check_status(device::channel_norms_batched<channel_norm::sq_l2, T>(
                               temp_.data(), b, items.data(), static_cast<std::int64_t>(items.size()),
                               {nullptr, flags_.data() + offset}, stream),
                           "zenflow::cuda_backend: channel_norms_batched");
      offset += members.size();
    });
    const auto n = static_cast<unsigned>(params_->size());
    detail::engine_kernels::sq_totals_kernel<<<n, detail::sq_total_lanes, 0, stream>>>(sq_items_.data(),
                                                                                       totals_.data());
    detail::throw_if(cudaGetLastError(), "zenflow::cuda_backend: sq_totals_kernel");
    detail::engine_kernels::finish_scalars_kernel<<<1, 128, 0, stream>>>(
        totals_.data(), static_cast<int>(n), flags_.data(), static_cast<int>(offset), loss_scale, max_norm,
        record_[cur_record_].data(), static_cast<int>(2 * layout_.matrices));
    detail::throw_if(cudaGetLastError(), "zenflow::cuda_backend: finish_scalars_kernel");
  }

  /// Blocking read of the step's skip flag (only while a selection is pending).
  [[nodiscard]] bool read_skip(cudaStream_t stream) {
    detail::throw_if(
        cudaMemcpyAsync(h_word_.data(), record_[cur_record_].data() + 1, 4, cudaMemcpyDeviceToHost, stream),
        "zenflow::cuda_backend: cudaMemcpyAsync");
    detail::throw_if(cudaStreamSynchronize(stream), "zenflow::cuda_backend: cudaStreamSynchronize");
    return h_word_[0] != 0;
  }

  std::size_t select(std::size_t p, channel_norm kind, std::vector<std::int32_t>& out, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    if (kind == channel_norm::l1) {
      detail::dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        std::size_t b = temp_.bytes();
        detail::check_status(device::channel_norms<channel_norm::l1, T>(
                                 temp_.data(), b, static_cast<const T*>(pi.grads), pi.channels,
                                 pi.channel_len, pi.ld, pi.layout, d.scores.data(), {}, stream),
                             "zenflow::cuda_backend: channel_norms");
      });
    }
    std::size_t b = temp_.bytes();
    detail::check_status(device::topk(temp_.data(), b, d.scores.data(), pi.channels, pi.device_capacity,
                                      idx_.data(), nullptr, topk_order::ascending_index, stream),
                         "zenflow::cuda_backend: topk");
    const auto k = static_cast<std::size_t>(pi.device_capacity);
    detail::throw_if(cudaMemcpyAsync(h_idx_.data(), idx_.data(), k * 4, cudaMemcpyDeviceToHost, stream),
                     "zenflow::cuda_backend: cudaMemcpyAsync");
    detail::throw_if(cudaStreamSynchronize(stream), "zenflow::cuda_backend: cudaStreamSynchronize");
    out.assign(h_idx_.data(), h_idx_.data() + k);
    return k * 4;
  }

  std::pair<std::size_t, std::size_t> migrate(std::size_t p,
                                              const std::vector<std::int32_t>& old_sel,
                                              const std::vector<std::int32_t>& new_sel,
                                              float* h_master,
                                              float* h_m,
                                              float* h_v,
                                              std::int32_t* h_counts,
                                              cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::int64_t L = pi.channel_len;
    const std::int64_t cap = pi.device_capacity;
    std::vector<std::int32_t> leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch;
    detail::diff_selection(old_sel, new_sel, leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch);
    const auto nl = static_cast<std::int64_t>(leave_pos.size());
    const auto nk = static_cast<std::int64_t>(keep_old.size());
    const auto ne = static_cast<std::int64_t>(enter_pos.size());
    // Index lists up in one copy: [leave_pos | keep_old | keep_new | enter_pos | new_sel].
    std::int32_t* hi = h_idx_.data();
    std::int64_t o = 0;
    const auto put = [&](const std::vector<std::int32_t>& v) {
      std::copy(v.begin(), v.end(), hi + o);
      const std::int64_t at = o;
      o += static_cast<std::int64_t>(v.size());
      return at;
    };
    const std::int64_t o_leave = put(leave_pos), o_keep_old = put(keep_old), o_keep_new = put(keep_new),
                       o_enter = put(enter_pos), o_sel = put(new_sel);
    if (dense_slot_[p] >= 0) { // a vector's count lives in the dense array: d.counts stages it
      detail::throw_if(cudaMemcpyAsync(d.counts.data(), counts_of(p), 4, cudaMemcpyDeviceToDevice, stream),
                       "zenflow::cuda_backend: cudaMemcpyAsync");
    }
    copy(idx_.data(), hi, static_cast<std::size_t>(o) * 4, cudaMemcpyHostToDevice, stream);
    const std::int32_t* di = idx_.data();
    const auto compact = [&](float* base) {
      return channel_matrix<float>{base, cap, L, L, channel_layout::contiguous};
    };
    const auto ccompact = [&](const float* base) {
      return channel_matrix<const float>{base, cap, L, L, channel_layout::contiguous};
    };
    const std::size_t rows_bytes = static_cast<std::size_t>(L) * 4;
    // 1. Leaving rows go home.
    if (nl > 0) {
      float* st[3] = {stage_.data(), stage_.data() + nl * L, stage_.data() + 2 * nl * L};
      const float* src[3] = {d.master.data(), d.m.data(), d.v.data()};
      for (int a = 0; a < 3; ++a) {
        detail::check_status(
            device::gather_channels<float, float>(ccompact(src[a]), di + o_leave, nl, st[a], nullptr, stream),
            "zenflow::cuda_backend: gather_channels");
      }
      launch_move_counts(d.counts.data(), di + o_leave, stage_counts_.data(), nullptr, nl, stream);
      copy(h_stage_.data(), stage_.data(), static_cast<std::size_t>(3 * nl) * rows_bytes,
           cudaMemcpyDeviceToHost, stream);
      copy(h_stage_counts_.data(), stage_counts_.data(), static_cast<std::size_t>(nl) * 4,
           cudaMemcpyDeviceToHost, stream);
      detail::throw_if(cudaStreamSynchronize(stream), "zenflow::cuda_backend: cudaStreamSynchronize");
      for (std::int64_t r = 0; r < nl; ++r) {
        const std::int64_t c = leave_ch[static_cast<std::size_t>(r)];
        std::memcpy(h_master + c * L, h_stage_.data() + r * L, rows_bytes);
        std::memcpy(h_m + c * L, h_stage_.data() + (nl + r) * L, rows_bytes);
        std::memcpy(h_v + c * L, h_stage_.data() + (2 * nl + r) * L, rows_bytes);
        h_counts[c] = h_stage_counts_[static_cast<std::size_t>(r)];
      }
    }
    // 2. Kept rows move to their new positions in the second buffer set.
    float* dst[3] = {d.master2.data(), d.m2.data(), d.v2.data()};
    if (nk > 0) {
      const float* src[3] = {d.master.data(), d.m.data(), d.v.data()};
      for (int a = 0; a < 3; ++a) {
        detail::check_status(device::gather_channels<float, float>(ccompact(src[a]), di + o_keep_old, nk,
                                                                   stage_.data(), nullptr, stream),
                             "zenflow::cuda_backend: gather_channels");
        detail::check_status(device::scatter_channels<float, float>(stage_.data(), di + o_keep_new, nk,
                                                                    compact(dst[a]), stream),
                             "zenflow::cuda_backend: scatter_channels");
      }
      launch_move_counts(d.counts.data(), di + o_keep_old, d.counts2.data(), di + o_keep_new, nk, stream);
    }
    // 3. Entering rows come up from the host rows.
    if (ne > 0) {
      for (std::int64_t r = 0; r < ne; ++r) {
        const std::int64_t c = enter_ch[static_cast<std::size_t>(r)];
        std::memcpy(h_stage_.data() + r * L, h_master + c * L, rows_bytes);
        std::memcpy(h_stage_.data() + (ne + r) * L, h_m + c * L, rows_bytes);
        std::memcpy(h_stage_.data() + (2 * ne + r) * L, h_v + c * L, rows_bytes);
        h_stage_counts_[static_cast<std::size_t>(r)] = h_counts[c];
      }
      copy(stage_.data(), h_stage_.data(), static_cast<std::size_t>(3 * ne) * rows_bytes,
           cudaMemcpyHostToDevice, stream);
      copy(stage_counts_.data(), h_stage_counts_.data(), static_cast<std::size_t>(ne) * 4,
           cudaMemcpyHostToDevice, stream);
      for (int a = 0; a < 3; ++a) {
        detail::check_status(device::scatter_channels<float, float>(stage_.data() + a * ne * L, di + o_enter,
                                                                    ne, compact(dst[a]), stream),
                             "zenflow::cuda_backend: scatter_channels");
      }
      launch_move_counts(stage_counts_.data(), nullptr, d.counts2.data(), di + o_enter, ne, stream);
    }
    std::swap(d.master, d.master2);
    std::swap(d.m, d.m2);
    std::swap(d.v, d.v2);
    std::swap(d.counts, d.counts2);
    if (dense_slot_[p] >= 0) {
      detail::throw_if(cudaMemcpyAsync(counts_of(p), d.counts.data(), 4, cudaMemcpyDeviceToDevice, stream),
                       "zenflow::cuda_backend: cudaMemcpyAsync");
    }
    detail::throw_if(
        cudaMemcpyAsync(d.sel.data(), di + o_sel, new_sel.size() * 4, cudaMemcpyDeviceToDevice, stream),
        "zenflow::cuda_backend: cudaMemcpyAsync");
    d.k = static_cast<std::int64_t>(new_sel.size());
    detail::throw_if(cudaStreamSynchronize(stream),
                     "zenflow::cuda_backend: cudaStreamSynchronize"); // pinned reuse
    const std::size_t row = static_cast<std::size_t>(L) * 12 + 4;
    return {static_cast<std::size_t>(nl) * row,
            static_cast<std::size_t>(ne) * row + static_cast<std::size_t>(o) * 4};
  }

  std::size_t set_host_set(std::size_t p, const std::vector<std::int32_t>& host_set, cudaStream_t stream) {
    auto& d = dev_[p];
    std::copy(host_set.begin(), host_set.end(), h_idx_.data());
    copy(d.host_set.data(), h_idx_.data(), host_set.size() * 4, cudaMemcpyHostToDevice, stream);
    detail::throw_if(cudaStreamSynchronize(stream),
                     "zenflow::cuda_backend: cudaStreamSynchronize"); // pinned reuse
    return host_set.size() * 4;
  }

  void update(float lr, const adamw_hparams& base, cudaStream_t stream) {
    const float* coef = record_[cur_record_].data();
    const auto* skip = reinterpret_cast<const std::uint32_t*>(record_[cur_record_].data() + 1);
    // The vectors: one adamw_dense call per run of device-resident vectors of one dtype and one set
    // of hyper-parameters (a run is contiguous in the count array; in practice one per group).
    std::size_t i = 0;
    while (i < dense_order_.size()) {
      const std::size_t first = i;
      const auto& lead = (*params_)[dense_order_[i]];
      const dtype type = lead.type;
      while (i < dense_order_.size() && dev_[dense_order_[i]].k != 0 &&
             (*params_)[dense_order_[i]].type == type && (*params_)[dense_order_[i]].same_hparams(lead)) {
        ++i;
      }
      if (i == first) { // a vector not on the device (yet)
        ++i;
        continue;
      }
      detail::dispatch_dtype(type, [&](auto tag) {
        using T = decltype(tag);
        std::vector<adamw_tensor<T>> tensors;
        tensors.reserve(i - first);
        for (std::size_t j = first; j < i; ++j) {
          const auto& pi = (*params_)[dense_order_[j]];
          auto& d = dev_[dense_order_[j]];
          tensors.push_back({static_cast<T*>(pi.weights), static_cast<const T*>(pi.grads), d.master.data(),
                             d.m.data(), d.v.data(), pi.channel_len});
        }
        detail::check_status(device::adamw_dense<T>(tensors.data(), static_cast<int>(tensors.size()),
                                                    dense_counts_.data() + first, lead.hparams(base, lr),
                                                    coef, skip, stream),
                             "zenflow::cuda_backend: adamw_dense");
      });
    }
    for (std::size_t p = 0; p < dev_.size(); ++p) {
      const auto& pi = (*params_)[p];
      auto& d = dev_[p];
      if (d.k == 0 || pi.device_dense) {
        continue;
      }
      detail::dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        detail::check_status(device::adamw_selective<T>(pi.weight_matrix<T>(), pi.grad_matrix<T>(),
                                                        d.sel.data(), d.k, d.master.data(), d.m.data(),
                                                        d.v.data(), d.counts.data(), pi.hparams(base, lr),
                                                        coef, skip, mass(d, 0), stream),
                             "zenflow::cuda_backend: adamw_selective");
      });
    }
  }

  void pack(std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(device::gather_channels<T, T>(pi.grad_matrix<T>(), d.host_set.data() + begin,
                                                         end - begin, reinterpret_cast<T*>(dst),
                                                         mass(d, layout_.matrices), stream),
                           "zenflow::cuda_backend: gather_channels");
    });
  }

  /// pack() for a gradient announced early (engine::grad_ready), on the user's stream: the rest
  /// mass goes into the early masses, since the step's record is zeroed later by prologue().
  void pack_early(std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(device::gather_channels<T, T>(pi.grad_matrix<T>(), d.host_set.data() + begin,
                                                         end - begin, reinterpret_cast<T*>(dst),
                                                         early_rest_.data() + d.matrix_index, stream),
                           "zenflow::cuda_backend: gather_channels");
    });
  }

  /// After prologue(), on the user's stream: the early rest masses join the record and are zeroed
  /// for the next step's announcements (stream-ordered before them).
  void adopt_early(cudaStream_t stream) {
    if (layout_.matrices > 0) {
      detail::engine_kernels::adopt_early_mass_kernel<<<1, 128, 0, stream>>>(
          early_rest_.data(),
          record_[cur_record_].data() + detail::step_record_layout::header_words + layout_.matrices,
          static_cast<int>(layout_.matrices));
      detail::throw_if(cudaGetLastError(), "zenflow::cuda_backend: adopt_early_mass_kernel");
    }
  }

  // ---- the upload of a host window's new weights (docs/design.md "Streaming"; docs/engine.md) --------
  //
  // Called on the thread that ran the host job (the window queue's executor with overlap), right
  // after the job wrote the pinned upload buffers: begin_uploads, upload per parameter,
  // end_uploads. The H2D copies run on the backend's upload stream (a copy stream of its own,
  // so that they overlap the next window's compute and the D2H ring). At the boundary the
  // training thread calls begin_apply (the user's stream waits on the copies' event: no host
  // wait), apply_upload per parameter (a device-to-device scatter) and end_apply. Events guard
  // the single pinned buffer (wait_upload_done) and the device upload buffer (the next
  // window's copies wait on the last scatter). The engine never runs two of these phases at
  // once: a job is submitted only after the previous job's scatter was enqueued, and the
  // boundary runs only after the job finished (the queue orders the two threads).

  /// Job thread: the next copies may overwrite the device upload buffers only after the last
  /// scatter read them (stream-ordered on the upload stream; the host does not wait).
  void begin_uploads() {
    // The job's thread may not have made the engine's device current (the user's may not be 0).
    detail::throw_if(cudaSetDevice(device_), "zenflow::cuda_backend: cudaSetDevice");
    if (scatter_recorded_) {
      detail::throw_if(cudaStreamWaitEvent(upload_stream_, scattered_, 0),
                       "zenflow::cuda_backend: cudaStreamWaitEvent");
    }
  }

  /// Job thread: copies host-set positions [begin, end) of `p`'s new weights from its pinned
  /// upload buffer `src` (position 0 at `src`) into the device upload buffer, on the upload
  /// stream. Returns the bytes.
  std::size_t upload(std::size_t p, const std::byte* src, std::int64_t begin, std::int64_t end) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::size_t at = static_cast<std::size_t>(begin) * pi.channel_bytes();
    const std::size_t bytes = static_cast<std::size_t>(end - begin) * pi.channel_bytes();
    copy(d.upload.data() + at, src + at, bytes, cudaMemcpyHostToDevice, upload_stream_);
    return bytes;
  }

  /// Job thread: the copies of this window are enqueued; the boundary's scatter waits on them.
  void end_uploads() {
    detail::throw_if(cudaEventRecord(copied_, upload_stream_), "zenflow::cuda_backend: cudaEventRecord");
    copy_recorded_ = true;
  }

  /// Training thread, at the boundary: the scatter on `stream` starts after the copies.
  void begin_apply(cudaStream_t stream) {
    if (copy_recorded_) {
      detail::throw_if(cudaStreamWaitEvent(stream, copied_, 0), "zenflow::cuda_backend: cudaStreamWaitEvent");
    }
  }

  /// Training thread: writes the uploaded weights of host-set positions [begin, end) of `p` into
  /// the working weights (device to device, on `stream`). Returns the bytes that were copied up.
  std::size_t apply_upload(std::size_t p, std::int64_t begin, std::int64_t end, cudaStream_t stream) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::size_t bytes = static_cast<std::size_t>(end - begin) * pi.channel_bytes();
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(device::scatter_channels<T, T>(
                               reinterpret_cast<const T*>(d.upload.data()) + begin * pi.channel_len,
                               d.host_set.data() + begin, end - begin, pi.weight_matrix<T>(), stream),
                           "zenflow::cuda_backend: scatter_channels");
    });
    return bytes;
  }

  /// Training thread: the scatter is enqueued; the next copies wait on it.
  void end_apply(cudaStream_t stream) {
    detail::throw_if(cudaEventRecord(scattered_, stream), "zenflow::cuda_backend: cudaEventRecord");
    scatter_recorded_ = true;
  }

  /// Host side: blocks until the last upload copies have read the pinned upload buffers (called
  /// by a host job before it writes them again).
  void wait_upload_done() {
    if (copy_recorded_) {
      detail::throw_if(cudaEventSynchronize(copied_), "zenflow::cuda_backend: cudaEventSynchronize");
    }
  }

  void read_device_state(std::size_t p,
                         std::vector<float>& master,
                         std::vector<float>& m,
                         std::vector<float>& v,
                         std::vector<std::int32_t>& counts,
                         std::vector<std::int32_t>& sel,
                         cudaStream_t stream) const {
    const auto& d = dev_[p];
    const auto n = static_cast<std::size_t>(d.k * (*params_)[p].channel_len);
    const auto k = static_cast<std::size_t>(d.k);
    master.resize(n);
    m.resize(n);
    v.resize(n);
    counts.resize(k);
    sel.resize(k);
    copy(master.data(), d.master.data(), n * 4, cudaMemcpyDeviceToHost, stream);
    copy(m.data(), d.m.data(), n * 4, cudaMemcpyDeviceToHost, stream);
    copy(v.data(), d.v.data(), n * 4, cudaMemcpyDeviceToHost, stream);
    copy(counts.data(), dense_slot_[p] >= 0 ? counts_of(p) : d.counts.data(), k * 4, cudaMemcpyDeviceToHost,
         stream);
    copy(sel.data(), d.sel.data(), k * 4, cudaMemcpyDeviceToHost, stream);
    detail::throw_if(cudaStreamSynchronize(stream), "zenflow::cuda_backend: cudaStreamSynchronize");
  }

private:
  struct dev_param {
    std::int64_t matrix_index = -1;
    std::int64_t k = 0;
    device_buffer<float> master, m, v, master2, m2, v2;
    device_buffer<std::int32_t> counts, counts2, sel, host_set;
    device_buffer<float> scores;
    device_buffer<std::byte> upload;
  };

  /// The update count of device-dense parameter `p` in the dense count array.
  std::int32_t* counts_of(std::size_t p) { return dense_counts_.data() + dense_slot_[p]; }
  [[nodiscard]] const std::int32_t* counts_of(std::size_t p) const {
    return dense_counts_.data() + dense_slot_[p];
  }

  float* mass(const dev_param& d, std::int64_t base) {
    return d.matrix_index < 0 ? nullptr
                              : record_[cur_record_].data() + detail::step_record_layout::header_words +
                                    base + d.matrix_index;
  }

  template <class F>
  void for_each_group(F&& f) {
    for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
      std::vector<std::size_t> members;
      for (std::size_t p = 0; p < params_->size(); ++p) {
        if ((*params_)[p].type == t) {
          members.push_back(p);
        }
      }
      if (!members.empty()) {
        detail::dispatch_dtype(t, [&](auto tag) { f(tag, members); });
      }
    }
  }

  template <class T>
  std::vector<channel_norm_item<T>> norm_items(const std::vector<std::size_t>& members) {
    std::vector<channel_norm_item<T>> items;
    for (const std::size_t p : members) {
      const auto& pi = (*params_)[p];
      items.push_back({static_cast<const T*>(pi.grads), pi.channels, pi.channel_len, pi.ld, pi.layout,
                       dev_[p].scores.data()});
    }
    return items;
  }

  static void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    if (bytes > 0) {
      detail::throw_if(cudaMemcpyAsync(dst, src, bytes, kind, stream),
                       "zenflow::cuda_backend: cudaMemcpyAsync");
    }
  }
  static void launch_iota(std::int32_t* out, std::int64_t n, cudaStream_t stream) {
    if (n > 0) {
      detail::engine_kernels::iota_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, n);
      detail::throw_if(cudaGetLastError(), "zenflow::cuda_backend: iota_kernel");
    }
  }
  static void launch_move_counts(const std::int32_t* src,
                                 const std::int32_t* src_idx,
                                 std::int32_t* dst,
                                 const std::int32_t* dst_idx,
                                 std::int64_t n,
                                 cudaStream_t stream) {
    if (n > 0) {
      detail::engine_kernels::move_counts_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
          src, src_idx, dst, dst_idx, n);
      detail::throw_if(cudaGetLastError(), "zenflow::cuda_backend: move_counts_kernel");
    }
  }
  void record_event(std::size_t i, cudaStream_t s) {
    detail::throw_if(cudaEventRecord(events_[i], s), "zenflow::cuda_backend: cudaEventRecord");
    event_used_[i] = true;
  }
  void wait_event(std::size_t i, cudaStream_t s) {
    if (event_used_[i]) {
      detail::throw_if(cudaStreamWaitEvent(s, events_[i], 0), "zenflow::cuda_backend: cudaStreamWaitEvent");
    }
  }

  const std::vector<detail::param_info>* params_ = nullptr;
  std::size_t slots_;
  std::vector<dev_param> dev_;
  std::vector<std::size_t> dense_order_;     // device-dense parameters in count-slot order
  std::vector<std::int64_t> dense_slot_;     // per parameter: its slot in dense_counts_, or -1
  device_buffer<std::int32_t> dense_counts_; // the vectors' update counts, contiguous
  detail::step_record_layout layout_{};
  device_buffer<float> record_[2];
  std::size_t cur_record_ = 0;
  device_buffer<float> early_rest_; // per matrix: rest mass of the packs done by grad_ready
  device_buffer<double> totals_;    // per parameter (registration order): fp64 squared norm
  device_buffer<detail::engine_kernels::sq_total_item> sq_items_;
  device_buffer<std::uint32_t> flags_; // per parameter, in dtype-group order
  device_buffer<std::int32_t> idx_;
  pinned_buffer<std::int32_t> h_idx_;
  device_buffer<float> stage_;
  device_buffer<std::int32_t> stage_counts_;
  pinned_buffer<float> h_stage_;
  pinned_buffer<std::int32_t> h_stage_counts_;
  pinned_buffer<std::uint32_t> h_word_;
  device_buffer<std::byte> staging_;
  std::size_t staging_bytes_ = 0;
  device_buffer<std::byte> temp_;
  std::vector<cudaEvent_t> events_; // [0, slots): staging slots; slots + 0/1: records
  std::vector<bool> event_used_;    // training thread only
  // The upload (see begin_uploads): its stream and events; each flag is written by the thread of
  // its phase and read by the other only across the window queue's hand-over.
  int device_ = 0; // the device of setup(), made current on the job's thread
  cudaStream_t upload_stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;    // recorded on upload_stream_ after a window's H2D copies
  cudaEvent_t scattered_ = nullptr; // recorded on the user's stream after the boundary's scatter
  bool copy_recorded_ = false;
  bool scatter_recorded_ = false;
};

ZF_NAMESPACE_END
