// The pipeline trace (engine::start_trace / write_trace): a run on the emulated device with a
// timing model, its JSON parsed back and checked for well-formed, ordered events that agree with
// the engine's own counters (steps, host jobs, D2H bytes).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "../support/random.hpp"

namespace {

using json = nlohmann::json;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("zf_trace_" + name + ".json")).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

struct span {
  double ts, dur;
  std::string name, cat;
  json args;
};

/// The complete events per (pid, tid), in file order; every event checked for its fields.
std::map<std::pair<int, int>, std::vector<span>> tracks_of(const json& j) {
  std::map<std::pair<int, int>, std::vector<span>> out;
  EXPECT_TRUE(j.contains("traceEvents"));
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    EXPECT_TRUE(ph == "X" || ph == "M") << e.dump();
    if (ph != "X") {
      continue;
    }
    for (const char* key : {"pid", "tid", "ts", "dur", "name", "cat"}) {
      EXPECT_TRUE(e.contains(key)) << key << " missing: " << e.dump();
    }
    const double ts = e.at("ts");
    const double dur = e.at("dur");
    EXPECT_GE(ts, 0.0);
    EXPECT_GE(dur, 0.0);
    out[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back(
        {ts, dur, e.at("name"), e.at("cat"), e.value("args", json::object())});
  }
  return out;
}

TEST(pipeline_trace, emulated_run_gives_ordered_well_formed_tracks_that_match_the_counters) {
  const std::uint64_t seed = zf_test::base_seed() + 301;
  SCOPED_TRACE(zf_test::seed_note(seed));
  zenflow::emulated_timing timing;
  timing.d2h_bytes_per_second = 2e8; // slow enough that copies overlap the next step's compute
  timing.h2d_bytes_per_second = 2e8;
  zenflow::emulated_device device(timing);
  cudaStream_t stream = device.create_stream();
  zenflow::config cfg;
  cfg.topk_ratio = 0.1;
  cfg.update_interval = 0; // Zen-auto
  cfg.max_update_interval = 3;
  cfg.host_threads = 1;
  const std::int64_t C = 64, L = 96;
  std::vector<float> w = zf_test::random_values<float>(static_cast<std::size_t>(2 * C * L), seed);
  std::vector<float> g(w.size());
  zenflow::engine<zenflow::emulated_backend> zf(cfg, zenflow::emulated_backend{device});
  zf.add_matrix(w.data(), g.data(), C, L);
  zf.add_matrix(w.data() + C * L, g.data() + C * L, C, L);
  zf.initialize(stream);
  device.synchronize();
  const zenflow::stats before = zf.stats();
  zf.start_trace();
  const int steps = 10;
  for (int t = 0; t < steps; ++t) {
    device.launch(stream, [&, t] {
      const auto r = zf_test::random_values<float>(g.size(), seed + 1 + static_cast<std::uint64_t>(t), 1e-3f);
      std::copy(r.begin(), r.end(), g.begin());
    });
    device.compute(stream, std::chrono::milliseconds(4), "forward+backward");
    (void)zf.step(1e-3f, stream);
  }
  zf.flush(stream);
  device.synchronize();
  const std::string path = temp_path("emulated");
  zf.write_trace(path);
  const json j = read_json(path);
  std::remove(path.c_str());
  const auto tracks = tracks_of(j);

  // Every track in start order, the host threads' spans never overlapping (a thread does one
  // thing at a time; a stall lies inside its step).
  for (const auto& [key, spans] : tracks) {
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].ts, spans[i].ts) << "track " << key.first << "/" << key.second;
    }
  }
  const auto& training = tracks.at({1, 1});
  std::vector<span> step_spans, stalls;
  for (const auto& s : training) {
    (s.cat == "step" ? step_spans : stalls).push_back(s);
  }
  ASSERT_EQ(step_spans.size(), static_cast<std::size_t>(steps));
  for (int t = 0; t < steps; ++t) {
    const auto& s = step_spans[static_cast<std::size_t>(t)];
    EXPECT_EQ(s.name, "step " + std::to_string(t));
    EXPECT_TRUE(s.args.contains("window_length"));
    if (t > 0) {
      const auto& p = step_spans[static_cast<std::size_t>(t - 1)];
      EXPECT_LE(p.ts + p.dur, s.ts + 1e-3);
    }
  }
  for (const auto& st : stalls) {
    EXPECT_EQ(st.cat, "stall");
    EXPECT_EQ(st.name.rfind("stall: ", 0), 0u) << st.name;
    bool inside =
        st.name == "stall: flush: the host reads every step" || st.name == "stall: host job not done";
    for (const auto& s : step_spans) {
      inside = inside || (st.ts >= s.ts - 1e-3 && st.ts + st.dur <= s.ts + s.dur + 1e-3);
    }
    EXPECT_TRUE(inside) << st.name << " at " << st.ts;
  }
  // The consumer took in each step's records; the host jobs are the engine's.
  const auto& consumer = tracks.at({1, 2});
  std::map<std::int64_t, int> records;
  for (const auto& s : consumer) {
    EXPECT_EQ(s.cat, "consume");
    if (s.name == "record (masses)") {
      ++records[s.args.at("step").get<std::int64_t>()];
    }
  }
  for (int t = 0; t < steps; ++t) {
    EXPECT_EQ(records[t], 1) << "step " << t;
  }
  const zenflow::stats& after = zf.stats();
  ASSERT_GT(after.host_jobs - before.host_jobs, 0);
  EXPECT_EQ(static_cast<std::int64_t>(tracks.at({1, 3}).size()), after.host_jobs - before.host_jobs);
  // The device's streams: the modelled compute on the training stream, the D2H bytes the engine
  // counted, all on the copy engine's stream(s).
  std::uint64_t d2h = 0;
  int computes = 0;
  for (const auto& [key, spans] : tracks) {
    if (key.first != 2) {
      continue;
    }
    for (const auto& s : spans) {
      EXPECT_TRUE(s.args.contains("bytes"));
      d2h += s.cat == "copy D2H" ? s.args.at("bytes").get<std::uint64_t>() : 0;
      computes += s.name == "forward+backward" ? 1 : 0;
    }
  }
  EXPECT_EQ(computes, steps);
  EXPECT_EQ(d2h, after.d2h_bytes - before.d2h_bytes);
}

