/// @file
/// The CPU optimizer of ZenFlow's host side: a plain vectorized multithreaded AdamW over one
/// flat array (`host::adamw_span`), and the fused host window (accumulate the last slot, AdamW
/// on the window's mean gradient, pack the new weights for upload, zero the accumulator) in one
/// pass over memory. The accumulation of unselected gradients (`host::accumulate_channels`) is
/// in `<zenflow/optim/channels.hpp>` (included here).
///
/// `host::adamw_span` or `host::adamw_dense` (`<zenflow/optim/adamw.hpp>`)? `adamw_dense` is the
/// host twin of `device::adamw_dense`: many tensors, per-tensor counts it advances itself, the
/// gradient scale and skip flag behind pointers, fp32 moments; call it from code written once for
/// both backends. `adamw_span` is the host-native call: one array, the update count and gradient
/// scale as values, fp32 or bf16 moments, any gradient and output precision.
///
/// SIMD: AVX-512, AVX2 or scalar, picked at run time (detail/cpu_simd.hpp; `force_simd_path`
/// for tests); every path writes the same bits. Threads: `worker_pool` (nullptr = the calling
/// thread); the work is cut into chunks that depend only on the sizes, and no result depends
/// on which thread ran a chunk, so results are bit-identical whatever the thread count.
/// None of these functions allocates device memory or calls CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/optim/detail/checks.hpp>
#include <zenflow/optim/detail/cpu_simd.hpp>
#include <zenflow/optim/detail/host_grain.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// What the fused window leaves in the accumulator rows it consumed.
enum class window_acc : std::uint8_t {
  zero, ///< zeroed, ready for the next window's adds
  keep, ///< left as they are (4 fewer bytes per element): the next window's first step must
        ///< write them with accumulate_mode::assign
};

/// Where adamw_window finds a listed channel's accumulator row.
enum class window_acc_rows : std::uint8_t {
  by_channel, ///< row c (= idx[r]) of a `channels x channel_len` accumulator
  packed,     ///< row r: the accumulator holds the listed channels only, in list order (`count` rows)
};

/// AdamW over one flat host array of `n` elements (see the file comment for `adamw_dense`).
///
/// @param master fp32 master weights, updated in place.
/// @param m,v    moments, float or bfloat16 (bf16: stored with stochastic rounding, hashed from
///               the element index in [0, n) and `count`, see core/detail/moment_rounding.hpp;
///               arithmetic in fp32), updated in place (none may overlap another or `grad`).
/// @param grad gradients (float, half or bfloat16), multiplied by `grad_scale` inside the update.
/// @param out  nullable: receives the new weights rounded to T (RNE); may alias `master` for float.
/// @param count the update count of this update (>= 1), for the bias corrections.
/// @return cudaErrorInvalidValue (nothing written) on a bad argument, else cudaSuccess.
template <class G, class T = float, class M = float>
[[nodiscard]] cudaError_t adamw_span(float* master,
                                     M* m,
                                     M* v,
                                     const G* grad,
                                     T* out,
                                     std::int64_t n,
                                     std::int32_t count,
                                     const adamw_hparams& hp,
                                     float grad_scale,
                                     worker_pool* pool) {
  static_assert(is_working_type_v<G> && is_working_type_v<T>, "zenflow: float, half or bfloat16");
  static_assert(std::is_same_v<M, float> || std::is_same_v<M, bfloat16>,
                "zenflow: moments are float or bfloat16");
  constexpr std::string_view fn = "zenflow::host::adamw_span";
  ZF_EXPECT_ARG(n >= 0, fn, "n", "must be >= 0");
  ZF_EXPECT_ARG(master != nullptr || n == 0, fn, "master", "must not be null");
  ZF_EXPECT_ARG(m != nullptr || n == 0, fn, "m", "must not be null");
  ZF_EXPECT_ARG(v != nullptr || n == 0, fn, "v", "must not be null");
  ZF_EXPECT_ARG(grad != nullptr || n == 0, fn, "grad", "must not be null");
  ZF_EXPECT_ARG(count >= 1, fn, "count", "must be >= 1 (the count of this update)");
  ZF_EXPECT_ARG(std::isfinite(grad_scale), fn, "grad_scale", "must be finite");
  if (const cudaError_t e = detail::check_hparams(fn, hp); e != cudaSuccess) {
    return e;
  }
  const adam_constants c = make_adam_constants(hp, count);
  parallel_for(pool, n, detail::cpu_grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    detail::cpu::adam_span<G, T, M>(master + lo, m + lo, v + lo, grad + lo,
                                    out == nullptr ? nullptr : out + lo, hi - lo, c, grad_scale, lo,
                                    static_cast<std::uint32_t>(count));
  });
  return cudaSuccess;
}

