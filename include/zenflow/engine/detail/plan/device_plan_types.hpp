/// @file
/// What the device plan (device_plan.hpp) takes from the engine's step beside its parameters:
/// rows that enter a device set already in device memory (gathered by the caller), the inputs of
/// setup, and the hooks a step runs between the plan's phases.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/math/norms.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A matrix's rows that enter its device set, in device memory in ascending channel order:
/// master (fp32), m and v (the host moments' type M, widened as they are installed), one
/// channel of channel_len each, and the Adam step counts.
template <class M>
struct entering_rows {
  const float* master;
  const M* m;
  const M* v;
  const std::int32_t* counts;
};

/// `k` compact device rows of one parameter in host memory (a checkpoint's, to restore): master,
/// m and v (k x channel_len fp32 each), the Adam step counts and the ascending device set.
struct device_state_rows {
  std::int64_t k = 0;
  const float* master = nullptr;
  const float* m = nullptr;
  const float* v = nullptr;
  const std::int32_t* counts = nullptr;
  const std::int32_t* sel = nullptr;
};

/// What the plan takes from outside at setup: a step that completes some per-channel numbers
/// from rows this rank does not hold (the engine's data-parallel policy, detail/dp/) supplies
/// them; a single-rank step leaves it empty.
struct plan_inputs {
  /// Per parameter, nullable: the fp64 rescans of its non-finite scores (device memory, a double
  /// per channel, final when the step's after_norms() hook returns), which its squared norm and
  /// an sq_l2 selection then read instead of rescanning its gradient.
  std::vector<const double*> score_rescans;
  /// A matrix whose rows here are a range of a larger matrix (a sharded engine's, detail/dp/
  /// sharded.hpp): the whole matrix's scores and fp64 rescans of its non-finite scores (device
  /// memory, complete when after_norms() / after_importance() return), its channels, the range's
  /// first channel, and its top-k. The squared totals and the selection read these instead of the
  /// range's own; the selection keeps the channels of the top-k in the range, as range indices.
  struct whole_matrix {
    const float* scores = nullptr;
    const double* rescans = nullptr;
    std::int64_t channels = 0; ///< 0: the rows here are the whole matrix (no entry)
    std::int64_t first = 0;
    std::int64_t k = 0;
  };
  /// Per parameter (empty, or channels 0: none).
  std::vector<whole_matrix> whole;
};

/// What a step's scalars (coef_t, the skip flag) are computed from beside the gradients: the
/// loss scale and clipping threshold (the config's or step_options'), and step_options' loss scale
/// and found-inf in the backend's memory (nullable), read and written where the scalars are.
struct step_scalar_inputs {
  float loss_scale = 1.0f;
  float max_norm = 0.0f;
  const float* loss_scale_at = nullptr;
  float* found_inf = nullptr;
};

/// The step's hooks: a no-op at each point where a step completes the plan's numbers between two
/// of its phases (prologue(), select_all()). A hook type has these two members.
struct no_step_hooks {
  /// After the scores and NaN/Inf flags of every gradient, before the totals and the record read them.
  void after_norms(cudaStream_t) {}
  /// After a selection's importance, before its top-k reads it.
  void after_importance(channel_norm, cudaStream_t) {}
};

} // namespace detail
ZF_NAMESPACE_END
