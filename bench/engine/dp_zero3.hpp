// zf_bench_dp_wire's ZeRO-3 side (dp_wire.cpp): the sharded engine (engine<Backend, sharded<Comm>>)
// on charlm's "cpu" shapes with the trainer's helpers (comm/shard.hpp) around it, each rank's
// bytes on the wire per step and memory against their arithmetic.
//
// The engine's bytes per step (what it puts into collectives, stats' comm_bytes): the vectors'
// fp32 all-reduce (4 V), its shard's scores all-gathered (4 B per channel of its shards), a flag
// per parameter ORed (4 B each); the fp64 rescans (8 B per channel of every matrix) only when a
// score is not finite, over a host communicator (a device communicator's are stream-ordered and
// always cross). One rank: the scores only. Nothing per window (every host row is the rank's own),
// nothing more at a selection with sq_l2 importance (L1 gathers the scores once more). With
// Zen-auto or select_on_mass_drop (on here, as in the ZeRO-2 run) every step adds its rows' L1
// masses and its device-set counts (4 B each per matrix), one all-gather.
// The trainer's bytes per step (the helpers report none: computed from the layout), in the
// engine's way of counting (a collective's input): reduce_scatter_shard's whole fp32 matrix
// (4 P) and all_gather_shard's own shard of the working weights (s x its elements); on a ring
// these send 4 P (N-1)/N and s P (N-1)/N.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mpi.h>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/plan.hpp>
#include <zenflow/engine/sharded.hpp>

#include "dp_shapes.hpp"

