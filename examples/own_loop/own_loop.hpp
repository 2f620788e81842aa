/// @file
/// ZenFlow written by hand from the library's primitives alone, no zenflow::engine: select/ (the
/// channel scores, the top-k), optim/ (AdamW on the device rows and the vectors, gather/scatter,
/// the accumulation, the host window), schedule/ (coef_t and bad_t, the L1 masses, Zen-auto's
/// voter, the mass trigger, k and the selection and window rules) and transport/ (the window queue
/// that runs a window's host AdamW while the next window trains).
///
/// `zenflow_loop<T, Side>`: every parameter of working type T; `Side` is where the device half
/// runs: `on_host` (below: the host twins over a worker pool; "device" memory is host memory) or
/// `on_cuda` (on_cuda.cuh: the CUDA launchers on one stream). It is the engine's step on one rank,
/// in the engine's order, so it makes the engine's decisions and computes the engine's bits
/// (tests/examples/own_loop_test.cpp, on the host: the weights after every step, the selections,
/// windows and skipped steps, the optimizer state at the end). docs/primitives.md walks through it.
///
/// What it leaves to the engine: the D2H ring and grad_ready()'s streaming (here a step's host-set
/// gradients go down in one copy after its update, and the step waits for them), the pipeline's
/// other streams, warm-up rounds, data parallel, checkpoints, bf16/int8 host moments, the
/// host_lr_scale rules but "linear", device accumulation, chunked uploads, statistics. The engine
/// packs a matrix's host rows slot by slot and adds their rest mass slot by slot; this loop packs a
/// matrix in one call: the engine's bits while its host rows fit one ring slot.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/channels.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/schedule/l1_mass.hpp>
#include <zenflow/schedule/step_scalars.hpp>
#include <zenflow/schedule/step_schedule.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>
#include <zenflow/transport/window_queue.hpp>

namespace own_loop {

/// The primitives of namespace zenflow::NS (host or device: the same names and arguments but the
/// last, a worker pool or a stream), as static members of a Side.
#define OWN_LOOP_FORWARD(NS, name)                                                                           \
  template <class... A>                                                                                      \
  static cudaError_t name(A&&... a) {                                                                        \
    return zenflow::NS::name(std::forward<A>(a)...);                                                         \
  }
#define OWN_LOOP_PRIMITIVES(NS)                                                                              \
  template <class... A>                                                                                      \
  static cudaError_t sq_l2_scores(A&&... a) {                                                                \
    return zenflow::NS::channel_norms_batched<zenflow::channel_norm::sq_l2>(std::forward<A>(a)...);          \
  }                                                                                                          \
  OWN_LOOP_FORWARD(NS, topk_segmented)                                                                       \
  OWN_LOOP_FORWARD(NS, sq_norm_totals)                                                                       \
  OWN_LOOP_FORWARD(NS, sq_norm_rescan)                                                                       \
  OWN_LOOP_FORWARD(NS, compute_step_header)                                                                  \
  OWN_LOOP_FORWARD(NS, l1_mass)                                                                              \
  OWN_LOOP_FORWARD(NS, adamw_dense)                                                                          \
  OWN_LOOP_FORWARD(NS, adamw_selective)                                                                      \
  OWN_LOOP_FORWARD(NS, gather_channels)                                                                      \
  OWN_LOOP_FORWARD(NS, scatter_channels)

/// The device half on the host: host memory, the host twins on `pool` (nullptr: this thread).
struct on_host {
  template <class U>
  using buffer = std::vector<U>; ///< "device" memory
  template <class U>
  using host_buffer = std::vector<U>;
  zenflow::worker_pool* pool = nullptr;
  template <class U>
  [[nodiscard]] buffer<U> make(std::size_t n) const {
    return buffer<U>(n);
  }
  template <class U>
  [[nodiscard]] host_buffer<U> make_host(std::size_t n) const {
    return host_buffer<U>(n);
  }
  [[nodiscard]] zenflow::worker_pool* exec() const noexcept { return pool; }
  void copy_up(void* dev, const void* host, std::size_t bytes) const { std::memmove(dev, host, bytes); }
  void copy_down(void* host, const void* dev, std::size_t bytes) const { std::memmove(host, dev, bytes); }
  void wait() const noexcept {}
  OWN_LOOP_PRIMITIVES(host)
};

/// The settings: zenflow::config's names, meanings and defaults (one rank, no warm-up).
struct settings {
  double topk_ratio = 0.1;
  std::int64_t select_interval = 100; ///< steps between scheduled selections, the first at step 0
  zenflow::window_rule windows{};     ///< update_interval (0: Zen-auto), min/max_update_interval, auto_ratio
  double select_on_mass_drop = 0.5;   ///< 0: off
  std::int64_t min_select_interval = 16;
  bool overlap_step = true;
  zenflow::adamw_hparams adam{}; ///< its lr is each step's
  float gradient_clipping = 0.0f;
  float loss_scale = 1.0f;
};

/// What a step did.
struct step_result {
  bool selection = false;
  bool window_closed = false;
  bool skipped = false;
};

template <class T, class Side>
class zenflow_loop {
  template <class U>
  using buffer = typename Side::template buffer<U>;
  template <class U>
  using host_buffer = typename Side::template host_buffer<U>;

public:
  /// `pool`: the host's threads (the accumulation, the host windows).
  zenflow_loop(settings s, Side side, zenflow::worker_pool* pool)
      : s_(s), side_(side), pool_(pool), trigger_(s.select_on_mass_drop, s.min_select_interval) {}
  ~zenflow_loop() {
    if (queue_) {
      queue_->shutdown(); // the job in flight writes into this object
    }
  }

