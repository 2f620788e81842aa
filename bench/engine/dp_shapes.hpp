// zf_bench_dp_wire's shapes and its per-rank memory arithmetic (dp_wire.cpp, dp_zero3.hpp): the
// parameter lists (charlm's presets, a LLaMA-7B-like list), and what each rank holds under ZeRO-2
// (owner_partition) and ZeRO-3 (sharded) term by term, from the engine's allocations, to set
// beside stats().memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/comm/partition.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/registry/params.hpp> // upload_stage_chunks
#include <zenflow/engine/stats.hpp>

namespace zf_bench_dp {

struct tensor {
  std::int64_t channels = 1, len = 0; // a vector: 1 x len
  bool matrix = false;
};

// charlm's parameter list (examples/charlm/model.hpp's param_table): emb V x E, layer 0 C*E x H,
// layers 1.. H x H, w_out H x V, a bias per layer and the output. V = 48 (the corpus sets it).
inline std::vector<tensor> charlm(std::int64_t context, std::int64_t embed, std::int64_t hidden, int layers) {
  const std::int64_t vocab = 48;
  std::vector<tensor> t{{vocab, embed, true}};
  for (int l = 0; l < layers; ++l) {
    t.push_back({l == 0 ? context * embed : hidden, hidden, true});
    t.push_back({1, hidden, false});
  }
  t.push_back({hidden, vocab, true});
  t.push_back({1, vocab, false});
  return t;
}

// LLaMA-7B's shapes: 32 blocks of q, k, v, o (4096 x 4096), gate and up (4096 -> 11008), down
// (11008 -> 4096), two RMSNorm vectors; the embedding and the output head (32000 x 4096). A
// matrix's channels are its inputs (nn.Linear [out, in] stored transposed).
inline std::vector<tensor> llama7b() {
  std::vector<tensor> t{{32000, 4096, true}};
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      t.push_back({4096, 4096, true});
    }
    t.push_back({4096, 11008, true});
    t.push_back({4096, 11008, true});
    t.push_back({11008, 4096, true});
    t.push_back({1, 4096, false});
    t.push_back({1, 4096, false});
  }
  t.push_back({4096, 32000, true});
  t.push_back({1, 4096, false});
  return t;
}

/// The measured runs' settings, ZeRO-2's and ZeRO-3's alike (select_on_mass_drop at its default:
/// the sharded engine's row masses cross every step).
inline zenflow::config measured_config() {
  zenflow::config cfg;
  cfg.topk_ratio = 0.1;
  cfg.select = zenflow::select_strategy::step;
  cfg.select_interval = 8;
  cfg.update_interval = 4;
  cfg.overlap_step = true;
  return cfg;
}

inline std::uint64_t elements(const std::vector<tensor>& list) {
  std::uint64_t n = 0;
  for (const auto& t : list) {
    n += static_cast<std::uint64_t>(t.channels * t.len);
  }
  return n;
}

/// Every rank's channels of every matrix: the owner blocks (ZeRO-2's host state; ZeRO-3's shards,
/// comm/shard.hpp's shard_channels is the same partition) with fp32 host state (12 B a weight).
inline zenflow::channel_partition blocks_of(const std::vector<tensor>& list, int ranks) {
  std::vector<zenflow::partition_matrix> m;
  for (const auto& t : list) {
    if (t.matrix) {
      m.push_back({t.channels, static_cast<std::uint64_t>(t.len) * 12u});
    }
  }
  return zenflow::partition_channels(m, ranks);
}

