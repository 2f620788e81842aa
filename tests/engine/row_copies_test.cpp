// The batched row copies of the data-parallel reduction (detail/plan/row_copies.hpp): one table of
// matrices of every working type and layout, rows in random order, gathered into packed fp32 and
// scattered back (rounded to the working type, or zeros), against a brute-force loop that
// indexes the matrices itself and rounds with frexp/nearbyint, with the calling thread and over
// a worker pool (the same bits). The CUDA kernel's check against this host loop is in
// engine_gpu_test.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>

#include "../support/random.hpp"

namespace {

using zenflow::channel_layout;
using zenflow::dtype;
using zenflow::detail::host_primitives;
using zenflow::detail::row_copy_direction;
using zenflow::detail::row_copy_item;

/// One matrix of the table: its storage as raw bytes and its shape.
struct matrix {
  dtype type;
  channel_layout layout;
  std::int64_t channels, len, ld;
  std::vector<unsigned char> bytes;

  [[nodiscard]] std::size_t elem() const { return zenflow::dtype_size(type); }
  [[nodiscard]] std::int64_t at(std::int64_t c, std::int64_t i) const { // element offset, by hand
    return layout == channel_layout::contiguous ? c * ld + i : i * ld + c;
  }
  [[nodiscard]] float value(std::int64_t c, std::int64_t i) const { return value_at(at(c, i)); }
  [[nodiscard]] float value_at(std::int64_t off) const {
    const unsigned char* p = bytes.data() + off * static_cast<std::int64_t>(elem());
    if (type == dtype::f32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    if (type == dtype::bf16) { // the upper half of a float
      const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    const int e = (h >> 10) & 0x1f; // IEEE binary16, normal numbers and zero (what the test makes)
    const float mag = e == 0 ? std::ldexp(static_cast<float>(h & 0x3ff), -24)
                             : std::ldexp(static_cast<float>(1024 + (h & 0x3ff)), e - 25);
    return (h & 0x8000) != 0 ? -mag : mag;
  }
};

matrix
make_matrix(dtype type, channel_layout layout, std::int64_t channels, std::int64_t len, std::uint64_t seed) {
  const std::int64_t ld = layout == channel_layout::contiguous ? len + 3 : channels + 7;
  matrix m{type, layout, channels, len, ld, {}};
  const std::int64_t n = layout == channel_layout::contiguous ? channels * ld : len * ld;
  m.bytes.resize(static_cast<std::size_t>(n) * m.elem());
  std::mt19937_64 rng(seed);
  for (std::int64_t k = 0; k < n; ++k) { // every element, padding included: normal in every type
    const float v = std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng),
                               std::uniform_int_distribution<int>(-10, 10)(rng)) *
                    ((rng() & 1u) != 0 ? -1.0f : 1.0f);
    unsigned char* p = m.bytes.data() + k * static_cast<std::int64_t>(m.elem());
    if (type == dtype::f32) {
      std::memcpy(p, &v, 4);
    } else if (type == dtype::bf16) {
      const auto h = zenflow::from_float<zenflow::bfloat16>(v);
      std::memcpy(p, &h, 2);
    } else {
      const auto h = zenflow::from_float<zenflow::half>(v);
      std::memcpy(p, &h, 2);
    }
  }
  return m;
}

/// `x` rounded to nearest even with `digits` significant bits (no overflow or subnormals here).
float round_to(float x, int digits) {
  int e = 0;
  const double f = std::frexp(static_cast<double>(x), &e); // x = f 2^e, |f| in [0.5, 1)
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(f, digits)), e - digits));
}
int digits_of(dtype t) {
  return t == dtype::f32 ? 24 : t == dtype::bf16 ? 8 : 11;
}

struct table {
  std::vector<matrix> mats;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<std::vector<float>> packed;
  std::vector<row_copy_item> items;
};

