// The channel scores' order of summation (select/detail/norm_order.hpp), the one the kernels
// follow so that the CUDA backend gives the host backend's bits: the host loops (every SIMD path
// the CPU has, threaded or not) against a plain scalar loop written from that order alone, bit for
// bit, on random shapes with many row chunks, tails, padding and unaligned pointers. The kernels
// are held to the host's bits by select_gpu_test.cu (gpu label).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/detail/norm_order.hpp>

#include "support/random.hpp"

namespace {

using zenflow::channel_layout;
using zenflow::channel_norm;

template <channel_norm Norm>
float term(float x) {
  if constexpr (Norm == channel_norm::sq_l2) {
    volatile float square = x * x; // rounded before it is added
    return square;
  } else {
    return std::fabs(x);
  }
}

/// 64 lanes, element i to lane i % 64 in order, then lane l += lane l + s for s = 32, ..., 1.
template <channel_norm Norm, class T>
float contiguous_in_order(const T* p, std::int64_t len) {
  float lane[64] = {};
  for (std::int64_t i = 0; i < len; ++i) {
    lane[i % 64] = lane[i % 64] + term<Norm>(zenflow::to_float(p[i]));
  }
  for (int s = 32; s > 0; s /= 2) {
    for (int l = 0; l < s; ++l) {
      lane[l] = lane[l] + lane[l + s];
    }
  }
  return lane[0];
}

/// Column c over `rows` rows: chunks of `rpc` rows; in a chunk, row lane y adds rows r0 + y,
/// r0 + y + 8, ... in order; the chunk's sum is lane 0 + ... + lane 7; the score the chunks' sums.
template <channel_norm Norm, class T>
float strided_in_order(const T* p, std::int64_t ld, std::int64_t rows, std::int64_t rpc) {
  float score = 0.0f;
  for (std::int64_t r0 = 0; r0 < rows; r0 += rpc) {
    float lane[8] = {};
    for (std::int64_t r = r0; r < std::min(rows, r0 + rpc); ++r) {
      lane[(r - r0) % 8] = lane[(r - r0) % 8] + term<Norm>(zenflow::to_float(p[r * ld]));
    }
    float chunk = 0.0f;
    for (float v : lane) {
      chunk = chunk + v;
    }
    score = score + chunk;
  }
  return score;
}

template <class T>
class norm_order : public ::testing::Test {};
using working_types = ::testing::Types<float, zenflow::half, zenflow::bfloat16>;
TYPED_TEST_SUITE(norm_order, working_types);

TYPED_TEST(norm_order, the_chunking_is_a_function_of_the_shape_that_fills_the_device) {
  using T = TypeParam;
  const std::int64_t per_block = 32 * zenflow::detail::vec_elems<T>;
  EXPECT_EQ(zenflow::detail::strided_rows_per_chunk<T>(0, 100), 0);
  EXPECT_EQ(zenflow::detail::strided_rows_per_chunk<T>(5, 0), 0);
  // One column block: as many chunks as 32-row pieces allow, up to 1024.
  EXPECT_EQ(zenflow::detail::strided_rows_per_chunk<T>(per_block, 2000), 32);
  EXPECT_EQ(zenflow::detail::strided_rows_per_chunk<T>(per_block, 100000), (100000 + 1023) / 1024);
  // Enough column blocks to fill the device alone: one chunk of every row.
  EXPECT_EQ(zenflow::detail::strided_rows_per_chunk<T>(per_block * 1024, 5000), 5000);
}

template <channel_norm Norm, class T>
void check_order(zenflow::worker_pool* pool, std::uint64_t seed) {
  struct shape {
    std::int64_t channels, len, pad;
  };
  const std::vector<shape> shapes = {{1, 1, 0},   {3, 63, 1},   {5, 64, 0},    {7, 4099, 3},
                                     {70, 2000, 2}, {300, 777, 0}, {2, 40000, 0}, {1100, 95, 5}};
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (const auto& s : shapes) {
      for (const std::size_t offset : {0u, 1u}) {
        ++seed;
        SCOPED_TRACE(zf_test::seed_note(seed) + " channels=" + std::to_string(s.channels) +
                     " len=" + std::to_string(s.len) + " offset=" + std::to_string(offset) +
                     (layout == channel_layout::strided ? " strided" : " contiguous"));
        const std::int64_t ld = (layout == channel_layout::contiguous ? s.len : s.channels) + s.pad;
        const std::int64_t rows = layout == channel_layout::contiguous ? s.channels : s.len;
        const auto buf = zf_test::random_values<T>(static_cast<std::size_t>(rows * ld) + offset, seed, 3.0f);
        const T* g = buf.data() + offset;
        std::vector<float> scores(static_cast<std::size_t>(s.channels));
        std::size_t bytes = 0;
        ASSERT_EQ(zenflow::host::channel_norms<Norm>(nullptr, bytes, g, s.channels, s.len, ld, layout,
                                                     scores.data(), {}, pool),
                  cudaSuccess);
        std::vector<std::byte> temp(bytes);
        ASSERT_EQ(zenflow::host::channel_norms<Norm>(temp.data(), bytes, g, s.channels, s.len, ld, layout,
                                                     scores.data(), {}, pool),
                  cudaSuccess);
        const std::int64_t rpc = zenflow::detail::strided_rows_per_chunk<T>(s.channels, s.len);
        for (std::int64_t c = 0; c < s.channels; ++c) {
          const float want = layout == channel_layout::contiguous
                                 ? contiguous_in_order<Norm>(g + c * ld, s.len)
                                 : strided_in_order<Norm>(g + c, ld, s.len, rpc);
          ASSERT_EQ(zenflow::detail::float_bits(scores[static_cast<std::size_t>(c)]),
                    zenflow::detail::float_bits(want))
              << "channel " << c << ": " << scores[static_cast<std::size_t>(c)] << " vs " << want;
        }
      }
    }
  }
}

TYPED_TEST(norm_order, host_scores_follow_the_order_bit_for_bit_on_one_thread_and_on_a_pool) {
  using T = TypeParam;
  zenflow::worker_pool pool(3);
  for (zenflow::worker_pool* p : {static_cast<zenflow::worker_pool*>(nullptr), &pool}) {
    check_order<channel_norm::sq_l2, T>(p, zf_test::base_seed() + 500);
    check_order<channel_norm::l1, T>(p, zf_test::base_seed() + 900);
  }
}

} // namespace
