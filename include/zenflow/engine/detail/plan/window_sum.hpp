/// @file
/// The arithmetic of device accumulation (`config::accumulate = device`): a step's packed host-set
/// gradients added into the window's fp32 sum on the device, written once as host+device bodies
/// (the CUDA kernels in kernels.cuh and the host loops here run the same code). The sum is the
/// host accumulation's (optim/channels.hpp, accumulate_channels): `acc = fma(coef, g, acc)`, the
/// window's first good step `fma(coef, g, +0)` (accumulate_mode::assign), a skipped step nothing;
/// explicit fma (math/adam.hpp's accumulate_value), so the device's bits are the host's.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/detail/plan/step_record.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One add of a step's packed rows into the window sum.
struct window_sum_args {
  float* sum = nullptr;                 ///< the window sum's elements for these rows (fp32)
  const void* rows = nullptr;           ///< the step's packed gradients of these rows (working type)
  std::int64_t n = 0;                   ///< elements
  const float* record = nullptr;        ///< the step's record (coef_t, the skip flag)
  const std::uint32_t* steps = nullptr; ///< good steps already in the window's sum (0: assign)
};

/// Element `i` of an add: nothing on a skipped step; the window's first good step writes.
template <class T>
ZF_HOST_DEVICE ZF_FORCEINLINE void window_sum_at(const window_sum_args& a, std::int64_t i) {
  if (*step_record_layout::skip(a.record) != 0) {
    return;
  }
  const float coef = a.record[step_record_layout::coef_word];
  const float prev = *a.steps == 0 ? 0.0f : a.sum[i];
  a.sum[i] = accumulate_value(prev, coef, to_float(static_cast<const T*>(a.rows)[i]));
}

/// The end of a step's adds: one more good step in the window (none when it was skipped).
ZF_HOST_DEVICE ZF_FORCEINLINE void window_sum_count(const float* record, std::uint32_t* steps) {
  if (*step_record_layout::skip(record) == 0) {
    ++*steps;
  }
}

// ---- host loops over the bodies (host and emulated backends) ------------------------------------

template <class T>
inline void host_window_sum(const window_sum_args& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    window_sum_at<T>(a, i);
  }
}

} // namespace detail
ZF_NAMESPACE_END
