/// @file
/// The sharded policy's side of the engine (ZeRO-3; parallel_side.hpp, docs/data-parallel.md):
/// each rank registered its shard of every matrix (param_options::shard: channels [first, first +
/// count) of `total`) with the shard's mean gradient (the trainer reduce-scatters it:
/// comm/shard.hpp), and every vector whole, whose gradient this side all-reduces to the mean
/// (mean_gradients.hpp). The engine then runs as one rank on the shard's rows, except where a
/// step's decisions read the whole matrix:
/// - the scores (fp32 squared L2 per channel) and NaN/Inf flags of the shard's rows, after the
///   norms: the scores all-gathered into a buffer of the whole matrix (rank order is channel
///   order), the flags ORed, and the fp64 rescans of non-finite scores computed by the rank that
///   holds the row and summed with the others' zeros (exact). The plan's squared totals and
///   top-k read these (plan_inputs::whole), so the clip norm and the skip are one rank's bits;
/// - a selection: the whole matrix's top-k (k = cfg.topk(total); L1 importance gathered the same
///   way), each rank keeping the channels in its shard (device capacity min(k, count)). One buffer
///   of scores per matrix crosses the wire, never an index at a time.
/// Everything else is the shard's own: its host rows are all this rank's (no window gather, no
/// owner reduction), and the host moments' stochastic rounding hashes the whole matrix's element
/// indices (row_shard::origin). Zen-auto's and select_on_mass_drop's masses: each rank's row
/// masses gathered and added in one rank's order by every rank (shard_masses.hpp). Not supported
/// yet (initialize() refuses it, naming the key): host_lr_scale "snr". Over a device
/// communicator (the emulated device's; NCCL or local_device_communicator on the CUDA backend)
/// every collective is stream-ordered.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/hash.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/dp/collectives.hpp>
#include <zenflow/engine/detail/dp/comm_side.hpp>
#include <zenflow/engine/detail/dp/mean_gradients.hpp>
#include <zenflow/engine/detail/dp/shard_masses.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/policy/parallel_side.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/parallel.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The ranks' shards of one matrix, gathered: entry r is rank r's {first, count, total}. Empty
/// when they tile [0, total) in rank order, else why not (the same text on every rank).
inline std::string shard_tiling_error(std::span<const std::int64_t> ranks3) {
  const std::size_t n = ranks3.size() / 3;
  std::int64_t next = 0;
  for (std::size_t r = 0; r < n; ++r) {
    const std::int64_t first = ranks3[3 * r];
    const std::int64_t count = ranks3[3 * r + 1];
    if (ranks3[3 * r + 2] != ranks3[2]) {
      return "rank " + std::to_string(r) + " gives total " + std::to_string(ranks3[3 * r + 2]) + ", rank 0 " +
             std::to_string(ranks3[2]);
    }
    if (first != next) {
      return "rank " + std::to_string(r) + " starts at channel " + std::to_string(first) + ", where " +
             (r == 0 ? std::string("rank 0 must start at 0")
                     : "rank " + std::to_string(r - 1) + " ends at " + std::to_string(next) +
                           (first < next ? " (an overlap)" : " (a gap)"));
    }
    next = first + count;
  }
  if (next != ranks3[2]) {
    return "the last rank ends at channel " + std::to_string(next) + " of " + std::to_string(ranks3[2]) +
           " (a gap)";
  }
  return {};
}