  /// A matrix of `channels` contiguous channels of `len` elements (weights and gradients in the
  /// Side's memory; the gradients written by the user's backward before each step()).
  void add_matrix(T* w, const T* g, std::int64_t channels, std::int64_t len) {
    order_.push_back({true, matrices_.size()});
    auto x = std::make_unique<matrix>();
    x->w = w;
    x->g = g;
    x->channels = channels;
    x->len = len;
    x->k = zenflow::topk_count(s_.topk_ratio, channels); // the device rows: k of schedule/
    matrices_.push_back(std::move(x));
  }
  /// A vector of `n` elements, updated on the device every step.
  void add_vector(T* w, const T* g, std::int64_t n) {
    order_.push_back({false, vectors_.size()});
    auto y = std::make_unique<vector>();
    y->w = w;
    y->g = g;
    y->n = n;
    vectors_.push_back(std::move(y));
  }
  /// After the last add: every matrix starts with all its channels on the host (fp32 masters
  /// from the weights, moments and counts 0; the first step selects), every vector on the device.
  void start();
  /// One step with learning rate `lr`, once the gradients are written.
  step_result step(float lr);
  /// Waits for the host window in flight and applies its weights (the engine's flush()).
  void finish() { drain(); }

  /// Channel c of matrix i: master, m, v and count, wherever it lives (after finish(): no job
  /// writes the host rows then).
  struct row_state {
    std::vector<float> master, m, v;
    std::int32_t count = 0;
  };
  [[nodiscard]] row_state matrix_row(std::size_t i, std::int32_t c);

private:
  struct matrix {
    T* w = nullptr;
    const T* g = nullptr;
    std::int64_t channels = 0, len = 0, k = 0;
    // device: the scores and their fp64 rescans, the device set and its compact fp32 rows, the
    // host set with its packed gradients and new weights, the masses' per-row sums
    buffer<float> scores, master, m, v, row_l1;
    buffer<double> rescan;
    buffer<std::int32_t> sel, counts, host_set;
    buffer<T> packed, upload;
    // host: the sets, every channel's rows (a device channel's parked), two window sums
    std::vector<std::int32_t> sel_h, host_set_h, counts_h;
    std::vector<float> master_h, m_h, v_h, acc[2];
    host_buffer<T> packed_h, upload_h;
    [[nodiscard]] zenflow::channel_matrix<const T> grad() const { return {g, channels, len, len, {}}; }
    [[nodiscard]] zenflow::channel_matrix<T> weights() const { return {w, channels, len, len, {}}; }
    [[nodiscard]] std::int64_t host_rows() const { return static_cast<std::int64_t>(host_set_h.size()); }
  };
  struct vector {
    T* w = nullptr;
    const T* g = nullptr;
    std::int64_t n = 0;
    buffer<float> score, master, m, v;
  };
  struct param_ref {
    bool is_matrix;
    std::size_t index;
  };
  /// A step's masses as Zen-auto and the trigger read them (times coef_t), zen_auto_lag steps later.
  struct step_masses {
    std::int64_t step = -1;
    bool good = false;
    std::vector<float> crit, rest;
  };

