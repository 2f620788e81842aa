/// @file
/// The declaration of `detail::device_owner_reduction` (included whole by
/// device_owner_reduction.hpp; read its comment). Its member definitions,
/// device_owner_reduction_impl.hpp, include this header and not device_owner_reduction.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/detail/dp/owner_reduction.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/plan/step_kernels.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/schedule/l1_mass.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Comm, class Host>
class device_owner_reduction {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  template <class T>
  using hbuf = typename Backend::template host_buffer<T>;
  using context = owner_context<Backend, Comm, Host>;

public:
  /// initialize(), before the plan's setup: the per-channel buffers of the split matrices, and
  /// the rescans that the plan's squared totals read (inputs()). Returns the device bytes
  /// allocated.
  std::size_t setup(const context& ctx);

  /// The squared totals' rescans of the split matrices: the plan's setup takes them.
  [[nodiscard]] const plan_inputs& inputs() const noexcept { return inputs_; }

  /// After the prologue's norms on the mean gradient: the scores and the rescans of the
  /// split matrices summed over the ranks (each its block's), the flags or-reduced. `rest`: the
  /// step reads the rest masses (write_rest()). Returns the bytes this rank sent.
  std::uint64_t finish_norms(bool rest, cudaStream_t stream) {
    const Backend& b = ctx_.backend();
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    rebuild(stream); // the rescans' rows: this step's host sets
    std::uint64_t sent = sum_scores(stream);
    b.zero(rescan_.data(), rescan_.size() * 8, stream);
    b.run(stream, 0, "zenflow::engine: sq_rescan",
          [items = rescan_items_.data(), n = static_cast<int>(rescan_count_),
           max = rescan_max_](auto prim, auto on) { return prim.sq_norm_rescan(items, n, max, on); });
    comm.all_reduce_sum(rescan_.data(), rescan_.size(), stream);
    comm.all_reduce_max(ctx_.plan->exposed().flags(), params.size(),
                        stream); // 0/1 flags: the max is the or (ncclMax)
    rest_ready_ = rest;
    return sent + 8u * rescan_.size() + 4u * params.size();
  }

  /// A selection step, between the plan's importance and its top-k: the L1 importance (from
  /// zeros on the other blocks' host-set rows) summed as the scores; with sq_l2 finish_norms()
  /// did. Returns the bytes sent.
  std::uint64_t complete_importance(channel_norm kind, cudaStream_t stream) {
    return kind == channel_norm::sq_l2 ? 0 : sum_scores(stream);
  }

  /// A selection step, its new device sets `sets` chosen (before the migration): the rows that
  /// enter a device set from their owners into every rank's mean gradient, through the context's
  /// staging (as many matrices at a time as it holds). Blocking. Returns the bytes sent.
  std::uint64_t fetch_entering(const std::vector<std::vector<std::int32_t>>& sets, cudaStream_t stream);

  /// After the step's packs were enqueued (which added masses of zeros on the other blocks'
  /// rows), with the `rest` of finish_norms(): the one-rank rest masses over the host sets as they
  /// are now (a selection step's new ones), computed on `stream`; then `order()` makes the packs'
  /// stream wait for them, and they are copied over the record's rest words on `pack_stream`.
  /// Returns the bytes sent.
  template <class Order>
  std::uint64_t write_rest(cudaStream_t stream, cudaStream_t pack_stream, Order&& order) {
    if (!rest_ready_) {
      return 0;
    }
    const Backend& b = ctx_.backend();
    auto& comm = *ctx_.comm;
    rest_ready_ = false;
    rebuild(stream); // a selection step's new host sets
    if (rows_total_ > 0) {
      b.zero(row_l1_.data(), static_cast<std::size_t>(rows_total_) * 4, stream);
      b.run(stream, 0, "zenflow::engine: l1_mass_batched",
            [calls = own_l1_.data(), n = static_cast<int>(own_l1_count_),
             max = own_l1_max_](auto prim, auto on) { return prim.l1_mass_batched(calls, n, max, on); });
      comm.all_reduce_sum(row_l1_.data(), static_cast<std::size_t>(rows_total_), stream);
    }
    b.zero(slot_sums_.data(), slot_sums_.size() * 4, stream);
    b.zero(rest_.data(), rest_.size() * 4, stream);
    b.run(stream, 0, "zenflow::engine: l1_add_rows_batched", // per slot, then the slots per matrix
          [calls = slot_calls_.data(), n = static_cast<int>(slot_call_count_)](auto prim, auto on) {
            return prim.l1_mass_add_rows_batched(calls, n, on);
          });
    b.run(stream, 0, "zenflow::engine: l1_add_rows_batched",
          [calls = matrix_calls_.data(), n = static_cast<int>(matrix_call_count_)](auto prim, auto on) {
            return prim.l1_mass_add_rows_batched(calls, n, on);
          });
    order();
    b.copy_d2d(ctx_.plan->exposed().record_rest(), rest_.data(), static_cast<std::size_t>(matrices_) * 4,
               pack_stream);
    return 4u * static_cast<std::uint64_t>(rows_total_);
  }

private:
  struct param_lists {
    const std::int32_t* idx = nullptr; // device: the all-reduced rows, then the host set
    std::int64_t dense = 0;            // all-reduced rows
    std::vector<std::int64_t> pos;     // per owner: its first host-set position
  };

