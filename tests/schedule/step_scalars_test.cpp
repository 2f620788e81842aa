// The schedule layer's step scalars on the host (schedule/step_scalars.hpp): the fp64 squared
// norms against a long-double sum of every element's square (overflowed and NaN channels
// included), the rescans against the same per channel, the header against float64 arithmetic
// written out here; thread counts that change nothing; and every bad argument named with nothing
// written.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/schedule/step_scalars.hpp>
#include <zenflow/select/channel_norms.hpp>

#include "../support/random.hpp"
#include "rejects.hpp"

namespace {

using zf_schedule_test::expect_rejected;

using zenflow::channel_layout;
using zenflow::dtype;

/// A gradient with its fp32 scores (channel_norms' squared L2, as a loop computes them before the
/// totals), some channels overflowing fp32 (finite elements whose squares do not fit), and the
/// exact squared norm of each channel in long double.
template <class T>
struct scored_grad {
  std::int64_t channels = 0, len = 0, ld = 0;
  channel_layout layout = channel_layout::contiguous;
  std::vector<T> grad;
  std::vector<float> scores;
  std::vector<long double> exact; // per channel
  std::uint32_t flag = 0;

  scored_grad(std::int64_t c, std::int64_t l, channel_layout lay, std::uint64_t seed, bool huge, bool nan)
      : channels(c), len(l), ld(lay == channel_layout::contiguous ? l + 3 : c + 2), layout(lay) {
    const std::int64_t outer = layout == channel_layout::contiguous ? channels : len;
    grad = zf_test::random_values<T>(static_cast<std::size_t>(outer * ld), seed, 3.0f);
    const zenflow::channel_matrix<T> g{grad.data(), channels, len, ld, layout};
    if (huge) { // fp16's range tops at 65504: its squares cannot overflow fp32, only bf16's and fp32's
      for (std::int64_t c0 = 1; c0 < channels; c0 += 7) {
        for (std::int64_t i = 0; i < len; ++i) {
          g(c0, i) = zenflow::from_float<T>(i % 2 == 0 ? 3e19f : -2.5e19f);
        }
      }
    }
    if (nan && channels > 2 && len > 1) {
      g(2, len - 1) = zenflow::from_float<T>(std::numeric_limits<float>::quiet_NaN());
    }
    scores.assign(static_cast<std::size_t>(channels), -1.0f);
    std::size_t bytes = 0;
    ZF_CUDA_TRY(zenflow::host::channel_norms(nullptr, bytes, grad.data(), channels, len, ld, layout,
                                             scores.data(), {nullptr, &flag}));
    std::vector<std::byte> temp(bytes);
    ZF_CUDA_TRY(zenflow::host::channel_norms(temp.data(), bytes, grad.data(), channels, len, ld, layout,
                                             scores.data(), {nullptr, &flag}));
    for (std::int64_t c0 = 0; c0 < channels; ++c0) {
      long double s = 0.0L;
      for (std::int64_t i = 0; i < len; ++i) {
        const long double x = zenflow::to_float(g(c0, i));
        s += x * x;
      }
      exact.push_back(s);
    }
  }
  [[nodiscard]] zenflow::sq_total_item item(const double* rescan = nullptr) const {
    return {grad.data(), scores.data(), channels, len, ld, layout, zenflow::dtype_of<T>(), rescan};
  }
  [[nodiscard]] long double total() const {
    long double s = 0.0L;
    for (const long double e : exact) {
      s += e;
    }
    return s;
  }
};

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

template <class T>
void check_totals(std::uint64_t seed) {
  SCOPED_TRACE(zf_test::seed_note(seed));
  const bool can_overflow = !std::is_same_v<T, zenflow::half>;
  std::vector<scored_grad<T>> grads;
  grads.emplace_back(700, 33, channel_layout::contiguous, seed + 1, can_overflow, false);
  grads.emplace_back(300, 9, channel_layout::strided, seed + 2, can_overflow, false);
  grads.emplace_back(1, 5, channel_layout::contiguous, seed + 3, false, false); // a vector
  grads.emplace_back(257, 17, channel_layout::contiguous, seed + 4, false, false);
  grads.emplace_back(40, 13, channel_layout::strided, seed + 5, false, true); // a NaN
  std::vector<zenflow::sq_total_item> items;
  for (const auto& g : grads) {
    items.push_back(g.item());
  }
  std::vector<double> totals(items.size(), -1.0);
  ASSERT_EQ(
      zenflow::host::sq_norm_totals(items.data(), static_cast<std::int64_t>(items.size()), totals.data()),
      cudaSuccess);
  for (std::size_t i = 0; i + 1 < grads.size(); ++i) {
    const long double want = grads[i].total();
    EXPECT_TRUE(std::isfinite(totals[i])) << i;
    // Finite scores are fp32 sums (rounded at each add); the rest is exact fp64.
    EXPECT_NEAR(static_cast<long double>(totals[i]), want, want * 1e-5L) << "tensor " << i;
  }
  EXPECT_TRUE(std::isnan(totals.back())) << "a NaN element makes its tensor's norm NaN";
  EXPECT_EQ(grads.back().flag, 1u);
  if (can_overflow) { // the overflowed channels were the rescan's: their scores were +Inf
    EXPECT_TRUE(std::isinf(grads[0].scores[1]));
    EXPECT_GT(totals[0], 1e38);
  }
  // Any thread count: the same bits.
  zenflow::worker_pool pool(3);
  std::vector<double> again(items.size(), -1.0);
  ASSERT_EQ(zenflow::host::sq_norm_totals(items.data(), static_cast<std::int64_t>(items.size()), again.data(),
                                          &pool),
            cudaSuccess);
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(bits(again[i]), bits(totals[i])) << i;
  }