  [[nodiscard]] zenflow::step_header* header() {
    return reinterpret_cast<zenflow::step_header*>(record_.data());
  }
  [[nodiscard]] float* crit(std::size_t i) { return record_.data() + 4 + i; }
  [[nodiscard]] float* rest(std::size_t i) { return record_.data() + 4 + matrices_.size() + i; }
  [[nodiscard]] zenflow::adamw_hparams hparams(float lr) const {
    zenflow::adamw_hparams hp = s_.adam;
    hp.lr = lr;
    return hp;
  }
  void set_host_set(matrix& x);

  bool select(std::int64_t t);
  void migrate(matrix& x, const std::int32_t* new_sel);
  bool window_closes_after(std::int64_t t);
  void close_window(float lr);
  void host_window(std::size_t a, std::int32_t n_w, float lr);
  void apply();
  void drain();

  settings s_;
  Side side_;
  zenflow::worker_pool* pool_;
  std::vector<param_ref> order_; // registration order: the order the norms' totals are added in
  std::vector<std::unique_ptr<matrix>> matrices_;
  std::vector<std::unique_ptr<vector>> vectors_;
  // device: flags and fp64 totals per parameter, the step record (a step_header, then every
  // matrix's crit mass, then every rest mass), the batched calls' tables, the top-k, scratch
  buffer<std::uint32_t> flags_;
  buffer<double> totals_;
  buffer<float> record_;
  buffer<std::int32_t> vector_counts_, top_;
  buffer<zenflow::sq_total_item> sq_items_;
  buffer<zenflow::sq_rescan_item> rescan_items_;
  buffer<std::byte> temp_;
  std::size_t temp_bytes_ = 0;
  std::vector<zenflow::channel_norm_item<T>> norm_items_;
  std::vector<zenflow::topk_item> topk_items_;
  std::vector<zenflow::adamw_tensor<T>> vector_tensors_;
  host_buffer<float> record_h_;
  host_buffer<std::int32_t> top_h_;
  std::int64_t widest_ = 0;

