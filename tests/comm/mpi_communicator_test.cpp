// mpi_communicator under mpiexec (2 and 3 ranks): every rank runs every case. Each rank's inputs
// are random, seeded by rank, so every rank can compute every other rank's inputs and the float64
// reference itself; results are compared with it and, through a plain MPI_Allgather, across ranks
// bit for bit. A failed assertion on any rank fails mpiexec, hence the ctest entry.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mpi.h>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/mpi_communicator.hpp>

#include "mpi_test_support.hpp"
#include "support/mpi_gtest_main.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_comm_test;

TEST(mpi_communicator, rank_and_size_match_the_world) {
  auto c = make_comm();
  int rank = -1;
  int size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(c.rank(), rank);
  EXPECT_EQ(c.size(), size);
  EXPECT_TRUE(c.usable());
  EXPECT_NE(c.comm(), MPI_COMM_WORLD); // a private duplicate
}

TEST(mpi_communicator, float_sum_and_mean_match_the_reference_and_agree_bit_for_bit) {
  auto c = make_comm();
  const std::size_t n = 1037;
  auto sum = inputs(c.rank(), 1, n);
  auto mean = sum;
  c.all_reduce_sum(sum.data(), n, nullptr);
  c.all_reduce_mean(mean.data(), n, nullptr);
  // The contract: float64 in rank order, one rounding (the mean divides before it). Also within
  // half an ulp of float plus the float64 error of the exact sum (long double reference).
  std::vector<std::vector<float>> all;
  for (int r = 0; r < c.size(); ++r) {
    all.push_back(inputs(r, 1, n));
  }
  for (std::size_t i = 0; i < n; ++i) {
    double acc = 0.0;
    long double exact = 0.0L;
    double magnitude = 0.0;
    for (int r = 0; r < c.size(); ++r) {
      acc += static_cast<double>(all[static_cast<std::size_t>(r)][i]);
      exact += static_cast<long double>(all[static_cast<std::size_t>(r)][i]);
      magnitude += std::fabs(static_cast<double>(all[static_cast<std::size_t>(r)][i]));
    }
    ASSERT_EQ(sum[i], static_cast<float>(acc)) << "element " << i;
    ASSERT_EQ(mean[i], static_cast<float>(acc / c.size())) << "element " << i;
    const double tol = 0.5 * std::fabs(static_cast<double>(sum[i])) * std::numeric_limits<float>::epsilon() +
                       magnitude * c.size() * std::numeric_limits<double>::epsilon();
    ASSERT_LE(std::fabs(static_cast<double>(sum[i]) - static_cast<double>(exact)), tol) << "element " << i;
  }
  EXPECT_TRUE(same_on_every_rank(sum));
  EXPECT_TRUE(same_on_every_rank(mean));
  // Same inputs, same bits: a second run reproduces the first.
  auto again = inputs(c.rank(), 1, n);
  c.all_reduce_sum(again.data(), n, nullptr);
  EXPECT_EQ(std::memcmp(again.data(), sum.data(), n * sizeof(float)), 0);
}

// A buffer reduced in many chunks (a 100-byte gather bound) gives the bits of one reduction.
TEST(mpi_communicator, chunked_reductions_equal_one_reduction) {
  auto whole = make_comm();
  auto chunked = mpi_communicator(MPI_COMM_WORLD, zenflow::mpi_options{10s, 100});
  const std::size_t n = 1000;
  auto a = inputs(whole.rank(), 8, n);
  auto b = a;
  whole.all_reduce_mean(a.data(), n, nullptr);
  chunked.all_reduce_mean(b.data(), n, nullptr);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
  std::vector<std::uint32_t> fa(n), fb(n);
  for (std::size_t i = 0; i < n; ++i) {
    fa[i] = fb[i] = static_cast<std::uint32_t>(i * 2654435761u) >> (whole.rank() + 1);
  }
  whole.all_reduce_or(fa.data(), n, nullptr);
  chunked.all_reduce_or(fb.data(), n, nullptr);
  EXPECT_EQ(fa, fb);
}

