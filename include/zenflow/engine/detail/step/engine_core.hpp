/// @file
/// The engine's orchestration (engine.hpp is its API and documentation): the members, and the
/// order in which initialize(), grad_ready(), step() and flush() call them: the device plan
/// (device_plan.hpp), the D2H stream (d2h_stream.hpp), the host side and its consumer
/// (host_side.hpp), the window queue's jobs (host_jobs.hpp), the named schedule (schedule.hpp),
/// Zen-auto (zen_auto.hpp, mass_trigger.hpp), and the data-parallel policy's side
/// (policy/parallel_side.hpp), which is the only place that knows of other ranks.
///
/// Member order is destruction order reversed, and load-bearing: the plan outlives the D2H ring
/// and the copies that use its buffers; the trace outlives the host side's consumer thread that
/// writes to it; the jobs (their threads) go first. The destructor stops the threads in the order
/// that lets each finish what reads the buffers freed next.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/placement.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/host_moments.hpp>
#include <zenflow/engine/detail/host/host_side.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/policy/parallel_side.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/registry/registration.hpp>
#include <zenflow/engine/detail/step/d2h_stream.hpp>
#include <zenflow/engine/detail/step/host_jobs.hpp>
#include <zenflow/engine/detail/step/schedule.hpp>
#include <zenflow/engine/detail/step/selection.hpp>
#include <zenflow/engine/detail/step/window_close.hpp>
#include <zenflow/engine/parallel.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/engine/step_options.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/schedule/mass_trigger.hpp>
#include <zenflow/schedule/zen_auto.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Policy>
class engine_core {
public:
  using host_type = host_side<typename Backend::template host_buffer<std::byte>>;
  using parallel_type = parallel_side<Backend, Policy, host_type>;

  engine_core(const config& cfg, Backend backend, typename parallel_type::argument_type par)
      : cfg_(checked(cfg)), par_(std::move(par)),
        plan_(std::move(backend), static_cast<std::size_t>(cfg_.ring_slots)) {}
  ~engine_core() {
    jobs_.stop();
    // The last window's upload copies (or chunk_ring's boundary copies) may still read the host
    // upload buffers, a selection's host tasks the host rows, that host_ frees below: wait for
    // them (our own events, not the device).
    plan_.wait_host_reads();
    d2h_.close(); // the consumer drains what was published, then stops
    host_.stop_consumer();
    report_dropped_updates();
  }
  engine_core(const engine_core&) = delete;
  engine_core& operator=(const engine_core&) = delete;

  // ---- registration ---------------------------------------------------------------------------

  /// Registers `pi` (checked by registry/registration.hpp's registered_param, after
  /// require_registering()).
  param_id add(param_info pi) {
    params_.push_back(std::move(pi));
    return param_id{static_cast<std::int32_t>(params_.size() - 1)};
  }
  void require_registering(const char* fn) const {
    require(life_ == lifecycle::registering, fn, "this",
            "is already initialized (register every parameter first)");
  }

  // ---- initialize -----------------------------------------------------------------------------

