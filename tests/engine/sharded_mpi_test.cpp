// The sharded engine (ZeRO-3, engine<Backend, sharded<mpi_communicator>>) under mpiexec with 1, 2
// and 3 ranks (cpu.engine.sharded_mpi_np*). Each rank registers its shard of every matrix
// (shard_channels' ranges) with the shard of the mean gradient that the trainer's helper
// reduce_scatter_shard makes from this rank's own gradient, and every vector whole with its own
// gradient (the engine means it). Beside it every rank runs a one-rank host engine on the whole
// model fed the float64 rank-order mean (mean_of): after every step each rank's shard of the
// weights, its selections and the skipped steps, and at the end the state (masters, moments,
// counts), must equal that engine's rows bit for bit, on the host backend, the emulated backend,
// and the emulated backend over emulated_device_communicator (stream-ordered collectives), in
// fp32, bf16 (bf16 host moments), bf16 with Zen-auto, the mass trigger, fp16 with clipping, L1
// importance, gpu_adamw, overflowing scores; one rank's NaN skips the step on every rank; a checkpoint per
// rank resumes its shard. Misconfigured shards, a differing list, and what the policy does not support yet:
// the same invalid_argument on every rank, nothing set up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mpi.h>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/sharded.hpp>

#include "engine_harness.hpp"
#include "sharded_cases.hpp"
#include "support/mpi_checks.hpp"
#include "support/mpi_gtest_main.hpp"
#include "support/random.hpp"

namespace {

using namespace std::chrono_literals;
using namespace zf_sharded_test;
using zf_test::world_rank;
using zf_test::world_size;

zenflow::mpi_communicator make_comm() {
  return zenflow::mpi_communicator(MPI_COMM_WORLD, {10s});
}

std::uint32_t state_bytes(const zenflow::config& cfg) {
  return cfg.host_moments == zenflow::moment_precision::bf16 ? 8u : 12u;
}

zenflow::shard_layout layout_for(const zenflow::config& cfg) {
  std::vector<zenflow::shard_matrix> list;
  for (const auto& sh : kModel) {
    if (sh.matrix) {
      list.push_back({sh.channels, sh.len, state_bytes(cfg)});
    }
  }
  return zenflow::shard_channels(list, world_size());
}

/// The sharded engine on `Backend` (host_backend, emulated_backend) and the one-rank reference.
template <class T, bool Emulated, bool DeviceComm = false>
struct sharded_run {
  using backend = std::conditional_t<Emulated, zenflow::emulated_backend, zenflow::host_backend>;
  using comm_type = std::conditional_t<DeviceComm,
                                       zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                       zenflow::mpi_communicator>;
  using engine_type = zenflow::engine<backend, zenflow::sharded<comm_type>>;

  zenflow::config cfg;
  zenflow::shard_layout layout = layout_for(cfg);
  int me = world_rank();
  zenflow::mpi_communicator trainer = make_comm(); // the trainer's reduce-scatter
  zenflow::emulated_device device{};
  cudaStream_t s = Emulated ? device.create_stream() : nullptr;
  std::vector<std::vector<T>> ref_w, ref_g, w, g;
  std::vector<float> staging;
  std::vector<zenflow::param_id> ref_id, id;
  std::unique_ptr<zenflow::engine<zenflow::host_backend>> ref;
  std::unique_ptr<engine_type> e;

  explicit sharded_run(const zenflow::config& c) : cfg(c) {
    std::size_t most = 1;
    for (std::size_t m = 0; m < layout.matrices(); ++m) {
      most = std::max(most, zenflow::shard_staging_floats(layout, m, me));
    }
    staging.resize(most);
    ref = std::make_unique<zenflow::engine<zenflow::host_backend>>(cfg);
    if constexpr (DeviceComm) {
      e = std::make_unique<engine_type>(cfg, zenflow::emulated_backend{device},
                                        comm_type(device, make_comm()));
    } else if constexpr (Emulated) {
      e = std::make_unique<engine_type>(cfg, zenflow::emulated_backend{device}, make_comm());
    } else {
      e = std::make_unique<engine_type>(cfg, zenflow::host_backend{}, make_comm());
    }
  }

