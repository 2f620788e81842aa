// Helpers of the data-parallel engine tests under mpiexec (data_parallel_mpi_test.cpp,
// data_parallel_mpi_checks_test.cpp): each rank's random gradients, seeded by rank and step, so that
// every rank can compute every other rank's and their mean (the float64 rank-order sum / N, rounded
// once to fp32, then to the working type: mpi_communicator's mean, docs/data-parallel.md).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mpi.h>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/engine.hpp>

#include "engine_harness.hpp"
#include "support/mpi_checks.hpp"
#include "support/random.hpp"

namespace zf_dp_test {

using namespace std::chrono_literals;
using zf_engine_test::kShapes;
using zf_engine_test::shape;
using zf_engine_test::small_config;

using zf_test::same_on_every_rank;
using zf_test::world_rank;
using zf_test::world_size;

// A generous bound: a failure on another rank ends a case in 10 s instead of a hang.
inline zenflow::mpi_communicator make_comm() {
  return zenflow::mpi_communicator(MPI_COMM_WORLD, {10s});
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

inline std::uint64_t total_elements(const std::vector<shape>& shapes) {
  std::uint64_t n = 0;
  for (const auto& sh : shapes) {
    n += static_cast<std::uint64_t>(sh.channels * sh.len);
  }
  return n;
}

} // namespace zf_dp_test
