/// @file
/// zenflow::gradient_release: who orders the user's next writes of the gradient buffers after the
/// engine's packs of a step have read them (docs/engine.md, "The pack stream and your gradients").
#pragma once

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// The packs of a step read the host-set channels of the user's gradient buffers on the engine's
/// pack stream, after the step's stream has produced them; the user's next backward overwrites
/// them. Who makes that backward wait for the packs:
enum class gradient_release {
  /// step() makes its stream wait for the step's packs before it returns (the default: a loop
  /// written for any engine stays correct). The packs still overlap the device update of the
  /// step, and with grad_ready() the rest of the backward.
  at_step,
  /// The caller does, each step: `release_gradients(stream)` after step() and before the next
  /// backward writes a gradient (say, after the next forward), so that the next forward also runs
  /// beside the packs. step() and grad_ready() refuse to run while a step's packs are unreleased.
  by_caller,
};

ZF_NAMESPACE_END
