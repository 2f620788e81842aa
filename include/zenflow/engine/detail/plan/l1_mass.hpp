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
/// The CUDA backend computes each row apart (kernels.cuh: 16 threads per row, then one thread
/// adds the rows in order; for a pack, in the pack's own launch) instead of the float atomics that
/// made its windows vary run to run.
#pragma once

#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int l1_row_lanes = 16;

/// One call's mass: rows `idx[0..count)` of the gradient (working type `type`), each row's sum
/// into `row_l1[r]` (scratch, `count` floats), their ordered sum added to `*l1`. Nothing when
/// `skip` (nullable) is set: the update it stands beside does nothing then either.
struct l1_mass_args {
  const void* grad = nullptr;
  dtype type = dtype::f32;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  bool lanes = true; ///< the 16-lane order (the host twin's path for this call), else sequential
  const std::int32_t* idx = nullptr;
  std::int64_t count = 0;
  float* row_l1 = nullptr;
  const std::uint32_t* skip = nullptr;
  float* l1 = nullptr;
  /// The CUDA backend's pack: a zeroed device word that lets the rows' blocks of one launch tell
  /// which of them finished last, and so add the rows into the mass in the same launch (kernels.cuh,
  /// pack_mass_kernel; left 0 again). Null elsewhere (and ignored by the host and emulated
  /// backends, which add in the same order).
  std::uint32_t* ticket = nullptr;
};

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
ZF_HOST_DEVICE inline void l1_add_rows(const l1_mass_args& a) {
  float s = 0.0f;
  for (std::int64_t r = 0; r < a.count; ++r) {
    s = add_f(s, a.row_l1[r]);
  }
  *a.l1 = add_f(*a.l1, s);
}

/// The gradient of the call as a matrix of its working type, passed to `f(matrix, args...)`
/// (a function object type, not a lambda: kernels call this too).
template <class F, class... A>
ZF_HOST_DEVICE float with_grad_matrix(const l1_mass_args& a, A... args) {
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
ZF_HOST_DEVICE inline float l1_row(const l1_mass_args& a, std::int64_t r) {
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

/// A sharded matrix's masses (ZeRO-3: dp/shard_masses.hpp) from every rank's row masses,
/// gathered: rank r's part holds, at `count_at`, its device-set row count (int32 bits), and at
/// `rows_at` its `rows` row masses (l1_row's values), its device-set rows ascending, then its
/// host-set rows ascending. The ranks' shards are contiguous and in rank order, so the parts in
/// rank order list each set in the order one rank holding the whole matrix walks it.
struct shard_mass_part {
  std::int64_t count_at = 0;
  std::int64_t rows_at = 0;
  std::int64_t rows = 0;
};
struct shard_mass_item {
  const shard_mass_part* parts = nullptr; ///< `ranks` of them, in rank order
  int ranks = 0;
  std::int64_t per_slot = 1; ///< host-set rows per pack call (param_info::rows_per_slot)
  std::int64_t matrix = 0;   ///< its crit and rest words
};

/// One rank's record masses of `it` (whole matrix): the crit mass as the fused update's one call
/// adds it (the device-set rows in order, that sum into the zeroed word; nothing when `*skip`),
/// the rest mass as the packs add it (the host-set rows in calls of `per_slot`, each call's sum
/// into the zeroed word).
ZF_HOST_DEVICE inline void shard_masses_of(
    const shard_mass_item& it, const float* gathered, const std::uint32_t* skip, float* crit, float* rest) {
  float s = 0.0f;
  for (int r = 0; r < it.ranks; ++r) {
    const shard_mass_part part = it.parts[r];
    std::int32_t k = 0;
    std::memcpy(&k, gathered + part.count_at, 4);
    for (std::int64_t j = 0; j < k; ++j) {
      s = add_f(s, gathered[part.rows_at + j]);
    }
  }
  crit[it.matrix] = *skip != 0 ? 0.0f : add_f(0.0f, s);
  float mass = 0.0f;
  float call = 0.0f;
  std::int64_t in_call = 0;
  for (int r = 0; r < it.ranks; ++r) {
    const shard_mass_part part = it.parts[r];
    std::int32_t k = 0;
    std::memcpy(&k, gathered + part.count_at, 4);
    for (std::int64_t j = k; j < part.rows; ++j) {
      call = add_f(call, gathered[part.rows_at + j]);
      if (++in_call == it.per_slot) {
        mass = add_f(mass, call);
        call = 0.0f;
        in_call = 0;
      }
    }
  }
  rest[it.matrix] = in_call > 0 ? add_f(mass, call) : mass;
}

/// The host loop over the bodies: the CUDA kernels' arithmetic, row by row (tests compare it with
/// the fused host twins).
inline void host_l1_mass(const l1_mass_args& a) {
  if (a.count == 0 || (a.skip != nullptr && *a.skip != 0)) {
    return;
  }
  for (std::int64_t r = 0; r < a.count; ++r) {
    a.row_l1[r] = l1_row(a, r);
  }
  l1_add_rows(a);
}

} // namespace detail
ZF_NAMESPACE_END
