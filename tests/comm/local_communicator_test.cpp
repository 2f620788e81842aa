// local_communicator: one rank, so every reduction is the identity bit for bit and the gathers and
// scatters copy their one block; bad arguments are rejected, naming the argument, with nothing
// written.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/local_communicator.hpp>

#include "support/random.hpp"

namespace {

using zenflow::local_communicator;

static_assert(zenflow::communicator<zenflow::local_communicator>);
static_assert(zenflow::communicator<zenflow::local_device_communicator>);
static_assert(!zenflow::local_communicator::is_device && zenflow::local_device_communicator::is_device);

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Random values plus the awkward ones: a NaN, infinities, a denormal, -0.
std::vector<float> awkward_floats(std::size_t n, std::uint64_t seed) {
  auto v = zf_test::random_values<float>(n, seed, 3.0f);
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[1] = std::numeric_limits<float>::infinity();
  v[2] = -std::numeric_limits<float>::infinity();
  v[3] = std::numeric_limits<float>::denorm_min();
  v[4] = -0.0f;
  return v;
}

TEST(local_communicator, reductions_leave_every_bit_as_it_is) {
  const std::uint64_t seed = zf_test::base_seed() + 1;
  SCOPED_TRACE(zf_test::seed_note(seed));
  local_communicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  const auto f0 = awkward_floats(37, seed);
  auto f = f0;
  c.all_reduce_sum(f.data(), f.size(), nullptr);
  EXPECT_TRUE(same_bits(f, f0));
  c.all_reduce_mean(f.data(), f.size(), nullptr);
  EXPECT_TRUE(same_bits(f, f0));
  std::vector<double> d0(f0.begin(), f0.end());
  auto d = d0;
  c.all_reduce_sum(d.data(), d.size(), nullptr);
  EXPECT_TRUE(same_bits(d, d0));
  const std::vector<std::uint32_t> u0 = {0u, 1u, 0xdeadbeefu, 0xffffffffu};
  auto u = u0;
  c.all_reduce_max(u.data(), u.size(), nullptr);
  EXPECT_EQ(u, u0);
  c.all_reduce_or(u.data(), u.size(), nullptr);
  EXPECT_EQ(u, u0);
  c.verify_same(0x1234u, "the configuration", nullptr);
}

TEST(local_communicator, gather_and_scatter_copy_the_one_block) {
  const std::uint64_t seed = zf_test::base_seed() + 2;
  SCOPED_TRACE(zf_test::seed_note(seed));
  local_communicator c;
  const auto send = zf_test::random_values<float>(29, seed);
  std::vector<float> recv(29, -1.0f);
  const std::vector<std::size_t> counts = {29};
  c.reduce_scatter_sum(send.data(), recv.data(), counts, nullptr);
  EXPECT_TRUE(same_bits(recv, send));

  std::vector<float> gathered(29, -1.0f);
  zenflow::all_gather(c, send.data(), gathered.data(), std::size_t{29}, nullptr);
  EXPECT_TRUE(same_bits(gathered, send));
  // In place: send is the rank's own block of recv.
  zenflow::all_gather(c, gathered.data(), gathered.data(), std::span<const std::size_t>(counts), nullptr);
  EXPECT_TRUE(same_bits(gathered, send));

  std::vector<float> eq(29, -1.0f);
  zenflow::reduce_scatter_sum(c, send.data(), eq.data(), 29, nullptr);
  EXPECT_TRUE(same_bits(eq, send));
  // The mean over one rank is the value itself, bit for bit (x / 1 == x).
  std::vector<float> mean(29, -1.0f);
  c.reduce_scatter_mean(send.data(), mean.data(), counts, nullptr);
  EXPECT_TRUE(same_bits(mean, send));
  std::vector<float> mean_eq(29, -1.0f);
  zenflow::reduce_scatter_mean(c, send.data(), mean_eq.data(), 29, nullptr);
  EXPECT_TRUE(same_bits(mean_eq, send));

  auto b = send;
  c.broadcast_bytes(b.data(), b.size() * sizeof(float), 0, nullptr);
  EXPECT_TRUE(same_bits(b, send));
  // Zero counts are fine, null pointers with them too.
  c.all_reduce_sum(static_cast<float*>(nullptr), 0, nullptr);
  const std::vector<std::size_t> zero = {0};
  c.all_gather_bytes(nullptr, nullptr, zero, nullptr);
}

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming " << needle;
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(local_communicator, bad_arguments_name_the_argument_and_write_nothing) {
  local_communicator c;
  const std::vector<float> send = {1.0f, 2.0f};
  std::vector<float> recv = {7.0f, 7.0f};
  const std::vector<std::size_t> two = {1, 1};
  expect_invalid([&] { c.reduce_scatter_sum(send.data(), recv.data(), two, nullptr); },
                 "'counts' has 2 entries");
  expect_invalid([&] { c.all_gather_bytes(send.data(), recv.data(), two, nullptr); }, "'counts'");
  const std::vector<std::size_t> one = {2};
  expect_invalid([&] { c.reduce_scatter_sum(nullptr, recv.data(), one, nullptr); }, "'send' is null");
  expect_invalid([&] { c.reduce_scatter_mean(send.data(), recv.data(), two, nullptr); },
                 "zenflow::local_communicator::reduce_scatter_mean: argument 'counts' has 2 entries");
  expect_invalid([&] { c.all_gather_bytes(send.data(), nullptr, one, nullptr); }, "'recv' is null");
  expect_invalid([&] { c.all_reduce_sum(static_cast<float*>(nullptr), 3, nullptr); },
                 "zenflow::local_communicator::all_reduce_sum: argument 'buf'");
  expect_invalid([&] { c.broadcast_bytes(recv.data(), 8, 1, nullptr); }, "'root' is 1");
  EXPECT_EQ(recv, (std::vector<float>{7.0f, 7.0f}));
}

} // namespace
