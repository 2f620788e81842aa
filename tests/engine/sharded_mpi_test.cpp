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
// importance, gpu_adamw, overflowing scores; one rank's NaN skips the step on every rank.
// Misconfigured shards, a differing list, and what the policy does not support yet: the same
// invalid_argument on every rank, nothing set up. Checkpoints: sharded_mpi_checkpoint_test.cpp;
// the harness (sharded_run): sharded_mpi_run.hpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mpi.h>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/sharded.hpp>

#include "engine_harness.hpp"
#include "sharded_cases.hpp"
#include "sharded_mpi_run.hpp"
#include "support/mpi_checks.hpp"
#include "support/mpi_gtest_main.hpp"

namespace {

using namespace zf_sharded_test;
using namespace zf_sharded_mpi;

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

// ZeRO-3's device state (docs/data-parallel.md, "A shard's device state"): each rank reserves its
// share of each matrix's top-k, ceil(k x its rows / all rows) and shard_state_headroom of it more
// (here none), at most min(k, its rows). Gradients whose magnitudes fall with the channel index
// (sharded_cases.hpp's drift) crowd the top-k into the first shards: a selection that puts more of
// a matrix's top-k in a shard than its reservation grows that shard's rows to min(k, its rows),
// once. Every rank's rows, selections and state stay one rank's bits (the harness checks them at
// every step); here, each rank's device state is its reservation, computed in float64 from the
// policy, until a selection crowds its shard, and min(k, its rows) of that matrix after, counted
// in stats().memory and stats().device_rows_grown; with more than one rank some shard grows.
TYPED_TEST(sharded_mpi, a_crowded_shard_grows_its_device_rows_and_keeps_one_ranks_bits) {
  auto c = base();
  c.shard_state_headroom = 0.0;
  sharded_run<float, TypeParam::emulated, TypeParam::device_comm> r(c);
  r.add();
  r.initialize();
  const int n = world_size();
  std::vector<char> grown(kModel.size(), 0);
  const auto expected = [&] {
    double bytes = 0;
    for (std::size_t p = 0, m = 0; p < kModel.size(); ++p) {
      if (!kModel[p].matrix) {
        continue;
      }
      const double k = static_cast<double>(c.topk(kModel[p].channels));
      const double rows = static_cast<double>(r.count(m++));
      const double most = std::min(k, rows);
      const double share =
          n == 1 ? most : std::min(most, std::max(1.0, std::ceil(k * rows / kModel[p].channels)));
      bytes += (grown[p] != 0 ? most : share) * (12.0 * static_cast<double>(kModel[p].len) + 8.0);
    }
    return bytes;
  };
  EXPECT_EQ(static_cast<double>(r.e->stats().memory.device_selected_state), expected()) << "reserved";
  for (std::int64_t t = 0; t < 14; ++t) {
    r.step(t, false, false, true);
    for (std::size_t p = 0, m = 0; p < kModel.size(); ++p) {
      if (!kModel[p].matrix) {
        continue;
      }
      const auto set = r.ref->selected(r.ref_id[p]); // the whole matrix's top-k, one rank's
      const auto in_shard = std::count_if(set.begin(), set.end(), [&](std::int32_t ch) {
        return ch >= r.first(m) && ch < r.first(m) + r.count(m);
      });
      const double k = static_cast<double>(c.topk(kModel[p].channels));
      const double rows = static_cast<double>(r.count(m++));
      grown[p] = grown[p] != 0 || (n > 1 && static_cast<double>(in_shard) >
                                                std::max(1.0, std::ceil(k * rows / kModel[p].channels)));
    }
    EXPECT_EQ(static_cast<double>(r.e->stats().memory.device_selected_state), expected()) << "step " << t;
    EXPECT_EQ(r.e->stats().device_rows_grown, std::count(grown.begin(), grown.end(), 1)) << "step " << t;
  }
  r.check_state();
  std::int64_t all = r.e->stats().device_rows_grown;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all > 0, n > 1) << "the drifting gradients crowd a shard with more than one rank";
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

// The auto-sized D2H staging (resolve_d2h_slots) holds one step's D2H on every rank when the whole
// matrix's top-k lands on one rank's shard: the other ranks then copy every row of theirs down
// each step. (It was sized by each shard's own k, topk(shard channels): at two ranks rank 0
// pushed 40 rows a step through 32 staging slots, its packs waiting on its own step's copies.)
TEST(sharded_mpi_checks, the_staging_holds_a_step_when_the_whole_top_k_is_on_one_rank) {
  const int ranks = world_size();
  const int me = world_rank();
  constexpr std::int64_t shard = 40, len = 1024; // one 4 KiB row a slot
  auto c = base();
  c.topk_ratio = 0.25;
  c.full_warm_up_rounds = 0;
  c.ring_slots = 0; // auto
  c.ring_slot_bytes = len * 4;
  zenflow::engine<zenflow::host_backend, zenflow::sharded<zenflow::mpi_communicator>> e(c, {}, make_comm());
  std::vector<float> w = zf_test::random_values<float>(static_cast<std::size_t>(shard * len), 7 + me);
  std::vector<float> g(w.size());
  (void)e.add_matrix(w.data(), g.data(), shard, len,
                     {.name = "m", .shard = zenflow::shard_range{me * shard, ranks * shard}});
  e.initialize();
  const std::size_t staging = e.stats().memory.device_staging / static_cast<std::size_t>(c.ring_slot_bytes);
  for (std::int64_t t = 0; t < 4; ++t) {
    // The last rank's channels carry the mass: the whole top-k (10 x ranks channels) is theirs.
    const float scale = me == ranks - 1 ? 1.0f : 1e-3f;
    const auto noise = zf_test::random_values<float>(g.size(), 100 + static_cast<std::uint64_t>(t * 8 + me));
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = noise[i] * scale;
    }
    const zenflow::step_report rep = e.step(1e-3f);
    if (rep.selection) {
      continue; // its readback of the sets is D2H too
    }
    const std::uint64_t rows = rep.d2h_bytes / static_cast<std::uint64_t>(c.ring_slot_bytes);
    // k = 10 x ranks, all on the last rank: it keeps the rest of its shard on the host, the others all.
    const std::int64_t host_rows = me == ranks - 1 ? shard - 10 * ranks : shard;
    EXPECT_EQ(rows, static_cast<std::uint64_t>(host_rows)) << "rank " << me << " step " << t;
    EXPECT_GE(staging, rows + 2) << "rank " << me << ": a step's rows and its record's two copies";
  }
}

