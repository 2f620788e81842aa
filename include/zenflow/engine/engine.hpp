/// @file
/// The ZenFlow engine: ZenFlow's step (docs/design.md; exact reading: docs/engine-semantics.md), the
/// schedule over named states (detail/schedule.hpp), over a backend (docs/engine.md, "Backends").
/// Threads: the training thread calls everything; host windows run on the window queue's executor
/// (overlap_step) and, on device backends, a consumer thread drains the D2H ring. Results never
/// depend on timing. Not thread-safe: one training thread per engine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/d2h_stream.hpp>
#include <zenflow/engine/detail/data_parallel.hpp>
#include <zenflow/engine/detail/device_plan.hpp>
#include <zenflow/engine/detail/host_jobs.hpp>
#include <zenflow/engine/detail/host_side.hpp>
#include <zenflow/engine/detail/mass_trigger.hpp>
#include <zenflow/engine/detail/params.hpp>
#include <zenflow/engine/detail/registration.hpp>
#include <zenflow/engine/detail/schedule.hpp>
#include <zenflow/engine/detail/selection.hpp>
#include <zenflow/engine/detail/window_close.hpp>
#include <zenflow/engine/detail/zen_auto.hpp>
#include <zenflow/engine/gradient_release.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/transport/pinned_ring.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
template <class Engine>
struct engine_checkpoint; // save / load (detail/engine_checkpoint.hpp)
} // namespace detail

/// `Comm`: the data-parallel communicator (docs/data-parallel.md), of the backend's memory: by
/// default one rank (`local_communicator`, `local_device_communicator`); `mpi_communicator` for
/// the host and emulated backends, `nccl_communicator` for the CUDA backend.
template <engine_backend Backend, communicator Comm = default_communicator_t<Backend>>
class engine {
public:
  using backend_type = Backend;
  using communicator_type = Comm;

