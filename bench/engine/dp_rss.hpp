// zf_bench_dp_wire --rss-params M: the process's resident memory (/proc/self/statm) of each rank
// against what the engine counts (stats().memory, and your weights and gradients) and what the
// planner predicts (zenflow::plan over the ranks), on the emulated device over
// emulated_device_communicator (the path NCCL takes, what the planner models), whose "device"
// memory is the process's too. A uniform model of M million bf16 parameters
// (plan_model::uniform: --rss-layers matrices of --rss-hidden channels), ZeRO-2 with the measured
// runs' settings (dp_shapes.hpp) and the defaults (reduce_in_place, a 25 MiB bucket). Each rank
// reads its resident bytes before it allocates the weights and gradients and after the steps (a
// selection, windows closed, every buffer written), less the emulated device's quarantine of
// freed memory (kept resident to catch a use after free: no allocation's) and of the MPI model's
// staging (mpi_communicator::staging_bytes: its largest gather's; its reductions run in rounds of
// 1 MiB: the communicator's own scratch, as NCCL's is), after the allocator returned its free
// lists (malloc_trim: freed temporaries of initialize()). The check: the sum
// over the ranks within `--rss-within` (1%) of the planner's node (its host bytes and every
// rank's device bytes); each rank's also reported against the engine's own count.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <malloc.h>
#include <mpi.h>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/plan.hpp>

#include "dp_shapes.hpp"

namespace zf_bench_dp {

/// The process's resident bytes; NaN where /proc/self/statm cannot be read.
inline double resident_bytes() {
  std::ifstream f("/proc/self/statm");
  double pages = 0, resident = 0;
  if (!(f >> pages >> resident)) {
    return std::nan("");
  }
  return resident * 4096.0;
}

/// This rank's resident growth, the engine's count and the planner's rank figures (see the file
/// comment). `millions`: the model's parameters; `layers` x `hidden`: its matrices.
inline nlohmann::json measured_rss(double millions, std::int64_t layers, std::int64_t hidden, int steps) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  using comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  using bf16 = zenflow::bfloat16;
  const zenflow::plan_model model = zenflow::plan_model::uniform(millions * 1e6, layers, hidden);
  const zenflow::plan_matrix shape = model.matrices[0];
  const zenflow::config cfg = measured_config();
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  // The MPI model's rounds of 1 MiB (its staging and fold buffers are the communicator's, not the
  // engine's, as NCCL's are: at the default 64 MiB they add ~100 MB a rank here).
  zenflow::mpi_options rounds;
  rounds.max_gather_bytes = std::size_t{1} << 20;
  comm c(device, zenflow::mpi_communicator(MPI_COMM_WORLD, rounds));
  MPI_Barrier(MPI_COMM_WORLD);
  const double before = resident_bytes();
  const auto elements = static_cast<std::size_t>(shape.channels * shape.channel_len);
  std::vector<std::vector<bf16>> w(static_cast<std::size_t>(shape.count)), g(w.size());
  std::mt19937_64 gen(11); // the same weights on every rank
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (std::size_t m = 0; m < w.size(); ++m) {
    w[m].resize(elements);
    g[m].resize(elements);
    for (auto& x : w[m]) {
      x = zenflow::from_float<bf16>(nd(gen));
    }
  }
  double counted_user = 0;
  {
    zenflow::engine<zenflow::emulated_backend, comm> e(cfg, zenflow::emulated_backend{device}, std::move(c));
    for (std::size_t m = 0; m < w.size(); ++m) {
      (void)e.add_matrix(w[m].data(), g[m].data(), shape.channels, shape.channel_len);
      counted_user += 2.0 * static_cast<double>(elements) * sizeof(bf16);
    }
    e.initialize(stream);
    std::mt19937_64 ggen(100 + static_cast<std::uint64_t>(rank)); // every rank its own gradients
    for (int t = 0; t < steps; ++t) {
      device.synchronize_stream(stream); // the step before has read the gradients
      for (auto& v : g) {
        for (auto& x : v) {
          x = zenflow::from_float<bf16>(nd(ggen));
        }
      }
      (void)e.step(1e-3f, stream);
    }
    e.flush(stream);
    device.synchronize();
    // The allocator's free lists back to the system first: initialize()'s temporaries (a
    // matrix's weights widened to fp32 to take this rank's block of them) stay in the heap once
    // freed, resident but no allocation's.
    malloc_trim(0);
    const double after = resident_bytes();
    const double quarantine = static_cast<double>(device.quarantined_bytes());
    const double mpi = static_cast<double>(e.comm().wrapped().staging_bytes());
    const auto mem = e.stats().memory;
    nlohmann::json j;
    j["rank"] = rank;
    j["resident_before"] = before;
    j["resident_after"] = after;
    j["quarantine"] = quarantine;
    j["mpi_staging"] = mpi;
    j["growth"] = after - before - quarantine - mpi;
    j["engine_host"] = static_cast<double>(mem.host_total());
    j["engine_device"] = static_cast<double>(mem.device_total());
    j["weights_and_grads"] = counted_user;
    j["counted"] = static_cast<double>(mem.host_total() + mem.device_total()) + counted_user;
    j["memory"] = memory_measured(mem);
    return j;
  }
}

/// Rank 0: every rank's figures `runs` against the planner (file comment). Appends to `mismatches`.
inline nlohmann::json rss_check(const nlohmann::json& runs,
                                double millions,
                                std::int64_t layers,
                                std::int64_t hidden,
                                double within,
                                std::vector<std::string>& mismatches) {
  const zenflow::plan_model model = zenflow::plan_model::uniform(millions * 1e6, layers, hidden);
  zenflow::plan_hardware hw{.host_bytes_per_s = 1e10, .pcie_bytes_per_s = 1e9, .step_s = 1e-2};
  hw.gpus = static_cast<std::int64_t>(runs.size());
  const zenflow::plan_result r = zenflow::plan(model, hw, zenflow::plan_config::of(measured_config()));
  double growth = 0, counted = 0, device = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t q = 0; q < runs.size(); ++q) {
    const auto& run = runs[q];
    const double d = r.device_by_rank.empty() ? r.device.total() : r.device_by_rank[q].total();
    growth += run["growth"].get<double>();
    counted += run["counted"].get<double>();
    device += d;
    ranks.push_back({{"rank", q},
                     {"growth", run["growth"]},
                     {"counted", run["counted"]},
                     {"growth_over_counted", run["growth"].get<double>() / run["counted"].get<double>()},
                     {"planner_device", d}});
  }
  const double planned = r.host.total() + device;
  const double ratio = growth / planned;
  if (!(std::abs(ratio - 1.0) <= within)) {
    mismatches.push_back("resident memory over the ranks " + std::to_string(growth) + " B, planner " +
                         std::to_string(planned) + " B (ratio " + std::to_string(ratio) + ", allowed " +
                         std::to_string(within) + ")");
  }
  return {{"model",
           {{"params", model.params()},
            {"matrices", layers},
            {"channels", hidden},
            {"channel_len", model.matrices[0].channel_len},
            {"elem_bytes", 2}}},
          {"ranks", ranks},
          {"summed_growth", growth},
          {"summed_counted", counted},
          {"planner_host", r.host.total()},
          {"planner_devices", device},
          {"planner_node", planned},
          {"growth_over_planner", ratio},
          {"growth_over_counted", growth / counted},
          {"counted_over_planner", counted / planned},
          {"within", within}};
}

} // namespace zf_bench_dp
