// The kernel emulator itself (include/zenflow/emu/): what a kernel sees of CUDA (indices,
// barriers and their votes, warp shuffles and votes, atomics, shared memory, the CUB stand-ins)
// against values computed here on the host, and each detector with the bug it is for planted in
// a small kernel: the launch reports it and fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/kernel.hpp>

#include "support/random.hpp"

#if ZF_EMU_TSAN
// The planted shared-memory race below (shared_race_kernel) is the racecheck's test: ThreadSanitizer
// reports it too (cpu.emu.sanitizer_probe_* tests that), which here would fail the binary.
extern "C" const char* __tsan_default_suppressions() {
  return "race:shared_race_kernel\n";
}
#endif

namespace {

using zenflow::emu::thread_order;

/// Runs `launch()` and returns the failure's message ("" when it did not throw).
template <class F>
std::string launch_failure(F&& launch) {
  try {
    launch();
  } catch (const zenflow::cuda_error& e) {
    EXPECT_EQ(e.code(), cudaErrorLaunchFailure) << e.what();
    return e.what();
  }
  return {};
}

class emulator : public ::testing::Test {
protected:
  void SetUp() override { zenflow::emu::clear_reports(); }
};

// ---- what a kernel sees --------------------------------------------------------------------------

template <int = 0>
ZF_KERNEL void indices_kernel(unsigned* out) {
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  out[b * threads + t] = b * 100000u + t * 10u + static_cast<unsigned>(warpSize == 32);
}

TEST_F(emulator, every_thread_of_a_3d_grid_runs_once_with_its_indices) {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const unsigned n = 12 * 30;
  std::vector<unsigned> out(n, 0u);
  ZF_LAUNCH(grid, block, 0, nullptr, indices_kernel)(out.data());
  ASSERT_EQ(zenflow::detail::launch_status(), cudaSuccess);
  for (unsigned b = 0; b < 12; ++b) {
    for (unsigned t = 0; t < 30; ++t) {
      ASSERT_EQ(out[b * 30 + t], b * 100000u + t * 10u + 1u) << b << " " << t;
    }
  }
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

/// Each warp exchanges values four ways and votes; every result written per thread.
template <int = 0>
ZF_KERNEL void warp_kernel(const int* in, int* out) {
  const unsigned t = threadIdx.x;
  const int v = in[blockIdx.x * blockDim.x + t];
  int* o = out + (blockIdx.x * blockDim.x + t) * 8;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[1] = __shfl_down_sync(0xffffffffu, v, 3);
  o[2] = __shfl_up_sync(0xffffffffu, v, 2);
  o[3] = __shfl_sync(0xffffffffu, v, 7);
  o[4] = __shfl_xor_sync(0xffffffffu, v, 1, 16); // width 16
  o[5] = __any_sync(0xffffffffu, v > 90);
  o[6] = __all_sync(0xffffffffu, v >= 0);
  o[7] = static_cast<int>(__ballot_sync(0xffffffffu, v % 3 == 0));
  __syncwarp();
}

TEST_F(emulator, warp_shuffles_and_votes_follow_cuda) {
  const int threads = 64, blocks = 2, n = threads * blocks;
  std::vector<int> in(n);
  std::mt19937 gen(static_cast<unsigned>(zf_test::base_seed()));
  for (auto& x : in) {
    x = static_cast<int>(gen() % 100);
  }
  std::vector<int> out(static_cast<std::size_t>(n) * 8, -7);
  ZF_LAUNCH(blocks, threads, 0, nullptr, warp_kernel)(in.data(), out.data());
  for (int i = 0; i < n; ++i) {
    const int warp0 = i / 32 * 32;
    const int lane = i % 32;
    const int* o = out.data() + static_cast<std::size_t>(i) * 8;
    ASSERT_EQ(o[0], in[warp0 + (lane ^ 5)]) << i;
    ASSERT_EQ(o[1], lane + 3 < 32 ? in[i + 3] : in[i]) << i;
    ASSERT_EQ(o[2], lane >= 2 ? in[i - 2] : in[i]) << i;
    ASSERT_EQ(o[3], in[warp0 + 7]) << i;
    ASSERT_EQ(o[4], in[warp0 + (lane ^ 1)]) << i;
    bool any = false, all = true;
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l) {
      any |= in[warp0 + l] > 90;
      all &= in[warp0 + l] >= 0;
      ballot |= (in[warp0 + l] % 3 == 0 ? 1u : 0u) << l;
    }
    ASSERT_EQ(o[5], any ? 1 : 0) << i;
    ASSERT_EQ(o[6], all ? 1 : 0) << i;
    ASSERT_EQ(static_cast<unsigned>(o[7]), ballot) << i;
  }
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

/// Barriers with votes, shared memory seen by the whole block, integer and float atomics.
template <int = 0>
ZF_KERNEL void
block_kernel(const int* in, int* votes, unsigned* count, unsigned long long* sum, float* fsum) {
  ZF_SHARED(tile, int[128]);
  const unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * 128 + t];
  const int any = __syncthreads_or(tile[t] > 95);
  const int all = __syncthreads_and(tile[t] >= 1);
  const int many = __syncthreads_count(tile[t] % 2 == 0);
  if (t == 0) {
    votes[blockIdx.x * 3 + 0] = any;
    votes[blockIdx.x * 3 + 1] = all;
    votes[blockIdx.x * 3 + 2] = many;
  }
  atomicAdd(count, 1u);
  atomicAdd(sum, static_cast<unsigned long long>(tile[127 - t]));
  atomicAdd(fsum, 0.5f);
}

TEST_F(emulator, barrier_votes_shared_memory_and_atomics) {
  const int blocks = 3;
  std::vector<int> in(static_cast<std::size_t>(blocks) * 128);
  std::mt19937 gen(static_cast<unsigned>(zf_test::base_seed() + 1));
  for (auto& x : in) {
    x = static_cast<int>(gen() % 100);
  }
  std::vector<int> votes(static_cast<std::size_t>(blocks) * 3, -1);
  unsigned count = 0;
  unsigned long long sum = 0;
  float fsum = 0.0f;
  ZF_LAUNCH(blocks, 128, 0, nullptr, block_kernel)(in.data(), votes.data(), &count, &sum, &fsum);
  EXPECT_EQ(count, static_cast<unsigned>(blocks) * 128);
  EXPECT_EQ(sum, std::accumulate(in.begin(), in.end(), 0ull));
  EXPECT_EQ(fsum, 0.5f * static_cast<float>(blocks * 128)); // exact: halves up to 2^24
  for (int b = 0; b < blocks; ++b) {
    const auto first = in.begin() + b * 128, last = first + 128;
    EXPECT_EQ(votes[b * 3 + 0], std::any_of(first, last, [](int x) { return x > 95; }) ? 1 : 0);
    EXPECT_EQ(votes[b * 3 + 1], std::all_of(first, last, [](int x) { return x >= 1; }) ? 1 : 0);
    EXPECT_EQ(votes[b * 3 + 2], std::count_if(first, last, [](int x) { return x % 2 == 0; }));
  }
}

/// The CUB stand-ins: a block's float sum in CUB's warp-reductions order, integer scans.
template <int Threads, int Rows = 1>
ZF_KERNEL void
collectives_kernel(const float* x, float* sum, const unsigned* u, unsigned* excl, unsigned* total) {
  using reduce =
      zenflow::detail::block_reduce<float, Threads, zenflow::detail::block_reduce_warp_reductions, Rows>;
  using scan = zenflow::detail::block_scan<unsigned, Threads, zenflow::emu::block_scan_raking, Rows>;
  ZF_SHARED(rtmp, typename reduce::TempStorage);
  ZF_SHARED(stmp, typename scan::TempStorage);
  const unsigned t = threadIdx.x + Threads * threadIdx.y;
  const float s = reduce(rtmp).Sum(x[t]);
  if (t == 0) {
    *sum = s;
  }
  unsigned agg = 0;
  scan(stmp).ExclusiveSum(u[t], excl[t], agg);
  total[t] = agg;
}

/// CUB's BlockReduceWarpReductions order, written out: in each warp lane i adds lane i + 2^s
/// (s = 0..4) while in the warp; thread 0 then adds the warps' sums in order.
float cub_order_sum(const std::vector<float>& x) {
  const std::size_t warps = (x.size() + 31) / 32;
  std::vector<float> agg(warps);
  for (std::size_t w = 0; w < warps; ++w) {
    const std::size_t n = std::min<std::size_t>(32, x.size() - w * 32);
    std::vector<float> v(x.begin() + static_cast<std::ptrdiff_t>(w * 32),
                         x.begin() + static_cast<std::ptrdiff_t>(w * 32 + n));
    for (std::size_t off = 1; off < 32; off *= 2) {
      std::vector<float> next = v;
      for (std::size_t l = 0; l < n; ++l) {
        if (l + off < n) {
          next[l] = v[l] + v[l + off];
        }
      }
      v = next;
    }
    agg[w] = v[0];
  }
  float s = agg[0];
  for (std::size_t w = 1; w < warps; ++w) {
    s += agg[w];
  }
  return s;
}

template <int Threads, int Rows>
void check_collectives(std::uint64_t seed) {
  constexpr int n = Threads * Rows;
  const auto x = zf_test::random_values<float>(n, seed, 3.0f);
  std::vector<unsigned> u(n);
  std::mt19937 gen(static_cast<unsigned>(seed));
  for (auto& v : u) {
    v = gen() % 1000;
  }
  float sum = -1.0f;
  std::vector<unsigned> excl(n, 7u), total(n, 7u);
  ZF_LAUNCH(1, dim3(Threads, Rows), 0, nullptr, collectives_kernel<Threads, Rows>)
  (x.data(), &sum, u.data(), excl.data(), total.data());
  EXPECT_EQ(zenflow::detail::float_bits(sum), zenflow::detail::float_bits(cub_order_sum(x)))
      << Threads << "x" << Rows;
  double ref = 0.0;
  for (float v : x) {
    ref += v;
  }
  EXPECT_NEAR(sum, ref, 1e-4 * n);
  unsigned run = 0;
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(excl[static_cast<std::size_t>(t)], run) << t;
    run += u[static_cast<std::size_t>(t)];
  }
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(total[static_cast<std::size_t>(t)], run) << t;
  }
}

