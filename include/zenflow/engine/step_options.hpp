/// @file
/// `step_options`: what one `engine::step()` takes beyond its learning rate, for a training loop
/// whose loss scale, clipping threshold or set of parameters with a gradient changes from step to
/// step (a dynamic loss scaler, `torch.nn.utils.clip_grad_norm_`, frozen or unused branches). The
/// defaults are the config's, and every parameter has a gradient.
#pragma once

#include <optional>
#include <span>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/params.hpp>

ZF_NAMESPACE_BEGIN

/// Per-step inputs of `engine::step()` (docs/engine.md, "Per-step inputs").
struct step_options {
  /// This step's loss scale: one float that the step reads where it computes its scalars, on the
  /// step's stream, without a host wait (a dynamic scaler's scale, e.g. torch.amp.GradScaler's
  /// tensor). Device memory on the CUDA backend, host memory on the host and emulated backends;
  /// valid until the step's stream has passed step(). nullptr: the config's `loss_scale`. A value
  /// that is not finite and > 0 skips the step, as a NaN/Inf gradient does.
  const float* loss_scale = nullptr;
  /// Found-inf, in and out: one float in the memory of `loss_scale`. Non-zero on entry skips the
  /// step (a scaler that already found an Inf); written on the step's stream with 1.0f when the
  /// step was skipped (for that reason or a NaN/Inf gradient), 0.0f when not. nullptr: neither.
  float* found_inf = nullptr;
  /// This step's clipping threshold on the global L2 norm of the unscaled gradients (one
  /// coefficient for the device and host parts, as `config::gradient_clipping`); unset: the
  /// config's. 0 or +Inf: no clipping this step.
  std::optional<float> max_norm = std::nullopt;
  /// The parameters without a gradient this step (their gradient buffers must hold zeros). Their
  /// device-resident state is not updated (weights, masters, moments and counts stay, as
  /// torch.optim.AdamW skips a parameter whose .grad is None); their host-set channels add the
  /// zero gradient to the open window, and a window in none of whose steps a parameter had a
  /// gradient does not update it on the host (a synchronous window, offload_sync and the warm-up:
  /// that step). One rank only (a data-parallel engine refuses a non-empty list).
  std::span<const param_id> no_grad = {};
};

ZF_NAMESPACE_END
