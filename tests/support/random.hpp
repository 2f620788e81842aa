/// @file
/// Seeded random inputs. The seed is ZENFLOW_TEST_SEED when set, else a fixed default; tests
/// put it in a SCOPED_TRACE so that a failure prints how to reproduce it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/math/fp.hpp>

namespace zf_test {

inline std::uint64_t base_seed() {
  const char* v = std::getenv("ZENFLOW_TEST_SEED");
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 20261120ull;
}

inline std::string seed_note(std::uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with ZENFLOW_TEST_SEED=" + std::to_string(base_seed()) +
         ")";
}

/// std::normal_distribution<float>'s values as libstdc++ computes them without FP contraction
/// (the Marsaglia polar method, pairs of values, the second kept for the next call), with the
/// products rounded on their own (math/fp.hpp), so that the inputs of a test do not depend on the
/// flags it is built with: GCC fuses libstdc++'s `x * x + y * y` into an FMA at -O2 and above with
/// -march=native, which changed every input of the golden digests (tests/engine/golden).
class normal_float {
public:
  normal_float(float mean, float stddev) : mean_(mean), stddev_(stddev) {}

  template <class G>
  float operator()(G& gen) {
    float r;
    if (saved_available_) {
      saved_available_ = false;
      r = saved_;
    } else {
      float x, y, r2;
      do {
        x = uniform_pm1(gen);
        y = uniform_pm1(gen);
        r2 = zenflow::detail::add_f(zenflow::detail::mul_f(x, x), zenflow::detail::mul_f(y, y));
      } while (r2 > 1.0f || r2 == 0.0f);
      const float mult = std::sqrt(zenflow::detail::mul_f(-2.0f, std::log(r2)) / r2);
      saved_ = zenflow::detail::mul_f(x, mult);
      saved_available_ = true;
      r = zenflow::detail::mul_f(y, mult);
    }
    return zenflow::detail::add_f(zenflow::detail::mul_f(r, stddev_), mean_);
  }

private:
  /// 2u - 1 for u uniform in [0, 1) (generate_canonical's float: exact, contracted or not), in
  /// double as libstdc++ writes it, rounded to float.
  template <class G>
  static float uniform_pm1(G& gen) {
    const float u = std::generate_canonical<float, std::numeric_limits<float>::digits>(gen);
    return static_cast<float>(static_cast<double>(2.0f * u) - 1.0);
  }

  float mean_;
  float stddev_;
  float saved_ = 0.0f;
  bool saved_available_ = false;
};

/// Normal(0, scale) values rounded to the working type T.
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  normal_float dist(0.0f, scale);
  std::vector<T> out(n);
  for (auto& v : out) {
    v = zenflow::from_float<T>(dist(gen));
  }
  return out;
}

} // namespace zf_test