TEST_F(emulator, block_reduce_and_scan_stand_ins_keep_cubs_contract) {
  check_collectives<256, 1>(zf_test::base_seed() + 2);
  check_collectives<32, 8>(zf_test::base_seed() + 3);
  check_collectives<96, 1>(zf_test::base_seed() + 4);
  check_collectives<1024, 1>(zf_test::base_seed() + 5);
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

template <int = 0>
ZF_KERNEL void dynamic_shared_kernel(const double* in, double* out, int n) {
  ZF_SHARED_DYNAMIC(buf, double);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    buf[i] = in[i];
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    out[i] = buf[n - 1 - i];
  }
}

TEST_F(emulator, dynamic_shared_memory_of_the_launch_size) {
  const int n = 5000; // 40000 bytes: below the 48 KiB a block gets without opting in
  std::vector<double> in(n), out(n, 0.0);
  std::iota(in.begin(), in.end(), 0.5);
  ZF_LAUNCH(1, 200, n * sizeof(double), nullptr, dynamic_shared_kernel)(in.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out[static_cast<std::size_t>(i)], in[static_cast<std::size_t>(n - 1 - i)]);
  }
}

TEST(emulator_half_intrinsics, cudas_host_conversions_give_zenflows_bits) {
  // CUDA's headers carry host versions of the half and bfloat16 intrinsics; the emulated kernels'
  // conversions are zenflow's (core/dtype.hpp). The same bits on every float class.
  std::vector<float> xs = zf_test::random_values<float>(20000, zf_test::base_seed() + 6, 100.0f);
  for (float s : {0.0f, -0.0f, 1e-45f, -1e-40f, 5.9604645e-8f, 6.1e-5f, 65504.0f, 65520.0f, 1e30f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  3.3895314e38f, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 512.0f}) {
    xs.push_back(s);
  }
  for (float x : xs) {
    ASSERT_EQ(zenflow::bit_pattern(__float2half_rn(x)),
              zenflow::bit_pattern(zenflow::from_float<zenflow::half>(x)))
        << x;
    ASSERT_EQ(zenflow::bit_pattern(__float2bfloat16_rn(x)),
              zenflow::bit_pattern(zenflow::from_float<zenflow::bfloat16>(x)))
        << x;
    const auto h = zenflow::from_float<zenflow::half>(x);
    const auto b = zenflow::from_float<zenflow::bfloat16>(x);
    ASSERT_EQ(zenflow::detail::float_bits(__half2float(h)),
              zenflow::detail::float_bits(zenflow::to_float(h)));
    ASSERT_EQ(zenflow::detail::float_bits(__bfloat162float(b)),
              zenflow::detail::float_bits(zenflow::to_float(b)));
  }
}

