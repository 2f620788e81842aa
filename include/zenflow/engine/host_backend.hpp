/// @file
/// The engine's host backend: the "device" is host memory and the calling thread. It runs the
/// same engine (ring, window queue, host window, schedule) as the CUDA backend, so that the
/// whole algorithm is tested without a GPU; its "device" operations are the host twins of the
/// primitives (zenflow::host::channel_norms, topk, adamw_selective, adamw_dense,
/// gather_channels, scatter_channels).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/params.hpp>
#include <zenflow/engine/detail/step_record.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
/// Kept for the engine's call sites: `detail::check` (core/error.hpp), the one rule.
inline void check_status(cudaError_t e, const char* what) {
  check(e, what);
}
} // namespace detail

/// Host backend of `zenflow::engine`: parameters are host pointers and the "device" work runs
/// on the calling thread. Stream arguments are ignored.
class host_backend {
public:
  static constexpr bool is_device = false;
  using copy_backend_type = host_copy_backend;
  /// Host buffers the copies read or write (pinned on the CUDA backend).
  template <class T>
  using host_buffer = std::vector<T>;

  explicit host_backend(const config& /*cfg*/) {}

  /// Allocates the per-parameter "device" buffers: compact state for `device_k` channels (or the
  /// whole tensor for `device_dense`), scores, index lists, the upload buffer, one staging slot.
  void setup(const std::vector<detail::param_info>& params, std::size_t staging_bytes, memory_usage& mem) {
    params_ = &params;
    dev_.assign(params.size(), {});
    std::int64_t matrices = 0;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      auto& d = dev_[p];
      if (pi.matrix) {
        d.matrix_index = matrices++;
        d.scores.resize(static_cast<std::size_t>(pi.channels));
        mem.device_scratch += d.scores.size() * 4;
      }
      const auto rows = static_cast<std::size_t>(pi.device_capacity * pi.channel_len);
      d.master.resize(rows);
      d.m.resize(rows);
      d.v.resize(rows);
      d.counts.resize(static_cast<std::size_t>(pi.device_capacity));
      d.sel.resize(static_cast<std::size_t>(pi.device_capacity));
      (pi.matrix ? mem.device_selected_state : mem.device_vector_state) += rows * 12 + d.counts.size() * 8;
      if (pi.host_side) {
        d.host_set.resize(static_cast<std::size_t>(pi.channels));
        d.upload.resize(static_cast<std::size_t>(pi.channels) * pi.channel_bytes());
        mem.device_upload += d.upload.size();
        mem.device_scratch += d.host_set.size() * 4;
      }
    }
    layout_.matrices = matrices;
    // The vectors' update counts, one contiguous array (slots grouped by dtype): one dense AdamW
    // call per dtype, as on the device. d.counts stays their staging for migrate().
    dense_order_ = detail::dense_order(params);
    dense_slot_.assign(params.size(), -1);
    for (std::size_t i = 0; i < dense_order_.size(); ++i) {
      dense_slot_[dense_order_[i]] = static_cast<std::int64_t>(i);
    }
    dense_counts_.assign(std::max<std::size_t>(dense_order_.size(), 1), 0);
    mem.device_vector_state += dense_counts_.size() * 4;
    record_.assign(layout_.bytes(), std::byte{0});
    early_rest_.assign(static_cast<std::size_t>(std::max<std::int64_t>(matrices, 1)), 0.0f);
    staging_.resize(staging_bytes);
    mem.device_staging += staging_.size();
    mem.device_scratch += record_.size() + early_rest_.size() * 4;
  }

  [[nodiscard]] const detail::step_record_layout& record_layout() const noexcept { return layout_; }
  /// "Device" address of the step record.
  [[nodiscard]] const void* record() const noexcept { return record_.data(); }
  /// "Device" staging slot `i` for packed gradients (the host backend has one).
  [[nodiscard]] std::byte* staging(std::size_t /*i*/, cudaStream_t) noexcept { return staging_.data(); }
  [[nodiscard]] static constexpr std::size_t staging_slots() noexcept { return 1; }
  /// Stream-ordering hooks of the CUDA backend; nothing to order here (every copy is done).
  void staging_pushed(std::size_t, cudaStream_t) noexcept {}
  void begin_step(std::int64_t, cudaStream_t) noexcept {}
  void record_pushed(cudaStream_t) noexcept {}
  void wait_upload_done() noexcept {}

  /// gpu_adamw: every parameter's device state from its working weights (count 0).
  void init_device_state(std::size_t p, cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      const auto w = pi.weight_matrix<T>();
      for (std::int64_t c = 0; c < pi.device_capacity; ++c) {
        d.sel[static_cast<std::size_t>(c)] = static_cast<std::int32_t>(c);
        for (std::int64_t i = 0; i < pi.channel_len; ++i) {
          d.master[static_cast<std::size_t>(c * pi.channel_len + i)] = to_float(w(c, i));
        }
      }
    });
    std::fill(d.m.begin(), d.m.end(), 0.0f);
    std::fill(d.v.begin(), d.v.end(), 0.0f);
    std::fill(d.counts.begin(), d.counts.end(), 0);
    if (dense_slot_[p] >= 0) {
      dense_counts_[static_cast<std::size_t>(dense_slot_[p])] = 0;
    }
    d.k = pi.device_capacity;
  }

  /// The working weights of `p` widened to fp32, channel-major, into `dst` (blocking).
  /// Returns the bytes a device would copy down.
  std::size_t download_weights(std::size_t p, float* dst, cudaStream_t) {
    const auto& pi = (*params_)[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      const auto w = pi.weight_matrix<T>();
      for (std::int64_t c = 0; c < pi.channels; ++c) {
        for (std::int64_t i = 0; i < pi.channel_len; ++i) {
          dst[c * pi.channel_len + i] = to_float(w(c, i));
        }
      }
    });
    return pi.bytes();
  }

  /// Squared norms of every gradient with the NaN/Inf flag fused, then coef_t and bad_t into the
  /// record; the Zen-auto masses are zeroed (the update and the pack add into them). The squared
  /// global norm is the fp64 sum of the per-tensor totals (`detail::sq_total_lane`: the CUDA
  /// backend's arithmetic, in its order), so that it cannot overflow for finite gradients.
  void prologue(float loss_scale, float max_norm, cudaStream_t) {
    double sum = 0.0;
    std::uint32_t bad = 0;
    double lanes[detail::sq_total_lanes];
    for (std::size_t p = 0; p < dev_.size(); ++p) {
      const auto& pi = (*params_)[p];
      auto& d = dev_[p];
      std::uint32_t nonfinite = 0;
      float one_score = 0.0f;
      float* scores = pi.matrix ? d.scores.data() : &one_score;
      detail::dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        const auto* g = static_cast<const T*>(pi.grads);
        std::size_t tb = 0;
        detail::check_status(host::channel_norms<channel_norm::sq_l2>(
                                 nullptr, tb, g, pi.channels, pi.channel_len, pi.ld, pi.layout, scores),
                             "zenflow::engine: channel_norms");
        temp_.resize(std::max(temp_.size(), tb));
        detail::check_status(host::channel_norms<channel_norm::sq_l2>(temp_.data(), tb, g, pi.channels,
                                                                      pi.channel_len, pi.ld, pi.layout,
                                                                      scores, {nullptr, &nonfinite}),
                             "zenflow::engine: channel_norms");
        for (int j = 0; j < detail::sq_total_lanes; ++j) {
          lanes[j] = detail::sq_total_lane<T>(pi.grad_matrix<T>(), scores, j);
        }
      });
      sum += detail::sum_lanes(lanes);
      bad |= nonfinite;
    }
    float coef = 1.0f;
    std::uint32_t skip = 0;
    detail::finish_step_scalars(sum, bad, loss_scale, max_norm, &coef, &skip);
    std::fill(record_.begin(), record_.end(), std::byte{0});
    detail::write_step_header(record_.data(), coef, skip, sum);
  }

  /// The step's skip flag, read on the host (a blocking read on a device; used only while a
  /// selection is pending).
  [[nodiscard]] bool read_skip(cudaStream_t) const {
    std::uint32_t skip;
    std::memcpy(&skip, record_.data() + 4, 4);
    return skip != 0;
  }

  /// Top-k (indices ascending) of matrix `p`'s importance scores of this step into `out`.
  /// Returns the bytes a device copies down (the indices).
  std::size_t select(std::size_t p, channel_norm kind, std::vector<std::int32_t>& out, cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    if (kind == channel_norm::l1) {
      detail::dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        const auto* g = static_cast<const T*>(pi.grads);
        std::size_t tb = 0;
        detail::check_status(host::channel_norms<channel_norm::l1>(nullptr, tb, g, pi.channels,
                                                                   pi.channel_len, pi.ld, pi.layout,
                                                                   d.scores.data()),
                             "zenflow::engine: channel_norms");
        temp_.resize(std::max(temp_.size(), tb));
        detail::check_status(host::channel_norms<channel_norm::l1>(temp_.data(), tb, g, pi.channels,
                                                                   pi.channel_len, pi.ld, pi.layout,
                                                                   d.scores.data()),
                             "zenflow::engine: channel_norms");
      });
    }
    out.resize(static_cast<std::size_t>(pi.device_capacity));
    std::size_t tb = 0;
    detail::check_status(
        host::topk(nullptr, tb, d.scores.data(), pi.channels, pi.device_capacity, out.data()),
        "zenflow::engine: topk");
    temp_.resize(std::max(temp_.size(), tb));
    detail::check_status(
        host::topk(temp_.data(), tb, d.scores.data(), pi.channels, pi.device_capacity, out.data()),
        "zenflow::engine: topk");
    return out.size() * sizeof(std::int32_t);
  }

  /// Moves optimizer state between the full-size host rows and the device's compact rows when
  /// the device set of `p` changes from `old_sel` to `new_sel` (ascending; `old_sel` empty the
  /// first time). Leaving rows go home, entering rows come up, kept rows move on the device.
  /// Returns {device->host, host->device} bytes.
  std::pair<std::size_t, std::size_t> migrate(std::size_t p,
                                              const std::vector<std::int32_t>& old_sel,
                                              const std::vector<std::int32_t>& new_sel,
                                              float* h_master,
                                              float* h_m,
                                              float* h_v,
                                              std::int32_t* h_counts,
                                              cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::int64_t L = pi.channel_len;
    const channel_state host_rows{h_master, h_m, h_v, h_counts, pi.channels, L};
    std::vector<std::int32_t> leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch;
    detail::diff_selection(old_sel, new_sel, leave_pos, leave_ch, keep_old, keep_new, enter_pos, enter_ch);
    if (dense_slot_[p] >= 0) { // a vector's count lives in the dense array: d.counts stages it
      d.counts[0] = dense_counts_[static_cast<std::size_t>(dense_slot_[p])];
    }
    // Leaving rows: compact rows -> host rows (state rows are "channels" of the compact matrix).
    move_rows(d.master.data(), d.m.data(), d.v.data(), d.counts.data(), leave_pos, host_rows.master,
              host_rows.m, host_rows.v, host_rows.counts, leave_ch, L);
    // Kept rows move to their new positions (through a copy: positions only move down).
    std::vector<float> nm(d.master.size()), nmm(d.m.size()), nv(d.v.size());
    std::vector<std::int32_t> nc(d.counts.size());
    move_rows(d.master.data(), d.m.data(), d.v.data(), d.counts.data(), keep_old, nm.data(), nmm.data(),
              nv.data(), nc.data(), keep_new, L);
    // Entering rows: host rows -> compact rows.
    move_rows(host_rows.master, host_rows.m, host_rows.v, host_rows.counts, enter_ch, nm.data(), nmm.data(),
              nv.data(), nc.data(), enter_pos, L);
    d.master.swap(nm);
    d.m.swap(nmm);
    d.v.swap(nv);
    d.counts.swap(nc);
    if (dense_slot_[p] >= 0) {
      dense_counts_[static_cast<std::size_t>(dense_slot_[p])] = d.counts[0];
    }
    std::copy(new_sel.begin(), new_sel.end(), d.sel.begin());
    d.k = static_cast<std::int64_t>(new_sel.size());
    const std::size_t row = static_cast<std::size_t>(L) * 12 + 4;
    return {leave_ch.size() * row, enter_ch.size() * row + new_sel.size() * 4};
  }

  /// Installs the ascending list of host-side channels of `p`. Returns the bytes copied up.
  std::size_t set_host_set(std::size_t p, const std::vector<std::int32_t>& host_set, cudaStream_t) {
    auto& d = dev_[p];
    std::copy(host_set.begin(), host_set.end(), d.host_set.begin());
    return host_set.size() * 4;
  }

  /// Fused selective AdamW on the device channels of every matrix (crit masses into the record)
  /// and dense AdamW on the device-resident vectors, with the record's coef_t and skip flag.
  void update(float lr, const adamw_hparams& base, cudaStream_t) {
    const auto* coef = reinterpret_cast<const float*>(record_.data());
    const auto* skip = reinterpret_cast<const std::uint32_t*>(record_.data() + 4);
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
        detail::check_status(host::adamw_dense<T>(tensors.data(), static_cast<int>(tensors.size()),
                                                  dense_counts_.data() + first, lead.hparams(base, lr), coef,
                                                  skip, nullptr),
                             "zenflow::engine: adamw_dense");
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
        detail::check_status(host::adamw_selective<T>(pi.weight_matrix<T>(), pi.grad_matrix<T>(),
                                                      d.sel.data(), d.k, d.master.data(), d.m.data(),
                                                      d.v.data(), d.counts.data(), pi.hparams(base, lr), coef,
                                                      skip, crit(d), nullptr),
                             "zenflow::engine: adamw_selective");
      });
    }
  }

  /// Packs the gradients of host-set positions [begin, end) of `p` into `dst` (rest mass into
  /// the record).
  void pack(std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(host::gather_channels<T, T>(pi.grad_matrix<T>(), d.host_set.data() + begin,
                                                       end - begin, reinterpret_cast<T*>(dst), rest(d),
                                                       nullptr),
                           "zenflow::engine: gather_channels");
    });
  }

  /// pack() for a gradient announced early (engine::grad_ready): the rest mass goes into the
  /// early masses, since the step's record is zeroed later by prologue().
  void pack_early(std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(host::gather_channels<T, T>(pi.grad_matrix<T>(), d.host_set.data() + begin,
                                                       end - begin, reinterpret_cast<T*>(dst),
                                                       early_rest_.data() + d.matrix_index, nullptr),
                           "zenflow::engine: gather_channels");
    });
  }

  /// After prologue(): the early rest masses join the record (0 + early: the same bits as if the
  /// packs had added into the record) and are zeroed for the next step.
  void adopt_early(cudaStream_t) {
    auto* rest0 = reinterpret_cast<float*>(record_.data()) + detail::step_record_layout::header_words +
                  layout_.matrices;
    for (std::int64_t i = 0; i < layout_.matrices; ++i) {
      rest0[i] += early_rest_[static_cast<std::size_t>(i)];
      early_rest_[static_cast<std::size_t>(i)] = 0.0f;
    }
  }

  // ---- the upload of a host window's new weights: the CUDA backend's structure -------------
  //
  // The thread that ran the host job copies its upload buffers into the "device" upload buffers
  // (begin_uploads, upload, end_uploads: the H2D copy on the copy stream); the boundary writes
  // them into the working weights (begin_apply, apply_upload, end_apply: the scatter on the
  // user's stream). The phases must alternate, one window at a time, as the CUDA backend's events
  // require: a copy over an upload not yet scattered, or a scatter of nothing copied, throws
  // std::logic_error, so that the tests check the engine's ordering.

  void begin_uploads() {
    if (uploaded_) {
      throw std::logic_error("zenflow::host_backend: upload over a window not yet applied");
    }
  }

  /// Copies host-set positions [begin, end) of `p`'s new weights from its upload buffer `src`
  /// (position 0 at `src`) into the "device" upload buffer. Returns the bytes copied up.
  std::size_t upload(std::size_t p, const std::byte* src, std::int64_t begin, std::int64_t end) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    const std::size_t at = static_cast<std::size_t>(begin) * pi.channel_bytes();
    const std::size_t bytes = static_cast<std::size_t>(end - begin) * pi.channel_bytes();
    if (bytes > 0) {
      std::memcpy(d.upload.data() + at, src + at, bytes); // the host -> device copy
    }
    return bytes;
  }

  void end_uploads() noexcept { uploaded_ = true; }

  void begin_apply(cudaStream_t) {
    if (!uploaded_) {
      throw std::logic_error("zenflow::host_backend: apply of a window not uploaded");
    }
  }

  /// Writes the uploaded weights of host-set positions [begin, end) of `p` into the working
  /// weights. Returns the bytes that were copied up.
  std::size_t apply_upload(std::size_t p, std::int64_t begin, std::int64_t end, cudaStream_t) {
    const auto& pi = (*params_)[p];
    auto& d = dev_[p];
    detail::dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      detail::check_status(host::scatter_channels<T, T>(
                               reinterpret_cast<const T*>(d.upload.data()) + begin * pi.channel_len,
                               d.host_set.data() + begin, end - begin, pi.weight_matrix<T>(), nullptr),
                           "zenflow::engine: scatter_channels");
    });
    return static_cast<std::size_t>(end - begin) * pi.channel_bytes();
  }

  void end_apply(cudaStream_t) noexcept { uploaded_ = false; }

  /// Test access: the device-resident state of `p` (compact rows, in device-set order).
  void read_device_state(std::size_t p,
                         std::vector<float>& master,
                         std::vector<float>& m,
                         std::vector<float>& v,
                         std::vector<std::int32_t>& counts,
                         std::vector<std::int32_t>& sel,
                         cudaStream_t) const {
    const auto& d = dev_[p];
    const auto L = static_cast<std::size_t>((*params_)[p].channel_len);
    const auto k = static_cast<std::size_t>(d.k);
    master.assign(d.master.begin(), d.master.begin() + static_cast<std::ptrdiff_t>(k * L));
    m.assign(d.m.begin(), d.m.begin() + static_cast<std::ptrdiff_t>(k * L));
    v.assign(d.v.begin(), d.v.begin() + static_cast<std::ptrdiff_t>(k * L));
    if (dense_slot_[p] >= 0) {
      counts.assign(k, dense_counts_[static_cast<std::size_t>(dense_slot_[p])]);
    } else {
      counts.assign(d.counts.begin(), d.counts.begin() + static_cast<std::ptrdiff_t>(k));
    }
    sel.assign(d.sel.begin(), d.sel.begin() + static_cast<std::ptrdiff_t>(k));
  }

