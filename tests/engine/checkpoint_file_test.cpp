// cpu tier for the checkpoint file: streamed round trip of random sections, atomic replacement,
// and every way a file can be wrong (each truncation length, flipped bytes, wrong version, other
// config / parameters / rank), each reported as its kind and never half-read; writer misuse.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/checkpoint_file.hpp>

#include "support/random.hpp"

namespace {

using zenflow::checkpoint_errc;
using zenflow::checkpoint_error;
using zenflow::checkpoint_identity;
using zenflow::checkpoint_reader;
using zenflow::checkpoint_writer;

namespace fs = std::filesystem;

struct section_data {
  std::string tag;
  std::vector<std::byte> bytes;
};

std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) {
    b = static_cast<std::byte>(rng());
  }
  return v;
}

class checkpoint_file : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("zf_ckpt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static checkpoint_identity identity() { return {0x1234'5678'9abc'def0ull, 0x0fed'cba9'8765'4321ull, 1, 4}; }

  // Writes `sections` in random-size pieces (the streamed path).
  static void
  write_file(const std::string& file, const std::vector<section_data>& sections, std::mt19937_64& rng) {
    checkpoint_writer w(file, identity());
    for (const section_data& s : sections) {
      w.begin_section(s.tag, s.bytes.size());
      std::size_t done = 0;
      while (done < s.bytes.size()) {
        const std::size_t n = std::min<std::size_t>(s.bytes.size() - done, 1 + rng() % 700'000);
        w.write(s.bytes.data() + done, n);
        done += n;
      }
      w.end_section();
    }
    w.commit();
  }
  static std::vector<std::byte> file_bytes(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> b(c.size());
    std::memcpy(b.data(), c.data(), c.size());
    return b;
  }
  static checkpoint_errc kind_of(std::span<const std::byte> bytes) {
    try {
      checkpoint_reader r(bytes);
      return static_cast<checkpoint_errc>(255); // accepted
    } catch (const checkpoint_error& e) {
      return e.kind();
    }
  }

  fs::path dir_;
};

TEST_F(checkpoint_file, streamed_sections_read_back_bit_for_bit) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::mt19937_64 rng(seed);
  // Sizes around the 1 MiB streaming chunk, an empty section, tiny ones.
  const std::vector<std::size_t> sizes = {0, 1, 7, 4096, (1u << 20) - 3, (1u << 20) + 5, 3u << 20};
  std::vector<section_data> sections;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sections.push_back({"param" + std::to_string(i) + "/master", random_bytes(rng, sizes[i])});
  }
  const std::string file = path("state.zfck");
  write_file(file, sections, rng);

  checkpoint_reader r(file);
  EXPECT_EQ(r.identity().config_hash, identity().config_hash);
  EXPECT_EQ(r.identity().params_hash, identity().params_hash);
  EXPECT_EQ(r.identity().rank, 1u);
  EXPECT_EQ(r.identity().world_size, 4u);
  EXPECT_NO_THROW(r.expect(identity()));
  ASSERT_EQ(r.sections().size(), sections.size());
  for (std::size_t i = 0; i < sections.size(); ++i) {
    EXPECT_EQ(r.sections()[i].tag, sections[i].tag);
    std::vector<std::byte> back(sections[i].bytes.size(), std::byte{0x5a});
    r.read(sections[i].tag, back.data(), back.size());
    EXPECT_EQ(back, sections[i].bytes) << sections[i].tag;
  }
  // The same file read from memory.
  const std::vector<std::byte> bytes = file_bytes(file);
  checkpoint_reader m(bytes);
  EXPECT_EQ(m.sections().size(), sections.size());
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(checkpoint_file, an_uncommitted_writer_leaves_the_previous_file_intact) {
  std::mt19937_64 rng(zf_test::base_seed() + 1);
  const std::string file = path("state.zfck");
  const std::vector<section_data> first = {{"a", random_bytes(rng, 1000)}};
  write_file(file, first, rng);
  const std::vector<std::byte> before = file_bytes(file);
  {
    checkpoint_writer w(file, identity());
    w.section("a", random_bytes(rng, 50).data(), 50); // a save that dies before commit()
  }
  EXPECT_EQ(file_bytes(file), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1); // temp removed
  // A committed save replaces it whole.
  const std::vector<section_data> second = {{"b", random_bytes(rng, 300)}};
  write_file(file, second, rng);
  checkpoint_reader r(file);
  ASSERT_EQ(r.sections().size(), 1u);
  EXPECT_EQ(r.sections()[0].tag, "b");
}

