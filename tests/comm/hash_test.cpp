// stable_hash: the encoding is the documented one (checked against bytes written out here by
// hand), the hash is XXH3-64 of it, and values that must differ do.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <zenflow/comm/hash.hpp>

namespace {

std::vector<std::byte> le64(std::uint64_t v) {
  std::vector<std::byte> b;
  for (int i = 0; i < 8; ++i) {
    b.push_back(std::byte(static_cast<unsigned char>(v >> (8 * i))));
  }
  return b;
}

TEST(stable_hash, empty_is_xxh3_of_nothing) {
  // The published XXH3-64 of the empty input with seed 0.
  EXPECT_EQ(zenflow::stable_hash{}.value(), 0x2D06800538D394C2ull);
}

TEST(stable_hash, encoding_is_fixed_width_little_endian_with_lengths) {
  zenflow::stable_hash h;
  h.add_u64(0x0102030405060708ull).add_i64(-2).add_f64(1.5).add_string("ab");
  std::vector<std::byte> expect;
  for (auto part :
       {le64(0x0102030405060708ull), le64(0xfffffffffffffffeull), le64(0x3ff8000000000000ull), le64(2)}) {
    expect.insert(expect.end(), part.begin(), part.end());
  }
  expect.push_back(std::byte('a'));
  expect.push_back(std::byte('b'));
  ASSERT_EQ(h.encoded().size(), expect.size());
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), h.encoded().begin()));
  EXPECT_EQ(h.value(), XXH3_64bits(expect.data(), expect.size()));
}

TEST(stable_hash, different_lists_differ) {
  auto str = [](const char* a, const char* b) {
    return zenflow::stable_hash{}.add_string(a).add_string(b).value();
  };
  EXPECT_NE(str("ab", "c"), str("a", "bc"));
  const std::vector<zenflow::partition_matrix> a = {{64, 12}, {32, 12}};
  const std::vector<zenflow::partition_matrix> b = {{32, 12}, {64, 12}};
  const std::vector<zenflow::partition_matrix> c = {{64, 12}, {32, 12}, {0, 12}};
  const auto ha = zenflow::stable_hash{}.add_matrices(a).value();
  EXPECT_EQ(ha, zenflow::stable_hash{}.add_matrices(a).value());
  EXPECT_NE(ha, zenflow::stable_hash{}.add_matrices(b).value());
  EXPECT_NE(ha, zenflow::stable_hash{}.add_matrices(c).value());
  EXPECT_NE(zenflow::stable_hash{}.add_f64(0.0).value(), zenflow::stable_hash{}.add_f64(-0.0).value());
}

} // namespace
