// A downstream program: includes the umbrella header, uses a few core pieces and checks them;
// with the JSON reader (ZENFLOW_WITH_JSON), also reads a DeepSpeed config.
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
  zenflow::config cfg;
  cfg.topk_ratio = 0.25;
  cfg.validate();
  if (cfg.topk(64) != 16) {
    std::printf("zenflow consumer: topk(64) at ratio 0.25 is %lld, not 16\n",
                static_cast<long long>(cfg.topk(64)));
    return 1;
  }
#if ZENFLOW_WITH_JSON
  const auto ds = zenflow::config::from_deepspeed_json_string(
      R"({"zero_optimization": {"zenflow": {"topk_ratio": 0.5, "update_interval": 3}}})");
  if (ds.topk_ratio != 0.5 || ds.update_interval != 3) {
    std::printf("zenflow consumer: the JSON reader read topk_ratio %f, update_interval %lld\n", ds.topk_ratio,
                static_cast<long long>(ds.update_interval));
    return 1;
  }
  const char* variant = "json";
#else
  const char* variant = "no json";
#endif
  std::printf("zenflow consumer ok (%s; zenflow %d.%d.%d, %d CUDA devices)\n", variant, ZENFLOW_VERSION_MAJOR,
              ZENFLOW_VERSION_MINOR, ZENFLOW_VERSION_PATCH, zenflow::device_count());
  return 0;
}
