#include <gtest/gtest.h>
#include <zenflow/engine/config.hpp>

namespace {

TEST(config, default_config_is_valid) { EXPECT_NO_THROW(zenflow::config{}.validate()); }

} // namespace
