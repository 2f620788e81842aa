// nccl_communicator's one-rank path on a real device (gpu label: skipped without one unless
// ZENFLOW_REQUIRE_GPU=1): NCCL's collectives over one rank return the inputs bit for bit, every
// stream-ordered call also runs under CUDA graph capture, verify_same agrees with itself, and bad
// arguments are refused by name; the watchdog sees every collective end and revokes nothing, and
// revokes one held on the device past its bound, after which the next call throws why. One rank
// cannot reach the uneven-block groups, the divide kernel or the or kernel (each needs two ranks
// or more): the multi-rank semantics are mpi_communicator's tests, and those paths have not run
// on a GPU yet.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nccl.h>

#include <zenflow/comm/nccl_communicator.cuh>

#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

class nccl_one_rank : public zf_test::gpu_test {
protected:
  void SetUp() override {
    zf_test::gpu_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    int dev = 0;
    ASSERT_EQ(ncclCommInitAll(&comm_, 1, &dev), ncclSuccess);
    ZF_CUDA_TRY(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      (void)cudaStreamDestroy(stream_);
    }
    if (comm_ != nullptr) {
      (void)ncclCommDestroy(comm_);
    }
  }
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_F(nccl_one_rank, collectives_over_one_rank_are_the_identity_direct_and_in_a_graph) {
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "direct");
    const std::uint64_t seed = zf_test::base_seed() + 40;
    SCOPED_TRACE(zf_test::seed_note(seed));
    zenflow::nccl_communicator c(comm_);
    EXPECT_EQ(c.rank(), 0);
    EXPECT_EQ(c.size(), 1);
    const auto f0 = zf_test::random_values<float>(1031, seed);
    std::vector<double> d0(f0.begin(), f0.end());
    const std::vector<std::uint32_t> u0 = {0u, 1u, 0x80000001u, 0xffffffffu};
    auto f = zf_test::upload(f0, stream_);
    auto m = zf_test::upload(f0, stream_);
    auto d = zf_test::upload(d0, stream_);
    auto u = zf_test::upload(u0, stream_);
    auto o = zf_test::upload(u0, stream_);
    zenflow::device_buffer<float> rs(f0.size(), stream_);
    zenflow::device_buffer<float> rm(f0.size(), stream_);
    zenflow::device_buffer<float> ag(f0.size(), stream_);
    const std::vector<std::size_t> counts = {f0.size()};
    zf_test::run(stream_, graph, [&](cudaStream_t s) {
      c.all_reduce_sum(f.data(), f0.size(), s);
      c.all_reduce_mean(m.data(), f0.size(), s);
      c.all_reduce_sum(d.data(), d0.size(), s);
      c.all_reduce_max(u.data(), u0.size(), s);
      c.all_reduce_or(o.data(), u0.size(), s);
      c.reduce_scatter_sum(f.data(), rs.data(), counts, s);
      c.reduce_scatter_mean(f.data(), rm.data(), counts, s);
      zenflow::all_gather(c, f.data(), ag.data(), std::span<const std::size_t>(counts), s);
      c.broadcast_bytes(f.data(), f0.size() * sizeof(float), 0, s);
    });
    EXPECT_TRUE(same_bits(zf_test::download(f, stream_), f0));
    EXPECT_TRUE(same_bits(zf_test::download(m, stream_), f0));
    EXPECT_TRUE(same_bits(zf_test::download(d, stream_), d0));
    EXPECT_EQ(zf_test::download(u, stream_), u0);
    EXPECT_EQ(zf_test::download(o, stream_), u0);
    EXPECT_TRUE(same_bits(zf_test::download(rs, stream_), f0));
    EXPECT_TRUE(same_bits(zf_test::download(rm, stream_), f0)); // x / 1 == x
    EXPECT_TRUE(same_bits(zf_test::download(ag, stream_), f0));
    c.verify_same(0xfeedu, "the configuration", stream_);
    // The watchdog (on by default) saw every marked collective end, and revoked nothing.
    for (int i = 0; i < 2000 && c.watched_pending() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(c.watched_pending(), 0u);
    EXPECT_FALSE(c.revoked());
    EXPECT_TRUE(c.usable());
  }
}

// Holds its stream until the host sets *flag (mapped pinned memory): a collective enqueued after
// it cannot end, as when another rank never arrives.
__global__ void wait_for_host(const volatile unsigned* flag) {
  while (*flag == 0u) {
    __nanosleep(1000);
  }
}

