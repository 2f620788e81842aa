// collective_watchdog over a fake transport with CUDA's event semantics on one stream: every
// collective takes the next sequence number, an event records the number of the collective it
// follows, and it is complete once the "device" (a thread here) has executed that far. Checked:
// collectives that complete are never taken for a hang, however many and however the pool of
// events is exhausted; a hang is caught no earlier than the bound and well within a few bounds,
// naming the collective and the rank; an asynchronous error or a failed event stops the transport
// at once; the transport is stopped exactly once; nothing is marked after that; the watchdog's
// destructor returns with collectives still pending; a revoke that blocks (on the transport's lock,
// or inside NCCL) blocks none of the communicator's calls into the watchdog, nor the transport's
// lock while it waits; and poll_released (the communicator's bounded wait for a call in progress)
// releases the transport's lock between polls. Its NCCL probe is in nccl_communicator.cuh (gpu
// tests).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/detail/collective_watchdog.hpp>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using zenflow::detail::comm::collective_watchdog;
using zenflow::detail::comm::watch_state;

struct fake_transport {
  explicit fake_transport(std::size_t events) : recorded(events) {
    for (auto& r : recorded) {
      r.store(0);
    }
  }
  std::atomic<std::uint64_t> enqueued{0}; // the newest collective's sequence number
  std::atomic<std::uint64_t> executed{0}; // how far the device has run
  std::vector<std::atomic<std::uint64_t>> recorded;
  std::atomic<bool> device_stalled{false};
  std::atomic<bool> stall_seen{false}; // the device thread has seen device_stalled (and runs no more)
  std::atomic<int> stops{0};
  std::atomic<int> entered{0};
  std::atomic<std::int64_t> stopped_at_ns{0};
  std::mutex mu;
  std::string async;     // guarded by mu
  int failed_token = -1; // guarded by mu

  std::uint64_t enqueue() { return enqueued.fetch_add(1) + 1; }
  void set_async(std::string s) {
    std::lock_guard lk(mu);
    async = std::move(s);
  }
};

struct fake_probe {
  using token = int;
  std::shared_ptr<fake_transport> t;
  void enter_thread() { t->entered.fetch_add(1); }
  watch_state poll(token k) {
    {
      std::lock_guard lk(t->mu);
      if (k == t->failed_token) {
        return {watch_state::failed, "fake event error"};
      }
    }
    return t->executed.load() >= t->recorded[static_cast<std::size_t>(k)].load()
               ? watch_state{watch_state::complete, {}}
               : watch_state{};
  }
  std::string async_error() {
    std::lock_guard lk(t->mu);
    return t->async;
  }
  // As ncclCommRevoke: the in-flight collectives end, so every event completes.
  void stop_transport() {
    t->stopped_at_ns.store(clock_type::now().time_since_epoch().count());
    t->stops.fetch_add(1);
    t->executed.store(t->enqueued.load());
  }
};

using watchdog = collective_watchdog<fake_probe>;

std::vector<int> pool(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) {
    v.push_back(i);
  }
  return v;
}

// Enqueues one collective named `what` and marks it.
void collective(fake_transport& t, watchdog& w, const std::string& what) {
  const std::uint64_t seq = t.enqueue();
  w.watch(what, [&](int k) { t.recorded[static_cast<std::size_t>(k)].store(seq); });
}

