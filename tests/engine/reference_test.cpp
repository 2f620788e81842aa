#include <gtest/gtest.h>

#include "support/zenflow_reference.hpp"

namespace {

TEST(reference, constructs_from_the_default_config) {
  zf_test::zenflow_reference ref(zenflow::config{});
  EXPECT_EQ(ref.num_params(), 0u);
}

} // namespace
