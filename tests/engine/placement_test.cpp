// Core placement (config pin_host_threads, pt_reserved_cores_perc): the engine's host threads run
// on the cores the split leaves them, as the system reports each thread's affinity; the training
// thread keeps its own; results have the same bits as an unpinned one-thread engine; a share that
// leaves no core is rejected by name and changes nothing. Every body runs on the host backend and
// on the emulated device (its consumer thread), as the other engine cases.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#if defined(__linux__)
#  include <dirent.h>
#  include <sched.h>
#endif

#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>

#include "engine_cases.hpp"

namespace {

using zf_engine_test::emulated_driver;
using zf_engine_test::host_driver;
using zf_engine_test::model;
using zf_engine_test::same_bits;
using zf_engine_test::shape;

#if defined(__linux__)
/// Every thread of this process and its affinity, from /proc/self/task and sched_getaffinity.
std::map<int, std::vector<int>> thread_affinities() {
  std::map<int, std::vector<int>> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) {
    return out;
  }
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    const int tid = std::stoi(e->d_name);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(tid, sizeof(set), &set) != 0) {
      continue; // the thread ended meanwhile
    }
    std::vector<int> cores;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        cores.push_back(c);
      }
    }
    out[tid] = cores;
  }
  closedir(dir);
  return out;
}
#endif

/// The split written out independently of core/placement.hpp: the smallest r with r >= p * n
/// (the double product, as Python's math.ceil(p * n)), the lowest r cores for training.
struct expected_split {
  std::vector<int> training, workers;
};
expected_split split_by_hand(std::vector<int> allowed, double perc) {
  std::sort(allowed.begin(), allowed.end());
  const double product = perc * static_cast<double>(allowed.size());
  std::size_t r = 0;
  while (static_cast<double>(r) < product) {
    ++r;
  }
  if (r == 0) {
    return {allowed, allowed};
  }
  return {std::vector<int>(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(r)),
          std::vector<int>(allowed.begin() + static_cast<std::ptrdiff_t>(r), allowed.end())};
}

/// Large enough for several chunks of the host pools (32K elements each), one matrix per working
/// layout and a vector.
const std::vector<shape> kPoolShapes = {{true, 512, 256}, {false, 1, 77}, {true, 301, 129}};

zenflow::config pinned_config(unsigned threads) {
  auto cfg = zf_engine_test::small_config(threads);
  cfg.pin_host_threads = true;
  cfg.pt_reserved_cores_perc = 0.5;
  return cfg;
}

/// Weights after every step and the final optimizer state of an engine with pinned threads (3 per
/// pool) equal, bit for bit, those of an unpinned one-thread engine, in every mode.
template <template <class> class Driver>
void expect_placement_keeps_bits() {
  for (auto [name, base] : zf_engine_test::all_modes(1)) {
    SCOPED_TRACE(name);
    auto pinned = base;
    pinned.pin_host_threads = true;
    pinned.pt_reserved_cores_perc = 0.5;
    pinned.host_threads = 3;
    model<float> ma(kPoolShapes, 2026), mb(kPoolShapes, 2026);
    Driver<float> da(ma), db(mb);
    const auto ea = da.make_engine(base);
    const auto eb = db.make_engine(pinned);
    std::vector<zenflow::param_id> ia, ib;
    for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
      ia.push_back(da.add(*ea, p));
      ib.push_back(db.add(*eb, p));
    }
    da.initialize(*ea);
    db.initialize(*eb);
    ASSERT_TRUE(eb->stats().placement.pinned);
    for (int t = 0; t < 14; ++t) {
      ma.next_grads();
      mb.g = ma.g;
      const auto before = ma.w[0];
      (void)da.step(*ea, 1e-2f);
      (void)db.step(*eb, 1e-2f);
      EXPECT_FALSE(same_bits(before, ma.w[0])) << "step " << t << " changed nothing";
      for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
        ASSERT_TRUE(same_bits(ma.w[p], mb.w[p])) << "step " << t << ", param " << p;
      }
    }
    da.flush(*ea);
    db.flush(*eb);
    for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
      EXPECT_TRUE(same_bits(ma.w[p], mb.w[p])) << p;
      const auto sa = da.state(*ea, ia[p]);
      const auto sb = db.state(*eb, ib[p]);
      EXPECT_EQ(0, std::memcmp(sa.master.data(), sb.master.data(), sa.master.size() * 4)) << p;
      EXPECT_EQ(0, std::memcmp(sa.m.data(), sb.m.data(), sa.m.size() * 4)) << p;
      EXPECT_EQ(0, std::memcmp(sa.v.data(), sb.v.data(), sa.v.size() * 4)) << p;
    }
  }
}

