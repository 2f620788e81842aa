// Golden vectors exported from torch.optim.AdamW / torch.optim.Adam by
// scripts/export_golden_adamw.py (torch is not needed to run this test). zenflow's fp32 AdamW
// must stay within a few fp32 ulps of torch's fp32 AdamW on every step (torch computes m with
// lerp and divides by sqrt(bc2), zenflow multiplies: the last bits may differ).
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zenflow/optim/cpu_adamw.hpp>

#include "optim_reference.hpp"

namespace {

using zf_optim_test::near;

nlohmann::json load_golden() {
  std::ifstream in(std::string(ZF_OPTIM_GOLDEN_DIR) + "/adamw_torch.json");
  EXPECT_TRUE(in.good()) << "missing " << ZF_OPTIM_GOLDEN_DIR << "/adamw_torch.json";
  nlohmann::json doc;
  in >> doc;
  return doc;
}

std::vector<float> floats(const nlohmann::json& a) {
  std::vector<float> out;
  for (const auto& x : a) {
    out.push_back(static_cast<float>(x.get<double>()));
  }
  return out;
}

TEST(optim_golden, adamw_span_matches_torch_on_every_path) {
  const nlohmann::json doc = load_golden();
  ASSERT_GE(doc["cases"].size(), 5u);
  for (auto path :
       {zenflow::host::simd_path::scalar, zenflow::host::simd_path::avx2, zenflow::host::simd_path::avx512}) {
    if (!zenflow::host::force_simd_path(path)) {
      continue;
    }
    for (const auto& c : doc["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>() + " " + zenflow::host::simd_path_name(path));
      zenflow::adamw_hparams hp;
      hp.lr = c["lr"].get<float>();
      hp.beta1 = c["beta1"].get<float>();
      hp.beta2 = c["beta2"].get<float>();
      hp.eps = c["eps"].get<float>();
      hp.weight_decay = c["weight_decay"].get<float>();
      hp.decoupled = c["decoupled"].get<bool>();
      const float scale = c["grad_scale"].get<float>();
      std::vector<float> p = floats(c["param0"]);
      const auto n = static_cast<std::int64_t>(p.size());
      std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
      const int steps = c["steps"].get<int>();
      for (int s = 0; s < steps; ++s) {
        const std::vector<float> g = floats(c["grads"][static_cast<std::size_t>(s)]);
        ASSERT_EQ((zenflow::host::adamw_span<float, float>(p.data(), m.data(), v.data(), g.data(), nullptr, n,
                                                           s + 1, hp, scale, nullptr)),
                  cudaSuccess);
        const std::vector<float> want = floats(c["params"][static_cast<std::size_t>(s)]);
        for (std::size_t i = 0; i < p.size(); ++i) {
          // A few ulps of the parameter plus a few ulps of the step (lr-sized).
          ASSERT_TRUE(near(p[i], want[i], 4e-7 * hp.lr * 10, 4e-7)) << "step " << s << " i " << i;
        }
      }
      // torch computes 1 - beta in double from the Python float (0.001 for 0.999); zenflow from
      // the fp32 beta (1 - 0.999f = 0.00099998713): 1.3e-5 relative in v unless the betas are
      // exact fp32 values, where both mean the same number and only rounding differs.
      const bool exact = c["betas_fp32_exact"].get<bool>();
      const double rtol = exact ? 2e-6 : 3e-5;
      const std::vector<float> em = floats(c["exp_avg"]), ev = floats(c["exp_avg_sq"]);
      for (std::size_t i = 0; i < p.size(); ++i) {
        ASSERT_TRUE(near(m[i], em[i], 1e-9, rtol)) << i;
        ASSERT_TRUE(near(v[i], ev[i], 1e-12, rtol)) << i;
      }
    }
  }
  zenflow::host::reset_simd_path();
}

} // namespace
