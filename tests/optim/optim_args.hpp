// The optimizer tests' check of a rejected launch (optim_cpu_test.cpp,
// optim_host_twins_test.cpp): cudaErrorInvalidValue, and the message naming the argument.
#pragma once

#include <string>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>

namespace zf_optim_test {

inline ::testing::AssertionResult rejected(cudaError_t e, const char* arg) {
  if (e != cudaErrorInvalidValue) {
    return ::testing::AssertionFailure() << "returned " << static_cast<int>(e);
  }
  // The whole name, quoted: "idx" must not pass for a message naming "d_idx".
  if (zenflow::last_error_message().find("argument '" + std::string(arg) + "'") == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << zenflow::last_error_message() << "' does not name " << arg;
  }
  return ::testing::AssertionSuccess();
}

} // namespace zf_optim_test
