/// @file
/// ZeRO-2's reduction of every rank's gradients to their mean, in fixed-size fp32 buckets
/// (owner_partition.hpp; the layout: bucket_layout.hpp; docs/data-parallel.md, "The reduction in
/// buckets"). A bucket's rows are widened from your gradients into one fp32 buffer, reduced there
/// (the rows every rank needs all-reduced, a split matrix's host-set rows reduce-scattered to
/// their owners) and narrowed back once to the working type: into your gradient buffers
/// (`reduce_in_place`, as DDP does) or into engine mean buffers of the same layout, which the
/// step then reads (`param_info::step_grads`). The other blocks' host-set rows are zeroed there:
/// never read as gradients (their owners have them), they keep the norms' flags and the packs'
/// masses exact (owner_reduction.hpp).
///
/// When. grad_ready(p) marks p's gradient final; the buckets are launched in order, each as soon
/// as every parameter with rows in it is announced (out of order announcements only delay the
/// launch), so that the reduction overlaps the rest of the backward; step() launches the rest.
/// Every rank launches the same buckets in the same order (the layout depends on the parameters,
/// the partition, the device sets and the configuration only), whatever the order or the moment
/// of its announcements. Over a device communicator a bucket's gather, collectives and scatter run
/// on a stream of their own, after the work enqueued on the announcing stream, and step() makes
/// its stream wait for them (no host wait); a host communicator reduces when called (after a wait
/// for the stream).
///
/// One buffer: a bucket's copies and collectives are stream-ordered one after the other (on one
/// stream, or on the calling thread), so the next bucket reuses it. Nothing is allocated after
/// setup: the tables are sized for any layout (bucket_items_bound), the index lists for every
/// channel. They are rebuilt when a host set changes (a selection or a restore: both wait for the
/// stream first), from one of two pinned mirrors in turn. Training thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/dp/bucket_layout.hpp>
#include <zenflow/engine/detail/dp/owner_reduction.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Comm, class Host>
class grad_buckets {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  template <class T>
  using hbuf = typename Backend::template host_buffer<T>;
  using stream_type = copy_stream<typename Backend::copy_backend_type>;

public:
  /// What setup() takes: the communicator, the backend, the parameters (their `step_grads` are
  /// pointed at the mean's destination), the host sets, who owns which channels, whether the
  /// host-side matrices are split by owner (the offloaded modes), the bucket's bytes and where the
  /// mean goes. Every pointer outlives the buckets.
  struct inputs {
    Comm* comm = nullptr;
    const Backend* backend = nullptr;
    std::vector<param_info>* params = nullptr;
    const Host* host = nullptr;
    owner_block_fn block;
    bool split = false;
    std::size_t bucket_bytes = 0;
    bool in_place = true;
  };

  /// The footprint's inputs of `params` (split: the host-side matrices, when `split`).
  [[nodiscard]] static std::vector<bucket_param> footprint_params(const std::vector<param_info>& params,
                                                                  bool split) {
    std::vector<bucket_param> out;
    for (const auto& pi : params) {
      out.push_back({pi.channels, pi.channel_len, extent_bytes(pi),
                     split && owner_context<Backend, Comm, Host>::split(pi)});
    }
    return out;
  }

