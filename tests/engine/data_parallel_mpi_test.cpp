// The engine data parallel under mpiexec (2 and 3 ranks), every rank running every case. Each
// rank's gradients are random, seeded by rank and step, so every rank can compute every other
// rank's gradients and their mean itself: the float64 rank-order sum divided by N, rounded once to
// fp32, then to the working type (what mpi_communicator's mean is, docs/data-parallel.md). A
// one-rank engine fed that mean in the same process is the reference: the N-rank engine must
// match it bit for bit (weights, masters, moments, counts, selections, skipped steps), and every
// rank must hold the same weights (compared with a plain MPI_Allgather). The checks of
// initialize(), checkpoints and timeouts: data_parallel_mpi_checks_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <mpi.h>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "data_parallel_support.hpp"
#include "engine_harness.hpp"
#include "support/mpi_gtest_main.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_dp_test;
using zf_engine_test::kShapes;
using zf_engine_test::shape;
using zf_engine_test::small_config;

// The reference's selections fired by select_on_mass_drop in the last run_against_one_rank (a
// test that needs the trigger to fire checks that it did).
std::int64_t last_run_mass_drop_selections = 0;

// Where the data-parallel engine runs; the reference is always the host backend with one rank.
enum class dp_path {
  host,     // the host backend over mpi_communicator
  emulated, // the emulated backend (an asynchronous device) over mpi_communicator
  // the emulated backend over a device communicator (MPI behind emulated_device_communicator:
  // stream-ordered collectives on device buffers, the path NCCL takes on the CUDA backend)
  emulated_device_comm,
};

