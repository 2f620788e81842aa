// 300-step runs of the engine in several configurations, reduced to one XXH3-64 digest each of
// everything the optimizer holds (working weights, fp32 masters, moments, counts, device sets).
//
// The digests in golden/plan_digests.txt were written by this test on the engine as it was before
// the device plan was written once (issue 10); the test holds the rewrite to the same bits. To
// write them again after a change that is meant to change results (say why in the commit):
//   ZF_WRITE_GOLDEN=tests/engine/golden/plan_digests.txt build/cpu/tests/engine/zf_engine_plan_tests
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plan_scenarios.hpp"

namespace {

using zf_engine_test::digest_run;
using zf_engine_test::plan_scenarios;

std::map<std::string, std::string> read_golden(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

TEST(engine_plan, three_hundred_steps_match_the_digests_of_the_engine_before_the_rewrite) {
  const char* write = std::getenv("ZF_WRITE_GOLDEN");
  const auto golden = read_golden(ZF_ENGINE_GOLDEN_DIR "/plan_digests.txt");
  std::ostringstream written;
  written << "# zf_engine_plan_tests: scenario digest (XXH3-64 of weights, masters, moments, counts, sets)\n";
  for (const auto& sc : plan_scenarios()) {
    const std::string d = digest_run<zf_engine_test::host_plan_driver>(sc).state_digest;
    written << sc.name << ' ' << d << '\n';
    if (write == nullptr) {
      const auto it = golden.find(sc.name);
      ASSERT_NE(it, golden.end()) << "no golden digest for '" << sc.name << "'";
      EXPECT_EQ(d, it->second) << sc.name;
    }
  }
  if (write != nullptr) {
    std::ofstream(write) << written.str();
    GTEST_SKIP() << "wrote " << write;
  }
}

/// The emulated backend runs the same plan with the engine's real concurrency (consumer thread,
/// uploads on their own stream, gradients written in stream order, step() returning with its work
/// in flight): the same bits as the host backend, and the same counters.
TEST(engine_plan, emulated_backend_gives_the_host_backend_bits_and_counters) {
  zf_engine_test::emulated_driver_timing() = {};
  for (const auto& sc : plan_scenarios()) {
    const auto host = digest_run<zf_engine_test::host_plan_driver>(sc);
    const auto emulated = digest_run<zf_engine_test::emulated_plan_driver>(sc);
    EXPECT_EQ(emulated.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(emulated.counters_digest, host.counters_digest) << sc.name;
  }
}

/// Random delays: one device operation in four (copies, kernels) starts up to 300 us late, on
/// every stream, and one host wait in two (the consumer's, the host job's, the training thread's)
/// returns up to 300 us late, with a different seed per round; results never depend on timing.
TEST(engine_plan, emulated_backend_with_random_delays_gives_the_same_bits) {
  for (std::uint64_t seed : {1u, 2u}) {
    zf_engine_test::emulated_driver_timing() = {};
    zf_engine_test::emulated_driver_timing().max_jitter = std::chrono::microseconds(300);
    zf_engine_test::emulated_driver_timing().max_host_jitter = std::chrono::microseconds(300);
    zf_engine_test::emulated_driver_timing().jitter_seed = seed;
    for (auto sc : plan_scenarios()) {
      sc.steps = 60;
      const auto host = digest_run<zf_engine_test::host_plan_driver>(sc);
      const auto emulated = digest_run<zf_engine_test::emulated_plan_driver>(sc);
      EXPECT_EQ(emulated.state_digest, host.state_digest) << sc.name << " seed " << seed;
      EXPECT_EQ(emulated.counters_digest, host.counters_digest) << sc.name << " seed " << seed;
    }
  }
  zf_engine_test::emulated_driver_timing() = {};
}

/// The host side over several threads (the consumer's accumulation over its own pool, the window
/// job over the engine's): slots large enough to be split into chunks, the same bits for 1 and 4
/// threads, on both backends.
TEST(engine_plan, host_threads_do_not_change_the_bits) {
  zf_engine_test::emulated_driver_timing() = {};
  zf_engine_test::plan_scenario sc;
  sc.name = "wide matrices, slots split over threads, bf16";
  sc.cfg = zf_engine_test::small_config();
  sc.cfg.ring_slot_bytes = 1 << 20;
  sc.cfg.ring_slots = 8;
  sc.cfg.gradient_clipping = 0.5f;
  sc.type = zenflow::dtype::bf16;
  sc.announce = true;
  sc.bad_steps = {9};
  sc.steps = 40;
  sc.shapes = {{true, 600, 512}, {false, 1, 77}, {true, 300, 1000}};
  for (const bool overlap : {true, false}) {
    sc.cfg.overlap_step = overlap;
    sc.cfg.host_threads = 1;
    const auto one = digest_run<zf_engine_test::host_plan_driver>(sc);
    sc.cfg.host_threads = 4;
    const auto host4 = digest_run<zf_engine_test::host_plan_driver>(sc);
    const auto emulated4 = digest_run<zf_engine_test::emulated_plan_driver>(sc);
    EXPECT_EQ(host4.state_digest, one.state_digest) << "overlap " << overlap;
    EXPECT_EQ(emulated4.state_digest, one.state_digest) << "overlap " << overlap;
    EXPECT_EQ(host4.counters_digest, one.counters_digest) << "overlap " << overlap;
    EXPECT_EQ(emulated4.counters_digest, one.counters_digest) << "overlap " << overlap;
  }
}

} // namespace