  /// Validates `cfg` (throws zenflow::invalid_argument naming the key) and keeps a copy.
  /// `backend`: where the "device" is (`host_backend{}`, `cuda_backend{}`,
  /// `emulated_backend{device}`). `comm`: the ranks this engine trains with, data parallel (every
  /// rank registers the same parameters and steps together; the engine keeps the communicator).
  explicit engine(const config& cfg, Backend backend = Backend{}, Comm comm = Comm{})
      : cfg_(checked(cfg)), dp_(std::move(comm)),
        plan_(std::move(backend), static_cast<std::size_t>(cfg_.ring_slots)) {}
  /// Waits for the host job in flight and stops the engine's threads. Updates not yet applied
  /// are dropped, never written here: a closed window whose host job finished but whose new
  /// weights were not applied (overlap_step: the last window before destruction, unless flush()
  /// was called), and the open window's accumulated gradients. The destructor does not touch the
  /// user's weights (they may be freed already, and it knows no stream to order the write on);
  /// it reports what it dropped through the log hook (core/log.hpp): a warning for a window of
  /// updates, naming its steps and pointing to flush(); info for an open window's gradients.
  ~engine() {
    jobs_.stop();
    // The last window's upload copies (or chunk_ring's boundary copies) may still read the host
    // upload buffers, a selection's host tasks the host rows, that host_ frees below: wait for
    // them (our own events, not the device).
    plan_.wait_host_reads();
    d2h_.close(); // the consumer drains what was published, then stops
    host_.stop_consumer();
    report_dropped_updates();
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Registers a matrix parameter: `channels` channels of `channel_len` elements, in `layout`
  /// with leading dimension `ld` (0 = the packed one). Weights and gradients stay the user's
  /// (device pointers on the CUDA backend, host pointers on the host backend). `options`: this
  /// parameter's lr scale, weight decay and name (`param_options`; unset fields come from the
  /// config's `param_groups`, then the defaults).
  ///
  /// Throws zenflow::invalid_argument naming the argument, registering nothing: a size or `ld`
  /// out of range, a null pointer, `weights` and `grads` overlapping (`weights == grads`
  /// included), weights or gradients overlapping those of a registered parameter (the same
  /// weights registered twice included; extents are byte ranges from the layout and `ld`), an
  /// option out of range ('options.lr_scale', 'options.weight_decay').
  template <class T>
  param_id add_matrix(T* weights,
                      const T* grads,
                      std::int64_t channels,
                      std::int64_t channel_len,
                      std::int64_t ld = 0,
                      channel_layout layout = channel_layout::contiguous,
                      const param_options& options = {}) {
    static_assert(is_working_type_v<T>, "zenflow: float, __half or __nv_bfloat16");
    constexpr const char* fn = "zenflow::engine::add_matrix";
    if (ld == 0) {
      ld = layout == channel_layout::contiguous ? channel_len : channels;
    }
    detail::require(life_ == detail::lifecycle::registering, fn, "this",
                    "is already initialized (register every parameter first)");
    detail::require(channels >= 1 && channels < (std::int64_t{1} << 31), fn, "channels",
                    "must be in [1, 2^31)");
    detail::require(channel_len >= 1, fn, "channel_len", "must be >= 1");
    detail::require(layout == channel_layout::contiguous ? ld >= channel_len : ld >= channels, fn, "ld",
                    "is smaller than the channel extent of the layout");
    detail::require(weights != nullptr, fn, "weights", "must not be null");
    detail::require(grads != nullptr, fn, "grads", "must not be null");
    detail::require_fits_slot(cfg_, channel_len, sizeof(T), fn, "channel_len", "one channel");
    return registered(detail::checked_param(cfg_, params_, fn, true, dtype_of<T>(), weights, grads, channels,
                                            channel_len, ld, layout, options));
  }

  /// add_matrix() with packed contiguous channels and `options`.
  template <class T>
  param_id add_matrix(T* weights,
                      const T* grads,
                      std::int64_t channels,
                      std::int64_t channel_len,
                      const param_options& options) {
    return add_matrix(weights, grads, channels, channel_len, 0, channel_layout::contiguous, options);
  }

  /// Registers a vector parameter of `n` elements (bias, LayerNorm): always updated on the device
  /// once the warm-up is over. `options` and the errors: as add_matrix(); no weight decay on it
  /// is one line: `add_vector(b, gb, n, {.weight_decay = 0.0f})`.
  template <class T>
  param_id add_vector(T* weights, const T* grads, std::int64_t n, const param_options& options = {}) {
    static_assert(is_working_type_v<T>, "zenflow: float, __half or __nv_bfloat16");
    constexpr const char* fn = "zenflow::engine::add_vector";
    detail::require(life_ == detail::lifecycle::registering, fn, "this",
                    "is already initialized (register every parameter first)");
    detail::require(n >= 1, fn, "n", "must be >= 1");
    detail::require(weights != nullptr, fn, "weights", "must not be null");
    detail::require(grads != nullptr, fn, "grads", "must not be null");
    if (cfg_.mode == optimizer_mode::offload_sync ||
        (cfg_.full_warm_up_rounds > 0 && cfg_.mode == optimizer_mode::zenflow)) {
      detail::require_fits_slot(cfg_, n, sizeof(T), fn, "n", "the vector"); // it travels to the host whole
    }
    return registered(detail::checked_param(cfg_, params_, fn, false, dtype_of<T>(), weights, grads, 1, n, n,
                                            channel_layout::contiguous, options));
  }

  /// Allocates every buffer and copies the current working weights into the fp32 masters.
  /// Blocking (once, before training). Data parallel: first checks that every rank has the same
  /// configuration and parameter list (else every rank throws zenflow::invalid_argument naming
  /// which, and the ranks that differ, changing nothing); the replicas' weights must start equal.
  void initialize(cudaStream_t stream = nullptr) {
    detail::require(life_ == detail::lifecycle::registering, "zenflow::engine::initialize", "this",
                    "is already initialized");
    detail::require(!params_.empty(), "zenflow::engine::initialize", "params", "none registered");
    stats_.comm_bytes += dp_.verify(cfg_, params_, stream);
    const bool zen = cfg_.mode == optimizer_mode::zenflow;
    const bool gpu = cfg_.mode == optimizer_mode::gpu_adamw;
    std::vector<std::int64_t> ks, cs;
    for (auto& pi : params_) {
      if (pi.matrix) {
        pi.device_capacity = gpu ? pi.channels : (zen ? cfg_.topk(pi.channels) : 0);
        pi.host_side = !gpu;
        ks.push_back(std::max<std::int64_t>(pi.device_capacity, 1));
        cs.push_back(pi.channels);
      } else {
        pi.device_capacity = cfg_.mode == optimizer_mode::offload_sync ? 0 : 1;
        pi.device_dense = pi.device_capacity == 1;
        pi.host_side = cfg_.mode == optimizer_mode::offload_sync || (zen && cfg_.full_warm_up_rounds > 0);
      }
      stats_.model_bytes += pi.bytes();
    }
    voter_.emplace(ks, cs);
    dp_.set_partition(params_, cfg_.host_moments == moment_precision::bf16 ? 8u : 12u);
    const auto slot_bytes = static_cast<std::size_t>(cfg_.ring_slot_bytes);
    stats_.memory.device_scratch += // before the plan reads grads
        dp_.setup(plan_, params_, slot_bytes, detail::split_by_owner(cfg_), stream);
    const detail::d2h_slots slots = detail::resolve_d2h_slots(cfg_, params_, slot_bytes);
    plan_.set_staging_slots(slots.staging);
    plan_.set_upload_chunk(cfg_.upload == upload_policy::chunk_ring ? slot_bytes : 0);
    plan_.setup(params_, slot_bytes, stats_.memory);
    stats_.memory.host_ring += d2h_.open(slots.ring, slot_bytes);
    const bool overlap = zen && cfg_.overlap_step;
    host_.resize(params_.size(), std::count_if(params_.begin(), params_.end(),
                                               [](const detail::param_info& pi) { return pi.matrix; }));
    announced_.assign(params_.size(), detail::announcement::none);
    std::int64_t matrices = 0; // the backends number the matrices in the same order
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const auto& pi = params_[p];
      auto& h = host_[p];
      if (pi.matrix) {
        h.matrix_index = matrices++;
      }
      if (gpu) {
        plan_.init_device_state(p, stream);
        continue;
      }
      if (pi.host_side) {
        (void)dp_.init_host_rows(plan_, p, pi, h, stream); // data parallel: this rank's block
        const std::size_t n = h.master.size();
        h.moments.assign(n, cfg_.host_moments);
        h.counts.assign(static_cast<std::size_t>(h.shard.channels), 0);
        h.acc[0].assign(n, 0.0f);
        if (overlap) {
          h.acc[1].assign(n, 0.0f);
        }
        h.upload = typename Backend::template host_buffer<std::byte>(pi.bytes());
        stats_.memory.host_state += n * (4 + 2 * h.moments.element_bytes()) + h.counts.size() * 4;
        stats_.memory.host_accumulators += (h.acc[0].size() + h.acc[1].size()) * 4;
        stats_.memory.host_upload += h.upload.size();
        (void)plan_.set_host_set(p, h.host_set, stream);
      } else if (pi.device_dense) {
        // A vector without warm-up starts on the device: its master comes from its weights.
        plan_.init_device_state(p, stream);
        h.sel = {0};
      }
    }
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    host_.set_consumer_threads(cfg_.resolved_host_threads(hw)); // the window job's pool is jobs_' own
    host_.set_trace(&trace_);
    if constexpr (Backend::is_device) {
      host_.start_consumer(d2h_.ring(), [this] { plan_.enter_engine_thread(); });
    }
    jobs_.start(cfg_.resolved_host_threads(hw), overlap);
    if (dp_.active()) { // each rank's share of a window's weights, gathered at the boundary
      jobs_.set_gather(Comm::is_device,
                       [this](cudaStream_t s) { return dp_.gather_uploads(plan_, params_, host_, s); });
    }
    life_ = detail::lifecycle::training;
  }

