#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/views.hpp>

namespace {

TEST(views, contiguous_and_strided_offsets_address_the_same_logical_element) {
  // A 3 x 5 logical channel matrix stored both ways, with padding (ld larger than needed).
  const long channels = 3, len = 5;
  std::vector<int> contig(channels * 7, -1), strided(len * 4, -1);
  zenflow::channel_matrix<int> a{contig.data(), channels, len, 7, zenflow::channel_layout::contiguous};
  zenflow::channel_matrix<int> b{strided.data(), channels, len, 4, zenflow::channel_layout::strided};
  for (long c = 0; c < channels; ++c) {
    for (long i = 0; i < len; ++i) {
      a(c, i) = static_cast<int>(100 * c + i);
      b(c, i) = static_cast<int>(100 * c + i);
    }
  }
  EXPECT_EQ(contig[1 * 7 + 2], 102);  // channel 1 starts at 1 * ld
  EXPECT_EQ(strided[2 * 4 + 1], 102); // channel 1 is column 1, element 2 is row 2
  EXPECT_EQ(contig[5], -1);           // padding untouched
  EXPECT_EQ(strided[3], -1);
  EXPECT_EQ(a.elements(), 15);
  const auto m = zenflow::make_channel_matrix(contig.data(), 2, 7);
  EXPECT_EQ(m.ld, 7);
  EXPECT_EQ(m.offset(1, 3), 10);
}

} // namespace
