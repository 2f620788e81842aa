// cpu tier for the worker pool's placement: the DeepSpeed-style core split, pinning, and the
// deterministic parallel-for on a placed pool. (The pool's basic behaviour is in tests/core.)
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#if defined(__linux__)
#  include <sched.h>
#endif

#include <zenflow/core/worker_pool.hpp>

#include "support/random.hpp"

namespace {

using zenflow::split_cores;

std::vector<int> iota_cores(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(split_cores, reserves_a_share_for_the_training_thread) {
  const auto eight = iota_cores(8);
  auto s = split_cores(eight, 0.5);
  EXPECT_EQ(s.training, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(s.workers, (std::vector<int>{4, 5, 6, 7}));
  s = split_cores(eight, 0.0); // nothing reserved: both may use every core
  EXPECT_EQ(s.training, eight);
  EXPECT_EQ(s.workers, eight);
  s = split_cores(eight, 0.01); // a positive share reserves at least one core
  EXPECT_EQ(s.training, (std::vector<int>{0}));
  EXPECT_EQ(s.workers.size(), 7u);
  s = split_cores(eight, 0.99); // ... and leaves at least one to the workers
  EXPECT_EQ(s.training.size(), 7u);
  EXPECT_EQ(s.workers, (std::vector<int>{7}));
  s = split_cores(std::vector<int>{5}, 0.5); // one core: shared
  EXPECT_EQ(s.training, (std::vector<int>{5}));
  EXPECT_EQ(s.workers, (std::vector<int>{5}));
  s = split_cores(std::vector<int>{9, 3, 3, 12, 7, 1}, 0.4); // sorted, deduplicated, round(0.4 * 5) = 2
  EXPECT_EQ(s.training, (std::vector<int>{1, 3}));
  EXPECT_EQ(s.workers, (std::vector<int>{7, 9, 12}));
}

TEST(split_cores, rejects_a_share_outside_zero_one) {
  const auto four = iota_cores(4);
  for (double bad : {1.0, -0.1, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      (void)split_cores(four, bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'reserved_cores_perc'"), std::string::npos) << e.what();
    }
  }
  zenflow::worker_pool_options o;
  o.reserved_cores_perc = 1.0;
  EXPECT_THROW(zenflow::worker_pool{o}, zenflow::invalid_argument);
}

TEST(worker_pool, placed_pool_pins_each_worker_to_its_core) {
  const auto allowed = zenflow::allowed_cores();
  ASSERT_FALSE(allowed.empty());
  zenflow::worker_pool_options o;
  o.reserved_cores_perc = 0.5;
  o.threads = 3;
  o.pin_threads = true;
  zenflow::worker_pool pool(o);
  EXPECT_EQ(pool.size(), 3u);
  const auto split = split_cores(allowed, 0.5);
  EXPECT_EQ(pool.training_cores(), split.training);
  EXPECT_EQ(pool.worker_cores(), split.workers);
#if defined(__linux__)
  ASSERT_TRUE(pool.pinned());
  for (unsigned i = 0; i + 1 < pool.size(); ++i) {
    const int core = split.workers[(i + 1) % split.workers.size()];
    EXPECT_EQ(pool.worker_affinity(i), std::vector<int>{core}) << "worker " << i;
  }
  // The training thread and the caller of parallel_for pin themselves.
  std::thread t([&] {
    ASSERT_TRUE(zenflow::pin_current_thread(pool.training_cores()));
    EXPECT_EQ(zenflow::current_thread_affinity(), pool.training_cores());
    ASSERT_TRUE(pool.pin_caller());
    EXPECT_EQ(zenflow::current_thread_affinity(), std::vector<int>{pool.worker_cores()[0]});
  });
  t.join();
  EXPECT_FALSE(zenflow::pin_current_thread(std::vector<int>{}));
  EXPECT_FALSE(zenflow::pin_current_thread(std::vector<int>{-1}));
#endif
  // Default thread count: one per worker core.
  zenflow::worker_pool_options d;
  d.reserved_cores_perc = 0.5;
  zenflow::worker_pool by_cores(d);
  EXPECT_EQ(by_cores.size(), split.workers.size());
  EXPECT_FALSE(by_cores.pinned());
}

#if defined(__linux__)
// Linux may wake a worker onto the CPU of the thread that woke it although another CPU is idle;
// the two then share one CPU and the pool runs slower than one thread (seen on a 2-vCPU virtual
// machine: 64K-element AdamW calls took 65 us instead of 9). An unpinned worker that enters a job
// on the caller's CPU moves off it first, so no worker chunk ever runs on the caller's CPU.
TEST(worker_pool, an_unpinned_worker_never_runs_a_chunk_on_the_callers_cpu) {
  const auto allowed = zenflow::allowed_cores();
  if (allowed.size() < 2) {
    GTEST_SKIP() << "needs two CPUs";
  }
  std::vector<int> seen_cpu;
  std::thread caller([&] {
    zenflow::worker_pool pool(2); // before the pin: its worker inherits the caller's affinity
    ASSERT_TRUE(zenflow::pin_current_thread(std::vector<int>{allowed[0]}));
    for (int job = 0; job < 20; ++job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2)); // the worker falls asleep
      std::atomic<int> worker_cpu{-1};
      // Chunk 0 (the caller's) waits until the worker has taken chunk 1, so that every job has a
      // worker in it, however late it wakes (bounded: a worker that never comes fails the test).
      pool.parallel_for(2, 1, [&](std::int64_t c, std::int64_t, std::int64_t) {
        if (c == 1) {
          worker_cpu.store(sched_getcpu());
          return;
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (worker_cpu.load() < 0 && std::chrono::steady_clock::now() < until) {
          std::this_thread::yield();
        }
      });
      seen_cpu.push_back(worker_cpu.load());
    }
  });
  caller.join();
  for (std::size_t j = 0; j < seen_cpu.size(); ++j) {
    EXPECT_GE(seen_cpu[j], 0) << "job " << j << ": chunk 1 never ran";
    EXPECT_NE(seen_cpu[j], allowed[0]) << "job " << j << ": a worker chunk ran on the caller's CPU";
  }
}
#endif

TEST(worker_pool, placed_pool_reduction_is_bit_identical_to_a_single_thread) {
  const std::uint64_t seed = zf_test::base_seed() + 11;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const auto x = zf_test::random_values<float>(100003, seed);
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  const std::int64_t grain = 4096;
  auto reduce = [&](zenflow::worker_pool& pool) {
    std::vector<double> partial(static_cast<std::size_t>(zenflow::worker_pool::chunk_count(n, grain)), 0.0);
    pool.parallel_for(n, grain, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      double s = 0;
      for (auto i = b; i < e; ++i) {
        s += static_cast<double>(x[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(i)];
      }
      partial[static_cast<std::size_t>(c)] = s;
    });
    return std::accumulate(partial.begin(), partial.end(), 0.0);
  };
  zenflow::worker_pool single(1);
  zenflow::worker_pool_options o;
  o.threads = 4;
  o.reserved_cores_perc = 0.5;
  o.pin_threads = true;
  zenflow::worker_pool placed(o);
  const double ref = reduce(single);
  double naive = 0; // independent float64 reference, summed in one pass
  for (float v : x) {
    naive += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(ref, naive, 1e-9 * naive);
  for (int rep = 0; rep < 5; ++rep) {
    EXPECT_EQ(reduce(placed), ref); // bit-identical whatever the threads and their placement
  }
}

} // namespace

// The fork/join protocol itself: every chunk exactly once, at every thread count, many times over
// (a lost or doubled chunk would show up as a count other than 1).
namespace {

struct draw { // seeded integers in [lo, hi]
  std::mt19937_64 gen;
  std::int64_t operator()(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  }
};

TEST(worker_pool, every_chunk_runs_exactly_once_at_every_thread_count) {
  draw gen{std::mt19937_64(zf_test::base_seed() + 17)};
  for (unsigned threads : {1u, 2u, 3u, 5u}) {
    for (unsigned spin : {0u, 50u}) {
      zenflow::worker_pool_options o;
      o.threads = threads;
      o.spin_microseconds = spin;
      zenflow::worker_pool pool(o);
      ASSERT_EQ(pool.size(), threads);
      for (int round = 0; round < 200; ++round) {
        const auto n = static_cast<std::int64_t>(gen(0, 3000));
        const auto grain = static_cast<std::int64_t>(gen(1, 300));
        const std::int64_t chunks = zenflow::worker_pool::chunk_count(n, grain);
        std::vector<std::atomic<int>> runs(static_cast<std::size_t>(chunks));
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, grain, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
          ASSERT_EQ(b, c * grain);
          ASSERT_EQ(e, std::min(n, (c + 1) * grain));
          runs[static_cast<std::size_t>(c)].fetch_add(1, std::memory_order_relaxed);
          for (auto i = b; i < e; ++i) {
            hits[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
          }
        });
        for (const auto& r : runs) {
          ASSERT_EQ(r.load(), 1) << "threads " << threads << " n " << n << " grain " << grain;
        }
        for (const auto& h : hits) {
          ASSERT_EQ(h.load(), 1);
        }
      }
    }
  }
}

TEST(worker_pool, one_chunk_stays_on_the_calling_thread) {
  zenflow::worker_pool pool(4);
  const auto me = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(1000, 1000, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(c, 0);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(worker_pool, without_a_pool_the_same_chunks_run_in_order_on_the_caller) {
  std::vector<std::int64_t> seen;
  zenflow::parallel_for(nullptr, 1003, 64, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    seen.push_back(c);
    EXPECT_EQ(b, c * 64);
    EXPECT_EQ(e, std::min<std::int64_t>(1003, b + 64));
  });
  std::vector<std::int64_t> want(16);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
  // Through a pool the same boundaries, so a chunk-ordered reduction gives the same bits.
  const auto x = zf_test::random_values<float>(100003, zf_test::base_seed() + 5);
  auto reduce = [&](zenflow::worker_pool* pool) {
    std::vector<float> part(static_cast<std::size_t>(zenflow::worker_pool::chunk_count(100003, 777)));
    zenflow::parallel_for(pool, 100003, 777, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      float s = 0.0f;
      for (auto i = b; i < e; ++i) {
        s += x[static_cast<std::size_t>(i)] * x[static_cast<std::size_t>(i)];
      }
      part[static_cast<std::size_t>(c)] = s;
    });
    float s = 0.0f;
    for (float p : part) {
      s += p;
    }
    return s;
  };
  const float alone = reduce(nullptr);
  for (unsigned threads : {2u, 3u, 7u}) {
    zenflow::worker_pool pool(threads);
    for (int r = 0; r < 20; ++r) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(reduce(&pool)), std::bit_cast<std::uint32_t>(alone));
    }
  }
}

TEST(worker_pool, the_first_exception_reaches_the_caller_from_any_thread) {
  for (unsigned threads : {1u, 2u, 4u}) {
    zenflow::worker_pool pool(threads);
    for (std::int64_t bad : {0, 1, 50, 99}) {
      std::atomic<int> ran{0};
      try {
        pool.parallel_for(100, 1, [&](std::int64_t c, std::int64_t, std::int64_t) {
          if (c == bad || c == bad + 3) {
            throw std::runtime_error("chunk " + std::to_string(c));
          }
          ran.fetch_add(1, std::memory_order_relaxed);
        });
        ADD_FAILURE() << "no exception";
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_TRUE(what == "chunk " + std::to_string(bad) || what == "chunk " + std::to_string(bad + 3))
            << what;
      }
      EXPECT_LT(ran.load(), 100);
      int after = 0; // still usable, and every chunk of the next call runs
      std::atomic<int> chunks{0};
      pool.parallel_for(64, 4, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        chunks.fetch_add(static_cast<int>(e - b), std::memory_order_relaxed);
      });
      after = chunks.load();
      EXPECT_EQ(after, 64);
    }
  }
}

