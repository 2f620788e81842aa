// cpu tier for the staleness-bounded window queue: order, exactly-once, the staleness bound under
// random delays on both sides, stall accounting, exception propagation, shutdown under load,
// bad use.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/transport/window_queue.hpp>

#include "support/random.hpp"

namespace {

using zenflow::shutdown_mode;
using zenflow::window_queue;

void maybe_sleep(std::minstd_rand& rng, int max_us) {
  if (max_us > 0 && rng() % 2 == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<unsigned>(max_us)));
  }
}

template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(window_queue, stress_in_order_exactly_once_and_never_beyond_the_bound) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (std::int64_t bound : {1, 2, 4}) {
    SCOPED_TRACE("bound " + std::to_string(bound));
    const std::int64_t windows = 300;
    // Independent bookkeeping: what the jobs themselves saw.
    std::atomic<std::int64_t> finished{0};
    std::vector<int> runs(static_cast<std::size_t>(windows), 0);
    std::atomic<std::int64_t> order_errors{0};
    std::minstd_rand job_rng(static_cast<unsigned>(seed + static_cast<std::uint64_t>(bound)));
    std::minstd_rand train_rng(static_cast<unsigned>(seed + 17));
    std::int64_t worst_lag = 0;
    {
      window_queue q(bound);
      for (std::int64_t t = 0; t < windows; ++t) {
        // "The device computes window t": every job before t - bound must have finished.
        const std::int64_t lag = t - finished.load();
        worst_lag = std::max(worst_lag, lag);
        ASSERT_LE(lag, bound) << "window " << t;
        maybe_sleep(train_rng, 60);
        const std::int64_t w = q.submit([&, t](std::int64_t window) {
          if (window != t || finished.load() != t) {
            ++order_errors;
          }
          ++runs[static_cast<std::size_t>(window)]; // only the executor touches runs
          maybe_sleep(job_rng, 60);
          finished.store(window + 1);
        });
        ASSERT_EQ(w, t);
        ASSERT_LE(q.submitted() - finished.load(), bound); // right after submit too
      }
      q.drain();
      EXPECT_EQ(finished.load(), windows);
      const auto st = q.stats();
      EXPECT_EQ(st.submitted, windows);
      EXPECT_EQ(st.completed, windows);
      EXPECT_EQ(st.failed, 0);
      EXPECT_EQ(st.cancelled, 0);
      EXPECT_LE(st.max_in_flight, bound);
      EXPECT_GE(st.max_in_flight, 1);
    }
    EXPECT_EQ(order_errors.load(), 0);
    for (int r : runs) {
      ASSERT_EQ(r, 1);
    }
    EXPECT_LE(worst_lag, bound);
  }
}

TEST(window_queue, a_slow_host_makes_the_bound_bind_and_the_stall_is_counted) {
  window_queue q(2);
  std::atomic<int> done{0};
  for (int w = 0; w < 8; ++w) {
    q.submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++done;
    });
  }
  const auto st = q.stats();
  EXPECT_EQ(st.max_in_flight, 2); // the fast submitter ran into the bound
  EXPECT_GT(st.stalls, 0u);
  EXPECT_GT(st.stall_ns, 0u);
  q.drain();
  EXPECT_EQ(done.load(), 8);
  // Waiting for a finished window is not a stall.
  const auto before = q.stats();
  q.wait_applied(3);
  EXPECT_TRUE(q.applied(7));
  EXPECT_FALSE(q.applied(8));
  EXPECT_EQ(q.stats().stall_ns, before.stall_ns);
  EXPECT_EQ(q.stats().stalls, before.stalls);
  q.wait_applied(-1); // before the first window: nothing to wait for
}