  [[nodiscard]] std::int64_t first(std::size_t m) const {
    return m < firsts_.size() ? firsts_[m] : layout.first(m, me);
  }
  [[nodiscard]] std::int64_t count(std::size_t m) const {
    return m < counts_.size() ? counts_[m] : layout.count(m, me);
  }
  std::vector<std::int64_t> firsts_, counts_; // per matrix: the registered shard

  /// Registers the model on both engines. `shift`: this rank's shards start that many channels
  /// off (a misconfiguration); `moved`: every boundary between ranks one channel earlier (a valid
  /// tiling, not the layout's).
  void add(std::int64_t shift = 0, bool moved = false) {
    for (auto* v : {&ref_w, &ref_g, &w, &g}) {
      v->reserve(kModel.size()); // the engines keep pointers into them
    }
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      ref_w.push_back(initial<T>(p));
      ref_g.push_back(std::vector<T>(ref_w.back().size()));
      const std::string name = "p" + std::to_string(p);
      if (!sh.matrix) {
        w.push_back(ref_w.back());
        g.push_back(ref_g.back());
        ref_id.push_back(ref->add_vector(ref_w[p].data(), ref_g[p].data(), sh.len, {.name = name}));
        id.push_back(e->add_vector(w[p].data(), g[p].data(), sh.len, {.name = name}));
        continue;
      }
      if (moved) {
        const bool last = me == world_size() - 1;
        firsts_.push_back(first(m) - (me > 0 ? 1 : 0));
        counts_.push_back(count(m) + (me > 0 ? 1 : 0) - (last ? 0 : 1));
      } else {
        firsts_.push_back(std::clamp<std::int64_t>(first(m) + shift, 0, sh.channels - count(m)));
        counts_.push_back(count(m));
      }
      const std::int64_t f = firsts_.back();
      const std::int64_t n = counts_.back();
      w.emplace_back(ref_w[p].begin() + f * sh.len, ref_w[p].begin() + (f + n) * sh.len);
      g.push_back(std::vector<T>(w.back().size()));
      ref_id.push_back(
          ref->add_matrix(ref_w[p].data(), ref_g[p].data(), sh.channels, sh.len, {.name = name}));
      id.push_back(e->add_matrix(w[p].data(), g[p].data(), n, sh.len,
                                 {.name = name, .shard = zenflow::shard_range{f, sh.channels}}));
      ++m;
    }
  }
  void initialize() {
    ref->initialize();
    e->initialize(s);
  }