  // The rescans (owners' ranges of channels, as data parallel computes them): the fp64 squared
  // norms of the non-finite channels, 0 for the others, untouched outside the ranges; and the
  // totals from them, without reading the gradients, the same bits.
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const auto& g = grads[i];
    std::vector<double> out(static_cast<std::size_t>(g.channels), -7.0);
    const std::int64_t half = g.channels / 2;
    const zenflow::sq_rescan_item parts[] = {{g.item(), 0, half, out.data()},
                                             {g.item(), half, g.channels - half, out.data()}};
    ASSERT_EQ(zenflow::host::sq_norm_rescan(parts, 2, g.channels - half, &pool), cudaSuccess);
    for (std::int64_t c = 0; c < g.channels; ++c) {
      const double o = out[static_cast<std::size_t>(c)];
      if (std::isfinite(g.scores[static_cast<std::size_t>(c)])) {
        EXPECT_EQ(o, 0.0) << i << " channel " << c;
      } else if (std::isnan(static_cast<double>(g.exact[static_cast<std::size_t>(c)]))) {
        EXPECT_TRUE(std::isnan(o)) << i << " channel " << c;
      } else {
        const long double want = g.exact[static_cast<std::size_t>(c)];
        EXPECT_NEAR(static_cast<long double>(o), want, want * 1e-14L) << i << " channel " << c;
      }
    }
    std::vector<double> one_only(static_cast<std::size_t>(g.channels), -7.0);
    const zenflow::sq_rescan_item first_half{g.item(), 0, half, one_only.data()};
    ASSERT_EQ(zenflow::host::sq_norm_rescan(&first_half, 1, half), cudaSuccess);
    for (std::int64_t c = half; c < g.channels; ++c) {
      EXPECT_EQ(one_only[static_cast<std::size_t>(c)], -7.0) << "written outside its range";
    }
    zenflow::sq_total_item from_rescan = g.item(out.data());
    from_rescan.grad = nullptr; // not read
    double t = -1.0;
    ASSERT_EQ(zenflow::host::sq_norm_totals(&from_rescan, 1, &t), cudaSuccess);
    EXPECT_EQ(bits(t), bits(totals[i])) << i;
  }
}

