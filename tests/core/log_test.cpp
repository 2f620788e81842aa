#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/log.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/transport/window_queue.hpp>

namespace {

struct captured {
  std::vector<std::pair<zenflow::log_level, std::string>> lines;
};

// Installs a capturing handler for one test and restores the quiet default afterwards.
class log_hook : public ::testing::Test {
protected:
  void install(zenflow::log_level min_level) {
    zenflow::set_log_handler(
        [this](zenflow::log_level level, std::string_view message) {
          sink_.lines.emplace_back(level, std::string(message));
        },
        min_level);
  }
  void TearDown() override { zenflow::set_log_handler({}); }
  captured sink_;
};

TEST_F(log_hook, default_is_quiet_and_filters_by_level) {
  zenflow::set_log_handler({});
  EXPECT_FALSE(zenflow::log_enabled(zenflow::log_level::error));
  zenflow::log(zenflow::log_level::error, "dropped"); // no handler: nothing happens

  install(zenflow::log_level::warning);
  EXPECT_FALSE(zenflow::log_enabled(zenflow::log_level::info));
  EXPECT_TRUE(zenflow::log_enabled(zenflow::log_level::warning));
  zenflow::log(zenflow::log_level::debug, "d");
  zenflow::log(zenflow::log_level::info, "i");
  zenflow::log(zenflow::log_level::warning, "w");
  zenflow::log(zenflow::log_level::error, "e");
  zenflow::log(zenflow::log_level::off, "never a message level");
  ASSERT_EQ(sink_.lines.size(), 2u);
  EXPECT_EQ(sink_.lines[0].first, zenflow::log_level::warning);
  EXPECT_EQ(sink_.lines[0].second, "w");
  EXPECT_EQ(sink_.lines[1].first, zenflow::log_level::error);
  EXPECT_EQ(sink_.lines[1].second, "e");
}

TEST_F(log_hook, a_throwing_handler_does_not_escape_and_replacement_returns_the_old_one) {
  zenflow::set_log_handler([](zenflow::log_level, std::string_view) { throw std::runtime_error("x"); },
                           zenflow::log_level::debug);
  EXPECT_NO_THROW(zenflow::log(zenflow::log_level::error, "boom"));
  install(zenflow::log_level::debug);
  zenflow::log_handler previous = zenflow::set_log_handler({});
  ASSERT_TRUE(previous);
  previous(zenflow::log_level::info, "through the returned handler");
  ASSERT_EQ(sink_.lines.size(), 1u);
  EXPECT_EQ(sink_.lines[0].second, "through the returned handler");
}

TEST_F(log_hook, an_uncollected_host_job_error_is_logged_not_printed) {
  install(zenflow::log_level::warning);
  {
    zenflow::window_queue queue(1);
    queue.submit([] { throw std::runtime_error("disk full in job 0"); });
    // Destroyed without drain(): nobody collects the error, so the destructor logs it.
  }
  ASSERT_EQ(sink_.lines.size(), 1u);
  EXPECT_EQ(sink_.lines[0].first, zenflow::log_level::error);
  EXPECT_NE(sink_.lines[0].second.find("disk full in job 0"), std::string::npos) << sink_.lines[0].second;
}

} // namespace
