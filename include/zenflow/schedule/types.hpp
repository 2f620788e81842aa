/// @file
/// Descriptors of the ZenFlow schedule's launchers (`zenflow::device`) and their host twins
/// (`zenflow::host`): the step's header (coef_t, bad_t, the squared global norm), the squared-norm
/// totals' items and Zen-auto's L1-mass items.
///
/// The descriptors are type-erased (a `void*` gradient and its `dtype`) so that one launch covers
/// matrices of every working type; `make_l1_mass_item` builds one from a typed `channel_matrix`.
#pragma once

#include <cstdint>
#include <cstring>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

/// compute_step_header's inputs that live where the step runs (device memory for the device
/// primitive), read and written there so that a dynamic loss scale (torch's GradScaler) costs no
/// host wait. Both nullable.
/// - `loss_scale`: read instead of the `loss_scale` argument; one that is not finite and > 0 skips
///   the step (as found-inf does) and counts as 1;
/// - `found_inf`: read (non-zero: the step is skipped), then written 1 when the step is skipped,
///   else 0 (what the scaler's update reads).
struct step_scale_io {
  const float* loss_scale = nullptr;
  float* found_inf = nullptr;
};

/// The step's scalars as `compute_step_header` writes them (16 bytes, 4-byte aligned, so that it
/// can open a record of floats; the engine's step record starts with one):
/// - `coef`: coef_t, the factor every gradient of the step is multiplied by (loss-scale
///   unscaling x clipping);
/// - `skip`: bad_t, non-zero when a gradient of the step holds a NaN or an Inf (nothing of the
///   step is applied then);
/// - the squared global L2 norm of the raw (still loss-scaled) gradients, fp64, as two 32-bit
///   words, low first (read it with `squared_norm()`).
struct step_header {
  float coef = 1.0f;
  std::uint32_t skip = 0;
  std::uint32_t sum_sq_words[2] = {0, 0};

  /// The squared global norm (host memory: a header copied back).
  [[nodiscard]] double squared_norm() const noexcept {
    const std::uint64_t bits =
        static_cast<std::uint64_t>(sum_sq_words[0]) | (static_cast<std::uint64_t>(sum_sq_words[1]) << 32);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
};
static_assert(sizeof(step_header) == 16 && alignof(step_header) == 4);

/// The optimizer's view of a header at `h` (device memory on the device: only its address is
/// taken): `adamw_dense`, `adamw_selective` and the rest read coef_t and the skip flag there.
[[nodiscard]] inline step_scalars scalars_of(const step_header* h) noexcept {
  return {&h->coef, &h->skip};
}

/// One tensor of `sq_norm_totals`: its gradient (working type `type`, `channels x channel_len` in
/// `layout`, leading dimension `ld`) and its fp32 squared-L2 channel scores (`channel_norms`);
/// `rescan` (nullable): for every channel whose score is not finite, its fp64 squared norm, given
/// (`sq_norm_rescan`, computed where the rows are: data parallel); the gradient is then not read.
/// A vector is one channel of `channel_len`. Pointers: device memory for the device launcher (the
/// items too), host memory for the host twin.
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

/// Channels [first, first + count) of `src`: out[c] = the fp64 squared norm of channel c where
/// its score is not finite, else 0 (the other entries of `out` are not written).
struct sq_rescan_item {
  sq_total_item src;
  std::int64_t first = 0;
  std::int64_t count = 0;
  double* out = nullptr;
};

/// One call of Zen-auto's L1 mass: rows `idx[0..count)` of a gradient (working type `type`), each
/// row's |x|_1 into `row_l1[r]` (`count` floats; an output: data parallel sums rows across
/// ranks), their sum in row order added to `*l1`. Nothing at all when `skip` (nullable) points to
/// a non-zero word (a bad step adds no mass).
///
/// `lanes` picks the order of a row's sum, so that it matches the fused masses of the optimizer
/// (`host::adamw_selective`, `host::gather_channels` with an `l1_mass`): true (their path for
/// contiguous channels) 16 lanes, lane j summing |x[16 i + j]| over the whole groups of 16, then
/// the lanes from 0, then the tail; false (their strided path) |x[i]| in order from 0.
/// `make_l1_mass_item` sets it from the layout. Pointers: device memory for the device launchers
/// (the items too, for the batched ones), host memory for the host twins.
struct l1_mass_item {
  const void* grad = nullptr;
  dtype type = dtype::f32;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  bool lanes = true;
  const std::int32_t* idx = nullptr;
  std::int64_t count = 0;
  float* row_l1 = nullptr;
  const std::uint32_t* skip = nullptr;
  float* l1 = nullptr;
};

/// The mass item of rows `idx[0..count)` of `grad`, in the order of the optimizer's fused masses
/// on that matrix (`lanes` for contiguous channels).
template <class T>
[[nodiscard]] l1_mass_item make_l1_mass_item(channel_matrix<const T> grad,
                                             const std::int32_t* idx,
                                             std::int64_t count,
                                             float* row_l1,
                                             const std::uint32_t* skip,
                                             float* l1) noexcept {
  return {grad.data,
          dtype_of<T>(),
          grad.channels,
          grad.channel_len,
          grad.ld,
          grad.layout,
          grad.layout == channel_layout::contiguous,
          idx,
          count,
          row_l1,
          skip,
          l1};
}

ZF_NAMESPACE_END
