/// @file
/// The device plan's own small operations, written once as host+device bodies: the per-tensor
/// fp64 squared-norm totals, the step scalars (coef_t, bad_t) from them and the NaN/Inf flags,
/// the adoption of grad_ready()'s early masses, an iota and moves of int32 update counts. The
/// host and emulated backends run the `host_*` loops below; the CUDA backend launches the
/// kernels of kernels.cuh, which call the same bodies (so the three compute the same bits).
/// Everything heavy is a primitive (select/, optim/).
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/detail/plan/step_record.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One tensor of the squared-norm totals: its gradient (working type `type`) and its fp32 scores;
/// `rescan` (nullable): the rescans of its channels whose score is not finite, computed already
/// elsewhere (sq_rescan_item: by whoever holds the rows).
struct sq_total_item {
  const void* grad = nullptr;
  const float* scores = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  dtype type = dtype::f32;
  const double* rescan = nullptr;
};

/// Channels [first, first + count) of `src`: out[c] = sq_rescan_channel (a range of channels;
/// the other entries of `out` are not written).
struct sq_rescan_item {
  sq_total_item src;
  std::int64_t first = 0;
  std::int64_t count = 0;
  double* out = nullptr;
};

/// The inputs of the step record's header (`finish_step_header`), and the record it goes into with
/// its `crit_words` crit masses (zeroed: the device update adds into them next, on the same
/// stream). The rest masses are the packs': they are zeroed on the pack stream, before the first
/// pack (device_plan::begin_rest_masses), so that the packs need not wait for this.
struct step_scalars_args {
  const double* totals = nullptr; ///< per tensor, summed in index order
  int n = 0;
  const std::uint32_t* flags = nullptr; ///< NaN/Inf flags, ORed
  int flag_count = 0;
  float loss_scale = 1.0f;
  float max_norm = 0.0f;
  float* record = nullptr;
  int crit_words = 0;
  /// step_options' loss scale and found-inf (nullable; the backend's device memory): read here,
  /// where the step runs, so that a dynamic scale costs no host wait.
  const float* loss_scale_at = nullptr;
  float* found_inf = nullptr;
};

/// Moves of int32 update counts: dst[dst_idx[i]] = src[src_idx[i]] for i < n (either index list
/// nullable: the identity).
struct count_moves {
  const std::int32_t* src = nullptr;
  const std::int32_t* src_idx = nullptr;
  std::int32_t* dst = nullptr;
  const std::int32_t* dst_idx = nullptr;
  std::int64_t n = 0;
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

/// The header of the step record from the `n` per-tensor totals (summed in index order) and the
/// `flag_count` NaN/Inf flags: coef_t, bad_t and the squared global norm.
ZF_HOST_DEVICE inline void finish_step_header(const step_scalars_args& a) {
  double sum = 0.0;
  std::uint32_t bad = 0;
  for (int i = 0; i < a.n; ++i) {
    sum += a.totals[i];
  }
  for (int i = 0; i < a.flag_count; ++i) {
    bad |= a.flags[i];
  }
  float scale = a.loss_scale_at != nullptr ? *a.loss_scale_at : a.loss_scale;
  // A scale that is not finite and > 0 (NaN fails both tests) skips the step, as found_inf does.
  if (!(scale > 0.0f && scale <= 3.40282347e38f)) {
    bad |= 1u;
    scale = 1.0f;
  }
  if (a.found_inf != nullptr && *a.found_inf != 0.0f) {
    bad |= 1u;
  }
  float coef = 1.0f;
  std::uint32_t skip = 0;
  finish_step_scalars(sum, bad, scale, a.max_norm, &coef, &skip);
  write_step_header(a.record, coef, skip, sum);
  if (a.found_inf != nullptr) {
    *a.found_inf = skip != 0 ? 1.0f : 0.0f;
  }
}

/// The record's rest mass starts from the early one: rest[i] = 0 + early[i] (the bits of packs
/// adding into a zeroed record), early[i] = 0 for the next step.
ZF_HOST_DEVICE ZF_FORCEINLINE void adopt_early_mass_at(float* early, float* rest, int i) {
  rest[i] = norm_add(0.0f, early[i]); // no add.ftz under -ftz=true
  early[i] = 0.0f;
}

/// Move `i` of `m`.
ZF_HOST_DEVICE ZF_FORCEINLINE void move_count_at(const count_moves& m, std::int64_t i) {
  m.dst[m.dst_idx != nullptr ? m.dst_idx[i] : i] = m.src[m.src_idx != nullptr ? m.src_idx[i] : i];
}

// ---- host loops over the bodies (host and emulated backends) ------------------------------------

inline void host_sq_totals(const sq_total_item* items, std::int64_t n, double* totals) {
  double lanes[sq_total_lanes];
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < sq_total_lanes; ++j) {
      lanes[j] = sq_total_item_lane(items[i], j);
    }
    totals[i] = sum_lanes(lanes);
  }
}

inline void host_sq_rescan(const sq_rescan_item* items, int n) {
  for (int k = 0; k < n; ++k) {
    for (std::int64_t i = 0; i < items[k].count; ++i) {
      sq_rescan_at(items[k], i);
    }
  }
}

inline void host_finish_scalars(const step_scalars_args& a) {
  finish_step_header(a);
  for (int i = 0; i < a.crit_words; ++i) {
    a.record[step_record_layout::header_words + i] = 0.0f;
  }
}

inline void host_adopt_early_mass(float* early, float* rest, int n) {
  for (int i = 0; i < n; ++i) {
    adopt_early_mass_at(early, rest, i);
  }
}

inline void host_iota(std::int32_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::int32_t>(i);
  }
}

inline void host_move_counts(const count_moves& m) {
  for (std::int64_t i = 0; i < m.n; ++i) {
    move_count_at(m, i);
  }
}

} // namespace detail
ZF_NAMESPACE_END