namespace zf_bench_dp {

/// `Device`: the emulated backend over emulated_device_communicator<mpi_communicator> (NCCL's
/// path); else the host backend over mpi_communicator. The trainer's helpers run over their own
/// mpi_communicator (host memory: the emulated device's is the process's).
template <bool Device>
nlohmann::json measured_zero3(int steps) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const auto list = charlm(8, 16, 512, 4); // the "cpu" preset
  const zenflow::config cfg = measured_config();
  std::vector<zenflow::shard_matrix> matrices;
  for (const auto& t : list) {
    if (t.matrix) {
      matrices.push_back({t.channels, t.len, 12});
    }
  }
  const zenflow::shard_layout layout = zenflow::shard_channels(matrices, n);
  zenflow::mpi_communicator trainer(MPI_COMM_WORLD);
  std::vector<float> staging(std::max<std::size_t>(zenflow::shard_staging_floats(layout, rank), 1));
  // full: the whole weights (the same on every rank) and this rank's whole gradient; w, g: what
  // the engine holds (a matrix's shard, a vector whole).
  std::vector<std::vector<float>> full, grad, w, g;
  std::mt19937_64 gen(7);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
    const auto& t = list[p];
    full.emplace_back(static_cast<std::size_t>(t.channels * t.len));
    for (auto& x : full.back()) {
      x = nd(gen);
    }
    grad.emplace_back(full.back().size());
    if (!t.matrix) {
      w.push_back(full.back());
    } else {
      const auto first = layout.first(m, rank) * t.len;
      w.emplace_back(full.back().begin() + first,
                     full.back().begin() + first + static_cast<std::int64_t>(layout.shard_elements(m, rank)));
      ++m;
    }
    g.emplace_back(w.back().size());
  }
  zenflow::emulated_device device;
  const cudaStream_t stream = Device ? device.create_stream() : nullptr;
  using backend = std::conditional_t<Device, zenflow::emulated_backend, zenflow::host_backend>;
  using comm = std::conditional_t<Device, zenflow::emulated_device_communicator<zenflow::mpi_communicator>,
                                  zenflow::mpi_communicator>;
  using engine_type = zenflow::engine<backend, zenflow::sharded<comm>>;
  auto make = [&] {
    if constexpr (Device) {
      return engine_type(cfg, zenflow::emulated_backend{device},
                         comm(device, zenflow::mpi_communicator(MPI_COMM_WORLD)));
    } else {
      return engine_type(cfg, {}, zenflow::mpi_communicator(MPI_COMM_WORLD));
    }
  };
  auto e = make();
  std::vector<zenflow::param_id> ids(list.size());
  for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
    const auto& t = list[p];
    if (!t.matrix) {
      ids[p] = e.add_vector(w[p].data(), g[p].data(), t.len);
      continue;
    }
    ids[p] = e.add_matrix(w[p].data(), g[p].data(), layout.count(m, rank), t.len,
                          {.shard = zenflow::shard_range{layout.first(m, rank), t.channels}});
    ++m;
  }
  // Per matrix: a selection put more of its top-k in this shard than the rows its share reserved
  // (the sharded engine's fallback grows them to min(k, its rows)): tracked from the sets.
  std::vector<char> grown(matrices.size(), 0);
  e.initialize(stream);
  // The formula's parts, for this rank.
  std::uint64_t vector_elems = 0, own_channels = 0, all_channels = 0, matrix_elems = 0, own_elems = 0;
  for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
    const auto& t = list[p];
    if (!t.matrix) {
      vector_elems += static_cast<std::uint64_t>(t.len);
      continue;
    }
    own_channels += static_cast<std::uint64_t>(layout.count(m, rank));
    all_channels += static_cast<std::uint64_t>(t.channels);
    matrix_elems += static_cast<std::uint64_t>(t.channels * t.len);
    own_elems += layout.shard_elements(m, rank);
    ++m;
  }
  const bool active = n > 1;
  // Zen-auto or the mass trigger: every rank's row masses and device-set counts, one all-gather.
  const std::uint64_t masses =
      active && (cfg.auto_update() || cfg.mass_trigger()) ? 4 * (own_channels + matrices.size()) : 0;
  const std::uint64_t engine_step = (active ? 4 * vector_elems + 4 * list.size() : 0) + 4 * own_channels +
                                    (Device && active ? 8 * all_channels : 0) + masses;
  std::mt19937_64 ggen(100 + static_cast<std::uint64_t>(rank)); // every rank its own gradients
  nlohmann::json per_step = nlohmann::json::array();
  std::vector<std::string> mismatches;
  for (int t = 0; t < steps; ++t) {
    device.synchronize(); // the step before has read the gradients
    for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
      for (auto& x : grad[p]) {
        x = nd(ggen);
      }
      const auto& sh = list[p];
      if (!sh.matrix) {
        std::copy(grad[p].begin(), grad[p].end(), g[p].begin()); // the engine means the vectors
        continue;
      }
      const zenflow::channel_matrix<const float> mine{grad[p].data(), sh.channels, sh.len, sh.len,
                                                      zenflow::channel_layout::contiguous};
      const zenflow::channel_matrix<float> out{g[p].data(), layout.count(m, rank), sh.len, sh.len,
                                               zenflow::channel_layout::contiguous};
      zenflow::reduce_scatter_shard(trainer, layout, m, mine, out, std::span<float>(staging), nullptr);
      ++m;
    }
    const auto rep = e.step(1e-3f, stream);
    e.flush(stream); // the new shards in w before the trainer gathers them
    device.synchronize();
    for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
      const auto& sh = list[p];
      if (!sh.matrix) {
        continue;
      }
      const zenflow::channel_matrix<const float> shard{w[p].data(), layout.count(m, rank), sh.len, sh.len,
                                                       zenflow::channel_layout::contiguous};
      const zenflow::channel_matrix<float> whole{full[p].data(), sh.channels, sh.len, sh.len,
                                                 zenflow::channel_layout::contiguous};
      zenflow::all_gather_shard(trainer, layout, m, shard, whole, nullptr);
      ++m;
    }
    for (std::size_t p = 0, m = 0; p < list.size(); ++p) {
      if (!list[p].matrix) {
        continue;
      }
      const double k = static_cast<double>(cfg.topk(list[p].channels));
      const double c = static_cast<double>(layout.count(m, rank));
      const double share = std::ceil(k * c / static_cast<double>(list[p].channels));
      const double reserved =
          std::min({k, c, std::max(1.0, std::ceil(share * (1.0 + cfg.shard_state_headroom)))});
      grown[m] = grown[m] != 0 || static_cast<double>(e.selected(ids[p]).size()) > reserved ? 1 : 0;
      ++m;
    }
    per_step.push_back({{"step", t},
                        {"selection", rep.selection},
                        {"window_closed", rep.window_closed},
                        {"comm_bytes", rep.comm_bytes}});
    if (rep.comm_bytes != engine_step) {
      mismatches.push_back("zero3 step " + std::to_string(t) + ": comm_bytes " +
                           std::to_string(rep.comm_bytes) + ", formula " + std::to_string(engine_step));
    }
  }
  const auto blocks = blocks_of(list, n);
  const nlohmann::json mem = memory_measured(e.stats().memory);
  const nlohmann::json formula = memory_formula(list, blocks, rank, cfg, 4, true, Device, grown);
  for (const auto& s : memory_mismatches(mem, formula)) {
    mismatches.push_back("zero3 memory " + s);
  }
  const auto crowded = std::count(grown.begin(), grown.end(), 1);
  if (e.stats().device_rows_grown != crowded) {
    mismatches.push_back("zero3 device_rows_grown " + std::to_string(e.stats().device_rows_grown) + ", " +
                         std::to_string(crowded) + " matrices crowded");
  }
  // What the growth added to the reservation the planner counts (its figure is the share's).
  const double grown_bytes =
      formula["device_selected"].get<double>() -
      memory_formula(list, blocks, rank, cfg, 4, true, Device)["device_selected"].get<double>();
  const double ring = static_cast<double>(n - 1) / n;
  nlohmann::json j;
  j["shapes"] = "charlm cpu (V=48, C=8, E=16, H=512, 4 layers), fp32";
  j["path"] = Device ? "sharded, emulated backend, emulated_device_communicator<mpi_communicator>"
                     : "sharded, host backend, mpi_communicator";
  j["ranks"] = n;
  j["rank"] = rank;
  j["parameters"] = elements(list);
  j["config"] = {{"topk_ratio", cfg.topk_ratio},
                 {"select_interval", cfg.select_interval},
                 {"update_interval", cfg.update_interval},
                 {"select_on_mass_drop", cfg.select_on_mass_drop}};
  j["per_step"] = per_step;
  j["formula"] = {{"engine_step_input", engine_step},
                  {"vectors_allreduce_input", active ? 4 * vector_elems : 0},
                  {"scores_allgather_input", 4 * own_channels},
                  {"flags_input", active ? 4 * list.size() : 0},
                  {"rescans_input", Device && active ? 8 * all_channels : 0},
                  {"masses_input", masses},
                  {"trainer_reduce_scatter_input", 4 * matrix_elems},
                  {"trainer_all_gather_input", 4 * own_elems},
                  {"trainer_reduce_scatter_ring_sent", ring * 4 * static_cast<double>(matrix_elems)},
                  {"trainer_all_gather_ring_sent", ring * 4 * static_cast<double>(matrix_elems)}};
  j["stats"] = {{"comm_bytes", e.stats().comm_bytes}, {"d2h_bytes", e.stats().d2h_bytes}};
  j["memory"] = mem;
  j["memory_formula"] = formula;
  j["memory_per_param"] = per_param(mem, formula, static_cast<double>(elements(list)));
  j["device_rows_grown"] = e.stats().device_rows_grown;
  j["grown_selected_bytes"] = grown_bytes;
  j["mismatches"] = mismatches;
  return j;
}