TEST(sq_norm_totals, fp64_norms_match_a_long_double_sum_of_squares_f32) {
  check_totals<float>(zf_test::base_seed() + 10);
}
TEST(sq_norm_totals, fp64_norms_match_a_long_double_sum_of_squares_f16) {
  check_totals<zenflow::half>(zf_test::base_seed() + 11);
}
TEST(sq_norm_totals, fp64_norms_match_a_long_double_sum_of_squares_bf16) {
  check_totals<zenflow::bfloat16>(zf_test::base_seed() + 12);
}

/// float64 arithmetic written from the header's documentation.
struct ref_header {
  float coef;
  std::uint32_t skip;
  double sum;
};
ref_header reference_header(const std::vector<double>& totals,
                            const std::vector<std::uint32_t>& flags,
                            float loss_scale,
                            float max_norm) {
  ref_header r{};
  r.sum = 0.0;
  for (const double t : totals) {
    r.sum += t; // index order, as documented
  }
  r.skip = 0;
  for (const std::uint32_t f : flags) {
    r.skip = f != 0 ? 1u : r.skip;
  }
  const double inv = 1.0 / static_cast<double>(loss_scale);
  double c = inv;
  if (max_norm > 0.0f && r.skip == 0) {
    const double norm = std::sqrt(r.sum) * inv;
    c = inv * std::min(1.0, static_cast<double>(max_norm) / (norm + 1e-6));
  }
  r.coef = static_cast<float>(c);
  return r;
}

TEST(compute_step_header, coef_skip_and_norm_match_float64_arithmetic) {
  std::mt19937_64 gen(zf_test::base_seed() + 20);
  std::uniform_real_distribution<double> mant(0.5, 2.0);
  std::uniform_int_distribution<int> expo(-60, 250);
  std::uniform_int_distribution<int> count(0, 9);
  int clipped = 0, unclipped = 0, bad = 0, near_one = 0;
  for (int rep = 0; rep < 400; ++rep) {
    std::vector<double> totals(static_cast<std::size_t>(count(gen)));
    for (double& t : totals) {
      t = std::ldexp(mant(gen), expo(gen));
    }
    std::vector<std::uint32_t> flags(static_cast<std::size_t>(count(gen)), 0);
    if (!flags.empty() && rep % 5 == 0) {
      flags[static_cast<std::size_t>(rep) % flags.size()] = 1;
    }
    const float loss_scale = rep % 3 == 0 ? 1.0f : std::ldexp(1.0f, rep % 17);
    double sum = 0.0;
    for (const double t : totals) {
      sum += t;
    }
    // Off, far from the norm either way, or close to it (clip factors around 1: the threshold).
    std::uniform_real_distribution<double> near(0.4, 1.6);
    const float max_norm = rep % 4 == 0   ? 0.0f
                           : rep % 4 == 1 ? static_cast<float>(std::sqrt(sum) / loss_scale * near(gen))
                                          : static_cast<float>(std::ldexp(mant(gen), rep % 40 - 5));
    std::vector<float> record(4 + 6, -3.0f); // a header, then 6 masses to zero
    auto* header = reinterpret_cast<zenflow::step_header*>(record.data());
    ASSERT_EQ(zenflow::host::compute_step_header(totals.data(), static_cast<std::int64_t>(totals.size()),
                                                 flags.data(), static_cast<std::int64_t>(flags.size()),
                                                 loss_scale, max_norm, header, record.data() + 4, 6),
              cudaSuccess);
    const ref_header want = reference_header(totals, flags, loss_scale, max_norm);
    SCOPED_TRACE("rep " + std::to_string(rep));
    EXPECT_EQ(header->skip, want.skip);
    EXPECT_EQ(bits(header->squared_norm()), bits(want.sum));
    // The library's coef is fp64 with correct rounding throughout, then narrowed once: the
    // reference may differ by the rounding of its own fp64 steps, far below a float ulp.
    EXPECT_NEAR(header->coef, want.coef, std::fabs(want.coef) * 1e-6f + 1e-44f);
    for (int i = 4; i < 10; ++i) {
      EXPECT_EQ(record[static_cast<std::size_t>(i)], 0.0f);
    }
    bad += want.skip != 0 ? 1 : 0;
    clipped += want.skip == 0 && max_norm > 0.0f && want.coef < 1.0f / loss_scale ? 1 : 0;
    unclipped += want.skip == 0 && want.coef == 1.0f / loss_scale ? 1 : 0;
    near_one += want.skip == 0 && max_norm > 0.0f && want.coef * loss_scale > 0.6f ? 1 : 0;
  }
  EXPECT_GT(clipped, 20);
  EXPECT_GT(unclipped, 20);
  EXPECT_GT(bad, 20);
  EXPECT_GT(near_one, 20); // clip factors between 0.6 and 1, and not clipped where the norm is below
}