TEST(worker_pool, a_nested_call_runs_on_the_thread_that_issues_it) {
  zenflow::worker_pool pool(3);
  std::vector<std::atomic<int>> hits(40 * 50);
  std::atomic<int> foreign{0};
  pool.parallel_for(40, 1, [&](std::int64_t outer, std::int64_t, std::int64_t) {
    const auto me = std::this_thread::get_id();
    pool.parallel_for(50, 7, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      if (std::this_thread::get_id() != me) {
        foreign.fetch_add(1, std::memory_order_relaxed);
      }
      for (auto i = b; i < e; ++i) {
        hits[static_cast<std::size_t>(outer * 50 + i)].fetch_add(1, std::memory_order_relaxed);
      }
    });
  });
  EXPECT_EQ(foreign.load(), 0);
  for (const auto& h : hits) {
    ASSERT_EQ(h.load(), 1);
  }
}

TEST(worker_pool, concurrent_callers_each_get_their_own_complete_result) {
  zenflow::worker_pool pool(3);
  constexpr int callers = 4;
  std::vector<std::int64_t> sums(callers, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&, t] {
      const std::int64_t n = 5000 + t * 1000;
      for (int round = 0; round < 100; ++round) {
        std::vector<std::int64_t> part(static_cast<std::size_t>(zenflow::worker_pool::chunk_count(n, 97)), 0);
        pool.parallel_for(n, 97, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
          std::int64_t s = 0;
          for (auto i = b; i < e; ++i) {
            s += i;
          }
          part[static_cast<std::size_t>(c)] = s;
        });
        const std::int64_t total = std::accumulate(part.begin(), part.end(), std::int64_t{0});
        if (total != n * (n - 1) / 2) {
          sums[static_cast<std::size_t>(t)] = -1;
          return;
        }
        sums[static_cast<std::size_t>(t)] = total;
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (int t = 0; t < callers; ++t) {
    const std::int64_t n = 5000 + t * 1000;
    EXPECT_EQ(sums[static_cast<std::size_t>(t)], n * (n - 1) / 2) << "caller " << t;
  }
}

TEST(worker_pool, shuts_down_cleanly_right_after_work_at_any_moment) {
  // Destroyed while workers are still leaving the last job, spinning, or asleep; with throwing
  // jobs too. A hang or a use after free (ThreadSanitizer, ASan) fails this test.
  draw gen{std::mt19937_64(zf_test::base_seed() + 3)};
  for (int round = 0; round < 60; ++round) {
    zenflow::worker_pool_options o;
    o.threads = 1 + static_cast<unsigned>(round % 4);
    o.spin_microseconds = (round % 3 == 0) ? 0u : 20u;
    zenflow::worker_pool pool(o);
    const int jobs = static_cast<int>(gen(0, 5));
    std::atomic<std::int64_t> total{0};
    for (int j = 0; j < jobs; ++j) {
      try {
        pool.parallel_for(256, 8, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
          if (j % 2 == 1 && c == 31) {
            throw std::runtime_error("late chunk");
          }
          total.fetch_add(e - b, std::memory_order_relaxed);
        });
      } catch (const std::runtime_error&) {
      }
    }
    if (round % 5 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100)); // let the workers fall asleep
    }
  }
}

} // namespace