TEST_F(checkpoint_file, every_truncation_is_reported_and_nothing_is_read) {
  std::mt19937_64 rng(zf_test::base_seed() + 2);
  const std::string file = path("small.zfck");
  write_file(file, {{"x", random_bytes(rng, 40)}, {"y", random_bytes(rng, 3)}, {"z", {}}}, rng);
  const std::vector<std::byte> bytes = file_bytes(file);
  ASSERT_GT(bytes.size(), 64u);
  EXPECT_EQ(kind_of(std::span(bytes.data(), 0)), checkpoint_errc::not_a_checkpoint);
  for (std::size_t n = 1; n < bytes.size(); ++n) {
    EXPECT_EQ(kind_of(std::span(bytes.data(), n)), checkpoint_errc::truncated) << "length " << n;
  }
  // Truncated on disk: the message names the file and the kind.
  std::ofstream(path("cut.zfck"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 100);
  try {
    checkpoint_reader r(path("cut.zfck"));
    FAIL() << "a truncated file was accepted";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.kind(), checkpoint_errc::truncated);
    EXPECT_NE(std::string(e.what()).find("cut.zfck"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(checkpoint_file, every_flipped_byte_is_caught_and_payload_damage_names_the_section) {
  std::mt19937_64 rng(zf_test::base_seed() + 3);
  const std::string file = path("small.zfck");
  write_file(file, {{"moments", random_bytes(rng, 64)}, {"counts", random_bytes(rng, 16)}}, rng);
  const std::vector<std::byte> good = file_bytes(file);
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::vector<std::byte> bad = good;
    bad[i] ^= static_cast<std::byte>(1u << (rng() % 8));
    const checkpoint_errc k = kind_of(bad);
    EXPECT_NE(static_cast<int>(k), 255) << "a flip at byte " << i << " was accepted";
  }
  // A flip inside the first payload: corrupted, naming 'moments'.
  std::vector<std::byte> bad = good;
  const std::size_t payload = 64 + 8 + std::string("moments").size() + 8;
  bad[payload + 10] ^= std::byte{0x40};
  try {
    checkpoint_reader r(bad);
    FAIL() << "damaged payload accepted";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.kind(), checkpoint_errc::corrupted);
    EXPECT_NE(std::string(e.what()).find("'moments'"), std::string::npos) << e.what();
  }
}

TEST_F(checkpoint_file, other_version_config_parameters_and_rank_are_told_apart) {
  std::mt19937_64 rng(zf_test::base_seed() + 4);
  const std::string file = path("v.zfck");
  write_file(file, {{"a", random_bytes(rng, 8)}}, rng);
  std::vector<std::byte> bytes = file_bytes(file);
  std::vector<std::byte> future = bytes;
  future[8] = std::byte{2}; // version 2: reported before the header checksum, which may differ
  EXPECT_EQ(kind_of(future), checkpoint_errc::wrong_version);
  std::vector<std::byte> other = bytes;
  other[0] = std::byte{'{'};
  EXPECT_EQ(kind_of(other), checkpoint_errc::not_a_checkpoint);

  checkpoint_reader r(bytes);
  auto expect_kind = [&](checkpoint_identity mine, checkpoint_errc want) {
    try {
      r.expect(mine);
      ADD_FAILURE() << "expect() accepted a different identity";
    } catch (const checkpoint_error& e) {
      EXPECT_EQ(e.kind(), want) << e.what();
    }
  };
  checkpoint_identity mine = identity();
  mine.config_hash ^= 1;
  expect_kind(mine, checkpoint_errc::other_config);
  mine = identity();
  mine.params_hash ^= 1;
  expect_kind(mine, checkpoint_errc::other_parameters);
  mine = identity();
  mine.rank = 0;
  expect_kind(mine, checkpoint_errc::other_rank);

  std::vector<std::byte> dst(8);
  try {
    r.read("b", dst.data(), dst.size());
    ADD_FAILURE() << "a missing section was read";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.kind(), checkpoint_errc::missing_section);
  }
  try {
    r.read("a", dst.data(), 7);
    ADD_FAILURE() << "a section was read into a buffer of another size";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.kind(), checkpoint_errc::wrong_size);
  }
}

