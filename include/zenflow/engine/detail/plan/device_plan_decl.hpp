/// @file
/// The declaration of `detail::device_plan` (included whole by device_plan.hpp, which the engine
/// includes; read its comment). The member definitions (device_plan_impl.hpp, _migrate, _setup,
/// _upload) include this header, and none includes device_plan.hpp, so the include graph has no circle.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/device_plan_batch.hpp>
#include <zenflow/engine/detail/plan/device_plan_types.hpp>
#include <zenflow/engine/detail/plan/step_kernels.hpp>
#include <zenflow/engine/detail/plan/step_record.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/schedule/types.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend>
struct upload_phase;    // device_plan_upload.hpp
struct migration_lists; // device_plan_migrate.hpp

template <class Backend>
class device_plan {
  template <class T>
  using dbuf = typename Backend::template device_buffer<T>;
  template <class T>
  using hbuf = typename Backend::template host_buffer<T>;
  using copier_type = typename Backend::copy_backend_type;
  using event_type = typename copier_type::event_type;

public:
  /// `staging_slots` staging buffers for packed gradients (one per D2H ring slot).
  device_plan(Backend backend, std::size_t staging_slots) : b_(std::move(backend)), slots_(staging_slots) {}
  device_plan(const device_plan&) = delete;
  device_plan& operator=(const device_plan&) = delete;
  ~device_plan() {
    wait_own_work(); // nothing may still use what is freed next
    const copier_type c = b_.copier();
    for (auto& e : events_) {
      c.destroy_event(e);
    }
    c.destroy_event(batch_.copied);
    c.destroy_event(migrated_);
    c.destroy_event(tail_);
    upload_.release(c);
  }

  [[nodiscard]] const Backend& backend() const noexcept { return b_; }

  /// Allocates the per-parameter device state (compact rows for `device_capacity` channels),
  /// scores, index lists, upload buffers, records, staging and scratch. Blocking.
  void setup(const std::vector<param_info>& params,
             std::size_t staging_bytes,
             memory_usage& mem,
             const plan_inputs& inputs = {});

  [[nodiscard]] const step_record_layout& record_layout() const noexcept { return layout_; }
  [[nodiscard]] const void* record() const noexcept { return record_[cur_record_].data(); }
  [[nodiscard]] std::size_t staging_slots() const noexcept { return slots_; }
  /// The number of staging slots, once the parameters are known (before setup()).
  void set_staging_slots(std::size_t n) noexcept { slots_ = n; }
  /// `upload = chunk_ring`: the window's new weights go up at the boundary through one device
  /// chunk of `chunk_bytes` instead of a device upload buffer per parameter (0: whole_window).
  /// Before setup().
  void set_upload_chunk(std::size_t chunk_bytes) noexcept { upload_.chunk_bytes = chunk_bytes; }

  /// Staging slot `i`, after the copy that last read it (the pack on `stream` waits for it).
  [[nodiscard]] std::byte* staging(std::size_t i, cudaStream_t stream) {
    wait_event(i, stream);
    return staging_.data() + i * staging_bytes_;
  }
  /// The D2H copy from staging slot `i` was enqueued on `copy_stream`.
  void staging_pushed(std::size_t i, cudaStream_t copy_stream) { record_event(i, copy_stream); }
  /// Step `t` starts: its record is the buffer of its parity, free once step t-2's copies are done.
  void begin_step(std::int64_t t, cudaStream_t stream) {
    cur_record_ = static_cast<std::size_t>(t & 1);
    wait_event(slots_ + cur_record_, stream);
  }
  /// The current record's last copy was enqueued on `copy_stream`.
  void record_pushed(cudaStream_t copy_stream) { record_event(slots_ + cur_record_, copy_stream); }

  /// Every channel of `p` on the device, state from its working weights (gpu_adamw; a vector).
  void init_device_state(std::size_t p, cudaStream_t stream);
  /// The working weights of `p` widened to fp32, channel-major, into `dst` (blocking). Returns
  /// the bytes copied down.
  std::size_t download_weights(std::size_t p, float* dst, cudaStream_t stream);