  /// Optional early announcement that `param`'s gradient for the coming step() is complete (the
  /// backward pass will not write it again before that step). On a step whose selection is
  /// already known (zenflow mode, after warm-up, not a selection step, no selection pending), a
  /// matrix's unselected channels are packed into the staging ring (on the pack stream, after
  /// `stream`'s work so far and the copy that last read each slot) and copied down on the copy
  /// stream right away, so that they travel while the rest of the backward runs; step() then
  /// does only what is left. The host keeps the landed gradients until the step's coef_t
  /// arrives (it follows the step's first record) and only then adds them into the accumulator:
  /// results are bit-identical with or without announcements, in any order. Otherwise
  /// (warm-up, a selection step, a vector, the baselines) a no-op: step() does everything.
  ///
  /// Stream-ordered on `stream`, which must be the stream passed to the next step() or one
  /// that it is ordered after (the pack reads the gradient the backward wrote there). No host
  /// wait except back-pressure from a full D2H ring (a stall, counted in that step's report).
  ///
  /// Throws zenflow::invalid_argument, changing nothing: 'this' before initialize() or before a
  /// due release_gradients(); 'param' for an unregistered parameter, or one already announced
  /// for this step (once per parameter per step; after step() returns, announcements are for
  /// the next step).
  void grad_ready(param_id param, cudaStream_t stream = nullptr) {
    constexpr const char* fn = "zenflow::engine::grad_ready";
    detail::require(initialized(), fn, "this", "is not initialized (call initialize() first)");
    d2h_.require_released(fn);
    detail::require(param.index >= 0 && static_cast<std::size_t>(param.index) < params_.size(), fn, "param",
                    "is not a registered parameter");
    const auto p = static_cast<std::size_t>(param.index);
    detail::require(announced_[p] == detail::announcement::none, fn, "param",
                    "was already announced for this step (once per parameter, before step())");
    const auto& pi = params_[p];
    auto& h = host_[p];
    if (!early_stream_step() || !pi.matrix || !pi.host_side || h.host_set.empty()) {
      announced_[p] = detail::announcement::hint;
      return;
    }
    const std::size_t need = h.host_set.size() * pi.channel_bytes();
    if (h.land.size() < need) {
      // Allocated on the first announcement (the host set's size, channels - k, is fixed from
      // the first selection on): no early slot of this parameter was ever pushed, so the
      // consumer cannot be reading it.
      stats_.memory.host_landing += need - h.land.size();
      h.land.resize(need);
    }
    announced_[p] = detail::announcement::streamed;
    early_any_ = true;
    early_cost_.trace = tracing();
    // counted in the step it belongs to
    d2h_.push_gradients(sched_.step, p, detail::grad_early_slot, sched_.accumulator, stream, early_cost_);
  }

