/// @file
/// The per-step record the device computes and the host reads after the step's data: the
/// gradient scale coef_t, the skip flag and, for Zen-auto, the L1 masses of every matrix. It
/// travels down the same ring as the step's gradients, so the host never waits for it apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/schedule/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Layout of the record, in 32-bit words: a `step_header` (schedule/types.hpp: [0] coef (float),
/// [1] skip (uint32), [2, 3] squared global norm of the raw gradients (double, in two words)), then
/// `matrices` crit masses and
/// `matrices` rest masses (floats). The crit masses are zeroed by the prologue and added into by
/// the device update; the rest masses are zeroed on the pack stream before the step's first pack
/// and added into by the packs (which so need not wait for the prologue).
/// The one place the layout is written down: every writer (the device plan, its kernels) and
/// every reader (`step_record_view`) goes through these accessors.
struct step_record_layout {
  std::int64_t matrices = 0;
  static constexpr std::int64_t header_words = sizeof(step_header) / 4;
  static constexpr std::int64_t coef_word = 0;
  static constexpr std::int64_t skip_word = 1;
  static constexpr std::int64_t sum_sq_word = 2;
  static_assert(header_words == 4 && offsetof(step_header, coef) == 4 * coef_word &&
                offsetof(step_header, skip) == 4 * skip_word &&
                offsetof(step_header, sum_sq_words) == 4 * sum_sq_word);
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
  [[nodiscard]] static step_header* header(float* record) noexcept {
    return reinterpret_cast<step_header*>(record);
  }
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
