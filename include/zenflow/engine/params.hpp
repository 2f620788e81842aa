/// @file
/// The public types of parameter registration: `param_id` (what `engine::add_matrix` /
/// `add_vector` return), `param_options` (a parameter group of one, given at registration) and
/// `param_settings` (what a parameter resolved its options to). Public API, so in a public header
/// of their own; the engine's registry (detail/registry/params.hpp) includes this one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// Handle of a registered parameter (its registration order).
struct param_id {
  std::int32_t index = -1;
  friend constexpr bool operator==(param_id, param_id) = default;
};

/// A sharded engine's matrix (engine<Backend, sharded<Comm>>, ZeRO-3): the registered channels
/// are channels [first, first + channels) of a matrix of `total` channels. The ranks' shards of a
/// matrix must tile [0, total) in rank order (comm/shard.hpp's shard_channels computes them).
struct shard_range {
  std::int64_t first = 0;
  std::int64_t total = 0;
};

/// Per-parameter options of `engine::add_matrix` / `add_vector` (a parameter group of one).
/// A field left unset is taken from the first of the config's `param_groups` that matches
/// `name`, else from the defaults (lr_scale 1, the config's adam.weight_decay). The common
/// recipe, no weight decay on biases and norms: `add_vector(b, gb, n, {.weight_decay = 0.0f})`.
struct param_options {
  /// Multiplies the learning rate of every update of this parameter (device, host window,
  /// warm-up, baselines): lr_used = float(lr * lr_scale). Finite and >= 0.
  std::optional<float> lr_scale = std::nullopt;
  /// AdamW weight decay of this parameter (L2 coefficient with decoupled = false). Finite, >= 0.
  std::optional<float> weight_decay = std::nullopt;
  /// Name matched against the config's `param_groups` (and shown in errors).
  std::string name = {}; // (initialisers on every field: `{.weight_decay = 0}` is -Wextra clean)
  /// A sharded engine's matrix only: which channels of the whole matrix these are (unset: all of
  /// them, which only one rank may register).
  std::optional<shard_range> shard = std::nullopt;
};

/// What a registered parameter resolved its options to (`engine::settings`).
struct param_settings {
  std::string name;
  float lr_scale = 1.0f;
  float weight_decay = 0.0f;
};

ZF_NAMESPACE_END
