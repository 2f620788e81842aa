// cpu tests of export_masters / read_masters: the file holds exactly the optimizer's fp32 masters
// (engine::state) with the registered names and shapes, in every mode and mid-window; exporting
// does not change what the engine computes next; bad input and files that are not masters files
// are reported.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/masters_file.hpp>

#include "engine_cases.hpp"
#include "engine_harness.hpp"

namespace {

using zf_engine_test::host_driver;
using zf_engine_test::kShapes;
using zf_engine_test::model;
using zf_engine_test::small_config;
using host_engine = zenflow::engine<zenflow::host_backend>;
namespace fs = std::filesystem;

std::string temp_file(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("zf_masters_" + name)).string();
}

std::string name_of(std::size_t p) {
  return "layer" + std::to_string(p) + (kShapes[p].matrix ? ".weight" : ".bias");
}

TEST(engine_masters_file, holds_the_optimizers_masters_and_exporting_changes_nothing) {
  int mode = 0;
  for (const auto& [label, cfg] : zf_engine_test::all_modes()) {
    SCOPED_TRACE(label);
    const std::uint64_t seed = zf_test::base_seed() + 900 + static_cast<std::uint64_t>(mode++);
    model<float> m(kShapes, seed), twin(kShapes, seed);
    host_driver<float> dm(m), dt(twin);
    host_engine eng(cfg), eng2(cfg);
    for (std::size_t p = 0; p < kShapes.size(); ++p) {
      (void)dm.add(eng, p, {.name = name_of(p)});
      (void)dt.add(eng2, p, {.name = name_of(p)});
    }
    dm.initialize(eng);
    dt.initialize(eng2);
    const std::string file = temp_file("run.zfck");
    for (int t = 0; t < 23; ++t) {
      m.next_grads();
      twin.g = m.g;
      (void)dm.step(eng, 1e-2f);
      (void)dt.step(eng2, 1e-2f);
      if (t == 9 || t == 14) { // mid-window on the fixed-window configs
        zenflow::export_masters(eng, file);
        const std::vector<zenflow::exported_master> back = zenflow::read_masters(file);
        ASSERT_EQ(back.size(), kShapes.size());
        for (std::size_t p = 0; p < kShapes.size(); ++p) {
          const zenflow::param_state st = eng.state(zenflow::param_id{static_cast<std::int32_t>(p)});
          EXPECT_EQ(back[p].name, name_of(p));
          EXPECT_EQ(back[p].channels, kShapes[p].matrix ? kShapes[p].channels : 1);
          EXPECT_EQ(back[p].channel_len, kShapes[p].len);
          EXPECT_TRUE(zf_engine_test::same_bits(back[p].values, st.master)) << "param " << p << " step " << t;
        }
      }
    }
    dm.flush(eng);
    dt.flush(eng2);
    for (std::size_t p = 0; p < kShapes.size(); ++p) { // the exports changed nothing
      EXPECT_TRUE(zf_engine_test::same_bits(m.w[p], twin.w[p])) << "param " << p;
    }
    fs::remove(file);
  }
}

TEST(engine_masters_file, bad_input_and_other_files_are_reported) {
  const auto cfg = small_config();
  model<float> m(kShapes, zf_test::base_seed() + 950);
  host_driver<float> d(m);
  host_engine eng(cfg);
  for (std::size_t p = 0; p < kShapes.size(); ++p) {
    (void)d.add(eng, p);
  }
  try {
    zenflow::export_masters(eng, temp_file("early.zfck"));
    ADD_FAILURE() << "exported from an engine that is not initialized";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'eng'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(temp_file("early.zfck")));
  d.initialize(eng);
  try {
    zenflow::export_masters(eng, "");
    ADD_FAILURE() << "an empty path was accepted";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'path'"), std::string::npos) << e.what();
  }
  // A checkpoint file that holds no masters.
  const std::string other = temp_file("other.zfck");
  {
    zenflow::checkpoint_writer w(other, {});
    w.section("step", "12345678", 8);
    w.commit();
  }
  try {
    (void)zenflow::read_masters(other);
    ADD_FAILURE() << "a file without masters was read";
  } catch (const zenflow::checkpoint_error& e) {
    EXPECT_EQ(e.kind(), zenflow::checkpoint_errc::missing_section) << e.what();
  }
  // A masters file cut short.
  const std::string file = temp_file("cut.zfck");
  zenflow::export_masters(eng, file);
  fs::resize_file(file, fs::file_size(file) - 9);
  try {
    (void)zenflow::read_masters(file);
    ADD_FAILURE() << "a truncated masters file was read";
  } catch (const zenflow::checkpoint_error& e) {
    EXPECT_EQ(e.kind(), zenflow::checkpoint_errc::truncated) << e.what();
  }
  fs::remove(other);
  fs::remove(file);
}

} // namespace