  /// Who orders your next gradient writes after a step's packs read them (docs/engine.md, "The
  /// pack stream and your gradients"): gradient_release::at_step (the default) or ::by_caller.
  /// Before initialize(); throws zenflow::invalid_argument naming 'this' after it, 'release' for a
  /// value out of the enum.
  void set_gradient_release(gradient_release release) {
    d2h_.set_release(release, life_ == detail::lifecycle::registering);
  }
  /// by_caller: work enqueued on `stream` from now on waits (on the device, no host wait) until
  /// the last step's packs have read the gradients. Call it after each step() and before the
  /// backward writes a gradient again. Throws zenflow::invalid_argument ('this') before initialize().
  void release_gradients(cudaStream_t stream = nullptr) {
    detail::require(initialized(), "zenflow::engine::release_gradients", "this", "is not initialized");
    d2h_.release(stream);
  }

  /// One optimizer step after the user's backward, with learning rate `lr`. Stream-ordered on
  /// `stream`; blocks only where docs/engine-semantics.md says (synchronous modes, the drain at a
  /// selection step, a host job not done at the close that must apply it), all counted as stall.
  step_report step(float lr, cudaStream_t stream = nullptr) {
    constexpr const char* fn = "zenflow::engine::step";
    detail::require(initialized(), fn, "this", "is not initialized (call initialize() first)");
    detail::require(std::isfinite(lr) && lr >= 0.0f, fn, "lr", "must be finite and >= 0");
    d2h_.require_released(fn);
    step_report rep{};
    const std::int64_t t = sched_.step;
    rep.step = t;
    const std::int64_t trace_t0 = detail::pipeline_trace::now();
    call_cost cost = std::exchange(early_cost_, {}); // what grad_ready() spent for this step
    cost.trace = tracing();
    // Data parallel: the host sets' rows by owner.
    rep.comm_bytes = dp_.reduce_gradients(plan_, params_, host_, detail::split_by_owner(cfg_), stream);
    plan_.begin_step(t, stream);
    if (packs_before_prologue()) { // they need the gradients only: they run beside the prologue
      d2h_.begin_packs(stream, early_any_);
    }
    plan_.prologue_norms(stream);
    rep.comm_bytes += dp_.finish_norms(plan_, params_, host_, detail::reads_rest_masses(cfg_, t),
                                       d2h_.ring().slot_bytes(), stream);
    plan_.prologue_scalars(cfg_.loss_scale, cfg_.gradient_clipping, stream);
    if (cfg_.mode == optimizer_mode::gpu_adamw) {
      plan_.update(lr, cfg_.adam, stream);
      d2h_.push_record(t, detail::record_first_slot, sched_.accumulator, stream, cost);
    } else if (cfg_.mode == optimizer_mode::offload_sync || t < cfg_.full_warm_up_rounds) {
      rep.warm_up = cfg_.mode == optimizer_mode::zenflow;
      synchronous_step(t, lr, stream, cost);
    } else {
      zenflow_step(t, lr, stream, rep, cost);
    }
    d2h_.end_step(stream); // at_step: `stream` waits for the packs (they read the user's gradients)
    rep.skip_known = !Backend::is_device;
    rep.skipped = !Backend::is_device && host_.last_skip();
    stats_.skipped_steps = host_.skipped();
    rep.d2h_bytes = cost.d2h;
    rep.h2d_bytes = cost.h2d;
    rep.stall_s = cost.stall_s;
    rep.comm_bytes += cost.comm; // data parallel: migrations and the windows' weights
    stats_.comm_bytes += rep.comm_bytes;
    rep.selection_age = sched_.selection_step >= 0 ? t - sched_.selection_step : 0;
    stats_.last = rep;
    ++stats_.steps;
    account(cost);
    pushed_before_prev_step_ = pushed_before_last_step_;
    pushed_before_last_step_ = d2h_.pushed();
    std::fill(announced_.begin(), announced_.end(), detail::announcement::none);
    early_any_ = false;
    ++sched_.step;
    detail::trace_step(trace_, rep, trace_t0);
    return rep;
  }

