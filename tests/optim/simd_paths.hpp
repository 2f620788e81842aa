/// @file
/// The host SIMD paths for the cpu optim tests: every test that runs "on every path" iterates
/// supported_paths() and forces each with a path_guard.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/cpu_simd.hpp>

namespace zf_optim_test {

/// The SIMD paths this machine runs (scalar always), for tests that run every path.
inline std::vector<zenflow::host::simd_path> supported_paths() {
  std::vector<zenflow::host::simd_path> out;
  for (auto p :
       {zenflow::host::simd_path::scalar, zenflow::host::simd_path::avx2, zenflow::host::simd_path::avx512}) {
    if (zenflow::host::simd_path_supported(p)) {
      out.push_back(p);
    }
  }
  return out;
}

/// Forces a SIMD path for the scope of a test section.
struct path_guard {
  explicit path_guard(zenflow::host::simd_path p) { EXPECT_TRUE(zenflow::host::force_simd_path(p)); }
  ~path_guard() { zenflow::host::reset_simd_path(); }
  path_guard(const path_guard&) = delete;
  path_guard& operator=(const path_guard&) = delete;
};

} // namespace zf_optim_test