/// ZeRO-2 against ZeRO-3 per rank for one shape list over `n` ranks, working weights of `s` bytes
/// (the configuration's r): the largest rank's bytes per parameter of the whole model, by term.
/// ZeRO-2 over a device communicator (NCCL's path: the host upload buffer holds its block).
inline nlohmann::json
computed_memory(const std::string& name, const std::vector<tensor>& list, int n, double s) {
  zenflow::config cfg = measured_config();
  const auto part = blocks_of(list, n);
  const double params = static_cast<double>(elements(list));
  nlohmann::json j{{"shapes", name}, {"ranks", n}, {"working_bytes", s}, {"topk_ratio", cfg.topk_ratio}};
  for (const bool sharded : {false, true}) {
    nlohmann::json most;
    for (int r = 0; r < n; ++r) {
      const auto f = memory_formula(list, part, r, cfg, s, sharded, true);
      for (auto it = f.begin(); it != f.end(); ++it) {
        const double v = it.value().get<double>() / params;
        most[it.key()] = most.contains(it.key()) ? std::max(most[it.key()].get<double>(), v) : v;
      }
    }
    most["device_total"] = most["weights_grads"].get<double>() + most["device_counted"].get<double>();
    j[sharded ? "zero3_bytes_per_param" : "zero2_bytes_per_param"] = most;
  }
  return j;
}