  /// The scores and NaN/Inf flags of every gradient (one batched call per dtype), `hooks`'
  /// after_norms(), the fp64 per-tensor squared totals (overflow-safe for finite gradients), then
  /// coef_t and bad_t into the record, its crit masses zeroed (the rest masses: begin_rest_masses).
  template <class Hooks = no_step_hooks>
  void prologue(const step_scalar_inputs& in, cudaStream_t stream, Hooks&& hooks = {}) {
    norms(stream);
    hooks.after_norms(stream);
    scalars(in, stream);
  }
  /// A selection step's device work up to its one wait (P5): every matrix's importance (the
  /// prologue's squared L2, or the L1 norms here: one batched call per dtype), `hooks`'
  /// after_importance(), one segmented top-k of every matrix, then the new sets and this step's
  /// skip flag read back together (blocking). With sq_l2, channels whose fp32 score overflowed
  /// rank by their fp64 rescans (the squared totals'): above every finite score, the larger first,
  /// ties to the lower index. Returns the skip flag (the sets are not to be used then);
  /// `sets[p]`: matrix p's ascending new set. Bytes copied down into `d2h`.
  template <class Hooks = no_step_hooks>
  bool select_all(channel_norm kind,
                  std::vector<std::vector<std::int32_t>>& sets,
                  std::size_t& d2h,
                  cudaStream_t stream,
                  Hooks&& hooks = {}) {
    importance(kind, stream);
    hooks.after_importance(kind, stream);
    return select_top(sets, d2h, stream);
  }

  /// The plan's device buffers that a step's hooks read and write between its phases.
  struct exposed_buffers {
    device_plan* plan;
    /// `p`'s per-channel scores (after_norms, after_importance).
    [[nodiscard]] float* scores(std::size_t p) const noexcept { return plan->dev_[p].scores.data(); }
    /// The NaN/Inf flags, one word per parameter (after_norms).
    [[nodiscard]] std::uint32_t* flags() const noexcept { return plan->flags_.data(); }
    /// The current record's rest masses, one float per matrix (after the step's packs), its crit
    /// masses (after the update) and skip flag (after the prologue).
    [[nodiscard]] float* record_rest() const noexcept { return plan->layout_.rest(plan->record_words(), 0); }
    [[nodiscard]] float* record_crit() const noexcept { return plan->layout_.crit(plan->record_words(), 0); }
    [[nodiscard]] const std::uint32_t* record_skip() const noexcept {
      return step_record_layout::skip(plan->record_words());
    }
    /// `p`'s device upload buffer (whole_window; null with chunk_ring): its host-set positions in
    /// order, after a window's copies up and before its apply.
    [[nodiscard]] std::byte* upload_buffer(std::size_t p) const noexcept {
      return plan->upload_.params[p].buffer.data();
    }
  };
  [[nodiscard]] exposed_buffers exposed() noexcept { return {this}; }

