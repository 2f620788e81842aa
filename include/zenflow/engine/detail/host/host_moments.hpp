/// @file
/// The Adam moments m and v of one host-side parameter, in the storage `config::host_moments`
/// picks: fp32, or bf16 (half the bytes; the arithmetic stays fp32). The host window, the
/// migration and state() take the typed arrays through `visit` (rows cross precisions with
/// store_moment_row / load_moment_row: moment_rows.hpp); checkpoints save and load the stored
/// bytes as they are.
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
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/moment_rows.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Bytes of one element of one moment stored at precision `p` (the one place that says so).
[[nodiscard]] constexpr std::size_t moment_bytes(moment_precision p) noexcept {
  return p == moment_precision::bf16 ? 2 : 4;
}
/// Bytes of one element of a channel's host state: its fp32 master and two moments at `p` (12
/// with fp32 moments, 8 with bf16).
[[nodiscard]] constexpr std::size_t host_state_bytes(moment_precision p) noexcept {
  return 4 + 2 * moment_bytes(p);
}

/// m and v of one parameter, fp32 or bf16.
class host_moments {
public:
  /// `n` zeros of precision `p` (the other precision's arrays released).
  void assign(std::size_t n, moment_precision p) {
    precision_ = p;
    if (p == moment_precision::bf16) {
      m32_ = {};
      v32_ = {};
      m16_.assign(n, from_raw_bits<bfloat16>(0));
      v16_.assign(n, from_raw_bits<bfloat16>(0));
    } else {
      m16_ = {};
      v16_ = {};
      m32_.assign(n, 0.0f);
      v32_.assign(n, 0.0f);
    }
  }

  [[nodiscard]] moment_precision precision() const noexcept { return precision_; }
  [[nodiscard]] std::size_t size() const noexcept { return bf16() ? m16_.size() : m32_.size(); }
  /// Bytes of one element of one moment (4 or 2).
  [[nodiscard]] std::size_t element_bytes() const noexcept { return moment_bytes(precision_); }

  /// f(m, v) with the typed arrays (float* or bfloat16*).
  template <class F>
  decltype(auto) visit(F&& f) {
    return bf16() ? f(m16_.data(), v16_.data()) : f(m32_.data(), v32_.data());
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return bf16() ? f(m16_.data(), v16_.data()) : f(m32_.data(), v32_.data());
  }

  /// The stored bytes of m or v (`which` 0 or 1), size() * element_bytes() of them: checkpoints
  /// save and load them as they are, so that a resumed run has the same bits.
  [[nodiscard]] void* bytes(int which) noexcept {
    return bf16() ? static_cast<void*>(which == 0 ? m16_.data() : v16_.data())
                  : static_cast<void*>(which == 0 ? m32_.data() : v32_.data());
  }
  [[nodiscard]] const void* bytes(int which) const noexcept {
    return const_cast<host_moments*>(this)->bytes(which);
  }

private:
  [[nodiscard]] bool bf16() const noexcept { return precision_ == moment_precision::bf16; }

  moment_precision precision_ = moment_precision::fp32;
  std::vector<float> m32_, v32_;
  std::vector<bfloat16> m16_, v16_;
};

} // namespace detail
ZF_NAMESPACE_END
