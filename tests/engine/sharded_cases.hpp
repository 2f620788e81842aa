// The sharded engine's (ZeRO-3) test model and cases, shared by sharded_mpi_test.cpp (host and
// emulated backends under mpiexec) and sharded_nccl_gpu_test.cu (CUDA over NCCL): the model, every
// rank's gradients, and the configurations of the cases both run.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/config.hpp>

#include "engine_harness.hpp"
#include "support/random.hpp"

namespace zf_sharded_test {

struct pshape {
  bool matrix;
  std::int64_t channels, len;
};
// Two matrices whose shards differ in size, a vector between them; a matrix of long rows whose
// host set goes down in several packs (2 fp32 rows, 4 bf16 rows per 4 KiB slot: the rest masses
// are added per pack call).
inline const std::vector<pshape> kModel = {{true, 40, 8}, {false, 1, 6}, {true, 23, 16}, {true, 12, 512}};

/// Rank `r`'s (of `ranks`) gradient of parameter `p` at step `t`: every rank can make every rank's. Skewed
/// channel magnitudes (so that each rank's top-k differs from the mean's), no zeros; `nan`: a NaN
/// in the last rank's first matrix; `huge`: three channels of the second matrix whose fp32 squared
/// norms overflow (their fp64 rescans decide the clip norm and their rank in the top-k).
template <class T>
std::vector<T>
grad_of(int r, int ranks, std::size_t p, std::int64_t t, bool nan, bool huge, bool drift = false) {
  const auto& sh = kModel[p];
  std::mt19937_64 gen(zf_test::base_seed() + 7919u * static_cast<std::uint64_t>(t) + 131u * p +
                      static_cast<std::uint64_t>(r) * 1000003u);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<T> g(static_cast<std::size_t>(sh.channels * sh.len));
  // `drift`: the channels' magnitudes, the same on every rank, change every 6 steps (the device
  // set's share of the mass drops then) and fall with the channel index (the top-k gathers in the
  // first shards: each shard's own masses would vote otherwise than the whole matrix's); else each
  // step's and rank's own.
  std::mt19937_64 pattern(zf_test::base_seed() + 31u * p + 7u * static_cast<std::uint64_t>(t / 6));
  float scale = 1.0f;
  for (std::size_t e = 0; e < g.size(); ++e) {
    if (e % static_cast<std::size_t>(sh.len) == 0) {
      const auto c = static_cast<float>(e / static_cast<std::size_t>(sh.len));
      scale = drift ? std::exp(4.0f * ud(pattern) - 3.0f * c / static_cast<float>(sh.channels)) * 0.05f
                    : std::exp(4.0f * ud(gen)) * 0.05f;
    }
    const float x = scale * nd(gen);
    g[e] = zenflow::from_float<T>(x == 0.0f ? 1e-3f : x);
  }
  if (nan && p == 0 && r == ranks - 1) {
    g[5] = zenflow::from_float<T>(NAN);
  }
  if (huge && p == 2) { // fp32: channels whose squares overflow the fp32 score, in different shards
    for (const std::int64_t c : {3, 17, 20}) {
      for (std::int64_t i = 0; i < sh.len; ++i) {
        g[static_cast<std::size_t>(c * sh.len + i)] =
            zenflow::from_float<T>(1e20f * static_cast<float>(c + i));
      }
    }
  }
  return g;
}

/// The float64 rank-order mean, rounded once to fp32 then to T (mpi_communicator's).
template <class T>
std::vector<T> mean_of(const std::vector<std::vector<T>>& all) {
  std::vector<T> out(all[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    double s = 0.0;
    for (const auto& g : all) {
      s += static_cast<double>(zenflow::to_float(g[i]));
    }
    out[i] = zenflow::from_float<T>(static_cast<float>(s / static_cast<double>(all.size())));
  }
  return out;
}

template <class T>
std::vector<T> initial(std::size_t p) {
  std::mt19937_64 gen(zf_test::base_seed() + 17u + p); // the same on every rank
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<T> w(static_cast<std::size_t>(kModel[p].channels * kModel[p].len));
  for (auto& x : w) {
    x = zenflow::from_float<T>(nd(gen));
  }
  return w;
}

template <class A, class B>
bool same_bits(const A* a, const B* b, std::size_t n) {
  static_assert(sizeof(A) == sizeof(B));
  return std::memcmp(a, b, n * sizeof(A)) == 0;
}

/// The cases' common settings: a selection every 4 steps after 2 warm-up steps, windows of 2.
inline zenflow::config base(unsigned host_threads = 1) {
  auto c = zf_engine_test::small_config(host_threads);
  c.select_interval = 4;
  c.update_interval = 2;
  c.full_warm_up_rounds = 2;
  return c;
}

/// Zen-auto's windows (bf16, bf16 host moments): run 24 steps, a NaN at step 13, drifting
/// gradients; the windows must close at least 4 times.
inline zenflow::config zen_auto_case(unsigned host_threads = 1) {
  auto c = base(host_threads);
  c.update_interval = 0; // Zen-auto
  c.max_update_interval = 5;
  c.min_update_interval = 1;
  c.auto_ratio = 0.6;
  c.host_moments = zenflow::moment_precision::bf16;
  return c;
}
inline constexpr std::int64_t zen_auto_steps = 24, zen_auto_nan_step = 13, zen_auto_min_windows = 4;

/// select_on_mass_drop (with Zen-auto): the trigger's selections alone after step 0; run 24 steps
/// of drifting gradients: it must fire.
inline zenflow::config mass_trigger_case(unsigned host_threads = 1) {
  auto c = base(host_threads);
  c.select = zenflow::select_strategy::automatic;
  c.select_interval = 0;
  c.update_interval = 0;
  c.max_update_interval = 2;
  c.select_on_mass_drop = 0.9;
  c.min_select_interval = 2;
  return c;
}
inline constexpr std::int64_t mass_trigger_steps = 24;

} // namespace zf_sharded_test
