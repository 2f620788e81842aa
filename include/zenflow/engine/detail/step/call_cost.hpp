/// @file
/// What one engine call spends (`call_cost`: stalls, bytes each way, bytes sent to other ranks)
/// and the timer of a stall (`timed_stall`), threaded through every part of a step that can block
/// or copy. Training thread only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/trace/pipeline_trace.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// What one engine call spent: host time blocked (stall) and bytes copied each way. A value per
/// call (step, flush), threaded through the functions it calls; grad_ready()'s is carried into
/// the step it belongs to.
struct call_cost {
  double stall_s = 0.0;
  std::uint64_t d2h = 0;
  std::uint64_t h2d = 0;
  std::uint64_t comm = 0;          ///< bytes this rank put into collectives (data parallel)
  pipeline_trace* trace = nullptr; ///< the engine's trace while it records (stalls with their cause)
};

/// Runs `f` and counts its wall time as a stall of `cost`, traced with its `cause`.
template <class F>
void timed_stall(call_cost& cost, const char* cause, F&& f) {
  const std::int64_t t0 = pipeline_trace::now();
  std::forward<F>(f)();
  const std::int64_t t1 = pipeline_trace::now();
  // A quotient, not * 1e-9: nothing for a compiler to contract (scripts/check-fp-contract).
  cost.stall_s += static_cast<double>(t1 - t0) / 1e9;
  if (cost.trace != nullptr) {
    cost.trace->span(trace_track::training, std::string("stall: ") + cause, "stall", t0, t1);
  }
}

} // namespace detail
ZF_NAMESPACE_END
