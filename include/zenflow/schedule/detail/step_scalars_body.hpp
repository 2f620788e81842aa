/// @file
/// The step scalars' arithmetic, written once as host+device bodies (the kernels of
/// step_scalars_kernels.cuh and the host loops below call the same functions, so the two backends
/// compute the same bits): a tensor's fp64 squared norm from its fp32 scores (lanes, then the lanes
/// in order), the fp64 rescan of a channel whose score is not finite, and coef_t and bad_t from
/// the totals and the NaN/Inf flags.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/fp.hpp>
#include <zenflow/math/norms.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// coef_t and bad_t from the squared global norm and the NaN/Inf flags (docs/design.md, "One step", 1).
/// A step is bad when an element is NaN or Inf, never because of its norm: `sum_sq` is fp64 (the
/// fp64 sum of the per-tensor totals, see `sq_total_lane`), so a finite gradient's norm does not
/// overflow, and the clipping coefficient is computed in fp64 too. The gradients carry
/// `loss_scale`; the clipping threshold applies to the unscaled norm.
ZF_HOST_DEVICE inline void finish_step_scalars(double sum_sq,
                                               std::uint32_t nonfinite,
                                               float loss_scale,
                                               float max_norm,
                                               float* coef,
                                               std::uint32_t* skip) {
  // fp64 products and sums through math/fp.hpp: correctly rounded and never contracted on either
  // side, so that the host and device backends compute the same coef_t at any flags.
  const float inv_scale = div_f(1.0f, loss_scale);
  float c = inv_scale;
  const bool bad = nonfinite != 0;
  // The float operands widened and the result narrowed by f32_to_f64 / f64_to_f32, and the test
  // in fp64: none of them flushes a subnormal under the consumer's -ftz=true (fp64 has no ftz).
  if (f32_to_f64(max_norm) > 0.0 && !bad) {
    const double norm = mul_d(sqrt_d(sum_sq), f32_to_f64(inv_scale));
    const double clip = div_d(f32_to_f64(max_norm), add_d(norm, 1e-6));
    if (clip < 1.0) {
      c = f64_to_f32(mul_d(f32_to_f64(inv_scale), clip));
    }
  }
  *coef = c;
  *skip = bad ? 1u : 0u;
}

/// Writes coef, skip and the squared norm into the header at `h`, word by word (its memory may be
/// a record of floats).
ZF_HOST_DEVICE inline void write_step_header(step_header* h, float coef, std::uint32_t skip, double sum_sq) {
  auto* w = reinterpret_cast<std::uint32_t*>(h);
#if ZF_DEVICE_COMPILE
  const auto c = __float_as_uint(coef);
  const auto s = static_cast<std::uint64_t>(__double_as_longlong(sum_sq));
#else
  std::uint32_t c;
  std::uint64_t s;
  std::memcpy(&c, &coef, 4);
  std::memcpy(&s, &sum_sq, 8);
#endif
  w[0] = c;
  w[1] = skip;
  w[2] = static_cast<std::uint32_t>(s);
  w[3] = static_cast<std::uint32_t>(s >> 32);
}

/// compute_step_header's arguments, as its kernel takes them: the header from the `n` per-tensor
/// totals (summed in index order) and the `flag_count` NaN/Inf flags (ORed), and `zero_count`
/// floats at `zero` zeroed in the same launch.
struct step_header_args {
  const double* totals = nullptr;
  std::int64_t n = 0;
  const std::uint32_t* flags = nullptr;
  std::int64_t flag_count = 0;
  float loss_scale = 1.0f;
  float max_norm = 0.0f;
  step_header* header = nullptr;
  float* zero = nullptr;
  std::int64_t zero_count = 0;
  step_scale_io io{};
};