template <class Backend, class Comm, class Host>
class parallel_side<Backend, sharded<Comm>, Host> : public comm_side<Comm>,
                                                    public whole_rows_side<Backend, Host> {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  // A device communicator's collectives are stream-ordered (no host wait): the emulated
  // device's, or NCCL's on the CUDA backend (device memory: nothing here reads it on the host).
  static constexpr bool device_comm = Comm::is_device;
  static_assert(comm_fits_backend<Backend, Comm>,
                "zenflow::engine: sharded<Comm> takes local/mpi_communicator on the host or emulated "
                "backend (or, on the emulated backend, emulated_device_communicator), "
                "local_device/nccl_communicator on the CUDA backend");

public:
  using comm_side<Comm>::comm_side;

  /// initialize(), before anything changes: the same configuration and parameter list (whole
  /// matrices) on every rank, and each matrix's shards tiling [0, total) in rank order; else every
  /// rank throws the same invalid_argument. Returns the bytes this rank sent.
  std::uint64_t verify(const config& cfg, const std::vector<param_info>& params, cudaStream_t stream) {
    comm_.verify_same(stable_hash{}.add_string(cfg.describe()).value(), "the configuration", stream);
    stable_hash h;
    h.add_u64(params.size());
    counts_.clear();                // a refused initialize() may have run this before
    std::vector<std::int64_t> mine; // {first, count, total} of every matrix
    for (const auto& pi : params) {
      h.add_u64(pi.matrix ? 1u : 0u).add_u64(static_cast<std::uint64_t>(pi.type));
      h.add_i64(pi.whole_channels()).add_i64(pi.channel_len);
      h.add_u64(static_cast<std::uint64_t>(pi.layout)).add_string(pi.name);
      h.add_f64(pi.lr_scale).add_f64(pi.weight_decay);
      if (pi.matrix) {
        mine.insert(mine.end(), {pi.shard_first, pi.channels, pi.whole_channels()});
      }
    }
    comm_.verify_same(h.value(), "the parameter list", stream);
    std::uint64_t sent = 2u * 8u + mine.size() * 8u;
    const auto n = static_cast<std::size_t>(comm_.size());
    std::vector<std::int64_t> all(mine.size() * n);
    if constexpr (device_comm && !emulates_device_memory<Comm>) {
      // Device memory (CUDA): the lists through a device buffer on `stream`, read here (it waits).
      const std::vector<std::size_t> bytes(n, mine.size() * 8);
      dbuf<std::byte> stage(all.size() * 8, stream);
      gather_host_blocks(Backend{}, comm_, mine.data(), all.data(), bytes, stage, stream);
    } else {
      all_gather(comm_, mine.data(), all.data(), mine.size(), stream);
      if constexpr (device_comm) {
        comm_.device().synchronize_stream(stream); // the verdict is read here
      }
    }
    std::size_t m = 0;
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (!params[p].matrix) {
        continue;
      }
      std::vector<std::int64_t> of(3 * n);
      for (std::size_t r = 0; r < n; ++r) {
        std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(r * mine.size() + 3 * m), 3,
                    of.begin() + 3 * r);
      }
      const std::string why = shard_tiling_error(of);
      counts_.emplace_back(n);
      for (std::size_t r = 0; r < n; ++r) {
        counts_.back()[r] = static_cast<std::size_t>(of[3 * r + 1]);
      }
      require(why.empty(), "zenflow::engine::initialize", "options.shard",
              "of parameter " + std::to_string(p) +
                  (params[p].name.empty() ? "" : " ('" + params[p].name + "')") +
                  ": the ranks' shards must tile [0, total) in rank order: " + why);
      ++m;
    }
    constexpr const char* fn = "zenflow::engine::initialize";
    require(cfg.host_lr_scale != host_lr_scaling::snr, fn, "host_lr_scale",
            "\"snr\" is not supported sharded (use \"linear\", \"sqrt\" or \"none\")");
    require(cfg.accumulate == accumulation_site::host, fn, "accumulate",
            "\"device\" is single-rank only (a sharded engine accumulates on the host)");
    return sent;
  }

  /// initialize(), before the plan's setup: the vectors' mean-gradient buffers, the whole
  /// matrices' score and rescan buffers and this rank's rescan items.
  parallel_layout setup(const config& cfg,
                        device_plan<Backend>& plan,
                        std::vector<param_info>& params,
                        Host& host,
                        std::size_t slot_bytes,
                        cudaStream_t stream) {
    this->bind(plan, params, host);
    const Backend& b = plan.backend();
    std::size_t bytes = 0;
    // The vectors' mean: mean_gradients over them alone (the matrices' step gradients stay the
    // trainer's shard of the mean).
    std::vector<param_info> vectors;
    std::vector<std::size_t> vector_of;
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (!params[p].matrix) {
        vectors.push_back(params[p]);
        vector_of.push_back(p);
      }
    }
    if (active() && !vectors.empty()) {
      bytes += mean_.setup(b, vectors, stream);
      for (std::size_t i = 0; i < vectors.size(); ++i) {
        params[vector_of[i]].step_grads = vectors[i].step_grads;
      }
      has_vectors_ = true;
    }
    cfg_ = &cfg;
    if (active() && cfg.mode == optimizer_mode::zenflow && (cfg.auto_update() || cfg.mass_trigger())) {
      bytes += masses_.setup(b, comm_, params, host, counts_, slot_bytes);
    }
    sums_ = dbuf<double>(stats_summed_counters);
    inputs_.whole.assign(params.size(), {});
    std::int64_t total = 0;
    for (const auto& pi : params) {
      total += pi.matrix ? pi.whole_channels() : 0;
    }
    total_ = total;
    scores_ = dbuf<float>(static_cast<std::size_t>(std::max<std::int64_t>(total, 1)));
    rescans_ = dbuf<double>(scores_.size());
    std::vector<sq_rescan_item> items;
    std::int64_t at = 0;
    for (std::size_t p = 0; p < params.size(); ++p) {
      const auto& pi = params[p];
      if (!pi.matrix) {
        continue;
      }
      inputs_.whole[p] = {scores_.data() + at, rescans_.data() + at, pi.whole_channels(), pi.shard_first,
                          pi.selected_channels(cfg)};
      gathers_.push_back({p, at});
      // This rank's rows' rescans at their place in the whole matrix's (out[c], c a shard index).
      const sq_total_item src{pi.step_grads, nullptr,   pi.channels, pi.channel_len,
                              pi.ld,         pi.layout, pi.type,     nullptr};
      items.push_back({src, 0, pi.channels, rescans_.data() + at + pi.shard_first});
      rescan_max_ = std::max(rescan_max_, pi.channels);
      at += pi.whole_channels();
    }
    rescan_items_ = items; // the score pointers are the plan's: set in bind_scores()
    rescan_table_ = dbuf<sq_rescan_item>(std::max<std::size_t>(items.size(), 1));
    b.synchronize(nullptr);
    parallel_layout l;
    l.device_scratch =
        bytes + scores_.size() * 12 + sums_.size() * 8 + rescan_table_.size() * sizeof(sq_rescan_item);
    l.inputs = inputs_; // the whole matrices' scores and rescans; every host row of a shard is this rank's
    // grad_ready() does not stream early: a shard's host set changes size at each selection (the
    // landing buffer is sized once, at the first announcement).
    l.streams_early = false;
    l.steps_without_grads = false; // every rank steps every parameter
    return l;
  }
  /// A host-side parameter: every row of its shard (a vector: all of it), the masters from the
  /// shard's weights, the hash origin at the shard's first channel. Returns the bytes copied down.
  std::size_t init_host_rows(std::size_t p, cudaStream_t stream) {
    bind_scores();
    const auto& pi = (*params_)[p];
    auto& h = (*host_)[p];
    const std::size_t bytes = init_whole_rows(*plan_, p, pi, h, stream);
    h.shard.origin = pi.shard_first;
    return bytes;
  }

  /// At the start of a step: the vectors' gradients replaced by their mean over the ranks.
  /// Returns the plan's step hooks for the step (below).
  [[nodiscard]] auto begin_step(std::int64_t t, cudaStream_t stream) {
    bind_scores();
    masses_step_ = active() && reads_rest_masses(*cfg_, t);
    if (has_vectors_) {
      reduce_vectors(stream);
    }
    return hooks();
  }

  /// The plan's step hooks: the whole matrices' scores, flags and rescans after the norms; the
  /// whole matrices' L1 scores after a selection's L1 importance.
  struct step_hooks {
    parallel_side* side;
    void after_norms(cudaStream_t stream) { side->sent_ += side->complete_norms(stream); }
    void after_importance(channel_norm kind, cudaStream_t stream) {
      if (kind == channel_norm::l1) {
        side->sent_ += side->gather_scores(stream);
      }
    }
  };
  [[nodiscard]] step_hooks hooks() noexcept { return {this}; }

  /// A selection step's device sets: the whole matrices' top-k, the channels in this shard; a
  /// matrix whose top-k crowds more into this shard than its device rows hold grows them first
  /// (fit_device_rows).
  bool select(channel_norm kind,
              std::vector<std::vector<std::int32_t>>& sets,
              std::size_t& d2h,
              cudaStream_t stream) {
    const bool bad = plan_->select_all(kind, sets, d2h, stream, hooks());
    for (std::size_t p = 0; p < sets.size() && !bad; ++p) {
      fit_device_rows(p, sets[p].size(), stream);
    }
    return bad;
  }
  /// ZeRO-3's fallback (docs/data-parallel.md): `rows` of matrix p's top-k in this shard, more
  /// than the device rows its share reserved: they grow to the most a selection can give it,
  /// min(k, its channels), once (a device allocation, at a selection step or a load, which wait
  /// for the device anyway), counted in stats().memory and stats().device_rows_grown. The same
  /// bits as one rank either way.
  void fit_device_rows(std::size_t p, std::size_t rows, cudaStream_t stream) {
    auto& pi = (*params_)[p];
    if (!pi.matrix || rows <= static_cast<std::size_t>(pi.device_capacity)) {
      return;
    }
    const std::int64_t old = pi.device_capacity;
    pi.device_capacity = pi.device_rows_most;
    (void)plan_->grow_device_rows(p, old, stream);
    ++grown_;
  }
  /// After the packs of a step that reads the masses: the one-rank crit and rest masses over the
  /// record's (shard_masses.hpp).
  template <class Order>
  void write_rest(cudaStream_t stream, cudaStream_t pack_stream, Order&& order) {
    if (masses_step_) {
      sent_ += masses_.write(*plan_, stream, pack_stream, order);
    }
  }
  /// At the end of a step: the bytes this rank sent since the last call, and the matrices whose
  /// device rows grew (fit_device_rows).
  [[nodiscard]] parallel_step_end end_step() noexcept { return {std::exchange(sent_, 0), grown_}; }

  [[nodiscard]] zenflow::stats summed(const zenflow::stats& s, cudaStream_t stream) {
    return active() ? stats_over_ranks(plan_->backend(), comm_, s, sums_.data(), stream) : s;
  }

