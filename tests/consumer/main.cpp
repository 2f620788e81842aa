// A downstream program: includes the umbrella header, uses a few core pieces and checks them.
#include <cstdio>

#include <zenflow/zenflow.hpp>

int main() {
  const auto b = zenflow::from_float<zenflow::bfloat16>(1.00390625f); // halfway between two bf16 codes
  zenflow::pinned_buffer<float> buf(8);
  buf[7] = zenflow::to_float(b);
  if (buf[7] != 1.0f) { // ties go to the even code, 1.0
    std::printf("zenflow consumer: wrong rounding %f\n", static_cast<double>(buf[7]));
    return 1;
  }
  std::printf("zenflow consumer ok (zenflow %d.%d.%d, %d CUDA devices)\n", ZENFLOW_VERSION_MAJOR,
              ZENFLOW_VERSION_MINOR, ZENFLOW_VERSION_PATCH, zenflow::device_count());
  return 0;
}