TEST(mpi_communicator, double_sum_is_the_rank_order_sum) {
  auto c = make_comm();
  const std::size_t n = 301;
  auto as_double = [](const std::vector<float>& f) {
    std::vector<double> d(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      d[i] = static_cast<double>(f[i]) * (1.0 + 1e-9 * static_cast<double>(i)); // not float-representable
    }
    return d;
  };
  auto d = as_double(inputs(c.rank(), 2, n));
  c.all_reduce_sum(d.data(), n, nullptr);
  std::vector<double> expect(n, 0.0);
  for (int r = 0; r < c.size(); ++r) {
    const auto dr = as_double(inputs(r, 2, n));
    for (std::size_t i = 0; i < n; ++i) {
      expect[i] += dr[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(d[i], expect[i]) << "element " << i;
  }
  EXPECT_TRUE(same_on_every_rank(d));
}

TEST(mpi_communicator, nan_and_infinity_reach_every_rank) {
  auto c = make_comm();
  // Element 0: a NaN on the last rank only (the skip-step case); element 1: +inf on rank 0.
  std::vector<float> v = {1.0f, 2.0f, 3.0f};
  if (c.rank() == c.size() - 1) {
    v[0] = std::numeric_limits<float>::quiet_NaN();
  }
  if (c.rank() == 0) {
    v[1] = std::numeric_limits<float>::infinity();
  }
  c.all_reduce_sum(v.data(), v.size(), nullptr);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[2], 3.0f * static_cast<float>(c.size()));
}

TEST(mpi_communicator, flags_take_the_max_and_the_or) {
  auto c = make_comm();
  auto flags = [](int rank) {
    std::mt19937_64 gen(seed_of(rank, 3));
    std::vector<std::uint32_t> v(17);
    for (auto& x : v) {
      x = static_cast<std::uint32_t>(gen());
    }
    v[0] = rank == 1 ? 1u : 0u; // the NaN/Inf flag raised on one rank
    return v;
  };
  auto mx = flags(c.rank());
  auto orr = mx;
  c.all_reduce_max(mx.data(), mx.size(), nullptr);
  c.all_reduce_or(orr.data(), orr.size(), nullptr);
  std::vector<std::uint32_t> emax(17, 0), eor(17, 0);
  for (int r = 0; r < c.size(); ++r) {
    const auto f = flags(r);
    for (std::size_t i = 0; i < f.size(); ++i) {
      emax[i] = std::max(emax[i], f[i]);
      eor[i] |= f[i];
    }
  }
  EXPECT_EQ(mx, emax);
  EXPECT_EQ(orr, eor);
  EXPECT_EQ(mx[0], 1u);
}

TEST(mpi_communicator, reduce_scatter_into_given_and_equal_blocks) {
  auto c = make_comm();
  const auto N = static_cast<std::size_t>(c.size());
  // Uneven blocks, one of them empty (rank 1's), as an owner with no unselected channel has.
  std::vector<std::size_t> counts(N);
  for (std::size_t r = 0; r < N; ++r) {
    counts[r] = r == 1 ? 0 : 13 + 7 * r;
  }
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + c.rank(), std::size_t{0});
  const std::size_t mine = counts[static_cast<std::size_t>(c.rank())];
  const auto send = inputs(c.rank(), 4, total);
  std::vector<float> recv(mine + 1, -7.0f); // one past the block must stay untouched
  c.reduce_scatter_sum(send.data(), recv.data(), counts, nullptr);
  for (std::size_t i = 0; i < mine; ++i) {
    double acc = 0.0;
    for (int r = 0; r < c.size(); ++r) {
      acc += static_cast<double>(inputs(r, 4, total)[offset + i]);
    }
    ASSERT_EQ(recv[i], static_cast<float>(acc)) << "element " << i;
  }
  EXPECT_EQ(recv[mine], -7.0f);

  const std::size_t block = 31;
  const auto send_eq = inputs(c.rank(), 5, block * N);
  std::vector<float> recv_eq(block);
  zenflow::reduce_scatter_sum(c, send_eq.data(), recv_eq.data(), block, nullptr);
  for (std::size_t i = 0; i < block; ++i) {
    double acc = 0.0;
    for (int r = 0; r < c.size(); ++r) {
      acc += static_cast<double>(inputs(r, 5, block * N)[static_cast<std::size_t>(c.rank()) * block + i]);
    }
    ASSERT_EQ(recv_eq[i], static_cast<float>(acc)) << "element " << i;
  }
}

