/// @file
/// The Adam moments m and v of one host-side parameter, in the storage `config::host_moments`
/// picks: fp32, bf16 (half the bytes) or int8 (a byte each plus an fp32 scale per block of 64 of
/// a row: core/detail/moment_q8.hpp); the arithmetic stays fp32. The host window, the
/// migration and state() take the typed arrays through `visit` (rows cross precisions with
/// store_moment_row / load_moment_row: moment_rows.hpp); checkpoints save and load the stored
/// bytes (and int8's scales) as they are.
///
/// Rounding: the host window stores its moments with stochastic rounding (optim/cpu_adamw.hpp,
/// core/detail/moment_rounding.hpp), because each update moves v by less than half a bf16 ulp.
/// `store_moment_row` (rows coming home from the device at a re-selection) rounds to nearest
/// even: a single conversion accumulates nothing, and nearest is its smallest error. Widening is
/// exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/moment_rows.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Bytes of one element of one moment stored at precision `p` (the one place that says so; int8's
/// block scales are counted by host_state_bytes).
[[nodiscard]] constexpr std::size_t moment_bytes(moment_precision p) noexcept {
  return p == moment_precision::fp32 ? 4 : (p == moment_precision::bf16 ? 2 : 1);
}
/// Bytes of one element of a channel's host state: its fp32 master and two moments at `p` (12
/// with fp32 moments, 8 with bf16, 6 with int8).
[[nodiscard]] constexpr std::size_t host_state_bytes(moment_precision p) noexcept {
  return 4 + 2 * moment_bytes(p);
}
/// Bytes of the host state of `channels` rows of `channel_len` (stats().memory.host_state):
/// host_state_bytes per element, with int8 moments two fp32 scales per block of each row, and the
/// rows' int32 counts.
[[nodiscard]] constexpr std::size_t
host_state_bytes(moment_precision p, std::size_t channels, std::int64_t channel_len) noexcept {
  const auto len = static_cast<std::size_t>(channel_len);
  const std::size_t scales =
      p == moment_precision::int8 ? 8 * static_cast<std::size_t>(q8_blocks(channel_len)) : 0;
  return channels * (len * host_state_bytes(p) + scales + 4);
}

/// m and v of one parameter, fp32, bf16 or int8.
class host_moments {
public:
  /// `n` zeros (rows of `row_len`, which int8's blocks follow) of precision `p` (the other
  /// precisions' arrays released).
  void assign(std::size_t n, moment_precision p, std::size_t row_len) {
    precision_ = p;
    m32_ = {};
    v32_ = {};
    m16_ = {};
    v16_ = {};
    m8_ = {};
    v8_ = {};
    ms_ = {};
    vs_ = {};
    row_len_ = row_len;
    if (p == moment_precision::bf16) {
      m16_.assign(n, from_raw_bits<bfloat16>(0));
      v16_.assign(n, from_raw_bits<bfloat16>(0));
    } else if (p == moment_precision::int8) {
      m8_.assign(n, 0);
      v8_.assign(n, 0);
      const std::size_t scales =
          row_len == 0
              ? 0
              : n / row_len * static_cast<std::size_t>(q8_blocks(static_cast<std::int64_t>(row_len)));
      ms_.assign(scales, 0.0f);
      vs_.assign(scales, 0.0f);
    } else {
      m32_.assign(n, 0.0f);
      v32_.assign(n, 0.0f);
    }
  }

  [[nodiscard]] moment_precision precision() const noexcept { return precision_; }
  [[nodiscard]] std::size_t size() const noexcept {
    return precision_ == moment_precision::bf16
               ? m16_.size()
               : (precision_ == moment_precision::int8 ? m8_.size() : m32_.size());
  }
  /// Bytes of one element of one moment (4, 2 or 1).
  [[nodiscard]] std::size_t element_bytes() const noexcept { return moment_bytes(precision_); }

  /// f(m, v) with the typed arrays: float*, bfloat16*, or int8's q8_ptr (codes and scales). The
  /// moment type is moment_of_t<decltype(m)>.
  template <class F>
  decltype(auto) visit(F&& f) {
    return visit_arrays(*this, f);
  }
  /// The same, read-only (int8's q8_ptr points at the same codes: do not write through it).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return visit_arrays(*this, f);
  }

  /// The stored bytes of m or v (`which` 0 or 1), size() * element_bytes() of them: checkpoints
  /// save and load them as they are, so that a resumed run has the same bits.
  [[nodiscard]] void* bytes(int which) noexcept {
    switch (precision_) {
    case moment_precision::bf16:
      return which == 0 ? static_cast<void*>(m16_.data()) : static_cast<void*>(v16_.data());
    case moment_precision::int8:
      return which == 0 ? m8_.data() : v8_.data();
    default:
      return which == 0 ? m32_.data() : v32_.data();
    }
  }
  [[nodiscard]] const void* bytes(int which) const noexcept {
    return const_cast<host_moments*>(this)->bytes(which);
  }
  /// int8's block scales of m or v (`which` 0 or 1), scale_count() floats (none otherwise).
  [[nodiscard]] float* scales(int which) noexcept { return which == 0 ? ms_.data() : vs_.data(); }
  [[nodiscard]] const float* scales(int which) const noexcept { return which == 0 ? ms_.data() : vs_.data(); }
  [[nodiscard]] std::size_t scale_count() const noexcept { return ms_.size(); }

private:
  // Both visits' one switch: `Self` is host_moments or const host_moments, so the float and bf16
  // arrays come typed as the caller may use them.
  template <class Self, class F>
  static decltype(auto) visit_arrays(Self& self, F& f) {
    switch (self.precision_) {
    case moment_precision::bf16:
      return f(self.m16_.data(), self.v16_.data());
    case moment_precision::int8:
      return f(self.q8(0), self.q8(1));
    default:
      return f(self.m32_.data(), self.v32_.data());
    }
  }
  [[nodiscard]] q8_ptr q8(int which) const noexcept {
    auto& self = const_cast<host_moments&>(*this);
    return which == 0
               ? q8_ptr{self.m8_.data(), self.ms_.data(), static_cast<std::int64_t>(row_len_), moment_m}
               : q8_ptr{self.v8_.data(), self.vs_.data(), static_cast<std::int64_t>(row_len_), moment_v};
  }

  moment_precision precision_ = moment_precision::fp32;
  std::size_t row_len_ = 0;
  std::vector<float> m32_, v32_;
  std::vector<bfloat16> m16_, v16_;
  std::vector<std::uint8_t> m8_, v8_;
  std::vector<float> ms_, vs_;
};

} // namespace detail
ZF_NAMESPACE_END
