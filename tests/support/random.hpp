/// @file
/// Seeded random inputs. The seed is ZENFLOW_TEST_SEED when set, else a fixed default; tests
/// put it in a SCOPED_TRACE so that a failure prints how to reproduce it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>

namespace zf_test {

inline std::uint64_t base_seed() {
  const char* v = std::getenv("ZENFLOW_TEST_SEED");
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 20261120ull;
}

inline std::string seed_note(std::uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with ZENFLOW_TEST_SEED=" + std::to_string(base_seed()) +
         ")";
}

/// Normal(0, scale) values rounded to the working type T.
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<T> out(n);
  for (auto& v : out) {
    v = zenflow::from_float<T>(dist(gen));
  }
  return out;
}

} // namespace zf_test
