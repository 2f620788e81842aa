/// @file
/// The ZenFlow engine: ZenFlow's step (docs/design.md; exact reading: docs/engine-semantics.md), the
/// schedule over named states (detail/step/schedule.hpp), over a backend (docs/engine.md, "Backends").
/// Threads: the training thread calls everything; host windows run on the window queue's executor
/// (overlap_step) and, on device backends, a consumer thread drains the D2H ring. Results never
/// depend on timing. Not thread-safe: one training thread per engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/io/engine_checkpoint.hpp>
#include <zenflow/engine/detail/policy/single_rank.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/registry/registration.hpp>
#include <zenflow/engine/detail/step/engine_core.hpp>
#include <zenflow/engine/gradient_release.hpp>
#include <zenflow/engine/parallel.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/engine/step_options.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/transport/pinned_ring.hpp>

ZF_NAMESPACE_BEGIN

/// `Parallel`: the data-parallel policy (engine/parallel.hpp, docs/data-parallel.md):
/// `single_rank` (the default), or `owner_partition<Comm>` over a communicator of the backend's
/// memory (`mpi_communicator` for the host and emulated backends, `nccl_communicator` for the
/// CUDA backend; a communicator type given here means owner_partition of it, and needs
/// <zenflow/engine/data_parallel.hpp>).
template <engine_backend Backend, class Parallel = single_rank>
class engine {
public:
  using backend_type = Backend;
  using policy_type = parallel_policy_t<Parallel>;
  static_assert(
      parallel_policy<policy_type>,
      "zenflow::engine: the second argument is single_rank, owner_partition<Comm>, sharded<Comm> or a "
      "communicator");

private:
  using core_type = detail::engine_core<Backend, policy_type>;
  static_assert(
      requires { sizeof(typename core_type::parallel_type); },
      "zenflow::engine: a data-parallel engine needs #include <zenflow/engine/data_parallel.hpp> "
      "(sharded: <zenflow/engine/sharded.hpp>)");

public:
  /// The third constructor argument: the communicator (owner_partition), or nothing (single_rank).
  using parallel_argument = typename core_type::parallel_type::argument_type;