/// Three matrices (one per working type; strided ones with counts past a 32-row tile and
/// lengths off the tile), a random subset of each one's rows in random order, and an empty item.
table make_table(channel_layout layout, std::uint64_t seed) {
  table t;
  std::mt19937_64 rng(seed);
  const dtype types[] = {dtype::bf16, dtype::f16, dtype::f32};
  const std::int64_t shapes[][2] = {{150, 45}, {77, 70}, {40, 33}};
  for (int k = 0; k < 3; ++k) {
    t.mats.push_back(make_matrix(types[k], layout, shapes[k][0], shapes[k][1], seed + 10 + k));
    std::vector<std::int32_t> all(static_cast<std::size_t>(shapes[k][0]));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(all.size() * 2 / 3 + static_cast<std::size_t>(k)); // 2/3 of the rows, plus k
    t.idx.push_back(all);
  }
  t.mats.push_back(make_matrix(dtype::f32, layout, 5, 4, seed + 20)); // an item of no rows
  t.idx.emplace_back();
  for (std::size_t k = 0; k < t.mats.size(); ++k) {
    auto& m = t.mats[k];
    t.packed.push_back(zf_test::random_values<float>(t.idx[k].size() * static_cast<std::size_t>(m.len) + 5,
                                                     seed + 30 + k, 1000.0f));
    for (float& v : t.packed.back()) { // away from f16's subnormals, where round_to() does not hold
      v = std::fabs(v) < 1e-3f ? v + 1.0f : v;
    }
    t.items.push_back({m.bytes.data(), m.type, m.channels, m.len, m.ld, m.layout, t.idx[k].data(),
                       static_cast<std::int64_t>(t.idx[k].size()), t.packed[k].data()});
  }
  return t;
}

std::int64_t run(table& t, row_copy_direction dir, zenflow::worker_pool* pool) {
  const int n = static_cast<int>(t.items.size());
  const std::int64_t blocks = zenflow::detail::row_copy_blocks(t.items.data(), n);
  EXPECT_EQ(host_primitives::copy_rows_batched(t.items.data(), n, blocks, dir, pool), cudaSuccess);
  return blocks;
}

/// Every element of `m` outside the rows `idx` lists, the padding between channels included,
/// still has `before`'s bytes.
void expect_unlisted_unchanged(const matrix& m,
                               const matrix& before,
                               const std::vector<std::int32_t>& idx,
                               std::size_t k) {
  std::vector<bool> written(m.bytes.size() / m.elem(), false);
  for (const std::int32_t c : idx) {
    for (std::int64_t i = 0; i < m.len; ++i) {
      written[static_cast<std::size_t>(m.at(c, i))] = true;
    }
  }
  for (std::size_t e = 0; e < written.size(); ++e) {
    if (!written[e]) {
      ASSERT_EQ(std::memcmp(m.bytes.data() + e * m.elem(), before.bytes.data() + e * m.elem(), m.elem()), 0)
          << "matrix " << k << " element " << e << " was not listed";
    }
  }
}

TEST(row_copies, a_gather_widens_every_listed_row_of_every_matrix_into_its_packed_rows) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  zenflow::worker_pool pool(3);
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (zenflow::worker_pool* on : {static_cast<zenflow::worker_pool*>(nullptr), &pool}) {
      table t = make_table(layout, seed);
      const auto before = t.mats;
      const auto tails = t.packed;
      run(t, row_copy_direction::gather, on);
      for (std::size_t k = 0; k < t.mats.size(); ++k) {
        const auto& m = t.mats[k];
        EXPECT_EQ(m.bytes, before[k].bytes); // the source is only read
        for (std::size_t r = 0; r < t.idx[k].size(); ++r) {
          for (std::int64_t i = 0; i < m.len; ++i) {
            const float got = t.packed[k][r * static_cast<std::size_t>(m.len) + static_cast<std::size_t>(i)];
            ASSERT_EQ(got, m.value(t.idx[k][r], i)) << "matrix " << k << " row " << r << " element " << i;
          }
        }
        const std::size_t used = t.idx[k].size() * static_cast<std::size_t>(m.len);
        EXPECT_TRUE(std::equal(t.packed[k].begin() + static_cast<std::ptrdiff_t>(used), t.packed[k].end(),
                               tails[k].begin() + static_cast<std::ptrdiff_t>(used)))
            << "written past its rows";
      }
    }
  }
}

