/// @file
/// The planner (issue 35): from a model's parameter shapes, the hardware (host memory and PCIe
/// bandwidths, the device's step time, the memories) and a configuration, what ZenFlow holds on
/// the host and the device per parameter, what it moves per step, the pipeline bound, whether the
/// run is stall-free, and the smallest change that makes it so (`suggest`).
///
/// The byte counts follow the engine's own allocations (engine::initialize, device_plan::setup,
/// detail::resolve_d2h_slots is called as is); the bound is the pipeline benchmark's
/// (`pipeline_bound`, which bench/engine/pipeline_report.hpp calls: one implementation).
/// Accumulation of the window's gradient sum on the device (`plan_accumulation::device`,
/// config::accumulate: the fp32 sum goes down once per window) is the engine's on one rank, and
/// 8-bit host moments (`plan_moments::int8`) are the engine's. Modelled but not implemented by the
/// engine yet, and named in `plan_result::not_implemented` when used: device accumulation with
/// data parallel (`gpus` > 1 or ZeRO-3) and an int8 block other than the engine's 64.
/// docs/planning.md.
///
///   zenflow::plan_model m = zenflow::plan_model::preset("7b");
///   zenflow::plan_hardware hw{.host_bytes_per_s = 300e9, .pcie_bytes_per_s = 25e9, .step_s = 1.5};
///   zenflow::plan_result p = zenflow::plan(m, hw, {});        // S = 4, r = 0.1, fp32 moments
///   zenflow::plan_suggestion s = zenflow::suggest(m, hw, {}); // the smallest stall-free change
#pragma once

// The declarations, then the formulas (which include them).
#include <zenflow/engine/detail/planner/plan_decl.hpp>
#include <zenflow/engine/detail/planner/plan_impl.hpp>
