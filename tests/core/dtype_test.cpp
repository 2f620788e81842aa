#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>

#include "support/random.hpp"

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Independent decoders written from the IEEE definitions with ldexp, not bit tricks.
double decode_half(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 31) {
    return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  return e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
}
double decode_bf16(std::uint16_t b) {
  const int sign = (b >> 15) ? -1 : 1;
  const int e = (b >> 7) & 0xff;
  const int m = b & 0x7f;
  if (e == 255) {
    return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  return e == 0 ? sign * std::ldexp(m, -133) : sign * std::ldexp(128 + m, e - 134);
}

// Brute-force round-to-nearest-even: the nearest of all finite codes (ties to the even code),
// with overflow decided by the IEEE rule (|x| >= max + half an ulp rounds to infinity).
struct brute_rounder {
  std::vector<std::pair<double, std::uint16_t>> table; // positive finite codes, ascending
  double overflow_at;
  explicit brute_rounder(double (*decode)(std::uint16_t), int mant_bits) {
    for (std::uint32_t c = 0; c < 0x8000; ++c) {
      const double v = decode(static_cast<std::uint16_t>(c));
      if (std::isfinite(v)) {
        table.emplace_back(v, static_cast<std::uint16_t>(c));
      }
    }
    std::sort(table.begin(), table.end());
    const double max = table.back().first;
    // max = (1 - 2^-(m+1)) 2^exp in frexp terms; half an ulp of it is 2^(exp - m - 2).
    int exp = 0;
    std::frexp(max, &exp);
    overflow_at = max + std::ldexp(1.0, exp - 1 - mant_bits - 1);
  }
  std::uint16_t round(float x, std::uint16_t inf_code) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (std::isinf(a) || a >= overflow_at) {
      return sign | inf_code;
    }
    auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, std::uint16_t{0}));
    if (it == table.end()) {
      return sign | table.back().second;
    }
    if (it->first == a || it == table.begin()) {
      return sign | it->second;
    }
    auto lo = std::prev(it);
    const double dlo = a - lo->first, dhi = it->first - a;
    if (dlo < dhi) {
      return sign | lo->second;
    }
    if (dhi < dlo) {
      return sign | it->second;
    }
    return sign | ((lo->second & 1) == 0 ? lo->second : it->second);
  }
};

std::vector<float> conversion_inputs() {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           65536.0f,
                           1e-8f,
                           5.9604645e-8f,
                           2.9802322e-8f,
                           6.1035156e-5f,
                           3.0517578e-5f,
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           3.3895314e38f,
                           3.39e38f};
  // Exact ties and their neighbours around every binade of both formats.
  for (int e = -30; e <= 20; ++e) {
    for (std::uint32_t tail : {0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x8000u, 0x7fffu, 0x8001u, 0x18000u}) {
      const std::uint32_t base = to_bits(std::ldexp(1.0f, e));
      xs.push_back(from_bits(base | tail));
      xs.push_back(from_bits(base | 0x400000u | tail));
    }
  }
  std::mt19937_64 gen(zf_test::base_seed());
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(bits(gen));
    if (!std::isnan(f)) {
      xs.push_back(f);
    }
  }
  return xs;
}

TEST(dtype, half_round_to_nearest_even_is_bit_exact) {
  SCOPED_TRACE(zf_test::seed_note(zf_test::base_seed()));
  const brute_rounder ref(decode_half, 10);
  for (float x : conversion_inputs()) {
    const std::uint16_t got =
        static_cast<std::uint16_t>(zenflow::bit_pattern(zenflow::from_float<zenflow::half>(x)));
    ASSERT_EQ(got, ref.round(x, 0x7c00)) << "x = " << x << " bits 0x" << std::hex << to_bits(x);
  }
}

TEST(dtype, bf16_round_to_nearest_even_is_bit_exact) {
  SCOPED_TRACE(zf_test::seed_note(zf_test::base_seed()));
  const brute_rounder ref(decode_bf16, 7);
  for (float x : conversion_inputs()) {
    const std::uint16_t got =
        static_cast<std::uint16_t>(zenflow::bit_pattern(zenflow::from_float<zenflow::bfloat16>(x)));
    ASSERT_EQ(got, ref.round(x, 0x7f80)) << "x = " << x << " bits 0x" << std::hex << to_bits(x);
  }
}

TEST(dtype, widening_is_exact_for_every_code) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    const double h = decode_half(code), b = decode_bf16(code);
    const float hf = zenflow::to_float(zenflow::detail::from_raw_bits<zenflow::half>(code));
    const float bf = zenflow::to_float(zenflow::detail::from_raw_bits<zenflow::bfloat16>(code));
    if (std::isnan(h)) {
      ASSERT_TRUE(std::isnan(hf)) << c;
    } else {
      ASSERT_EQ(static_cast<double>(hf), h) << c;
      // Round trip: every half code survives float and back.
      ASSERT_EQ(zenflow::bit_pattern(zenflow::from_float<zenflow::half>(hf)), c);
    }
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(bf)) << c;
      ASSERT_TRUE(std::isnan(zenflow::to_float(zenflow::from_float<zenflow::bfloat16>(bf))));
    } else {
      ASSERT_EQ(static_cast<double>(bf), b) << c;
      ASSERT_EQ(zenflow::bit_pattern(zenflow::from_float<zenflow::bfloat16>(bf)), c);
    }
  }
}

TEST(dtype, nan_stays_nan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = from_bits(0x7f800001u); // signalling NaN whose top mantissa bits are zero
  for (float x : {nan, -nan, snan}) {
    EXPECT_TRUE(std::isnan(zenflow::to_float(zenflow::from_float<zenflow::half>(x))));
    EXPECT_TRUE(std::isnan(zenflow::to_float(zenflow::from_float<zenflow::bfloat16>(x))));
  }
  EXPECT_FALSE(zenflow::is_finite(nan));
  EXPECT_FALSE(zenflow::is_finite(std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(zenflow::is_finite(std::numeric_limits<float>::denorm_min()));
}

TEST(dtype, tags) {
  EXPECT_EQ(zenflow::dtype_of<float>(), zenflow::dtype::f32);
  EXPECT_EQ(zenflow::dtype_of<zenflow::half>(), zenflow::dtype::f16);
  EXPECT_EQ(zenflow::dtype_of<zenflow::bfloat16>(), zenflow::dtype::bf16);
  EXPECT_EQ(zenflow::dtype_size(zenflow::dtype::bf16), 2u);
  EXPECT_EQ(zenflow::dtype_size(zenflow::dtype::f32), 4u);
  EXPECT_EQ(zenflow::dtype_name(zenflow::dtype::f16), "f16");
}

} // namespace