/// The planner (zenflow::plan, `zf_plan --zero 2|3`) on the measured run's shapes and settings
/// over `runs.size()` ranks, against every rank's measurement: one GPU's buffers against the
/// largest rank's, the node's host buffers against the sum over the ranks (the upload buffer only
/// over a device communicator: over a host one every rank holds the whole window). Adds what
/// differs to `mismatches`; returns the planner's figures.
inline nlohmann::json planner_check(const nlohmann::json& runs,
                                    bool sharded,
                                    bool device_comm,
                                    std::vector<std::string>& mismatches) {
  zenflow::plan_model model;
  model.name = "charlm cpu";
  model.elem_bytes = 4;
  for (const auto& t : charlm(8, 16, 512, 4)) {
    if (t.matrix) {
      model.matrices.push_back({t.channels, t.len, 1});
    } else {
      model.vectors.push_back({t.len, 1});
    }
  }
  zenflow::plan_hardware hw{.host_bytes_per_s = 1e10, .pcie_bytes_per_s = 1e9, .step_s = 1e-2};
  hw.gpus = static_cast<std::int64_t>(runs.size());
  zenflow::plan_config pc = zenflow::plan_config::of(measured_config());
  pc.sharded = sharded;
  const zenflow::plan_result r = zenflow::plan(model, hw, pc);
  // ZeRO-3's device state as the planner counts it: the shares' reservation, without the rows a
  // crowded selection grew (grown_selected_bytes, the run's own).
  const auto reserved = [&](const nlohmann::json& run) {
    return run["memory"]["device_selected"].get<double>() - run.value("grown_selected_bytes", 0.0);
  };
  const auto most = [&](const char* key, const char* term) {
    double v = 0;
    for (const auto& run : runs) {
      v = std::max(v, std::string(term) == "device_selected" && std::string(key) == "memory"
                          ? reserved(run)
                          : run[key][term].get<double>());
    }
    return v;
  };
  const auto sum = [&](const char* term) {
    double v = 0;
    for (const auto& run : runs) {
      v += run["memory"][term].get<double>();
    }
    return v;
  };
  std::vector<std::pair<std::string, std::pair<double, double>>> terms = {
      {"device weights_and_grads", {r.device.weights_and_grads, most("memory_formula", "weights_grads")}},
      {"device selected_state", {r.device.selected_state, most("memory", "device_selected")}},
      {"device vector_state", {r.device.vector_state, most("memory", "device_vector")}},
      {"device upload", {r.device.upload, most("memory", "device_upload")}},
      {"device staging", {r.device.staging, most("memory", "device_staging")}},
      {"device reduction", {r.device.reduction, most("memory", "device_reduction")}},
      {"host state", {r.host.state, sum("host_state")}},
      {"host accumulators", {r.host.accumulators, sum("host_accumulators")}},
      {"host ring", {r.host.ring, sum("host_ring")}}};
  if (device_comm) { // NCCL's path: what the planner models
    terms.push_back({"host upload", {r.host.upload, sum("host_upload")}});
    terms.push_back({"host staging", {r.host.staging, sum("host_staging")}});
  }
  // Every rank's device bytes (the planner's device_by_rank), term by term.
  if (r.device_by_rank.size() == runs.size()) {
    for (std::size_t q = 0; q < runs.size(); ++q) {
      const auto& d = r.device_by_rank[q];
      const auto& m = runs[q]["memory"];
      const std::string at = " (rank " + std::to_string(q) + ")";
      terms.push_back({"device selected_state" + at, {d.selected_state, reserved(runs[q])}});
      terms.push_back({"device staging" + at, {d.staging, m["device_staging"].get<double>()}});
      terms.push_back({"device upload" + at, {d.upload, m["device_upload"].get<double>()}});
      terms.push_back({"device reduction" + at, {d.reduction, m["device_reduction"].get<double>()}});
    }
  }
  nlohmann::json out{{"zero", sharded ? 3 : 2}, {"gpus", hw.gpus}};
  // The scratch: the data-parallel parts counted as the engine allocates them, the one-rank
  // parts by their larger buffers (top-k temporaries and per-step tables are not modelled):
  // within 25% at this size (879K parameters), where they are most of it; reported.
  const double scratch = most("memory", "device_scratch");
  out["device scratch"] = {{"planner", r.device.scratch}, {"measured", scratch}};
  if (!sharded && device_comm && std::abs(r.device.scratch - scratch) > 0.25 * scratch) {
    mismatches.push_back("planner device scratch: planner " + std::to_string(r.device.scratch) +
                         ", measured " + std::to_string(scratch) + " (more than 25% apart)");
  }
  for (const auto& [name, v] : terms) {
    out[name] = {{"planner", v.first}, {"measured", v.second}};
    if (v.first != v.second) {
      mismatches.push_back("planner " + name + ": planner " + std::to_string(v.first) + ", measured " +
                           std::to_string(v.second));
    }
  }
  return out;
}

} // namespace zf_bench_dp
