// The sharded engine's (ZeRO-3) harness under mpiexec, shared by sharded_mpi_test.cpp and
// sharded_mpi_checkpoint_test.cpp (one binary: cpu.engine.sharded_mpi_np1/2/3): each rank's
// sharded engine (or, for the checkpoints that cross engines, a one-rank or owner-partition
// engine) beside a one-rank host engine on the whole model fed the float64 rank-order mean, and
// the backends the typed cases run on.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mpi.h>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/sharded.hpp>

#include "engine_harness.hpp"
#include "sharded_cases.hpp"
#include "support/mpi_checks.hpp"
#include "support/random.hpp"

namespace zf_sharded_mpi {

using namespace std::chrono_literals;
using namespace zf_sharded_test;
using zf_test::world_rank;
using zf_test::world_size;

/// An engine's world: MPI_COMM_WORLD, MPI_COMM_SELF (this rank alone), or the first `ranks` ranks
/// of the world (MPI_COMM_NULL on the others).
inline MPI_Comm world_of(int ranks) {
  if (ranks <= 0 || ranks >= world_size()) {
    return MPI_COMM_WORLD;
  }
  if (ranks == 1) {
    return MPI_COMM_SELF;
  }
  MPI_Comm out = MPI_COMM_NULL; // collective over the world: every rank makes the same runs
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &out);
  return out;
}

/// `self`: a world of this rank alone (MPI_COMM_SELF), an engine of another world size.
inline zenflow::mpi_communicator make_comm(bool self = false) {
  return zenflow::mpi_communicator(self ? MPI_COMM_SELF : MPI_COMM_WORLD, {10s});
}

inline std::uint32_t state_bytes(const zenflow::config& cfg) {
  return cfg.host_moments == zenflow::moment_precision::bf16 ? 8u : 12u;
}

inline zenflow::shard_layout layout_for(const zenflow::config& cfg, int world) {
  std::vector<zenflow::shard_matrix> list;
  for (const auto& sh : kModel) {
    if (sh.matrix) {
      list.push_back({sh.channels, sh.len, state_bytes(cfg)});
    }
  }
  return zenflow::shard_channels(list, world);
}

/// The engine a run trains: one rank (`engine<Backend>`), the owner partition (ZeRO-2) or the
/// sharded engine (ZeRO-3).
enum class engine_kind { one_rank, zero2, zero3 };

template <class Backend, class Comm, engine_kind Kind>
using engine_of = std::conditional_t<Kind == engine_kind::one_rank,
                                     zenflow::engine<Backend>,
                                     std::conditional_t<Kind == engine_kind::zero2,
                                                        zenflow::engine<Backend, Comm>,
                                                        zenflow::engine<Backend, zenflow::sharded<Comm>>>>;

/// An engine of `Kind` on the host backend or (`Emulated`) on `EmulatedBackend` (emulated_backend,
/// or the CUDA plan's kernels with emulated_cuda_backend: tests/emu), and the one-rank reference.
/// Its world (`ranks`, world_of): every rank (0), this rank alone (1: a one-rank engine's is), or
/// the first `ranks`; each of its ranks r feeds grad_of(r, its ranks), the reference their mean.
template <class T,
          bool Emulated,
          bool DeviceComm = false,
          engine_kind Kind = engine_kind::zero3,
          class EmulatedBackend = zenflow::emulated_backend>
struct sharded_run {
  using backend = std::conditional_t<Emulated, EmulatedBackend, zenflow::host_backend>;
  using comm_type = std::conditional_t<DeviceComm,
                                       zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                       zenflow::mpi_communicator>;
  using engine_type = engine_of<backend, comm_type, Kind>;
  static constexpr bool whole_matrices = Kind != engine_kind::zero3; // every matrix registered whole

  zenflow::config cfg;
  MPI_Comm world = MPI_COMM_WORLD;
  bool member = true; // this rank is in the engine's world (else the run does nothing)
  int world_n = 1;    // the engine's ranks
  int me = 0;         // and this rank among them
  bool self = false;  // the engine's world is this rank alone
  zenflow::shard_layout layout;
  std::unique_ptr<zenflow::mpi_communicator> trainer; // the trainer's reduce-scatter
  zenflow::emulated_device device{};
  cudaStream_t s = Emulated ? device.create_stream() : nullptr;
  std::vector<std::vector<T>> ref_w, ref_g, w, g;
  std::vector<float> staging;
  std::vector<zenflow::param_id> ref_id, id;
  std::unique_ptr<zenflow::engine<zenflow::host_backend>> ref;
  std::unique_ptr<engine_type> e;