  void initialize(cudaStream_t stream) {
    require(life_ == lifecycle::registering, "zenflow::engine::initialize", "this", "is already initialized");
    require(!params_.empty(), "zenflow::engine::initialize", "params", "none registered");
    stats_.placement = resolve_host_placement(cfg_); // may throw: before anything is set up
    stats_.comm_bytes += par_.verify(cfg_, params_, stream);
    const bool zen = cfg_.mode == optimizer_mode::zenflow;
    const bool gpu = cfg_.mode == optimizer_mode::gpu_adamw;
    std::vector<std::int64_t> ks, cs;
    for (auto& pi : params_) {
      if (pi.matrix) {
        pi.device_capacity = pi.matrix_capacity(cfg_);
        pi.device_rows_most = pi.matrix_rows_most(cfg_);
        pi.host_side = !gpu;
        // Zen-auto votes on the whole matrix's masses (a shard's too: the sharded policy's record
        // holds the one-rank masses), so on its whole k and channels (at least 1: offload_sync
        // has none on the device, and votes never).
        ks.push_back(std::max<std::int64_t>(pi.selected_channels(cfg_), 1));
        cs.push_back(pi.whole_channels());
      } else {
        pi.device_capacity = cfg_.mode == optimizer_mode::offload_sync ? 0 : 1;
        pi.device_rows_most = pi.device_capacity;
        pi.device_dense = pi.device_capacity == 1;
        pi.host_side = cfg_.mode == optimizer_mode::offload_sync || (zen && cfg_.full_warm_up_rounds > 0);
      }
      stats_.model_bytes += pi.bytes();
    }
    voter_.emplace(ks, cs);
    const auto slot_bytes = static_cast<std::size_t>(cfg_.ring_slot_bytes);
    host_.resize(params_.size(), std::count_if(params_.begin(), params_.end(),
                                               [](const param_info& pi) { return pi.matrix; }));
    layout_ = par_.setup(cfg_, plan_, params_, host_, slot_bytes, stream); // before the plan reads grads
    stats_.memory.device_scratch += layout_.device_scratch;
    stats_.memory.device_reduction += layout_.device_reduction; // data parallel: the gradients' buckets
    stats_.memory.host_staging += layout_.host_staging;         // and a selection's staging
    const d2h_slots slots = resolve_d2h_slots(cfg_, params_, slot_bytes, layout_.kept_channels);
    plan_.set_staging_slots(slots.staging);
    plan_.set_upload_chunk(cfg_.upload == upload_policy::chunk_ring ? slot_bytes : 0);
    // whole_window: a window's new weights go up through a few pinned chunks as the job writes
    // them, not through a host copy of every host-side weight; a host communicator's gather
    // needs that copy (it gathers into it), chunk_ring reads it at the boundary.
    const bool staged = !gpu && cfg_.upload == upload_policy::whole_window &&
                        !(layout_.gathers_windows && !layout_.gathers_on_device);
    plan_.set_upload_stage(staged ? upload_stage_chunks : 0, slot_bytes);
    plan_.setup(params_, slot_bytes, stats_.memory, layout_.inputs);
    d2h_.open(slots.ring, slot_bytes, zen ? cfg_.accumulate : accumulation_site::host, stats_.memory);
    const bool overlap = zen && cfg_.overlap_step;
    announced_.assign(params_.size(), announcement::none);
    had_grad_.assign(params_.size(), 0);
    std::optional<scoped_thread_affinity> first_touch(std::in_place, stats_.placement.pinned_cores());
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
        (void)par_.init_host_rows(p, stream); // data parallel: this rank's block
        typename host_type::param::layout lay;
        // One rank keeps exactly the host set's rows; a block (data parallel, a shard) holds a
        // varying share of it: its capacity. Without warm-up the first step selects before any
        // gradient is summed, so one rank starts at the size it keeps.
        lay.exact = h.shard.whole(pi.channels) && pi.shard_total == 0;
        lay.acc_rows = lay.exact && zen && pi.matrix && cfg_.full_warm_up_rounds == 0
                           ? pi.channels - pi.device_capacity
                           : h.shard.channels;
        // Device accumulation: one buffer receives each window's sum.
        lay.two = overlap && !d2h_.sums_on_device() && cfg_.host_accumulators == 2;
        lay.buffered = !staged;
        // A device communicator gathers a window's shares on the device: this rank's share is
        // all its upload holds.
        lay.share = layout_.gathers_windows && layout_.gathers_on_device;
        h.allocate_state(cfg_, pi.channel_len, pi.channels, pi.channel_bytes(), lay, stats_.memory);
        (void)plan_.set_host_set(p, h.host_set, stream);
      } else if (pi.device_dense) {
        // A vector without warm-up starts on the device: its master comes from its weights.
        plan_.init_device_state(p, stream);
        h.sel = {0};
      }
    }
    first_touch.reset(); // the host state above was first touched on the host cores (NUMA); no thread started
    // One accumulator buffer for two windows: the next window's first step waits for the job's reads.
    host_.set_drain(overlap && !d2h_.sums_on_device() && cfg_.host_accumulators == 1);
    host_.set_consumer_threads(stats_.placement); // the window job's pool is jobs_' own
    host_.set_trace(&trace_);
    if constexpr (Backend::is_device) {
      host_.start_consumer(d2h_.ring(), [this] { plan_.enter_engine_thread(); });
    }
    jobs_.start(stats_.placement, overlap);
    if (layout_.gathers_windows) { // each rank's share of a window's weights, gathered at the boundary
      jobs_.set_gather(layout_.gathers_on_device ? window_gather::device_buffers
                                                 : window_gather::host_buffers,
                       [this](cudaStream_t s) { return par_.gather_window(s); });
    }
    life_ = lifecycle::training;
  }

  [[nodiscard]] bool initialized() const noexcept { return life_ == lifecycle::training; }

  // ---- grad_ready -----------------------------------------------------------------------------

  void grad_ready(param_id param, cudaStream_t stream) {
    constexpr const char* fn = "zenflow::engine::grad_ready";
    require(initialized(), fn, "this", "is not initialized (call initialize() first)");
    d2h_.require_released(fn);
    require(param.index >= 0 && static_cast<std::size_t>(param.index) < params_.size(), fn, "param",
            "is not a registered parameter");
    const auto p = static_cast<std::size_t>(param.index);
    // Data parallel: the buckets of final gradients are reduced now, once (a gradient announced
    // again, as a single engine allows, would be reduced twice).
    require(!layout_.announces || announced_[p] == announcement::none, fn, "param",
            "was already announced for this step (once per parameter data parallel, before step())");
    par_.announce(p, stream);
    const auto& pi = params_[p];
    auto& h = host_[p];
    if (announced_[p] == announcement::streamed) {
      // Announced again (its gradient changed: a step not taken, then another backward): packed
      // anew, its early mass restarted after the first packs; the consumer's landing buffer
      // takes the new slots over the old ones.
      plan_.restart_early_mass(p, d2h_.pack_stream());
    } else if (!early_stream_step() || !pi.matrix || !pi.host_side || h.host_set.empty()) {
      announced_[p] = announcement::hint;
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
    announced_[p] = announcement::streamed;
    early_any_ = true;
    early_cost_.trace = tracing();
    // counted in the step it belongs to
    d2h_.push_gradients(sched_.step, p, grad_early_slot, sched_.accumulator, stream, early_cost_);
  }

  // ---- set_lr_scale ---------------------------------------------------------------------------

  void set_lr_scale(param_id param, float lr_scale) {
    constexpr const char* fn = "zenflow::engine::set_lr_scale";
    require(param.index >= 0 && static_cast<std::size_t>(param.index) < params_.size(), fn, "param",
            "is not a registered parameter");
    require(std::isfinite(lr_scale) && lr_scale >= 0.0f, fn, "lr_scale", "must be finite and >= 0");
    auto& pi = params_[static_cast<std::size_t>(param.index)];
    if (std::memcmp(&pi.lr_scale, &lr_scale, 4) != 0) {
      pi.lr_scale = lr_scale; // the host job reads its window's copy (window_params), not this
      plan_.lr_scales_changed();
    }
  }

  // ---- step -----------------------------------------------------------------------------------

  step_report step(float lr, cudaStream_t stream, const step_options& opt) {
    constexpr const char* fn = "zenflow::engine::step";
    require(initialized(), fn, "this", "is not initialized (call initialize() first)");
    require(std::isfinite(lr) && lr >= 0.0f, fn, "lr", "must be finite and >= 0");
    require(!opt.max_norm || *opt.max_norm >= 0.0f, fn, "options.max_norm", "must be >= 0 (or +Inf)");
    require(opt.no_grad.empty() || layout_.steps_without_grads, fn, "options.no_grad",
            "is not supported data parallel (every rank steps every parameter)");
    for (const param_id q : opt.no_grad) {
      require(q.index >= 0 && static_cast<std::size_t>(q.index) < params_.size(), fn, "options.no_grad",
              "holds a parameter that is not registered (" + std::to_string(q.index) + ")");
    }
    d2h_.require_released(fn);
    std::vector<std::uint8_t> without(params_.size(), 0);
    for (const param_id q : opt.no_grad) {
      without[static_cast<std::size_t>(q.index)] = 1;
    }
    for (std::size_t p = 0; p < params_.size(); ++p) {
      had_grad_[p] |= without[p] == 0 ? 1 : 0;
    }
    plan_.set_without_grad(without);
    step_report rep{};
    const std::int64_t t = sched_.step;
    rep.step = t;
    const std::int64_t trace_t0 = pipeline_trace::now();
    call_cost cost = std::exchange(early_cost_, {}); // what grad_ready() spent for this step
    cost.trace = tracing();
    // Data parallel: the mean gradient (the host sets' rows by owner); the hooks the prologue calls.
    auto hooks = par_.begin_step(t, stream);
    plan_.begin_step(t, stream);
    if (packs_before_prologue()) { // they need the gradients only: they run beside the prologue
      d2h_.begin_packs(stream, early_any_);
    }
    const float max_norm = opt.max_norm.value_or(cfg_.gradient_clipping);
    plan_.prologue({cfg_.loss_scale, std::isinf(max_norm) ? 0.0f : max_norm, opt.loss_scale, opt.found_inf},
                   stream, hooks);
    if (cfg_.mode == optimizer_mode::gpu_adamw) {
      plan_.update(lr, cfg_.adam, stream);
      d2h_.push_record(t, record_first_slot, sched_.accumulator, stream, cost);
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
    const parallel_step_end ended = par_.end_step();
    stats_.device_rows_grown = ended.device_rows_grown; // ZeRO-3: crowded shards' device rows
    rep.d2h_bytes = cost.d2h;
    rep.h2d_bytes = cost.h2d;
    rep.stall_s = cost.stall_s;
    rep.comm_bytes = ended.sent + cost.comm; // data parallel: the reduction, migrations, windows' weights
    stats_.comm_bytes += rep.comm_bytes;
    rep.selection_age = sched_.selection_step >= 0 ? t - sched_.selection_step : 0;
    stats_.last = rep;
    ++stats_.steps;
    account(cost);
    pushed_before_prev_step_ = pushed_before_last_step_;
    pushed_before_last_step_ = d2h_.pushed();
    std::fill(announced_.begin(), announced_.end(), announcement::none);
    early_any_ = false;
    ++sched_.step;
    trace_step(trace_, rep, trace_t0);
    return rep;
  }

  void flush(cudaStream_t stream) {
    require(initialized(), "zenflow::engine::flush", "this", "is not initialized");
    call_cost cost;
    cost.trace = tracing();
    drain(stream, cost);
    if (!host_.consumed(d2h_.pushed())) {
      timed_stall(cost, "flush: the host reads every step", [&] { host_.wait_consumed(d2h_.pushed()); });
    }
    stats_.skipped_steps = host_.skipped();
    stats_.comm_bytes += cost.comm;
    account(cost);
  }

  /// After a checkpoint's restore: the open window's steps before it are taken to have had every
  /// gradient (the file does not say which parameters had none).
  void restored() { std::fill(had_grad_.begin(), had_grad_.end(), 1); }

  // ---- reading --------------------------------------------------------------------------------

  [[nodiscard]] std::size_t index(param_id param) const {
    require(param.index >= 0 && static_cast<std::size_t>(param.index) < params_.size(), "zenflow::engine",
            "param", "is not a registered parameter");
    return static_cast<std::size_t>(param.index);
  }
  [[nodiscard]] param_state state(param_id param, cudaStream_t stream) {
    const std::size_t p = index(param);
    jobs_.wait_idle();
    return par_.read_state(p, stream);
  }
  [[nodiscard]] zenflow::stats stats_over_ranks(cudaStream_t stream) { return par_.summed(stats_, stream); }

  void start_trace() {
    trace_.start();
    if constexpr (requires { plan_.backend().timeline().set_tracing(true); }) {
      plan_.backend().timeline().set_tracing(true);
    }
  }
  void write_trace(const std::string& path) const { trace_.write(path, device_timeline(plan_.backend())); }

  // The engine's reads of its members (engine.hpp).
  [[nodiscard]] const config& cfg() const noexcept { return cfg_; }
  [[nodiscard]] const std::vector<param_info>& params() const noexcept { return params_; }
  [[nodiscard]] const host_type& host() const noexcept { return host_; }
  [[nodiscard]] const zenflow::stats& stats() const noexcept { return stats_; }
  [[nodiscard]] std::int64_t steps() const noexcept { return sched_.step; }
  [[nodiscard]] parallel_type& parallel() noexcept { return par_; }
  [[nodiscard]] const parallel_type& parallel() const noexcept { return par_; }
  [[nodiscard]] d2h_stream<Backend>& d2h() noexcept { return d2h_; }
  [[nodiscard]] const d2h_stream<Backend>& d2h() const noexcept { return d2h_; }
  [[nodiscard]] bool registering() const noexcept { return life_ == lifecycle::registering; }
  /// grad_ready() announced a parameter for the coming step.
  [[nodiscard]] bool announcements_pending() const noexcept {
    return early_any_ || std::any_of(announced_.begin(), announced_.end(),
                                     [](announcement x) { return x != announcement::none; });
  }

  /// The components a checkpoint saves and restores, each its own part (engine_checkpoint.hpp,
  /// io/): between steps, on the training thread, once the threads are settled.
  struct checkpoint_parts_type {
    const config& cfg;
    const std::vector<param_info>& params;
    device_plan<Backend>& plan;
    host_type& host;
    schedule& sched;
    zen_auto_voter& voter;
    mass_trigger& trigger;
    zenflow::stats& stats;
    host_jobs<Backend>& jobs;
    d2h_stream<Backend>& d2h;
    parallel_type& par; // a sharded engine's load may grow a shard's device rows
  };
  [[nodiscard]] checkpoint_parts_type checkpoint_parts() {
    return {cfg_, params_, plan_, host_, sched_, *voter_, trigger_, stats_, jobs_, d2h_, par_};
  }

private:
  [[nodiscard]] pipeline_trace* tracing() noexcept { return trace_.on() ? &trace_ : nullptr; }

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

  /// grad_ready() streams this step (the policy reads the user's gradients as they are: not data
  /// parallel, whose mean exists once step() made it); the packs start before the prologue
  /// (unless the policy completes gradient rows and the rest masses around it).
  [[nodiscard]] bool early_stream_step() const {
    return sched_.host_sets_known(cfg_) && layout_.streams_early && !d2h_.sums_on_device();
  }
  [[nodiscard]] bool packs_before_prologue() const { // device sums: the adds read the prologue's coef
    return sched_.host_sets_known(cfg_) && layout_.packs_before_norms && !d2h_.sums_on_device();
  }

  /// What the window closing now updates with (handover.hpp): the lr scales now, and the
  /// parameters with a gradient in one of its steps; the next window starts with none.
  window_params take_window_params() {
    window_params wp;
    wp.lr_scale.reserve(params_.size());
    for (const auto& pi : params_) {
      wp.lr_scale.push_back(pi.lr_scale);
    }
    wp.had_grad = std::exchange(had_grad_, std::vector<std::uint8_t>(params_.size(), 0));
    return wp;
  }

  void drain(cudaStream_t stream, call_cost& cost) {
    jobs_.drain(sched_.job, sched_.windows_closed, stream, cost);
  }

  /// offload_sync, and zenflow's warm-up: grads of every host-side parameter down, host AdamW,
  /// weights up, all before returning.
  void synchronous_step(std::int64_t t, float lr, cudaStream_t stream, call_cost& cost) {
    if (cfg_.mode == optimizer_mode::zenflow) {
      plan_.update(lr, cfg_.adam, stream); // vectors that live on the device (no warm-up for them)
    }
    d2h_.push_record(t, record_first_slot, sched_.accumulator, stream, cost);
    d2h_.begin_packs(stream, false);
    d2h_.push_all_gradients(t, announced_, sched_.accumulator, stream, cost);
    jobs_.run_now(sched_.accumulator, lr, take_window_params(), d2h_.pushed(), stream, cost);
  }

  void zenflow_step(std::int64_t t, float lr, cudaStream_t stream, step_report& rep, call_cost& cost) {
    if (sched_.begin_selection(cfg_.is_selection_step(t))) { // scheduled, or fired at step t-1
      drain(stream, cost);
    }
    if (!sched_.window) {
      sched_.window = open_window{t, 0};
      voter_->on_window_start();
    }
    if (sched_.selection == selection_phase::pending) {
      bool bad = false; // every matrix's top-k and the skip flag in one readback: the one device wait
      std::vector<std::vector<std::int32_t>> sets;
      timed_stall(cost, "selection: top-k of every matrix and the skip flag",
                  [&] { bad = par_.select(cfg_.importance, sets, cost.d2h, stream); });
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
    d2h_.push_record(t, record_first_slot, sched_.accumulator, stream, cost);
    d2h_.begin_packs(stream, early_any_);
    plan_.update(lr, cfg_.adam, stream);
    d2h_.push_all_gradients(t, announced_, sched_.accumulator, stream, cost, true);
    // Data parallel: the rest masses of the other blocks' rows, over the packs' (their stream).
    par_.write_rest(stream, d2h_.pack_stream(), [&] { d2h_.packs_after(stream); });
    d2h_.push_record(t, record_last_slot, sched_.accumulator, stream, cost);
    const std::int64_t length = ++sched_.window->length;
    rep.window_length = length;

    // Zen-auto, select_on_mass_drop or the fixed length (semantics, 5 and 7).
    if (window_closes_after({cfg_, sched_, voter_, trigger_, pushed_before_prev_step_}, host_, t, length,
                            cost)) {
      jobs_.close_window(sched_, cfg_.overlap_step, lr, take_window_params(), stream, cost,
                         [&](std::size_t a) { return d2h_.close_window(t, a, cost); });
      rep.window_closed = true;
    }
  }

  /// The new sets (every matrix) installed and state migrated between host and device.
  void perform_selection(std::vector<std::vector<std::int32_t>>& sets, cudaStream_t stream, call_cost& cost) {
    timed_stall(cost, "selection: migration", [&] {
      host_.wait_consumed(d2h_.pushed()); // the consumer reads the host sets that change here
      migrate_selection(plan_, params_, host_, par_, sets, stream, cost);
      fit_accumulators();
    });
  }

  /// The accumulators follow the host sets (after a selection or a restore: every pushed slot
  /// consumed, no job running), and their bytes the stats.
  void fit_accumulators() {
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (params_[p].host_side) {
        auto& h = host_[p];
        h.fit(static_cast<std::int64_t>(h.shard.rows.size()), params_[p].channel_len);
      }
    }
    stats_.memory.host_accumulators = host_.accumulator_bytes();
  }

  config cfg_;
  parallel_type par_;         // its buffers outlive the plan's last synchronize
  parallel_layout layout_;    // par_'s answer to setup(): what it allocated, how a step orders around it
  device_plan<Backend> plan_; // destroyed last but par_: the ring and the copies use its buffers
  std::vector<param_info> params_;
  pipeline_trace trace_; // before host_: its consumer thread writes spans here
  host_type host_{cfg_, params_};
  d2h_stream<Backend> d2h_{plan_, params_, host_};
  std::optional<zen_auto_voter> voter_;
  mass_trigger trigger_{cfg_.select_on_mass_drop, cfg_.min_select_interval};
  zenflow::stats stats_{};
  host_jobs<Backend> jobs_{plan_, params_, host_, stats_, trace_}; // destroyed first: its threads

  lifecycle life_ = lifecycle::registering;
  schedule sched_;
  std::uint64_t pushed_before_last_step_ = 0; // slots pushed up to the end of the previous step
  std::uint64_t pushed_before_prev_step_ = 0; // ... and of the one before (Zen-auto's lag)

  // grad_ready() (training thread): per parameter, and what it spent before the step
  std::vector<announcement> announced_;
  bool early_any_ = false;
  // step(): per parameter, a gradient in one of the open window's steps (step_options::no_grad)
  std::vector<std::uint8_t> had_grad_;
  call_cost early_cost_;
};

} // namespace detail
ZF_NAMESPACE_END