  /// Validates `cfg` (throws zenflow::invalid_argument naming the key) and keeps a copy.
  /// `backend`: where the "device" is (`host_backend{}`, `cuda_backend{}`,
  /// `emulated_backend{device}`). `comm`: the ranks this engine trains with, data parallel (every
  /// rank registers the same parameters and steps together; the engine keeps the communicator).
  explicit engine(const config& cfg,
                  Backend backend = Backend{},
                  parallel_argument comm = parallel_argument{})
      : core_(cfg, std::move(backend), std::move(comm)) {}
  /// Waits for the host job in flight and stops the engine's threads. Updates not yet applied
  /// are dropped, never written here: a closed window whose host job finished but whose new
  /// weights were not applied (overlap_step: the last window before destruction, unless flush()
  /// was called), and the open window's accumulated gradients. The destructor does not touch the
  /// user's weights (they may be freed already, and it knows no stream to order the write on);
  /// it reports what it dropped through the log hook (core/log.hpp): a warning for a window of
  /// updates, naming its steps and pointing to flush(); info for an open window's gradients.
  ~engine() = default;
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
  /// option out of range ('options.lr_scale', 'options.weight_decay'); 'options.shard' given to an
  /// engine that is not sharded, or out of [0, total).
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
    core_.require_registering(fn); // first: 'this' before any argument
    detail::require(!options.shard || detail::is_sharded_v<policy_type>, fn, "options.shard",
                    "is for a sharded engine (engine<Backend, sharded<Comm>>) only");
    return core_.add(detail::registered_param(core_.cfg(), core_.params(), fn, true, dtype_of<T>(), weights,
                                              grads, channels, channel_len, ld, layout, options));
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
    core_.require_registering(fn);
    return core_.add(detail::registered_param(core_.cfg(), core_.params(), fn, false, dtype_of<T>(), weights,
                                              grads, 1, n, n, channel_layout::contiguous, options));
  }

  /// Allocates every buffer and copies the current working weights into the fp32 masters.
  /// Blocking (once, before training). Data parallel: first checks that every rank has the same
  /// configuration and parameter list (else every rank throws zenflow::invalid_argument naming
  /// which, and the ranks that differ, changing nothing); the replicas' weights must start equal.
  void initialize(cudaStream_t stream = nullptr) { core_.initialize(stream); }

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
  /// Announcing a parameter again before the step (its gradient changed since: a step not taken,
  /// the gradients zeroed and another backward) reads its gradient again: what the last
  /// announcement read is what the step uses, with the same bits as a single announcement.
  ///
  /// Throws zenflow::invalid_argument, changing nothing: 'this' before initialize() or before a
  /// due release_gradients(); 'param' for an unregistered parameter. After step() returns,
  /// announcements are for the next step.
  void grad_ready(param_id param, cudaStream_t stream = nullptr) { core_.grad_ready(param, stream); }

  /// Who orders your next gradient writes after a step's packs read them (docs/engine.md, "The
  /// pack stream and your gradients"): gradient_release::at_step (the default) or ::by_caller.
  /// Before initialize(); throws zenflow::invalid_argument naming 'this' after it, 'release' for a
  /// value out of the enum.
  void set_gradient_release(gradient_release release) {
    core_.d2h().set_release(release, core_.registering());
  }
  /// by_caller: work enqueued on `stream` from now on waits (on the device, no host wait) until
  /// the last step's packs have read the gradients. Call it after each step() and before the
  /// backward writes a gradient again. Throws zenflow::invalid_argument ('this') before initialize().
  void release_gradients(cudaStream_t stream = nullptr) {
    detail::require(initialized(), "zenflow::engine::release_gradients", "this", "is not initialized");
    core_.d2h().release(stream);
  }

  /// One optimizer step after the user's backward, with learning rate `lr`. Stream-ordered on
  /// `stream`; blocks only where docs/engine-semantics.md says (synchronous modes, the drain at a
  /// selection step, a host job not done at the close that must apply it), all counted as stall.
  /// `options`: this step's loss scale and found-inf (read and written on `stream`, no host wait),
  /// clipping threshold and parameters without a gradient (step_options.hpp).
  ///
  /// Throws zenflow::invalid_argument, changing nothing: 'this' before initialize(); 'lr' not
  /// finite and >= 0; 'options.max_norm' negative or NaN; 'options.no_grad' naming a parameter
  /// that is not registered, or given to a data-parallel engine.
  step_report step(float lr, cudaStream_t stream = nullptr, const step_options& options = {}) {
    return core_.step(lr, stream, options);
  }

  /// Sets the lr scale of `param` (the registered `param_options::lr_scale`) from the next step()
  /// on: lr_used = float(lr * lr_scale) on the device, and for a host window that closes from then
  /// on (a window's host update takes the lr and the lr scales of the step that closes it, as it
  /// takes that step's lr). Between steps, any number of times (a schedule per parameter group:
  /// torch's param_groups whose learning rates do not keep one ratio). Not saved in a checkpoint
  /// (set it again after load(), as the lr), and not part of the checkpoint's identity (the
  /// registered scale is). Throws zenflow::invalid_argument naming 'param' (not registered) or
  /// 'lr_scale' (not finite and >= 0), changing nothing.
  void set_lr_scale(param_id param, float lr_scale) { core_.set_lr_scale(param, lr_scale); }

  /// Waits for every submitted host job and writes its weights (docs/engine-semantics.md, 6:
  /// the open window stays open), and for the host to have read every step so far (so
  /// `stats().skipped_steps` is complete on every backend). Blocking.
  void flush(cudaStream_t stream = nullptr) { core_.flush(stream); }

  /// Cumulative counters and the last step. On device backends `skipped_steps` counts the steps
  /// whose flag the host has read so far (it may lag by the copies in flight; flush() settles it).
  [[nodiscard]] const zenflow::stats& stats() const noexcept { return core_.stats(); }

  /// Starts recording a pipeline trace (docs/engine.md, "Pipeline trace"): the training thread's
  /// steps and stalls with their causes, the consumer's slots, the host jobs and, on the emulated
  /// and CUDA backends, every stream's kernels and copies (this turns the backend's timeline on; on
  /// CUDA it is timed by events and waits once for a reference event: call it between steps).
  /// Recording costs a lock per span; off, nothing is recorded.
  void start_trace() { core_.start_trace(); }
  /// Writes what was recorded since start_trace() to `path` as Chrome trace-event JSON
  /// (chrome://tracing, ui.perfetto.dev). Call it between steps, after flush() for a complete
  /// device timeline. Throws zenflow::invalid_argument naming 'path' if it cannot be written.
  void write_trace(const std::string& path) const { core_.write_trace(path); }
  [[nodiscard]] const config& configuration() const noexcept { return core_.cfg(); }
  [[nodiscard]] std::size_t param_count() const noexcept { return core_.params().size(); }
  /// True once initialize() has run (state(), export_masters() need it).
  [[nodiscard]] bool initialized() const noexcept { return core_.initialized(); }
  /// Steps taken so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return core_.steps(); }

  /// The name, lr scale and weight decay `param` was registered with (after param_groups; the lr
  /// scale set_lr_scale() set since).
  [[nodiscard]] param_settings settings(param_id param) const {
    const auto& pi = core_.params()[core_.index(param)];
    return {pi.name, pi.lr_scale, pi.weight_decay};
  }

  /// The current device set of `param` (ascending channel indices; {0} for a vector on the device).
  /// Sharded (ZeRO-3): the selected channels within this rank's shard, counted from the shard's
  /// first channel (channel `first + i` of the whole matrix is `i`).
  [[nodiscard]] std::vector<std::int32_t> selected(param_id param) const {
    return core_.host()[core_.index(param)].sel;
  }

  /// The full optimizer state of `param`, from the host rows and the device rows. Waits for a
  /// running host job first (its rows are being written). Blocking; for tests and checkpoints.
  /// Data parallel (more than one rank): a collective (every rank calls it; the owners' blocks
  /// are all-gathered), the same full state on every rank. Sharded (ZeRO-3): this rank's shard's
  /// rows, no collective.
  [[nodiscard]] param_state state(param_id param, cudaStream_t stream = nullptr) {
    return core_.state(param, stream);
  }

  /// stats() with the byte, stall and host-memory counters summed over the ranks (a collective:
  /// every rank calls it). One rank: stats().
  [[nodiscard]] zenflow::stats stats_over_ranks(cudaStream_t stream = nullptr) {
    return core_.stats_over_ranks(stream);
  }

  /// The communicator the engine steps with (rank(), size()): owner_partition and sharded.
  [[nodiscard]] const auto& comm() const noexcept
      requires(detail::is_owner_partition_v<policy_type> || detail::is_sharded_v<policy_type>) {
    return core_.parallel().comm();
  }
  /// Which rank owns which channels' host state (owner_partition; empty before initialize()).
  [[nodiscard]] const auto& partition() const noexcept requires detail::is_owner_partition_v<policy_type> {
    return core_.parallel().partition();
  }

  /// The D2H ring's own counters (bytes it moved), for cross-checks of the engine's accounting.
  [[nodiscard]] ring_stats d2h_ring_stats() const { return core_.d2h().stats(); }

  /// Saves the whole optimizer state to the checkpoint file `path` (docs/checkpoint.md), between
  /// steps: a host job in flight is finished first and its new weights are saved as a job still to
  /// apply. The working weights are the user's: save them too. Blocking; changes nothing the engine
  /// computes next. One file per rank: `checkpoint_rank_path(path, rank, ranks)` (= `path` for one
  /// rank; data parallel: every rank calls save() and load() with the same `path`).
  /// @throws invalid_argument ('this': not initialized, or grad_ready() announcements pending;
  ///         'path': empty); checkpoint_error (io) when the file cannot be written.
  void save(const std::string& path, cudaStream_t stream = nullptr) {
    detail::engine_checkpoint<core_type>::save(core_, path, stream);
  }
  /// Replaces the whole optimizer state with the one saved in `path`, between steps, on an engine
  /// initialized with the same configuration and the same registrations (register, initialize,
  /// load; the working weights must be the ones saved with it). The file is checked whole first: a
  /// bad one throws checkpoint_error saying which (truncated, corrupted, wrong_version,
  /// other_config, other_parameters, missing_section, wrong_size) and leaves the engine unchanged.
  /// Blocking. @throws invalid_argument as save().
  void load(const std::string& path, cudaStream_t stream = nullptr) {
    detail::engine_checkpoint<core_type>::load(core_, path, stream);
    core_.restored();
  }

private:
  core_type core_;
};

ZF_NAMESPACE_END