private:
  struct dev_param {
    std::int64_t matrix_index = -1;
    std::int64_t k = 0; // rows in use
    std::vector<float> master, m, v;
    std::vector<std::int32_t> counts;
    std::vector<std::int32_t> sel;
    std::vector<std::int32_t> host_set;
    std::vector<float> scores;
    std::vector<std::byte> upload;
  };

  float* crit(const dev_param& d) {
    return d.matrix_index < 0 ? nullptr
                              : reinterpret_cast<float*>(record_.data()) +
                                    detail::step_record_layout::header_words + d.matrix_index;
  }
  float* rest(const dev_param& d) {
    return d.matrix_index < 0
               ? nullptr
               : reinterpret_cast<float*>(record_.data()) + detail::step_record_layout::header_words +
                     layout_.matrices + d.matrix_index;
  }

  /// dst rows `dst_rows[i]` = src rows `src_rows[i]` of master, m, v (len L) and counts.
  static void move_rows(const float* sm,
                        const float* s1,
                        const float* s2,
                        const std::int32_t* sc,
                        const std::vector<std::int32_t>& src_rows,
                        float* dm,
                        float* d1,
                        float* d2,
                        std::int32_t* dc,
                        const std::vector<std::int32_t>& dst_rows,
                        std::int64_t L) {
    for (std::size_t i = 0; i < src_rows.size(); ++i) {
      const std::int64_t s = src_rows[i];
      const std::int64_t t = dst_rows[i];
      std::copy_n(sm + s * L, L, dm + t * L);
      std::copy_n(s1 + s * L, L, d1 + t * L);
      std::copy_n(s2 + s * L, L, d2 + t * L);
      dc[t] = sc[s];
    }
  }

  const std::vector<detail::param_info>* params_ = nullptr;
  std::vector<dev_param> dev_;
  std::vector<std::size_t> dense_order_;   // device-dense parameters in count-slot order
  std::vector<std::int64_t> dense_slot_;   // per parameter: its slot in dense_counts_, or -1
  std::vector<std::int32_t> dense_counts_; // the vectors' update counts, contiguous
  detail::step_record_layout layout_{};
  std::vector<std::byte> record_;
  std::vector<float> early_rest_; // per matrix: rest mass of the packs done by grad_ready
  std::vector<std::byte> staging_;
  std::vector<std::byte> temp_;
  bool uploaded_ = false; // uploads copied and not yet applied (ordered by the window queue)
};

ZF_NAMESPACE_END