  /// Allocates the buckets (bucket_layout.hpp's bucket_footprint) and, with in_place false, the
  /// mean buffers; points every parameter's `step_grads` at its mean's destination. Blocking.
  /// Returns the device bytes allocated.
  std::size_t setup(inputs in, cudaStream_t stream) {
    in_ = std::move(in);
    auto& params = *in_.params;
    me_ = in_.comm->rank();
    ranks_ = in_.comm->size();
    capacity_ = in_.bucket_bytes / 4;
    std::size_t own = 0;
    std::int64_t longest = 1;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      own += split(pi) ? static_cast<std::size_t>(in_.block(p, me_).second * pi.channel_len) : 0;
      longest = std::max(longest, pi.channel_len);
    }
    require(capacity_ >= static_cast<std::size_t>(longest), "zenflow::engine::initialize",
            "reduce_bucket_bytes",
            "is " + std::to_string(in_.bucket_bytes) + ": a bucket must hold the longest row in fp32 (" +
                std::to_string(longest * 4) + " bytes)");
    const bucket_bytes fp =
        bucket_footprint(footprint_params(params, in_.split), ranks_, own, capacity_, in_.in_place);
    const Backend& b = *in_.backend;
    send_ = dbuf<float>(fp.send / 4);
    recv_ = dbuf<float>(fp.recv / 4);
    idx_ = dbuf<std::int32_t>(fp.index / 4);
    items_ = dbuf<row_copy_item>(fp.items / sizeof(row_copy_item));
    for (auto& m : mirrors_) {
      m.idx = hbuf<std::int32_t>(idx_.size());
      m.items = hbuf<row_copy_item>(items_.size());
    }
    for (auto& pi : params) {
      if (!in_.in_place) {
        means_.emplace_back(extent_bytes(pi));
        pi.step_grads = means_.back().data();
      } else {
        pi.step_grads = pi.grads;
      }
    }
    // Parameters in the order a backward produces them (registration order reversed).
    order_.resize(params.size());
    std::iota(order_.rbegin(), order_.rend(), std::size_t{0});
    ready_.assign(params.size(), 0);
    versions_.assign(params.size(), ~std::uint64_t{0});
    if constexpr (Comm::is_device) {
      side_ = std::make_unique<stream_type>(b.copier());
    }
    b.synchronize(nullptr); // CUDA allocates stream-ordered on the null stream
    for (auto& m : means_) {
      b.zero(m.data(), m.size(), stream); // the padding between channels is never read
    }
    b.synchronize(stream);
    return fp.total();
  }

  /// grad_ready(p): p's gradient on `stream` is final; the buckets whose every parameter is
  /// announced are launched, in order.
  void announce(std::size_t p, cudaStream_t stream) {
    ready_[p] = 1;
    launch_ready(stream);
  }

  /// step(): every bucket not launched yet, then `stream` waits for the reduction (a device
  /// communicator's stream). Returns the bytes this rank sent this step: the all-reduced rows in
  /// full, of the reduce-scatter the other blocks' rows.
  std::uint64_t finish(cudaStream_t stream) {
    std::fill(ready_.begin(), ready_.end(), 1);
    launch_ready(stream);
    if (side_) {
      side_->join_into(stream);
    }
    std::fill(ready_.begin(), ready_.end(), 0);
    next_ = 0;
    started_ = false;
    return std::exchange(sent_, 0);
  }

  /// The buckets of the current layout (after the first announcement or step()).
  [[nodiscard]] std::size_t buckets() const noexcept { return layout_.size(); }

