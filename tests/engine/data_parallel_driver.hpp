// The data-parallel Driver of the shared engine cases (engine_cases.hpp, reference_cases.hpp),
// run under mpiexec with 1, 2 and 3 ranks (data_parallel_mpi_test.cpp). The case body writes the
// model's gradient as it does for one rank; the driver then gives every rank a different gradient
// whose mean (mpi_communicator's: the float64 rank-order sum / N, rounded once to fp32, then to T;
// mean_of) is what the body's reference sees: it overwrites the model's gradient with that mean
// before the body steps the reference. Beside the N-rank engine it runs a one-rank host engine fed
// the same mean, which every rank must equal bit for bit (docs/data-parallel.md): weights after
// every step (and the same on every rank, by a plain MPI_Allgather), step reports, selections,
// optimizer state, counters; and it keeps the data-parallel ledger of the bytes each rank puts on
// the wire, copies down and keeps in host memory, from what the one-rank engine shows.
//
// Three paths (dp_path): the host backend over mpi_communicator, the emulated backend over it,
// and the emulated backend over emulated_device_communicator<mpi_communicator> (stream-ordered
// collectives on device buffers: the path NCCL takes on the CUDA backend). The gradients' buckets
// (dp/grad_buckets.hpp) differ by path, and none of it may change a bit: the host path runs the
// defaults (one bucket, the mean in place, no announcement); the emulated path buckets of three
// of the longest rows (matrices straddle buckets), the mean in engine buffers, every parameter
// announced by grad_ready() in registration order (the reverse of the buckets' order: each bucket
// launches only when its last parameter is announced); the device communicator's path the same
// small buckets, the mean in place, and each rank announcing a different subset of the parameters
// in its own order every step (the rest launched by step()).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mpi.h>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "data_parallel_support.hpp"
#include "engine_cases.hpp"
#include "engine_harness.hpp"

namespace zf_dp_test {

/// Where the data-parallel engine runs; the engine it must equal is always the host backend with
/// one rank.
enum class dp_path {
  host,                 ///< the host backend over mpi_communicator
  emulated,             ///< the emulated backend (an asynchronous device) over mpi_communicator
  emulated_device_comm, ///< the emulated backend over emulated_device_communicator<mpi_communicator>
};

/// Every rank's gradient at step `t` of parameter `p` whose mean is close to `x` (the case's
/// gradient): x plus a per-rank random part with its own skewed channel magnitudes (so no rank's
/// top-k is the mean's), the parts summing to zero in float before the rounding to T. A
/// non-finite element of x goes to the last rank only, the others get a finite value: one rank's
/// NaN or Inf must skip the step on every rank. No element is a zero (a -0.0 would make the sign of
/// a zero sum depend on the order). One rank: x itself.
template <class T>
std::vector<std::vector<T>>
split_over_ranks(const std::vector<T>& x, std::int64_t len, std::size_t p, std::int64_t t, int n) {
  std::vector<std::vector<T>> all(static_cast<std::size_t>(n), x);
  if (n == 1) {
    return all;
  }
  std::mt19937_64 gen(zf_test::base_seed() + 1000003u * static_cast<std::uint64_t>(t) + 7919u * p + 31u);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> sum(x.size(), 0.0f);
  for (int r = 0; r < n; ++r) {
    const bool last = r == n - 1;
    auto& g = all[static_cast<std::size_t>(r)];
    float scale = 0.0f;
    for (std::size_t e = 0; e < x.size(); ++e) {
      if (e % static_cast<std::size_t>(len) == 0) {
        scale = std::exp(4.0f * ud(gen)) * 0.05f;
      }
      const float a = last ? -sum[e] : scale * nd(gen);
      sum[e] += a;
      const float xf = zenflow::to_float(x[e]);
      g[e] = zenflow::from_float<T>(std::isfinite(xf) ? xf + a : (last ? xf : a));
      g[e] = zenflow::to_float(g[e]) == 0.0f ? zenflow::from_float<T>(1e-3f) : g[e];
    }
  }
  return all;
}

/// True where the fp32 squared L2 score of a row of `g` (channel-major rows of `len`) is not
/// finite: a NaN or Inf element, or squares whose sum overflows fp32 (the tests' overflows are far
/// from the boundary, so a float64 sum decides it). The owner of such a host-set row sends it to
/// every rank (owner_reduction.hpp: the global norm rescans it in fp64).
template <class T>
std::vector<char> nonfinite_rows(const std::vector<T>& g, std::int64_t len) {
  std::vector<char> out(g.size() / static_cast<std::size_t>(len), 0);
  for (std::size_t c = 0; c < out.size(); ++c) {
    double sq = 0.0;
    bool bad = false;
    for (std::int64_t i = 0; i < len; ++i) {
      const float v = zenflow::to_float(g[c * static_cast<std::size_t>(len) + static_cast<std::size_t>(i)]);
      bad = bad || !std::isfinite(v);
      sq += static_cast<double>(v) * v;
    }
    out[c] = bad || sq > static_cast<double>(FLT_MAX) ? 1 : 0;
  }
  return out;
}

/// The data-parallel ledger of one engine's run (N > 1 ranks, modes zenflow and offload_sync):
/// what each step must put on the wire, the bytes this rank does not copy down, and its host
/// memory, from an independent bookkeeping of the one-rank engine's device sets.
template <class T>
struct byte_ledger {
  zenflow::config cfg;
  std::vector<zf_engine_test::shape> shapes;
  bool device_comm = false;
  int n = 1;
  int rank = 0;
  std::vector<std::vector<std::int32_t>> prev_sel; // the device sets at the start of the step
  std::uint64_t state_per_element = 12;            // fp32 master + m and v as they cross (int8: fp32)
  std::uint64_t others_bytes = 0;                  // down: what this rank does not copy
  std::uint64_t wire = 0;                          // summed over the ranks
  std::int64_t steps = 0;
  std::int64_t good_warm_up = 0; // warm-up steps not skipped: each a host job uploading everything
  bool pending = false;          // a scheduled selection not made yet (a bad step defers it)

