/// @file
/// The device's window sums (`config::accumulate = device`): per host-side parameter an fp32 sum
/// of its host-set rows, packed in host-set order and sized for the largest host set (channels -
/// k), and the window's count of good steps, on the device. The D2H stream (step/d2h_stream.hpp)
/// adds each step's packed gradients into the open window's sum on the pack stream and sends it
/// down once, at the window's close; a checkpoint reads and writes it.
///
/// Two sums, the windows alternating: the closed window's copy down (4 bytes per unselected
/// element over PCIe, S steps' worth of the host mode's wire) runs beside the next window, whose
/// first good step would otherwise wait for all of it (measured: a whole window's wire time per
/// window, bench/results/2026-11-28-emulated/NOTES.md). The arithmetic is window_sum.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/detail/plan/window_sum.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
class device_window_sum {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  template <class T>
  using hbuf = typename Backend::template host_buffer<T>;

public:
  /// Allocates the sums of `params` (after initialize() sized their device capacity) and the
  /// count, zeroed; returns the device bytes. Blocking.
  std::size_t setup(const Backend& b, const std::vector<param_info>& params) {
    offset_.assign(params.size() + 1, 0);
    for (std::size_t p = 0; p < params.size(); ++p) {
      const param_info& pi = params[p];
      const std::int64_t rows = pi.host_side ? pi.channels - pi.device_capacity : 0;
      offset_[p + 1] = offset_[p] + rows * pi.channel_len;
    }
    for (auto& s : sum_) {
      s = dbuf<float>(static_cast<std::size_t>(offset_.back()));
    }
    steps_ = dbuf<std::uint32_t>(1);
    b.zero(steps_.data(), 4, nullptr);
    b.synchronize_all();
    return 2 * sum_[0].size() * 4 + steps_.size() * 4;
  }
  [[nodiscard]] bool on() const noexcept { return !steps_.empty(); }
  /// `p`'s sum in the open window, `elements(p)` floats (device memory on a device backend).
  [[nodiscard]] const float* rows(std::size_t p) const noexcept { return sum_[cur_].data() + offset_[p]; }
  /// The window closed (its sums on their way down): the next one fills the other sums.
  void flip() noexcept { cur_ ^= 1u; }
  [[nodiscard]] std::int64_t elements(std::size_t p) const noexcept { return offset_[p + 1] - offset_[p]; }

  /// Positions [begin, end) of `p`'s host set, packed at `packed` (its working type), added as
  /// the step's record says (after the prologue wrote it), on `stream`.
  void add(const Backend& b,
           const param_info& pi,
           std::size_t p,
           std::int64_t begin,
           std::int64_t end,
           const std::byte* packed,
           const void* record,
           cudaStream_t stream) {
    const std::int64_t n = (end - begin) * pi.channel_len;
    const window_sum_args a{sum_[cur_].data() + offset_[p] + begin * pi.channel_len, packed, n,
                            static_cast<const float*>(record), steps_.data()};
    b.run(stream, static_cast<std::size_t>(n) * (8 + dtype_size(pi.type)), "zenflow::engine: add_window_sum",
          [a, t = pi.type](auto prim, auto on) { return prim.add_window_sum(a, t, on); });
  }
  /// After the step's adds, on their stream: one more good step unless the record says skip.
  void count_step(const Backend& b, const void* record, cudaStream_t stream) {
    b.run(stream, 8, "zenflow::engine: count_window_step",
          [r = static_cast<const float*>(record), s = steps_.data()](auto prim, auto on) {
            return prim.count_window_step(r, s, on);
          });
  }
  /// A new window: its first good step writes its sums (the caller orders this after the copies
  /// that last read them).
  void reset(const Backend& b, cudaStream_t stream) { b.zero(steps_.data(), 4, stream); }

  // ---- a checkpoint (blocking, between steps, the pack stream settled) ----

  /// `p`'s first `n` elements into `dst`, and the good steps in the window.
  std::uint32_t read(const Backend& b, std::size_t p, float* dst, std::int64_t n, cudaStream_t stream) {
    hbuf<float> h(static_cast<std::size_t>(n));
    hbuf<std::uint32_t> steps(1);
    b.copy_d2h(h.data(), sum_[cur_].data() + offset_[p], static_cast<std::size_t>(n) * 4, stream);
    b.copy_d2h(steps.data(), steps_.data(), 4, stream);
    b.synchronize(stream);
    std::memcpy(dst, h.data(), static_cast<std::size_t>(n) * 4);
    return steps[0];
  }
  /// `p`'s first `n` elements from `src`, and the good steps in the window.
  void write(const Backend& b,
             std::size_t p,
             const float* src,
             std::int64_t n,
             std::uint32_t steps,
             cudaStream_t stream) {
    hbuf<float> h(static_cast<std::size_t>(n));
    hbuf<std::uint32_t> s(1);
    std::memcpy(h.data(), src, static_cast<std::size_t>(n) * 4);
    s[0] = steps;
    b.copy_h2d(sum_[cur_].data() + offset_[p], h.data(), static_cast<std::size_t>(n) * 4, stream);
    b.copy_h2d(steps_.data(), s.data(), 4, stream);
    b.synchronize(stream);
  }

private:
  dbuf<float> sum_[2];
  std::size_t cur_ = 0; // the open window's sums (training thread)
  dbuf<std::uint32_t> steps_;
  std::vector<std::int64_t> offset_; // per parameter, in floats; [size]: the total
};

} // namespace detail
ZF_NAMESPACE_END