  /// Step `t`: every rank's gradients, the reference fed their mean, this rank's shard from the
  /// trainer's reduce-scatter; both engines step and flush. Then the checks of the step.
  void step(std::int64_t t, bool nan = false, bool huge = false, bool drift = false) {
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      std::vector<std::vector<T>> all;
      for (int r = 0; r < world_size(); ++r) {
        all.push_back(grad_of<T>(r, world_size(), p, t, nan, huge, drift));
      }
      const std::vector<T> mean = mean_of(all);
      std::copy(mean.begin(), mean.end(), ref_g[p].begin()); // in place: the engine reads ref_g[p].data()
      if (!sh.matrix) {
        std::copy(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end(),
                  g[p].begin());
        continue;
      }
      const zenflow::channel_matrix<const T> mine{all[static_cast<std::size_t>(me)].data(), sh.channels,
                                                  sh.len, sh.len, zenflow::channel_layout::contiguous};
      const zenflow::channel_matrix<T> out{g[p].data(), count(m), sh.len, sh.len,
                                           zenflow::channel_layout::contiguous};
      zenflow::reduce_scatter_shard(trainer, layout, m, mine, out, std::span<float>(staging), nullptr);
      ++m;
    }
    const float lr = 1e-2f;
    (void)ref->step(lr);
    (void)e->step(lr, s);
    ref->flush();
    e->flush(s);
    if constexpr (Emulated) {
      device.synchronize_stream(s);
    }
    check("step " + std::to_string(t));
  }

  void check(const std::string& when) {
    SCOPED_TRACE(when + ", rank " + std::to_string(me) + ", " + zf_test::seed_note(zf_test::base_seed()));
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      const std::int64_t f = sh.matrix ? first(m) : 0;
      const std::int64_t n = sh.matrix ? count(m) : 1;
      ASSERT_TRUE(same_bits(w[p].data(), ref_w[p].data() + f * sh.len, w[p].size())) << "weights of p" << p;
      if (sh.matrix) { // the reference's top-k channels in this shard, as shard indices
        std::vector<std::int32_t> want;
        for (const std::int32_t c : ref->selected(ref_id[p])) {
          if (c >= f && c < f + n) {
            want.push_back(static_cast<std::int32_t>(c - f));
          }
        }
        ASSERT_EQ(e->selected(id[p]), want) << "selection of p" << p;
        ++m;
      }
    }
    const auto a = e->stats();
    const auto b = ref->stats();
    ASSERT_EQ(a.skipped_steps, b.skipped_steps);
    // Zen-auto's and the mass trigger's decisions: the masses' bits.
    ASSERT_EQ(a.windows_closed, b.windows_closed);
    ASSERT_EQ(a.last_window_length, b.last_window_length);
    ASSERT_EQ(a.selections, b.selections);
    ASSERT_EQ(a.mass_drop_selections, b.mass_drop_selections);
  }

  /// Zen-auto's and the trigger's state in both engines' checkpoints, byte for byte: the last two
  /// steps' masses (crit and rest per matrix, as floats), the voter's sums and the trigger's.
  void check_masses(std::int64_t t) {
    SCOPED_TRACE("masses at step " + std::to_string(t) + ", rank " + std::to_string(me));
    const std::string base = ::testing::TempDir() + "zf_sharded_masses_" + std::to_string(world_size());
    const std::string ref_path = base + "_ref_rank" + std::to_string(me) + ".ckpt";
    ref->save(ref_path);
    e->save(base + ".ckpt", s);
    const zenflow::checkpoint_reader a(zenflow::checkpoint_rank_path(base + ".ckpt", me, world_size()));
    const zenflow::checkpoint_reader b(ref_path);
    for (const char* tag : {"engine/masses", "engine/voter", "engine/trigger"}) {
      const auto* want = b.find(tag);
      const auto* got = a.find(tag);
      ASSERT_EQ(got == nullptr, want == nullptr) << tag;
      if (want == nullptr) {
        continue;
      }
      ASSERT_EQ(got->bytes, want->bytes) << tag;
      std::vector<std::byte> x(got->bytes), y(want->bytes);
      a.read(tag, x.data(), x.size());
      b.read(tag, y.data(), y.size());
      EXPECT_EQ(x, y) << tag;
    }
  }

  void check_state() {
    SCOPED_TRACE("state, rank " + std::to_string(me));
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      const std::int64_t f = sh.matrix ? first(m) : 0;
      const std::int64_t n = sh.matrix ? count(m) : 1;
      m += sh.matrix ? 1 : 0;
      const auto a = e->state(id[p], s);
      const auto b = ref->state(ref_id[p]);
      const auto L = static_cast<std::size_t>(sh.len);
      ASSERT_EQ(a.master.size(), static_cast<std::size_t>(n) * L);
      EXPECT_TRUE(same_bits(a.master.data(), b.master.data() + f * sh.len, a.master.size()))
          << "master p" << p;
      EXPECT_TRUE(same_bits(a.m.data(), b.m.data() + f * sh.len, a.m.size())) << "m p" << p;
      EXPECT_TRUE(same_bits(a.v.data(), b.v.data() + f * sh.len, a.v.size())) << "v p" << p;
      ASSERT_EQ(a.counts.size(), static_cast<std::size_t>(n));
      EXPECT_TRUE(std::equal(a.counts.begin(), a.counts.end(), b.counts.begin() + f)) << "counts p" << p;
    }
  }
};