TEST_F(checkpoint_file, writer_misuse_is_rejected_naming_the_argument) {
  checkpoint_writer w(path("m.zfck"), identity());
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const zenflow::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(nothing thrown)");
  };
  EXPECT_NE(message([&] { w.begin_section("", 1); }).find("'tag'"), std::string::npos);
  EXPECT_NE(message([&] { w.begin_section(std::string(256, 't'), 1); }).find("'tag'"), std::string::npos);
  EXPECT_NE(message([&] { w.write("x", 1); }).find("no open section"), std::string::npos);
  w.begin_section("a", 4);
  EXPECT_NE(message([&] { w.begin_section("b", 1); }).find("still open"), std::string::npos);
  EXPECT_NE(message([&] { w.write("12345", 5); }).find("'bytes'"), std::string::npos);
  w.write("12", 2);
  EXPECT_NE(message([&] { w.end_section(); }).find("2 of the 4"), std::string::npos);
  EXPECT_NE(message([&] { w.commit(); }).find("still open"), std::string::npos);
  w.write("34", 2);
  w.end_section();
  EXPECT_NE(message([&] { w.begin_section("a", 1); }).find("already written"), std::string::npos);
  w.commit();
  checkpoint_reader r(path("m.zfck"));
  char back[4];
  r.read("a", back, 4);
  EXPECT_EQ(std::string(back, 4), "1234");
  EXPECT_THROW(checkpoint_reader(path("does-not-exist.zfck")), checkpoint_error);
}

TEST_F(checkpoint_file, example_save_and_load_a_state) {
  std::vector<float> master(1000), loaded(1000);
  for (std::size_t i = 0; i < master.size(); ++i) {
    master[i] = 0.001f * static_cast<float>(i) - 0.3f;
  }
  const std::int64_t step = 1234;
  std::int64_t loaded_step = 0;
  const std::string file = path("step1234.zfck");
  // example-begin checkpoint-file
  const zenflow::checkpoint_identity me{/*config_hash=*/0xC0FF, /*params_hash=*/0xBEEF, /*rank=*/0,
                                        /*world=*/1};
  {
    zenflow::checkpoint_writer out(file, me); // a temporary file beside `file`
    out.section("step", &step, sizeof step);
    out.begin_section("layer0/master", master.size() * sizeof(float)); // streamed: no second copy
    out.write(master.data(), 500 * sizeof(float));
    out.write(master.data() + 500, 500 * sizeof(float));
    out.end_section();
    out.commit(); // fsync, rename over `file`, fsync of the directory
  }
  zenflow::checkpoint_reader in(file); // checks the whole file before anything is read
  in.expect(me);                       // same configuration, parameter list and rank, or throws
  in.read("step", &loaded_step, sizeof loaded_step);
  in.read("layer0/master", loaded.data(), loaded.size() * sizeof(float));
  // example-end checkpoint-file
  EXPECT_EQ(loaded_step, step);
  EXPECT_EQ(loaded, master);
}

TEST(checkpoint_rank_path, one_file_per_rank) {
  EXPECT_EQ(zenflow::checkpoint_rank_path("run/step100.zfck", 0, 1), "run/step100.zfck");
  EXPECT_EQ(zenflow::checkpoint_rank_path("run/step100.zfck", 3, 8), "run/step100.zfck.rank3-of-8");
  EXPECT_THROW((void)zenflow::checkpoint_rank_path("x", 8, 8), zenflow::invalid_argument);
  EXPECT_THROW((void)zenflow::checkpoint_rank_path("x", 0, 0), zenflow::invalid_argument);
}

} // namespace