/// The threads the engine starts run on the split's worker cores, as the system reports them: the
/// window executor (overlap), both pools' workers (threads - 1 each) and, on a device backend, the
/// consumer thread; the training thread's affinity is untouched; stats().placement says the same.
template <template <class> class Driver>
void expect_threads_on_the_worker_cores(bool device_backend) {
#if defined(__linux__)
  const std::vector<int> allowed = zenflow::allowed_cores();
  if (allowed.size() < 2) {
    GTEST_SKIP() << "one allowed core: nothing to split";
  }
  const expected_split want = split_by_hand(allowed, 0.5);
  const unsigned threads = 3;
  model<float> m(kPoolShapes, 7);
  Driver<float> d(m);
  const auto before = thread_affinities();
  const auto training_before = zenflow::current_thread_affinity();
  const auto eng = d.make_engine(pinned_config(threads));
  for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
    (void)d.add(*eng, p);
  }
  d.initialize(*eng);
  const auto after = thread_affinities();

  const zenflow::host_placement& place = eng->stats().placement;
  EXPECT_TRUE(place.pinned);
  EXPECT_EQ(place.threads, threads);
  EXPECT_EQ(place.worker_cores, want.workers);
  EXPECT_EQ(place.training_cores, want.training);
  EXPECT_EQ(place.numa_nodes, zenflow::numa_nodes_of(want.workers));
  EXPECT_NE(place.describe().find("pinned to cores"), std::string::npos) << place.describe();
  EXPECT_EQ(zenflow::current_thread_affinity(), training_before) << "the training thread was moved";

  // A pool worker may narrow its mask within the set (worker_pool's move off the caller's CPU).
  const std::set<int> workers(want.workers.begin(), want.workers.end());
  std::size_t on_workers = 0;
  for (const auto& [tid, cores] : after) {
    if (before.count(tid) != 0) {
      continue;
    }
    const bool inside = !cores.empty() &&
                        std::all_of(cores.begin(), cores.end(), [&](int c) { return workers.count(c) != 0; });
    on_workers += inside ? 1 : 0;
  }
  const std::size_t expected = 1 + 2 * (threads - 1) + (device_backend ? 1 : 0);
  EXPECT_EQ(on_workers, expected) << "threads started by the engine on the worker cores";

  // The helper moves the training thread onto the reserved cores, as DeepSpeed does its process.
  ASSERT_TRUE(zenflow::pin_to_training_cores(place));
  EXPECT_EQ(zenflow::current_thread_affinity(), want.training);
  ASSERT_TRUE(zenflow::pin_current_thread(training_before)); // leave the test's thread as it was
#else
  (void)device_backend;
  GTEST_SKIP() << "thread affinity is Linux's";
#endif
}

/// A share that leaves the pinned threads no core: invalid_argument naming the key at
/// initialize(), before anything starts (no new thread, placement still empty), and validate()
/// already rejects 1.0; without pinning the same share is fine.
template <template <class> class Driver>
void expect_no_core_left_is_rejected() {
  const std::vector<int> allowed = zenflow::allowed_cores();
  // The smallest share whose ceil(p * n) is n: every allowed core for training.
  const double all_but_none =
      (static_cast<double>(allowed.size()) - 0.5) / static_cast<double>(allowed.size());
  auto cfg = pinned_config(1);
  cfg.pt_reserved_cores_perc = all_but_none;
  model<float> m(kPoolShapes, 11);
  Driver<float> d(m);
  const auto eng = d.make_engine(cfg);
  for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
    (void)d.add(*eng, p);
  }
#if defined(__linux__)
  const auto before = thread_affinities();
#endif
  const auto weights = m.w;
  zf_engine_test::expect_invalid([&] { d.initialize(*eng); },
                                 "'zero_optimization.zenflow.pt_reserved_cores_perc'");
#if defined(__linux__)
  EXPECT_EQ(thread_affinities().size(), before.size()) << "a thread was started";
#endif
  EXPECT_FALSE(eng->stats().placement.pinned);
  EXPECT_TRUE(eng->stats().placement.worker_cores.empty());
  for (std::size_t p = 0; p < kPoolShapes.size(); ++p) {
    EXPECT_TRUE(same_bits(weights[p], m.w[p])) << p;
  }

  auto one = pinned_config(1);
  one.pt_reserved_cores_perc = 1.0;
  zf_engine_test::expect_invalid([&] { one.validate(); },
                                 "'zero_optimization.zenflow.pt_reserved_cores_perc'");
  one.pin_host_threads = false;
  EXPECT_NO_THROW(one.validate());
}

TEST(engine_placement, pinned_threads_give_the_same_bits_host) {
  expect_placement_keeps_bits<host_driver>();
}
TEST(engine_placement, pinned_threads_give_the_same_bits_emulated) {
  expect_placement_keeps_bits<emulated_driver>();
}
TEST(engine_placement, threads_run_on_the_worker_cores_host) {
  expect_threads_on_the_worker_cores<host_driver>(false);
}
TEST(engine_placement, threads_run_on_the_worker_cores_emulated) {
  expect_threads_on_the_worker_cores<emulated_driver>(true);
}
TEST(engine_placement, a_share_that_leaves_no_core_is_rejected_and_changes_nothing_host) {
  expect_no_core_left_is_rejected<host_driver>();
}
TEST(engine_placement, a_share_that_leaves_no_core_is_rejected_and_changes_nothing_emulated) {
  expect_no_core_left_is_rejected<emulated_driver>();
}

} // namespace
