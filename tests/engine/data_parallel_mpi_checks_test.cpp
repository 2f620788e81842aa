// The data-parallel engine's checks under mpiexec (2 and 3 ranks; part of zf_engine_dp_mpi_tests,
// whose main is in data_parallel_mpi_test.cpp): the partition, mismatched configurations and
// parameter lists, per-rank checkpoints, a missing rank as a timeout, and what a selection step
// asks of the device (waits, launches, mixed working types).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mpi.h>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/plan.hpp>

#include "data_parallel_support.hpp"
#include "engine_harness.hpp"

namespace {

using namespace std::chrono_literals;
using namespace zf_dp_test;
using zf_engine_test::kShapes;
using zf_engine_test::small_config;

TEST(engine_data_parallel, the_partition_splits_every_host_matrix) {
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(small_config(), {}, make_comm());
  register_all(e, w, g);
  e.initialize();
  const auto& part = e.partition();
  ASSERT_EQ(part.ranks(), world_size());
  ASSERT_EQ(part.matrices(), 2u); // the two matrices of kShapes
  std::size_t m = 0;
  for (const auto& sh : kShapes) {
    if (!sh.matrix) {
      continue;
    }
    std::int64_t covered = 0;
    for (int r = 0; r < world_size(); ++r) {
      EXPECT_EQ(part.begin(m, r), covered);
      EXPECT_GE(part.count(m, r), sh.channels / world_size());
      EXPECT_LE(part.count(m, r), sh.channels / world_size() + 1);
      covered = part.end(m, r);
    }
    EXPECT_EQ(covered, sh.channels);
    ++m;
  }
}

// Each rank copies down only its block's unselected rows and, over a device communicator, sends
// its share of a window's new weights up through its upload stage (four pinned chunks of a slot):
// its D2H ring is sized by its block, and over the ranks the rings and stages add up to what the
// planner counts for as many GPUs. Over a host communicator the window is gathered in a host
// buffer of every row.
template <bool Device>
void rings_and_uploads_are_sized_by_the_block() {
  const std::vector<shape> shapes = {{true, 40, 1024}, {false, 1, 5}, {true, 27, 1024}};
  auto w = initial_weights<float>(shapes);
  auto g = w;
  zenflow::config cfg = small_config();
  cfg.ring_slots = 0; // sized by the engine: one 4 KiB slot per 1024-float row
  zenflow::emulated_device device;
  using backend = std::conditional_t<Device, zenflow::emulated_backend, zenflow::host_backend>;
  using comm = std::conditional_t<Device, zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                  zenflow::mpi_communicator>;
  auto make = [&] {
    if constexpr (Device) {
      return zenflow::engine<backend, comm>(cfg, zenflow::emulated_backend{device},
                                            comm(device, make_comm()));
    } else {
      return zenflow::engine<backend, comm>(cfg, {}, make_comm());
    }
  };
  auto e = make();
  (void)register_all(e, w, g, shapes);
  e.initialize();
  const auto mine = e.stats().memory;
  const auto all = e.stats_over_ranks();

  zenflow::plan_model m;
  m.elem_bytes = 4;
  m.matrices = {{40, 1024, 1}, {27, 1024, 1}};
  m.vectors = {{5, 1}};
  zenflow::plan_hardware hw;
  hw.host_bytes_per_s = 10e9;
  hw.pcie_bytes_per_s = 10e9;
  hw.step_s = 0.1;
  hw.gpus = world_size();
  const auto r = zenflow::plan(m, hw, zenflow::plan_config::of(cfg));
  hw.gpus = 1;
  const auto one = zenflow::plan(m, hw, zenflow::plan_config::of(cfg));
  EXPECT_EQ(static_cast<double>(all.memory.host_ring), r.host.ring);
  if (world_size() > 1) {
    EXPECT_LT(static_cast<double>(mine.host_ring), one.host.ring); // a block's rows, not the model's
  }
  const double whole = (40.0 + 27.0) * 1024 * 4;
  if (Device) {
    EXPECT_EQ(static_cast<double>(mine.host_upload), 4.0 * 4096); // the stage: no copy of the weights
    EXPECT_EQ(static_cast<double>(all.memory.host_upload), r.host.upload);
    EXPECT_EQ(r.host.upload, world_size() * 4.0 * 4096);
  } else {
    EXPECT_EQ(static_cast<double>(mine.host_upload), whole); // gathered in the host buffer: all of it
  }
}

TEST(engine_data_parallel, rings_and_uploads_are_sized_by_the_block) {
  rings_and_uploads_are_sized_by_the_block<false>();
}

TEST(engine_data_parallel, rings_and_uploads_are_sized_by_the_block_over_a_device_communicator) {
  rings_and_uploads_are_sized_by_the_block<true>();
}

TEST(engine_data_parallel, a_different_configuration_fails_on_every_rank) {
  auto cfg = small_config();
  if (world_rank() == world_size() - 1) {
    cfg.topk_ratio = 0.5;
  }
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(cfg, {}, make_comm());
  register_all(e, w, g);
  zf_engine_test::expect_invalid([&] { e.initialize(); }, "the configuration");
  EXPECT_FALSE(e.initialized()); // nothing changed: still registering
}

TEST(engine_data_parallel, a_different_parameter_list_fails_on_every_rank) {
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(small_config(), {}, make_comm());
  register_all(e, w, g);
  std::vector<float> extra(world_rank() == 0 ? 6 : 7, 1.0f), extra_g(extra.size(), 0.5f);
  e.add_vector(extra.data(), extra_g.data(), static_cast<std::int64_t>(extra.size()));
  zf_engine_test::expect_invalid([&] { e.initialize(); }, "the parameter list");
  EXPECT_FALSE(e.initialized());
}

// What a data-parallel step cannot take, refused by name before anything changes: a parameter
// announced twice in one step (its bucket would be reduced twice) and a step that leaves
// parameters without a gradient (every rank steps every parameter). The weights stay as they were,
// no step is counted, and the step then runs on every rank.
TEST(engine_data_parallel, a_second_announcement_and_no_grad_are_refused_and_change_nothing) {
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(small_config(), {}, make_comm());
  const auto ids = register_all(e, w, g);
  e.initialize();
  e.grad_ready(ids[0]);
  zf_engine_test::expect_invalid([&] { e.grad_ready(ids[0]); },
                                 "'param' was already announced for this step");
  const auto before = w;
  const zenflow::param_id without[] = {ids[1]};
  zenflow::step_options opt;
  opt.no_grad = without;
  zf_engine_test::expect_invalid([&] { (void)e.step(1e-2f, nullptr, opt); },
                                 "'options.no_grad' is not supported data parallel");
  EXPECT_EQ(w, before);
  EXPECT_EQ(e.steps(), 0);
  (void)e.step(1e-2f);
  EXPECT_EQ(e.steps(), 1);
  EXPECT_NE(w, before);
}

// Every rank saves its own file (checkpoint_rank_path); a fresh N-rank engine loaded from them
// continues exactly as the uninterrupted run. `Device`: on the emulated device over MPI as a device
// communicator (the path NCCL takes: the state's gathers through the device staging buffer).
template <bool Device>
void save_and_load_every_rank_its_own_file() {
  const int rank = world_rank();
  const int n = world_size();
  char name[256] = {};
  if (rank == 0) { // one name for every rank (each file adds its rank)
    std::snprintf(name, sizeof name, "%szf_dp_ckpt_%s%lld", ::testing::TempDir().c_str(),
                  Device ? "dev_" : "",
                  static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string base = name;
  auto w = initial_weights<float>();
  std::vector<std::vector<float>> g(kShapes.size());
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    g[p].resize(w[p].size());
  }
  zenflow::emulated_device device; // outlives the engines
  const cudaStream_t stream = Device ? device.create_stream() : nullptr;
  auto feed = [&](std::int64_t t) {
    if (Device) {
      device.synchronize_stream(stream); // the step before has read the gradients
    }
    for (std::size_t p = 0; p < kShapes.size(); ++p) {
      const auto mine = grad_of<float>(rank, t, p, kShapes[p]);
      std::copy(mine.begin(), mine.end(), g[p].begin());
    }
  };
  using backend = std::conditional_t<Device, zenflow::emulated_backend, zenflow::host_backend>;
  using comm = std::conditional_t<Device, zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                  zenflow::mpi_communicator>;
  auto make = [&] {
    if constexpr (Device) {
      return std::pair{zenflow::emulated_backend{device}, comm(device, make_comm())};
    } else {
      return std::pair{zenflow::host_backend{}, make_comm()};
    }
  };
  const auto cfg = small_config();
  auto [backend_a, comm_a] = make();
  zenflow::engine<backend, comm> a(cfg, backend_a, std::move(comm_a));
  const auto ids_a = register_all(a, w, g);
  a.initialize(stream);
  for (std::int64_t t = 0; t < 7; ++t) {
    feed(t);
    (void)a.step(1e-2f, stream);
  }
  a.save(base, stream);
  EXPECT_TRUE(std::ifstream(zenflow::checkpoint_rank_path(base, rank, n)).good());
  device.synchronize();
  auto w_saved = w; // the working weights are the user's to save
  for (std::int64_t t = 7; t < 14; ++t) {
    feed(t);
    (void)a.step(1e-2f, stream);
  }
  a.flush(stream);
  device.synchronize(); // the stream's last collectives done before this thread calls MPI itself
  auto [backend_b, comm_b] = make();
  zenflow::engine<backend, comm> b(cfg, backend_b, std::move(comm_b));
  const auto ids_b = register_all(b, w_saved, g);
  b.initialize(stream);
  b.load(base, stream);
  for (std::int64_t t = 7; t < 14; ++t) {
    feed(t);
    (void)b.step(1e-2f, stream);
  }
  b.flush(stream);
  device.synchronize();
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    EXPECT_EQ(std::memcmp(w[p].data(), w_saved[p].data(), w[p].size() * 4), 0) << "param " << p;
    // Each rank's file holds its block; the gathered state of the resumed run is the same.
    const auto sa = a.state(ids_a[p], stream);
    const auto sb = b.state(ids_b[p], stream);
    EXPECT_EQ(std::memcmp(sa.master.data(), sb.master.data(), sa.master.size() * 4), 0) << "param " << p;
    EXPECT_EQ(std::memcmp(sa.m.data(), sb.m.data(), sa.m.size() * 4), 0) << "param " << p;
    EXPECT_EQ(std::memcmp(sa.v.data(), sb.v.data(), sa.v.size() * 4), 0) << "param " << p;
    EXPECT_EQ(sa.counts, sb.counts) << "param " << p;
  }
  EXPECT_EQ(a.stats().memory.host_state, b.stats().memory.host_state);
  std::remove(zenflow::checkpoint_rank_path(base, rank, n).c_str());
}

TEST(engine_data_parallel, save_and_load_every_rank_its_own_file) {
  save_and_load_every_rank_its_own_file<false>();
}

TEST(engine_data_parallel, save_and_load_every_rank_its_own_file_over_a_device_communicator) {
  save_and_load_every_rank_its_own_file<true>();
}

// `load` refuses with checkpoint_error of `kind` naming `file`, and the engine is unchanged (its
// step count, every parameter's device set and state).
template <class Engine>
void expect_refused_unchanged(Engine& e,
                              const std::vector<zenflow::param_id>& ids,
                              const std::string& path,
                              zenflow::checkpoint_errc kind,
                              const std::string& file) {
  const auto steps = e.steps();
  std::vector<std::vector<std::int32_t>> sel;
  std::vector<std::vector<float>> master;
  for (const auto id : ids) {
    sel.push_back(e.selected(id));
    master.push_back(e.state(id).master);
  }
  try {
    e.load(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const zenflow::checkpoint_error& err) {
    EXPECT_EQ(err.kind(), kind) << err.what();
    EXPECT_NE(std::string(err.what()).find(file), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.steps(), steps);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(e.selected(ids[p]), sel[p]) << "param " << p;
    EXPECT_EQ(e.state(ids[p]).master, master[p]) << "param " << p;
  }
}

// A rank's file of another world given by its own name (docs/checkpoint.md, "Another world
// size"): a one-rank engine reads it as a world of one, whose header says otherwise, and refuses it
// naming it, changing nothing. (Given the checkpoint's name, every engine loads another world's
// files re-sharded: sharded_mpi_checkpoint_test.cpp.)
TEST(engine_data_parallel, another_worlds_rank_file_given_by_its_name_is_refused) {
  const int rank = world_rank();
  const int n = world_size();
  char name[256] = {};
  if (rank == 0) { // one name for every rank
    std::snprintf(name, sizeof name, "%szf_dp_world_%lld", ::testing::TempDir().c_str(),
                  static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string base = name;
  const auto cfg = small_config();
  auto w1 = initial_weights<float>();
  auto g1 = w1;
  zenflow::engine<zenflow::host_backend> one(cfg);
  const auto ids1 = register_all(one, w1, g1);
  one.initialize();
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> dp(cfg, {}, make_comm());
  (void)register_all(dp, w, g);
  dp.initialize();
  for (int t = 0; t < 3; ++t) {
    (void)one.step(1e-2f);
    (void)dp.step(1e-2f);
  }
  dp.save(base);
  // The header's rank and world differ from the world of one the name makes it.
  const std::string rank_file = zenflow::checkpoint_rank_path(base, rank, n);
  expect_refused_unchanged(one, ids1, rank_file, zenflow::checkpoint_errc::other_rank, rank_file);
  std::remove(rank_file.c_str());
}

// Over a device communicator the gradients' reduction is one batched gather and one batched
// scatter per bucket (dp/grad_buckets.hpp), however many matrices (zenflow mode's reduce-scatter
// by owner, gpu_adamw's all-reduce): these models fit one bucket of the default size, so two
// launches a step (it was one of each per parameter, and per split matrix one more gather per
// owner and one memset). The results are the one-rank run's bits (data_parallel_mpi_test.cpp);
// here, the launches.
TEST(engine_data_parallel, the_reduction_is_two_launches_per_step_whatever_the_matrices) {
  const int rank = world_rank();
  using comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  for (const auto mode : {zenflow::optimizer_mode::zenflow, zenflow::optimizer_mode::gpu_adamw}) {
    for (const int copies : {1, 3}) {
      SCOPED_TRACE(testing::Message()
                   << "mode " << static_cast<int>(mode) << ", " << copies << "x the model");
      std::vector<zf_engine_test::shape> shapes;
      for (int k = 0; k < copies; ++k) {
        shapes.insert(shapes.end(), kShapes.begin(), kShapes.end());
      }
      auto w = initial_weights<float>(shapes);
      auto g = w;
      auto cfg = small_config();
      cfg.mode = mode;
      zenflow::emulated_device device;
      zenflow::emulated_backend_counts counts;
      const cudaStream_t stream = device.create_stream();
      zenflow::engine<zenflow::emulated_backend, comm> e(cfg, zenflow::emulated_backend{device, &counts},
                                                         comm(device, make_comm()));
      register_all(e, w, g, shapes);
      e.initialize(stream);
      for (std::int64_t t = 0; t < 5; ++t) { // a selection at step 0, then plain steps
        device.synchronize_stream(stream);   // the step before has read the gradients
        for (std::size_t p = 0; p < shapes.size(); ++p) {
          const auto mine = grad_of<float>(rank, t, p, shapes[p]);
          std::copy(mine.begin(), mine.end(), g[p].begin()); // in place: the engine holds g[p]
        }
        auto before = counts.runs_by_name();
        (void)e.step(1e-2f, stream);
        auto after = counts.runs_by_name();
        EXPECT_EQ(after["zenflow::engine: reduction bucket rows"] -
                      before["zenflow::engine: reduction bucket rows"],
                  2u)
            << "step " << t;
      }
      e.flush(stream);
      device.synchronize(); // the stream's collectives done before the next engine's MPI calls
    }
  }
}

// A re-selection with the owner partition migrates every matrix without a host wait of its own:
// the entering rows are gathered into the device stage in stream order (over a device
// communicator on the device, over a host one on the host and then up in one copy), and a row
// that leaves goes straight home to its owner's block. So a run's stream synchronizations
// (emulated_backend_counts::waits), step by step, are the same for 3x the matrices as for 1x;
// before, a selection over a device communicator synchronized once per matrix (its gather
// through host memory; 4 waits at 1x, 8 at 3x). The results are the one-rank run's bits and the
// bytes copied down the formula's (data_parallel_mpi_test.cpp); here, the waits. Over a device
// communicator the entering rows' gradients are gathered from and scattered to their owners in
// one batched launch each (they were one launch per matrix and owner): the same at 3x as at 1x.
struct per_step {
  std::vector<std::uint64_t> waits, entering_launches;
  zenflow::emulated_device_stats steady{}; // the device's counts over steps 4 to 17 (issue 31)
  zenflow::emulated_device_stats total{};  // and over the whole run
  std::vector<std::string> reports;        // the device's reports of broken rules
};
template <class Comm>
per_step waits_per_step(int copies, const std::function<Comm(zenflow::emulated_device&)>& make) {
  const int rank = world_rank();
  std::vector<zf_engine_test::shape> shapes;
  for (int k = 0; k < copies; ++k) {
    shapes.insert(shapes.end(), kShapes.begin(), kShapes.end());
  }
  auto w = initial_weights<float>(shapes);
  auto g = w;
  zenflow::emulated_device device;
  zenflow::emulated_backend_counts counts;
  const cudaStream_t stream = device.create_stream();
  zenflow::engine<zenflow::emulated_backend, Comm> e(
      small_config(), zenflow::emulated_backend{device, &counts}, make(device));
  register_all(e, w, g, shapes);
  e.initialize(stream);
  per_step out;
  zenflow::emulated_device_stats warm{};
  for (std::int64_t t = 0; t < 18; ++t) { // selections at 0, 8 and 16 (rows enter at 8 and 16)
    device.synchronize_stream(stream);    // the step before has read the gradients
    if (t == 4) {
      warm = device.stats();
    }
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      const auto mine = grad_of<float>(rank, t, p, shapes[p]);
      std::copy(mine.begin(), mine.end(), g[p].begin());
    }
    const std::uint64_t before = counts.waits.load();
    const auto runs_before = counts.runs_by_name()["zenflow::engine: entering rows' gradients"];
    const auto report = e.step(1e-2f, stream);
    out.waits.push_back(counts.waits.load() - before);
    out.entering_launches.push_back(counts.runs_by_name()["zenflow::engine: entering rows' gradients"] -
                                    runs_before);
    EXPECT_EQ(report.selection, t % 8 == 0) << "step " << t;
  }
  const zenflow::emulated_device_stats end = device.stats();
  out.steady.allocations = end.allocations - warm.allocations;
  out.steady.frees = end.frees - warm.frees;
  out.steady.pageable_copies = end.pageable_copies - warm.pageable_copies;
  e.flush(stream);
  device.synchronize();
  out.total = device.stats();
  out.reports = device.reports();
  return out;
}

TEST(engine_data_parallel, a_selection_waits_and_launches_the_same_whatever_the_matrices) {
  using device_comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  const std::function<device_comm(zenflow::emulated_device&)> on_device = [](zenflow::emulated_device& d) {
    return device_comm(d, make_comm());
  };
  const std::function<zenflow::mpi_communicator(zenflow::emulated_device&)> on_host =
      [](zenflow::emulated_device&) { return make_comm(); };
  {
    SCOPED_TRACE("device communicator");
    const per_step x3 = waits_per_step<device_comm>(3, on_device),
                   x1 = waits_per_step<device_comm>(1, on_device);
    EXPECT_EQ(x3.waits, x1.waits);
    // Rows enter at every selection (0, 8, 16): this rank's gathered, the others' scattered,
    // one launch each per staging's worth of matrices (one of the two where no row of one side
    // enters): the stage holds the largest device set's fp32 state, one copy of this model's
    // entering rows (so at most one group per copy), with no wait between the groups.
    for (const per_step* run : {&x1, &x3}) {
      const std::uint64_t most = 2u * (run == &x1 ? 1u : 3u);
      for (std::size_t t = 0; t < run->entering_launches.size(); ++t) {
        const std::uint64_t n = run->entering_launches[t];
        EXPECT_TRUE(t % 8 == 0 ? n >= 1 && n <= most : n == 0)
            << "step " << t << ": " << n << " launches, " << (run == &x1 ? "1x" : "3x") << " the matrices";
      }
    }
  }
  {
    SCOPED_TRACE("host communicator");
    EXPECT_EQ(waits_per_step<zenflow::mpi_communicator>(3, on_host).waits,
              waits_per_step<zenflow::mpi_communicator>(1, on_host).waits);
  }
}

// Issue 31: data parallel, a steady step (two selections with entering rows among them) breaks none
// of the rules a GPU punishes: no allocation, no free (each synchronises the whole device), no copy
// from or to pageable host memory (it runs synchronously); over the run no device call from a host
// task, no use after free, no busy destroy. Over a device communicator (the NCCL path) and a host one.
TEST(engine_data_parallel, a_steady_step_allocates_nothing_and_copies_no_pageable_memory) {
  using device_comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  const std::function<device_comm(zenflow::emulated_device&)> on_device = [](zenflow::emulated_device& d) {
    return device_comm(d, make_comm());
  };
  const std::function<zenflow::mpi_communicator(zenflow::emulated_device&)> on_host =
      [](zenflow::emulated_device&) { return make_comm(); };
  const per_step runs[] = {waits_per_step<device_comm>(1, on_device),
                           waits_per_step<zenflow::mpi_communicator>(1, on_host)};
  for (const per_step& r : runs) {
    SCOPED_TRACE(&r == &runs[0] ? "device communicator" : "host communicator");
    EXPECT_EQ(r.steady.allocations, 0u);
    EXPECT_EQ(r.steady.frees, 0u);
    EXPECT_EQ(r.steady.pageable_copies, 0u);
    EXPECT_EQ(r.total.host_task_calls, 0u);
    EXPECT_EQ(r.total.use_after_free, 0u);
    EXPECT_EQ(r.total.busy_destroys, 0u);
    for (const std::string& line : r.reports) {
      ADD_FAILURE() << line;
    }
  }
}

// An engine that mixes working types (bf16 matrices of odd channel length beside an fp32 one):
// over a device communicator a selection's entering rows' gradients travel in each matrix's own
// type through one staging buffer, where fp32 rows must start 4-byte aligned (a GPU faults on a
// misaligned float, and so does the emulated device's row copy). The run completes and gives the
// bits of the same run over a host communicator (whose fetch is host-side), weights and state.
template <class Comm>
std::vector<std::vector<unsigned char>>
mixed_types_run(const std::function<Comm(zenflow::emulated_device&)>& make) {
  using bf16 = zenflow::bfloat16;
  const int rank = world_rank();
  // bf16 29 x 45 (90 bytes a row: 2 mod 4 after an odd number of rows), fp32 24 x 8, bf16 13 x 15
  const std::vector<zf_engine_test::shape> shapes = {{true, 29, 45}, {true, 24, 8}, {true, 13, 15}};
  const auto b0 = initial_weights<bf16>({shapes[0]}), b2 = initial_weights<bf16>({shapes[2]});
  const auto f1 = initial_weights<float>({shapes[1]});
  std::vector<bf16> w0 = b0[0], g0 = w0, w2 = b2[0], g2 = w2;
  std::vector<float> w1 = f1[0], g1 = w1;
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  zenflow::engine<zenflow::emulated_backend, Comm> e(small_config(), zenflow::emulated_backend{device},
                                                     make(device));
  const zenflow::param_id ids[] = {e.add_matrix(w0.data(), g0.data(), 29, 45),
                                   e.add_matrix(w1.data(), g1.data(), 24, 8),
                                   e.add_matrix(w2.data(), g2.data(), 13, 15)};
  e.initialize(stream);
  for (std::int64_t t = 0; t < 18; ++t) { // selections at 0, 8 and 16: rows enter each time
    device.synchronize_stream(stream);    // the step before has read the gradients; in place:
    const auto n0 = grad_of<bf16>(rank, t, 0, shapes[0]), n2 = grad_of<bf16>(rank, t, 2, shapes[2]);
    const auto n1 = grad_of<float>(rank, t, 1, shapes[1]); // the engine holds g0, g1, g2
    std::copy(n0.begin(), n0.end(), g0.begin());
    std::copy(n1.begin(), n1.end(), g1.begin());
    std::copy(n2.begin(), n2.end(), g2.begin());
    (void)e.step(1e-2f, stream);
  }
  e.flush(stream);
  device.synchronize();
  std::vector<std::vector<unsigned char>> out;
  auto bytes = [&out](const auto& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    out.emplace_back(p, p + v.size() * sizeof(v[0]));
  };
  bytes(w0);
  bytes(w1);
  bytes(w2);
  for (const auto id : ids) {
    const zenflow::param_state st = e.state(id);
    bytes(st.master);
    bytes(st.m);
    bytes(st.v);
    bytes(st.counts);
  }
  return out;
}

TEST(engine_data_parallel, mixed_working_types_over_a_device_communicator_give_the_host_ones_bits) {
  using device_comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  const auto on_device =
      mixed_types_run<device_comm>([](zenflow::emulated_device& d) { return device_comm(d, make_comm()); });
  const auto on_host =
      mixed_types_run<zenflow::mpi_communicator>([](zenflow::emulated_device&) { return make_comm(); });
  ASSERT_EQ(on_device.size(), on_host.size());
  for (std::size_t k = 0; k < on_host.size(); ++k) {
    EXPECT_EQ(on_device[k], on_host[k])
        << "array " << k << " (3 weights, then master, m, v, counts per matrix)";
  }
}

// Rank 0's comm_timeout of the missing-rank cases: no earlier than its 300 ms bound, naming the
// collective. What the cases check is the order, not a duration (a wall-clock upper bound fails
// under mpiexec on 2 cores and a sanitizer): the others step only once rank 0 has told them that it
// gave up (zf_test::note), so rank 0 passes only by timing out on its own while they are away.
void expect_timed_out_after_the_bound(std::chrono::steady_clock::time_point start,
                                      const zenflow::comm_timeout& err) {
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms) << "gave up before its bound";
  EXPECT_NE(std::string(err.what()).find("all_reduce_mean"), std::string::npos) << err.what();
}

// Rank 0, after its step threw (or did not): the others may step now.
void release_the_others() {
  for (int r = 1; r < world_size(); ++r) {
    zf_test::tell(r);
  }
}

// A rank that does not reach step() (dead, stuck, or out of step) is an error on the others within
// the communicator's bound, not a hang: rank 0 gives up after 300 ms; the others come only after
// it has (a rank 0 that hung would be released by them after the note's patience, and fail).
TEST(engine_data_parallel, a_missing_rank_is_a_timeout_in_step_not_a_hang) {
  const int rank = world_rank();
  auto w = initial_weights<float>();
  auto g = w;
  // gpu_adamw: step() makes one collective (the mean); in zenflow mode the others' step would go
  // on to the next one (a migration's all-gather) and time out there too.
  auto cfg = small_config();
  cfg.mode = zenflow::optimizer_mode::gpu_adamw;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(
      cfg, {}, zenflow::mpi_communicator(MPI_COMM_WORLD, {rank == 0 ? 300ms : 20000ms}));
  register_all(e, w, g);
  e.initialize();
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)e.step(1e-2f);
      ADD_FAILURE() << "no timeout";
    } catch (const zenflow::comm_timeout& err) {
      expect_timed_out_after_the_bound(start, err);
    }
    release_the_others();
    EXPECT_EQ(e.steps(), 0); // the step did not happen
  } else {
    zf_test::note rank0_gave_up(0);
    EXPECT_TRUE(rank0_gave_up.arrived()) << "rank 0 did not time out while this rank was away";
    (void)e.step(1e-2f); // completes with rank 0's posted contribution
  }
  MPI_Barrier(MPI_COMM_WORLD); // rank 0 makes progress here on the operation it left posted
}