private:
  [[nodiscard]] bool active() const noexcept { return comm_.size() > 1; }

  /// The vectors' gradients replaced by their mean over the ranks (begin_step()).
  void reduce_vectors(cudaStream_t stream) {
    const Backend& b = plan_->backend();
    mean_.widen(b, stream);
    if constexpr (!device_comm) {
      b.synchronize(stream); // a host communicator reads the buffer when called
    }
    comm_.all_reduce_mean(mean_.wide(), mean_.wide_size(), stream);
    sent_ += mean_.wide_size() * 4u;
    mean_.narrow(b, stream);
  }

  /// The rescan items read the plan's scores of the shard's rows (allocated by the plan's setup,
  /// which follows this side's): uploaded once, at the first call after it.
  void bind_scores() {
    if (bound_) {
      return;
    }
    auto exposed = plan_->exposed();
    std::size_t i = 0;
    for (const auto& g : gathers_) {
      rescan_items_[i++].src.scores = exposed.scores(g.p);
    }
    if (!rescan_items_.empty()) {
      const Backend& b = plan_->backend();
      b.copy_h2d(rescan_table_.data(), rescan_items_.data(), rescan_items_.size() * sizeof(sq_rescan_item),
                 nullptr);
      b.synchronize(nullptr);
    }
    bound_ = true;
  }

  /// Every matrix's scores of the shard's rows into the whole matrix's buffer (blocking: a host
  /// communicator). Returns the bytes sent.
  std::uint64_t gather_scores(cudaStream_t stream) {
    if constexpr (!device_comm) {
      plan_->backend().synchronize(stream);
    }
    auto exposed = plan_->exposed();
    std::uint64_t sent = 0;
    for (std::size_t m = 0; m < gathers_.size(); ++m) {
      const auto& g = gathers_[m];
      zenflow::all_gather(comm_, exposed.scores(g.p), scores_.data() + g.at,
                          std::span<const std::size_t>(counts_[m]), stream);
      sent += static_cast<std::uint64_t>((*params_)[g.p].channels) * 4;
    }
    return sent;
  }

  /// After the norms: the whole matrices' scores, the skip flags over every rank, the rescans of
  /// the non-finite scores (each by the rank that holds the row). Returns the bytes sent.
  std::uint64_t complete_norms(cudaStream_t stream) {
    const Backend& b = plan_->backend();
    if (!rescan_items_.empty()) {
      b.zero(rescans_.data(), rescans_.size() * 8, stream);
      b.run(stream, 0, "zenflow::engine: sq_rescan",
            [items = rescan_table_.data(), n = static_cast<int>(rescan_items_.size()),
             max = rescan_max_](auto prim, auto on) { return prim.sq_norm_rescan(items, n, max, on); });
    }
    std::uint64_t sent = gather_scores(stream); // waits for the stream
    if (!active()) {
      return sent;
    }
    // 0/1 flags: the max is the or, and NCCL's needs no scratch (nor a bound on the count).
    comm_.all_reduce_max(plan_->exposed().flags(), params_->size(), stream);
    sent += params_->size() * 4;
    // Over a host communicator every rank holds the same whole scores now: the rescans cross the
    // wire only when one of them is not finite, which every rank sees alike. A device
    // communicator's scores are not read here (stream-ordered): the rescans always cross.
    if constexpr (!device_comm) {
      if (std::all_of(scores_.data(), scores_.data() + total_, [](float x) { return std::isfinite(x); })) {
        return sent;
      }
    }
    comm_.all_reduce_sum(rescans_.data(), rescans_.size(), stream);
    return sent + rescans_.size() * 8;
  }

  struct gather_entry {
    std::size_t p = 0;   // the matrix
    std::int64_t at = 0; // its first channel in scores_ / rescans_
  };

  using comm_side<Comm>::comm_;
  using whole_rows_side<Backend, Host>::plan_;
  using whole_rows_side<Backend, Host>::params_;
  using whole_rows_side<Backend, Host>::host_;
  const config* cfg_ = nullptr;
  mean_gradients<Backend> mean_; // the vectors'
  bool has_vectors_ = false;
  plan_inputs inputs_;
  std::int64_t total_ = 0; // the matrices' whole channels
  dbuf<float> scores_;     // every matrix's whole scores, one after the other
  dbuf<double> rescans_;   // and their rescans
  std::vector<gather_entry> gathers_;
  std::vector<std::vector<std::size_t>> counts_; // per matrix: every rank's channels (verify())
  std::vector<sq_rescan_item> rescan_items_;
  dbuf<sq_rescan_item> rescan_table_;
  std::int64_t rescan_max_ = 0;
  bool bound_ = false;
  dbuf<double> sums_;
  shard_masses<Backend, Comm, Host> masses_;
  bool masses_step_ = false; // this step reads the masses (reduce_gradients)
  std::int64_t grown_ = 0;   // fit_device_rows()' growths
  std::uint64_t sent_ = 0;
};

} // namespace detail
ZF_NAMESPACE_END