  byte_ledger(const zenflow::config& c, std::vector<zf_engine_test::shape> s, bool dev, int ranks, int r)
      : cfg(c), shapes(std::move(s)), device_comm(dev), n(ranks), rank(r), prev_sel(shapes.size()),
        state_per_element(c.host_moments == zenflow::moment_precision::bf16 ? 8 : 12) {}

  /// Host memory of one row of `len` as the host keeps it: master, m, v (int8: a byte each and
  /// two fp32 scales per block of 64) and the count.
  [[nodiscard]] std::uint64_t host_row_bytes(std::uint64_t len) const {
    if (cfg.host_moments == zenflow::moment_precision::int8) {
      return 6 * len + 8 * ((len + 63) / 64) + 4;
    }
    return state_per_element * len + 4;
  }

  [[nodiscard]] bool zen() const { return cfg.mode == zenflow::optimizer_mode::zenflow; }

  // Bytes on the wire of step t from rank r: every step all-reduces the device sets' rows (as they
  // were at its start) and the vectors, and reduce-scatters the host sets' rows by owner (a rank
  // sends the other blocks' rows, (N-1)/N of them on average), then one float per channel: the
  // scores by owner, a flag per parameter, the rest masses' rows over the host sets after the step
  // (Zen-auto, select_on_mass_drop), and a non-finite score's row from its owner. A selection step
  // (`selecting`) adds the L1 importance by owner (with importance "l1"), and each rank sends its
  // entering rows (`now`: the sets after the step): their mean gradient, then their state
  // (master, m, v, count). A device communicator sums every channel's number instead of gathering
  // each owner's (a score, an fp64 rescan that replaces the non-finite row, a rest mass row over
  // every block).
  std::uint64_t step_bytes(std::int64_t t,
                           int r,
                           bool selecting,
                           const zenflow::channel_partition& part,
                           const std::vector<std::vector<std::int32_t>>& now,
                           const std::vector<std::vector<char>>& nonfinite) const {
    std::uint64_t dense = 0, others = 0, channels = 0, rows = 0, nan_rows = 0, entering = 0, state = 0;
    std::uint64_t all_channels = 0, all_rows = 0; // a device communicator's sums
    const bool l1 = selecting && cfg.importance == zenflow::channel_norm::l1;
    for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
      const auto len = static_cast<std::uint64_t>(shapes[p].len);
      if (!shapes[p].matrix) {
        dense += len;
        continue;
      }
      const auto& sel = prev_sel[p];
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
          nan_rows += q == r && nonfinite[p][static_cast<std::size_t>(c)] != 0 ? len * sizeof(T) : 0;
        }
      }
      channels += static_cast<std::uint64_t>(part.count(m, r)) * (l1 ? 2 : 1);
      all_channels += static_cast<std::uint64_t>(shapes[p].channels);
      ++m;
    }
    const bool rest = zen() && (cfg.auto_update() || cfg.mass_trigger()) && t >= cfg.full_warm_up_rounds;
    if (device_comm) {
      return 4 * (dense + others + all_channels * (l1 ? 2 : 1) + shapes.size() + (rest ? all_rows : 0)) +
             8 * all_channels + entering + state;
    }
    return 4 * (dense + others + channels + shapes.size() + (rest ? rows : 0)) + nan_rows + entering + state;
  }

  /// After step t of both engines: `a` the N-rank engine's report, `b` the one-rank engine's, `now`
  /// its device sets after the step, `nonfinite` the rows of the mean gradient whose score is not.
  void after_step(const zenflow::step_report& a,
                  const zenflow::step_report& b,
                  const zenflow::channel_partition& part,
                  const std::vector<std::vector<std::int32_t>>& now,
                  const std::vector<std::vector<char>>& nonfinite) {
    const std::int64_t t = steps++;
    pending = pending || (zen() && t >= cfg.full_warm_up_rounds && cfg.is_selection_step(t));
    // A selection that select_on_mass_drop fired (decided at step t-1): the one-rank report says
    // which step it was.
    const bool selecting = pending || b.selection;
    std::uint64_t mine = 0;
    for (int r = 0; r < n; ++r) {
      const std::uint64_t bytes = step_bytes(t, r, selecting, part, now, nonfinite);
      wire += bytes;
      mine = r == rank ? bytes : mine;
    }
    // Exact where no window's weights cross (a close, or the drain of a selection step, applies
    // the job before it); the sum over the run (finish) counts those too.
    if (zen() && t >= cfg.full_warm_up_rounds && !selecting && !a.window_closed) {
      EXPECT_EQ(a.comm_bytes, mine) << "step " << t;
    }
    EXPECT_GE(a.comm_bytes, mine) << "step " << t;
    pending = pending && !b.selection;
    good_warm_up += t < cfg.full_warm_up_rounds && !b.skipped ? 1 : 0;
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
      std::int64_t own_unselected = 0;
      for (std::int64_t c = part.begin(m, rank); c < part.end(m, rank); ++c) {
        own_unselected += std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(c)) ? 0 : 1;
      }
      const auto unselected = shapes[p].channels - static_cast<std::int64_t>(sel.size());
      others_bytes += static_cast<std::uint64_t>(unselected - own_unselected) * len * sizeof(T);
      ++m;
    }
  }

  /// After both engines' flush(): this rank's bytes down and host memory, and the sums over the
  /// ranks (`summed`: stats_over_ranks) of host memory and bytes on the wire.
  void finish(const zenflow::stats& mine,
              const zenflow::stats& summed,
              const zenflow::stats& one,
              const zenflow::channel_partition& part) const {
    // Down per rank: the one-rank engine's bytes but the other blocks' unselected gradients.
    EXPECT_EQ(mine.d2h_bytes, one.d2h_bytes - others_bytes);
    EXPECT_EQ(one.comm_bytes, 0u);
    // Host memory per rank: its block of every matrix (vectors, on the host in the warm-up, whole).
    const bool sync = cfg.mode == zenflow::optimizer_mode::offload_sync; // every channel on the host
    const bool vectors_on_host = sync || cfg.full_warm_up_rounds > 0;
    const std::uint64_t accs = cfg.overlap_step && !sync && cfg.host_accumulators == 2 ? 2 : 1;
    // The accumulators hold host-set rows: a rank of several its block's capacity, one rank (and
    // a vector, whole on every rank) exactly its host set's rows: after a selection every channel
    // but the top-k's (ZenFlow; a vector's none, it lives on the device after the warm-up), before
    // one (a warm-up longer than the run) every channel.
    const bool split = !sync && one.selections > 0;
    std::uint64_t state = 0, acc = 0, vec_state = 0, vec_acc = 0, all_acc = 0, all_host = 0, unselected = 0;
    for (std::size_t p = 0, m = 0; p < shapes.size(); ++p) {
      const auto len = static_cast<std::uint64_t>(shapes[p].len);
      if (!shapes[p].matrix) {
        vec_state += vectors_on_host ? host_row_bytes(len) : 0;
        vec_acc += vectors_on_host && !split ? len * 4 * accs : 0;
        continue;
      }
      const auto own = static_cast<std::uint64_t>(part.count(m, rank));
      const auto c = shapes[p].channels;
      const auto kept = split ? static_cast<std::uint64_t>(c - cfg.topk(c)) : static_cast<std::uint64_t>(c);
      state += own * host_row_bytes(len);
      acc += (n == 1 ? kept : own) * len * 4 * accs;
      all_acc += (n == 1 ? kept : static_cast<std::uint64_t>(c)) * len * 4 * accs;
      all_host += static_cast<std::uint64_t>(c) * len * sizeof(T);
      unselected += static_cast<std::uint64_t>(c - cfg.topk(c)) * len * sizeof(T);
      ++m;
    }
    EXPECT_EQ(mine.memory.host_state, state + vec_state);
    EXPECT_EQ(mine.memory.host_accumulators, acc + vec_acc);
    const auto copies = static_cast<std::uint64_t>(n - 1); // of the replicated vectors
    EXPECT_EQ(summed.memory.host_state, one.memory.host_state + copies * vec_state);
    EXPECT_EQ(summed.memory.host_accumulators, all_acc + static_cast<std::uint64_t>(n) * vec_acc);
    EXPECT_EQ(one.memory.host_accumulators, [&] { // the one-rank engine: its host set's rows
      std::uint64_t b = 0;
      for (const auto& sh : shapes) {
        const auto l = static_cast<std::uint64_t>(sh.len);
        const auto c = static_cast<std::uint64_t>(sh.channels);
        b += !sh.matrix ? (vectors_on_host && !split ? l * 4 * accs : 0)
                        : (split ? c - static_cast<std::uint64_t>(cfg.topk(sh.channels)) : c) * l * 4 * accs;
      }
      return b;
    }());
    // Bytes on the wire, summed over the ranks: the two hashes from every rank, each step's
    // reductions, entering rows and migrations (after_step), each window's weights once (every
    // owner its share): all unselected channels, or every channel in the warm-up.
    const auto jobs = static_cast<std::uint64_t>(mine.host_jobs);
    const auto warm = sync ? jobs : static_cast<std::uint64_t>(good_warm_up);
    EXPECT_EQ(summed.comm_bytes,
              static_cast<std::uint64_t>(n) * 16 + wire + warm * all_host + (jobs - warm) * unselected);
    EXPECT_EQ(summed.d2h_bytes, [&] {
      std::uint64_t s = 0; // plain MPI, not the communicator under test
      const auto d2h = static_cast<std::uint64_t>(mine.d2h_bytes);
      MPI_Allreduce(&d2h, &s, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
      return s;
    }());
  }
};

