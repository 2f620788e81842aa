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
#include <zenflow/math/fp.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Layout of the record, in 32-bit words: [0] coef (float), [1] skip (uint32), [2, 3] squared
/// global norm of the raw gradients (double, unaligned), then `matrices` crit masses and
/// `matrices` rest masses (floats). The crit masses are zeroed by the prologue and added into by
/// the device update; the rest masses are zeroed on the pack stream before the step's first pack
/// and added into by the packs (which so need not wait for the prologue).
/// The one place the layout is written down: every writer (the device plan, its kernels) and
/// every reader (`step_record_view`) goes through these accessors.
struct step_record_layout {
  std::int64_t matrices = 0;
  static constexpr std::int64_t header_words = 4;
  static constexpr std::int64_t coef_word = 0;
  static constexpr std::int64_t skip_word = 1;
  static constexpr std::int64_t sum_sq_word = 2;
  [[nodiscard]] ZF_HOST_DEVICE std::int64_t words() const noexcept { return header_words + 2 * matrices; }
  [[nodiscard]] ZF_HOST_DEVICE std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(words()) * 4;
  }
  /// The header alone: what the step's first copy carries (the masses are still being added
  /// into by the step's packs, so that copy must not read them).
  [[nodiscard]] ZF_HOST_DEVICE static constexpr std::size_t header_bytes() noexcept {
    return static_cast<std::size_t>(header_words) * 4;
  }
  [[nodiscard]] ZF_HOST_DEVICE std::int64_t crit_word(std::int64_t matrix) const noexcept {
    return header_words + matrix;
  }
  [[nodiscard]] ZF_HOST_DEVICE std::int64_t rest_word(std::int64_t matrix) const noexcept {
    return header_words + matrices + matrix;
  }
  /// Typed addresses in a record at `record` (device memory on a device backend).
  [[nodiscard]] ZF_HOST_DEVICE static float* coef(float* record) noexcept { return record + coef_word; }
  [[nodiscard]] ZF_HOST_DEVICE static const std::uint32_t* skip(const float* record) noexcept {
    return reinterpret_cast<const std::uint32_t*>(record + skip_word);
  }
  /// The crit (device channels) and rest (host channels) mass of `matrix`; nullptr for a
  /// parameter that is not a matrix (`matrix` < 0).
  [[nodiscard]] ZF_HOST_DEVICE float* crit(float* record, std::int64_t matrix) const noexcept {
    return matrix < 0 ? nullptr : record + crit_word(matrix);
  }
  [[nodiscard]] ZF_HOST_DEVICE float* rest(float* record, std::int64_t matrix) const noexcept {
    return matrix < 0 ? nullptr : record + rest_word(matrix);
  }
};

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

/// Writes coef, skip and the squared norm into the record's header at `record`.
ZF_HOST_DEVICE inline void write_step_header(void* record, float coef, std::uint32_t skip, double sum_sq) {
  auto* w = static_cast<std::uint32_t*>(record);
#if ZF_DEVICE_COMPILE
  const auto c = __float_as_uint(coef);
  const auto s = static_cast<std::uint64_t>(__double_as_longlong(sum_sq));
#else
  std::uint32_t c;
  std::uint64_t s;
  std::memcpy(&c, &coef, 4);
  std::memcpy(&s, &sum_sq, 8);
#endif
  w[step_record_layout::coef_word] = c;
  w[step_record_layout::skip_word] = skip;
  w[step_record_layout::sum_sq_word] = static_cast<std::uint32_t>(s);
  w[step_record_layout::sum_sq_word + 1] = static_cast<std::uint32_t>(s >> 32);
}

/// Host-side view of a record that has landed.
struct step_record_view {
  const std::byte* data = nullptr;
  std::int64_t matrices = 0;
  [[nodiscard]] float coef() const { return load_f(step_record_layout::coef_word); }
  [[nodiscard]] bool skip() const {
    std::uint32_t u;
    std::memcpy(&u, data + 4 * step_record_layout::skip_word, 4);
    return u != 0;
  }
  /// The squared global norm of the raw gradients (fp64).
  [[nodiscard]] double sum_sq() const {
    double d;
    std::memcpy(&d, data + 4 * step_record_layout::sum_sq_word, 8);
    return d;
  }
  [[nodiscard]] float crit(std::int64_t i) const { return load_f(layout().crit_word(i)); }
  [[nodiscard]] float rest(std::int64_t i) const { return load_f(layout().rest_word(i)); }
  [[nodiscard]] step_record_layout layout() const noexcept { return step_record_layout{matrices}; }

private:
  [[nodiscard]] float load_f(std::int64_t w) const {
    float f;
    std::memcpy(&f, data + 4 * w, 4);
    return f;
  }
};

} // namespace detail
ZF_NAMESPACE_END
