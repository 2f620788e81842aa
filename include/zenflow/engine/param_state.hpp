/// @file
/// zenflow::param_state: the full optimizer state of one parameter, as engine::state() returns it.
#pragma once

#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// The full optimizer state of one parameter, gathered from wherever it lives (tests, checkpoints).
struct param_state {
  std::vector<float> master, m, v;  ///< channels x channel_len, channel-major
  std::vector<std::int32_t> counts; ///< one per channel (one for a vector)
};

ZF_NAMESPACE_END