template <class T, bool Emulated, bool DeviceComm>
zenflow::stats run(const zenflow::config& cfg,
                   std::int64_t steps,
                   std::int64_t nan_step = -1,
                   bool huge = false,
                   bool drift = false) {
  sharded_run<T, Emulated, DeviceComm> r(cfg);
  r.add();
  r.initialize();
  const bool masses =
      cfg.mode == zenflow::optimizer_mode::zenflow && (cfg.auto_update() || cfg.mass_trigger());
  for (std::int64_t t = 0; t < steps; ++t) {
    r.step(t, t == nan_step, huge, drift);
    if (masses && (t % 5 == 4 || t + 1 == steps)) {
      r.check_masses(t);
    }
    // Every rank stops together after a failure on any (the next collectives would wait for it).
    int failed = ::testing::Test::HasFatalFailure() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed != 0) {
      ADD_FAILURE() << "a rank failed at step " << t;
      return {};
    }
  }
  r.check_state();
  if (nan_step >= 0) {
    EXPECT_EQ(r.e->stats().skipped_steps, 1);
  }
  return r.ref->stats();
}

template <class P>
class sharded_mpi : public ::testing::Test {};
struct on_host {
  static constexpr bool emulated = false;
  static constexpr bool device_comm = false;
};
struct on_emulated {
  static constexpr bool emulated = true;
  static constexpr bool device_comm = false;
};
struct on_emulated_device_comm { // stream-ordered collectives: the path a device communicator takes
  static constexpr bool emulated = true;
  static constexpr bool device_comm = true;
};
using paths = ::testing::Types<on_host, on_emulated, on_emulated_device_comm>;
TYPED_TEST_SUITE(sharded_mpi, paths);

TYPED_TEST(sharded_mpi, fp32_rows_equal_one_rank_on_the_mean) {
  run<float, TypeParam::emulated, TypeParam::device_comm>(base(), 14);
}

TYPED_TEST(sharded_mpi, bf16_with_bf16_host_moments_rows_equal_one_rank) {
  auto c = base();
  c.host_moments = zenflow::moment_precision::bf16;
  c.ring_slots = 0; // auto: sized from the shard's channels
  run<zenflow::bfloat16, TypeParam::emulated, TypeParam::device_comm>(c, 12);
}

TYPED_TEST(sharded_mpi, fp16_with_clipping_rows_equal_one_rank) {
  auto c = base();
  c.gradient_clipping = 0.05f; // the global norm is far above it: every step clips
  c.loss_scale = 4.0f;
  run<zenflow::half, TypeParam::emulated, TypeParam::device_comm>(c, 12);
}

TYPED_TEST(sharded_mpi, l1_importance_without_overlap_rows_equal_one_rank) {
  auto c = base();
  c.importance = zenflow::channel_norm::l1;
  c.overlap_step = false;
  c.full_warm_up_rounds = 0;
  run<float, TypeParam::emulated, TypeParam::device_comm>(c, 12);
}

TYPED_TEST(sharded_mpi, gpu_adamw_with_clipping_rows_equal_one_rank) {
  auto c = base();
  c.mode = zenflow::optimizer_mode::gpu_adamw;
  c.gradient_clipping = 0.05f;
  run<float, TypeParam::emulated, TypeParam::device_comm>(c, 6);
}

// Zen-auto: the windows close on the masses of the whole matrices, which every rank adds in one
// rank's order from the gathered row masses; windows of varied lengths, a NaN step among them.
TYPED_TEST(sharded_mpi, bf16_zen_auto_rows_and_windows_equal_one_rank) {
  const auto st = run<zenflow::bfloat16, TypeParam::emulated, TypeParam::device_comm>(
      zen_auto_case(), zen_auto_steps, zen_auto_nan_step, false, true);
  EXPECT_GE(st.windows_closed, zen_auto_min_windows); // the masses decided something
}

// select_on_mass_drop (with Zen-auto): re-selections fired by the device set's share of the mass.
TYPED_TEST(sharded_mpi, the_mass_trigger_fires_as_one_rank) {
  const auto st = run<float, TypeParam::emulated, TypeParam::device_comm>(
      mass_trigger_case(), mass_trigger_steps, -1, false, true);
  EXPECT_GT(st.mass_drop_selections, 0);
}

TYPED_TEST(sharded_mpi, a_nan_on_one_rank_skips_the_step_everywhere) {
  run<float, TypeParam::emulated, TypeParam::device_comm>(
      base(), 10, 5); // a selection step (select_interval 4, warm-up 2)
}

