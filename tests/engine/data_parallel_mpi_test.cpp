// The engine data parallel under mpiexec (2 and 3 ranks), every rank running every case. Each
// rank's gradients are random, seeded by rank and step, so every rank can compute every other
// rank's gradients and their mean itself: the float64 rank-order sum divided by N, rounded once to
// fp32, then to the working type (what mpi_communicator's mean is, docs/data-parallel.md). A
// one-rank engine fed that mean in the same process is the reference: the N-rank engine must
// match it bit for bit (weights, masters, moments, counts, selections, skipped steps), and every
// rank must hold the same weights (compared with a plain MPI_Allgather).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <mpi.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "engine_harness.hpp"
#include "support/mpi_gtest_main.hpp"
#include "support/random.hpp"

namespace {

using namespace std::chrono_literals;
using zf_engine_test::kShapes;
using zf_engine_test::shape;
using zf_engine_test::small_config;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A generous bound: a failure on another rank ends a case in 10 s instead of a hang.
zenflow::mpi_communicator make_comm() {
  return zenflow::mpi_communicator(MPI_COMM_WORLD, {10s});
}

// True when every rank holds the same bytes in `v` (plain MPI, not the communicator under test).
template <class T>
bool same_on_every_rank(const std::vector<T>& v) {
  const int n = world_size();
  const auto bytes = v.size() * sizeof(T);
  std::vector<unsigned char> all(bytes * static_cast<std::size_t>(n));
  MPI_Allgather(v.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE,
                MPI_COMM_WORLD);
  for (int r = 1; r < n; ++r) {
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(r) * bytes, bytes) != 0) {
      return false;
    }
  }
  return true;
}

// Rank `rank`'s gradient of parameter `p` at step `t`: channel magnitudes skewed (e^0..e^4) and
// different on every rank, so the mean's top-k differs from any one rank's. Never exactly zero
// (a -0.0 would make the sum's sign of zero depend on the order).
template <class T>
std::vector<T> grad_of(int rank, std::int64_t t, std::size_t p, const shape& sh) {
  std::mt19937_64 gen(zf_test::base_seed() + 1000003u * static_cast<std::uint64_t>(t) + 7919u * p +
                      static_cast<std::uint64_t>(rank));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<T> g(static_cast<std::size_t>(sh.channels * sh.len));
  for (std::int64_t c = 0; c < sh.channels; ++c) {
    const float scale = std::exp(4.0f * ud(gen)) * 0.05f;
    for (std::int64_t i = 0; i < sh.len; ++i) {
      float x = scale * nd(gen);
      x = x == 0.0f ? 1e-3f : x;
      g[static_cast<std::size_t>(c * sh.len + i)] = zenflow::from_float<T>(x);
    }
  }
  return g;
}

// The independent reference of the reduced gradient: float64 sum in rank order, / N, one
// rounding to fp32, one to T.
template <class T>
std::vector<T> mean_of(const std::vector<std::vector<T>>& per_rank) {
  std::vector<T> out(per_rank[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    double s = 0.0;
    for (const auto& g : per_rank) {
      s += static_cast<double>(zenflow::to_float(g[i]));
    }
    out[i] = zenflow::from_float<T>(static_cast<float>(s / static_cast<double>(per_rank.size())));
  }
  return out;
}

template <class T>
std::vector<std::vector<T>> initial_weights(const std::vector<shape>& shapes = kShapes) {
  std::mt19937_64 gen(zf_test::base_seed() + 17u); // the same on every rank: replicas start equal
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<std::vector<T>> w;
  for (const auto& sh : shapes) {
    std::vector<T> v(static_cast<std::size_t>(sh.channels * sh.len));
    for (auto& x : v) {
      x = zenflow::from_float<T>(nd(gen));
    }
    w.push_back(v);
  }
  return w;
}

template <class T, class Engine>
std::vector<zenflow::param_id> register_all(Engine& e,
                                            std::vector<std::vector<T>>& w,
                                            std::vector<std::vector<T>>& g,
                                            const std::vector<shape>& shapes = kShapes) {
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const auto& sh = shapes[p];
    ids.push_back(sh.matrix ? e.add_matrix(w[p].data(), g[p].data(), sh.channels, sh.len)
                            : e.add_vector(w[p].data(), g[p].data(), sh.len));
  }
  return ids;
}