  /// Moves optimizer state between the host's rows `host_rows` (channels `host_first` to
  /// `host_first + host_rows.channels`: the whole matrix, or the range of it the host keeps) and
  /// the device's compact rows when `p`'s device set changes from `old_sel` to `new_sel`
  /// (ascending; `old_sel` empty the first time): leaving rows go home (those outside `host_rows`'
  /// channels are dropped: the host keeps none of them), kept rows move on the device, entering
  /// rows come up from `host_rows`, or from `on_device` when given (every entering row, already
  /// in device memory). Stream-ordered, no wait: the host rows are written and read by host work on
  /// `stream` (host_task), so the host reads them only after the stream has passed that point
  /// (the consumer's slots of this step, wait_migration()). Returns {device->host, host->device}
  /// bytes (the latter without the rows of `on_device`). Host moments M may be bf16
  /// (host_moments.hpp): leaving rows round to nearest, entering rows widen exactly. `on_device`
  /// has moments of type W (int8 host moments cross as fp32: W = float).
  template <class M, class W = M>
  std::pair<std::size_t, std::size_t> migrate(std::size_t p,
                                              const std::vector<std::int32_t>& old_sel,
                                              const std::vector<std::int32_t>& new_sel,
                                              const basic_channel_state<M>& host_rows,
                                              std::int64_t host_first,
                                              const entering_rows<W>* on_device,
                                              cudaStream_t stream);
  /// A sharded engine's selection that puts more of matrix `p`'s top-k in this shard than its
  /// device rows hold (docs/data-parallel.md, ZeRO-3's device state): the caller has raised
  /// `info(p).device_capacity`; the device rows (and the migration's stage, index lists and the
  /// update's per-row masses, where they are sized by it) are reallocated to it, the rows in use
  /// kept. Waits for the plan's work first; allocates (counted in setup()'s memory_usage: its
  /// selected state and scratch). Returns the device bytes added.
  std::size_t grow_device_rows(std::size_t p, std::int64_t old_capacity, cudaStream_t stream);
  /// Installs `p`'s ascending host-set channels (stream-ordered). Returns the bytes copied up.
  std::size_t set_host_set(std::size_t p, const std::vector<std::int32_t>& host_set, cudaStream_t stream);
  /// wait_upload_done() and wait_migration(), each whatever the other threw (the engine's
  /// destructor: nothing may read or write the host buffers it frees next).
  void wait_host_reads() noexcept;
  /// Blocks until the last migration's host work is done (before the host reads host rows on a
  /// path not ordered after the step's slots: state(), a checkpoint's restore).
  void wait_migration() {
    if (migration_recorded_) {
      b_.copier().synchronize(migrated_);
    }
  }

  /// Fused selective AdamW on the device channels of every matrix (crit masses into the record)
  /// and dense AdamW on the device-resident vectors, with the record's coef_t and skip flag;
  /// parameters set_without_grad() names are left out.
  void update(float lr, const adamw_hparams& base, cudaStream_t stream);
  /// The parameters the coming update() leaves out (step_options::no_grad; per parameter, non-zero:
  /// no gradient this step). A change rebuilds the batched update's tables.
  void set_without_grad(const std::vector<std::uint8_t>& without) {
    if (without != without_grad_) {
      without_grad_ = without;
      batch_.dirty = true;
    }
  }
  /// A parameter's lr scale changed (engine::set_lr_scale): the batched update's tables, which
  /// carry it, are rebuilt before the next update.
  void lr_scales_changed() noexcept { batch_.dirty = true; }
  /// The early rest mass of `p` (a matrix) starts again from zero, after the packs enqueued so far
  /// on `stream` (the pack stream): grad_ready() announces `p` again and packs it anew.
  void restart_early_mass(std::size_t p, cudaStream_t stream) {
    b_.zero(early_rest_.data() + dev_[p].matrix_index, 4, stream);
  }
  /// Packs the gradients of host-set positions [begin, end) of `p` into `dst`; their rest mass
  /// goes into the record (after begin_rest_masses()), or (`early`: grad_ready(), before the step
  /// has its record) into the early masses that begin_rest_masses() moves into it.
  void
  pack(std::size_t p, std::int64_t begin, std::int64_t end, std::byte* dst, bool early, cudaStream_t stream);
  /// After begin_step(), on the stream of the step's packs, before the first: the record's rest
  /// masses start from zero, or (`adopt_early`) from the early masses of grad_ready()'s packs,
  /// which are zeroed for the next step. Nothing else of the step writes them (the prologue and
  /// the update write the header and the crit masses), so the packs need wait for nothing more
  /// than the gradients.
  void begin_rest_masses(bool adopt_early, cudaStream_t stream);

  // ---- the upload of a host window's new weights (device_plan_upload.hpp) ---------------------
  // The copy phase on the job's thread: begin_uploads, upload per parameter, end_uploads. The
  // apply phase at the boundary on the training thread: begin_apply, apply_upload, end_apply.

