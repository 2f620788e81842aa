// The communicators' kernels on the kernel emulator: the shard helpers' widen and narrow
// (comm/shard.cuh, cuda_shard_rows: what reduce_scatter_shard launches over a CUDA communicator)
// against the host loops (comm/detail/shard_rows.hpp), and nccl_communicator's mean division and
// flag OR (comm/detail/nccl_kernels.cuh) against the host arithmetic, bit for bit: every working
// type and layout, one element, a grid that strides, empty matrices.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/detail/nccl_kernels.cuh>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/comm/shard.cuh>

#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using zenflow::channel_layout;
using zf_test::download;
using zf_test::upload;

class comm_kernels : public zf_test::gpu_test {
protected:
  zf_test::stream s;
};

template <class T>
void widen_and_narrow(
    cudaStream_t s, std::int64_t channels, std::int64_t len, channel_layout layout, std::uint64_t seed) {
  SCOPED_TRACE(std::to_string(channels) + " x " + std::to_string(len) +
               (layout == channel_layout::contiguous ? " contiguous" : " strided"));
  using rows = zenflow::detail::comm::cuda_shard_rows<zenflow::local_communicator>;
  const std::int64_t ld = layout == channel_layout::contiguous ? len + 2 : channels + 3;
  const std::int64_t outer = layout == channel_layout::contiguous ? channels : len;
  const auto storage = zf_test::random_values<T>(static_cast<std::size_t>(outer * ld), seed, 3.0f);
  auto d_storage = upload(storage, s);
  const std::size_t n = static_cast<std::size_t>(channels * len);
  std::vector<float> want(n, -1.0f);
  zenflow::detail::comm::host_widen_rows<T>({storage.data(), channels, len, ld, layout}, want.data());
  zf_test::device_buffer<float> got(n, s);
  if (n > 0) {
    rows::widen<T>({d_storage.data(), channels, len, ld, layout}, got.data(), s);
  }
  const auto widened = download(got, s);
  ASSERT_EQ(widened.size(), want.size());
  EXPECT_TRUE(widened.empty() || std::memcmp(widened.data(), want.data(), n * 4) == 0);
  // Narrowing rounds once to T: fp32 values off T's grid.
  const auto f = zf_test::random_values<float>(n, seed + 1, 5.0f);
  auto d_f = upload(f, s);
  auto host_out = storage;
  zenflow::detail::comm::host_narrow_rows<T>(f.data(), {host_out.data(), channels, len, ld, layout});
  if (n > 0) {
    rows::narrow<T>(d_f.data(), {d_storage.data(), channels, len, ld, layout}, s);
  }
  const auto narrowed = download(d_storage, s);
  ASSERT_EQ(narrowed.size(), host_out.size());
  EXPECT_TRUE(narrowed.empty() ||
              std::memcmp(narrowed.data(), host_out.data(), narrowed.size() * sizeof(T)) == 0);
}

TEST_F(comm_kernels, shard_widen_and_narrow_write_the_host_loops_bits) {
  std::uint64_t seed = zf_test::base_seed() + 30;
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    widen_and_narrow<float>(s, 1, 1, layout, ++seed);
    widen_and_narrow<zenflow::bfloat16>(s, 37, 19, layout, ++seed);
    widen_and_narrow<zenflow::half>(s, 5, 301, layout, ++seed);
    widen_and_narrow<float>(s, 0, 7, layout, ++seed);
  }
}

TEST_F(comm_kernels, mean_division_and_flag_or_match_the_host) {
  std::mt19937_64 rng(zf_test::base_seed() + 40);
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{4096 * 256 + 3}}) {
    // More elements than the grid's 4096 blocks of 256 cover: the kernels stride.
    const auto x = zf_test::random_values<float>(n, rng(), 7.0f);
    auto d_x = upload(x, s);
    const unsigned grid = zenflow::detail::comm::grid_for(n);
    ZF_LAUNCH(grid, 256, 0, s, zenflow::detail::comm::divide_kernel<float>)(d_x.data(), n, 3.0f);
    ASSERT_EQ(zenflow::detail::launch_status(), cudaSuccess);
    const auto got = download(d_x, s);
    for (std::size_t i = 0; i < n; ++i) {
      const float want = x[i] / 3.0f;
      ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << i;
    }
    const int ranks = 3;
    std::vector<std::uint32_t> gathered(n * ranks);
    for (auto& v : gathered) {
      v = static_cast<std::uint32_t>(rng() % 3 == 0 ? rng() % 16 : 0);
    }
    auto d_gathered = upload(gathered, s);
    zf_test::device_buffer<std::uint32_t> d_out(n, s);
    ZF_LAUNCH(grid, 256, 0, s, zenflow::detail::comm::or_kernel<std::uint32_t>)
    (d_gathered.data(), n, ranks, d_out.data());
    ASSERT_EQ(zenflow::detail::launch_status(), cudaSuccess);
    const auto out = download(d_out, s);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], gathered[i] | gathered[n + i] | gathered[2 * n + i]) << i;
    }
  }
}

} // namespace