  /// Waits for every submitted host job and writes its weights (docs/engine-semantics.md, 6:
  /// the open window stays open), and for the host to have read every step so far (so
  /// `stats().skipped_steps` is complete on every backend). Blocking.
  void flush(cudaStream_t stream = nullptr) {
    detail::require(initialized(), "zenflow::engine::flush", "this", "is not initialized");
    call_cost cost;
    cost.trace = tracing();
    drain(stream, cost);
    if (!host_.consumed(d2h_.pushed())) {
      detail::timed_stall(cost, "flush: the host reads every step",
                          [&] { host_.wait_consumed(d2h_.pushed()); });
    }
    stats_.skipped_steps = host_.skipped();
    stats_.comm_bytes += cost.comm;
    account(cost);
  }

  /// Cumulative counters and the last step. On device backends `skipped_steps` counts the steps
  /// whose flag the host has read so far (it may lag by the copies in flight; flush() settles it).
  [[nodiscard]] const zenflow::stats& stats() const noexcept { return stats_; }

  /// Starts recording a pipeline trace (docs/engine.md, "Pipeline trace"): the training thread's
  /// steps and stalls with their causes, the consumer's slots, the host jobs and, on the emulated
  /// and CUDA backends, every stream's kernels and copies (this turns the backend's timeline on; on
  /// CUDA it is timed by events and waits once for a reference event: call it between steps).
  /// Recording costs a lock per span; off, nothing is recorded.
  void start_trace() {
    trace_.start();
    if constexpr (requires { plan_.backend().timeline().set_tracing(true); }) {
      plan_.backend().timeline().set_tracing(true);
    }
  }
  /// Writes what was recorded since start_trace() to `path` as Chrome trace-event JSON
  /// (chrome://tracing, ui.perfetto.dev). Call it between steps, after flush() for a complete
  /// device timeline. Throws zenflow::invalid_argument naming 'path' if it cannot be written.
  void write_trace(const std::string& path) const {
    trace_.write(path, detail::device_timeline(plan_.backend()));
  }
  [[nodiscard]] const config& configuration() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t param_count() const noexcept { return params_.size(); }
  /// True once initialize() has run (state(), export_masters() need it).
  [[nodiscard]] bool initialized() const noexcept { return life_ == detail::lifecycle::training; }
  /// Steps taken so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return sched_.step; }