  // the schedule (schedule/)
  std::optional<zenflow::zen_auto_voter> voter_;
  zenflow::mass_trigger trigger_;
  step_masses masses_[zenflow::zen_auto_lag + 1];
  std::int64_t t_ = 0;
  bool pending_ = false; // a selection is due and waits for a step with finite gradients
  std::int64_t selection_step_ = -1;
  std::int64_t triggered_ = -1; // the step the trigger made a selection step
  bool window_open_ = false;
  std::int64_t window_start_ = 0, length_ = 0;
  // the host windows: two sums with overlap (the job reads one while the next window fills the other)
  std::size_t acc_ = 0;
  std::int32_t n_w_[2] = {0, 0}; // good steps in each sum
  std::unique_ptr<zenflow::window_queue> queue_;
  std::int64_t job_ = -1; // the queue's window in flight
  bool job_produced_ = false;
};

template <class T, class Side>
void zenflow_loop<T, Side>::start() {
  const auto P = order_.size();
  const auto M = matrices_.size();
  std::vector<zenflow::sq_total_item> sq(P);
  std::vector<zenflow::sq_rescan_item> rescans;
  std::vector<std::int64_t> ks, chans;
  std::int64_t top_rows = 0;
  for (std::size_t p = 0; p < P; ++p) {
    if (order_[p].is_matrix) {
      matrix& x = *matrices_[order_[p].index];
      const auto n = static_cast<std::size_t>(x.channels * x.len);
      const auto c = static_cast<std::size_t>(x.channels), k = static_cast<std::size_t>(x.k);
      x.scores = side_.template make<float>(c);
      x.row_l1 = side_.template make<float>(c);
      x.rescan = side_.template make<double>(c);
      x.master = side_.template make<float>(k * static_cast<std::size_t>(x.len));
      x.m = side_.template make<float>(x.master.size());
      x.v = side_.template make<float>(x.master.size());
      x.sel = side_.template make<std::int32_t>(k);
      x.counts = side_.template make<std::int32_t>(k);
      x.host_set = side_.template make<std::int32_t>(c);
      x.packed = side_.template make<T>(n);
      x.upload = side_.template make<T>(n);
      x.packed_h = side_.template make_host<T>(n);
      x.upload_h = side_.template make_host<T>(n);
      x.m_h.assign(n, 0.0f);
      x.v_h.assign(n, 0.0f);
      x.counts_h.assign(c, 0);
      x.acc[0].assign(n, 0.0f);
      x.acc[1].assign(s_.overlap_step ? n : 0, 0.0f);
      x.host_set_h.resize(c);
      for (std::size_t i = 0; i < c; ++i) {
        x.host_set_h[i] = static_cast<std::int32_t>(i);
      }
      set_host_set(x);
      // fp32 masters of every channel from the weights.
      buffer<float> wide = side_.template make<float>(n);
      ZF_CUDA_TRY(Side::gather_channels(zenflow::channel_matrix<const T>{x.w, x.channels, x.len, x.len, {}},
                                        x.host_set.data(), x.channels, wide.data(), nullptr, side_.exec()));
      x.master_h.resize(n);
      side_.copy_down(x.master_h.data(), wide.data(), n * 4);
      side_.wait();
      norm_items_.push_back({x.g, x.channels, x.len, x.len, {}, x.scores.data()});
      sq[p] = {x.g, x.scores.data(), x.channels, x.len, x.len, {}, zenflow::dtype_of<T>(), nullptr};
      rescans.push_back({sq[p], 0, x.channels, x.rescan.data()});
      topk_items_.push_back({x.scores.data(), x.channels, x.k, nullptr, nullptr, x.rescan.data()});
      top_rows += x.k;
      widest_ = std::max(widest_, x.channels);
      ks.push_back(x.k);
      chans.push_back(x.channels);
    } else {
      vector& y = *vectors_[order_[p].index];
      const auto n = static_cast<std::size_t>(y.n);
      y.score = side_.template make<float>(1);
      y.master = side_.template make<float>(n);
      y.m = side_.template make<float>(n);
      y.v = side_.template make<float>(n);
      const std::vector<float> zeros(n, 0.0f);
      side_.copy_up(y.m.data(), zeros.data(), n * 4);
      side_.copy_up(y.v.data(), zeros.data(), n * 4);
      // On the device from the start: the master from the weights (a vector is one channel).
      buffer<std::int32_t> zero = side_.template make<std::int32_t>(1);
      const std::int32_t z = 0;
      side_.copy_up(zero.data(), &z, 4);
      ZF_CUDA_TRY(Side::gather_channels(zenflow::channel_matrix<const T>{y.w, 1, y.n, y.n, {}}, zero.data(),
                                        1, y.master.data(), nullptr, side_.exec()));
      side_.wait();
      norm_items_.push_back({y.g, 1, y.n, y.n, {}, y.score.data()});
      sq[p] = {y.g, y.score.data(), 1, y.n, y.n, {}, zenflow::dtype_of<T>(), nullptr};
      vector_tensors_.push_back({y.w, y.g, y.master.data(), y.m.data(), y.v.data(), y.n});
    }
  }
  voter_.emplace(ks, chans);
  flags_ = side_.template make<std::uint32_t>(P);
  totals_ = side_.template make<double>(P);
  record_ = side_.template make<float>(4 + 2 * M);
  record_h_ = side_.template make_host<float>(record_.size());
  vector_counts_ = side_.template make<std::int32_t>(std::max<std::size_t>(vectors_.size(), 1));
  const std::vector<std::int32_t> no_counts(vector_counts_.size(), 0);
  side_.copy_up(vector_counts_.data(), no_counts.data(), no_counts.size() * 4);
  // The top-k's output: every matrix's new set, then the step's skip flag (read back together).
  top_ = side_.template make<std::int32_t>(static_cast<std::size_t>(top_rows) + 1);
  top_h_ = side_.template make_host<std::int32_t>(top_.size());
  std::int64_t at = 0;
  for (auto& it : topk_items_) {
    it.indices = top_.data() + at;
    at += it.k;
  }
  sq_items_ = side_.template make<zenflow::sq_total_item>(P);
  rescan_items_ = side_.template make<zenflow::sq_rescan_item>(std::max<std::size_t>(rescans.size(), 1));
  side_.copy_up(sq_items_.data(), sq.data(), P * sizeof(sq[0]));
  side_.copy_up(rescan_items_.data(), rescans.data(), rescans.size() * sizeof(rescans[0]));
  // Scratch: the largest of the norms' and the top-k's size queries.
  std::size_t norm_bytes = 0, topk_bytes = 0;
  ZF_CUDA_TRY(Side::sq_l2_scores(nullptr, norm_bytes, norm_items_.data(), std::int64_t(P),
                                 zenflow::channel_norm_extras{}, side_.exec()));
  ZF_CUDA_TRY(Side::topk_segmented(nullptr, topk_bytes, topk_items_.data(), std::int64_t(M),
                                   zenflow::topk_order::ascending_index, side_.exec()));
  temp_bytes_ = std::max(norm_bytes, topk_bytes);
  temp_ = side_.template make<std::byte>(temp_bytes_);
  for (auto& mass : masses_) {
    mass.crit.assign(M, 0.0f);
    mass.rest.assign(M, 0.0f);
  }
  if (s_.overlap_step) {
    queue_ = std::make_unique<zenflow::window_queue>(1); // job w runs during window w + 1
  }
  side_.wait();
}

// example-begin own-loop-step
template <class T, class Side>
step_result zenflow_loop<T, Side>::step(float lr) {
  const std::int64_t t = t_++;
  const auto M = matrices_.size();
  const auto on = side_.exec();
  step_result out;
  // 1. coef_t and bad_t on the device: every tensor's scores and NaN/Inf flag, its fp64 squared
  //    norm, then the header (the step's crit and rest masses zeroed with it).
  std::size_t bytes = temp_bytes_;
  ZF_CUDA_TRY(Side::sq_l2_scores(temp_.data(), bytes, norm_items_.data(), std::int64_t(order_.size()),
                                 zenflow::channel_norm_extras{nullptr, flags_.data()}, on));
  ZF_CUDA_TRY(Side::sq_norm_totals(sq_items_.data(), std::int64_t(order_.size()), totals_.data(), on));
  ZF_CUDA_TRY(Side::compute_step_header(totals_.data(), std::int64_t(order_.size()), flags_.data(),
                                        std::int64_t(order_.size()), s_.loss_scale, s_.gradient_clipping,
                                        header(), crit(0), std::int64_t(2 * M), on));
  // 2. A selection: scheduled, or fired by the mass trigger at the end of step t - 1. The host's
  //    job is applied first; the selection itself waits for a step whose gradients are finite.
  if (zenflow::is_selection_step(t, 0, s_.select_interval) || triggered_ == t) {
    pending_ = true;
    triggered_ = -1;
    drain();
  }
  if (!window_open_) {
    window_open_ = true;
    window_start_ = t;
    length_ = 0;
    voter_->on_window_start();
  }
  if (pending_) {
    out.selection = select(t);
  }
  // 3. The device update (coef_t and the skip flag read where the header is): dense AdamW on the
  //    vectors, selective AdamW on each matrix's device rows and their crit mass.
  const zenflow::step_scalars sc = zenflow::scalars_of(header());
  const zenflow::adamw_hparams hp = hparams(lr);
  if (!vectors_.empty()) {
    ZF_CUDA_TRY(Side::adamw_dense(vector_tensors_.data(), static_cast<int>(vector_tensors_.size()),
                                  vector_counts_.data(), hp, sc.grad_scale, sc.skip, on));
  }
  for (std::size_t i = 0; i < M; ++i) {
    matrix& x = *matrices_[i];
    if (x.sel_h.empty()) {
      continue; // no selection yet
    }
    const zenflow::selected_rows rows{x.sel.data(), x.k,        x.master.data(),
                                      x.m.data(),   x.v.data(), x.counts.data()};
    ZF_CUDA_TRY(Side::adamw_selective(x.weights(), x.grad(), rows, hp, sc, nullptr, on));
    ZF_CUDA_TRY(Side::l1_mass(
        zenflow::make_l1_mass_item(x.grad(), x.sel.data(), x.k, x.row_l1.data(), sc.skip, crit(i)), on));
  }
  // 4. The host set's gradients packed with their rest mass, and down with the record.
  for (std::size_t i = 0; i < M; ++i) {
    matrix& x = *matrices_[i];
    ZF_CUDA_TRY(
        Side::gather_channels(x.grad(), x.host_set.data(), x.host_rows(), x.packed.data(), nullptr, on));
    ZF_CUDA_TRY(Side::l1_mass(zenflow::make_l1_mass_item(x.grad(), x.host_set.data(), x.host_rows(),
                                                         x.row_l1.data(), nullptr, rest(i)),
                              on));
    side_.copy_down(x.packed_h.data(), x.packed.data(),
                    static_cast<std::size_t>(x.host_rows() * x.len) * sizeof(T));
  }
  side_.copy_down(record_h_.data(), record_.data(), record_.size() * 4);
  side_.wait();
  zenflow::step_header h;
  std::memcpy(static_cast<void*>(&h), record_h_.data(), sizeof h);
  out.skipped = h.skip != 0;
  // 5. The host: coef_t x the gradients into the window's sum (the window's first good step
  //    writes it), and the step's masses times coef_t for Zen-auto and the trigger.
  if (!out.skipped) {
    const auto mode =
        n_w_[acc_] == 0 ? zenflow::host::accumulate_mode::assign : zenflow::host::accumulate_mode::add;
    for (auto& xp : matrices_) {
      matrix& x = *xp;
      ZF_CUDA_TRY(zenflow::host::accumulate_channels<T>(x.acc[acc_].data(), x.channels, x.len,
                                                        x.packed_h.data(), x.host_set_h.data(), x.host_rows(),
                                                        h.coef, pool_, mode));
    }
    ++n_w_[acc_];
  }
  step_masses& mass = masses_[t % (zenflow::zen_auto_lag + 1)];
  mass.step = t;
  mass.good = !out.skipped;
  for (std::size_t i = 0; i < M; ++i) {
    mass.crit[i] = record_h_[4 + i] * h.coef;
    mass.rest[i] = record_h_[4 + M + i] * h.coef;
  }
  // 6. The window: every step counts toward its length, skipped ones too.
  ++length_;
  if (window_closes_after(t)) {
    close_window(lr);
    out.window_closed = true;
  }
  return out;
}
// example-end own-loop-step

/// Every matrix's top-k of this step's scores (an overflowed score ranked by its fp64 rescan),
/// read back with the skip flag: a bad step selects nothing. Then the rows that change sides move.
template <class T, class Side>
bool zenflow_loop<T, Side>::select(std::int64_t t) {
  const auto on = side_.exec();
  ZF_CUDA_TRY(Side::sq_norm_rescan(rescan_items_.data(), std::int64_t(matrices_.size()), widest_, on));
  std::size_t bytes = temp_bytes_;
  ZF_CUDA_TRY(Side::topk_segmented(temp_.data(), bytes, topk_items_.data(), std::int64_t(matrices_.size()),
                                   zenflow::topk_order::ascending_index, on));
  const std::size_t rows = top_.size() - 1;
  side_.copy_down(top_h_.data(), top_.data(), rows * 4);
  side_.copy_down(top_h_.data() + rows, &header()->skip, 4);
  side_.wait();
  if (top_h_[rows] != 0) {
    return false; // a selection waits for a step with finite gradients
  }
  drain();
  std::size_t at = 0;
  for (auto& x : matrices_) {
    migrate(*x, top_h_.data() + at);
    at += static_cast<std::size_t>(x->k);
  }
  selection_step_ = t;
  pending_ = false;
  voter_->on_selection();
  trigger_.on_selection();
  return true;
}

/// The device set becomes `new_sel` (ascending): a leaving row's master, moments and count go
/// home to the host rows, an entering row's come up from them, a kept row moves to its new place.
/// Done on the host (the engine does it on the device, stream-ordered): the old rows come down,
/// the new ones go up.
template <class T, class Side>
void zenflow_loop<T, Side>::migrate(matrix& x, const std::int32_t* new_sel) {
  const auto L = static_cast<std::size_t>(x.len);
  const std::size_t k_old = x.sel_h.size(), k = static_cast<std::size_t>(x.k);
  std::vector<float> old[3] = {std::vector<float>(k_old * L), std::vector<float>(k_old * L),
                               std::vector<float>(k_old * L)};
  std::vector<std::int32_t> old_counts(k_old);
  buffer<float>* dev[3] = {&x.master, &x.m, &x.v};
  std::vector<float>* home[3] = {&x.master_h, &x.m_h, &x.v_h};
  for (int s = 0; s < 3; ++s) {
    side_.copy_down(old[s].data(), dev[s]->data(), k_old * L * 4);
  }
  side_.copy_down(old_counts.data(), x.counts.data(), k_old * 4);
  side_.wait();
  for (std::size_t r = 0; r < k_old; ++r) { // every old row home (a kept one comes straight back)
    const auto c = static_cast<std::size_t>(x.sel_h[r]);
    for (int s = 0; s < 3; ++s) {
      std::copy_n(old[s].data() + r * L, L, home[s]->data() + c * L);
    }
    x.counts_h[c] = old_counts[r];
  }
  std::vector<float> next[3] = {std::vector<float>(k * L), std::vector<float>(k * L),
                                std::vector<float>(k * L)};
  std::vector<std::int32_t> next_counts(k);
  for (std::size_t r = 0; r < k; ++r) {
    const auto c = static_cast<std::size_t>(new_sel[r]);
    for (int s = 0; s < 3; ++s) {
      std::copy_n(home[s]->data() + c * L, L, next[s].data() + r * L);
    }
    next_counts[r] = x.counts_h[c];
  }
  for (int s = 0; s < 3; ++s) {
    side_.copy_up(dev[s]->data(), next[s].data(), k * L * 4);
  }
  side_.copy_up(x.counts.data(), next_counts.data(), k * 4);
  side_.copy_up(x.sel.data(), new_sel, k * 4);
  x.sel_h.assign(new_sel, new_sel + k);
  x.host_set_h.clear();
  for (std::int32_t c = 0, r = 0; c < x.channels; ++c) { // the complement, ascending
    if (r < x.k && x.sel_h[static_cast<std::size_t>(r)] == c) {
      ++r;
    } else {
      x.host_set_h.push_back(c);
    }
  }
  set_host_set(x);
  side_.wait(); // the host vectors above are freed next
}

template <class T, class Side>
void zenflow_loop<T, Side>::set_host_set(matrix& x) {
  side_.copy_up(x.host_set.data(), x.host_set_h.data(), x.host_set_h.size() * 4);
}

/// The end of step t: step t - zen_auto_lag's masses to the voter and the trigger, then whether
/// the window closes (schedule/step_schedule.hpp's rules).
// example-begin own-loop-window
template <class T, class Side>
bool zenflow_loop<T, Side>::window_closes_after(std::int64_t t) {
  const bool zen_auto = s_.windows.update_interval == 0;
  const bool trigger = s_.select_on_mass_drop > 0.0;
  bool forced = zenflow::is_selection_step(t + 1, 0, s_.select_interval);
  if (const std::int64_t s = t - zenflow::zen_auto_lag; s >= 0) {
    const step_masses& m = masses_[s % (zenflow::zen_auto_lag + 1)];
    zenflow::add_step_masses(zen_auto ? &*voter_ : nullptr, trigger ? &trigger_ : nullptr, s,
                             m.step == s && m.good, m.crit.data(), m.rest.data(),
                             std::int64_t(matrices_.size()), selection_step_, window_start_);
  }
  if (trigger && !forced && selection_step_ >= 0 && !pending_ && trigger_.fire(t, selection_step_)) {
    triggered_ = t + 1; // that step selects: this window closes now
    forced = true;
  }
  return zenflow::window_closes(s_.windows, length_, forced, zen_auto ? voter_->vote_share() : 0.0);
}
// example-end own-loop-window

/// Without overlap the window's host AdamW runs now and its weights go up before the next step;
/// with it, the last window's job is applied, this one's submitted (it runs while the next window
/// trains) and the next window sums into the other accumulator.
template <class T, class Side>
void zenflow_loop<T, Side>::close_window(float lr) {
  const std::size_t a = acc_;
  const std::int32_t n_w = std::exchange(n_w_[a], 0);
  if (!s_.overlap_step) {
    if (n_w > 0) {
      host_window(a, n_w, lr);
      apply();
    }
  } else {
    drain();
    job_produced_ = n_w > 0;
    job_ = queue_->submit([this, a, n_w, lr] {
      if (n_w > 0) {
        host_window(a, n_w, lr);
      }
    });
    acc_ ^= 1u;
  }
  window_open_ = false;
}

/// AdamW on each host row with the window's mean gradient acc / n_w, lr x n_w ("linear"), the
/// moments decayed as n_w steps; the new weights into the upload buffers. The sum is left as it
/// is: the next window's first good step writes it.
template <class T, class Side>
void zenflow_loop<T, Side>::host_window(std::size_t a, std::int32_t n_w, float lr) {
  zenflow::adamw_hparams hp = hparams(lr);
  hp.lr = static_cast<float>(static_cast<double>(hp.lr) * static_cast<double>(n_w));
  for (auto& xp : matrices_) {
    matrix& x = *xp;
    const zenflow::channel_state st{x.master_h.data(), x.m_h.data(), x.v_h.data(),
                                    x.counts_h.data(), x.channels,   x.len};
    ZF_CUDA_TRY(zenflow::host::adamw_window<T, T>(
        st, x.acc[a].data(), x.host_set_h.data(), x.host_rows(), static_cast<const T*>(nullptr), 1.0f, n_w,
        hp, x.upload_h.data(), pool_, zenflow::host::window_acc::keep, n_w));
  }
}

/// The host window's weights up and into the host set's working weights.
template <class T, class Side>
void zenflow_loop<T, Side>::apply() {
  for (auto& xp : matrices_) {
    matrix& x = *xp;
    side_.copy_up(x.upload.data(), x.upload_h.data(),
                  static_cast<std::size_t>(x.host_rows() * x.len) * sizeof(T));
    ZF_CUDA_TRY(Side::scatter_channels(static_cast<const T*>(x.upload.data()), x.host_set.data(),
                                       x.host_rows(), x.weights(), side_.exec()));
  }
  side_.wait(); // the host's upload buffers are rewritten by the next job
}

/// Waits for the job in flight (if any) and applies its weights.
template <class T, class Side>
void zenflow_loop<T, Side>::drain() {
  if (job_ < 0) {
    return;
  }
  queue_->wait_applied(job_);
  job_ = -1;
  if (job_produced_) {
    apply();
  }
}

template <class T, class Side>
typename zenflow_loop<T, Side>::row_state zenflow_loop<T, Side>::matrix_row(std::size_t i, std::int32_t c) {
  matrix& x = *matrices_[i];
  const auto L = static_cast<std::size_t>(x.len);
  row_state r;
  const auto on_device = std::lower_bound(x.sel_h.begin(), x.sel_h.end(), c);
  if (on_device != x.sel_h.end() && *on_device == c) {
    const auto at = static_cast<std::size_t>(on_device - x.sel_h.begin());
    r.master.resize(L);
    r.m.resize(L);
    r.v.resize(L);
    side_.copy_down(r.master.data(), x.master.data() + at * L, L * 4);
    side_.copy_down(r.m.data(), x.m.data() + at * L, L * 4);
    side_.copy_down(r.v.data(), x.v.data() + at * L, L * 4);
    side_.copy_down(&r.count, x.counts.data() + at, 4);
    side_.wait();
    return r;
  }
  const auto at = static_cast<std::size_t>(c) * L;
  r.master.assign(x.master_h.begin() + at, x.master_h.begin() + at + L);
  r.m.assign(x.m_h.begin() + at, x.m_h.begin() + at + L);
  r.v.assign(x.v_h.begin() + at, x.v_h.begin() + at + L);
  r.count = x.counts_h[static_cast<std::size_t>(c)];
  return r;
}

} // namespace own_loop
