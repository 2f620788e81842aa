/// @file
/// The engine's configuration: a plain struct, and a reader for DeepSpeed JSON configs
/// (`zero_optimization.zenflow`, `optimizer`, `gradient_clipping`, `fp16`/`bf16`) that reads an
/// existing DeepSpeed file as DeepSpeed reads it (its keys, ranges and defaults), with zenflow's
/// own keys in a top-level `zenflow_ext` block that DeepSpeed ignores.
///
/// Every key, its default, its range and what is rejected: docs/config.md. Invalid values throw
/// `zenflow::invalid_argument` whose message names the key by its JSON path, e.g.
/// `zero_optimization.zenflow.topk_ratio`; nothing is constructed on error. What the reader
/// ignores (an unknown top-level key, a misspelt block name) is reported through the log hook
/// (<zenflow/core/log.hpp>) with the nearest known key, or rejected with `strict`.
///
/// The JSON reader and writer need nlohmann-json: link `zenflow::json` (or have
/// <nlohmann/json.hpp> on the include path). Without it `ZENFLOW_WITH_JSON` is 0, the JSON
/// members below are not declared, and the rest of zenflow does not depend on nlohmann-json.
/// Define ZENFLOW_WITH_JSON the same way in every translation unit of a program.
#pragma once

// The declarations, then the definitions: those that need no JSON, describe(), and the JSON
// reader and writer when ZENFLOW_WITH_JSON is 1 (config_decl.hpp sets its default). Each part
// includes what it needs below it and none includes this header.
#include <zenflow/engine/detail/config/config_decl.hpp>
#include <zenflow/engine/detail/config/config_describe.hpp>
#include <zenflow/engine/detail/config/config_impl.hpp>
#if ZENFLOW_WITH_JSON
#  include <zenflow/engine/detail/config/config_json.hpp>
#  include <zenflow/engine/detail/config/config_json_members.hpp>
#endif