  /// Every split matrix's scores: this rank's block kept, zeros elsewhere, summed over the ranks.
  std::uint64_t sum_scores(cudaStream_t stream) {
    const Backend& b = ctx_.backend();
    auto& comm = *ctx_.comm;
    const auto& params = *ctx_.params;
    const auto plan = ctx_.plan->exposed();
    b.zero(scores_.data(), scores_.size() * 4, stream);
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (chan_off_[p] >= 0) {
        const auto [first, count] = block_(p, me_);
        b.copy_d2d(scores_.data() + chan_off_[p] + first, plan.scores(p) + first,
                   static_cast<std::size_t>(count) * 4, stream);
      }
    }
    comm.all_reduce_sum(scores_.data(), scores_.size(), stream);
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (chan_off_[p] >= 0) {
        b.copy_d2d(plan.scores(p), scores_.data() + chan_off_[p],
                   static_cast<std::size_t>(params[p].channels) * 4, stream);
      }
    }
    return 4u * scores_.size();
  }

  /// The index lists and the masses' descriptors for the host sets as they are, when one changed
  /// since the last call (see the file's comment for the mirrors).
  void rebuild(cudaStream_t stream);

  /// `dst` (device, sized by setup() for the largest host sets) <- `src`, on the stream, through
  /// `pinned` (the mirror's, as large as `dst`).
  template <class T>
  static void
  upload(const Backend& b, dbuf<T>& dst, const std::vector<T>& src, hbuf<T>& pinned, cudaStream_t stream) {
    if (!src.empty()) {
      std::copy(src.begin(), src.end(), pinned.data());
      b.copy_h2d(dst.data(), pinned.data(), src.size() * sizeof(T), stream);
    }
  }

  struct mirror {
    std::vector<std::int32_t> idx;
    std::vector<sq_rescan_item> rescans;
    std::vector<l1_mass_item> own_l1, slots, matrices;
    hbuf<std::int32_t> idx_up; // pinned copies of the lists (setup), what the uploads read
    hbuf<sq_rescan_item> rescans_up;
    hbuf<l1_mass_item> own_l1_up, slots_up, matrices_up;
  };

  [[nodiscard]] static bool split(const param_info& pi) noexcept { return context::split(pi); }

  context ctx_;
  plan_inputs inputs_;
  owner_block_fn block_;
  int me_ = 0;
  int ranks_ = 1;
  std::size_t slot_bytes_ = 0;
  std::int64_t matrices_ = 0;
  std::vector<std::int64_t> chan_off_;  // per parameter: its channels in scores_/rescan_, or -1
  std::vector<std::uint64_t> versions_; // the host sets' versions the lists were built for
  std::vector<param_lists> lists_;
  std::int64_t rows_total_ = 0; // host-set rows of the split matrices
  mirror mirrors_[2];
  int mirror_ = 1;
  dbuf<float> scores_, row_l1_, rest_, junk_, slot_sums_;
  dbuf<double> rescan_;
  dbuf<std::int32_t> idx_, enter_idx_;
  hbuf<std::int32_t> enter_idx_up_; // pinned (setup): fetch_entering()'s upload reads it
  dbuf<sq_rescan_item> rescan_items_;
  dbuf<l1_mass_item> own_l1_, slot_calls_, matrix_calls_;
  row_copy_table<Backend> enter_gathers_, enter_scatters_;
  std::size_t rescan_count_ = 0, own_l1_count_ = 0, slot_call_count_ = 0, matrix_call_count_ = 0;
  std::int64_t rescan_max_ = 0, own_l1_max_ = 0;
  bool rest_ready_ = false;
};

} // namespace detail
ZF_NAMESPACE_END