/// The fused ZenFlow host window, in one pass over the unselected channels `idx`:
/// for each listed channel c (row r of the packed buffers):
///   acc[c] += last_coef * last_slot[r]           (when last_slot is not null)
///   AdamW on master/m/v[c] with gradient acc[c] and gradient scale 1/steps (the window's mean),
///   moments decayed by beta^moment_steps (make_window_constants), bias correction from
///   counts[c] + moment_steps, then counts[c] += moment_steps
///   upload[r] = new master rounded to T (RNE);   acc[c] = 0 (unless `after == window_acc::keep`)
/// Channels not listed (the selected ones) are not touched.
///
/// @param state  full-size host state (master, m, v, counts) of the matrix; fp32, bf16 or int8
///               moments (int8: block-wise, core/detail/moment_q8.hpp; bf16 and int8: stochastic
///               rounding hashed from the whole-matrix element index
///               (c + first_channel) * channel_len + j and the new count counts[c] + moment_steps).
/// @param acc    fp32 accumulator, `channels x channel_len` (`acc_rows` packed: `count x channel_len`).
/// @param steps  n_w, the non-skipped steps summed into acc (>= 0). With 0 there is nothing to
///               apply: no update, no count change; upload gets the current master and acc is
///               zeroed (last_slot must then be null).
/// @param hp     hyper-parameters (lr already multiplied by host_lr_scale by the caller).
/// @param upload packed new working weights, `count x channel_len`.
/// @param after  `keep` leaves acc as it is (the next window's first step assigns it).
/// @param moment_steps how many steps the update stands for (>= 1): 1 is one plain AdamW step;
///               n_w makes the moments' memory and the counts run in steps (docs/defaults.md).
/// @param first_channel the index in the whole matrix of `state`'s channel 0: the bf16 moments'
///               rounding hash uses whole-matrix element indices, so that a caller holding one
///               block of the matrix (data parallel) rounds exactly as one holding all of it.
/// @param acc_rows by_channel: channel c's sum is acc row c; packed: listed channel r's is row r
///               (an accumulator of the unselected rows only). The same bits either way.
/// Bit-identical to accumulate_channels + adamw_span on the rows + packing (the unfused sequence),
/// and whatever the thread count or SIMD path.
template <class S, class T, class M = float>
[[nodiscard]] cudaError_t adamw_window(const basic_channel_state<M>& state,
                                       float* acc,
                                       const std::int32_t* idx,
                                       std::int64_t count,
                                       const S* last_slot,
                                       float last_coef,
                                       std::int32_t steps,
                                       const adamw_hparams& hp,
                                       T* upload,
                                       worker_pool* pool,
                                       window_acc after = window_acc::zero,
                                       std::int32_t moment_steps = 1,
                                       std::int64_t first_channel = 0,
                                       window_acc_rows acc_rows = window_acc_rows::by_channel) {
  static_assert(is_working_type_v<S> && is_working_type_v<T>, "zenflow: float, half or bfloat16");
  static_assert(std::is_same_v<M, float> || std::is_same_v<M, bfloat16> || std::is_same_v<M, int8_moment>,
                "zenflow: moments are float, bfloat16 or int8_moment");
  constexpr std::string_view fn = "zenflow::host::adamw_window";
  const std::int64_t L = state.channel_len;
  ZF_EXPECT_ARG(state.channels >= 0, fn, "state.channels", "must be >= 0");
  ZF_EXPECT_ARG(L >= 0, fn, "state.channel_len", "must be >= 0");
  const bool has_rows = state.channels > 0 && L > 0;
  ZF_EXPECT_ARG(state.master != nullptr || !has_rows, fn, "state.master", "must not be null");
  if constexpr (std::is_same_v<M, int8_moment>) {
    ZF_EXPECT_ARG((state.m.code != nullptr && state.m.scale != nullptr) || !has_rows, fn, "state.m",
                  "must not be null");
    ZF_EXPECT_ARG((state.v.code != nullptr && state.v.scale != nullptr) || !has_rows, fn, "state.v",
                  "must not be null");
    ZF_EXPECT_ARG(state.m.row_len == L && state.v.row_len == L && state.m.which == detail::moment_m &&
                      state.v.which == detail::moment_v,
                  fn, "state.m", "int8 moments must have row_len == channel_len (m, then v)");
  } else {
    ZF_EXPECT_ARG(state.m != nullptr || !has_rows, fn, "state.m", "must not be null");
    ZF_EXPECT_ARG(state.v != nullptr || !has_rows, fn, "state.v", "must not be null");
  }
  ZF_EXPECT_ARG(state.counts != nullptr || state.channels == 0, fn, "state.counts", "must not be null");
  const bool packed = acc_rows == window_acc_rows::packed;
  ZF_EXPECT_ARG(acc_rows == window_acc_rows::by_channel || packed, fn, "acc_rows",
                "is not a window_acc_rows value");
  ZF_EXPECT_ARG(acc != nullptr || !has_rows || (packed && count == 0), fn, "acc", "must not be null");
  ZF_EXPECT_ARG(count >= 0 && count <= state.channels, fn, "count", "must be in [0, channels]");
  ZF_EXPECT_ARG(idx != nullptr || count == 0, fn, "idx", "must not be null");
  ZF_EXPECT_ARG(upload != nullptr || count == 0 || L == 0, fn, "upload", "must not be null");
  ZF_EXPECT_ARG(steps >= 0, fn, "steps", "must be >= 0");
  ZF_EXPECT_ARG(steps > 0 || last_slot == nullptr, fn, "last_slot", "must be null when steps == 0");
  ZF_EXPECT_ARG(std::isfinite(last_coef), fn, "last_coef", "must be finite");
  ZF_EXPECT_ARG(moment_steps >= 1, fn, "moment_steps", "must be >= 1");
  ZF_EXPECT_ARG(first_channel >= 0, fn, "first_channel", "must be >= 0");
  if (const cudaError_t e = detail::check_hparams(fn, hp); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, idx, count, state.channels); e != cudaSuccess) {
    return e;
  }
  const float scale = steps > 0 ? 1.0f / static_cast<float>(steps) : 0.0f;
  parallel_for(pool, count, detail::rows_per_chunk(L), [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t c = idx[r];
      const std::int64_t off = c * L;
      float* const acc_row = acc + (packed ? r * L : off);
      if (steps == 0) {
        (void)detail::cpu::convert_span<float, T>(state.master + off, upload + r * L, L, false);
        if (after == window_acc::zero) {
          std::memset(acc_row, 0, static_cast<std::size_t>(L) * sizeof(float));
        }
        continue;
      }
      const std::int32_t t = state.counts[c] + moment_steps;
      const adam_constants k = make_window_constants(hp, t, moment_steps);
      if constexpr (std::is_same_v<M, int8_moment>) {
        detail::cpu::window_row_q8<S, T>(acc_row, last_slot == nullptr ? nullptr : last_slot + r * L,
                                         last_coef, state.master + off, state.m + off, state.v + off,
                                         upload + r * L, L, k, scale, (c + first_channel) * L,
                                         static_cast<std::uint32_t>(t), after == window_acc::keep);
      } else {
        detail::cpu::window_span<S, T, M>(acc_row, last_slot == nullptr ? nullptr : last_slot + r * L,
                                          last_coef, state.master + off, state.m + off, state.v + off,
                                          upload + r * L, L, k, scale, (c + first_channel) * L,
                                          static_cast<std::uint32_t>(t), after == window_acc::keep);
      }
      state.counts[c] = t;
    }
  });
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