// The engine's reduction of the unselected rows: each owner receives the mean of its own block,
// with the bits all_reduce_mean gives those elements (the float64 rank-order reference), whole and
// in chunks (a 100-byte bound: several rounds, blocks that run out before the others).
TEST(mpi_communicator, reduce_scatter_mean_has_the_all_reduce_means_bits) {
  auto whole = make_comm();
  auto chunked = mpi_communicator(MPI_COMM_WORLD, zenflow::mpi_options{10s, 100});
  const auto N = static_cast<std::size_t>(whole.size());
  std::vector<std::size_t> counts(N);
  for (std::size_t r = 0; r < N; ++r) {
    counts[r] = r == N - 1 ? 0 : 41 + 17 * r; // the last rank owns nothing (an empty block)
  }
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + whole.rank(), std::size_t{0});
  const std::size_t mine = counts[static_cast<std::size_t>(whole.rank())];
  const auto send = inputs(whole.rank(), 12, total);
  auto reduced = send;
  whole.all_reduce_mean(reduced.data(), total, nullptr);
  std::vector<float> a(mine + 1, -7.0f), b(mine + 1, -7.0f), sum(mine + 1, -7.0f);
  whole.reduce_scatter_mean(send.data(), a.data(), counts, nullptr);
  chunked.reduce_scatter_mean(send.data(), b.data(), counts, nullptr);
  chunked.reduce_scatter_sum(send.data(), sum.data(), counts, nullptr);
  for (std::size_t i = 0; i < mine; ++i) {
    double acc = 0.0;
    for (int r = 0; r < whole.size(); ++r) {
      acc += static_cast<double>(inputs(r, 12, total)[offset + i]);
    }
    ASSERT_EQ(a[i], static_cast<float>(acc / whole.size())) << "element " << i;
    ASSERT_EQ(std::memcmp(&a[i], &reduced[offset + i], 4), 0) << "element " << i;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "element " << i;
    ASSERT_EQ(sum[i], static_cast<float>(acc)) << "element " << i;
  }
  EXPECT_EQ(a[mine], -7.0f); // one past the block stays untouched
  EXPECT_EQ(b[mine], -7.0f);
  // Equal blocks through the front; every block empty is a collective that moves nothing.
  const std::size_t block = 23;
  const auto send_eq = inputs(whole.rank(), 13, block * N);
  auto all_eq = send_eq;
  whole.all_reduce_mean(all_eq.data(), all_eq.size(), nullptr);
  std::vector<float> eq(block);
  zenflow::reduce_scatter_mean(chunked, send_eq.data(), eq.data(), block, nullptr);
  EXPECT_EQ(std::memcmp(eq.data(), all_eq.data() + static_cast<std::size_t>(whole.rank()) * block, block * 4),
            0);
  const std::vector<std::size_t> none(N, 0);
  whole.reduce_scatter_mean(nullptr, nullptr, none, nullptr);
  EXPECT_TRUE(whole.usable());
}

TEST(mpi_communicator, all_gather_of_uneven_blocks_and_in_place) {
  auto c = make_comm();
  const auto N = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> counts(N);
  for (std::size_t r = 0; r < N; ++r) {
    counts[r] = 5 + 3 * r; // uneven, as owner blocks of weights are
  }
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + c.rank(), std::size_t{0});
  std::vector<float> expect;
  for (int r = 0; r < c.size(); ++r) {
    const auto mine = inputs(r, 6, counts[static_cast<std::size_t>(r)]);
    expect.insert(expect.end(), mine.begin(), mine.end());
  }
  const auto mine = inputs(c.rank(), 6, counts[static_cast<std::size_t>(c.rank())]);
  std::vector<float> out(total, -1.0f);
  zenflow::all_gather(c, mine.data(), out.data(), std::span<const std::size_t>(counts), nullptr);
  EXPECT_EQ(out, expect);
  // In place: the rank writes its block into the full buffer, then gathers the others around it.
  std::vector<float> in_place(total, -1.0f);
  std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(offset));
  zenflow::all_gather(c, in_place.data() + offset, in_place.data(), std::span<const std::size_t>(counts),
                      nullptr);
  EXPECT_EQ(in_place, expect);
}

TEST(mpi_communicator, broadcast_from_the_last_rank) {
  auto c = make_comm();
  const int root = c.size() - 1;
  auto v = inputs(c.rank(), 7, 45);
  c.broadcast_bytes(v.data(), v.size() * sizeof(float), root, nullptr);
  EXPECT_EQ(v, inputs(root, 7, 45));
}