template <class T, dp_path Path>
void run_on(const zenflow::config& cfg,
            int steps,
            std::int64_t nan_step,
            const std::vector<shape>& shapes = kShapes,
            std::int64_t big_step = -1,
            bool big_rival = false) {
  const int rank = world_rank();
  const int n = world_size();
  auto w = initial_weights<T>(shapes);
  auto ref_w = w;
  std::vector<std::vector<T>> g(shapes.size()), ref_g(shapes.size());
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    g[p].resize(w[p].size());
    ref_g[p].resize(w[p].size());
  }
  constexpr bool Emulated = Path != dp_path::host;
  // Both reduce-scatter the host sets' rows by owner; a host communicator gathers each owner's
  // scores, a device one sums them (device_owner_reduction.hpp).
  constexpr bool device_comm = Path == dp_path::emulated_device_comm;
  zenflow::emulated_device device; // outlives the engine (declared first)
  cudaStream_t stream = nullptr;
  using backend = std::conditional_t<Emulated, zenflow::emulated_backend, zenflow::host_backend>;
  using comm = std::conditional_t<!device_comm, zenflow::mpi_communicator,
                                  zenflow::emulated_device_communicator<zenflow::mpi_communicator>>;
  auto make_backend = [&] {
    if constexpr (Emulated) {
      stream = device.create_stream();
      return zenflow::emulated_backend{device};
    } else {
      return zenflow::host_backend{};
    }
  };
  auto make = [&] {
    if constexpr (!device_comm) {
      return make_comm();
    } else {
      return comm(device, make_comm());
    }
  };
  zenflow::engine<backend, comm> dp(cfg, make_backend(), make());
  zenflow::engine<zenflow::host_backend> ref(cfg);
  const auto ids = register_all(dp, w, g, shapes);
  const auto ref_ids = register_all(ref, ref_w, ref_g, shapes);
  dp.initialize(stream);
  ref.initialize();
  ASSERT_EQ(dp.comm().size(), n);
  const auto& part = dp.partition();
  std::int64_t skipped = 0;
  // Independent bookkeeping from what the reference shows (its device sets after every step): the
  // bytes on the wire, and the bytes this rank does not copy down (the unselected channels of the
  // other blocks; at a re-selection, the other blocks' rows that leave the device).
  std::vector<std::vector<std::int32_t>> prev_sel(shapes.size());
  // fp32 master + m and v as the host keeps them
  const std::uint64_t state_per_element = cfg.host_moments == zenflow::moment_precision::bf16 ? 8 : 12;
  std::uint64_t others_bytes = 0;
  // Bytes on the wire per step (what each rank puts into collectives), from the same bookkeeping:
  // every step all-reduces the device sets' rows (as they were at its start) and the vectors, and
  // reduce-scatters the host sets' rows by owner (a rank sends the other blocks' rows, (N-1)/N of
  // them on average), then one float per channel: the scores by owner, a flag per parameter, the
  // rest masses' rows over the host sets after the step (Zen-auto, select_on_mass_drop), and a
  // NaN row's bytes from its owner. A selection step (`selecting`) adds the L1 importance by owner
  // (with importance "l1"), and each rank sends its entering rows (`now`: the sets after the
  // step): their mean gradient, then their state (master, m, v, count). A device communicator
  // sums every channel's number instead of gathering each owner's (a score, an fp64 rescan that
  // replaces the NaN row, a rest mass row over every block).
  const bool zen = cfg.mode == zenflow::optimizer_mode::zenflow;
  const std::int64_t nan_channel = nan_step >= 0 ? 3 / shapes[0].len : -1;
  std::int64_t big_channel = -1; // at big_step: param 0's, its score overflows (finite elements)
  // With big_rival, a device-set row of param 0 overflows too: the lower index of the two with
  // the smaller fp64 sum, so that ranking them by index would pick the wrong one.
  std::int64_t rival = -1;
  std::int64_t winner = -1;
  bool pending = false;
  std::uint64_t wire = 0; // summed over the ranks
  auto step_bytes = [&](std::int64_t t, int r, bool selecting,
                        const std::vector<std::vector<std::int32_t>>& now) -> std::uint64_t {
    std::uint64_t dense = 0, others = 0, channels = 0, rows = 0, nan_row = 0, entering = 0, state = 0;
    std::uint64_t all_channels = 0, all_rows = 0; // a device communicator's sums
    const bool l1 = selecting && cfg.importance == zenflow::channel_norm::l1;
    for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
      const auto len = static_cast<std::uint64_t>(shapes[p].len);
      if (!shapes[p].matrix) {
        dense += len;
        continue;
      }
      const auto& sel = prev_sel[p]; // the device set at the start of step t
      dense += sel.size() * len;
      for (int q = 0; q < n; ++q) {
        for (std::int64_t c = part.begin(m, q); c < part.end(m, q); ++c) {
          const auto ch = static_cast<std::int32_t>(c);
          const bool selected_now = std::binary_search(now[p].begin(), now[p].end(), ch);
          rows += q == r && !selected_now ? 1 : 0;
          all_rows += selected_now ? 0 : 1;
          if (std::binary_search(sel.begin(), sel.end(), ch)) {
            continue;
          }
          others += q != r ? len : 0;
          entering += q == r && selected_now ? len * sizeof(T) : 0;
          state += q == r && selected_now ? state_per_element * len + 4 : 0;
          const bool nonfinite = (t == nan_step && c == nan_channel) || (t == big_step && c == big_channel);
          nan_row += nonfinite && p == 0 && q == r ? len * sizeof(T) : 0;
        }
      }
      channels += static_cast<std::uint64_t>(part.count(m, r)) * (l1 ? 2 : 1);
      all_channels += static_cast<std::uint64_t>(shapes[p].channels);
      ++m;
    }
    const bool rest = zen && (cfg.auto_update() || cfg.mass_trigger()) && t >= cfg.full_warm_up_rounds;
    if (device_comm) {
      return 4 * (dense + others + all_channels * (l1 ? 2 : 1) + shapes.size() + (rest ? all_rows : 0)) +
             8 * all_channels + entering + state;
    }
    return 4 * (dense + others + channels + shapes.size() + (rest ? rows : 0)) + nan_row + entering + state;
  };
  for (std::int64_t t = 0; t < steps; ++t) {
    pending = pending || (zen && t >= cfg.full_warm_up_rounds && cfg.is_selection_step(t));
    if (t == big_step) { // the last rank's first unselected channel: the others must fetch its row
      for (std::int64_t c = part.begin(0, n - 1); c < part.end(0, n - 1) && big_channel < 0; ++c) {
        big_channel =
            std::binary_search(prev_sel[0].begin(), prev_sel[0].end(), static_cast<std::int32_t>(c)) ? -1 : c;
      }
      ASSERT_GE(big_channel, 0);
      if (big_rival) {
        ASSERT_FALSE(prev_sel[0].empty());
        rival = prev_sel[0].front();
        winner = std::max(rival, big_channel);
      }
    }
    if constexpr (Emulated) {
      device.synchronize_stream(stream); // the step before has read the gradients
    }
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      std::vector<std::vector<T>> all;
      for (int r = 0; r < n; ++r) {
        all.push_back(grad_of<T>(r, t, p, shapes[p]));
      }
      if (t == nan_step && p == 0) {
        all[static_cast<std::size_t>(n - 1)][3] =
            zenflow::from_float<T>(std::numeric_limits<float>::quiet_NaN());
      }
      for (int r = 0; t == big_step && p == 0 && r < n; ++r) { // 8 x (3e19)^2 overflows an fp32 score
        std::fill_n(all[static_cast<std::size_t>(r)].begin() + big_channel * shapes[0].len, shapes[0].len,
                    zenflow::from_float<T>(3e19f));
        if (rival >= 0) { // 8 x (2e19)^2 or 8 x (4e19)^2: below or above big_channel's sum
          std::fill_n(all[static_cast<std::size_t>(r)].begin() + rival * shapes[0].len, shapes[0].len,
                      zenflow::from_float<T>(rival < big_channel ? 2e19f : 4e19f));
        }
      }
      // Copied into the registered buffers (an assignment could move another buffer in).
      const auto& mine = all[static_cast<std::size_t>(rank)];
      std::copy(mine.begin(), mine.end(), g[p].begin());
      const auto mean = mean_of(all);
      std::copy(mean.begin(), mean.end(), ref_g[p].begin());
    }
    const float lr = 1e-2f * (1.0f - 0.5f * static_cast<float>(t) / static_cast<float>(steps));
    const auto a = dp.step(lr, stream);
    const auto b = ref.step(lr);
    // A selection that select_on_mass_drop fired (decided at step t-1): the reference's report
    // says which step it was.
    const bool selecting = pending || b.selection;
    std::vector<std::vector<std::int32_t>> now(shapes.size());
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      now[p] = shapes[p].matrix ? ref.selected(ref_ids[p]) : std::vector<std::int32_t>{};
    }
    std::uint64_t mine_wire = 0;
    for (int r = 0; r < n; ++r) {
      const std::uint64_t bytes = step_bytes(t, r, selecting, now);
      wire += bytes;
      mine_wire = r == rank ? bytes : mine_wire;
    }
    EXPECT_EQ(a.selection, b.selection) << "step " << t;
    if (t == big_step && winner >= 0) {
      EXPECT_TRUE(a.selection) << "step " << t;
      EXPECT_EQ(dp.selected(ids[0]), std::vector<std::int32_t>{static_cast<std::int32_t>(winner)});
    }
    EXPECT_EQ(a.window_closed, b.window_closed) << "step " << t;
    // Exact where no window's weights cross (a close, or the drain of a selection step, applies
    // the job before it); the sum over the run below counts those too.
    if (zen && t >= cfg.full_warm_up_rounds && !selecting && !a.window_closed) {
      EXPECT_EQ(a.comm_bytes, mine_wire) << "step " << t;
    }
    EXPECT_GE(a.comm_bytes, mine_wire) << "step " << t;
    pending = pending && !b.selection;
    for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
      if (!shapes[p].matrix) {
        continue;
      }
      const auto& sel = now[p];
      const auto len = static_cast<std::uint64_t>(shapes[p].len);
      for (const std::int32_t c : prev_sel[p]) { // a row that left the device goes home to its owner
        const bool left = !std::binary_search(sel.begin(), sel.end(), c);
        const bool others = c < part.begin(m, rank) || c >= part.end(m, rank);
        others_bytes += left && others ? 12 * len + 4 : 0; // the device's fp32 master, m, v and count
      }
      prev_sel[p] = sel;
      std::int64_t mine = 0; // this rank's unselected channels
      for (std::int64_t c = part.begin(m, rank); c < part.end(m, rank); ++c) {
        mine += std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(c)) ? 0 : 1;
      }
      const auto unselected = shapes[p].channels - static_cast<std::int64_t>(sel.size());
      others_bytes += static_cast<std::uint64_t>(unselected - mine) * len * sizeof(T);
      ++m;
    }
    if (!Emulated) {
      EXPECT_EQ(a.skipped, b.skipped) << "step " << t;
      skipped += a.skipped ? 1 : 0;
    }
  }
  dp.flush(stream);
  ref.flush();
  if constexpr (Emulated) {
    device.synchronize_stream(stream);
  }
  if (nan_step >= 0 && !Emulated) {
    EXPECT_EQ(skipped, 1); // the NaN of one rank skipped the step on every rank
  }
  EXPECT_EQ(dp.stats().skipped_steps, ref.stats().skipped_steps);
  EXPECT_EQ(dp.stats().selections, ref.stats().selections);
  EXPECT_EQ(dp.stats().mass_drop_selections, ref.stats().mass_drop_selections);
  last_run_mass_drop_selections = ref.stats().mass_drop_selections;
  EXPECT_EQ(dp.stats().windows_closed, ref.stats().windows_closed);
  EXPECT_EQ(ref.stats().comm_bytes, 0u);
  // Down per rank: the reference's bytes but the other blocks' unselected gradients.
  EXPECT_EQ(dp.stats().d2h_bytes, ref.stats().d2h_bytes - others_bytes);
  // Host memory per rank: its block of every matrix (vectors, on the host in the warm-up, whole).
  const auto summed = dp.stats_over_ranks(stream);
  const bool sync = cfg.mode == zenflow::optimizer_mode::offload_sync; // every channel on the host
  const bool vectors_on_host = sync || cfg.full_warm_up_rounds > 0;
  const std::uint64_t accs = cfg.overlap_step && !sync ? 2 : 1;
  std::uint64_t state = 0, acc = 0, vec_state = 0, vec_acc = 0, all_host = 0, unselected = 0;
  for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
    const auto len = static_cast<std::uint64_t>(shapes[p].len);
    if (!shapes[p].matrix) {
      vec_state += vectors_on_host ? len * 12 + 4 : 0;
      vec_acc += vectors_on_host ? len * 4 * accs : 0;
      continue;
    }
    const auto own = static_cast<std::uint64_t>(part.count(m, rank));
    state += own * (state_per_element * len + 4);
    acc += own * len * 4 * accs;
    const auto c = shapes[p].channels;
    all_host += static_cast<std::uint64_t>(c) * len * sizeof(T);
    unselected += static_cast<std::uint64_t>(c - cfg.topk(c)) * len * sizeof(T);
    ++m;
  }
  EXPECT_EQ(dp.stats().memory.host_state, state + vec_state);
  EXPECT_EQ(dp.stats().memory.host_accumulators, acc + vec_acc);
  const auto copies = static_cast<std::uint64_t>(n - 1); // of the replicated vectors
  EXPECT_EQ(summed.memory.host_state, ref.stats().memory.host_state + copies * vec_state);
  EXPECT_EQ(summed.memory.host_accumulators, ref.stats().memory.host_accumulators + copies * vec_acc);
  // Bytes on the wire, summed over the ranks: the two hashes from every rank, each step's
  // reductions, entering rows and migrations (above), each window's weights once (every owner its
  // share): all unselected channels, or every channel in the warm-up.
  const auto jobs = static_cast<std::uint64_t>(dp.stats().host_jobs);
  const auto warm =
      sync ? jobs : static_cast<std::uint64_t>(std::min<std::int64_t>(cfg.full_warm_up_rounds, steps));
  EXPECT_EQ(summed.comm_bytes,
            static_cast<std::uint64_t>(n) * 16 + wire + warm * all_host + (jobs - warm) * unselected);
  EXPECT_EQ(summed.d2h_bytes, [&] {
    std::uint64_t s = 0; // plain MPI, not the communicator under test
    const auto mine = static_cast<std::uint64_t>(dp.stats().d2h_bytes);
    MPI_Allreduce(&mine, &s, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return s;
  }());
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    EXPECT_EQ(std::memcmp(w[p].data(), ref_w[p].data(), w[p].size() * sizeof(T)), 0)
        << "weights of param " << p;
    EXPECT_TRUE(same_on_every_rank(w[p])) << "param " << p;
    const auto s = dp.state(ids[p], stream);
    const auto r = ref.state(ref_ids[p]);
    EXPECT_EQ(std::memcmp(s.master.data(), r.master.data(), s.master.size() * 4), 0)
        << "master of param " << p;
    EXPECT_EQ(std::memcmp(s.m.data(), r.m.data(), s.m.size() * 4), 0) << "m of param " << p;
    EXPECT_EQ(std::memcmp(s.v.data(), r.v.data(), s.v.size() * 4), 0) << "v of param " << p;
    EXPECT_EQ(s.counts, r.counts) << "param " << p;
    EXPECT_EQ(dp.selected(ids[p]), ref.selected(ref_ids[p])) << "param " << p;
  }
}

