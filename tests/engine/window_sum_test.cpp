// accumulate = device's arithmetic (detail/plan/window_sum.hpp): the CUDA kernel's body, run as the
// host loop, and the host twin the host and emulated backends run (the host accumulation's SIMD
// spans over a pool) give the same bits on every SIMD path and dtype, and both are the C library's
// fmaf of the step's coef, gradient and sum (+0 on the window's first good step); a skipped step
// leaves the sum as it is; the count advances on good steps only.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/engine/detail/plan/window_sum.hpp>

#include "../optim/simd_paths.hpp"
#include "../support/random.hpp"

namespace {

using zenflow::detail::step_record_layout;
using zenflow::detail::window_sum_args;

/// A step record's header: coef and the skip flag.
std::vector<float> record_of(float coef, std::uint32_t skip) {
  std::vector<float> r(step_record_layout::header_words, 0.0f);
  r[step_record_layout::coef_word] = coef;
  std::memcpy(&r[step_record_layout::skip_word], &skip, 4);
  return r;
}

template <class T>
void check_dtype(std::uint64_t seed) {
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::int64_t n = 70001; // SIMD widths, a tail and several pool chunks
  std::vector<T> g(static_cast<std::size_t>(n));
  std::vector<float> start(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    g[static_cast<std::size_t>(i)] =
        zenflow::from_float<T>(nd(gen) * std::exp2(static_cast<float>(i % 9) - 4));
    start[static_cast<std::size_t>(i)] = nd(gen) * 3.0f;
  }
  zenflow::worker_pool pool(3);
  const float coef = 0.3712f;
  for (const std::uint32_t steps : {0u, 5u}) {
    for (const std::uint32_t skip : {0u, 1u}) {
      const auto rec = record_of(coef, skip);
      std::vector<float> body = start;
      const window_sum_args a{body.data(), g.data(), n, rec.data(), &steps};
      zenflow::detail::host_window_sum<T>(a);
      std::vector<float> want(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        want[k] =
            skip != 0 ? start[k] : std::fmaf(coef, zenflow::to_float(g[k]), steps == 0 ? 0.0f : start[k]);
        ASSERT_EQ(std::memcmp(&body[k], &want[k], 4), 0)
            << "body, element " << i << " steps " << steps << " skip " << skip;
      }
      for (const auto path : zf_optim_test::supported_paths()) {
        const zf_optim_test::path_guard guard(path);
        for (zenflow::worker_pool* on : {static_cast<zenflow::worker_pool*>(nullptr), &pool}) {
          std::vector<float> twin = start;
          const window_sum_args b{twin.data(), g.data(), n, rec.data(), &steps};
          ASSERT_EQ(zenflow::detail::host_primitives::add_window_sum(b, zenflow::dtype_of<T>(), on),
                    cudaSuccess);
          EXPECT_EQ(std::memcmp(twin.data(), want.data(), want.size() * 4), 0)
              << "twin, path " << static_cast<int>(path) << " steps " << steps << " skip " << skip;
        }
      }
      std::uint32_t count = steps;
      zenflow::detail::window_sum_count(rec.data(), &count);
      EXPECT_EQ(count, steps + (skip != 0 ? 0u : 1u));
    }
  }
}

TEST(window_sum, body_and_host_twin_are_fmaf_on_every_path_and_dtype) {
  check_dtype<float>(zf_test::base_seed() + 70);
  check_dtype<zenflow::bfloat16>(zf_test::base_seed() + 71);
  check_dtype<zenflow::half>(zf_test::base_seed() + 72);
}

} // namespace