  void begin_uploads();
  /// First thing on a thread the engine owns: the plan's device current (backend.hpp).
  void enter_engine_thread() const { b_.enter_engine_thread(upload_.device); }
  /// Copies host-set positions [begin, end) of `p`'s new weights from its host upload buffer
  /// `src` (position `src_first` at `src`: 0, or a rank's share; chunk_ring: 0) into the device
  /// upload buffer. Returns the bytes.
  std::size_t
  upload(std::size_t p, const std::byte* src, std::int64_t src_first, std::int64_t begin, std::int64_t end);
  void end_uploads();
  void begin_apply(cudaStream_t stream);
  /// Scatters the uploaded weights of host-set positions [begin, end) into `p`'s working
  /// weights. Returns the bytes that were copied up.
  std::size_t apply_upload(std::size_t p, std::int64_t begin, std::int64_t end, cudaStream_t stream);
  void end_apply(cudaStream_t stream);
  /// Blocks until the last upload copies have read the host upload buffers.
  void wait_upload_done();
  /// The upload stage (whole_window, no host upload buffers; before setup): `chunks` pinned host
  /// chunks of `chunk_bytes` through which the job's new weights go up, a few rows at a time.
  void set_upload_stage(std::size_t chunks, std::size_t chunk_bytes) noexcept {
    upload_.stage_chunks = chunks;
    upload_.stage_bytes = chunks > 0 ? chunk_bytes : 0;
  }
  [[nodiscard]] std::size_t upload_stage_bytes() const noexcept { return upload_.stage_bytes; }
  /// The copy phase, staged: the next chunk (once the copy that last read it is done: a wait on
  /// the job's thread), to be written with new weights and sent by send_staged.
  [[nodiscard]] std::byte* stage_chunk();
  /// Copies the chunk stage_chunk() gave, holding host-set positions [begin, end) of `p`'s new
  /// weights, into the device upload buffer. Returns the bytes.
  std::size_t send_staged(std::size_t p, std::int64_t begin, std::int64_t end);

  /// The full state of `p`: the host rows (`host_rows`, or zeros where the parameter has none)
  /// with the device-resident rows written over their channels. Blocking.
  template <class M = float>
  param_state read_full_state(std::size_t p, const basic_channel_state<M>* host_rows, cudaStream_t stream);

  /// The device-resident state of `p` (compact rows in device-set order). Blocking.
  void read_device_state(std::size_t p,
                         std::vector<float>& master,
                         std::vector<float>& m,
                         std::vector<float>& v,
                         std::vector<std::int32_t>& counts,
                         std::vector<std::int32_t>& sel,
                         cudaStream_t stream);

  /// Writes `p`'s device-resident state (checkpoint restore): `rows`, its k compact rows
  /// (k <= capacity). Blocking (the host arrays may be pageable and are reused next).
  void write_device_state(std::size_t p, const device_state_rows& rows, cudaStream_t stream);

private:
  // setup()'s parts, in its order (device_plan_setup.hpp; the upload's: device_plan_upload.hpp).
  /// Per parameter, the state the step updates: compact device rows, scores, host set.
  void setup_param_state(memory_usage& mem);
  /// The vectors' update counts in one array: one dense AdamW call per run of them.
  void setup_dense_counts(memory_usage& mem);
  /// The two step records, and the rest masses' early masses, per-row masses and tickets.
  void setup_records_and_masses(memory_usage& mem);
  /// The squared-norm totals' descriptors and a selection's fp64 rescans: fixed, uploaded once.
  void setup_sq_tables(const plan_inputs& inputs, memory_usage& mem);
  /// The migration's stage, the D2H staging slots and the events of the slots and records.
  void setup_staging(std::size_t staging_bytes, memory_usage& mem);
  /// The upload path: device upload buffers (or the chunk), its stream and events.
  void setup_upload(memory_usage& mem);
  /// The batched update's tables, sized for every parameter that may have rows on the device.
  void setup_batch_tables(memory_usage& mem);
  /// A selection step's readback of the new sets and the migrations' index lists.
  void setup_selection(memory_usage& mem);
  /// The norms' and the top-k's temporary storage: the largest of their queries.
  void setup_temp(memory_usage& mem);

  /// Matrix `p`'s top-k, no output yet (a range of a larger one: the whole's, plan_inputs::whole).
  [[nodiscard]] topk_item topk_of(std::size_t p) const;
  void norms(cudaStream_t stream);
  void scalars(const step_scalar_inputs& in, cudaStream_t stream);
  void importance(channel_norm kind, cudaStream_t stream);
  bool select_top(std::vector<std::vector<std::int32_t>>& sets, std::size_t& d2h, cudaStream_t stream);