// ---- a user's kernel (docs/emulated-device.md) ------------------------------------------------------

// example-begin own-kernel
// Each block sums its 256 values through shared memory; thread 0 writes the block's sum.
template <int = 0>
__global__ void block_sums(const float* x, float* sums, int n) {
  ZF_SHARED(part, float[256]); // __shared__ float part[256];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  part[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      part[threadIdx.x] += part[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = part[0];
  }
}

void sum_blocks(const float* d_x, float* d_sums, int n, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  ZF_LAUNCH(blocks, 256, 0, stream, block_sums)(d_x, d_sums, n); // block_sums<<<blocks, 256, 0, stream>>>
  ZF_CUDA_TRY(zenflow::detail::launch_status());                 // cudaGetLastError()
}
// example-end own-kernel

TEST_F(emulator, a_users_kernel_runs_unchanged_with_racecheck_and_a_shuffled_order) {
  const int n = 1000;
  const auto x = zf_test::random_values<float>(n, zf_test::base_seed() + 9);
  std::vector<float> sums(4, -1.0f);
  // example-begin own-kernel-run
  zenflow::emu::scoped_options checks({zenflow::emu::thread_order::shuffled, /*seed=*/7, /*racecheck=*/true});
  sum_blocks(x.data(), sums.data(), n, nullptr); // host memory stands for device memory
  EXPECT_TRUE(zenflow::emu::reports().empty());
  // example-end own-kernel-run
  for (int b = 0; b < 4; ++b) {
    double ref = 0.0;
    for (int i = b * 256; i < std::min(n, b * 256 + 256); ++i) {
      ref += x[static_cast<std::size_t>(i)];
    }
    EXPECT_NEAR(sums[static_cast<std::size_t>(b)], ref, 1e-4);
  }
}