TYPED_TEST(sharded_mpi, overflowing_scores_clip_and_rank_by_their_rescans_as_one_rank) {
  auto c = base();
  c.gradient_clipping = 1.0f;
  run<float, TypeParam::emulated, TypeParam::device_comm>(c, 10, -1, true);
}

// Each rank saves its shard's state (one file per rank); an engine registered with the same
// shards resumes from it, bit for bit the uninterrupted run (and its reference) from then on; an
// engine whose shards tile differently refuses the files (checkpoint_error, nothing changed).
TYPED_TEST(sharded_mpi, a_checkpoint_per_rank_resumes_its_shard_bit_for_bit) {
  const auto cfg = base();
  sharded_run<float, TypeParam::emulated, TypeParam::device_comm> r(cfg);
  r.add();
  r.initialize();
  EXPECT_EQ(r.e->comm().rank(), world_rank());
  const std::int64_t half = 7, steps = 12;
  for (std::int64_t t = 0; t < half; ++t) {
    r.step(t);
  }
  const std::string dir = ::testing::TempDir() + "zf_sharded_" + std::to_string(world_size());
  const std::string ref_path = dir + "_ref_rank" + std::to_string(world_rank()) + ".ckpt";
  r.ref->save(ref_path);
  r.e->save(dir + ".ckpt", r.s);
  sharded_run<float, TypeParam::emulated, TypeParam::device_comm> q(cfg);
  q.add();
  for (std::size_t p = 0; p < q.w.size(); ++p) {
    std::copy(r.w[p].begin(), r.w[p].end(), q.w[p].begin());
    std::copy(r.ref_w[p].begin(), r.ref_w[p].end(), q.ref_w[p].begin());
  }
  q.initialize();
  q.ref->load(ref_path);
  q.e->load(dir + ".ckpt", q.s);
  for (std::int64_t t = half; t < steps; ++t) {
    r.step(t);
    q.step(t); // checks q's shards against its own resumed reference
    for (std::size_t p = 0; p < q.w.size(); ++p) {
      ASSERT_EQ(q.w[p], r.w[p]) << "step " << t << ", p" << p;
    }
  }
  q.check_state();
  if (world_size() > 1) {
    sharded_run<float, TypeParam::emulated, TypeParam::device_comm> moved(cfg);
    moved.add(0, true);
    moved.initialize();
    const auto before = moved.w;
    EXPECT_THROW(moved.e->load(dir + ".ckpt", moved.s), zenflow::checkpoint_error);
    EXPECT_EQ(moved.w, before);
  }
}

/// initialize() throws invalid_argument naming `names` on every rank, and nothing is set up: the
/// engine is not initialized and the shard's weights are untouched.
template <class F>
void expect_refused_everywhere(sharded_run<float, false>& r, F&& init, const std::string& names) {
  const auto before = r.w;
  zf_engine_test::expect_invalid(init, names);
  EXPECT_FALSE(r.e->initialized());
  EXPECT_EQ(r.w, before);
}

TEST(sharded_mpi_checks, shards_that_overlap_or_leave_a_gap_are_refused_on_every_rank) {
  if (world_size() < 2) {
    GTEST_SKIP() << "needs two ranks";
  }
  sharded_run<float, false> r(base());
  r.add(world_rank() == 1 ? -1 : 0); // rank 1 starts one channel early: an overlap with rank 0
  expect_refused_everywhere(
      r, [&] { r.e->initialize(); }, "options.shard' of parameter 0 ('p0')");
  expect_refused_everywhere(
      r, [&] { r.e->initialize(); }, "rank 1 starts at channel");
  expect_refused_everywhere(
      r, [&] { r.e->initialize(); }, "(an overlap)");
  sharded_run<float, false> late(base());
  late.add(world_rank() == 0 ? 1 : 0); // rank 0 starts at channel 1
  expect_refused_everywhere(
      late, [&] { late.e->initialize(); }, "rank 0 must start at 0");
}

