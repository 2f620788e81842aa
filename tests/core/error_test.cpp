#include <string>

#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>

namespace {

cudaError_t launcher_with_checks(const float* p, long n) {
  ZF_EXPECT_ARG(p != nullptr, "zenflow::example", "d_in", "must not be null");
  ZF_EXPECT_ARG(n >= 0, "zenflow::example", "n", "must be >= 0");
  return cudaSuccess;
}

TEST(error, rejected_argument_is_named_in_the_exception) {
  float x = 1.0f;
  EXPECT_EQ(launcher_with_checks(&x, -3), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'n'"), std::string::npos);
  try {
    ZF_CUDA_TRY(launcher_with_checks(nullptr, 4));
    FAIL() << "ZF_CUDA_TRY did not throw";
  } catch (const zenflow::cuda_error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    const std::string what = e.what();
    EXPECT_NE(what.find("argument 'd_in' must not be null"), std::string::npos) << what;
    EXPECT_NE(what.find("zenflow::example"), std::string::npos) << what;
  }
}

TEST(error, success_does_not_throw_and_clears_stale_messages) {
  float x = 1.0f;
  (void)launcher_with_checks(nullptr, 1);
  EXPECT_NO_THROW(ZF_CUDA_TRY(launcher_with_checks(&x, 1)));
  EXPECT_TRUE(zenflow::last_error_message().empty());
}

TEST(error, check_attaches_a_recorded_message_once_and_never_to_another_code) {
  (void)launcher_with_checks(nullptr, 1); // records "argument 'd_in' ..."
  try {
    zenflow::detail::check(cudaErrorMemoryAllocation, "zenflow::test: alloc");
    FAIL() << "check did not throw";
  } catch (const zenflow::cuda_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_NE(what.find("zenflow::test: alloc"), std::string::npos) << what;
    EXPECT_EQ(what.find("d_in"), std::string::npos) << "stale launcher message attached: " << what;
  }
  EXPECT_TRUE(zenflow::last_error_message().empty()) << "check consumes the message";
  (void)launcher_with_checks(nullptr, 1);
  try {
    zenflow::detail::check(cudaErrorInvalidValue, "zenflow::test: launch");
    FAIL() << "check did not throw";
  } catch (const zenflow::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'd_in' must not be null"), std::string::npos) << e.what();
  }
  try {
    zenflow::detail::check(cudaErrorInvalidValue, "zenflow::test: again");
    FAIL() << "check did not throw";
  } catch (const zenflow::cuda_error& e) {
    EXPECT_EQ(std::string(e.what()).find("d_in"), std::string::npos) << "attached twice: " << e.what();
  }
  EXPECT_NO_THROW(zenflow::detail::check(cudaSuccess, "unused"));
}

TEST(error, cuda_try_consumes_the_message_it_attaches) {
  try {
    ZF_CUDA_TRY(launcher_with_checks(nullptr, 4));
    FAIL() << "ZF_CUDA_TRY did not throw";
  } catch (const zenflow::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("launcher_with_checks"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(zenflow::last_error_message().empty()) << "ZF_CUDA_TRY follows check's rule";
}

TEST(error, require_and_fail_argument_name_the_argument) {
  EXPECT_NO_THROW(zenflow::detail::require(true, "zenflow::example", "slots", "must be > 0"));
  try {
    zenflow::detail::require(false, "zenflow::example", "slots", "must be > 0");
    FAIL() << "require did not throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "zenflow::example: argument 'slots' must be > 0");
  }
  // The same words as a launcher's recorded message.
  (void)launcher_with_checks(nullptr, 1);
  const std::string recorded = zenflow::last_error_message();
  zenflow::clear_last_error_message();
  try {
    zenflow::detail::fail_argument("zenflow::example", "d_in", "must not be null");
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), recorded);
  }
}

TEST(error, runtime_failures_throw_with_the_cuda_name) {
  // Without a driver every runtime call fails; with one, an invalid pointer copy does.
  try {
    ZF_CUDA_TRY(cudaMemcpy(nullptr, reinterpret_cast<void*>(0x10), 16, cudaMemcpyDeviceToDevice));
    FAIL() << "expected a failure";
  } catch (const zenflow::cuda_error& e) {
    EXPECT_NE(e.code(), cudaSuccess);
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
  (void)cudaGetLastError();
}

TEST(views, channel_matrix_checks_name_the_argument) {
  using zenflow::channel_layout;
  float x = 0;
  auto check = [&](const void* p, long c, long l, long ld, channel_layout lay) {
    return zenflow::detail::check_channel_matrix("f", "d_grad", p, c, l, ld, lay);
  };
  EXPECT_EQ(check(&x, 4, 8, 8, channel_layout::contiguous), cudaSuccess);
  EXPECT_EQ(check(&x, 4, 8, 7, channel_layout::contiguous), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'ld'"), std::string::npos);
  EXPECT_EQ(check(&x, 4, 8, 4, channel_layout::strided), cudaSuccess);
  EXPECT_EQ(check(&x, 4, 8, 3, channel_layout::strided), cudaErrorInvalidValue);
  EXPECT_EQ(check(nullptr, 4, 8, 8, channel_layout::contiguous), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'d_grad'"), std::string::npos);
  EXPECT_EQ(check(nullptr, 0, 8, 8, channel_layout::contiguous), cudaSuccess);
  EXPECT_EQ(check(&x, -1, 8, 8, channel_layout::contiguous), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'channels'"), std::string::npos);
  EXPECT_EQ(check(&x, 1, -8, 8, channel_layout::contiguous), cudaErrorInvalidValue);
  EXPECT_NE(zenflow::last_error_message().find("'channel_len'"), std::string::npos);
}

} // namespace
