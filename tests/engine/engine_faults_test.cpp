// Injected device faults on the emulated backend: the engine's threads (the training thread, the
// ring's consumer, the host job and its uploads) meet a device error at some point of a run; it
// must surface as an exception from a later step(), flush() or state(), never as a hang, and the
// engine must still be destroyed cleanly. Run under ThreadSanitizer in CI (cpu label).
#include <cstdint>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>

#include "plan_scenarios.hpp"

namespace {

using zf_engine_test::emulated_driver_timing;
using zf_engine_test::emulated_plan_driver;
using zf_engine_test::model;

/// Runs scenario `sc` on the emulated backend with the device failing at its `fail_at`-th
/// operation. Returns the message of the error the engine surfaced ("" if none).
std::string run_with_fault(const zf_engine_test::plan_scenario& sc, std::uint64_t fail_at) {
  emulated_driver_timing() = {};
  emulated_driver_timing().fail_at_op = fail_at;
  emulated_driver_timing().max_jitter = std::chrono::microseconds(50);
  emulated_driver_timing().max_host_jitter = std::chrono::microseconds(50);
  std::string error;
  {
    model<float> m(zf_engine_test::kPlanShapes, 0xfa17u + fail_at);
    emulated_plan_driver<float> d(m);
    const auto owned = d.make_engine(sc.cfg);
    auto& eng = *owned;
    std::vector<zenflow::param_id> ids;
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      ids.push_back(d.add(eng, p, zenflow::channel_layout::contiguous));
    }
    try {
      d.initialize(eng);
      for (int t = 0; t < sc.steps; ++t) {
        m.next_grads();
        d.publish_grads();
        (void)d.step(eng, sc.cfg.adam.lr);
      }
      d.finish(eng);
      for (const auto id : ids) {
        (void)d.state(eng, id);
      }
    } catch (const zenflow::cuda_error& e) {
      error = e.what();
    }
    // The engine (and then the device) is destroyed here, with the device's error sticky: the
    // destructors must return.
  }
  emulated_driver_timing() = {};
  return error;
}

TEST(engine_faults, a_device_fault_surfaces_as_an_error_never_a_hang) {
  int job_errors = 0;
  int consumer_errors = 0;
  for (const auto& sc : zf_engine_test::plan_scenarios()) {
    if (sc.type != zenflow::dtype::f32) {
      continue; // the float scenarios: overlap with a pending job, clipping, grad_ready, offload_sync
    }
    auto short_run = sc;
    short_run.steps = 40;
    for (const std::uint64_t fail_at : {1u, 7u, 60u, 400u}) {
      SCOPED_TRACE(sc.name + ", fault at device operation " + std::to_string(fail_at));
      const std::string error = run_with_fault(short_run, fail_at);
      EXPECT_NE(error.find("injected fault"), std::string::npos)
          << "no error surfaced, or another one: " << error;
      // Met on another thread, it says where: the host job's window and steps, or the consumer's step.
      if (error.find("host job") != std::string::npos) {
        EXPECT_NE(error.find("of window "), std::string::npos) << error;
        EXPECT_NE(error.find("(steps "), std::string::npos) << error;
        ++job_errors;
      } else if (error.find("consumer") != std::string::npos) {
        EXPECT_NE(error.find("after a slot of step "), std::string::npos) << error;
        ++consumer_errors;
      }
    }
  }
  // Which thread meets the fault first depends on timing; say what these runs exercised.
  std::printf("faults surfaced through: the host job %d time(s), the consumer %d time(s)\n", job_errors,
              consumer_errors);
}

} // namespace