TEST(pipeline_trace, host_backend_has_no_device_tracks_and_a_bad_path_is_named) {
  zenflow::config cfg;
  cfg.update_interval = 2;
  cfg.host_threads = 1;
  std::vector<float> w = zf_test::random_values<float>(16 * 8, zf_test::base_seed() + 302);
  std::vector<float> g = zf_test::random_values<float>(w.size(), zf_test::base_seed() + 303);
  zenflow::engine<zenflow::host_backend> zf(cfg);
  zf.add_matrix(w.data(), g.data(), 16, 8);
  zf.initialize();
  const std::string path = temp_path("host");
  zf.write_trace(path); // nothing recorded yet: a valid, empty trace
  EXPECT_TRUE(tracks_of(read_json(path)).empty());
  zf.start_trace();
  for (int t = 0; t < 4; ++t) {
    (void)zf.step(1e-3f);
  }
  zf.flush();
  zf.write_trace(path);
  const auto tracks = tracks_of(read_json(path));
  std::remove(path.c_str());
  int step_spans = 0;
  for (const auto& s : tracks.at({1, 1})) {
    step_spans += s.cat == "step" ? 1 : 0;
  }
  EXPECT_EQ(step_spans, 4);
  for (const auto& [key, spans] : tracks) {
    EXPECT_EQ(key.first, 1);
  }
  try {
    zf.write_trace("/nonexistent-dir/zf/trace.json");
    ADD_FAILURE() << "no error";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path"), std::string::npos) << e.what();
  }
}

} // namespace