TEST(mpi_communicator, verify_same_names_the_ranks_that_differ) {
  auto c = make_comm();
  const std::vector<zenflow::partition_matrix> list = {{64, 48}, {128, 48}};
  const auto same = zenflow::stable_hash{}.add_matrices(list).value();
  c.verify_same(same, "the parameter list", nullptr); // no throw
  // Rank 1 has an extra matrix: every rank throws, naming rank 1.
  auto mine = list;
  if (c.rank() == 1) {
    mine.push_back({8, 48});
  }
  try {
    c.verify_same(zenflow::stable_hash{}.add_matrices(mine).value(), "the parameter list", nullptr);
    ADD_FAILURE() << "verify_same did not throw";
  } catch (const zenflow::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the parameter list differs across ranks: rank 1 differs from rank 0"),
              std::string::npos)
        << what;
  }
  EXPECT_TRUE(c.usable());
  c.verify_same(same, "the parameter list", nullptr); // still in step after the error
}

TEST(mpi_communicator, bad_arguments_name_the_argument_and_write_nothing) {
  auto c = make_comm();
  // Every rank makes the same mistake, so no rank enters a collective.
  const std::vector<std::size_t> wrong(static_cast<std::size_t>(c.size()) + 1, 1);
  std::vector<float> send(wrong.size(), 1.0f), recv(wrong.size(), 9.0f);
  try {
    c.reduce_scatter_sum(send.data(), recv.data(), wrong, nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter_sum: argument 'counts' has"), std::string::npos)
        << e.what();
  }
  try {
    c.reduce_scatter_mean(nullptr, recv.data(),
                          std::vector<std::size_t>(static_cast<std::size_t>(c.size()), 1), nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter_mean: argument 'send' is null"), std::string::npos)
        << e.what();
  }
  try {
    c.broadcast_bytes(recv.data(), 4, c.size(), nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'root'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(recv, std::vector<float>(wrong.size(), 9.0f));
  try {
    (void)mpi_communicator(MPI_COMM_NULL);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'comm' is MPI_COMM_NULL"), std::string::npos) << e.what();
  }
  try {
    (void)mpi_communicator(MPI_COMM_WORLD, zenflow::mpi_options{0ms, 1});
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'options.timeout'"), std::string::npos) << e.what();
  }
  try {
    (void)mpi_communicator(MPI_COMM_WORLD, zenflow::mpi_options{1s, 0});
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'options.max_gather_bytes' is 0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.usable());
}

// Rank 0 calls a collective that the others make only after rank 0 has given up: rank 0 must throw
// comm_timeout (no earlier than its 300 ms bound, naming the collective and its rank) while they
// are still away, and refuse every later call. The order is what is checked, not a duration: the
// others enter the collective only once rank 0 has told them it timed out (in plain MPI), so rank
// 0 can only pass by giving up on its own; a rank 0 that hung would be released by them after the
// note's patience and report "no timeout". The late ranks complete the collective that rank 0 left
// posted (they have a long bound), so the job ends cleanly; a rank that never came would leave that
// operation posted at MPI_Finalize, which is why the documented reaction to a timeout is to end
// the job.
TEST(mpi_communicator, a_missing_rank_is_a_timeout_not_a_hang) {
  const int rank = zf_test::world_rank();
  auto c = make_comm(rank == 0 ? 300ms : 20000ms);
  std::vector<float> v(8, 1.0f);
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      c.all_reduce_sum(v.data(), v.size(), nullptr);
      ADD_FAILURE() << "no timeout";
    } catch (const zenflow::comm_timeout& e) {
      EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms) << "gave up before its bound";
      EXPECT_NE(std::string(e.what()).find("not complete after 300 ms on rank 0"), std::string::npos)
          << e.what();
    }
    for (int r = 1; r < c.size(); ++r) {
      zf_test::tell(r); // the others may come now
    }
    EXPECT_FALSE(c.usable());
    if (!c.usable()) { // (a usable one would start a collective that nobody joins)
      try {
        c.all_reduce_sum(v.data(), v.size(), nullptr);
        ADD_FAILURE() << "a broken communicator accepted a call";
      } catch (const zenflow::comm_error& e) {
        EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
      }
    }
  } else {
    zf_test::note rank0_gave_up(0);
    EXPECT_TRUE(rank0_gave_up.arrived()) << "rank 0 did not time out while this rank was away";
    c.all_reduce_sum(v.data(), v.size(), nullptr);
    EXPECT_EQ(v[0], static_cast<float>(c.size())); // rank 0's posted contribution was 1 too
  }
  MPI_Barrier(MPI_COMM_WORLD); // rank 0 makes progress here on the operation it left posted
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