  /// The name, lr scale and weight decay `param` was registered with (after param_groups).
  [[nodiscard]] param_settings settings(param_id param) const {
    const auto& pi = params_.at(index(param));
    return {pi.name, pi.lr_scale, pi.weight_decay};
  }

  /// The current device set of `param` (ascending channel indices; {0} for a vector on the device).
  [[nodiscard]] std::vector<std::int32_t> selected(param_id param) const { return host_[index(param)].sel; }

  /// The full optimizer state of `param`, from the host rows and the device rows. Waits for a
  /// running host job first (its rows are being written). Blocking; for tests and checkpoints.
  /// Data parallel (more than one rank): a collective (every rank calls it; the owners' blocks
  /// are all-gathered), the same full state on every rank.
  [[nodiscard]] param_state state(param_id param, cudaStream_t stream = nullptr) {
    const std::size_t p = index(param);
    jobs_.wait_idle();
    return dp_.read_state(plan_, p, params_[p], host_[p], stream);
  }

  /// stats() with the byte, stall and host-memory counters summed over the ranks (a collective:
  /// every rank calls it). One rank: stats().
  [[nodiscard]] zenflow::stats stats_over_ranks(cudaStream_t stream = nullptr) {
    return dp_.active() ? dp_.summed(plan_.backend(), stats_, stream) : stats_;
  }

  /// The communicator the engine steps with (rank(), size()).
  [[nodiscard]] const Comm& comm() const noexcept { return dp_.comm(); }
  /// Which rank owns which channels' host state (data parallel; empty before initialize()).
  [[nodiscard]] const channel_partition& partition() const noexcept { return dp_.partition(); }

  /// The D2H ring's own counters (bytes it moved), for cross-checks of the engine's accounting.
  [[nodiscard]] ring_stats d2h_ring_stats() const { return d2h_.stats(); }