/// step_scale_io: the scale read from memory equals the same scale as the argument, bit for bit; a
/// scale that is not finite and > 0, or a found-inf set, skips the step (the header as with a
/// NaN flag and a scale of 1); found-inf is written back 1 when the step is skipped, 0 when not.
TEST(compute_step_header, scale_and_found_inf_in_memory_match_the_arguments) {
  std::mt19937_64 gen(zf_test::base_seed() + 21);
  std::uniform_real_distribution<double> mant(0.5, 2.0);
  std::uniform_int_distribution<int> expo(-20, 60);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  int skipped = 0;
  for (int rep = 0; rep < 120; ++rep) {
    std::vector<double> totals(4);
    for (double& t : totals) {
      t = std::ldexp(mant(gen), expo(gen));
    }
    const std::vector<std::uint32_t> flags(3, rep % 11 == 0 ? 1u : 0u);
    const float max_norm = rep % 2 == 0 ? 0.0f : static_cast<float>(std::ldexp(mant(gen), rep % 30 - 5));
    const float scales[] = {std::ldexp(1.0f, rep % 20), nan, inf, -2.0f, 0.0f};
    const float scale = scales[rep % 7 < 3 ? 0 : rep % 5];
    const float found_in = rep % 4 == 3 ? 1.0f : 0.0f;
    float found = found_in;
    zenflow::step_header got{};
    ASSERT_EQ(zenflow::host::compute_step_header(totals.data(), 4, flags.data(), 3, 1.0f, max_norm, &got,
                                                 nullptr, 0, nullptr, zenflow::step_scale_io{&scale, &found}),
              cudaSuccess);
    const bool bad_scale = !(std::isfinite(scale) && scale > 0.0f);
    std::vector<std::uint32_t> want_flags = flags;
    want_flags.push_back(bad_scale || found_in != 0.0f ? 1u : 0u);
    zenflow::step_header want{};
    ASSERT_EQ(zenflow::host::compute_step_header(totals.data(), 4, want_flags.data(), 4,
                                                 bad_scale ? 1.0f : scale, max_norm, &want),
              cudaSuccess);
    SCOPED_TRACE("rep " + std::to_string(rep));
    EXPECT_EQ(got.skip, want.skip);
    EXPECT_EQ(bits(got.coef), bits(want.coef));
    EXPECT_EQ(bits(got.squared_norm()), bits(want.squared_norm()));
    EXPECT_EQ(found, want.skip != 0 ? 1.0f : 0.0f);
    skipped += want.skip != 0 ? 1 : 0;
  }
  EXPECT_GT(skipped, 30);
  EXPECT_LT(skipped, 90);
}

// ---- bad arguments: named, nothing written -------------------------------------------------------

