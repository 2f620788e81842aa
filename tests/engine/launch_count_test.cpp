// Issue 11, P4 and P5: what a step asks of the device, counted on the emulated backend
// (emulated_backend_counts): the device update of a step is one batched selective AdamW per dtype
// group whatever the number of matrices (the count advance folded in), and a selection step waits
// for the device at most once (one segmented top-k of every matrix, the migration stream-ordered).
// Counts, not timings: they do not depend on the machine.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>

#include "../support/random.hpp"
#include "engine_harness.hpp"

namespace {

/// One step's counts: device operations (all, and by name) and host waits.
struct step_counts {
  std::uint64_t runs = 0;
  std::uint64_t waits = 0;
  std::map<std::string, std::uint64_t> by_name;
  [[nodiscard]] std::uint64_t named(const std::string& n) const {
    const auto it = by_name.find("zenflow::engine: " + n);
    return it == by_name.end() ? 0 : it->second;
  }
};

struct run_result {
  std::vector<step_counts> steps;
  std::vector<bool> selection;
};

/// `f32` matrices of float and `bf16` of bfloat16 (24 channels x 16) and one vector, `steps`
/// steps of random gradients on the emulated device; what each step() asked, counted.
run_result count_run(int f32, int bf16, int steps, bool zen_auto) {
  zenflow::config cfg = zf_engine_test::small_config();
  cfg.select_interval = 4;
  cfg.ring_slots = 64;
  if (zen_auto) {
    cfg.update_interval = 0;
    cfg.max_update_interval = 3;
  }
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  zenflow::emulated_backend_counts counts;
  zenflow::engine<zenflow::emulated_backend> eng(cfg, zenflow::emulated_backend{device, &counts});
  constexpr std::int64_t channels = 24;
  constexpr std::int64_t len = 16;
  const auto n = static_cast<std::size_t>(channels * len);
  std::vector<std::vector<float>> wf(static_cast<std::size_t>(f32), zf_test::random_values<float>(n, 1));
  std::vector<std::vector<float>> gf(static_cast<std::size_t>(f32), std::vector<float>(n));
  std::vector<std::vector<zenflow::bfloat16>> wb(static_cast<std::size_t>(bf16),
                                                 zf_test::random_values<zenflow::bfloat16>(n, 2));
  std::vector<std::vector<zenflow::bfloat16>> gb(static_cast<std::size_t>(bf16),
                                                 std::vector<zenflow::bfloat16>(n));
  std::vector<float> vec(7, 0.5f);
  std::vector<float> vec_g(7);
  for (std::size_t i = 0; i < wf.size(); ++i) {
    eng.add_matrix(wf[i].data(), gf[i].data(), channels, len);
  }
  for (std::size_t i = 0; i < wb.size(); ++i) {
    eng.add_matrix(wb[i].data(), gb[i].data(), channels, len);
  }
  eng.add_vector(vec.data(), vec_g.data(), 7);
  eng.initialize(stream);
  run_result out;
  for (int t = 0; t < steps; ++t) {
    const auto seed = static_cast<std::uint64_t>(100 + t);
    device.launch(stream, [&, seed] { // the backward, stream-ordered
      // Copied into the registered buffers (an assignment would move a new buffer in).
      const auto fill = [](auto& dst, const auto& src) { std::copy(src.begin(), src.end(), dst.begin()); };
      for (std::size_t i = 0; i < gf.size(); ++i) {
        fill(gf[i], zf_test::random_values<float>(n, seed + 7 * i));
      }
      for (std::size_t i = 0; i < gb.size(); ++i) {
        fill(gb[i], zf_test::random_values<zenflow::bfloat16>(n, seed + 7 * i + 3));
      }
      fill(vec_g, zf_test::random_values<float>(7, seed + 1000));
    });
    const std::uint64_t runs0 = counts.runs;
    const std::uint64_t waits0 = counts.waits;
    const auto names0 = counts.runs_by_name();
    const zenflow::step_report rep = eng.step(1e-2f, stream);
    step_counts c;
    c.runs = counts.runs - runs0;
    c.waits = counts.waits - waits0;
    for (const auto& [name, k] : counts.runs_by_name()) {
      const auto it = names0.find(name);
      const std::uint64_t before = it == names0.end() ? 0 : it->second;
      if (k > before) {
        c.by_name[name] = k - before;
      }
    }
    if (std::getenv("ZF_PRINT_COUNTS") != nullptr) { // the figures of the report
      std::printf("matrices f32 %d bf16 %d %s step %d%s: runs %llu (packs %llu) waits %llu\n", f32, bf16,
                  zen_auto ? "auto" : "S=2", t, rep.selection ? " (selection)" : "",
                  static_cast<unsigned long long>(c.runs),
                  static_cast<unsigned long long>(c.by_name["zenflow::engine: gather_channels"]),
                  static_cast<unsigned long long>(c.waits));
      for (const auto& [name, k] : c.by_name) {
        std::printf("    %s %llu\n", name.c_str(), static_cast<unsigned long long>(k));
      }
    }
    out.steps.push_back(c);
    out.selection.push_back(rep.selection);
    device.synchronize_stream(stream); // the trainer reads its loss (not the engine's wait)
  }
  eng.flush(stream);
  device.synchronize_stream(stream);
  return out;
}

/// The device operations of a step other than its per-matrix copies, which issue 11's P4 leaves
/// per matrix: the packs of each matrix's host-set rows into the D2H slots (gather_channels) and,
/// at a window's close, the scatter of each matrix's uploaded weights (scatter_channels).
std::uint64_t non_pack_runs(const step_counts& c) {
  return c.runs - c.named("gather_channels") - c.named("scatter_channels");
}

TEST(engine_launches, a_step_updates_every_matrix_with_one_batched_call_per_dtype_group) {
  for (const bool zen_auto : {false, true}) {
    SCOPED_TRACE(zen_auto ? "Zen-auto" : "fixed windows");
    const run_result two = count_run(2, 0, 10, zen_auto);
    const run_result eight = count_run(8, 0, 10, zen_auto);
    const run_result mixed = count_run(3, 5, 10, zen_auto);
    for (std::size_t t = 0; t < two.steps.size(); ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      EXPECT_EQ(two.steps[t].named("adamw_selective"), 1u);
      EXPECT_EQ(eight.steps[t].named("adamw_selective"), 1u);
      EXPECT_EQ(mixed.steps[t].named("adamw_selective"), 2u); // float and bfloat16
      if (!two.selection[t]) {
        // Everything but the copies is the same number of operations for 2 and 8 matrices, and
        // two more for a second dtype group (its batched norms in the prologue and its update).
        EXPECT_EQ(non_pack_runs(eight.steps[t]), non_pack_runs(two.steps[t]));
        EXPECT_EQ(non_pack_runs(mixed.steps[t]), non_pack_runs(two.steps[t]) + 2) << [&] {
          std::string s;
          for (const auto* c : {&two.steps[t], &mixed.steps[t]}) {
            for (const auto& [name, k] : c->by_name) {
              s += name + " " + std::to_string(k) + "; ";
            }
            s += "\n";
          }
          return s;
        }();
      }
      EXPECT_EQ(two.steps[t].named("advance_counts"), 0u);
    }
  }
}

TEST(engine_launches, a_selection_step_waits_for_the_device_at_most_once) {
  for (const bool zen_auto : {false, true}) {
    SCOPED_TRACE(zen_auto ? "Zen-auto" : "fixed windows");
    for (const int matrices : {2, 8}) {
      const run_result r = count_run(matrices, 2, 10, zen_auto);
      int selections = 0;
      for (std::size_t t = 0; t < r.steps.size(); ++t) {
        SCOPED_TRACE("matrices " + std::to_string(matrices) + ", step " + std::to_string(t));
        if (r.selection[t]) {
          ++selections;
          EXPECT_LE(r.steps[t].waits, 1u);
          EXPECT_EQ(r.steps[t].named("topk_segmented"), 1u); // every matrix in one call
          EXPECT_EQ(r.steps[t].named("topk"), 0u);
        } else {
          EXPECT_EQ(r.steps[t].waits, 0u); // an ordinary step never waits for the device
        }
      }
      EXPECT_EQ(selections, 3); // steps 0, 4, 8
    }
  }
}

// The engine's own threads (the D2H consumer, the host job's) start by making the engine's device
// current and, on CUDA, relaxing their stream-capture mode (backend.hpp, enter_engine_thread):
// a thread starts on device 0, and its event queries would break a user's global-mode capture.
// Counted on the emulated backend: exactly two threads entered, neither the training thread, and
// the job's thread once per job.
TEST(engine_launches, the_engines_own_threads_enter_before_their_first_device_call) {
  zenflow::config cfg = zf_engine_test::small_config(); // overlap on: jobs on the queue's thread
  cfg.update_interval = 2;
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  zenflow::emulated_backend_counts counts;
  std::vector<float> w = zf_test::random_values<float>(24 * 16, 3), g(w.size());
  {
    zenflow::engine<zenflow::emulated_backend> eng(cfg, zenflow::emulated_backend{device, &counts});
    eng.add_matrix(w.data(), g.data(), 24, 16);
    eng.initialize(stream);
    for (int t = 0; t < 9; ++t) { // windows close at 2, 4, 6, 8: four jobs
      device.synchronize_stream(stream);
      const auto fresh = zf_test::random_values<float>(g.size(), 50 + static_cast<std::uint64_t>(t));
      std::copy(fresh.begin(), fresh.end(), g.begin());
      (void)eng.step(1e-2f, stream);
    }
    eng.flush(stream);
    device.synchronize_stream(stream);
  }
  const auto entered = counts.engine_threads();
  ASSERT_EQ(entered.size(), 2u);
  EXPECT_EQ(entered.count(std::this_thread::get_id()), 0u) << "the training thread entered";
  std::uint64_t once = 0, more = 0;
  for (const auto& [id, k] : entered) {
    (k == 1 ? once : more) += 1;
  }
  EXPECT_EQ(once, 1u) << "the consumer enters once";
  EXPECT_EQ(more, 1u) << "the job's thread enters at every job";
}

// Issue 31: a steady step breaks none of the rules a GPU punishes (emulated_device::stats()): after
// warm-up (the first selections, window closes and migrations) no allocation, no free (each would
// synchronise the whole device, as cudaMalloc/cudaFree/cudaFreeHost do) and no copy from or to
// pageable host memory (it would run synchronously); and, over the whole run, no device call from a
// host task, no use after free, no stream or event destroyed with work still queued.
TEST(engine_launches, a_steady_step_allocates_nothing_frees_nothing_and_copies_no_pageable_memory) {
  std::vector<std::pair<std::string, zenflow::config>> modes;
  zenflow::config fixed = zf_engine_test::small_config();
  fixed.select_interval = 4;
  modes.emplace_back("zenflow fixed windows, overlap", fixed);
  zenflow::config sync = fixed;
  sync.overlap_step = false;
  sync.update_interval = 3;
  sync.select_interval = 6;
  modes.emplace_back("zenflow fixed windows, no overlap", sync);
  zenflow::config zen_auto = fixed;
  zen_auto.update_interval = 0;
  zen_auto.max_update_interval = 3;
  zen_auto.full_warm_up_rounds = 2;
  modes.emplace_back("zenflow Zen-auto with warm-up", zen_auto);
  zenflow::config offload = fixed;
  offload.mode = zenflow::optimizer_mode::offload_sync;
  modes.emplace_back("offload_sync", offload);
  zenflow::config gpu = fixed;
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  modes.emplace_back("gpu_adamw", gpu);
  for (const auto& [name, cfg] : modes) {
    SCOPED_TRACE(name);
    zenflow::emulated_device device;
    const cudaStream_t stream = device.create_stream();
    constexpr std::int64_t channels = 24;
    constexpr std::int64_t len = 16;
    const auto n = static_cast<std::size_t>(channels * len);
    std::vector<float> w0 = zf_test::random_values<float>(n, 1), g0(n);
    std::vector<zenflow::bfloat16> w1 = zf_test::random_values<zenflow::bfloat16>(n, 2), g1(n);
    std::vector<float> vec(7, 0.5f), vec_g(7);
    {
      zenflow::engine<zenflow::emulated_backend> eng(cfg, zenflow::emulated_backend{device});
      eng.add_matrix(w0.data(), g0.data(), channels, len);
      eng.add_matrix(w1.data(), g1.data(), channels, len);
      eng.add_vector(vec.data(), vec_g.data(), 7);
      eng.initialize(stream);
      constexpr int warm_up = 12; // three selections, several windows (and Zen-auto's warm-up)
      constexpr int steady = 12;
      zenflow::emulated_device_stats before{};
      for (int t = 0; t < warm_up + steady; ++t) {
        if (t == warm_up) {
          before = device.stats();
        }
        const auto seed = static_cast<std::uint64_t>(100 + t);
        device.launch(stream, [&, seed] { // the backward, stream-ordered
          const auto fill = [](auto& dst, const auto& src) {
            std::copy(src.begin(), src.end(), dst.begin());
          };
          fill(g0, zf_test::random_values<float>(n, seed));
          fill(g1, zf_test::random_values<zenflow::bfloat16>(n, seed + 1));
          fill(vec_g, zf_test::random_values<float>(7, seed + 2));
        });
        (void)eng.step(1e-2f, stream);
        device.synchronize_stream(stream); // the trainer reads its loss
      }
      const zenflow::emulated_device_stats after = device.stats();
      EXPECT_EQ(after.allocations - before.allocations, 0u) << "allocations in steady steps";
      EXPECT_EQ(after.frees - before.frees, 0u) << "frees in steady steps";
      EXPECT_EQ(after.pageable_copies - before.pageable_copies, 0u) << "pageable copies in steady steps";
      EXPECT_GT(after.allocations, 0u); // the engine's buffers are the device's allocations
      eng.flush(stream);
      device.synchronize_stream(stream);
    }
    const zenflow::emulated_device_stats end = device.stats();
    EXPECT_EQ(end.host_task_calls, 0u);
    EXPECT_EQ(end.use_after_free, 0u);
    EXPECT_EQ(end.busy_destroys, 0u);
    EXPECT_EQ(end.allocations, end.frees); // every buffer freed with the engine
    for (const std::string& line : device.reports()) {
      ADD_FAILURE() << line;
    }
  }
}

} // namespace