// A device that runs every enqueued collective within about a millisecond, until stalled.
class device_thread {
public:
  explicit device_thread(fake_transport& t)
      : thread_([&t, this] {
          while (!done_.load()) {
            if (t.device_stalled.load()) {
              t.stall_seen.store(true);
            } else {
              t.executed.store(t.enqueued.load());
            }
            std::this_thread::sleep_for(500us);
          }
        }) {}
  ~device_thread() {
    done_.store(true);
    thread_.join();
  }

private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

bool wait_until(const std::function<bool()>& f, std::chrono::milliseconds limit) {
  const auto end = clock_type::now() + limit;
  while (clock_type::now() < end) {
    if (f()) {
      return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  return f();
}

TEST(collective_watchdog, collectives_that_complete_are_never_taken_for_a_hang_even_with_the_pool_exhausted) {
  for (const int events : {1, 4, 64}) {
    auto t = std::make_shared<fake_transport>(64);
    {
      watchdog w(fake_probe{t}, pool(events), 1000ms, "rank 0 of 2");
      device_thread dev(*t);
      for (int i = 0; i < 400; ++i) {
        collective(*t, w, "all_reduce_sum #" + std::to_string(i));
        if (i % 16 == 0) {
          std::this_thread::sleep_for(2ms); // the device catches up now and then
        }
      }
      EXPECT_TRUE(wait_until([&] { return w.pending() == 0; }, 10s)) << events << " events";
      EXPECT_FALSE(w.fired()) << w.reason();
      EXPECT_EQ(w.reason(), "");
    }
    EXPECT_EQ(t->stops.load(), 0) << events << " events";
    EXPECT_EQ(t->entered.load(), 1);
  }
}

TEST(collective_watchdog, a_hang_is_caught_after_the_bound_naming_the_collective_and_the_rank) {
  auto t = std::make_shared<fake_transport>(64);
  watchdog w(fake_probe{t}, pool(64), 200ms, "rank 1 of 3");
  device_thread dev(*t);
  for (int i = 0; i < 10; ++i) {
    collective(*t, w, "all_reduce_sum #" + std::to_string(i));
  }
  ASSERT_TRUE(wait_until([&] { return w.pending() == 0; }, 10s));
  t->device_stalled.store(true); // a rank is gone: the next collectives never finish
  // Once the device thread has seen it: a loop that read "not stalled" just before would otherwise
  // still complete the next collective (a preempted thread under load).
  ASSERT_TRUE(wait_until([&] { return t->stall_seen.load(); }, 10s));
  const auto hang_start = clock_type::now();
  collective(*t, w, "reduce_scatter_mean #10");
  collective(*t, w, "all_gather_bytes #11");
  ASSERT_TRUE(wait_until([&] { return w.fired(); }, 20s)) << "no verdict";
  const auto stopped = clock_type::time_point(clock_type::duration(t->stopped_at_ns.load()));
  EXPECT_GE(stopped - hang_start, 200ms) << "stopped before the bound";
  EXPECT_EQ(t->stops.load(), 1);
  const std::string why = w.reason();
  EXPECT_NE(why.find("reduce_scatter_mean #10"), std::string::npos) << why; // the oldest
  EXPECT_NE(why.find("rank 1 of 3"), std::string::npos) << why;
  EXPECT_NE(why.find("200 ms"), std::string::npos) << why;
  // Stopped is final: later collectives are not marked, the transport is not stopped again.
  collective(*t, w, "all_reduce_sum #12");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(t->stops.load(), 1);
}

TEST(collective_watchdog, with_every_event_pending_the_newest_collective_is_watched_and_a_hang_still_caught) {
  auto t = std::make_shared<fake_transport>(2);
  watchdog w(fake_probe{t}, pool(2), 100ms, "rank 0 of 2");
  t->device_stalled.store(true);
  for (int i = 0; i < 10; ++i) {
    collective(*t, w, "all_reduce_sum #" + std::to_string(i));
  }
  EXPECT_EQ(w.pending(), 2u);
  ASSERT_TRUE(wait_until([&] { return w.fired(); }, 20s));
  const std::string why = w.reason();
  // #0 holds one event, #1 the other, re-recorded for #2 to #9 and renamed: #0 is the oldest.
  EXPECT_NE(why.find("all_reduce_sum #0 not complete"), std::string::npos) << why;
  EXPECT_EQ(t->stops.load(), 1);
}

TEST(collective_watchdog, an_asynchronous_error_stops_the_transport_without_waiting_for_the_bound) {
  auto t = std::make_shared<fake_transport>(8);
  watchdog w(fake_probe{t}, pool(8), 60000ms, "rank 2 of 4");
  t->device_stalled.store(true);
  collective(*t, w, "all_reduce_max #0");
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(w.fired());
  const auto raised = clock_type::now();
  t->set_async("remote process exited or there was a network error");
  ASSERT_TRUE(wait_until([&] { return w.fired(); }, 20s));
  EXPECT_LT(clock_type::now() - raised, 10s); // not the 60 s bound
  const std::string why = w.reason();
  EXPECT_NE(why.find("remote process exited"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 2 of 4"), std::string::npos) << why;
  EXPECT_EQ(t->stops.load(), 1);
}

TEST(collective_watchdog, a_failed_event_stops_the_transport_naming_its_collective) {
  auto t = std::make_shared<fake_transport>(8);
  watchdog w(fake_probe{t}, pool(8), 60000ms, "rank 0 of 2");
  t->device_stalled.store(true);
  {
    std::lock_guard lk(t->mu);
    t->failed_token = 7; // the pool hands out its last token first
  }
  collective(*t, w, "broadcast_bytes #0");
  ASSERT_TRUE(wait_until([&] { return w.fired(); }, 20s));
  const std::string why = w.reason();
  EXPECT_NE(why.find("broadcast_bytes #0 failed"), std::string::npos) << why;
  EXPECT_NE(why.find("fake event error"), std::string::npos) << why;
}

TEST(collective_watchdog, its_destructor_returns_with_collectives_pending) {
  auto t = std::make_shared<fake_transport>(4);
  {
    watchdog w(fake_probe{t}, pool(4), 60000ms, "rank 0 of 2");
    t->device_stalled.store(true);
    collective(*t, w, "all_reduce_sum #0");
    collective(*t, w, "all_reduce_sum #1");
    EXPECT_EQ(w.pending(), 2u);
  } // must not wait for them (the ctest timeout would catch a hang)
  EXPECT_EQ(t->stops.load(), 0);
}

// A probe whose stop_transport blocks until the test lets it go, taking the transport's lock
// first (as nccl_probe's ncclCommRevoke under the NCCL lock): a revoke that blocks inside NCCL.
struct blocking_revoke_probe {
  using token = int;
  struct shared {
    std::mutex transport_lock; // nccl_communicator's NCCL lock
    std::mutex mu;
    std::condition_variable cv;
    bool revoking = false;
    bool release = false;
    int async_asked = 0;             // guarded by mu: async_error() entered (before the transport's lock)
    std::atomic<int> async_polls{0}; // async_error() returned
  };
  std::shared_ptr<shared> s;
  void enter_thread() {}
  watch_state poll(token) { return {}; } // never completes: a hang
  std::string async_error() {
    {
      std::lock_guard lk(s->mu);
      ++s->async_asked;
    }
    s->cv.notify_all();
    std::lock_guard lk(s->transport_lock);
    s->async_polls.fetch_add(1);
    return {};
  }
  void stop_transport() {
    std::unique_lock lk(s->mu);
    s->revoking = true;
    s->cv.notify_all();
    s->cv.wait(lk, [&] { return s->release; });
  }
};

TEST(collective_watchdog, a_revoke_that_blocks_does_not_block_the_communicators_calls) {
  auto s = std::make_shared<blocking_revoke_probe::shared>();
  collective_watchdog<blocking_revoke_probe> w(blocking_revoke_probe{s}, pool(4), 50ms, "rank 0 of 2");
  w.watch("all_reduce_sum #0", [](int) {});
  {
    std::unique_lock lk(s->mu);
    ASSERT_TRUE(s->cv.wait_for(lk, 20s, [&] { return s->revoking; })) << "no revoke";
  }
  // The revoke is blocked. A communicator's call (another thread) reads the verdict and marks a
  // collective, as nccl_communicator's expect_usable() and mark() do: both take the watchdog's
  // lock, which the watchdog held around the revoke before (every caller then waited with it).
  std::atomic<bool> done{false};
  std::string why;
  std::thread caller([&] {
    why = w.reason();
    w.watch("all_reduce_sum #1", [](int) { ADD_FAILURE() << "marked after the watchdog fired"; });
    (void)w.pending();
    done.store(true);
  });
  const bool returned = wait_until([&] { return done.load(); }, 10s);
  {
    std::lock_guard lk(s->mu);
    s->release = true;
  }
  s->cv.notify_all();
  caller.join();
  EXPECT_TRUE(returned) << "the communicator's call waited for the blocked revoke";
  EXPECT_TRUE(w.fired());
  EXPECT_NE(why.find("all_reduce_sum #0 not complete"), std::string::npos) << why;
}

TEST(collective_watchdog, the_asynchronous_error_poll_does_not_hold_the_watchdogs_lock) {
  // The transport's lock held for a long time (a call settling under it): the watchdog's error
  // poll waits for it, and must not hold the watchdog's lock meanwhile.
  auto s = std::make_shared<blocking_revoke_probe::shared>();
  std::unique_lock transport(s->transport_lock);
  collective_watchdog<blocking_revoke_probe> w(blocking_revoke_probe{s}, pool(4), 60000ms, "rank 0 of 2");
  w.watch("all_reduce_sum #0", [](int) {});
  bool asked = false;
  {
    std::unique_lock lk(s->mu);
    asked = s->cv.wait_for(lk, 20s, [&] { return s->async_asked > 0; });
  }
  if (!asked) {
    transport.unlock(); // so that the watchdog's destructor can join its thread
    FAIL() << "the watchdog never asked for the transport's error";
  }
  // The watchdog's thread is inside async_error(), held up by the transport's lock (ours). A
  // communicator's call now takes the watchdog's lock: it must not wait for the transport's.
  std::atomic<bool> done{false};
  std::thread caller([&] {
    w.watch("all_reduce_sum #1", [](int) {});
    (void)w.reason();
    done.store(true);
  });
  const bool returned = wait_until([&] { return done.load(); }, 10s);
  const int polls_while_held = s->async_polls.load();
  transport.unlock();
  caller.join();
  EXPECT_TRUE(returned) << "watch() waited for the transport's lock";
  EXPECT_EQ(polls_while_held, 0)
      << "the error poll was not held up by the transport's lock: nothing was tested";
  EXPECT_TRUE(wait_until([&] { return s->async_polls.load() > 0; }, 10s))
      << "the held-up poll never returned";
  EXPECT_FALSE(w.fired());
}

// Whether `m` is held (by this thread: a try_lock from another one, std::mutex's owner may not).
bool held(std::mutex& m) {
  bool got = false;
  std::thread t([&] {
    got = m.try_lock();
    if (got) {
      m.unlock();
    }
  });
  t.join();
  return !got;
}

TEST(collective_watchdog, poll_released_releases_the_lock_between_polls_and_holds_it_on_return) {
  using zenflow::detail::comm::poll_released;
  std::mutex nccl_lock;
  std::atomic<bool> finish{false};
  std::atomic<int> polls{0};
  bool held_while_polling = true;
  std::unique_lock lk(nccl_lock); // the communicator's call holds it, as in enqueue()
  std::thread other([&] {         // the watchdog's revoke, under the same lock
    std::lock_guard g(nccl_lock);
    finish.store(true); // ncclCommRevoke ends the call in progress
  });
  const bool settled = poll_released(&nccl_lock, 10000ms, [&] {
    if (polls.fetch_add(1) % 64 == 0) {
      held_while_polling = held_while_polling && held(nccl_lock);
    }
    return finish.load();
  });
  EXPECT_TRUE(settled) << "the lock was held for the whole wait";
  EXPECT_TRUE(held_while_polling);
  EXPECT_TRUE(held(nccl_lock)) << "not held again on return";
  lk.unlock();
  other.join();
  // The bound: false after it, with the lock held again; no lock at all also works.
  std::unique_lock again(nccl_lock);
  const auto t0 = clock_type::now();
  EXPECT_FALSE(poll_released(&nccl_lock, 30ms, [] { return false; }));
  EXPECT_GE(clock_type::now() - t0, 30ms);
  EXPECT_TRUE(held(nccl_lock));
  again.unlock();
  EXPECT_TRUE(poll_released(static_cast<std::mutex*>(nullptr), 30ms, [&] { return polls.load() > 0; }));
}

} // namespace
