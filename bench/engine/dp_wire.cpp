// zf_bench_dp_wire: bytes on the wire per step, data parallel (docs/data-parallel-design.md, "Bytes on
// the wire"). Run under mpiexec (any N >= 1); rank 0 prints one JSON object:
//
//   mpiexec -np 2 build/cpu/bench/engine/zf_bench_dp_wire [--steps 24] [--json FILE] > dp_wire.json
//
// "computed": for our shape lists (charlm's presets, a LLaMA-7B-like list) and N in {2, 8}, the
// selection traffic (one fp32 score per channel) against gathering the gradients, and the
// per-step bytes each rank sends in four schemes, from their arithmetic (ring collectives: an
// all-reduce sends 2 (N-1)/N x n, a reduce-scatter or all-gather (N-1)/N x n; N pipelined
// broadcasts, one per owner, of n/N each, (N-1)/N x n):
//   zenflow_engine_before  the engine before issue 12's reduce-scatter: mean all-reduce of every
//                       gradient (fp32) each step, the window's weights all-gathered by owner once
//                       per window;
//   zenflow_engine_now  this engine: every step the selected gradients and vectors all-reduced
//                       (fp32), the unselected reduce-scattered by owner (fp32), one float per
//                       channel all-gathered (the scores) and a flag per parameter; a selection
//                       step (1 in select_interval) adds the entering rows' gradients from their
//                       owners (bf16; counted as if every selected row entered: an upper bound);
//                       the weights all-gathered once per window (Zen-auto and
//                       select_on_mass_drop add one float per unselected channel, not here);
//   zenflow_design      SPEC's design: scores all-reduced on a selection step, the selected
//                       gradients and vectors all-reduced (fp32), the unselected reduce-scattered
//                       by owner (fp32), the weights all-gathered once per window;
//   deepspeed_stage12   DeepSpeed's ZenFlow on ZeRO 1/2 (deepspeed/runtime/zenflow/
//                       zenflow_stage_1_and_2.py): ZeRO's reduce-scatter of every gradient (bf16),
//                       the owners' broadcast of the selected gradient slices (bf16) every step,
//                       the selected indices (int32) on a selection step, the bf16 weights
//                       all-gathered after each host update (once per window);
//   deepspeed_stage3    the same with ZeRO 3's selection (engine_stage3.py): an all-gather of the
//                       per-column sums (model dtype, bf16) instead of the index broadcast (the per-layer
//                       parameter all-gathers of ZeRO 3's forward and backward are not counted).
//   zero3_engine, zero3_trainer, zero3_total  the sharded engine (ZeRO-3, dp_zero3.hpp): the
//                       vectors' fp32 all-reduce, one fp32 score per channel all-gathered, the
//                       flags; the trainer's reduce-scatter of the gradients (fp32) and
//                       all-gather of the working weights (bf16) once per step (a trainer that
//                       gathers a layer again for its backward adds 2 P (N-1)/N); Zen-auto and
//                       select_on_mass_drop add one float per channel, not here.
// "computed_memory": per rank, ZeRO-2 (owner_partition, NCCL's path) against ZeRO-3 (sharded),
// the largest rank's bytes per parameter of the whole model by term (dp_shapes.hpp's
// memory_formula), for LLaMA-7B in bf16 and charlm "cpu" in fp32, N in {1, 2, 8}.
// "measured": the engine (host backend, mpi_communicator) on charlm's "cpu" shapes with random
// gradients: each rank's comm_bytes and d2h_bytes from stats() per step, against the formulas.
// "measured_device_communicator": the same on the emulated backend over a device communicator
// (emulated_device_communicator: the path NCCL takes): the same reduce-scatter by owner, the
// per-channel numbers summed over the ranks instead of gathered ("device_split_step_input").
// Each also has this rank's stats().memory against memory_formula ("memory", "memory_formula",
// "memory_per_param").
// "measured_zero3", "measured_zero3_device_communicator": the sharded engine the same two ways,
// fed by the trainer's reduce_scatter_shard and followed by all_gather_shard: every step's
// comm_bytes against the formula, the trainer's bytes computed, the memory as above.
// "planner": zenflow::plan (zf_plan --zero 2|3) on the same shapes over N GPUs, its buffers
// against the runs' (one GPU: the largest rank's; the node: the sum over the ranks).
// A measured figure that differs from its formula or the planner's is printed on stderr
// ("MISMATCH", counted under "mismatches") and the exit status is 1 (cpu.bench.dp_wire_np3).
//
//   mpiexec -np 3 build/cpu/bench/engine/zf_bench_dp_wire --rss-params 60 [--rss-layers 24]
//       [--rss-hidden 2048] [--rss-steps 10] [--rss-within 0.01] [--json FILE]
// measures instead each rank's resident memory against the engine's count and the planner's
// (dp_rss.hpp): "rss".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <mpi.h>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "dp_rss.hpp"
#include "dp_shapes.hpp"
#include "dp_zero3.hpp"