/// Lane `lane`'s share of item `it`'s fp64 squared norm (`sq_total_lane` of its working type).
ZF_HOST_DEVICE inline double sq_total_item_lane(const sq_total_item& it, int lane) {
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const channel_matrix<const T> g{static_cast<const T*>(it.grad), it.channels, it.channel_len, it.ld,
                                    it.layout};
    return sq_total_lane<T>(g, it.scores, lane, it.rescan);
  };
  if (it.type == dtype::f16) {
    return run(half{});
  }
  if (it.type == dtype::bf16) {
    return run(bfloat16{});
  }
  return run(float{});
}

/// Entry `i` of rescan item `it` (channel it.first + i).
ZF_HOST_DEVICE inline void sq_rescan_at(const sq_rescan_item& it, std::int64_t i) {
  const sq_total_item& s = it.src;
  const std::int64_t c = it.first + i;
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const channel_matrix<const T> g{static_cast<const T*>(s.grad), s.channels, s.channel_len, s.ld, s.layout};
    it.out[c] = sq_rescan_channel<T>(g, s.scores, c);
  };
  if (s.type == dtype::f16) {
    run(half{});
  } else if (s.type == dtype::bf16) {
    run(bfloat16{});
  } else {
    run(float{});
  }
}

/// The header from the totals (summed in index order) and the flags: coef_t, bad_t and the
/// squared global norm.
ZF_HOST_DEVICE inline void finish_step_header(const step_header_args& a) {
  double sum = 0.0;
  std::uint32_t bad = 0;
  for (std::int64_t i = 0; i < a.n; ++i) {
    sum += a.totals[i];
  }
  for (std::int64_t i = 0; i < a.flag_count; ++i) {
    bad |= a.flags[i];
  }
  float scale = a.io.loss_scale != nullptr ? *a.io.loss_scale : a.loss_scale;
  // A scale that is not finite and > 0 (NaN fails both tests) skips the step, as found_inf does.
  // The tests in fp64 (f32_to_f64 widens exactly and never flushes): an fp32 comparison compiles
  // to setp.ftz under the consumer's -ftz=true, which would take a subnormal scale for 0.
  const double scale_d = f32_to_f64(scale);
  if (!(scale_d > 0.0 && scale_d <= 3.40282347e38)) {
    bad |= 1u;
    scale = 1.0f;
  }
  if (a.io.found_inf != nullptr && f32_to_f64(*a.io.found_inf) != 0.0) {
    bad |= 1u;
  }
  float coef = 1.0f;
  std::uint32_t skip = 0;
  finish_step_scalars(sum, bad, scale, a.max_norm, &coef, &skip);
  write_step_header(a.header, coef, skip, sum);
  if (a.io.found_inf != nullptr) {
    *a.io.found_inf = skip != 0 ? 1.0f : 0.0f;
  }
}

// ---- the host loops over the bodies (the host twins) ----------------------------------------------
// Items split over the pool, each item's values computed by one thread in the kernels' order:
// the same bits for any thread count.

inline void host_sq_totals(const sq_total_item* items, std::int64_t n, double* totals, worker_pool* pool) {
  parallel_for(pool, n, 1, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    double lanes[sq_total_lanes];
    for (std::int64_t i = lo; i < hi; ++i) {
      for (int j = 0; j < sq_total_lanes; ++j) {
        lanes[j] = sq_total_item_lane(items[i], j);
      }
      totals[i] = sum_lanes(lanes);
    }
  });
}

inline void host_sq_rescan(const sq_rescan_item* items, std::int64_t n, worker_pool* pool) {
  parallel_for(pool, n, 1, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t k = lo; k < hi; ++k) {
      for (std::int64_t i = 0; i < items[k].count; ++i) {
        sq_rescan_at(items[k], i);
      }
    }
  });
}

inline void host_step_header(const step_header_args& a) {
  finish_step_header(a);
  for (std::int64_t i = 0; i < a.zero_count; ++i) {
    a.zero[i] = 0.0f;
  }
}

} // namespace detail
ZF_NAMESPACE_END