// A sharded step steps every parameter on every rank: step_options::no_grad is refused by name
// and nothing changes; grad_ready() starts no reduction, so a parameter may be announced again.
TEST(sharded_mpi_checks, no_grad_is_refused_by_name_and_changes_nothing) {
  sharded_run<float, false> r(base());
  r.add();
  r.e->initialize();
  for (std::size_t p = 0; p < r.g.size(); ++p) { // this rank's gradients, in place: random, not zero
    const auto values =
        zf_test::random_values<float>(r.g[p].size(), 300 + p * 8 + static_cast<std::size_t>(world_rank()));
    std::copy(values.begin(), values.end(), r.g[p].begin());
  }
  const auto before = r.w;
  const zenflow::param_id without[] = {r.id[0]};
  zenflow::step_options opt;
  opt.no_grad = without;
  zf_engine_test::expect_invalid([&] { (void)r.e->step(1e-2f, nullptr, opt); },
                                 "'options.no_grad' is not supported data parallel");
  EXPECT_EQ(r.w, before);
  EXPECT_EQ(r.e->steps(), 0);
  r.e->grad_ready(r.id[0]);
  r.e->grad_ready(r.id[0]);
  (void)r.e->step(1e-2f);
  EXPECT_EQ(r.e->steps(), 1);
  EXPECT_NE(r.w, before);
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