std::uint64_t total_elements(const std::vector<shape>& shapes) {
  std::uint64_t n = 0;
  for (const auto& sh : shapes) {
    n += static_cast<std::uint64_t>(sh.channels * sh.len);
  }
  return n;
}

// `Emulated`: the data-parallel engine on the emulated backend (a host communicator on an
// asynchronous device); the reference is always the host backend with one rank.
template <class T, bool Emulated = false>
void run_against_one_rank(const zenflow::config& cfg,
                          int steps,
                          std::int64_t nan_step,
                          const std::vector<shape>& shapes = kShapes) {
  const int rank = world_rank();
  const int n = world_size();
  auto w = initial_weights<T>(shapes);
  auto ref_w = w;
  std::vector<std::vector<T>> g(shapes.size()), ref_g(shapes.size());
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    g[p].resize(w[p].size());
    ref_g[p].resize(w[p].size());
  }
  zenflow::emulated_device device; // outlives the engine (declared first)
  cudaStream_t stream = nullptr;
  using backend = std::conditional_t<Emulated, zenflow::emulated_backend, zenflow::host_backend>;
  auto make_backend = [&] {
    if constexpr (Emulated) {
      stream = device.create_stream();
      return zenflow::emulated_backend{device};
    } else {
      return zenflow::host_backend{};
    }
  };
  zenflow::engine<backend, zenflow::mpi_communicator> dp(cfg, make_backend(), make_comm());
  zenflow::engine<zenflow::host_backend> ref(cfg);
  const auto ids = register_all(dp, w, g, shapes);
  const auto ref_ids = register_all(ref, ref_w, ref_g, shapes);
  dp.initialize(stream);
  ref.initialize();
  ASSERT_EQ(dp.comm().size(), n);
  const auto& part = dp.partition();
  std::int64_t skipped = 0;
  // Independent bookkeeping from what the reference shows (its device sets after every step):
  // the rows that entered the device (their state crosses the wire from the owners), and the
  // gradient bytes this rank does not copy down (the unselected channels of the other blocks).
  std::vector<std::vector<std::int32_t>> prev_sel(shapes.size());
  std::uint64_t entered_bytes = 0;
  // fp32 master + m and v as the host keeps them
  const std::uint64_t state_per_element = cfg.host_moments == zenflow::moment_precision::bf16 ? 8 : 12;
  std::uint64_t others_bytes = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
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
      // Copied into the registered buffers (an assignment could move another buffer in).
      const auto& mine = all[static_cast<std::size_t>(rank)];
      std::copy(mine.begin(), mine.end(), g[p].begin());
      const auto mean = mean_of(all);
      std::copy(mean.begin(), mean.end(), ref_g[p].begin());
    }
    const float lr = 1e-2f * (1.0f - 0.5f * static_cast<float>(t) / static_cast<float>(steps));
    const auto a = dp.step(lr, stream);
    const auto b = ref.step(lr);
    EXPECT_EQ(a.selection, b.selection) << "step " << t;
    EXPECT_EQ(a.window_closed, b.window_closed) << "step " << t;
    EXPECT_GE(a.comm_bytes, 4 * total_elements(shapes)); // the mean, then migrations and windows
    for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
      if (!shapes[p].matrix) {
        continue;
      }
      const auto sel = ref.selected(ref_ids[p]);
      std::vector<std::int32_t> entered;
      std::set_difference(sel.begin(), sel.end(), prev_sel[p].begin(), prev_sel[p].end(),
                          std::back_inserter(entered));
      const auto len = static_cast<std::uint64_t>(shapes[p].len);
      entered_bytes += entered.size() * (state_per_element * len + 4);
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
  // Bytes on the wire, summed over the ranks: the two hashes and every gradient in fp32 per step
  // from every rank, each entering row's state once (from its owner), each window's weights once
  // (every owner its share): all unselected channels, or every channel in the warm-up.
  const auto jobs = static_cast<std::uint64_t>(dp.stats().host_jobs);
  const auto warm =
      sync ? jobs : static_cast<std::uint64_t>(std::min<std::int64_t>(cfg.full_warm_up_rounds, steps));
  EXPECT_EQ(summed.comm_bytes, static_cast<std::uint64_t>(n) *
                                       (16 + static_cast<std::uint64_t>(steps) * 4 * total_elements(shapes)) +
                                   entered_bytes + warm * all_host + (jobs - warm) * unselected);
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
  cfg.upload = zenflow::upload_policy::chunk_ring; // the gathered weights go up chunk by chunk
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
  run_against_one_rank<float, true>(small_config(), 16, -1);
}

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

