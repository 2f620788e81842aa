// The pipeline benchmark's readings of the emulated device's timeline (pipeline.cpp): the D2H
// tail after a backward, and the device's own kernel time between a backward and the next forward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <zenflow/core/emulated_device.hpp>

#include "pipeline_report.hpp"

namespace zf_bench_pipeline {

/// Median over the traced steps of (end of the step's last D2H copy) - (end of its backward), in
/// ms. A step's backward ends with the last "backward" op before a "forward"; its D2H copies are
/// those that start before the next step's forward has ended (no gradient of the next step exists
/// before then).
inline double d2h_tail_ms(const std::vector<zenflow::emulated_op>& ops, double forward_ns) {
  using kind = zenflow::emulated_op::kind;
  std::vector<std::int64_t> backward_end;
  std::int64_t last_backward = -1;
  std::vector<const zenflow::emulated_op*> sorted;
  for (const auto& op : ops) {
    sorted.push_back(&op);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  for (const auto* op : sorted) {
    if (op->what != kind::compute) {
      continue;
    }
    if (op->name == "forward" && last_backward >= 0) {
      backward_end.push_back(last_backward);
      last_backward = -1;
    } else if (op->name == "backward") {
      last_backward = std::max(last_backward, op->end_ns);
    }
  }
  if (last_backward >= 0) {
    backward_end.push_back(last_backward);
  }
  std::vector<double> tails;
  for (const std::int64_t e : backward_end) {
    std::int64_t last_copy = e;
    for (const auto* op : sorted) {
      if (op->what == kind::copy_d2h && op->start_ns < e + static_cast<std::int64_t>(forward_ns) &&
          op->end_ns > e - static_cast<std::int64_t>(forward_ns)) {
        last_copy = std::max(last_copy, op->end_ns);
      }
    }
    tails.push_back(static_cast<double>(last_copy - e) * 1e-6);
  }
  return median(tails);
}

/// The emulated device's own kernel time on the path to the next step, in ms (median over the
/// traced steps): the union of every kernel's run (the device's update and prologue on the
/// training stream, the packs, a close's scatter: host code on this machine, microseconds on a
/// GPU) between the end of a step's backward and the start of the next step's forward. `train`:
/// the training stream's kernels only. A step cannot be shorter than C plus this on this machine.
struct kernel_time {
  double all_ms = 0, train_ms = 0;
};
inline kernel_time kernel_ms_after_backward(const std::vector<zenflow::emulated_op>& ops) {
  using kind = zenflow::emulated_op::kind;
  std::vector<const zenflow::emulated_op*> forwards, backwards, kernels;
  int train = -1;
  for (const auto& op : ops) {
    if (op.what == kind::compute) {
      (op.name == "forward" ? forwards : backwards).push_back(&op);
      train = op.stream;
    } else if (op.what == kind::kernel) {
      kernels.push_back(&op);
    }
  }
  auto by_start = [](auto* a, auto* b) { return a->start_ns < b->start_ns; };
  std::sort(forwards.begin(), forwards.end(), by_start);
  std::sort(kernels.begin(), kernels.end(), by_start);
  // Length of the union of the kernels' runs clipped to [a, b) (on `stream` only, if >= 0).
  auto busy = [&](std::int64_t a, std::int64_t b, int stream) {
    std::int64_t total = 0, cur0 = 0, cur1 = -1;
    for (const auto* k : kernels) {
      if ((stream >= 0 && k->stream != stream) || k->end_ns <= a || k->start_ns >= b) {
        continue;
      }
      const std::int64_t x0 = std::max(a, k->start_ns), x1 = std::min(b, k->end_ns);
      if (x0 > cur1) {
        total += cur1 > cur0 ? cur1 - cur0 : 0;
        cur0 = x0;
        cur1 = x1;
      } else {
        cur1 = std::max(cur1, x1);
      }
    }
    return total + (cur1 > cur0 ? cur1 - cur0 : 0);
  };
  std::vector<double> all, on_train;
  for (std::size_t i = 0; i + 1 < forwards.size(); ++i) {
    const std::int64_t a = forwards[i]->start_ns, b = forwards[i + 1]->start_ns;
    std::int64_t bwd_end = -1;
    for (const auto* op : backwards) {
      if (op->start_ns >= a && op->start_ns < b) {
        bwd_end = std::max(bwd_end, op->end_ns);
      }
    }
    if (bwd_end < 0 || bwd_end >= b) {
      continue;
    }
    all.push_back(static_cast<double>(busy(bwd_end, b, -1)) * 1e-6);
    on_train.push_back(static_cast<double>(busy(bwd_end, b, train)) * 1e-6);
  }
  return {median(all), median(on_train)};
}

} // namespace zf_bench_pipeline
