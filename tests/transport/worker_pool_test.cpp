// cpu tier for the worker pool's placement: the DeepSpeed-style core split, pinning, and the
// deterministic parallel-for on a placed pool. (The pool's basic behaviour is in tests/core.)
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/transport/worker_pool.hpp>

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