// The tiling rule itself ({first, count, total} per rank, rank order).
TEST(sharded_mpi_checks, the_tiling_rule_names_the_rank_and_what_is_wrong) {
  using zenflow::detail::shard_tiling_error;
  const std::vector<std::int64_t> ok = {0, 3, 10, 3, 4, 10, 7, 3, 10};
  EXPECT_EQ(shard_tiling_error(ok), "");
  const std::vector<std::int64_t> overlap = {0, 4, 10, 3, 4, 10, 7, 3, 10};
  EXPECT_EQ(shard_tiling_error(overlap), "rank 1 starts at channel 3, where rank 0 ends at 4 (an overlap)");
  const std::vector<std::int64_t> gap = {0, 3, 10, 4, 3, 10, 7, 3, 10};
  EXPECT_EQ(shard_tiling_error(gap), "rank 1 starts at channel 4, where rank 0 ends at 3 (a gap)");
  const std::vector<std::int64_t> short_end = {0, 3, 10, 3, 4, 10, 7, 2, 10};
  EXPECT_EQ(shard_tiling_error(short_end), "the last rank ends at channel 9 of 10 (a gap)");
  const std::vector<std::int64_t> totals = {0, 3, 10, 3, 4, 11, 7, 3, 10};
  EXPECT_EQ(shard_tiling_error(totals), "rank 1 gives total 11, rank 0 10");
  const std::vector<std::int64_t> late = {1, 3, 10};
  EXPECT_EQ(shard_tiling_error(late), "rank 0 starts at channel 1, where rank 0 must start at 0");
}

TEST(sharded_mpi_checks, a_whole_matrix_on_every_rank_is_refused) {
  if (world_size() < 2) {
    GTEST_SKIP() << "needs two ranks";
  }
  auto c = base();
  zenflow::engine<zenflow::host_backend, zenflow::sharded<zenflow::mpi_communicator>> e(c, {}, make_comm());
  std::vector<float> w(40 * 8, 1.0f), g(40 * 8, 1.0f);
  (void)e.add_matrix(w.data(), g.data(), 40, 8, {.name = "whole"});
  zf_engine_test::expect_invalid([&] { e.initialize(); }, "rank 1 starts at channel 0");
  EXPECT_FALSE(e.initialized());
}

TEST(sharded_mpi_checks, a_rank_with_another_list_is_refused_on_every_rank) {
  if (world_size() < 2) {
    GTEST_SKIP() << "needs two ranks";
  }
  sharded_run<float, false> r(base());
  r.add();
  std::vector<float> extra(4, 1.0f), gx(4, 1.0f);
  if (world_rank() == 0) {
    (void)r.e->add_vector(extra.data(), gx.data(), 4);
  }
  expect_refused_everywhere(
      r, [&] { r.e->initialize(); }, "the parameter list");
}

TEST(sharded_mpi_checks, snr_and_device_accumulation_are_refused_on_every_rank) {
  auto d = base();
  d.host_lr_scale = zenflow::host_lr_scaling::snr;
  sharded_run<float, false> q(d);
  q.add();
  expect_refused_everywhere(
      q, [&] { q.e->initialize(); }, "host_lr_scale");
  auto a = base();
  a.accumulate = zenflow::accumulation_site::device;
  sharded_run<float, false> s(a);
  s.add();
  expect_refused_everywhere(
      s, [&] { s.e->initialize(); }, "accumulate");
}

TEST(sharded_mpi_checks, a_shard_out_of_range_or_on_an_engine_not_sharded_names_options_shard) {
  zenflow::engine<zenflow::host_backend, zenflow::sharded<zenflow::mpi_communicator>> e(base(), {},
                                                                                        make_comm());
  std::vector<float> w(10 * 8, 1.0f), g(10 * 8, 1.0f);
  zf_engine_test::expect_invalid(
      [&] {
        (void)e.add_matrix(w.data(), g.data(), 10, 8, {.shard = zenflow::shard_range{35, 40}});
      },
      "options.shard");
  zf_engine_test::expect_invalid(
      [&] {
        (void)e.add_vector(w.data(), g.data(), 8, {.shard = zenflow::shard_range{0, 40}});
      },
      "options.shard");
  EXPECT_EQ(e.param_count(), 0u);
  zenflow::engine<zenflow::host_backend> one(base());
  zf_engine_test::expect_invalid(
      [&] {
        (void)one.add_matrix(w.data(), g.data(), 10, 8, {.shard = zenflow::shard_range{0, 40}});
      },
      "options.shard");
  EXPECT_EQ(one.param_count(), 0u);
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