TEST(window_queue, a_job_error_reaches_the_training_thread_once_and_cancels_what_queued_behind) {
  window_queue q(8);
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<int> ran{0};
  for (int w = 0; w < 3; ++w) {
    q.submit([&] { ++ran; });
  }
  q.submit([opened](std::int64_t w) {
    opened.wait();
    throw std::runtime_error("host job " + std::to_string(w) + " failed");
  });
  q.submit([&] { ++ran; }); // queued behind the failing one: cancelled
  q.submit([&] { ++ran; });
  gate.set_value();
  const std::string msg = thrown_message([&] { q.wait_applied(5); });
  EXPECT_EQ(msg, "host job 3 failed");
  EXPECT_NO_THROW(q.rethrow_if_failed()); // delivered once, not twice
  EXPECT_EQ(ran.load(), 3);
  auto st = q.stats();
  EXPECT_EQ(st.failed, 1);
  EXPECT_EQ(st.cancelled, 2);
  EXPECT_EQ(st.completed, 6);
  // The queue goes on: a new window runs.
  EXPECT_EQ(q.submit([&] { ++ran; }), 6);
  q.drain();
  EXPECT_EQ(ran.load(), 4);
}

TEST(window_queue, a_job_error_surfaces_at_the_next_submit_and_nothing_is_queued) {
  window_queue q(1);
  q.submit([] { throw std::out_of_range("window 0"); });
  // bound 1: this submit waits for window 0, then hands over its error instead of queueing.
  EXPECT_THROW(q.submit([] {}), std::out_of_range);
  EXPECT_EQ(q.submitted(), 1);
  EXPECT_NO_THROW(q.drain());
  // A job that calls back into its own queue would wait for itself: it fails, not deadlocks.
  q.submit([&q] { q.wait_applied(1); });
  EXPECT_THROW(q.drain(), std::logic_error);
}

TEST(window_queue, shutdown_under_load_drains_or_cancels_and_leaks_nothing) {
  const std::uint64_t seed = zf_test::base_seed() + 5;
  SCOPED_TRACE(zf_test::seed_note(seed));
  auto token = std::make_shared<int>(0); // every job captures it: leaked jobs keep it alive
  std::atomic<int> ran{0};
  {
    window_queue q(64); // drain on destruction
    std::minstd_rand rng(static_cast<unsigned>(seed));
    for (int w = 0; w < 40; ++w) {
      const int us = static_cast<int>(rng() % 200);
      q.submit([&ran, token, us] {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 40);
  EXPECT_EQ(token.use_count(), 1);

  ran = 0;
  std::int64_t cancelled = 0;
  {
    window_queue q(64, shutdown_mode::cancel);
    for (int w = 0; w < 40; ++w) {
      q.submit([&ran, token] {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        ++ran;
      });
    }
    q.shutdown(shutdown_mode::cancel);
    const auto st = q.stats();
    cancelled = st.cancelled;
    EXPECT_EQ(st.completed, 40);
    EXPECT_EQ(ran.load() + cancelled, 40);
    EXPECT_THROW(q.submit([] {}), zenflow::queue_closed);
    q.shutdown(); // idempotent
  }
  EXPECT_GT(cancelled, 0); // 40 x 300 us cannot have finished before the cancel
  EXPECT_EQ(token.use_count(), 1);

  // An error nobody collected does not escape the destructor.
  {
    window_queue q(2);
    q.submit([] { throw std::runtime_error("never collected"); });
  }
}

TEST(window_queue, bad_use_is_rejected_naming_the_argument) {
  for (std::int64_t bad : {0, -1}) {
    const std::string msg = thrown_message([bad] { window_queue q(bad); });
    EXPECT_NE(msg.find("'bound'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("zenflow::window_queue"), std::string::npos) << msg;
  }
  EXPECT_THROW(window_queue(0), zenflow::invalid_argument);
  window_queue q(1);
  EXPECT_NE(thrown_message([&] { q.submit(window_queue::job_type{}); }).find("'job'"), std::string::npos);
  EXPECT_EQ(q.submitted(), 0); // nothing queued
  EXPECT_NE(thrown_message([&] { q.wait_applied(0); }).find("'window'"), std::string::npos);
  q.submit([] {});
  EXPECT_NE(thrown_message([&] { q.wait_applied(1); }).find("'window'"), std::string::npos);
  q.wait_applied(0);
  EXPECT_EQ(q.bound(), 1);
  EXPECT_EQ(q.in_flight(), 0);
}

} // namespace
