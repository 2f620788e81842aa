// core/placement.hpp: DeepSpeed's split of the allowed cores (against a brute-force count on
// random core lists), the sysfs cpulist parser and NUMA lookup (on a fake sysfs tree), and a
// worker_pool confined to a set (each worker's affinity, read back by the system from inside
// the chunks it runs).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>

namespace {

using zenflow::core_split;
using zenflow::reserve_training_cores;

/// The reserve counted by brute force: the smallest r with r >= perc * n (the double product).
std::size_t reserve_by_counting(std::size_t n, double perc) {
  const double product = perc * static_cast<double>(n);
  std::size_t r = 0;
  while (static_cast<double>(r) < product) {
    ++r;
  }
  return r;
}

TEST(placement, reserve_training_cores_is_deepspeeds_ceil_on_random_core_lists) {
  std::mt19937_64 gen(35);
  std::uniform_int_distribution<int> core(0, 255);
  std::uniform_int_distribution<int> count(1, 64);
  std::uniform_real_distribution<double> share(0.0, 1.0);
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int> cores(static_cast<std::size_t>(count(gen)));
    for (int& c : cores) {
      c = core(gen);
    }
    std::set<int> distinct(cores.begin(), cores.end());
    const std::vector<int> sorted(distinct.begin(), distinct.end());
    const double perc = trial % 10 == 0 ? 0.0 : share(gen);
    const std::size_t r = reserve_by_counting(sorted.size(), perc);
    if (r >= sorted.size()) {
      EXPECT_THROW((void)reserve_training_cores(cores, perc), zenflow::invalid_argument);
      continue;
    }
    const core_split s = reserve_training_cores(cores, perc);
    if (r == 0) {
      EXPECT_EQ(s.training, sorted);
      EXPECT_EQ(s.workers, sorted);
    } else {
      EXPECT_EQ(s.training,
                std::vector<int>(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(r)));
      EXPECT_EQ(s.workers, std::vector<int>(sorted.begin() + static_cast<std::ptrdiff_t>(r), sorted.end()));
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(placement, reserve_training_cores_known_values) {
  const std::vector<int> ten = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  // 0.07 x 100 is 7.000000000000001 in doubles: Python's math.ceil gives 8, and so do we.
  std::vector<int> hundred(100);
  for (int c = 0; c < 100; ++c) {
    hundred[static_cast<std::size_t>(c)] = 199 - 2 * c; // unsorted, not 0..99
  }
  EXPECT_EQ(reserve_training_cores(hundred, 0.07).training.size(), 8u);
  EXPECT_EQ(reserve_training_cores(hundred, 0.07).training.front(), 1);
  EXPECT_EQ(reserve_training_cores(ten, 0.3).training, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(reserve_training_cores(ten, 0.5).workers, (std::vector<int>{5, 6, 7, 8, 9}));
  EXPECT_EQ(reserve_training_cores(ten, 0.01).training, (std::vector<int>{0}));
  EXPECT_EQ(zenflow::training_core_count(100, 0.07), 8);
  EXPECT_EQ(zenflow::training_core_count(100, 0.29), 29); // 28.999999999999996
}

TEST(placement, reserve_training_cores_rejects_bad_shares_by_name) {
  const std::vector<int> four = {0, 1, 2, 3};
  for (double bad : {-0.1, 1.5, std::nan(""), 1.0}) {
    try {
      (void)reserve_training_cores(four, bad, "zenflow::test", "share");
      ADD_FAILURE() << bad;
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'share'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)reserve_training_cores(std::vector<int>{}, 0.0), zenflow::invalid_argument);
  EXPECT_THROW((void)reserve_training_cores(std::vector<int>{3}, 0.5), zenflow::invalid_argument);
  EXPECT_EQ(reserve_training_cores(std::vector<int>{3}, 0.0).workers, std::vector<int>{3});
}

TEST(placement, parse_cpu_list_reads_sysfs_lists) {
  EXPECT_EQ(zenflow::parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(zenflow::parse_cpu_list("5"), std::vector<int>{5});
  EXPECT_EQ(zenflow::parse_cpu_list("\n"), std::vector<int>{});
  EXPECT_EQ(zenflow::parse_cpu_list("7,2-3,2"), (std::vector<int>{2, 3, 7}));
}

TEST(placement, numa_nodes_of_reads_a_node_tree) {
  const auto root = std::filesystem::temp_directory_path() /
                    ("zf_numa_" + std::to_string(static_cast<unsigned>(std::random_device{}())));
  const auto node = [&](int id, const char* list) {
    std::filesystem::create_directories(root / ("node" + std::to_string(id)));
    std::ofstream(root / ("node" + std::to_string(id)) / "cpulist") << list;
  };
  node(0, "0-3,8-11\n");
  node(1, "4-7,12-15\n");
  std::filesystem::create_directories(root / "power"); // not a node
  EXPECT_EQ(zenflow::numa_nodes_of(std::vector<int>{1, 2}, root.string()), std::vector<int>{0});
  EXPECT_EQ(zenflow::numa_nodes_of(std::vector<int>{12, 3}, root.string()), (std::vector<int>{0, 1}));
  EXPECT_EQ(zenflow::numa_nodes_of(std::vector<int>{16}, root.string()), std::vector<int>{}); // unknown
  EXPECT_EQ(zenflow::numa_nodes_of(std::vector<int>{1}, (root / "absent").string()), std::vector<int>{});
  std::filesystem::remove_all(root);

  zenflow::host_placement p;
  p.pinned = true;
  p.threads = 3;
  p.worker_cores = {4, 5, 6, 9};
  p.training_cores = {0, 1, 2, 3};
  p.numa_nodes = {0};
  EXPECT_EQ(p.describe(), "pinned to cores 4-6,9 (NUMA node 0), training cores 0-3, 3 threads per pool");
  p.numa_nodes = {};
  EXPECT_NE(p.describe().find("NUMA node unknown"), std::string::npos);
}

#if defined(__linux__)
TEST(placement, a_confined_pools_workers_run_on_the_set_only) {
  const std::vector<int> allowed = zenflow::allowed_cores();
  if (allowed.size() < 2) {
    GTEST_SKIP() << "one allowed core";
  }
  const std::vector<int> set(allowed.end() - 1, allowed.end()); // the last core, as the split does
  zenflow::worker_pool_options o;
  o.threads = 4;
  o.confine_to = set;
  zenflow::worker_pool pool(o);
  EXPECT_TRUE(pool.confined());
  EXPECT_EQ(pool.worker_cores(), set);
  for (unsigned i = 0; i + 1 < pool.size(); ++i) {
    EXPECT_EQ(pool.worker_affinity(i), set) << "worker " << i;
  }
  // From inside the chunks: every thread but the caller reports the set.
  std::mutex mu;
  std::set<std::thread::id> seen_off_set;
  std::set<std::thread::id> workers_seen;
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 50; ++round) {
    pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t, std::int64_t) {
      const auto id = std::this_thread::get_id();
      if (id == caller) {
        return;
      }
      const auto mine = zenflow::current_thread_affinity();
      std::lock_guard lock(mu);
      workers_seen.insert(id);
      if (mine != set) {
        seen_off_set.insert(id);
      }
    });
  }
  EXPECT_TRUE(seen_off_set.empty());
  EXPECT_EQ(zenflow::current_thread_affinity(), allowed) << "the caller was moved";
}
#endif

} // namespace