// Every case on the host backend over MPI and on the emulated device over MPI as a device
// communicator (the path NCCL takes): the same reference, the same bits, bytes and memory.
template <class T>
void run_against_one_rank(const zenflow::config& cfg,
                          int steps,
                          std::int64_t nan_step,
                          const std::vector<shape>& shapes = kShapes,
                          std::int64_t big_step = -1,
                          bool big_rival = false) {
  {
    SCOPED_TRACE("host backend, mpi_communicator");
    run_on<T, dp_path::host>(cfg, steps, nan_step, shapes, big_step, big_rival);
  }
  SCOPED_TRACE("emulated backend, emulated_device_communicator<mpi_communicator>");
  auto device_cfg = cfg;
  device_cfg.upload = zenflow::upload_policy::whole_window; // chunk_ring is refused there (below)
  run_on<T, dp_path::emulated_device_comm>(device_cfg, steps, nan_step, shapes, big_step, big_rival);
}

TEST(engine_data_parallel, fixed_windows_overlap_float_with_a_nan_on_one_rank) {
  run_against_one_rank<float>(small_config(), 20, 9);
}

TEST(engine_data_parallel, zen_auto_with_warm_up_bf16) {
  auto cfg = small_config();
  cfg.update_interval = 0; // Zen-auto
  cfg.max_update_interval = 6;
  cfg.auto_ratio = 0.5;
  cfg.full_warm_up_rounds = 3;
  cfg.select_interval = 12;
  run_against_one_rank<zenflow::bfloat16>(cfg, 24, -1);
}

