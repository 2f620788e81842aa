// Shared pieces of the shard helpers' tests (shard_test.cpp: one rank; mpi_shard_test.cpp: under
// mpiexec): a sharded matrix list with odd sizes, each rank's random gradients of every matrix
// (seeded by rank, so that every rank can compute every other rank's), matrices in either channel
// layout with padding, and the two references of a shard of the mean: a float64 loop in rank
// order, and the engine's own path (its batched row copies widening to fp32, the communicator's
// all_reduce_mean, the row copies narrowing back: engine/detail/dp/mean_gradients.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/shard.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>

#include "support/random.hpp"

namespace zf_shard_test {

using zenflow::channel_layout;
using zenflow::channel_matrix;

// Odd channel counts and lengths, one matrix with fewer channels than ranks, one empty.
inline std::vector<zenflow::shard_matrix> sample_list() {
  return {{7, 5, 12}, {10, 3, 8}, {1, 4, 12}, {0, 6, 12}, {13, 9, 12}, {2, 1, 12}};
}

inline std::uint64_t seed_of(int rank, int test, std::size_t m) {
  return zf_test::base_seed() + 7919u * static_cast<std::uint64_t>(test) + 131u * m +
         static_cast<std::uint64_t>(rank);
}

// Values spread over many binades, of both signs, rounded to T: the summation order shows in the
// low bits, and fp16 sees subnormals.
template <class T>
std::vector<T> values(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> mant(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-14, 10);
  std::vector<T> v(n);
  for (auto& x : v) {
    x = zenflow::from_float<T>(std::ldexp(mant(gen), expo(gen)));
  }
  return v;
}

// A matrix of `channels` x `channel_len` in `layout`, with 3 elements of padding per line, the
// padding filled with a sentinel so that a write outside the matrix shows.
template <class T>
struct padded_matrix {
  std::vector<T> storage;
  channel_matrix<T> view;

  padded_matrix(std::int64_t channels, std::int64_t channel_len, channel_layout layout, float fill) {
    const std::int64_t lines = layout == channel_layout::contiguous ? channels : channel_len;
    const std::int64_t ld = (layout == channel_layout::contiguous ? channel_len : channels) + 3;
    storage.assign(static_cast<std::size_t>(lines * ld + 1), zenflow::from_float<T>(fill));
    view = {storage.data(), channels, channel_len, ld, layout};
  }
  [[nodiscard]] channel_matrix<const T> cview() const {
    return {view.data, view.channels, view.channel_len, view.ld, view.layout};
  }
};

// Rank r's gradients of matrix m (the whole matrix), in `layout`.
template <class T>
padded_matrix<T>
grads_of(int rank, int test, std::size_t m, const zenflow::shard_matrix& s, channel_layout layout) {
  padded_matrix<T> g(s.channels, s.channel_len, layout, 1e30f);
  const auto v = values<T>(seed_of(rank, test, m), static_cast<std::size_t>(s.channels * s.channel_len));
  for (std::int64_t c = 0; c < s.channels; ++c) {
    for (std::int64_t i = 0; i < s.channel_len; ++i) {
      g.view(c, i) = v[static_cast<std::size_t>(c * s.channel_len + i)];
    }
  }
  return g;
}

// The float64 reference: element (c, i) of the mean, summed in rank order, divided, rounded once
// to fp32, then once to T.
template <class T>
T reference_mean(const std::vector<padded_matrix<T>>& every_rank, std::int64_t c, std::int64_t i) {
  double acc = 0.0;
  for (const auto& g : every_rank) {
    acc += static_cast<double>(zenflow::to_float(g.view(c, i)));
  }
  return zenflow::from_float<T>(static_cast<float>(acc / static_cast<double>(every_rank.size())));
}

// The engine's path over a whole matrix: `grads` widened by the engine's batched row copy into
// packed fp32, `all_reduce_mean` (a host communicator's, blocking), narrowed back by the row copy
// into `out` (a full matrix of the same shape).
template <class T, class Comm>
void engine_mean(Comm& comm, channel_matrix<const T> grads, channel_matrix<T> out) {
  using zenflow::detail::row_copy_direction;
  using zenflow::detail::row_copy_item;
  std::vector<std::int32_t> idx(static_cast<std::size_t>(grads.channels));
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<float> wide(static_cast<std::size_t>(grads.elements()) + 1);
  row_copy_item it{const_cast<T*>(grads.data),
                   zenflow::dtype_of<T>(),
                   grads.channels,
                   grads.channel_len,
                   grads.ld,
                   grads.layout,
                   idx.data(),
                   grads.channels,
                   wide.data()};
  ASSERT_EQ(zenflow::detail::host_copy_rows_batched(&it, 1, row_copy_direction::gather, nullptr),
            cudaSuccess);
  comm.all_reduce_mean(wide.data(), static_cast<std::size_t>(grads.elements()), nullptr);
  it.matrix = out.data;
  it.ld = out.ld;
  it.layout = out.layout;
  ASSERT_EQ(zenflow::detail::host_copy_rows_batched(&it, 1, row_copy_direction::scatter, nullptr),
            cudaSuccess);
}

// True when every element of `m`'s storage outside the matrix still holds `fill`.
template <class T>
bool padding_intact(const padded_matrix<T>& m, float fill) {
  std::vector<char> inside(m.storage.size(), 0);
  for (std::int64_t c = 0; c < m.view.channels; ++c) {
    for (std::int64_t i = 0; i < m.view.channel_len; ++i) {
      inside[static_cast<std::size_t>(m.view.offset(c, i))] = 1;
    }
  }
  const T f = zenflow::from_float<T>(fill);
  for (std::size_t e = 0; e < m.storage.size(); ++e) {
    if (inside[e] == 0 && std::memcmp(&m.storage[e], &f, sizeof(T)) != 0) {
      return false;
    }
  }
  return true;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

} // namespace zf_shard_test