// ---- the detectors: each bug planted, each caught ---------------------------------------------------

template <int = 0>
ZF_KERNEL void early_exit_kernel(float* out) {
  if (threadIdx.x < 16) {
    return;
  }
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST_F(emulator, a_barrier_not_reached_by_the_whole_block_is_caught) {
  std::vector<float> out(64);
  const std::string what = launch_failure([&] {
    ZF_LAUNCH(1, 64, 0, nullptr, early_exit_kernel)
    (out.data());
  });
  EXPECT_NE(what.find("not reached by every thread"), std::string::npos) << what;
  EXPECT_NE(what.find("16 of 64 threads had exited"), std::string::npos) << what;
  EXPECT_NE(what.find("early_exit_kernel"), std::string::npos) << what;
}

template <int = 0>
ZF_KERNEL void two_barriers_kernel(float* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

TEST_F(emulator, threads_waiting_at_different_barriers_are_caught) {
  std::vector<float> out(64);
  const std::string what = launch_failure([&] {
    ZF_LAUNCH(1, 64, 0, nullptr, two_barriers_kernel)
    (out.data());
  });
  EXPECT_NE(what.find("divergent __syncthreads"), std::string::npos) << what;
}

template <int = 0>
ZF_KERNEL void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x == 3) {
    return;
  }
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
template <int = 0>
ZF_KERNEL void warp_deadlock_kernel(float* out) {
  if (threadIdx.x == 3) {
    __syncthreads();
    return;
  }
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  __syncthreads();
}
template <int = 0>
ZF_KERNEL void partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1); // 40 threads: lanes 8..31 of warp 1 do not exist
}

