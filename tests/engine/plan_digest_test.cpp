// 300-step runs of the engine in several configurations, reduced to one XXH3-64 digest each of
// everything the optimizer holds (working weights, fp32 masters, moments, counts, device sets).
//
// The digests in golden/plan_digests.txt were written by this test on the engine as it was before
// the device plan was written once (issue 10); the test holds the rewrite to the same bits. To
// write them again after a change that is meant to change results (say why in the commit):
//   ZF_WRITE_GOLDEN=tests/engine/golden/plan_digests.txt build/cpu/tests/engine/zf_engine_plan_tests
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

} // namespace
