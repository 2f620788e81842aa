/// @file
/// Host twins of the device optimizer launchers (optim/adamw.cuh): dense multi-tensor AdamW and
/// selective-channel AdamW. Same arguments and validation as the launchers, with a `worker_pool*`
/// (nullptr = the calling thread) instead of a stream, and host pointers (named without `d_`)
/// where the launcher takes device pointers. Same arithmetic (math/adam.hpp), so the host and
/// device results agree bit for bit on the weights, masters and moments. Implementations in
/// `detail/adamw_host.hpp`; the channel copies (gather/scatter) in `<zenflow/optim/channels.hpp>`
/// (included here).
///
/// Which AdamW to call on the host: these twins when the code is written once for both backends
/// (the engine); `host::adamw_span` (`<zenflow/optim/cpu_adamw.hpp>`) for one flat host array
/// with host scalars and an explicit update count (fp32 or bf16 moments).
///
/// One difference: the host twins also check that every channel index is in [0, channels)
/// (the device launchers cannot read device memory before launching; there an index out of
/// range is undefined behaviour).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/optim/detail/adamw_host.hpp>
#include <zenflow/optim/detail/checks.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace host {

/// Dense AdamW over `count` tensors (the engine's vector parameters; the whole model during
/// warm-up). Tensor t uses update count `counts[t] + 1`, and `counts[t]` is advanced.
/// A skipped step (`*skip != 0`) writes nothing at all.
///
/// @param tensors   host array of `count` descriptors (pointers: host memory here).
/// @param counts  per-tensor update counts (int32), advanced when not skipped.
/// @param grad_scale nullable (1.0): gradient multiplier (unscaling x clipping).
/// @param skip    nullable (not skipped): non-zero skips the whole step.
template <class T>
[[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                      int count,
                                      std::int32_t* counts,
                                      const adamw_hparams& hp,
                                      const float* grad_scale,
                                      const std::uint32_t* skip,
                                      worker_pool* pool) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  if (const cudaError_t e = detail::check_dense("zenflow::host::adamw_dense", "", tensors, count, counts, hp);
      e != cudaSuccess) {
    return e;
  }
  return detail::host_adamw_dense(tensors, count, counts, hp, grad_scale, skip, pool);
}

/// Selective AdamW: the channels `rows.idx` of a channel matrix, with their fp32 state in
/// compact rows (`selected_rows`). One pass: read the channel's gradient, update the compact
/// master/m/v with count `rows.counts[r] + 1`, write the new working weights in place, advance
/// `rows.counts[r]`. Unlisted channels are not touched. A skipped step writes nothing (l1_mass
/// included).
///
/// @param weights  working weights (either layout), updated in place on the listed channels.
/// @param grads    gradients, same shape (either layout).
/// @param rows     the listed channels and their compact state (host memory).
/// @param hp       hyper-parameters.
/// @param scalars  the step's gradient scale and skip flag (host memory, nullable).
/// @param l1_mass  nullable: sum of |grad| over the listed channels (raw gradient, before
///                 grad_scale) is ADDED to *l1_mass (Zen-auto's "crit"); summed in a fixed
///                 order (deterministic).
/// @param pool     threads to use; nullptr runs on the calling thread.
template <class T>
[[nodiscard]] cudaError_t adamw_selective(channel_matrix<T> weights,
                                          channel_matrix<const T> grads,
                                          const selected_rows& rows,
                                          const adamw_hparams& hp,
                                          step_scalars scalars = {},
                                          float* l1_mass = nullptr,
                                          worker_pool* pool = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::adamw_selective";
  if (const cudaError_t e = detail::check_selective(fn, "rows.", weights, grads, rows.idx, rows.count,
                                                    rows.master, rows.m, rows.v, rows.counts, hp);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_indices_host(fn, rows.idx, rows.count, weights.channels);
      e != cudaSuccess) {
    return e;
  }
  return detail::host_adamw_selective(weights, grads, rows.idx, rows.count, rows.master, rows.m, rows.v,
                                      rows.counts, hp, scalars.grad_scale, scalars.skip, l1_mass, pool);
}

/// Selective AdamW on several matrices of one working type in one call: item i is
/// `adamw_selective(items[i].weights, items[i].grads, items[i].rows, hp_i, scalars, l1_masses[i])`
/// with hp_i = hp but lr float(hp.lr * items[i].lr_scale) and weight decay items[i].weight_decay,
/// bit for bit. Every item is validated before any is updated (an error names the item).
///
/// @param l1_masses nullable, else `count` nullable pointers: item i's mass as in adamw_selective.
template <class T>
[[nodiscard]] cudaError_t adamw_selective_batched(const adamw_selective_item<T>* items,
                                                  int count,
                                                  const adamw_hparams& hp,
                                                  step_scalars scalars = {},
                                                  float* const* l1_masses = nullptr,
                                                  worker_pool* pool = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::host::adamw_selective_batched";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  for (int i = 0; i < count; ++i) {
    const adamw_selective_item<T>& it = items[i];
    const std::string rows = "items[" + std::to_string(i) + "].rows.";
    if (const cudaError_t e = detail::check_selective(fn, rows, it.weights, it.grads, it.rows.idx,
                                                      it.rows.count, it.rows.master, it.rows.m, it.rows.v,
                                                      it.rows.counts, detail::item_hparams(hp, it));
        e != cudaSuccess) {
      return e;
    }
    if (const cudaError_t e = detail::check_indices_host(fn, it.rows.idx, it.rows.count, it.weights.channels);
        e != cudaSuccess) {
      return e;
    }
  }
  for (int i = 0; i < count; ++i) {
    const adamw_selective_item<T>& it = items[i];
    const selected_rows& r = it.rows;
    if (const cudaError_t e = detail::host_adamw_selective(
            it.weights, it.grads, r.idx, r.count, r.master, r.m, r.v, r.counts, detail::item_hparams(hp, it),
            scalars.grad_scale, scalars.skip, l1_masses != nullptr ? l1_masses[i] : nullptr, pool);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

} // namespace host

/// The blocks of `device::adamw_selective_batched`'s launch over `items` (host copies of the
/// descriptors it will read): writes each item's `block_begin` and returns the total. A
/// contiguous matrix takes one block per selected row, a strided one one block per 32 rows (each
/// block owns its rows whole, so that it can advance their counts itself). Host arithmetic only.
template <class T>
[[nodiscard]] std::int64_t adamw_selective_batch_blocks(adamw_selective_item<T>* items, int count) noexcept {
  std::int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    adamw_selective_item<T>& it = items[i];
    it.block_begin = blocks;
    const bool rows =
        it.weights.layout == channel_layout::contiguous && it.grads.layout == channel_layout::contiguous;
    blocks += rows ? it.rows.count : (it.rows.count + selective_batch_tile - 1) / selective_batch_tile;
  }
  return blocks;
}

ZF_NAMESPACE_END
