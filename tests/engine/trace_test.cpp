// The pipeline trace (engine::start_trace / write_trace): a run on the emulated device with a
// timing model, checked by trace_checks.hpp (the CUDA backend's run: engine_gpu_test.cu); the host
// backend's trace has no device tracks.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "../support/random.hpp"
#include "trace_checks.hpp"

namespace {

using namespace zf_trace_test;

TEST(pipeline_trace, emulated_run_gives_ordered_well_formed_tracks_that_match_the_counters) {
  const std::uint64_t seed = zf_test::base_seed() + 301;
  SCOPED_TRACE(zf_test::seed_note(seed));
  zenflow::emulated_timing timing;
  timing.d2h_bytes_per_second = 2e8; // slow enough that copies overlap the next step's compute
  timing.h2d_bytes_per_second = 2e8;
  zenflow::emulated_device device(timing);
  cudaStream_t stream = device.create_stream();
  const zenflow::config cfg = trace_config();
  const std::int64_t C = kChannels, L = kLen;
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
  const json j = written_trace(zf, "emulated");
  expect_trace_matches_the_run(j, steps, before, zf.stats(), steps);
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