TEST(step_scalars_args, sq_norm_totals_names_the_bad_argument_and_writes_nothing) {
  std::vector<float> g(64, 1.0f), scores(8, 4.0f);
  const zenflow::sq_total_item good{g.data(), scores.data(), 8, 8, 8, channel_layout::contiguous, dtype::f32};
  struct bad_case {
    const char* arg;
    void (*spoil)(zenflow::sq_total_item&);
  };
  const bad_case cases[] = {
      {"items[1].channels", [](zenflow::sq_total_item& i) { i.channels = -1; }},
      {"items[1].channel_len", [](zenflow::sq_total_item& i) { i.channel_len = -1; }},
      {"items[1].ld", [](zenflow::sq_total_item& i) { i.ld = 7; }},
      {"items[1].ld",
       [](zenflow::sq_total_item& i) {
         i.layout = channel_layout::strided;
         i.ld = 7;
       }},
      {"items[1].layout", [](zenflow::sq_total_item& i) { i.layout = static_cast<channel_layout>(7); }},
      {"items[1].type", [](zenflow::sq_total_item& i) { i.type = static_cast<dtype>(9); }},
      {"items[1].scores", [](zenflow::sq_total_item& i) { i.scores = nullptr; }},
      {"items[1].grad", [](zenflow::sq_total_item& i) { i.grad = nullptr; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arg);
    zenflow::sq_total_item items[2] = {good, good};
    c.spoil(items[1]);
    double totals[2] = {-1.0, -1.0};
    expect_rejected(zenflow::host::sq_norm_totals(items, 2, totals), "zenflow::host::sq_norm_totals", c.arg);
    EXPECT_EQ(totals[0], -1.0) << "item 0 was computed although item 1 is invalid";
    EXPECT_EQ(totals[1], -1.0);
  }
  double t = -1.0;
  expect_rejected(zenflow::host::sq_norm_totals(&good, -1, &t), "zenflow::host::sq_norm_totals", "count");
  expect_rejected(zenflow::host::sq_norm_totals(nullptr, 1, &t), "zenflow::host::sq_norm_totals", "items");
  expect_rejected(zenflow::host::sq_norm_totals(&good, 1, nullptr), "zenflow::host::sq_norm_totals",
                  "totals");
  EXPECT_EQ(t, -1.0);
  // A null gradient is fine where the rescans are given (the gradient is not read).
  std::vector<double> rescans(8, 0.0);
  zenflow::sq_total_item from_rescans = good;
  from_rescans.grad = nullptr;
  from_rescans.rescan = rescans.data();
  EXPECT_EQ(zenflow::host::sq_norm_totals(&from_rescans, 1, &t), cudaSuccess);
  EXPECT_EQ(t, 8 * 4.0);
  EXPECT_EQ(zenflow::host::sq_norm_totals(nullptr, 0, nullptr), cudaSuccess);
}

TEST(step_scalars_args, sq_norm_rescan_names_the_bad_argument_and_writes_nothing) {
  std::vector<float> g(64, 1.0f), scores(8, INFINITY);
  const zenflow::sq_total_item src{g.data(), scores.data(), 8, 8, 8, channel_layout::contiguous, dtype::f32};
  std::vector<double> out(8, -1.0);
  const zenflow::sq_rescan_item good{src, 0, 8, out.data()};
  const char* fn = "zenflow::host::sq_norm_rescan";
  struct bad_case {
    const char* arg;
    void (*spoil)(zenflow::sq_rescan_item&);
  };
  const bad_case cases[] = {
      {"items[1].src.channels", [](zenflow::sq_rescan_item& i) { i.src.channels = -2; }},
      {"items[1].src.ld", [](zenflow::sq_rescan_item& i) { i.src.ld = 3; }},
      {"items[1].src.scores", [](zenflow::sq_rescan_item& i) { i.src.scores = nullptr; }},
      {"items[1].src.grad", [](zenflow::sq_rescan_item& i) { i.src.grad = nullptr; }},
      {"items[1].count", [](zenflow::sq_rescan_item& i) { i.count = 9; }},
      {"items[1].count", [](zenflow::sq_rescan_item& i) { i.first = -1; }},
      {"items[1].count", [](zenflow::sq_rescan_item& i) { i.first = 5; }},
      {"items[1].out", [](zenflow::sq_rescan_item& i) { i.out = nullptr; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arg);
    zenflow::sq_rescan_item items[2] = {good, good};
    c.spoil(items[1]);
    expect_rejected(zenflow::host::sq_norm_rescan(items, 2, 9), fn, c.arg);
    for (const double o : out) {
      EXPECT_EQ(o, -1.0);
    }
  }
  expect_rejected(zenflow::host::sq_norm_rescan(&good, 1, 7), fn, "max_count");
  expect_rejected(zenflow::host::sq_norm_rescan(&good, 1, -1), fn, "max_count");
  expect_rejected(zenflow::host::sq_norm_rescan(&good, -1, 8), fn, "count");
  expect_rejected(zenflow::host::sq_norm_rescan(nullptr, 1, 8), fn, "items");
  for (const double o : out) {
    EXPECT_EQ(o, -1.0);
  }
  ASSERT_EQ(zenflow::host::sq_norm_rescan(&good, 1, 8), cudaSuccess);
  EXPECT_EQ(out[3], 8.0); // 8 ones squared
}

TEST(step_scalars_args, compute_step_header_names_the_bad_argument_and_writes_nothing) {
  const std::vector<double> totals = {1.0, 2.0};
  const std::vector<std::uint32_t> flags = {0, 0};
  const char* fn = "zenflow::host::compute_step_header";
  std::vector<float> record(8, -3.0f);
  auto* h = reinterpret_cast<zenflow::step_header*>(record.data());
  const auto untouched = [&] {
    for (const float r : record) {
      EXPECT_EQ(r, -3.0f);
    }
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(zenflow::host::compute_step_header(totals.data(), -1, flags.data(), 2, 1.0f, 0.0f, h), fn,
                  "tensors");
  expect_rejected(zenflow::host::compute_step_header(nullptr, 2, flags.data(), 2, 1.0f, 0.0f, h), fn,
                  "totals");
  expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), -2, 1.0f, 0.0f, h), fn,
                  "flag_count");
  expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, nullptr, 2, 1.0f, 0.0f, h), fn,
                  "flags");
  for (const float ls : {0.0f, -1.0f, inf, nan}) {
    expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, ls, 0.0f, h), fn,
                    "loss_scale");
  }
  for (const float mn : {-1.0f, inf, nan}) {
    expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, 1.0f, mn, h), fn,
                    "max_norm");
  }
  expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, 1.0f, 0.0f, nullptr),
                  fn, "header");
  expect_rejected(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, 1.0f, 0.0f, h,
                                                     record.data() + 4, -1),
                  fn, "zero_count");
  expect_rejected(
      zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, 1.0f, 0.0f, h, nullptr, 4), fn,
      "zero");
  untouched();
  ASSERT_EQ(zenflow::host::compute_step_header(totals.data(), 2, flags.data(), 2, 2.0f, 0.0f, h,
                                               record.data() + 4, 2),
            cudaSuccess);
  EXPECT_EQ(h->coef, 0.5f);
  EXPECT_EQ(h->skip, 0u);
  EXPECT_EQ(h->squared_norm(), 3.0);
  EXPECT_EQ(record[5], 0.0f);
  EXPECT_EQ(record[6], -3.0f); // past zero_count
  const zenflow::step_scalars s = zenflow::scalars_of(h);
  EXPECT_EQ(s.grad_scale, &h->coef);
  EXPECT_EQ(s.skip, &h->skip);
}

} // namespace