namespace {

using namespace zf_bench_dp;

nlohmann::json computed(const std::string& name,
                        const std::vector<tensor>& list,
                        double r,
                        int n,
                        double window,
                        double select_every) {
  double P = 0, V = 0, C = 0, K = 0, KL = 0; // elements, vector elements, channels, selected
  for (const auto& t : list) {
    if (t.matrix) {
      const auto k =
          static_cast<double>(std::max<std::int64_t>(1, static_cast<std::int64_t>(r * t.channels)));
      P += static_cast<double>(t.channels * t.len);
      C += static_cast<double>(t.channels);
      K += k;
      KL += k * static_cast<double>(t.len);
    } else {
      V += static_cast<double>(t.len);
    }
  }
  const double N = n, ring = (N - 1) / N, all = P + V, U = P - KL; // U: unselected elements
  nlohmann::json j;
  j["shapes"] = name;
  j["ranks"] = n;
  j["topk_ratio"] = r;
  j["window_steps"] = window;
  j["select_interval"] = select_every;
  j["parameters"] = all;
  j["matrix_channels"] = C;
  // Selection traffic: one fp32 score per channel, against the gradients themselves.
  j["selection_bytes"] = 4 * C;
  j["gradient_bytes_bf16"] = 2 * P;
  j["gradient_bytes_fp32"] = 4 * P;
  j["gradients_over_selection_bf16"] = 2 * P / (4 * C);
  j["gradients_over_selection_fp32"] = 4 * P / (4 * C);
  // Per step, per rank, bytes sent (ring model), amortized over the window and selection interval.
  const double before = 2 * ring * 4 * all;                                   // every gradient's mean
  const double split = 2 * ring * 4 * (KL + V) + ring * 4 * U + ring * 4 * C; // + the scores
  j["per_step_sent"] = {
      {"zenflow_engine_before", before + ring * 2 * U / window},
      {"zenflow_engine_now", split + ring * 2 * KL / select_every + ring * 2 * U / window},
      {"zenflow_design",
       2 * ring * 4 * C / select_every + 2 * ring * 4 * (KL + V) + ring * 4 * U + ring * 2 * U / window},
      {"deepspeed_stage12",
       ring * 2 * all + ring * 2 * (KL + V) + ring * 4 * K / select_every + ring * 2 * all / window},
      {"deepspeed_stage3",
       ring * 2 * all + ring * 2 * (KL + V) + ring * 2 * C / select_every + ring * 2 * all / window},
  };
  // ZeRO-3 (the sharded engine, dp_zero3.hpp): the engine's vectors' mean, scores and flags (the
  // rescans only past fp32's range), nothing per window; the trainer's reduce-scatter of the
  // gradients (fp32) and all-gather of the working weights (bf16), once each per step.
  const double flags = static_cast<double>(list.size());
  const double zero3_engine = 2 * ring * 4 * V + ring * 4 * C + 2 * ring * 4 * flags;
  const double zero3_trainer = ring * 4 * P + ring * 2 * P;
  j["per_step_sent"]["zero3_engine"] = zero3_engine;
  j["per_step_sent"]["zero3_trainer"] = zero3_trainer;
  j["per_step_sent"]["zero3_total"] = zero3_engine + zero3_trainer;
  j["dense_allreduce_bf16"] = 2 * ring * 2 * all; // plain data parallel, for scale
  return j;
}

// `Device`: the same run on the emulated device over MPI as a device communicator (NCCL's path:
// the reduce-scatter by owner in device memory, the per-channel numbers summed over the ranks).
template <bool Device>
nlohmann::json measured(int steps) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const auto list = charlm(8, 16, 512, 4); // the "cpu" preset
  const zenflow::config cfg = measured_config();
  std::vector<std::vector<float>> w, g;
  std::mt19937_64 gen(7); // the same weights on every rank
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (const auto& t : list) {
    w.emplace_back(static_cast<std::size_t>(t.channels * t.len));
    g.emplace_back(w.back().size());
    for (auto& x : w.back()) {
      x = nd(gen);
    }
  }
  zenflow::emulated_device device; // outlives the engine
  const cudaStream_t stream = Device ? device.create_stream() : nullptr;
  using backend = std::conditional_t<Device, zenflow::emulated_backend, zenflow::host_backend>;
  using comm = std::conditional_t<Device, zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                  zenflow::mpi_communicator>;
  auto make = [&] {
    if constexpr (Device) {
      return zenflow::engine<backend, comm>(cfg, zenflow::emulated_backend{device},
                                            comm(device, zenflow::mpi_communicator(MPI_COMM_WORLD)));
    } else {
      return zenflow::engine<backend, comm>(cfg, {}, zenflow::mpi_communicator(MPI_COMM_WORLD));
    }
  };
  auto e = make();
  std::vector<zenflow::param_id> ids;
  for (std::size_t p = 0; p < list.size(); ++p) {
    ids.push_back(list[p].matrix ? e.add_matrix(w[p].data(), g[p].data(), list[p].channels, list[p].len)
                                 : e.add_vector(w[p].data(), g[p].data(), list[p].len));
  }
  e.initialize(stream);
  std::uint64_t elements = 0;
  for (const auto& t : list) {
    elements += static_cast<std::uint64_t>(t.channels * t.len);
  }
  std::mt19937_64 ggen(100 + static_cast<std::uint64_t>(rank)); // every rank its own gradients
  nlohmann::json per_step = nlohmann::json::array();
  for (int t = 0; t < steps; ++t) {
    device.synchronize(); // the step before has read the gradients (emulated device)
    for (auto& v : g) {
      for (auto& x : v) {
        x = nd(ggen);
      }
    }
    const auto rep = e.step(1e-3f, stream);
    per_step.push_back({{"step", t},
                        {"selection", rep.selection},
                        {"window_closed", rep.window_closed},
                        {"comm_bytes", rep.comm_bytes},
                        {"d2h_bytes", rep.d2h_bytes}});
  }
  e.flush(stream);
  const auto summed = e.stats_over_ranks(stream);
  // This rank's share of the unselected gradient bytes (fp32 here), per step after the first
  // selection: its block of every matrix minus the device set. And what a step with fixed device
  // sets puts into collectives (the engine's counting: an all-reduce's whole input, of the
  // reduce-scatter the other blocks' rows, this rank's block of scores, a flag per parameter).
  std::uint64_t own_grad_bytes = 0, all_unselected_bytes = 0, model_bytes = 0;
  std::uint64_t dense = 0, others = 0, own_channels = 0, own_rows = 0, all_channels = 0, all_rows = 0;
  for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
    model_bytes += static_cast<std::uint64_t>(list[p].channels * list[p].len) * 4;
    if (!list[p].matrix) {
      dense += static_cast<std::uint64_t>(list[p].len);
      continue;
    }
    const auto sel = e.selected(ids[p]);
    dense += sel.size() * static_cast<std::uint64_t>(list[p].len);
    std::int64_t own = 0;
    for (std::int64_t c = e.partition().begin(m, rank); c < e.partition().end(m, rank); ++c) {
      own += std::binary_search(sel.begin(), sel.end(), static_cast<std::int32_t>(c)) ? 0 : 1;
    }
    const auto unselected = static_cast<std::uint64_t>(list[p].channels) - sel.size();
    others += (unselected - static_cast<std::uint64_t>(own)) * static_cast<std::uint64_t>(list[p].len);
    own_channels += static_cast<std::uint64_t>(e.partition().count(m, rank));
    all_channels += static_cast<std::uint64_t>(list[p].channels);
    all_rows += unselected;
    own_rows += static_cast<std::uint64_t>(own);
    own_grad_bytes += static_cast<std::uint64_t>(own * list[p].len) * 4;
    all_unselected_bytes +=
        static_cast<std::uint64_t>((list[p].channels - cfg.topk(list[p].channels)) * list[p].len) * 4;
    ++m;
  }
  // The steps that applied no window and made no selection: their measured bytes, against the
  // formula (which takes the last selection's device sets: the steps after it). A selection step
  // adds its entering rows (gradients and state) and applies the window before it.
  std::vector<std::uint64_t> plain, selection;
  for (const auto& s : per_step) {
    if (s["selection"].get<bool>()) {
      selection.push_back(s["comm_bytes"].get<std::uint64_t>());
      plain.clear();
    } else if (!s["window_closed"].get<bool>()) {
      plain.push_back(s["comm_bytes"].get<std::uint64_t>());
    }
  }
  nlohmann::json j;
  j["shapes"] = "charlm cpu (V=48, C=8, E=16, H=512, 4 layers), fp32";
  j["path"] = Device ? "emulated backend, emulated_device_communicator<mpi_communicator> (NCCL's path)"
                     : "host backend, mpi_communicator";
  j["ranks"] = n;
  j["rank"] = rank;
  j["parameters"] = elements;
  j["config"] = {{"topk_ratio", cfg.topk_ratio},
                 {"select_interval", cfg.select_interval},
                 {"update_interval", cfg.update_interval}};
  j["plain_step_comm_bytes"] = plain;         // measured, this engine, after the last selection
  j["selection_step_comm_bytes"] = selection; // measured: split + entering rows + migration + window
  // The rest masses (one float per unselected row of its block) where Zen-auto or
  // select_on_mass_drop read them.
  const bool masses = cfg.auto_update() || cfg.mass_trigger();
  const std::uint64_t rest = masses ? own_rows : 0;
  j["formula"] = {
      {"mean_allreduce_input_per_step", 4 * elements},
      {"split_step_input", 4 * (dense + others + own_channels + list.size() + rest)},
      {"split_allreduce_input", 4 * dense},
      {"split_reduce_scatter_sent", 4 * others},
      {"split_scores_and_flags", 4 * (own_channels + list.size())},
      {"split_rest_masses", 4 * rest},
      // a device communicator: the scores (4 B) and fp64 rescans (8 B) of every
      // channel and the rest masses of every unselected row, summed over the ranks
      {"device_split_step_input",
       4 * (dense + others + all_channels + list.size() + (masses ? all_rows : 0)) + 8 * all_channels},
      {"window_allgather_input", own_grad_bytes},
      {"own_unselected_grad_bytes_per_step", own_grad_bytes},
      {"one_rank_unselected_grad_bytes_per_step", all_unselected_bytes},
      {"one_nth_of_unselected", static_cast<double>(all_unselected_bytes) / n},
      {"model_bytes", model_bytes}};
  j["per_step"] = per_step;
  j["stats"] = {{"comm_bytes", e.stats().comm_bytes},
                {"d2h_bytes", e.stats().d2h_bytes},
                {"host_state_bytes", e.stats().memory.host_state},
                {"host_jobs", e.stats().host_jobs}};
  // Memory per rank against the arithmetic (dp_shapes.hpp's memory_formula).
  const nlohmann::json mem = memory_measured(e.stats().memory);
  const nlohmann::json mem_formula = memory_formula(list, e.partition(), rank, cfg, 4, false, Device);
  j["memory"] = mem;
  j["memory_formula"] = mem_formula;
  j["memory_per_param"] = per_param(mem, mem_formula, static_cast<double>(elements));
  std::vector<std::string> mismatches;
  for (const auto& s : memory_mismatches(mem, mem_formula)) {
    mismatches.push_back("zero2 memory " + s);
  }
  // A plain step's bytes (one rank sends nothing: the engine is a one-rank engine).
  const std::uint64_t want =
      n == 1 ? 0 : j["formula"][Device ? "device_split_step_input" : "split_step_input"].get<std::uint64_t>();
  for (const std::uint64_t got : plain) {
    if (got != want) {
      mismatches.push_back("zero2 plain step: comm_bytes " + std::to_string(got) + ", formula " +
                           std::to_string(want));
    }
  }
  j["mismatches"] = mismatches;
  j["summed_over_ranks"] = {{"comm_bytes", summed.comm_bytes},
                            {"d2h_bytes", summed.d2h_bytes},
                            {"host_state_bytes", summed.memory.host_state}};
  return j;
}

