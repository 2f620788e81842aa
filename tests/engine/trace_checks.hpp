// The pipeline trace's checks (engine::start_trace / write_trace), one body for every backend
// that keeps a device timeline: the emulated device (trace_test.cpp) and the CUDA backend, whose
// streams are timed by events (engine_gpu_test.cu). The JSON written is parsed back and checked for
// well-formed, ordered events that agree with the engine's own counters (steps, host jobs, D2H
// bytes) and name the plan's kernels.
#pragma once

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

#include <zenflow/engine/config.hpp>
#include <zenflow/engine/stats.hpp>

namespace zf_trace_test {

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

/// The traced runs' settings: Zen-auto with windows of at most 3 steps (several host jobs in 10
/// steps), r = 0.1, one host thread; two matrices of kChannels x kLen.
constexpr std::int64_t kChannels = 64, kLen = 96;
inline zenflow::config trace_config() {
  zenflow::config cfg;
  cfg.topk_ratio = 0.1;
  cfg.update_interval = 0; // Zen-auto
  cfg.max_update_interval = 3;
  cfg.host_threads = 1;
  return cfg;
}

/// `zf.write_trace` into a temporary file, parsed back (the file removed).
template <class Engine>
json written_trace(const Engine& zf, const std::string& name) {
  const std::string path = temp_path(name);
  zf.write_trace(path);
  const json j = read_json(path);
  std::remove(path.c_str());
  return j;
}

/// The trace `j` of `steps` steps recorded between `before` and `after` (the engine's stats), on a
/// backend with device tracks; `expected_computes`: the caller's compute spans the device records
/// (-1: not recorded there, not checked).
inline void expect_trace_matches_the_run(const json& j,
                                         int steps,
                                         const zenflow::stats& before,
                                         const zenflow::stats& after,
                                         int expected_computes) {
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
  ASSERT_GT(after.host_jobs - before.host_jobs, 0);
  EXPECT_EQ(static_cast<std::int64_t>(tracks.at({1, 3}).size()), after.host_jobs - before.host_jobs);
  // The device's streams: every span with its bytes; the D2H bytes the engine counted, all on the
  // copy engine's stream(s); the plan's kernels by name; the caller's compute where the device
  // records it (`computes`: the emulated device's modelled compute, named "forward+backward").
  std::uint64_t d2h = 0;
  int computes = 0;
  int plan_kernels = 0;
  for (const auto& [key, spans] : tracks) {
    if (key.first != 2) {
      continue;
    }
    for (const auto& s : spans) {
      EXPECT_TRUE(s.args.contains("bytes"));
      d2h += s.cat == "copy D2H" ? s.args.at("bytes").get<std::uint64_t>() : 0;
      computes += s.name == "forward+backward" ? 1 : 0;
      plan_kernels += s.cat == "kernel" && s.name.rfind("zenflow::engine: ", 0) == 0 ? 1 : 0;
    }
  }
  EXPECT_GE(plan_kernels, steps); // at least one launch of the plan per step
  if (expected_computes >= 0) {
    EXPECT_EQ(computes, expected_computes);
  }
  EXPECT_EQ(d2h, after.d2h_bytes - before.d2h_bytes);
}

} // namespace zf_trace_test