// select_on_mass_drop fires selections between the scheduled ones: a triggered step fetches its
// entering rows from their owners like a scheduled selection step, and every rank must decide it
// from the same rest masses (the owners' rows, gathered or summed).
TEST(engine_data_parallel, selections_fired_by_the_mass_trigger_float) {
  auto cfg = small_config();
  cfg.update_interval = 0; // Zen-auto: the trigger reads the same lag-two masses
  cfg.max_update_interval = 4;
  cfg.auto_ratio = 0.5;
  cfg.select_interval = 1000;    // only the first selection is scheduled
  cfg.select_on_mass_drop = 1.0; // random gradients: fires whenever the share is below the first block's
  cfg.min_select_interval = 6;
  run_against_one_rank<float>(cfg, 90, -1);
  // With the default seed it fires at step 87 on 2 ranks, 4 times in the first 50 steps on 3.
  EXPECT_GE(last_run_mass_drop_selections, 1) << "the trigger must fire for this test to check anything";
}

// The same with fixed windows (the default select_on_mass_drop with a fixed update_interval): the
// trigger reads the rest masses as Zen-auto does, so every rank needs the one-rank masses, not
// the partial ones of its own block.
TEST(engine_data_parallel, selections_fired_by_the_mass_trigger_with_fixed_windows_float) {
  auto cfg = small_config();
  cfg.update_interval = 2;
  cfg.select_interval = 1000;
  cfg.select_on_mass_drop = 1.0;
  cfg.min_select_interval = 6;
  run_against_one_rank<float>(cfg, 90, -1);
  EXPECT_GE(last_run_mass_drop_selections, 1) << "the trigger must fire for this test to check anything";
}