TEST_F(nccl_one_rank, the_watchdog_revokes_a_collective_that_does_not_end_and_the_next_call_says_why) {
  if (!ZF_NCCL_HAS_REVOKE) {
    GTEST_SKIP() << "NCCL " << NCCL_MAJOR << "." << NCCL_MINOR
                 << " has no ncclCommRevoke (2.28.7): no watchdog";
  }
  unsigned* flag = nullptr;
  ZF_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(unsigned), cudaHostAllocMapped));
  *flag = 0u;
  unsigned* flag_on_device = nullptr;
  ZF_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_on_device), flag, 0));
  const auto f0 = zf_test::random_values<float>(257, zf_test::base_seed() + 41);
  auto f = zf_test::upload(f0, stream_);
  ZF_CUDA_TRY(cudaStreamSynchronize(stream_));
  {
    zenflow::nccl_communicator c(comm_, {.revoke_after = std::chrono::milliseconds(200)});
    wait_for_host<<<1, 1, 0, stream_>>>(flag_on_device);
    ZF_CUDA_TRY(cudaGetLastError());
    const auto enqueued = std::chrono::steady_clock::now();
    c.all_reduce_sum(f.data(), f0.size(), stream_);
    for (int i = 0; i < 20000 && !c.revoked(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(c.revoked());
    EXPECT_GE(std::chrono::steady_clock::now() - enqueued, std::chrono::milliseconds(200));
    EXPECT_FALSE(c.usable());
    try {
      c.all_reduce_sum(f.data(), f0.size(), stream_);
      ADD_FAILURE() << "no throw after the watchdog revoked the communicator";
    } catch (const zenflow::comm_timeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("all_reduce_sum not complete 200 ms"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0 of 1"), std::string::npos) << what;
      EXPECT_NE(what.find("revoked"), std::string::npos) << what;
    }
  }
  ncclComm_t fresh = nullptr; // comm_ is revoked now
  int dev = 0;
  ZF_CUDA_TRY(cudaGetDevice(&dev));
  ASSERT_EQ(ncclCommInitAll(&fresh, 1, &dev), ncclSuccess);
  {
    // verify_same waits: a revoke while it waits is a comm_timeout, not a verdict on no hashes.
    zenflow::nccl_communicator c(
        fresh, {.timeout = std::chrono::seconds(30), .revoke_after = std::chrono::milliseconds(200)});
    wait_for_host<<<1, 1, 0, stream_>>>(flag_on_device);
    ZF_CUDA_TRY(cudaGetLastError());
    const auto called = std::chrono::steady_clock::now();
    EXPECT_THROW(c.verify_same(0xfeedu, "the configuration", stream_), zenflow::comm_timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - called, std::chrono::seconds(20)); // not the 30 s
    EXPECT_TRUE(c.revoked());
  }
  *flag = 1u; // the stream ends: nothing behind the revoked collectives waits forever
  ZF_CUDA_TRY(cudaStreamSynchronize(stream_));
  EXPECT_EQ(ncclCommDestroy(fresh), ncclSuccess);
  ZF_CUDA_TRY(cudaFreeHost(flag));
}

TEST_F(nccl_one_rank, bad_arguments_name_the_argument) {
  zenflow::nccl_communicator c(comm_);
  const std::vector<std::size_t> two = {1, 1};
  try {
    c.reduce_scatter_sum(nullptr, nullptr, two, stream_);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'counts' has 2 entries"), std::string::npos) << e.what();
  }
  try {
    zenflow::nccl_communicator bad(nullptr);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'comm' is null"), std::string::npos) << e.what();
  }
  try {
    zenflow::nccl_communicator bad(comm_, {.or_elements = 0});
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'options.or_elements'"), std::string::npos) << e.what();
  }
  try {
    zenflow::nccl_communicator bad(comm_, {.revoke_after = std::chrono::milliseconds(-1)});
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'options.revoke_after'"), std::string::npos) << e.what();
  }
  // all_reduce_or allocates nothing: more elements than its scratch holds is refused, unchanged.
  zenflow::nccl_communicator small(comm_, {.or_elements = 4});
  const std::vector<std::uint32_t> flags = {1u, 0u, 1u, 0u, 1u};
  auto u = zf_test::upload(flags, stream_);
  try {
    small.all_reduce_or(u.data(), flags.size(), stream_);
    ADD_FAILURE() << "no throw";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'n' exceeds nccl_options::or_elements (4"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(zf_test::download(u, stream_), flags);
  EXPECT_TRUE(small.usable());
}

} // namespace