private:
  [[nodiscard]] bool split(const param_info& pi) const noexcept {
    return in_.split && owner_context<Backend, Comm, Host>::split(pi);
  }
  [[nodiscard]] static std::size_t extent_bytes(const param_info& pi) {
    const std::int64_t outer = pi.layout == channel_layout::contiguous ? pi.channels : pi.channel_len;
    const std::int64_t inner = pi.layout == channel_layout::contiguous ? pi.channel_len : pi.channels;
    return static_cast<std::size_t>((outer - 1) * pi.ld + inner) * pi.elem_bytes();
  }

  void launch_ready(cudaStream_t stream) {
    if (!started_) { // the step's first launch: the layout of this step's host sets
      rebuild(stream);
      started_ = true;
    }
    while (next_ < layout_.size() && ready(next_)) {
      launch(next_++, stream);
    }
  }

  [[nodiscard]] bool ready(std::size_t j) const {
    const auto& t = tables_[j];
    return std::all_of(bucket_params_.begin() + static_cast<std::ptrdiff_t>(t.params_first),
                       bucket_params_.begin() + static_cast<std::ptrdiff_t>(t.params_first + t.params),
                       [&](std::size_t p) { return ready_[p] != 0; });
  }

  /// Bucket j: widened into the buffer, reduced, narrowed into the destinations.
  void launch(std::size_t j, cudaStream_t stream) {
    const Backend& b = *in_.backend;
    auto& comm = *in_.comm;
    const bucket& bk = layout_[j];
    const auto& t = tables_[j];
    cudaStream_t on = stream;
    if (side_) {
      side_->wait_for(stream); // the announced gradients exist
      on = side_->get();
    }
    run(b, t.gather, row_copy_direction::gather, on);
    if constexpr (!Comm::is_device) {
      b.synchronize(on); // a host communicator reads the buffer when called
    }
    if (bk.dense > 0) {
      comm.all_reduce_mean(send_.data(), bk.dense, on);
    }
    const std::size_t scattered = bk.floats() - bk.dense;
    if (scattered > 0) {
      comm.reduce_scatter_mean(send_.data() + bk.dense, recv_.data(), std::span<const std::size_t>(bk.counts),
                               on);
    }
    run(b, t.scatter, row_copy_direction::scatter, on);
    sent_ += 4u * (bk.dense + scattered - bk.mine);
  }

  struct range {
    std::size_t first = 0;
    int n = 0;
    std::int64_t blocks = 0;
    std::size_t bytes = 0;
  };
  struct table {
    range gather, scatter;
    std::size_t params_first = 0, params = 0;
  };

  void run(const Backend& b, const range& r, row_copy_direction dir, cudaStream_t on) const {
    if (r.blocks > 0) {
      b.run(on, r.bytes, "zenflow::engine: reduction bucket rows",
            [items = items_.data() + r.first, n = r.n, blocks = r.blocks, dir](auto prim, auto e) {
              return prim.copy_rows_batched(items, n, blocks, dir, e);
            });
    }
  }

  /// The index lists, the layout and the copy tables for the host sets as they are, when one
  /// changed since the last call.
  void rebuild(cudaStream_t stream) {
    const auto& params = *in_.params;
    const Host& host = *in_.host;
    bool same = !layout_.empty() || params.empty();
    for (std::size_t p = 0; p < params.size(); ++p) {
      same = same && (!split(params[p]) || versions_[p] == host[p].host_set_version);
    }
    if (same) {
      return;
    }
    mirror_ ^= 1;
    auto& m = mirrors_[mirror_];
    std::vector<bucket_rows> rows(params.size());
    std::vector<std::size_t> idx_at(params.size());
    std::vector<std::vector<std::int64_t>> list_at(params.size()); // per list: its first index
    std::size_t n_idx = 0;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      auto& r = rows[p];
      r.len = pi.channel_len;
      idx_at[p] = n_idx;
      std::int32_t* out = m.idx.data() + n_idx;
      if (!split(pi)) {
        r.dense = pi.channels;
        std::iota(out, out + pi.channels, std::int32_t{0});
        n_idx += static_cast<std::size_t>(pi.channels);
        list_at[p] = {0};
        continue;
      }
      const auto& hs = host[p].host_set;
      versions_[p] = host[p].host_set_version;
      auto next = hs.begin();
      std::int64_t d = 0;
      for (std::int32_t c = 0; c < pi.channels; ++c) { // the all-reduced rows, ascending
        const bool unselected = next != hs.end() && *next == c;
        next += unselected ? 1 : 0;
        if (!unselected) {
          out[d++] = c;
        }
      }
      std::copy(hs.begin(), hs.end(), out + d); // the owners' blocks in rank order
      r.dense = d;
      list_at[p].push_back(0);
      std::int64_t at = d;
      for (int q = 0; q < ranks_; ++q) {
        const auto [first, count] = in_.block(p, q);
        const auto lo = std::lower_bound(hs.begin(), hs.end(), static_cast<std::int32_t>(first));
        const auto hi = std::lower_bound(lo, hs.end(), static_cast<std::int32_t>(first + count));
        r.owned.push_back(hi - lo);
        list_at[p].push_back(at);
        at += hi - lo;
      }
      n_idx += static_cast<std::size_t>(pi.channels);
    }
    layout_ = lay_buckets(rows, order_, capacity_, ranks_, me_);
    // The copies: per bucket its gathers (every piece from your gradients into the buffer), then
    // its scatters (the all-reduced and this rank's rows back into the destinations, zeros for the
    // other owners' rows).
    tables_.assign(layout_.size(), {});
    bucket_params_.clear();
    std::vector<row_copy_item> items;
    for (std::size_t j = 0; j < layout_.size(); ++j) {
      const bucket& bk = layout_[j];
      auto& t = tables_[j];
      t.params_first = bucket_params_.size();
      for (const auto& pc : bk.pieces) {
        if (bucket_params_.size() == t.params_first || bucket_params_.back() != pc.param) {
          bucket_params_.push_back(pc.param);
        }
      }
      t.params = bucket_params_.size() - t.params_first;
      for (const int dir : {0, 1}) {
        range& r = dir == 0 ? t.gather : t.scatter;
        r.first = items.size();
        for (const auto& pc : bk.pieces) {
          const auto& pi = params[pc.param];
          row_copy_item it{dir == 0 ? const_cast<void*>(pi.grads) : const_cast<void*>(pi.step_grads),
                           pi.type,
                           pi.channels,
                           pi.channel_len,
                           pi.ld,
                           pi.layout};
          it.idx =
              idx_.data() + idx_at[pc.param] +
              static_cast<std::size_t>(list_at[pc.param][static_cast<std::size_t>(pc.list + 1)] + pc.first);
          it.count = pc.count;
          it.packed = send_.data() + pc.at;
          if (dir == 1 && pc.list >= 0) {
            it.packed = pc.list == me_ ? recv_.data() + pc.recv_at : nullptr;
          }
          items.push_back(it);
        }
        r.n = static_cast<int>(items.size() - r.first);
        r.blocks = row_copy_blocks(items.data() + r.first, r.n);
        r.bytes = row_copy_bytes(items.data() + r.first, r.n);
      }
    }
    require(items.size() <= items_.size(), "zenflow::engine", "reduce_bucket_bytes",
            "gives more bucket copies than sized for (an internal error)");
    if (row_copies_misaligned(items.data(), static_cast<int>(items.size()))) {
      check(cudaErrorMisalignedAddress, "zenflow::engine: a reduction bucket's row copy is not aligned");
    }
    const Backend& b = *in_.backend;
    std::copy(items.begin(), items.end(), m.items.data());
    b.copy_h2d(idx_.data(), m.idx.data(), n_idx * 4, stream);
    b.copy_h2d(items_.data(), m.items.data(), items.size() * sizeof(row_copy_item), stream);
  }

  struct mirror {
    hbuf<std::int32_t> idx; // pinned: what the uploads read
    hbuf<row_copy_item> items;
  };

  inputs in_;
  int me_ = 0, ranks_ = 1;
  std::size_t capacity_ = 0; // floats per bucket
  std::vector<dbuf<std::byte>> means_;
  dbuf<float> send_, recv_;
  dbuf<std::int32_t> idx_;
  dbuf<row_copy_item> items_;
  mirror mirrors_[2];
  int mirror_ = 1;
  std::vector<std::size_t> order_;
  std::vector<std::uint64_t> versions_; // the host sets' versions of the layout
  std::vector<bucket> layout_;
  std::vector<table> tables_;
  std::vector<std::size_t> bucket_params_; // per bucket, its parameters (tables_[j].params_first)
  std::vector<char> ready_;                // per parameter: announced this step
  std::size_t next_ = 0;                   // the first bucket not launched this step
  bool started_ = false;                   // the step's layout is current
  std::unique_ptr<stream_type> side_;      // a device communicator's reduction stream
  std::uint64_t sent_ = 0;
};

} // namespace detail
ZF_NAMESPACE_END