// The L1 importance: a selection step computes it after the prologue, from zeros on the other
// blocks' unselected rows, so the owners complete it as they do the scores.
TEST(engine_data_parallel, selections_by_l1_importance_bf16) {
  auto cfg = small_config();
  cfg.importance = zenflow::channel_norm::l1;
  cfg.select_interval = 3;
  cfg.update_interval = 2;
  run_against_one_rank<zenflow::bfloat16>(cfg, 16, -1);
}

TEST(engine_data_parallel, no_overlap_clipping_loss_scale_fp16) {
  auto cfg = small_config();
  cfg.overlap_step = false;
  cfg.update_interval = 3;
  cfg.select_interval = 6;
  cfg.gradient_clipping = 0.5f;
  cfg.loss_scale = 64.0f;
  run_against_one_rank<zenflow::half>(cfg, 18, 7);
}

// Wide matrices: a D2H slot holds 64 and 25 channels, so slots straddle the owners' blocks (every
// slot is packed for the rest mass, only this rank's rows of it go down); a matrix of 2 channels
// leaves a rank of 3 an empty block. bf16 host moments: each rank rounds its block with the
// whole-matrix indices (first_channel), and the entering rows cross as bf16.
TEST(engine_data_parallel, slots_straddle_the_blocks_bf16) {
  auto cfg = small_config();
  cfg.host_moments = zenflow::moment_precision::bf16;
  cfg.update_interval = 0; // Zen-auto: its rest masses must have the one-rank bits
  cfg.max_update_interval = 5;
  cfg.auto_ratio = 0.5;
  cfg.select_interval = 7;
  // the gathered weights go up chunk by chunk (over a host communicator; whole over a device one)
  cfg.upload = zenflow::upload_policy::chunk_ring;
  run_against_one_rank<zenflow::bfloat16>(cfg, 16, 5,
                                          {{true, 301, 32}, {false, 1, 7}, {true, 77, 80}, {true, 2, 8}});
}