/// Rank `rank`'s bytes by term, from the engine's allocations (engine_core, device_plan_setup,
/// host_param: ZenFlow, whole-window upload), `s` bytes a working weight:
///   weights_grads       the trainer's weights and gradients the engine reads: ZeRO-2 the whole
///                       model, ZeRO-3 the shards of the matrices and the vectors whole;
///   device_selected     fp32 master, m, v of the device set + an int32 count and index per row:
///                       ZeRO-2 k = topk(C) rows of every matrix, ZeRO-3 its shard's share of k,
///                       ceil(k c / C) and shard_state_headroom of it more, at most min(k, c)
///                       (`grown`: per matrix, a selection crowded the shard: min(k, c));
///   device_vector       the vectors' fp32 master, m, v + count and index, + one int32 per vector;
///   device_upload       the window's new weights: every registered row of each matrix (s B);
///   host_state          fp32 master, m, v (fp32 or bf16: host_moments) of its block + an int32
///                       count per row (the same block under both);
///   host_accumulators   one fp32 window sum of its block (two with overlap_step and
///                       host_accumulators 2);
///   host_upload         ZeRO-2 over a host communicator: a pinned buffer of every row (the
///                       window's all-gather lands there); otherwise (whole_window) the upload
///                       stage's pinned chunks, upload_stage_chunks x ring_slot_bytes.
/// Not here (measured only): the D2H ring and staging (its block's D2H), the device scratch.
inline nlohmann::json memory_formula(const std::vector<tensor>& list,
                                     const zenflow::channel_partition& part,
                                     int rank,
                                     const zenflow::config& cfg,
                                     double s,
                                     bool sharded,
                                     bool device_comm,
                                     const std::vector<char>& grown = {}) {
  double wg = 0, sel = 0, vec = 0, up = 0, state = 0, acc = 0, hup = 0, vectors = 0;
  std::size_t m = 0;
  if (cfg.host_moments == zenflow::moment_precision::int8) {
    throw std::invalid_argument("memory_formula: int8 host moments are not in the formula");
  }
  const double moment_bytes = cfg.host_moments == zenflow::moment_precision::fp32 ? 4.0 : 2.0;
  // whole_window: the job's new weights go up through the upload stage's pinned chunks (a ZeRO-3
  // rank, or ZeRO-2 over a device communicator); ZeRO-2 over a host communicator gathers the
  // window into a host buffer of every row (engine_core's upload).
  const bool staged = cfg.upload == zenflow::upload_policy::whole_window && (sharded || device_comm);
  for (const auto& t : list) {
    const auto len = static_cast<double>(t.len);
    if (!t.matrix) {
      wg += 2 * s * len;
      vec += 12 * len + 8;
      ++vectors;
      continue;
    }
    const auto C = static_cast<double>(t.channels);
    const auto c = static_cast<double>(part.count(m, rank));
    const auto k = static_cast<double>(cfg.topk(t.channels));
    const double rows = sharded ? c : C;
    const double share = std::ceil(k * c / C);
    const bool crowded = m < grown.size() && grown[m] != 0;
    const double dev =
        !sharded  ? k
        : crowded ? std::min(k, c)
                  : std::min({k, c, std::max(1.0, std::ceil(share * (1.0 + cfg.shard_state_headroom)))});
    wg += 2 * s * rows * len;
    sel += dev * (12 * len + 8);
    up += s * rows * len;
    state += c * ((4 + 2 * moment_bytes) * len + 4);
    acc += (cfg.overlap_step && cfg.host_accumulators == 2 ? 2 : 1) * 4 * c * len;
    // ZeRO-2 over a host communicator: the window's all-gather lands in a buffer of every row.
    hup += staged ? 0.0 : s * C * len;
    ++m;
  }
  hup += staged ? static_cast<double>(zenflow::detail::upload_stage_chunks) *
                      static_cast<double>(cfg.ring_slot_bytes)
                : 0.0;
  vec += 4 * std::max(vectors, 1.0);
  return {{"weights_grads", wg},
          {"device_selected", sel},
          {"device_vector", vec},
          {"device_upload", up},
          {"host_state", state},
          {"host_accumulators", acc},
          {"host_upload", hup},
          {"device_counted", sel + vec + up},
          {"host_counted", state + acc + hup}};
}

/// stats().memory by the same terms (the ones the formula has, and the rest).
inline nlohmann::json memory_measured(const zenflow::memory_usage& u) {
  return {{"device_selected", u.device_selected_state},
          {"device_vector", u.device_vector_state},
          {"device_upload", u.device_upload},
          {"device_staging", u.device_staging},
          {"device_scratch", u.device_scratch},
          {"device_reduction", u.device_reduction},
          {"host_staging", u.host_staging},
          {"device_total", u.device_total()},
          {"host_state", u.host_state},
          {"host_accumulators", u.host_accumulators},
          {"host_upload", u.host_upload},
          {"host_ring", u.host_ring},
          {"host_landing", u.host_landing},
          {"host_total", u.host_total()}};
}

/// The terms where the formula and stats().memory differ, as "term: measured M, formula F".
inline std::vector<std::string> memory_mismatches(const nlohmann::json& measured,
                                                  const nlohmann::json& formula) {
  std::vector<std::string> out;
  for (const char* term : {"device_selected", "device_vector", "device_upload", "host_state",
                           "host_accumulators", "host_upload"}) {
    const double a = measured[term].get<double>(), b = formula[term].get<double>();
    if (a != b) {
      out.push_back(std::string(term) + ": measured " + std::to_string(static_cast<std::uint64_t>(a)) +
                    ", formula " + std::to_string(static_cast<std::uint64_t>(b)));
    }
  }
  return out;
}

/// Per parameter of the whole model: the formula's and the measured totals of one rank.
inline nlohmann::json
per_param(const nlohmann::json& measured, const nlohmann::json& formula, double params) {
  const double wg = formula["weights_grads"].get<double>();
  return {{"device_engine_measured", measured["device_total"].get<double>() / params},
          {"device_with_weights_grads_measured", (measured["device_total"].get<double>() + wg) / params},
          {"device_counted_formula", formula["device_counted"].get<double>() / params},
          {"weights_grads", wg / params},
          {"host_measured", measured["host_total"].get<double>() / params},
          {"host_counted_formula", formula["host_counted"].get<double>() / params}};
}

} // namespace zf_bench_dp