/// The engine data parallel on `Path` over MPI_COMM_WORLD, for the shared case bodies (the Driver
/// interface of engine_cases.hpp), checked against a one-rank host engine fed the mean gradient.
/// One engine per driver.
/// `Emulated`: the emulated device's backend on the emulated paths (emulated_backend, or the CUDA
/// plan's kernels with emulated_cuda_backend: tests/emu).
template <class T, dp_path Path, class Emulated = zenflow::emulated_backend>
struct dp_driver {
  static constexpr bool emulated = Path != dp_path::host;
  static constexpr bool device_comm = Path == dp_path::emulated_device_comm;
  using backend = std::conditional_t<emulated, Emulated, zenflow::host_backend>;
  using comm = std::conditional_t<device_comm,
                                  zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                  zenflow::mpi_communicator>;
  using engine_type = zenflow::engine<backend, comm>;
  using one_rank_engine = zenflow::engine<zenflow::host_backend>;

  zf_engine_test::model<T>& m;
  const int n = world_size();
  const int rank = world_rank();
  zenflow::emulated_device device{zf_engine_test::emulated_case_timing()}; // outlives the engine
  cudaStream_t s = emulated ? device.create_stream() : nullptr;
  zenflow::config cfg;
  std::vector<std::vector<T>> g;            // this rank's gradients (registered)
  std::vector<std::vector<T>> one_w, one_g; // the one-rank engine's weights and gradients (the mean)
  std::vector<zenflow::param_id> ids;       // the N-rank engine's, by parameter of the model
  std::vector<zenflow::param_id> one_ids;   // the one-rank engine's
  std::unique_ptr<one_rank_engine> one;     // fed the mean gradient
  std::unique_ptr<byte_ledger<T>> ledger;   // N > 1, zenflow and offload_sync
  std::int64_t t = 0;

