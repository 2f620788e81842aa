/// @file
/// The device plan's own small operations, written once as host+device bodies: the adoption of
/// grad_ready()'s early masses, an iota and moves of int32 update counts. The host and emulated
/// backends run the `host_*` loops below; the CUDA backend launches the kernels of kernels.cuh,
/// which call the same bodies (so the three compute the same bits). Everything heavy is a
/// primitive (select/, optim/), and so are the step's scalars and Zen-auto's masses
/// (schedule/: step_scalars.hpp, l1_mass.hpp).
#pragma once

#include <cstdint>

#include <zenflow/core/config.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Moves of int32 update counts: dst[dst_idx[i]] = src[src_idx[i]] for i < n (either index list
/// nullable: the identity).
struct count_moves {
  const std::int32_t* src = nullptr;
  const std::int32_t* src_idx = nullptr;
  std::int32_t* dst = nullptr;
  const std::int32_t* dst_idx = nullptr;
  std::int64_t n = 0;
};

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