// offload_sync: every channel's state on the host, split by owner; every step a window.
TEST(engine_data_parallel, offload_sync_float_with_a_nan_on_one_rank) {
  auto cfg = small_config();
  cfg.mode = zenflow::optimizer_mode::offload_sync;
  cfg.overlap_step = false;
  run_against_one_rank<float>(cfg, 10, 4);
}

// A finite gradient whose fp32 score overflows (3e19 x 8 elements, on a channel of the last rank's
// block that is not selected): the step is not skipped, and the clipping norm rescans that row in
// fp64, so every rank fetches it from its owner; a wrong norm on any rank changes every weight.
TEST(engine_data_parallel, an_overflowing_score_with_clipping_float) {
  auto cfg = small_config();
  cfg.gradient_clipping = 1.0f;
  run_against_one_rank<float>(cfg, 12, -1, kShapes, 5);
}

// Issue 36: at a selection step (k = 1) two channels of param 0 overflow fp32, the last rank's
// unselected big_channel and a device-set row, the lower index of the two with the smaller fp64
// sum: every rank selects the larger (the fp64 rescans of the owners' rows, the same on every
// rank), as one rank does.
TEST(engine_data_parallel, overflowing_scores_rank_by_their_fp64_sums_float) {
  auto cfg = small_config();
  cfg.gradient_clipping = 1.0f;
  cfg.topk_ratio = 1.5 / 24; // k = 1 of 24 channels, and of 13
  run_against_one_rank<float>(cfg, 12, -1, kShapes, 8, true);
}

// "snr" needs every block's accumulator inside the window job: refused on every rank, by name.
TEST(engine_data_parallel, snr_is_refused_with_the_owner_partition) {
  auto cfg = small_config();
  cfg.host_lr_scale = zenflow::host_lr_scaling::snr;
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> e(cfg, {}, make_comm());
  register_all(e, w, g);
  zf_engine_test::expect_invalid([&] { e.initialize(); }, "host_lr_scale");
  EXPECT_FALSE(e.initialized());
}

TEST(engine_data_parallel, emulated_backend_float) {
  run_on<float, dp_path::emulated>(small_config(), 16, -1);
}

// A device communicator gathers a window's shares in the device upload buffer: chunk_ring has
// none, so initialize() refuses it, naming the setting, and nothing is set up.
TEST(engine_data_parallel, chunk_ring_is_refused_over_a_device_communicator) {
  auto cfg = small_config();
  cfg.upload = zenflow::upload_policy::chunk_ring;
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  using comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  zenflow::engine<zenflow::emulated_backend, comm> e(cfg, zenflow::emulated_backend{device},
                                                     comm(device, make_comm()));
  register_all(e, w, g);
  zf_engine_test::expect_invalid([&] { e.initialize(stream); }, "upload");
  EXPECT_FALSE(e.initialized());
}

