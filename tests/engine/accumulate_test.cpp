// accumulate = device on the host backend and the emulated device (accumulate_cases.hpp; the CUDA
// backend runs the same bodies in engine_gpu_test.cu), and its refusal with data parallel.
#include <string>

#include <gtest/gtest.h>

#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "accumulate_cases.hpp"
#include "engine_cases.hpp"

namespace {

TEST(engine_accumulate_device, equals_host_accumulation_bit_for_bit_host) {
  zf_engine_test::run_device_accumulation_cases<zf_engine_test::host_driver>();
}

TEST(engine_accumulate_device, equals_host_accumulation_bit_for_bit_emulated) {
  zf_engine_test::run_device_accumulation_cases<zf_engine_test::emulated_driver>(2);
}

// The float64 reference's bounds with the sums on the device: NaN steps (one at a pending
// selection), a window whose first good step overwrites the last window's sum, Zen-auto and the
// trigger, snr scaling, bf16 host moments with the chunk-ring upload.
class engine_accumulate_reference : public ::testing::TestWithParam<std::string> {};

TEST_P(engine_accumulate_reference, host_backend) {
  zf_engine_test::run_reference_case_accumulating_on_device<zf_engine_test::host_driver>(GetParam());
}

TEST_P(engine_accumulate_reference, emulated_backend) {
  zf_engine_test::run_reference_case_accumulating_on_device<zf_engine_test::emulated_driver>(GetParam());
}

// Data parallel accumulates on the host: "device" is refused at initialize(), naming the key,
// before anything changed (the engine stays unintialized, the weights as they were); the same
// configuration runs on one rank.
TEST(engine_accumulate_device, data_parallel_refuses_it_at_initialize_and_changes_nothing) {
  using zf_engine_test::kShapes;
  zf_engine_test::model<float> m(kShapes, zf_test::base_seed() + 63);
  const auto w0 = m.w;
  auto cfg = zf_engine_test::small_config();
  cfg.accumulate = zenflow::accumulation_site::device;
  zenflow::engine<zenflow::host_backend, zenflow::local_communicator> dp(cfg);
  zenflow::engine<zenflow::host_backend> one(cfg);
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    const auto& sh = kShapes[p];
    if (sh.matrix) {
      (void)dp.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len);
      (void)one.add_matrix(m.w[p].data(), m.g[p].data(), sh.channels, sh.len);
    } else {
      (void)dp.add_vector(m.w[p].data(), m.g[p].data(), sh.len);
      (void)one.add_vector(m.w[p].data(), m.g[p].data(), sh.len);
    }
  }
  zf_engine_test::expect_invalid([&] { dp.initialize(); }, "'accumulate'");
  EXPECT_FALSE(dp.initialized());
  EXPECT_EQ(m.w, w0);
  EXPECT_NO_THROW(one.initialize());
  EXPECT_GT(one.stats().memory.device_window_sum, 0u);
}

INSTANTIATE_TEST_SUITE_P(cases,
                         engine_accumulate_reference,
                         ::testing::ValuesIn(zf_engine_test::device_accumulation_reference_cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

} // namespace