  explicit sharded_run(const zenflow::config& c, int ranks = 0)
      : cfg(c), world(world_of(Kind == engine_kind::one_rank ? 1 : ranks)) {
    member = world != MPI_COMM_NULL;
    if (!member) {
      return;
    }
    MPI_Comm_size(world, &world_n);
    MPI_Comm_rank(world, &me);
    self = world_n == 1;
    own_shards = self;
    layout = layout_for(cfg, world_n);
    trainer = std::make_unique<zenflow::mpi_communicator>(world, zenflow::mpi_options{10s});
    std::size_t most = 1;
    for (std::size_t m = 0; m < layout.matrices(); ++m) {
      most = std::max(most, zenflow::shard_staging_floats(layout, m, me));
    }
    staging.resize(most);
    ref = std::make_unique<zenflow::engine<zenflow::host_backend>>(cfg);
    const zenflow::mpi_options o{10s};
    if constexpr (Kind == engine_kind::one_rank) {
      if constexpr (Emulated) {
        e = std::make_unique<engine_type>(cfg, EmulatedBackend{device});
      } else {
        e = std::make_unique<engine_type>(cfg);
      }
    } else if constexpr (DeviceComm) {
      e = std::make_unique<engine_type>(cfg, EmulatedBackend{device},
                                        comm_type(device, zenflow::mpi_communicator(world, o)));
    } else if constexpr (Emulated) {
      e = std::make_unique<engine_type>(cfg, EmulatedBackend{device}, zenflow::mpi_communicator(world, o));
    } else {
      e = std::make_unique<engine_type>(cfg, zenflow::host_backend{}, zenflow::mpi_communicator(world, o));
    }
  }
  sharded_run(const sharded_run&) = delete;
  sharded_run& operator=(const sharded_run&) = delete;
  ~sharded_run() {
    e.reset(); // the engine's communicator first (each duplicated `world`)
    if (world != MPI_COMM_NULL && world != MPI_COMM_WORLD && world != MPI_COMM_SELF) {
      MPI_Comm_free(&world);
    }
  }

  [[nodiscard]] std::int64_t first(std::size_t m) const {
    return whole_matrices ? 0 : m < firsts_.size() ? firsts_[m] : layout.first(m, me);
  }
  [[nodiscard]] std::int64_t count(std::size_t m) const {
    return m < counts_.size() ? counts_[m] : layout.count(m, me);
  }
  std::vector<std::int64_t> firsts_, counts_; // per matrix: the registered shard (whole: the matrix)
  bool own_shards = false;                    // not the layout's: fed the mean's rows directly

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
      if (whole_matrices) {
        firsts_.push_back(0);
        counts_.push_back(sh.channels);
      } else if (moved) {
        own_shards = true;
        const bool last = me == layout.ranks() - 1;
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
      id.push_back(whole_matrices
                       ? e->add_matrix(w[p].data(), g[p].data(), n, sh.len, {.name = name})
                       : e->add_matrix(w[p].data(), g[p].data(), n, sh.len,
                                       {.name = name, .shard = zenflow::shard_range{f, sh.channels}}));
      ++m;
    }
  }
  /// Both engines' weights from the whole model's `whole` (a trainer restoring its weights
  /// beside the optimizer's checkpoint), before initialize().
  void set_weights(const std::vector<std::vector<T>>& whole) {
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      std::copy(whole[p].begin(), whole[p].end(), ref_w[p].begin());
      const auto len = kModel[p].len;
      const std::int64_t f = kModel[p].matrix ? first(m) : 0;
      std::copy(whole[p].begin() + f * len,
                whole[p].begin() + f * len + static_cast<std::int64_t>(w[p].size()), w[p].begin());
      m += kModel[p].matrix ? 1 : 0;
    }
  }
  void initialize() {
    ref->initialize();
    e->initialize(s);
  }

  /// Step `t`: every rank's gradients, the reference fed their mean; a sharded engine this rank's
  /// shard from the trainer's reduce-scatter, the others this rank's whole gradient; both engines
  /// step and (`flush`) flush. Then the checks of the step.
  void step(std::int64_t t, bool nan = false, bool huge = false, bool drift = false, bool flush = true) {
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      std::vector<std::vector<T>> all;
      for (int r = 0; r < world_n; ++r) {
        all.push_back(grad_of<T>(r, world_n, p, t, nan, huge, drift));
      }
      const std::vector<T> mean = mean_of(all);
      std::copy(mean.begin(), mean.end(), ref_g[p].begin()); // in place: the engine reads ref_g[p].data()
      if (own_shards) { // shards not the layout's: their rows of the mean (what a reduce-scatter makes)
        const std::int64_t f = sh.matrix ? first(m) : 0;
        std::copy_n(mean.begin() + f * sh.len, g[p].size(), g[p].begin());
        m += sh.matrix ? 1 : 0;
        continue;
      }
      if (!sh.matrix || whole_matrices) {
        std::copy(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end(),
                  g[p].begin());
        continue;
      }
      const zenflow::channel_matrix<const T> mine{all[static_cast<std::size_t>(me)].data(), sh.channels,
                                                  sh.len, sh.len, zenflow::channel_layout::contiguous};
      const zenflow::channel_matrix<T> out{g[p].data(), count(m), sh.len, sh.len,
                                           zenflow::channel_layout::contiguous};
      zenflow::reduce_scatter_shard(*trainer, layout, m, mine, out, std::span<float>(staging), nullptr);
      ++m;
    }
    const float lr = 1e-2f;
    (void)ref->step(lr);
    (void)e->step(lr, s);
    if (flush) {
      ref->flush();
      e->flush(s);
    }
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
    // Every rank its own names (only it reads its files back).
    const std::string base = ::testing::TempDir() + "zf_sharded_masses_" + std::to_string(world_size()) +
                             "_" + std::to_string(world_rank());
    const std::string ref_path = base + "_ref.ckpt";
    ref->save(ref_path);
    e->save(base + ".ckpt", s);
    const zenflow::checkpoint_reader a(zenflow::checkpoint_rank_path(base + ".ckpt", me, world_n));
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

} // namespace zf_sharded_mpi