  // migrate()'s parts (device_plan_migrate.hpp).
  /// The index lists of a change of set, in the host lists (not yet copied up); the leaving rows
  /// outside the host's range (`host_channels` from `host_first`) dropped.
  migration_lists index_lists(const std::vector<std::int32_t>& old_sel,
                              const std::vector<std::int32_t>& new_sel,
                              std::int64_t host_channels,
                              std::int64_t host_first);
  /// Leaving rows go home: gathered, copied down, written into the host rows by a host task.
  template <class M>
  void rows_home(migration_lists& l, const basic_channel_state<M>& host_rows, cudaStream_t stream);
  /// Kept rows move to their new positions, in place.
  void move_kept_rows(const migration_lists& l, cudaStream_t stream);
  /// Entering rows installed: from the host rows (staged by a host task) or from `on_device`.
  template <class M, class W>
  void install_entering_rows(migration_lists& l,
                             const basic_channel_state<M>& host_rows,
                             const entering_rows<W>* on_device,
                             cudaStream_t stream);

  struct dev_param {
    std::int64_t matrix_index = -1;
    std::int64_t k = 0;       // rows in use
    dbuf<float> master, m, v; // compact rows of the device set, ascending channel order
    dbuf<std::int32_t> counts, sel, host_set;
    dbuf<float> scores;
  };

  template <class T>
  using batch_table = typename batch_tables<Backend>::template table<T>;
  template <class T>
  batch_table<T>& table() {
    return batch_.template of<T>();
  }
  /// The parameters the batched update covers (rows on the device, not a dense vector, a gradient
  /// this step).
  [[nodiscard]] bool batched(std::size_t p) const {
    return dev_[p].k != 0 && !info(p).device_dense && !without_grad(p);
  }
  [[nodiscard]] bool without_grad(std::size_t p) const {
    return p < without_grad_.size() && without_grad_[p] != 0;
  }
  void build_batch(cudaStream_t stream);

  /// Waits for the plan's own work only (not the whole device: other work of the user's may run
  /// there): every event it records (staging slots and records on the copy stream, which follow
  /// the step's work on the user's stream; the uploads, the scatter, the batch tables, the
  /// migration; `tail_` after the work that no copy follows) and its upload stream.
  void wait_own_work() noexcept;

  [[nodiscard]] const param_info& info(std::size_t p) const { return (*params_)[p]; }
  [[nodiscard]] float* record_words() { return record_[cur_record_].data(); }
  /// The update count of device-dense parameter `p` in the dense count array.
  std::int32_t* counts_of(std::size_t p) { return dense_counts_.data() + dense_slot_[p]; }
  template <class T>
  static channel_matrix<const T> compact(const T* base, std::int64_t rows, std::int64_t len) {
    return {base, rows, len, len, channel_layout::contiguous};
  }
  template <class T>
  static channel_matrix<T> compact(T* base, std::int64_t rows, std::int64_t len) {
    return {base, rows, len, len, channel_layout::contiguous};
  }
  // The plan's primitive calls that recur, each written once (device_plan_impl.hpp): what they
  // move is charged by the emulated device's timing model.
  template <class Tin, class Tout>
  void gather(channel_matrix<const Tin> src,
              const std::int32_t* idx,
              std::int64_t count,
              Tout* dst,
              float* l1_mass,
              cudaStream_t s);
  template <class Tin, class Tout>
  void scatter(
      const Tin* src, const std::int32_t* idx, std::int64_t count, channel_matrix<Tout> dst, cudaStream_t s);
  void iota(std::int32_t* out, std::int64_t n, cudaStream_t s);
  void move_counts(const std::int32_t* src,
                   const std::int32_t* src_idx,
                   std::int32_t* dst,
                   const std::int32_t* dst_idx,
                   std::int64_t n,
                   cudaStream_t s);
  /// Zen-auto's mass of rows `idx[0..count)` of `p`'s gradient into `*l1`, in the host twins'
  /// order (schedule/l1_mass.hpp: their 16-lane path for contiguous weights and gradients).
  l1_mass_item mass_args(std::size_t p,
                         const std::int32_t* idx,
                         std::int64_t count,
                         float* row_l1,
                         const std::uint32_t* skip,
                         float* l1) const;
  template <class T>
  static channel_matrix<const T> read_only(channel_matrix<T> m) {
    return {m.data, m.channels, m.channel_len, m.ld, m.layout};
  }
  template <class F>
  void for_each_group(F&& f);
  template <class T>
  std::vector<channel_norm_item<T>> norm_items(const std::vector<std::size_t>& members);
  void record_event(std::size_t i, cudaStream_t s) {
    b_.copier().record(events_[i], s);
    event_used_[i] = true;
  }
  void wait_event(std::size_t i, cudaStream_t s) {
    if (event_used_[i]) {
      b_.copier().stream_wait(s, events_[i]);
    }
  }