TEST_F(emulator, warp_operations_missing_lanes_are_caught) {
  std::vector<float> out(64);
  std::string what = launch_failure([&] {
    ZF_LAUNCH(1, 32, 0, nullptr, shuffle_after_exit_kernel)
    (out.data());
  });
  EXPECT_NE(what.find("__shfl_xor_sync"), std::string::npos) << what;
  EXPECT_NE(what.find("had exited"), std::string::npos) << what;
  what = launch_failure([&] { ZF_LAUNCH(1, 32, 0, nullptr, warp_deadlock_kernel)(out.data()); });
  EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
  what = launch_failure([&] { ZF_LAUNCH(1, 40, 0, nullptr, partial_warp_kernel)(out.data()); });
  EXPECT_NE(what.find("do not exist"), std::string::npos) << what;
}

/// Every thread writes slot t % 4 of a shared array: threads 0, 4, 8, ... race for slot 0.
template <int = 0>
ZF_KERNEL void shared_race_kernel(float* out) {
  ZF_SHARED(slots, float[4]);
  slots[threadIdx.x % 4] = static_cast<float>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    *out = slots[0] + slots[1] + slots[2] + slots[3];
  }
}
/// The same slots, one writer each: no race.
template <int = 0>
ZF_KERNEL void shared_no_race_kernel(float* out) {
  ZF_SHARED(slots, float[4]);
  if (threadIdx.x < 4) {
    slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  }
  __syncthreads();
  slots[threadIdx.x % 4] += 0.0f * static_cast<float>(threadIdx.x == 99); // reads after the barrier only
  if (threadIdx.x == 0) {
    *out = 1.0f;
  }
}

TEST_F(emulator, racecheck_catches_two_threads_writing_one_shared_address_between_barriers) {
  float out = 0.0f;
  {
    const zenflow::emu::scoped_options on({thread_order::natural, 1, /*racecheck=*/true});
    const std::string what = launch_failure([&] { ZF_LAUNCH(1, 32, 0, nullptr, shared_race_kernel)(&out); });
    EXPECT_NE(what.find("shared-memory race"), std::string::npos) << what;
    EXPECT_NE(what.find("'slots'"), std::string::npos) << what;
    zenflow::emu::clear_reports();
    ZF_LAUNCH(1, 4, 0, nullptr, shared_race_kernel)(&out); // one writer a slot
    EXPECT_EQ(out, 6.0f);
  }
  // Off (the default): the race is not looked for.
  ZF_LAUNCH(1, 32, 0, nullptr, shared_race_kernel)(&out);
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

/// The race's outcome depends on the order of the threads: the seeded orders show it.
TEST_F(emulator, a_result_that_depends_on_the_threads_order_changes_with_the_seed) {
  std::vector<float> seen;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const zenflow::emu::scoped_options o({thread_order::shuffled, seed, false});
    float out = 0.0f;
    ZF_LAUNCH(1, 64, 0, nullptr, shared_race_kernel)(&out);
    seen.push_back(out);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 1)
      << "six seeded orders gave one result: the order is not shuffled";
  // A race-free kernel gives one result whatever the order.
  std::vector<float> sums;
  const auto x = zf_test::random_values<float>(256, zf_test::base_seed() + 7);
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const zenflow::emu::scoped_options o(
        {seed == 1 ? thread_order::natural : thread_order::shuffled, seed, true});
    float sum = 0.0f;
    std::vector<unsigned> u(256, 1u), excl(256), total(256);
    ZF_LAUNCH(1, dim3(256, 1), 0, nullptr, collectives_kernel<256, 1>)
    (x.data(), &sum, u.data(), excl.data(), total.data());
    sums.push_back(sum);
  }
  for (float s : sums) {
    EXPECT_EQ(zenflow::detail::float_bits(s), zenflow::detail::float_bits(sums[0]));
  }
  EXPECT_TRUE(zenflow::emu::reports().empty());
}

