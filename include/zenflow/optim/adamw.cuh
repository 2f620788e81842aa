/// @file
/// Device optimizer launchers: dense multi-tensor AdamW and selective-channel AdamW. Host twins
/// with the same arguments are in optim/adamw.hpp; both share math/adam.hpp, so they agree bit
/// for bit on weights, masters and moments. Dispatch in `detail/adamw_dispatch.cuh`; the channel
/// copies (gather/scatter) in `<zenflow/optim/channels.cuh>` (included here).
///
/// Every launcher: validates its arguments before launching (cudaErrorInvalidValue, message in
/// zenflow::last_error_message(), nothing written); is stream-ordered (no synchronisation, no
/// allocation, safe under CUDA graph capture); reads the per-step scalars (gradient scale, skip
/// flag) from device memory inside the kernels, so the caller never synchronises for them.
#pragma once

#include <cstdint>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/adam.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/channels.cuh>
#include <zenflow/optim/detail/adamw_dispatch.cuh>
#include <zenflow/optim/detail/checks.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN

namespace device {

/// Dense AdamW over `count` tensors in as few launches as the kernel-parameter space allows (48
/// tensors per launch; descriptors passed by value, no allocation, no copy), plus one launch that
/// advances the counts. Tensor t uses update count `d_counts[t] + 1`. 16-byte vector access for
/// every tensor whose pointers allow it (fp32 arrays 16-byte aligned, T arrays 4-element
/// aligned), a scalar path otherwise. A skipped step (`*d_skip != 0`) writes nothing.
///
/// @param tensors  host array of `count` descriptors (pointers: device memory); read during the
///                 call only.
/// @param d_counts device array of `count` int32 update counts, advanced unless skipped.
/// @param d_grad_scale device scalar (nullable: 1.0), multiplies every gradient.
/// @param d_skip   device flag (nullable: not skipped).
/// Deterministic (element-wise). Tensors must not overlap one another.
template <class T>
[[nodiscard]] cudaError_t adamw_dense(const adamw_tensor<T>* tensors,
                                      int count,
                                      std::int32_t* d_counts,
                                      const adamw_hparams& hp,
                                      const float* d_grad_scale,
                                      const std::uint32_t* d_skip,
                                      cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  if (const cudaError_t e =
          detail::check_dense("zenflow::device::adamw_dense", "d_", tensors, count, d_counts, hp);
      e != cudaSuccess) {
    return e;
  }
  return detail::optim::dispatch_adamw_dense(tensors, count, d_counts, hp, d_grad_scale, d_skip, stream);
}

/// Selective AdamW on the channels `rows.idx` of a matrix, their fp32 state in compact rows
/// (`selected_rows`, device memory: row r = channel rows.idx[r]). One fused pass reads each
/// selected channel's gradient once, updates master/m/v with count `rows.counts[r] + 1`, and
/// writes the new working weights in place; a second tiny launch advances `rows.counts`. Unlisted
/// channels are untouched. Contiguous layouts (both matrices) are the fast path (row blocks,
/// 16-byte access when rows are aligned and channel_len % 4 == 0); any strided matrix takes a
/// 32x32 tile path through shared memory. A skipped step writes nothing (l1_mass included).
///
/// @param rows     rows.idx: distinct channel indices in [0, channels) (sorted ascending: best
///                 locality), not checked (device memory): an index out of range is undefined.
/// @param scalars  the step's gradient scale and skip flag in device memory (nullable).
/// @param l1_mass  nullable: sum of |grad| over the selected channels (raw, before the scale)
///                 ADDED to *l1_mass (one float atomic per block: last bits may vary by run).
template <class T>
[[nodiscard]] cudaError_t adamw_selective(channel_matrix<T> weights,
                                          channel_matrix<const T> grads,
                                          const selected_rows& rows,
                                          const adamw_hparams& hp,
                                          step_scalars scalars = {},
                                          float* l1_mass = nullptr,
                                          cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  using namespace detail::optim;
  constexpr std::string_view fn = "zenflow::device::adamw_selective";
  const std::int64_t k = rows.count;
  if (const cudaError_t e = detail::check_selective(fn, "rows.", weights, grads, rows.idx, k, rows.master,
                                                    rows.m, rows.v, rows.counts, hp);
      e != cudaSuccess) {
    return e;
  }
  const std::int64_t L = weights.channel_len;
  const bool contiguous =
      weights.layout == channel_layout::contiguous && grads.layout == channel_layout::contiguous;
  if (!contiguous) {
    ZF_EXPECT_ARG((L + tile - 1) / tile <= 65535, fn, "channel_len",
                  "is too large for the strided path (> 2^21)");
  } else {
    ZF_EXPECT_ARG(k * row_split(L) <= max_blocks_per_launch, fn, "rows.count",
                  "times channel_len is too large");
  }
  return detail::optim::dispatch_adamw_selective(weights, grads, rows.idx, k, rows.master, rows.m, rows.v,
                                                 rows.counts, hp, scalars.grad_scale, scalars.skip, l1_mass,
                                                 stream);
}

/// Selective AdamW on `count` matrices of one working type in one launch (the engine's step: one
/// launch per working type however many matrices), the counts advanced in the same launch. Item i
/// is adamw_selective(items[i].weights, items[i].grads, items[i].rows, hp_i, scalars) bit for bit,
/// with hp_i = hp but lr float(hp.lr * lr_scale) and weight decay items[i].weight_decay (host
/// twin: host::adamw_selective_batched). A block owns whole rows: one row of a contiguous matrix
/// (16-byte access where aligned), 32 rows of a strided one. No Zen-auto mass here (the engine
/// sums it apart in a fixed order).
///
/// @param d_items  device array of `count` descriptors, their `block_begin` written by
///                 adamw_selective_batch_blocks() on the host copy they were uploaded from.
/// @param blocks   what adamw_selective_batch_blocks() returned.
/// The rows of different items must not overlap; an item's indices must be distinct (unchecked:
/// device memory).
template <class T>
[[nodiscard]] cudaError_t adamw_selective_batched(const adamw_selective_item<T>* d_items,
                                                  int count,
                                                  std::int64_t blocks,
                                                  const adamw_hparams& hp,
                                                  step_scalars scalars = {},
                                                  cudaStream_t stream = nullptr) {
  static_assert(is_working_type_v<T>, "zenflow: float, half or bfloat16");
  constexpr std::string_view fn = "zenflow::device::adamw_selective_batched";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(blocks >= 0, fn, "blocks", "must be >= 0");
  ZF_EXPECT_ARG(d_items != nullptr || count == 0, fn, "d_items", "must not be null");
  if (const cudaError_t e = detail::check_hparams(fn, hp); e != cudaSuccess) {
    return e;
  }
  return detail::optim::dispatch_adamw_selective_batched(d_items, count, blocks, hp, scalars.grad_scale,
                                                         scalars.skip, stream);
}

} // namespace device

ZF_NAMESPACE_END