// Over a device communicator a collective runs on the stream (NCCL's way): a missing rank makes it
// time out there, and the error surfaces at the engine's next synchronizing call on the others,
// as comm_timeout (the device's sticky error), not a hang.
TEST(engine_data_parallel, a_missing_rank_is_a_timeout_on_the_stream_over_a_device_communicator) {
  const int rank = world_rank();
  auto w = initial_weights<float>();
  auto g = w;
  auto cfg = small_config();
  cfg.mode = zenflow::optimizer_mode::gpu_adamw;
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  using comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  zenflow::engine<zenflow::emulated_backend, comm> e(
      cfg, zenflow::emulated_backend{device},
      comm(device, zenflow::mpi_communicator(MPI_COMM_WORLD, {rank == 0 ? 300ms : 20000ms})));
  register_all(e, w, g);
  e.initialize(stream);
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)e.step(1e-2f, stream); // enqueues the mean: no error yet
      e.flush(stream);
      ADD_FAILURE() << "no timeout";
    } catch (const zenflow::comm_timeout& err) {
      expect_timed_out_after_the_bound(start, err);
    } catch (const std::exception& err) { // caught, so that rank 0 still reaches the barrier below
      ADD_FAILURE() << "not a comm_timeout: " << err.what();
    }
    release_the_others();
  } else {
    // The stream's collectives of initialize() done before this thread calls MPI itself.
    device.synchronize();
    zf_test::note rank0_gave_up(0);
    EXPECT_TRUE(rank0_gave_up.arrived()) << "rank 0 did not time out while this rank was away";
    (void)e.step(1e-2f, stream); // completes with rank 0's posted contribution
    e.flush(stream);
    device.synchronize(); // the stream's collective done before this thread calls MPI itself
  }
  MPI_Barrier(MPI_COMM_WORLD); // rank 0 makes progress here on the operation it left posted
}

} // namespace