template <int = 0>
ZF_KERNEL void uninitialised_shared_kernel(float* out) {
  ZF_SHARED(acc, float);
  if (threadIdx.x == 0) {
    acc += 1.0f; // never set to zero first
    *out = acc;
  }
}
template <int = 0>
ZF_KERNEL void accumulate_kernel(const float* x, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] += x[i]; // out[] must have been written before: reads memory never written otherwise
  }
}

TEST_F(emulator, reads_of_memory_never_written_read_the_poison) {
  float out = 0.0f;
  ZF_LAUNCH(1, 32, 0, nullptr, uninitialised_shared_kernel)(&out);
  EXPECT_TRUE(std::isnan(out)) << out << ": shared memory must start as garbage (0xff bytes: NaN)";
  // Device memory: the emulated device's fresh allocations (emulated_rules::poison_allocations) hold
  // 0xff bytes too, so that the kernel that forgot to clear its output shows NaN, not the right sums.
  const int n = 300;
  const auto x = zf_test::random_values<float>(n, zf_test::base_seed() + 8);
  zenflow::emulated_rules rules;
  rules.poison_allocations = true;
  zenflow::emulated_device device({}, rules);
  auto* d_out = static_cast<float*>(device.allocate(n * sizeof(float)));
  auto* d_x = static_cast<float*>(device.allocate(n * sizeof(float)));
  std::memcpy(d_x, x.data(), n * sizeof(float));
  ZF_LAUNCH((n + 127) / 128, 128, 0, nullptr, accumulate_kernel)(d_x, d_out, n);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isnan(d_out[i])) << i;
  }
  device.free(d_out);
  device.free(d_x);
}

template <int = 0>
ZF_KERNEL void trap_kernel(float* out) {
  if (threadIdx.x == 5) {
    __trap();
  }
  out[threadIdx.x] = 1.0f;
}

TEST_F(emulator, trap_fails_the_launch) {
  std::vector<float> out(32);
  const std::string what = launch_failure([&] { ZF_LAUNCH(1, 32, 0, nullptr, trap_kernel)(out.data()); });
  EXPECT_NE(what.find("__trap() by thread (5,0,0)"), std::string::npos) << what;
}

