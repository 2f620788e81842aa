/// @file
/// The schedule tests' check of a rejected argument: `cudaErrorInvalidValue`, and a message that
/// names the function and the argument (then cleared for the next check).
#pragma once

#include <string>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>

namespace zf_schedule_test {

inline void expect_rejected(cudaError_t e, const std::string& fn, const std::string& arg) {
  EXPECT_EQ(e, cudaErrorInvalidValue);
  const std::string msg = zenflow::last_error_message();
  EXPECT_NE(msg.find(fn), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + arg + "'"), std::string::npos) << msg;
  zenflow::clear_last_error_message();
}

} // namespace zf_schedule_test
