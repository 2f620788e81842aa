/// @file
/// One row of Adam moments crossing precisions: fp32 rows (the device's, a state read's) into
/// host moments of type M (fp32, bf16 or int8, host_moments.hpp) and back. The device plan's migration
/// and state reads use them without the host state's moment type; host_moments.hpp includes this.
///
/// Rounding: `store_moment_row` (rows coming home from the device at a re-selection) rounds to
/// nearest even (int8: to the nearest code of the row's fresh block scales): a single conversion
/// accumulates nothing, and nearest is its smallest error. Widening is exact.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Row `n` of fp32 values `src` into moments of type M at `dst` (bf16: round to nearest even).
template <class M>
void store_moment_row(M* dst, const float* src, std::size_t n) {
  if constexpr (std::is_same_v<M, float>) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = from_float<bfloat16>(src[i]);
    }
  }
}

/// Row `n` of moments of type M at `src` widened to fp32 at `dst` (exact).
template <class M>
void load_moment_row(float* dst, const M* src, std::size_t n) {
  if constexpr (std::is_same_v<M, float>) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = to_float(src[i]);
    }
  }
}

/// The type in which moments of type M cross to the device or between ranks: M, or fp32 for
/// int8 (a row's codes mean nothing without its block scales; the device keeps fp32 anyway).
template <class M>
using wire_moment_t = std::conditional_t<std::is_same_v<M, int8_moment>, float, M>;

/// `n` elements of int8 moments widened to fp32 (whole rows).
inline void load_moment_row(float* dst, q8_ptr src, std::size_t n) {
  q8_load_rows(dst, src, static_cast<std::int64_t>(n));
}

/// `n` moments as wire_moment_t: `p` itself, or int8's widened into `buf` (exact).
template <class M>
const M* widened(M* p, std::size_t, std::vector<float>&) {
  return p;
}
inline const float* widened(q8_ptr p, std::size_t n, std::vector<float>& buf) {
  buf.resize(n);
  load_moment_row(buf.data(), p, n);
  return buf.data();
}

/// Row `n` of fp32 m and v into moments at `m`, `v` (M* of float or bfloat16, or int8's q8_ptr:
/// the pair together, since v's code depends on m's).
template <class P>
void store_moment_rows(P m, P v, const float* ms, const float* vs, std::size_t n) {
  if constexpr (std::is_same_v<P, q8_ptr>) {
    q8_store_rows(m, v, ms, vs, static_cast<std::int64_t>(n));
  } else {
    store_moment_row(m, ms, n);
    store_moment_row(v, vs, n);
  }
}

} // namespace detail
ZF_NAMESPACE_END