  Backend b_;
  std::size_t slots_;
  const std::vector<param_info>* params_ = nullptr;
  memory_usage* mem_ = nullptr;                  // setup()'s: grow_device_rows() counts there
  std::vector<plan_inputs::whole_matrix> whole_; // per parameter (setup's inputs)
  std::vector<dev_param> dev_;
  std::vector<std::size_t> dense_order_; // device-dense parameters in count-slot order
  std::vector<std::int64_t> dense_slot_; // per parameter: its slot in dense_counts_, or -1
  dbuf<std::int32_t> dense_counts_;      // the vectors' update counts, contiguous
  step_record_layout layout_{};
  dbuf<float> record_[2];
  std::size_t cur_record_ = 0;
  dbuf<float> early_rest_;           // per matrix: rest mass of the packs done by grad_ready
  dbuf<float> mass_rows_[2];         // per-row masses: step()'s packs', grad_ready()'s packs'
  dbuf<std::uint32_t> pack_tickets_; // their packs' tickets (the CUDA pack_mass_kernel's), zero between packs
  dbuf<double> totals_;              // per parameter (registration order): fp64 squared norm
  dbuf<sq_total_item> sq_items_;
  // A selection by sq_l2: the fp64 rescans of the +Inf scores, which the top-k ranks them by
  // (topk_item::wide; the same rescans the squared totals add). Per parameter: plan_inputs::score_rescans[p]
  // where set, else its place in wide_, written at the selection by the wide_items_ (nullptr: a vector).
  std::vector<const double*> wide_of_;
  dbuf<double> wide_;
  dbuf<sq_rescan_item> wide_items_;
  int wide_count_ = 0;
  std::int64_t wide_max_ = 0;
  channel_norm importance_ = channel_norm::sq_l2; // the last importance()'s kind
  dbuf<std::uint32_t> flags_;                     // per parameter, in dtype-group order
  dbuf<float> stage_;
  dbuf<std::int32_t> stage_counts_;
  hbuf<float> h_stage_;
  hbuf<std::int32_t> h_stage_counts_;
  dbuf<std::byte> staging_;
  std::size_t staging_bytes_ = 0;
  dbuf<std::byte> temp_;
  std::vector<event_type> events_; // [0, slots): staging slots; slots + 0/1: records
  std::vector<bool> event_used_;   // training thread only
  upload_phase<Backend> upload_;   // the upload of a host window's weights (device_plan_upload.hpp)
  // A selection step (select_all, migrate): the new sets of every matrix and the skip flag read
  // back in one copy; the migration's index lists, each matrix's at its own offset (`lists_at_`,
  // from 0 at each selection), so that no host buffer is rewritten before its copy ran.
  dbuf<std::int32_t> sel_idx_;
  hbuf<std::int32_t> h_sel_;
  dbuf<std::int32_t> lists_;
  hbuf<std::int32_t> h_lists_;
  std::size_t lists_at_ = 0;
  event_type migrated_{};
  bool migration_recorded_ = false;
  event_type tail_{};                      // recorded after init_device_state and update (wait_own_work)
  batch_tables<Backend> batch_;            // the batched update's (build_batch, device_plan_batch.hpp)
  std::vector<std::uint8_t> without_grad_; // per parameter (empty: none): left out of update()
};

} // namespace detail
ZF_NAMESPACE_END
