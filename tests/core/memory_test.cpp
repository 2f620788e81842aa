#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/device.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/worker_pool.hpp>

namespace {

TEST(device, queries_never_throw) {
  const int n = zenflow::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(zenflow::cuda_available(), n > 0);
  zenflow::device_info info;
  EXPECT_EQ(zenflow::query_device(n, info), false); // one past the last device
  EXPECT_EQ(info.ordinal, -1);
  if (n > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess); // queries leave no error behind
  }
}

TEST(pinned_buffer, is_usable_with_or_without_a_driver) {
  zenflow::pinned_buffer<double> buf(1000);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 1000u);
  EXPECT_EQ(buf.bytes(), 8000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf.data()) % 64, 0u);
  EXPECT_EQ(buf.pinned(), zenflow::cuda_available());
  std::iota(buf.data(), buf.data() + buf.size(), 0.5);
  zenflow::pinned_buffer<double> moved(std::move(buf));
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(moved[999], 999.5);
  EXPECT_EQ(std::accumulate(moved.span().begin(), moved.span().end(), 0.0), 500000.0);
  zenflow::pinned_buffer<double> empty(0);
  EXPECT_TRUE(empty.empty());
}

TEST(device_buffer, without_a_device_construction_throws_cuda_error) {
  if (zenflow::cuda_available()) {
    GTEST_SKIP() << "a device is present: covered by the gpu tests";
  }
  EXPECT_THROW(zenflow::device_buffer<float>(16), zenflow::cuda_error);
  EXPECT_THROW(zenflow::stream{}, zenflow::cuda_error);
  zenflow::device_buffer<float> none; // default construction allocates nothing and never fails
  EXPECT_TRUE(none.empty());
}

TEST(worker_pool, parallel_for_covers_the_range_once_in_fixed_chunks) {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    zenflow::worker_pool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    std::vector<int> hits(1003, 0);
    std::vector<std::int64_t> chunk_begin(zenflow::worker_pool::chunk_count(1003, 64), -1);
    pool.parallel_for(1003, 64, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      chunk_begin[static_cast<std::size_t>(c)] = b;
      for (auto i = b; i < e; ++i) {
        ++hits[static_cast<std::size_t>(i)];
      }
    });
    for (int h : hits) {
      ASSERT_EQ(h, 1);
    }
    for (std::size_t c = 0; c < chunk_begin.size(); ++c) {
      EXPECT_EQ(chunk_begin[c], static_cast<std::int64_t>(c) * 64);
    }
  }
}

TEST(worker_pool, exceptions_reach_the_caller) {
  zenflow::worker_pool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](std::int64_t c, std::int64_t, std::int64_t) {
                                   if (c == 37) {
                                     throw std::runtime_error("chunk 37");
                                   }
                                 }),
               std::runtime_error);
  int ran = 0;
  pool.parallel_for(10, 100,
                    [&](std::int64_t, std::int64_t b, std::int64_t e) { ran += static_cast<int>(e - b); });
  EXPECT_EQ(ran, 10); // the pool is still usable after a failure
}

} // namespace