// Every rank saves its own file (checkpoint_rank_path); a fresh N-rank engine loaded from them
// continues exactly as the uninterrupted run.
TEST(engine_data_parallel, save_and_load_every_rank_its_own_file) {
  const int rank = world_rank();
  const int n = world_size();
  char name[256] = {};
  if (rank == 0) { // one name for every rank (each file adds its rank)
    std::snprintf(name, sizeof name, "%szf_dp_ckpt_%lld", ::testing::TempDir().c_str(),
                  static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string base = name;
  auto w = initial_weights<float>();
  std::vector<std::vector<float>> g(kShapes.size());
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    g[p].resize(w[p].size());
  }
  auto feed = [&](std::int64_t t) {
    for (std::size_t p = 0; p < kShapes.size(); ++p) {
      const auto mine = grad_of<float>(rank, t, p, kShapes[p]);
      std::copy(mine.begin(), mine.end(), g[p].begin());
    }
  };
  const auto cfg = small_config();
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> a(cfg, {}, make_comm());
  const auto ids_a = register_all(a, w, g);
  a.initialize();
  for (std::int64_t t = 0; t < 7; ++t) {
    feed(t);
    (void)a.step(1e-2f);
  }
  a.save(base);
  EXPECT_TRUE(std::ifstream(zenflow::checkpoint_rank_path(base, rank, n)).good());
  auto w_saved = w; // the working weights are the user's to save
  for (std::int64_t t = 7; t < 14; ++t) {
    feed(t);
    (void)a.step(1e-2f);
  }
  a.flush();
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> b(cfg, {}, make_comm());
  const auto ids_b = register_all(b, w_saved, g);
  b.initialize();
  b.load(base);
  for (std::int64_t t = 7; t < 14; ++t) {
    feed(t);
    (void)b.step(1e-2f);
  }
  b.flush();
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    EXPECT_EQ(std::memcmp(w[p].data(), w_saved[p].data(), w[p].size() * 4), 0) << "param " << p;
    // Each rank's file holds its block; the gathered state of the resumed run is the same.
    const auto sa = a.state(ids_a[p]);
    const auto sb = b.state(ids_b[p]);
    EXPECT_EQ(std::memcmp(sa.master.data(), sb.master.data(), sa.master.size() * 4), 0) << "param " << p;
    EXPECT_EQ(std::memcmp(sa.m.data(), sb.m.data(), sa.m.size() * 4), 0) << "param " << p;
    EXPECT_EQ(std::memcmp(sa.v.data(), sb.v.data(), sa.v.size() * 4), 0) << "param " << p;
    EXPECT_EQ(sa.counts, sb.counts) << "param " << p;
  }
  EXPECT_EQ(a.stats().memory.host_state, b.stats().memory.host_state);
  std::remove(zenflow::checkpoint_rank_path(base, rank, n).c_str());
}

// A rank that does not reach step() (dead, stuck, or out of step) is an error on the others within
// the communicator's bound, not a hang: rank 0 gives up after 300 ms; the others come 1.5 s late.
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
      const auto waited = std::chrono::steady_clock::now() - start;
      EXPECT_GE(waited, 300ms);
      EXPECT_LT(waited, 1200ms) << "the bound was not kept";
      EXPECT_NE(std::string(err.what()).find("all_reduce_mean"), std::string::npos) << err.what();
    }
    EXPECT_EQ(e.steps(), 0); // the step did not happen
  } else {
    std::this_thread::sleep_for(1500ms);
    (void)e.step(1e-2f); // completes with rank 0's posted contribution
  }
  MPI_Barrier(MPI_COMM_WORLD); // rank 0 makes progress here on the operation it left posted
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