  explicit dp_driver(zf_engine_test::model<T>& mod)
      : m(mod), g(mod.g), one_w(mod.w), one_g(mod.g), ids(mod.w.size()), one_ids(mod.w.size()) {}

  std::unique_ptr<engine_type> make_engine(const zenflow::config& c) {
    cfg = c;
    // A device communicator gathers a window's shares in the device upload buffer, which
    // chunk_ring has not (refused: data_parallel_mpi_test.cpp); the bits are the same.
    if (device_comm && n > 1 && cfg.upload == zenflow::upload_policy::chunk_ring) {
      cfg.upload = zenflow::upload_policy::whole_window;
    }
    one = std::make_unique<one_rank_engine>(cfg);
    if constexpr (emulated) { // the reduction's buckets (file comment); the one-rank engine has none
      std::int64_t longest = 1;
      for (const auto& sh : m.shapes) {
        longest = std::max(longest, sh.len);
      }
      cfg.reduce_bucket_bytes = std::max<std::int64_t>(256, 3 * 4 * longest);
      cfg.reduce_in_place = device_comm;
    }
    const auto backend_of = [&] {
      if constexpr (emulated) {
        return Emulated{device};
      } else {
        return zenflow::host_backend{};
      }
    };
    if constexpr (device_comm) {
      return std::make_unique<engine_type>(cfg, backend_of(), comm(device, make_comm()));
    } else {
      return std::make_unique<engine_type>(cfg, backend_of(), make_comm());
    }
  }