TEST(row_copies, a_scatter_rounds_the_packed_rows_into_the_listed_rows_and_touches_nothing_else) {
  const std::uint64_t seed = zf_test::base_seed() + 1;
  SCOPED_TRACE(zf_test::seed_note(seed));
  zenflow::worker_pool pool(3);
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (zenflow::worker_pool* on : {static_cast<zenflow::worker_pool*>(nullptr), &pool}) {
      table t = make_table(layout, seed);
      t.items[1].packed = nullptr; // the f16 matrix's rows: zeros (another owner's rows)
      const auto before = t.mats;
      run(t, row_copy_direction::scatter, on);
      for (std::size_t k = 0; k < t.mats.size(); ++k) {
        const auto& m = t.mats[k];
        for (std::size_t r = 0; r < t.idx[k].size(); ++r) {
          for (std::int64_t i = 0; i < m.len; ++i) {
            const float want =
                t.items[k].packed == nullptr
                    ? 0.0f
                    : round_to(t.packed[k][r * static_cast<std::size_t>(m.len) + static_cast<std::size_t>(i)],
                               digits_of(m.type));
            const float got = m.value(t.idx[k][r], i);
            ASSERT_EQ(got, want) << "matrix " << k << " row " << r << " element " << i;
            ASSERT_FALSE(std::signbit(got) && want == 0.0f) << "a zero row is +0";
          }
        }
        expect_unlisted_unchanged(m, before[k], t.idx[k], k);
      }
    }
  }
}

// A selection's entering rows travel in the working type (data parallel's fetch_entering): items
// whose packed side is the matrix's own type, beside fp32 ones in the same call. Both ways the
// bytes are the matrix's: a gather writes each listed element's bytes into its packed row, a
// scatter writes the packed bytes into the listed elements and touches nothing else.
TEST(row_copies, rows_packed_in_the_matrix_type_keep_their_bytes_both_ways) {
  const std::uint64_t seed = zf_test::base_seed() + 3;
  SCOPED_TRACE(zf_test::seed_note(seed));
  zenflow::worker_pool pool(3);
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    for (zenflow::worker_pool* on : {static_cast<zenflow::worker_pool*>(nullptr), &pool}) {
      table t = make_table(layout, seed);
      // Items 0 (bf16) and 1 (f16) packed in their own type, from random rows of a twin matrix;
      // item 2 (f32) stays fp32-packed; item 3 has no rows.
      std::vector<std::vector<unsigned char>> own(2);
      for (std::size_t k = 0; k < 2; ++k) {
        const auto& m = t.mats[k];
        // A random contiguous twin (its rows padded to len + 3): its first len elements per row.
        const matrix src = make_matrix(m.type, channel_layout::contiguous,
                                       static_cast<std::int64_t>(t.idx[k].size()), m.len, seed + 40 + k);
        for (std::size_t r = 0; r < t.idx[k].size(); ++r) {
          const auto* row = src.bytes.data() + r * static_cast<std::size_t>(src.ld) * m.elem();
          own[k].insert(own[k].end(), row, row + static_cast<std::size_t>(m.len) * m.elem());
        }
        t.items[k].packed = own[k].data();
        t.items[k].packed_type = m.type;
      }
      const auto packed_rows = own;
      const auto before = t.mats;
      run(t, row_copy_direction::scatter, on);
      for (std::size_t k = 0; k < 2; ++k) {
        const auto& m = t.mats[k];
        for (std::size_t r = 0; r < t.idx[k].size(); ++r) {
          for (std::int64_t i = 0; i < m.len; ++i) {
            const auto e = static_cast<std::size_t>(m.at(t.idx[k][r], i));
            ASSERT_EQ(std::memcmp(m.bytes.data() + e * m.elem(),
                                  packed_rows[k].data() +
                                      (r * static_cast<std::size_t>(m.len) + static_cast<std::size_t>(i)) *
                                          m.elem(),
                                  m.elem()),
                      0)
                << "matrix " << k << " row " << r << " element " << i;
          }
        }
        expect_unlisted_unchanged(m, before[k], t.idx[k], k);
      }
      for (std::size_t r = 0; r < t.idx[2].size(); ++r) { // the fp32-packed item beside them, rounded
        for (std::int64_t i = 0; i < t.mats[2].len; ++i) {
          ASSERT_EQ(t.mats[2].value(t.idx[2][r], i),
                    t.packed[2][r * static_cast<std::size_t>(t.mats[2].len) + static_cast<std::size_t>(i)]);
        }
      }
      // Back: fresh matrices gathered into the own-type rows give each listed element's bytes.
      table u = make_table(layout, seed + 7);
      for (std::size_t k = 0; k < 2; ++k) {
        u.items[k].packed = own[k].data();
        u.items[k].packed_type = u.mats[k].type;
        std::fill(own[k].begin(), own[k].end(), static_cast<unsigned char>(0xa5));
      }
      run(u, row_copy_direction::gather, on);
      for (std::size_t k = 0; k < 2; ++k) {
        const auto& m = u.mats[k];
        for (std::size_t r = 0; r < u.idx[k].size(); ++r) {
          for (std::int64_t i = 0; i < m.len; ++i) {
            ASSERT_EQ(std::memcmp(own[k].data() +
                                      (r * static_cast<std::size_t>(m.len) + static_cast<std::size_t>(i)) *
                                          m.elem(),
                                  m.bytes.data() + static_cast<std::size_t>(m.at(u.idx[k][r], i)) * m.elem(),
                                  m.elem()),
                      0)
                << "matrix " << k << " row " << r << " element " << i;
          }
        }
      }
    }
  }
}

