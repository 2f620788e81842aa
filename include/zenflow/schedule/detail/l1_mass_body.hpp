/// @file
/// Zen-auto's L1 masses (the crit mass of the selected rows, the rest mass of a pack's rows) in
/// one fixed order, written once as host+device bodies, so that every backend computes the same
/// bits (docs/engine-semantics.md, 7). The order is the host twins' (optim/detail/adamw_host.hpp,
/// channels_host.hpp), which the host and emulated backends keep using fused with the update or
/// the pack:
/// - a row of a contiguous matrix: 16 lanes, lane j sums |x[16 i + j]| in i order over the
///   whole 16-element groups (cpu::l1_span's lanes on every SIMD width), then the lanes are added
///   in order from 0, then the tail in order;
/// - a row read through the strided path: |x[i]| added in i order from 0;
/// - the call's rows added in row order from 0, that sum added to the mass.
/// The CUDA launchers compute each row apart (l1_mass_kernels.cuh: 16 threads per row, then one
/// thread adds the rows in order) instead of the float atomics that made the engine's windows vary
/// run to run.
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int l1_row_lanes = 16;

/// |x| and a + b with the host's bits on the device whatever the consumer's flags: a bit clear and
/// inline `add.rn.f32` (detail::add_f), neither of which -ftz=true / --use_fast_math turns into an
/// `.ftz` instruction that flushes subnormals (the compare-and-negate and `+=` did).
ZF_HOST_DEVICE ZF_FORCEINLINE float abs_l1(float x) {
  return abs_f32(x);
}

/// Lane `lane` of row `c` (contiguous): |x[16 i + lane]| over the whole groups, in i order.
template <class T>
ZF_HOST_DEVICE float l1_row_lane(channel_matrix<const T> g, std::int64_t c, int lane) {
  const std::int64_t groups = g.channel_len / l1_row_lanes;
  const T* x = g.data + c * g.ld + lane;
  float s = 0.0f;
  for (std::int64_t i = 0; i < groups; ++i) {
    s = add_f(s, abs_l1(to_float(x[i * l1_row_lanes])));
  }
  return s;
}

/// Row `c` (contiguous) from its lanes: the lanes in order from 0, then the tail in order.
template <class T>
ZF_HOST_DEVICE float l1_row_finish(channel_matrix<const T> g, std::int64_t c, const float* lanes) {
  float s = 0.0f;
  for (int j = 0; j < l1_row_lanes; ++j) {
    s = add_f(s, lanes[j]);
  }
  for (std::int64_t i = (g.channel_len / l1_row_lanes) * l1_row_lanes; i < g.channel_len; ++i) {
    s = add_f(s, abs_l1(to_float(g(c, i))));
  }
  return s;
}

/// Row `c` in the sequential order (any layout).
template <class T>
ZF_HOST_DEVICE float l1_row_sequential(channel_matrix<const T> g, std::int64_t c) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < g.channel_len; ++i) {
    s = add_f(s, abs_l1(to_float(g(c, i))));
  }
  return s;
}

/// The rows of one call added in row order, that sum added to the mass.
ZF_HOST_DEVICE inline void l1_add_rows(const l1_mass_item& a) {
  float s = 0.0f;
  for (std::int64_t r = 0; r < a.count; ++r) {
    s = add_f(s, a.row_l1[r]);
  }
  *a.l1 = add_f(*a.l1, s);
}

/// The gradient of the call as a matrix of its working type, passed to `f(matrix, args...)`
/// (a function object type, not a lambda: kernels call this too).
template <class F, class... A>
ZF_HOST_DEVICE float with_grad_matrix(const l1_mass_item& a, A... args) {
  if (a.type == dtype::f16) {
    return F::run(channel_matrix<const half>{static_cast<const half*>(a.grad), a.channels, a.channel_len,
                                             a.ld, a.layout},
                  args...);
  }
  if (a.type == dtype::bf16) {
    return F::run(channel_matrix<const bfloat16>{static_cast<const bfloat16*>(a.grad), a.channels,
                                                 a.channel_len, a.ld, a.layout},
                  args...);
  }
  return F::run(channel_matrix<const float>{static_cast<const float*>(a.grad), a.channels, a.channel_len,
                                            a.ld, a.layout},
                args...);
}
struct l1_lane_op {
  template <class T>
  ZF_HOST_DEVICE static float run(channel_matrix<const T> g, std::int64_t c, int lane) {
    return l1_row_lane(g, c, lane);
  }
};
struct l1_finish_op {
  template <class T>
  ZF_HOST_DEVICE static float run(channel_matrix<const T> g, std::int64_t c, const float* lanes) {
    return l1_row_finish(g, c, lanes);
  }
};
struct l1_sequential_op {
  template <class T>
  ZF_HOST_DEVICE static float run(channel_matrix<const T> g, std::int64_t c) {
    return l1_row_sequential(g, c);
  }
};

/// Row `r` of the call, in the call's order (what the kernel's threads of that row compute).
ZF_HOST_DEVICE inline float l1_row(const l1_mass_item& a, std::int64_t r) {
  const std::int64_t c = a.idx[r];
  if (!a.lanes) {
    return with_grad_matrix<l1_sequential_op>(a, c);
  }
  float lanes[l1_row_lanes];
  for (int j = 0; j < l1_row_lanes; ++j) {
    lanes[j] = with_grad_matrix<l1_lane_op>(a, c, j);
  }
  return with_grad_matrix<l1_finish_op>(a, c, static_cast<const float*>(lanes));
}

/// The host loops over the bodies (the host twins): the CUDA kernels' arithmetic, row by row, the
/// rows split over the pool (each row by one thread), then added in order on the calling thread:
/// the same bits for any thread count.
inline void host_l1_mass(const l1_mass_item& a, worker_pool* pool) {
  if (a.l1 == nullptr || a.count == 0 || (a.skip != nullptr && *a.skip != 0)) {
    return;
  }
  parallel_for(pool, a.count, 64, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      a.row_l1[r] = l1_row(a, r);
    }
  });
  l1_add_rows(a);
}

/// Each item's given `row_l1` added in order into its mass (the second half of host_l1_mass).
inline void host_l1_add_rows(const l1_mass_item& a) {
  if (a.l1 != nullptr && a.count > 0 && (a.skip == nullptr || *a.skip == 0)) {
    l1_add_rows(a);
  }
}

} // namespace detail
ZF_NAMESPACE_END
