/// @file
/// The mean gradient of a data-parallel step (owner_partition.hpp): one engine-owned buffer per
/// parameter (the user's layout and leading dimension, so that the step reads it as it would the
/// user's; `param_info::step_grads` points at it), and the fp32 reduction buffer that every
/// parameter's rows are widened into, reduced in, and narrowed back from, each way one batched row
/// copy over every parameter (row_copies.hpp). The owner reductions (host_owner_reduction.hpp,
/// device_owner_reduction.hpp) reduce in the same buffer, by their own row lists.
/// Training thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
class mean_gradients {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;

public:
  /// One parameter's gradients: the user's (read) and the engine's mean buffer (what the step reads).
  struct pair {
    const void* user = nullptr;
    void* mean = nullptr;
  };

  /// Allocates the buffers and points every parameter's `step_grads` at its mean buffer (the
  /// user's `grads` stay as registered). Blocking. Returns the device bytes allocated.
  std::size_t setup(const Backend& b, std::vector<param_info>& params, cudaStream_t stream) {
    std::size_t bytes = 0;
    std::int64_t total = 0;
    std::int64_t widest = 1;
    for (auto& pi : params) {
      const std::int64_t outer = pi.layout == channel_layout::contiguous ? pi.channels : pi.channel_len;
      const std::int64_t inner = pi.layout == channel_layout::contiguous ? pi.channel_len : pi.channels;
      const auto extent = static_cast<std::size_t>((outer - 1) * pi.ld + inner) * pi.elem_bytes();
      buffers_.emplace_back(extent);
      offsets_.push_back(total);
      total += pi.elements();
      widest = std::max(widest, pi.channels);
      bytes += extent;
      pairs_.push_back({pi.grads, buffers_.back().data()});
      pi.step_grads = buffers_.back().data();
    }
    wide_ = dbuf<float>(static_cast<std::size_t>(total));
    idx_ = dbuf<std::int32_t>(static_cast<std::size_t>(widest));
    // CUDA allocates them stream-ordered on the null stream: done before `stream` uses them.
    b.synchronize(nullptr);
    for (auto& m : buffers_) {
      b.zero(m.data(), m.size(), stream); // the padding between channels is never read
    }
    b.run(stream, static_cast<std::size_t>(widest) * 4, "zenflow::engine: iota",
          [out = idx_.data(), widest](auto prim, auto on) { return prim.iota(out, widest, on); });
    // Every gradient widened into the reduction buffer and narrowed back, one launch each way.
    std::vector<row_copy_item> widen, narrow;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      row_copy_item it{const_cast<void*>(pairs_[p].user),
                       pi.type,
                       pi.channels,
                       pi.channel_len,
                       pi.ld,
                       pi.layout,
                       idx_.data(),
                       pi.channels,
                       wide_.data() + offsets_[p]};
      widen.push_back(it);
      it.matrix = pairs_[p].mean;
      narrow.push_back(it);
    }
    widen_ = row_copy_table<Backend>(widen.size());
    narrow_ = row_copy_table<Backend>(narrow.size());
    widen_.assign(b, widen, stream);
    narrow_.assign(b, narrow, stream);
    b.synchronize(stream); // `widen` and `narrow` are freed on return
    return bytes + wide_.size() * 4 + idx_.size() * 4;
  }

  /// Every user gradient widened into the reduction buffer (stream-ordered).
  void widen(const Backend& b, cudaStream_t stream) { widen_.run(b, row_copy_direction::gather, stream); }
  /// The reduction buffer narrowed into every mean buffer (stream-ordered; one rounding to the
  /// working type).
  void narrow(const Backend& b, cudaStream_t stream) { narrow_.run(b, row_copy_direction::scatter, stream); }

  /// The fp32 reduction buffer: every parameter's elements, channel-major, parameter p's from
  /// offsets()[p].
  [[nodiscard]] float* wide() noexcept { return wide_.data(); }
  [[nodiscard]] std::size_t wide_size() const noexcept { return wide_.size(); }
  [[nodiscard]] const std::vector<std::int64_t>& offsets() const noexcept { return offsets_; }
  [[nodiscard]] const std::vector<pair>& pairs() const noexcept { return pairs_; }

private:
  std::vector<dbuf<std::byte>> buffers_; // per parameter: the mean gradient
  std::vector<pair> pairs_;
  std::vector<std::int64_t> offsets_; // per parameter: its first element in wide_
  dbuf<float> wide_;
  dbuf<std::int32_t> idx_; // 0, 1, ...: every channel, the row copies' index list
  row_copy_table<Backend> widen_, narrow_;
};

} // namespace detail
ZF_NAMESPACE_END
