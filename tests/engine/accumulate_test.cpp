// accumulate = device on the host backend and the emulated device (accumulate_cases.hpp; the CUDA
// backend runs the same bodies in engine_gpu_test.cu), and its refusal with data parallel.
#include <string>

#include <gtest/gtest.h>

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

INSTANTIATE_TEST_SUITE_P(cases,
                         engine_accumulate_reference,
                         ::testing::ValuesIn(zf_engine_test::device_accumulation_reference_cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

} // namespace
