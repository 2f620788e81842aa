// The host moments of an engine against the float64 reference's, where they are stored in fewer
// bits than fp32 (bf16, int8): the checks that reference_cases.hpp runs after its bf16 and int8
// cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "support/zenflow_reference.hpp"

namespace zf_engine_test {

/// bf16 host moments: every host row's m and v is a bf16 value, and the reference's (rounded the
/// documented way) equals it. The moments do not depend on the weights (decoupled decay), so the
/// two differ only where the engine's fp32 update and the reference's float64 one fall on either
/// side of a stochastic rounding threshold: rare (about 2^-16 per fp32 ulp between them per
/// rounding), and then by one bf16 ulp. Allowed: 1% of the elements, one ulp (2^-7 relative).
template <class Driver, class Engine, class Model>
void expect_host_moments_match(Driver& d,
                               Engine& eng,
                               const std::vector<zenflow::param_id>& ids,
                               const Model& m,
                               const zf_test::zenflow_reference& ref) {
  std::size_t compared = 0, differ = 0;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (!m.shapes[p].matrix) {
      continue; // vectors live on the device after warm-up: fp32 moments
    }
    const auto st = d.state(eng, ids[p]);
    const auto& sel = ref.selected(p);
    const auto len = st.m.size() / st.counts.size();
    for (std::size_t e = 0; e < st.m.size(); ++e) {
      if (std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(e / len))) {
        continue; // a device row
      }
      const std::pair<float, double> mv[2] = {{st.m[e], ref.exp_avg(p)[e]}, {st.v[e], ref.exp_avg_sq(p)[e]}};
      for (const auto& [got, want] : mv) {
        ASSERT_EQ(zenflow::bit_pattern(got) & 0xffffu, 0u)
            << "param " << p << " element " << e << ": not bf16";
        ++compared;
        if (static_cast<double>(got) != want) {
          ++differ;
          ASSERT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -7))
              << "param " << p << " element " << e;
        }
      }
    }
  }
  EXPECT_GT(compared, 100u);
  EXPECT_LE(differ * 100, compared) << differ << " of " << compared
                                    << " host moments differ from the reference";
}

/// int8 host moments: every block of 64 of a host row holds m on 127 steps of its absmax and
/// sqrt(v) on 255 steps of its absmax, and the reference's (quantized the documented way) equals
/// it within fp32 arithmetic, but for elements where the engine's fp32 update and the reference's
/// float64 one fall on either side of a stochastic threshold: then one step apart. Allowed: 1% of
/// the elements, one step.
template <class Driver, class Engine, class Model>
void expect_int8_host_moments_match(Driver& d,
                                    Engine& eng,
                                    const std::vector<zenflow::param_id>& ids,
                                    const Model& m,
                                    const zf_test::zenflow_reference& ref) {
  std::size_t compared = 0, differ = 0;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (!m.shapes[p].matrix) {
      continue;
    }
    const auto st = d.state(eng, ids[p]);
    const auto& sel = ref.selected(p);
    const auto len = st.m.size() / st.counts.size();
    for (std::size_t lo = 0; lo < st.m.size(); lo += std::min<std::size_t>(64, len - lo % len)) {
      if (std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(lo / len))) {
        continue; // a device row
      }
      const std::size_t hi = lo + std::min<std::size_t>(64, len - lo % len);
      double am = 0, au = 0, ram = 0, rau = 0;
      for (std::size_t e = lo; e < hi; ++e) {
        am = std::max(am, std::fabs(static_cast<double>(st.m[e])));
        au = std::max(au, std::sqrt(static_cast<double>(st.v[e])));
        ram = std::max(ram, std::fabs(ref.exp_avg(p)[e]));
        rau = std::max(rau, std::sqrt(ref.exp_avg_sq(p)[e]));
      }
      for (std::size_t e = lo; e < hi; ++e) {
        const double qm = am > 0 ? st.m[e] * 127.0 / am : 0.0,
                     qu = au > 0 ? std::sqrt(st.v[e]) * 255.0 / au : 0.0;
        ASSERT_NEAR(qm, std::nearbyint(qm), 1e-3) << "param " << p << " element " << e << ": not int8";
        ASSERT_NEAR(qu, std::nearbyint(qu), 1e-3) << "param " << p << " element " << e << ": not int8";
        const double dm = std::fabs(st.m[e] - ref.exp_avg(p)[e]);
        const double du =
            std::fabs(std::sqrt(static_cast<double>(st.v[e])) - std::sqrt(ref.exp_avg_sq(p)[e]));
        compared += 2;
        differ += (dm > 1e-5 * ram ? 1 : 0) + (du > 1e-5 * rau ? 1 : 0);
        ASSERT_LE(dm, ram / 127.0 * 1.01 + 1e-30) << "param " << p << " element " << e;
        ASSERT_LE(du, rau / 255.0 * 1.01 + 1e-30) << "param " << p << " element " << e;
      }
    }
  }
  EXPECT_GT(compared, 100u);
  EXPECT_LE(differ * 100, compared) << differ << " of " << compared
                                    << " host moments differ from the reference";
}

} // namespace zf_engine_test