// A training loop as a user writes it: least squares y = W x, each rank on its own shard of every
// batch. The loss over the whole batch must fall, and every replica must hold the same weights.
TEST(engine_data_parallel, a_training_loop_each_rank_on_its_shard) {
  const std::int64_t in = 16;
  const std::int64_t out = 4;
  const int batch = 12;                            // samples per step, split over the ranks
  std::mt19937_64 gen(zf_test::base_seed() + 99u); // the same data on every rank
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> truth(static_cast<std::size_t>(in * out));
  for (auto& x : truth) {
    x = nd(gen);
  }
  auto sample = [&](std::vector<float>& x, std::vector<float>& y) {
    for (auto& v : x) {
      v = nd(gen);
    }
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (std::int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(truth[static_cast<std::size_t>(i * out + o)]) *
               x[static_cast<std::size_t>(i)];
      }
      y[static_cast<std::size_t>(o)] = static_cast<float>(acc);
    }
  };
  // The loss of one sample and its gradient added into `w_grad` (W stored channel-major: [in][out]).
  auto loss_and_grad = [&](const std::vector<float>& w, const std::vector<float>& x,
                           const std::vector<float>& y, std::vector<float>* w_grad) {
    double loss = 0.0;
    for (std::int64_t o = 0; o < out; ++o) {
      double pred = 0.0;
      for (std::int64_t i = 0; i < in; ++i) {
        pred +=
            static_cast<double>(w[static_cast<std::size_t>(i * out + o)]) * x[static_cast<std::size_t>(i)];
      }
      const double err = pred - y[static_cast<std::size_t>(o)];
      loss += 0.5 * err * err;
      for (std::int64_t i = 0; w_grad != nullptr && i < in; ++i) {
        (*w_grad)[static_cast<std::size_t>(i * out + o)] +=
            static_cast<float>(err * x[static_cast<std::size_t>(i)]);
      }
    }
    return loss;
  };
  auto cfg = small_config();
  cfg.adam.lr = 5e-2f;
  std::vector<float> w(static_cast<std::size_t>(in * out), 0.0f), w_grad(w.size());
  std::vector<std::vector<float>> xs(batch, std::vector<float>(static_cast<std::size_t>(in)));
  std::vector<std::vector<float>> ys(batch, std::vector<float>(static_cast<std::size_t>(out)));
  // A held-out set, the same on every rank.
  std::vector<std::vector<float>> hx(32, std::vector<float>(static_cast<std::size_t>(in)));
  std::vector<std::vector<float>> hy(32, std::vector<float>(static_cast<std::size_t>(out)));
  for (std::size_t s = 0; s < hx.size(); ++s) {
    sample(hx[s], hy[s]);
  }
  auto held_out_loss = [&] {
    double loss = 0.0;
    for (std::size_t s = 0; s < hx.size(); ++s) {
      loss += loss_and_grad(w, hx[s], hy[s], nullptr);
    }
    return loss;
  };
  const double before = held_out_loss();
  // example-begin engine-data-parallel
  // Every rank: the same configuration and registrations, the same initial weights.
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> zf(
      cfg, zenflow::host_backend{}, zenflow::mpi_communicator(MPI_COMM_WORLD));
  zf.add_matrix(w.data(), w_grad.data(), /*channels=*/in, /*channel_len=*/out);
  zf.initialize(); // throws on every rank if a rank's configuration or parameters differ
  const int rank = zf.comm().rank();
  const int ranks = zf.comm().size();
  for (int step = 0; step < 60; ++step) {
    for (int s = 0; s < batch; ++s) {
      sample(xs[static_cast<std::size_t>(s)], ys[static_cast<std::size_t>(s)]);
    }
    std::fill(w_grad.begin(), w_grad.end(), 0.0f);
    for (int s = rank; s < batch; s += ranks) { // this rank's shard of the batch
      loss_and_grad(w, xs[static_cast<std::size_t>(s)], ys[static_cast<std::size_t>(s)], &w_grad);
    }
    zf.step(cfg.adam.lr); // the gradients' mean over the ranks first, then the ZenFlow step
  }
  zf.flush();
  const zenflow::stats mine = zf.stats();           // this rank: its bytes, its block's host state
  const zenflow::stats all = zf.stats_over_ranks(); // summed over the ranks (every rank calls it)
  // example-end engine-data-parallel
  EXPECT_LT(held_out_loss(), 0.25 * before);
  // The host state of the one matrix (fp32 master, m, v and a count per channel), split by owner.
  EXPECT_EQ(all.memory.host_state, static_cast<std::size_t>(in * (12 * out + 4)));
  EXPECT_EQ(mine.memory.host_state, static_cast<std::size_t>(zf.partition().count(0, rank) * (12 * out + 4)));
  EXPECT_TRUE(same_on_every_rank(w));
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
