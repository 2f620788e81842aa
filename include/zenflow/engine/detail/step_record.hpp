/// @file
/// The per-step record the device computes and the host reads after the step's data: the
/// gradient scale coef_t, the skip flag and, for Zen-auto, the L1 masses of every matrix. It
/// travels down the same ring as the step's gradients, so the host never waits for it apart.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Layout of the record, in 32-bit words: [0] coef (float), [1] skip (uint32), [2] squared
/// global norm of the raw gradients (float), [3] reserved, then `matrices` crit masses and
/// `matrices` rest masses (floats).
struct step_record_layout {
  std::int64_t matrices = 0;
  static constexpr std::int64_t header_words = 4;
  [[nodiscard]] std::int64_t words() const noexcept { return header_words + 2 * matrices; }
  [[nodiscard]] std::size_t bytes() const noexcept { return static_cast<std::size_t>(words()) * 4; }
};

/// coef_t and bad_t from the summed squared norm and the NaN/Inf flags (SPEC's first two lines).
/// The gradients carry `loss_scale`; the clipping threshold applies to the unscaled norm.
ZF_HOST_DEVICE inline void finish_step_scalars(float sum_sq,
                                               std::uint32_t nonfinite,
                                               float loss_scale,
                                               float max_norm,
                                               float* coef,
                                               std::uint32_t* skip) {
  const float inv_scale = 1.0f / loss_scale;
  float c = inv_scale;
  const bool bad = nonfinite != 0 || !is_finite(sum_sq);
  if (max_norm > 0.0f && !bad) {
#if ZF_DEVICE_COMPILE
    const float norm = sqrtf(sum_sq) * inv_scale;
#else
    const float norm = std::sqrt(sum_sq) * inv_scale;
#endif
    const float clip = max_norm / (norm + 1e-6f);
    if (clip < 1.0f) {
      c = inv_scale * clip;
    }
  }
  *coef = c;
  *skip = bad ? 1u : 0u;
}

/// Host-side view of a record that has landed.
struct step_record_view {
  const std::byte* data = nullptr;
  std::int64_t matrices = 0;
  [[nodiscard]] float coef() const { return load_f(0); }
  [[nodiscard]] bool skip() const {
    std::uint32_t u;
    std::memcpy(&u, data + 4, 4);
    return u != 0;
  }
  [[nodiscard]] float sum_sq() const { return load_f(2); }
  [[nodiscard]] float crit(std::int64_t i) const { return load_f(step_record_layout::header_words + i); }
  [[nodiscard]] float rest(std::int64_t i) const {
    return load_f(step_record_layout::header_words + matrices + i);
  }

private:
  [[nodiscard]] float load_f(std::int64_t w) const {
    float f;
    std::memcpy(&f, data + 4 * w, 4);
    return f;
  }
};

} // namespace detail
ZF_NAMESPACE_END