/// --rss-params: every rank's resident memory against the planner (dp_rss.hpp); rank 0 prints.
int rss_main(double millions, int layers, int hidden, int steps, double within, const std::string& json) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const std::string mine = measured_rss(millions, layers, hidden, steps).dump();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(n)), offs(static_cast<std::size_t>(n));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < n; ++i) {
    offs[static_cast<std::size_t>(i)] = total;
    total += lens[static_cast<std::size_t>(i)];
  }
  std::string all(static_cast<std::size_t>(rank == 0 ? total : 0), '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  int mismatches = 0;
  if (rank == 0) {
    nlohmann::json runs = nlohmann::json::array();
    for (int i = 0; i < n; ++i) {
      runs.push_back(
          nlohmann::json::parse(all.substr(static_cast<std::size_t>(offs[static_cast<std::size_t>(i)]),
                                           static_cast<std::size_t>(lens[static_cast<std::size_t>(i)]))));
    }
    std::vector<std::string> bad;
    nlohmann::json out;
    out["rss"] = rss_check(runs, millions, layers, hidden, within, bad);
    out["rss"]["runs"] = runs;
    for (const auto& m : bad) {
      std::fprintf(stderr, "zf_bench_dp_wire: MISMATCH %s\n", m.c_str());
      ++mismatches;
    }
    out["mismatches"] = mismatches;
    if (json.empty()) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::ofstream(json) << out.dump(2) << "\n";
    }
  }
  MPI_Bcast(&mismatches, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return mismatches == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int steps = 24;
  std::string json; // --json FILE: rank 0's JSON there instead of on stdout
  double rss_params = 0, rss_within = 0.01;
  int rss_layers = 24, rss_hidden = 2048, rss_steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool number = a == "--steps" || a == "--rss-params" || a == "--rss-layers" || a == "--rss-hidden" ||
                        a == "--rss-steps" || a == "--rss-within";
    const bool valued = (number || a == "--json") && i + 1 < argc;
    double parsed = 0;
    if (valued && number) {
      try {
        parsed = std::stod(argv[i + 1]);
      } catch (const std::exception&) {
        parsed = 0;
      }
    }
    if (!valued || (number && !(parsed > 0))) {
      std::fprintf(stderr,
                   "zf_bench_dp_wire: bad option '%s' (use --steps N >= 1, --json FILE, --rss-params M > 0, "
                   "--rss-layers, --rss-hidden, --rss-steps, --rss-within > 0)\n",
                   a.c_str());
      MPI_Finalize();
      return 2;
    }
    if (a == "--steps") {
      steps = std::max(1, static_cast<int>(parsed));
    } else if (a == "--rss-params") {
      rss_params = parsed;
    } else if (a == "--rss-layers") {
      rss_layers = static_cast<int>(parsed);
    } else if (a == "--rss-hidden") {
      rss_hidden = static_cast<int>(parsed);
    } else if (a == "--rss-steps") {
      rss_steps = static_cast<int>(parsed);
    } else if (a == "--rss-within") {
      rss_within = parsed;
    } else {
      json = argv[i + 1];
    }
    ++i;
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rss_params > 0) {
    return rss_main(rss_params, rss_layers, rss_hidden, rss_steps, rss_within, json);
  }
  nlohmann::json out;
  out["computed"] = nlohmann::json::array();
  const double r = 0.1;
  for (const int ranks : {2, 8}) {
    for (const double window : {1.0, 4.0}) {
      out["computed"].push_back(computed("charlm cpu", charlm(8, 16, 512, 4), r, ranks, window, 100));
      out["computed"].push_back(computed("charlm h200", charlm(16, 64, 8192, 24), r, ranks, window, 100));
      out["computed"].push_back(computed("llama-7b", llama7b(), r, ranks, window, 100));
    }
  }
  // Every rank's measured figures, gathered to rank 0 as JSON text.
  out["computed_memory"] = nlohmann::json::array();
  for (const int ranks : {1, 2, 8}) {
    out["computed_memory"].push_back(computed_memory("llama-7b, bf16", llama7b(), ranks, 2));
    out["computed_memory"].push_back(computed_memory("charlm cpu, fp32", charlm(8, 16, 512, 4), ranks, 4));
  }
  const std::string mine = nlohmann::json{{"host", measured<false>(steps)},
                                          {"device", measured<true>(steps)},
                                          {"zero3_host", measured_zero3<false>(steps)},
                                          {"zero3_device", measured_zero3<true>(steps)}}
                               .dump();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(n)), offs(static_cast<std::size_t>(n));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < n; ++i) {
    offs[static_cast<std::size_t>(i)] = total;
    total += lens[static_cast<std::size_t>(i)];
  }
  std::string all(static_cast<std::size_t>(rank == 0 ? total : 0), '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  int mismatches = 0; // measured against the formulas, every rank's (rank 0 counts them)
  if (rank == 0) {
    out["measured"] = nlohmann::json::array();
    out["measured_device_communicator"] = nlohmann::json::array();
    out["measured_zero3"] = nlohmann::json::array();
    out["measured_zero3_device_communicator"] = nlohmann::json::array();
    for (int i = 0; i < n; ++i) {
      const auto both =
          nlohmann::json::parse(all.substr(static_cast<std::size_t>(offs[static_cast<std::size_t>(i)]),
                                           static_cast<std::size_t>(lens[static_cast<std::size_t>(i)])));
      out["measured"].push_back(both["host"]);
      out["measured_device_communicator"].push_back(both["device"]);
      out["measured_zero3"].push_back(both["zero3_host"]);
      out["measured_zero3_device_communicator"].push_back(both["zero3_device"]);
      for (const char* run : {"host", "device", "zero3_host", "zero3_device"}) {
        for (const auto& m : both[run]["mismatches"]) {
          std::fprintf(stderr, "zf_bench_dp_wire: MISMATCH rank %d, %s: %s\n", i, run,
                       m.get<std::string>().c_str());
          ++mismatches;
        }
      }
    }
    // The planner against the same runs (ZeRO-2 and ZeRO-3, both communicators).
    out["planner"] = nlohmann::json::array();
    std::vector<std::string> planner;
    for (const auto& [key, sharded, device] :
         {std::tuple{"measured", false, false}, std::tuple{"measured_device_communicator", false, true},
          std::tuple{"measured_zero3", true, false},
          std::tuple{"measured_zero3_device_communicator", true, true}}) {
      auto p = planner_check(out[key], sharded, device, planner);
      p["runs"] = key;
      out["planner"].push_back(p);
    }
    for (const auto& m : planner) {
      std::fprintf(stderr, "zf_bench_dp_wire: MISMATCH %s\n", m.c_str());
      ++mismatches;
    }
    out["mismatches"] = mismatches;
    if (json.empty()) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::ofstream(json) << out.dump(2) << "\n";
    }
  }
  MPI_Bcast(&mismatches, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return mismatches == 0 ? 0 : 1;
}
