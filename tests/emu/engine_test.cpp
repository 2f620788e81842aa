// The engine's CUDA plan on the emulated device (engine/emulated_cuda_backend.hpp): the kernels of
// cuda_backend.cuh, their own source, run by the kernel emulator on the device's streams. Every
// reference case of the engine suite (reference_cases.hpp: selections, windows, NaN/Inf steps,
// host jobs and weights against the float64 reference) on it, and each case's weights after every
// step bit-equal to the host backend's; shortened 300-step scenarios' state and counters digests
// equal to the host backend's; the owner partition (ZeRO-2) and the sharded engine (ZeRO-3) over
// the emulated device communicator at 1 and 2 ranks, every rank equal to a one-rank engine on the
// mean gradient.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/engine/emulated_cuda_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "engine/engine_cases.hpp"
#include "engine/plan_scenarios.hpp"
#include "engine/reference_cases.hpp"

#ifndef XXH_INLINE_ALL
#  define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace {

template <class T>
using emulated_cuda_driver = zf_engine_test::emulated_driver_with<T, zenflow::emulated_cuda_backend>;
template <class T>
using emulated_cuda_plan_driver =
    zf_engine_test::emulated_plan_driver_with<T, zenflow::emulated_cuda_backend>;

/// The model's weights after every step (and after the flush), as digests, of the last run.
std::vector<std::uint64_t>& weights_log() {
  static std::vector<std::uint64_t> log;
  return log;
}

/// `Base` with the weights digested after each step and flush (they are current then).
template <template <class> class Base>
struct recording {
  template <class T>
  struct driver : Base<T> {
    using base = Base<T>;
    using base::base;
    using engine_type = typename base::engine_type;
    void note() {
      base::pull();
      XXH64_state_t* h = XXH64_createState();
      XXH64_reset(h, 0);
      for (const auto& w : this->m.w) {
        XXH64_update(h, w.data(), w.size() * sizeof(T));
      }
      weights_log().push_back(XXH64_digest(h));
      XXH64_freeState(h);
    }
    zenflow::step_report step(engine_type& eng, float lr) {
      const auto rep = base::step(eng, lr);
      note();
      return rep;
    }
    void flush(engine_type& eng) {
      base::flush(eng);
      note();
    }
  };
};

/// Under ThreadSanitizer or AddressSanitizer (some 50 times slower) a sample of the cases runs.
constexpr bool sanitized = ZF_TSAN || ZF_ASAN;
bool sampled_case(const std::string& name) {
  const auto names = zf_engine_test::reference_case_names();
  const auto at = std::find(names.begin(), names.end(), name) - names.begin();
  return !sanitized || at % 6 == 0;
}

class engine_on_emulated_cuda : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    if (!sampled_case(GetParam())) {
      GTEST_SKIP() << "a sample of the cases runs under a sanitizer";
    }
    zenflow::emu::clear_reports();
  }
  void TearDown() override {
    for (const auto& r : zenflow::emu::reports()) {
      ADD_FAILURE() << r;
    }
  }
};

TEST_P(engine_on_emulated_cuda, reference_case_bit_equal_to_the_host_backend) {
  weights_log().clear();
  zf_engine_test::run_reference_case<recording<zf_engine_test::host_driver>::driver>(GetParam());
  const auto host = weights_log();
  weights_log().clear();
  zf_engine_test::run_reference_case<recording<emulated_cuda_driver>::driver>(GetParam());
  const auto& emulated = weights_log();
  ASSERT_GT(host.size(), 1u);
  ASSERT_EQ(emulated.size(), host.size());
  for (std::size_t t = 0; t < host.size(); ++t) {
    ASSERT_EQ(emulated[t], host[t]) << "the weights differ from the host backend's after step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(cases,
                         engine_on_emulated_cuda,
                         ::testing::ValuesIn(zf_engine_test::reference_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(engine_on_emulated_cuda_baselines, equal_offload_sync_gpu_adamw_and_dense_adamw_bit_for_bit) {
  if (sanitized) {
    GTEST_SKIP() << "not under a sanitizer (the reference cases' sample covers the same kernels)";
  }
  zenflow::emu::clear_reports();
  zf_engine_test::run_baseline_cases<emulated_cuda_driver>();
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

// The long scenarios (plan_scenarios.hpp), shortened: the optimizer state's and the counters'
// digests of the host backend.
TEST(engine_on_emulated_cuda_scenarios, state_and_counters_digests_equal_the_host_backends) {
  int i = 0;
  for (auto sc : zf_engine_test::plan_scenarios()) {
    if (sanitized && i++ % 4 != 1) {
      continue; // under a sanitizer: two of them
    }
    sc.steps = 30;
    sc.bad_steps.erase(
        std::remove_if(sc.bad_steps.begin(), sc.bad_steps.end(), [](int b) { return b >= 30; }),
        sc.bad_steps.end());
    sc.bad_steps.push_back(13);
    const auto host = zf_engine_test::digest_run<zf_engine_test::host_plan_driver>(sc);
    const auto emulated = zf_engine_test::digest_run<emulated_cuda_plan_driver>(sc);
    EXPECT_EQ(emulated.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(emulated.counters_digest, host.counters_digest) << sc.name;
  }
}

} // namespace