  zenflow::param_id add(engine_type& e, std::size_t p, const zenflow::param_options& options = {}) {
    const auto& sh = m.shapes[p];
    one_w[p] = m.w[p]; // the replicas start equal
    one_ids[p] = sh.matrix ? one->add_matrix(one_w[p].data(), one_g[p].data(), sh.channels, sh.len, options)
                           : one->add_vector(one_w[p].data(), one_g[p].data(), sh.len, options);
    ids[p] = sh.matrix ? e.add_matrix(m.w[p].data(), g[p].data(), sh.channels, sh.len, options)
                       : e.add_vector(m.w[p].data(), g[p].data(), sh.len, options);
    return ids[p];
  }

  void initialize(engine_type& e) {
    e.initialize(s); // first: a refused configuration throws before the one-rank engine starts
    one->initialize();
    ASSERT_EQ(e.comm().size(), n);
    if (n > 1 && cfg.mode != zenflow::optimizer_mode::gpu_adamw) {
      ledger = std::make_unique<byte_ledger<T>>(cfg, m.shapes, device_comm, n, rank);
    }
  }

  zenflow::step_report step(engine_type& e, float lr) {
    std::vector<std::vector<char>> nonfinite(m.shapes.size());
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      auto all = split_over_ranks(m.g[p], m.shapes[p].len, p, t, n);
      // Copied into the registered buffers (an assignment could move another buffer in).
      const auto& mine = all[static_cast<std::size_t>(rank)];
      std::copy(mine.begin(), mine.end(), g[p].begin());
      const auto mean = mean_of(all);
      std::copy(mean.begin(), mean.end(), m.g[p].begin()); // what the case's reference sees
      std::copy(mean.begin(), mean.end(), one_g[p].begin());
      nonfinite[p] = m.shapes[p].matrix ? nonfinite_rows(mean, m.shapes[p].len) : std::vector<char>{};
    }
    announce(e);
    const auto a = e.step(lr, s);
    if constexpr (emulated) {
      device.synchronize_stream(s); // the weights are current, the gradients may be written
    }
    const auto b = one->step(lr);
    EXPECT_EQ(a.selection, b.selection) << "step " << t;
    EXPECT_EQ(a.window_closed, b.window_closed) << "step " << t;
    if (a.skip_known) {
      EXPECT_EQ(a.skipped, b.skipped) << "step " << t;
    }
    std::vector<std::vector<std::int32_t>> now(m.shapes.size());
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      if (m.shapes[p].matrix) {
        now[p] = one->selected(one_ids[p]);
        EXPECT_EQ(e.selected(ids[p]), now[p]) << "step " << t << " param " << p;
      }
      EXPECT_TRUE(zf_engine_test::same_bits(m.w[p], one_w[p])) << "step " << t << " weights of param " << p;
      EXPECT_TRUE(same_on_every_rank(m.w[p])) << "step " << t << " param " << p;
    }
    if (ledger) {
      ledger->after_step(a, b, e.partition(), now, nonfinite);
    } else if (n == 1) {
      EXPECT_EQ(a.comm_bytes, 0u) << "step " << t; // one rank sends nothing
    }
    ++t;
    return a;
  }

  /// grad_ready() before the step (file comment): on the emulated path every parameter in
  /// registration order, on the device communicator's a subset in an order of this rank's and
  /// step's own.
  void announce(engine_type& e) {
    if constexpr (emulated) {
      std::vector<std::size_t> order(m.shapes.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      if constexpr (device_comm) {
        std::mt19937_64 gen(zf_test::base_seed() + 7u * static_cast<std::uint64_t>(t) +
                            1000003u * static_cast<std::uint64_t>(rank));
        std::shuffle(order.begin(), order.end(), gen);
        order.resize(order.size() - std::uniform_int_distribution<std::size_t>(0, order.size() / 2)(gen));
      }
      for (const std::size_t p : order) {
        e.grad_ready(ids[p], s);
      }
    }
  }

  void flush(engine_type& e) {
    e.flush(s);
    if constexpr (emulated) {
      device.synchronize_stream(s);
    }
    one->flush();
    const auto mine = e.stats();
    const auto o = one->stats();
    EXPECT_EQ(mine.skipped_steps, o.skipped_steps);
    EXPECT_EQ(mine.selections, o.selections);
    EXPECT_EQ(mine.mass_drop_selections, o.mass_drop_selections);
    EXPECT_EQ(mine.windows_closed, o.windows_closed);
    EXPECT_EQ(mine.host_jobs, o.host_jobs);
    const auto summed = e.stats_over_ranks(s);
    if (ledger) {
      ledger->finish(mine, summed, o, e.partition());
    } else if (n == 1) {
      EXPECT_EQ(mine.d2h_bytes, o.d2h_bytes);
      EXPECT_EQ(summed.comm_bytes, 0u);
    }
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      EXPECT_TRUE(zf_engine_test::same_bits(m.w[p], one_w[p])) << "weights of param " << p;
      EXPECT_TRUE(same_on_every_rank(m.w[p])) << "param " << p;
    }
  }

  /// The N-rank engine's state of `id`, which must equal the one-rank engine's bit for bit.
  zenflow::param_state state(engine_type& e, zenflow::param_id id) {
    const auto p = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
    auto st = e.state(id, s);
    if (p < ids.size()) {
      const auto r = one->state(one_ids[p]);
      EXPECT_EQ(st.counts, r.counts) << "param " << p;
      EXPECT_EQ(st.master.size(), r.master.size()) << "param " << p;
      if (st.master.size() == r.master.size() && st.m.size() == r.m.size() && st.v.size() == r.v.size()) {
        EXPECT_EQ(std::memcmp(st.master.data(), r.master.data(), st.master.size() * 4), 0)
            << "master of param " << p;
        EXPECT_EQ(std::memcmp(st.m.data(), r.m.data(), st.m.size() * 4), 0) << "m of param " << p;
        EXPECT_EQ(std::memcmp(st.v.data(), r.v.data(), st.v.size() * 4), 0) << "v of param " << p;
      }
    }
    return st;
  }

  void pull() {
    if constexpr (emulated) {
      device.synchronize_stream(s);
    }
  }
};

/// The Driver templates of the case bodies (template <class> class Driver), one per path.
template <class T>
using dp_host_driver = dp_driver<T, dp_path::host>;
template <class T>
using dp_emulated_driver = dp_driver<T, dp_path::emulated>;
template <class T>
using dp_device_comm_driver = dp_driver<T, dp_path::emulated_device_comm>;

} // namespace zf_dp_test