template <int = 0>
ZF_KERNEL void big_shared_kernel(float* out) {
  ZF_SHARED(a, float[8192]); // 32 KiB
  ZF_SHARED(b, float[8192]); // and 32 more: past the 48 KiB of static shared memory
  a[threadIdx.x] = 1.0f;
  b[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}
struct big_param {
  char bytes[40000];
};
template <int = 0>
ZF_KERNEL void big_param_kernel(big_param p, char* out) {
  out[threadIdx.x] = p.bytes[threadIdx.x];
}

TEST_F(emulator, launches_past_an_h100s_limits_are_refused_or_reported) {
  std::vector<unsigned> out(4096);
  const auto refused = [&](dim3 grid, dim3 block, std::size_t smem, cudaError_t want, const char* needle) {
    zenflow::emu::clear_reports();
    ZF_LAUNCH(grid, block, smem, nullptr, indices_kernel)(out.data());
    EXPECT_EQ(zenflow::detail::launch_status(), want) << needle;
    EXPECT_EQ(zenflow::detail::launch_status(), cudaSuccess)
        << "the error is taken once, as cudaGetLastError";
    const auto reports = zenflow::emu::reports();
    ASSERT_EQ(reports.size(), 1u) << needle;
    EXPECT_NE(reports[0].find(needle), std::string::npos) << reports[0];
  };
  refused(1, 1025, 0, cudaErrorInvalidConfiguration, "1025 threads per block exceed the 1024");
  refused(1, dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration, "exceeds the block dimensions");
  refused(dim3(1, 65536), 1, 0, cudaErrorInvalidConfiguration, "exceeds the grid dimensions");
  refused(0, 32, 0, cudaErrorInvalidConfiguration, "dimension is 0");
  refused(1, 32, 48 * 1024 + 1, cudaErrorInvalidValue, "dynamic shared memory");
  // Nothing ran: out[] is as it was.
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](unsigned v) { return v == 0; }));
  zenflow::emu::clear_reports();
  std::vector<char> bytes(32);
  ZF_LAUNCH(1, 32, 0, nullptr, big_param_kernel)(big_param{}, bytes.data());
  EXPECT_EQ(zenflow::detail::launch_status(), cudaErrorInvalidValue);
  ASSERT_EQ(zenflow::emu::reports().size(), 1u);
  EXPECT_NE(zenflow::emu::reports()[0].find("bytes of kernel parameters"), std::string::npos);
  // Static shared memory is known once the kernel declares it: reported, the launch fails.
  std::vector<float> f(32);
  const std::string what = launch_failure([&] { ZF_LAUNCH(1, 32, 0, nullptr, big_shared_kernel)(f.data()); });
  EXPECT_NE(what.find("static shared memory"), std::string::npos) << what;
}

TEST_F(emulator, device_functions_outside_a_kernel_throw) {
  EXPECT_THROW(__syncthreads(), zenflow::cuda_error);
  int x = 0;
  EXPECT_THROW((void)__shfl_xor_sync(0xffffffffu, x, 1), zenflow::cuda_error);
}

// ---- streams: a launch with an emulated device current is stream-ordered work of the device --------

template <int = 0>
ZF_KERNEL void add_one_kernel(int* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    x[i] += 1;
  }
}

TEST_F(emulator, with_an_emulated_device_current_a_launch_runs_in_its_streams_order) {
  zenflow::emulated_device device;
  device.make_current();
  cudaStream_t s = device.create_stream();
  std::vector<int> x(100, 5);
  device.compute(s, std::chrono::milliseconds(30)); // the stream is busy: the launch waits for it
  ZF_LAUNCH(4, 32, 0, s, add_one_kernel)(x.data(), 100);
  ZF_LAUNCH(4, 32, 0, s, add_one_kernel)(x.data(), 100);
  EXPECT_EQ(zenflow::detail::launch_status(), cudaSuccess);
  device.synchronize_stream(s);
  EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](int v) { return v == 7; }));
  // A detector's report on a stream: the device's sticky error, rethrown when it is waited for.
  std::vector<float> out(64);
  ZF_LAUNCH(1, 64, 0, s, early_exit_kernel)(out.data());
  EXPECT_THROW(device.synchronize_stream(s), zenflow::cuda_error);
  device.destroy_stream(s);
  const auto launched = zenflow::emu::launched_kernels();
  EXPECT_EQ(launched.count("add_one_kernel"), 1u);
}

} // namespace