  /// Saves the whole optimizer state to the checkpoint file `path` (docs/checkpoint.md), between
  /// steps: a host job in flight is finished first and its new weights are saved as a job still to
  /// apply. The working weights are the user's: save them too. Blocking; changes nothing the engine
  /// computes next. One file per rank: `checkpoint_rank_path(path, rank, ranks)` (= `path` for one
  /// rank; data parallel: every rank calls save() and load() with the same `path`).
  /// @throws invalid_argument ('this': not initialized, or grad_ready() announcements pending;
  ///         'path': empty); checkpoint_error (io) when the file cannot be written.
  void save(const std::string& path, cudaStream_t stream = nullptr) {
    detail::engine_checkpoint<engine>::save(*this, path, stream);
  }
  /// Replaces the whole optimizer state with the one saved in `path`, between steps, on an engine
  /// initialized with the same configuration and the same registrations (register, initialize,
  /// load; the working weights must be the ones saved with it). The file is checked whole first: a
  /// bad one throws checkpoint_error saying which (truncated, corrupted, wrong_version,
  /// other_config, other_parameters, missing_section, wrong_size) and leaves the engine unchanged.
  /// Blocking. @throws invalid_argument as save().
  void load(const std::string& path, cudaStream_t stream = nullptr) {
    detail::engine_checkpoint<engine>::load(*this, path, stream);
  }

private:
  template <class Engine>
  friend struct detail::engine_checkpoint;

  using call_cost = detail::call_cost;

  [[nodiscard]] detail::pipeline_trace* tracing() noexcept { return trace_.on() ? &trace_ : nullptr; }

  void account(const call_cost& cost) {
    stats_.d2h_bytes += cost.d2h;
    stats_.h2d_bytes += cost.h2d;
    stats_.stall_s += cost.stall_s;
  }

  /// The destructor's report of the updates it drops (after every thread stopped). Never throws.
  void report_dropped_updates() noexcept {
    detail::report_dropped_updates(sched_, sched_.job && jobs_.outcome().produced,
                                   sched_.window ? host_.n_w(sched_.accumulator) : 0);
  }

  static config checked(const config& cfg) {
    cfg.validate();
    return cfg;
  }

  [[nodiscard]] std::size_t index(param_id param) const {
    detail::require(param.index >= 0 && static_cast<std::size_t>(param.index) < params_.size(),
                    "zenflow::engine", "param", "is not a registered parameter");
    return static_cast<std::size_t>(param.index);
  }

  param_id registered(detail::param_info pi) {
    params_.push_back(std::move(pi));
    return param_id{static_cast<std::int32_t>(params_.size() - 1)};
  }

  /// grad_ready() streams this step (not data parallel: the mean exists once step() made it); the
  /// packs start before the prologue (not over a host communicator: its reduction by owner
  /// completes gradient rows and the rest masses around them).
  [[nodiscard]] bool early_stream_step() const { return sched_.host_sets_known(cfg_) && !dp_.active(); }
  [[nodiscard]] bool packs_before_prologue() const {
    return sched_.host_sets_known(cfg_) && (Comm::is_device || !dp_.active());
  }

  // ---- host windows (detail/host_jobs.hpp) -----------------------------------------------------

  void drain(cudaStream_t stream, call_cost& cost) {
    jobs_.drain(sched_.job, sched_.windows_closed, stream, cost);
  }

  // ---- the step -----------------------------------------------------------------------------

  /// offload_sync, and zenflow's warm-up: grads of every host-side parameter down, host AdamW,
  /// weights up, all before returning.
  void synchronous_step(std::int64_t t, float lr, cudaStream_t stream, call_cost& cost) {
    if (cfg_.mode == optimizer_mode::zenflow) {
      plan_.update(lr, cfg_.adam, stream); // vectors that live on the device (no warm-up for them)
    }
    d2h_.push_record(t, detail::record_first_slot, sched_.accumulator, stream, cost);
    d2h_.begin_packs(stream, false);
    d2h_.push_all_gradients(t, announced_, sched_.accumulator, stream, cost);
    jobs_.run_now(sched_.accumulator, lr, d2h_.pushed(), stream, cost);
  }