// A GPU faults on a misaligned element; the host loop refuses the same table before writing
// anything (the emulated device then fails where a GPU would): fp32 rows at 2 bytes past an
// aligned address, in the last item, after items that would otherwise have been copied.
TEST(row_copies, a_misaligned_item_is_refused_before_anything_is_written) {
  const std::uint64_t seed = zf_test::base_seed() + 4;
  for (const auto dir : {row_copy_direction::gather, row_copy_direction::scatter}) {
    table t = make_table(channel_layout::contiguous, seed);
    std::vector<float> shifted(t.packed[2].size() + 1);
    t.items[2].packed = reinterpret_cast<unsigned char*>(shifted.data()) + 2;
    const auto mats = t.mats;
    const auto packed = t.packed;
    const int n = static_cast<int>(t.items.size());
    const std::int64_t blocks = zenflow::detail::row_copy_blocks(t.items.data(), n);
    EXPECT_EQ(host_primitives::copy_rows_batched(t.items.data(), n, blocks, dir, nullptr),
              cudaErrorMisalignedAddress);
    for (std::size_t k = 0; k < t.mats.size(); ++k) {
      EXPECT_EQ(t.mats[k].bytes, mats[k].bytes) << "matrix " << k;
      EXPECT_EQ(t.packed[k], packed[k]) << "packed " << k;
    }
    t.items[2].packed = t.packed[2].data(); // aligned again: copied
    EXPECT_EQ(host_primitives::copy_rows_batched(t.items.data(), n, blocks, dir, nullptr), cudaSuccess);
  }
}

TEST(row_copies, the_launch_gives_each_item_its_rows_or_tiles_of_blocks) {
  const std::uint64_t seed = zf_test::base_seed() + 2;
  for (const auto layout : {channel_layout::contiguous, channel_layout::strided}) {
    table t = make_table(layout, seed);
    const std::int64_t blocks = run(t, row_copy_direction::gather, nullptr);
    std::int64_t begin = 0;
    for (std::size_t k = 0; k < t.items.size(); ++k) {
      EXPECT_EQ(t.items[k].block_begin, begin);
      const auto rows = static_cast<std::int64_t>(t.idx[k].size());
      begin += layout == channel_layout::contiguous ? rows : (rows + 31) / 32;
    }
    EXPECT_EQ(blocks, begin);
    for (std::int64_t b = 0; b < blocks; ++b) { // the kernel's search against a linear scan
      int want = 0;
      for (int k = 0; k < static_cast<int>(t.items.size()); ++k) {
        want = t.items[static_cast<std::size_t>(k)].block_begin <= b ? k : want;
      }
      ASSERT_EQ(zenflow::detail::item_of_block(t.items.data(), static_cast<int>(t.items.size()), b), want)
          << b;
    }
    EXPECT_EQ(zenflow::detail::row_copy_bytes(t.items.data(), static_cast<int>(t.items.size())),
              (100u * 45u * 6u) + (52u * 70u * 6u) + (28u * 33u * 8u)); // rows x len x (elem + 4)
    t.items[0].packed_type = dtype::bf16; // packed in the working type: rows x len x 2 elem
    EXPECT_EQ(zenflow::detail::row_copy_bytes(t.items.data(), static_cast<int>(t.items.size())),
              (100u * 45u * 4u) + (52u * 70u * 6u) + (28u * 33u * 8u));
  }
}

} // namespace
