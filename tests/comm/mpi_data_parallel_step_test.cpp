// mpi_communicator under mpiexec (2 and 3 ranks): the data-parallel step at the communicator
// level, as SPEC's design makes it: the same parameter list everywhere, scores summed so that every
// rank takes the same top-k, the selected channels' gradients averaged, the unselected ones
// reduce-scattered by owner (each rank receives only its own blocks), and the owners' new weights
// all-gathered. Checked against the float64 reference built from every rank's inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mpi.h>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/comm/partition.hpp>

#include "mpi_test_support.hpp"

namespace {

using namespace zf_comm_test;

TEST(mpi_communicator, one_data_parallel_step_by_hand) {
  auto comm = make_comm();
  const int N = comm.size();
  struct shape {
    std::int64_t channels, len;
  };
  const std::vector<shape> shapes = {{12, 5}, {7, 3}, {2, 4}};
  const std::int64_t k = 2;
  std::vector<zenflow::partition_matrix> list;
  for (const auto& s : shapes) {
    list.push_back({s.channels, static_cast<std::uint64_t>(s.len) * 12}); // master + two moments, fp32
  }
  // Each rank's gradients, channel-major per matrix, seeded by rank.
  auto grads_of = [&](int rank) {
    std::vector<std::vector<float>> g;
    for (std::size_t m = 0; m < shapes.size(); ++m) {
      g.push_back(inputs(rank, 20 + static_cast<int>(m),
                         static_cast<std::size_t>(shapes[m].channels * shapes[m].len)));
    }
    return g;
  };
  const auto grads = grads_of(comm.rank());
  // The ascending indices of the k largest scores (ties to the lower index).
  auto top_k = [&](const std::vector<float>& scores) {
    std::vector<std::int64_t> idx(scores.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return scores[a] > scores[b]; });
    const auto keep =
        static_cast<std::ptrdiff_t>(std::min<std::size_t>(static_cast<std::size_t>(k), idx.size()));
    std::vector<std::int64_t> top(idx.begin(), idx.begin() + keep);
    std::sort(top.begin(), top.end());
    return top;
  };
  std::vector<std::vector<float>> scores(shapes.size());
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    for (std::int64_t c = 0; c < shapes[m].channels; ++c) {
      float s = 0.0f;
      for (std::int64_t j = 0; j < shapes[m].len; ++j) {
        s += grads[m][c * shapes[m].len + j] * grads[m][c * shapes[m].len + j];
      }
      scores[m].push_back(s);
    }
  }

  // example-begin data-parallel-step
  // initialize(): every rank must hold the same parameter list (else every rank throws, naming it).
  comm.verify_same(zenflow::stable_hash{}.add_matrices(list).value(), "the parameter list", nullptr);
  const zenflow::channel_partition owners = zenflow::partition_channels(list, comm.size());

  // Selection: one float per channel crosses the wire; every rank then takes the same top-k.
  std::vector<std::vector<std::int64_t>> selected(shapes.size());
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    comm.all_reduce_sum(scores[m].data(), scores[m].size(), nullptr);
    selected[m] = top_k(scores[m]);
  }

  // Selected channels: their gradients averaged before the (replicated) device update.
  std::vector<float> sel_grad;
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    for (const std::int64_t c : selected[m]) {
      sel_grad.insert(sel_grad.end(), grads[m].begin() + c * shapes[m].len,
                      grads[m].begin() + (c + 1) * shapes[m].len);
    }
  }
  comm.all_reduce_mean(sel_grad.data(), sel_grad.size(), nullptr);

  // Unselected channels: packed by owner, reduce-scattered: each rank receives only its blocks.
  auto is_selected = [&](std::size_t m, std::int64_t c) {
    return std::binary_search(selected[m].begin(), selected[m].end(), c);
  };
  std::vector<float> packed;
  std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()), 0);
  for (int r = 0; r < comm.size(); ++r) {
    for (std::size_t m = 0; m < shapes.size(); ++m) {
      for (std::int64_t c = owners.begin(m, r); c < owners.end(m, r); ++c) {
        if (!is_selected(m, c)) {
          packed.insert(packed.end(), grads[m].begin() + c * shapes[m].len,
                        grads[m].begin() + (c + 1) * shapes[m].len);
          counts[static_cast<std::size_t>(r)] += static_cast<std::size_t>(shapes[m].len);
        }
      }
    }
  }
  std::vector<float> mine(counts[static_cast<std::size_t>(comm.rank())]);
  comm.reduce_scatter_sum(packed.data(), mine.data(), counts, nullptr);
  // example-end data-parallel-step

  // The reference: every rank's gradients, summed in float64.
  std::vector<std::vector<std::vector<float>>> all;
  for (int r = 0; r < N; ++r) {
    all.push_back(grads_of(r));
  }
  auto sum_of = [&](std::size_t m, std::size_t i) {
    double acc = 0.0;
    for (int r = 0; r < N; ++r) {
      acc += static_cast<double>(all[static_cast<std::size_t>(r)][m][i]);
    }
    return acc;
  };
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    std::vector<float> ref_scores(static_cast<std::size_t>(shapes[m].channels), 0.0f);
    for (int r = 0; r < N; ++r) {
      for (std::int64_t c = 0; c < shapes[m].channels; ++c) {
        double s = 0.0;
        for (std::int64_t j = 0; j < shapes[m].len; ++j) {
          const double g =
              all[static_cast<std::size_t>(r)][m][static_cast<std::size_t>(c * shapes[m].len + j)];
          s += g * g;
        }
        ref_scores[static_cast<std::size_t>(c)] += static_cast<float>(s);
      }
    }
    for (std::int64_t c = 0; c < shapes[m].channels; ++c) {
      EXPECT_NEAR(scores[m][static_cast<std::size_t>(c)], ref_scores[static_cast<std::size_t>(c)],
                  1e-5 * ref_scores[static_cast<std::size_t>(c)] + 1e-30);
    }
    EXPECT_TRUE(same_on_every_rank(selected[m])) << "matrix " << m << ": the ranks chose different channels";
  }
  std::size_t at = 0;
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    for (const std::int64_t c : selected[m]) {
      for (std::int64_t j = 0; j < shapes[m].len; ++j, ++at) {
        ASSERT_EQ(sel_grad[at],
                  static_cast<float>(sum_of(m, static_cast<std::size_t>(c * shapes[m].len + j)) / N));
      }
    }
  }
  at = 0;
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    for (std::int64_t c = owners.begin(m, comm.rank()); c < owners.end(m, comm.rank()); ++c) {
      if (!is_selected(m, c)) {
        for (std::int64_t j = 0; j < shapes[m].len; ++j, ++at) {
          ASSERT_EQ(mine[at], static_cast<float>(sum_of(m, static_cast<std::size_t>(c * shapes[m].len + j))));
        }
      }
    }
  }
  EXPECT_EQ(at, mine.size());

  // After the window each owner uploads its channels' new weights; an all-gather gives every
  // replica every block (here: weight = -owner's rank, one float per channel, in owner order).
  std::vector<std::size_t> wcounts(static_cast<std::size_t>(N), 0);
  for (int r = 0; r < N; ++r) {
    for (std::size_t m = 0; m < shapes.size(); ++m) {
      wcounts[static_cast<std::size_t>(r)] += static_cast<std::size_t>(owners.count(m, r));
    }
  }
  const std::vector<float> my_weights(wcounts[static_cast<std::size_t>(comm.rank())],
                                      -static_cast<float>(comm.rank()));
  std::vector<float> weights(std::accumulate(wcounts.begin(), wcounts.end(), std::size_t{0}));
  zenflow::all_gather(comm, my_weights.data(), weights.data(), std::span<const std::size_t>(wcounts),
                      nullptr);
  at = 0;
  for (int r = 0; r < N; ++r) {
    for (std::size_t i = 0; i < wcounts[static_cast<std::size_t>(r)]; ++i, ++at) {
      ASSERT_EQ(weights[at], -static_cast<float>(r));
    }
  }
}

} // namespace