  void zenflow_step(std::int64_t t, float lr, cudaStream_t stream, step_report& rep, call_cost& cost) {
    if (sched_.begin_selection(cfg_.is_selection_step(t))) { // scheduled, or fired at step t-1
      drain(stream, cost);
    }
    if (!sched_.window) {
      sched_.window = detail::open_window{t, 0};
      voter_->on_window_start();
    }
    if (sched_.selection == detail::selection_phase::pending) {
      bool bad = false; // every matrix's top-k and the skip flag in one readback: the one device wait
      std::vector<std::vector<std::int32_t>> sets;
      detail::timed_stall(cost, "selection: top-k of every matrix and the skip flag", [&] {
        bad = dp_.select(plan_, params_, host_, cfg_.importance, sets, cost.d2h, cost.comm, stream);
      });
      if (!bad) { // a selection waits for a step with finite gradients
        drain(stream, cost);
        perform_selection(sets, stream, cost);
        rep.selection = true;
        rep.selection_reason = sched_.selected(t);
        stats_.mass_drop_selections += rep.selection_reason == selection_cause::mass_drop ? 1 : 0;
        ++stats_.selections;
        voter_->on_selection();
        trigger_.on_selection();
      }
    }
    // The header goes down, and the packs start beside the update if they did not before the prologue.
    d2h_.push_record(t, detail::record_first_slot, sched_.accumulator, stream, cost);
    d2h_.begin_packs(stream, early_any_);
    plan_.update(lr, cfg_.adam, stream);
    d2h_.push_all_gradients(t, announced_, sched_.accumulator, stream, cost);
    // Data parallel: the rest masses of the other blocks' rows, over the packs' (their stream).
    cost.comm +=
        dp_.write_rest(plan_, params_, host_, stream, d2h_.pack_stream(), [&] { d2h_.packs_after(stream); });
    d2h_.push_record(t, detail::record_last_slot, sched_.accumulator, stream, cost);
    const std::int64_t length = ++sched_.window->length;
    rep.window_length = length;

    // Zen-auto, select_on_mass_drop or the fixed length (semantics, 5 and 7).
    if (detail::window_closes_after({cfg_, sched_, voter_, trigger_, pushed_before_prev_step_}, host_, t,
                                    length, cost)) {
      jobs_.close_window(sched_, cfg_.overlap_step, lr, d2h_.pushed(), stream, cost);
      rep.window_closed = true;
    }
  }

  /// The new sets (every matrix) installed and state migrated between host and device.
  void perform_selection(std::vector<std::vector<std::int32_t>>& sets, cudaStream_t stream, call_cost& cost) {
    detail::timed_stall(cost, "selection: migration", [&] {
      host_.wait_consumed(d2h_.pushed()); // the consumer reads the host sets that change here
      detail::migrate_selection(plan_, params_, host_, dp_, sets, stream, cost);
    });
  }

  config cfg_;
  detail::data_parallel<Backend, Comm> dp_; // its buffers outlive the plan's last synchronize
  detail::device_plan<Backend> plan_;       // destroyed last: the ring and the copies use its buffers
  std::vector<detail::param_info> params_;
  detail::pipeline_trace trace_; // before host_: its consumer thread writes spans here
  detail::host_side<typename Backend::template host_buffer<std::byte>> host_{cfg_, params_};
  detail::d2h_stream<Backend> d2h_{plan_, params_, host_};
  std::optional<detail::zen_auto_voter> voter_;
  detail::mass_trigger trigger_{cfg_.select_on_mass_drop, cfg_.min_select_interval};
  zenflow::stats stats_{};
  detail::host_jobs<Backend> jobs_{plan_, params_, host_, stats_, trace_}; // destroyed first: its threads

  detail::lifecycle life_ = detail::lifecycle::registering;
  detail::schedule sched_;
  std::uint64_t pushed_before_last_step_ = 0; // slots pushed up to the end of the previous step
  std::uint64_t pushed_before_prev_step_ = 0; // ... and of the one before (Zen-auto's lag)

  // grad_ready() (training thread): per parameter, and what it spent before the step
  std::vector<detail::announcement> announced_;
  bool early_any_ = false;
  call_cost early_cost_;
};

ZF_NAMESPACE_END

#include <zenflow/engine/detail/engine_checkpoint.hpp>
