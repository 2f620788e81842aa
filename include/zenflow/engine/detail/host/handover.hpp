/// @file
/// What the host side's threads hand each other, one named type per hand-over, each saying who
/// writes it, who reads it and what orders the two. The threads: the training thread (the
/// engine's calls), the consumer (of the D2H ring: its own thread on device backends, the training
/// thread on the host backend) and the window job (the window queue's executor, or the training
/// thread for a synchronous window).
///
///   consumer_progress    consumer -> training thread, window job (a mutex and a condition
///                        variable): slots consumed, steps per accumulator, the consumer's error
///   step_mass_ring       consumer -> training thread, ordered by consumer_progress
///   window_accumulators  consumer -> window job, ordered by consumer_progress::take_n_w; with one
///                        buffer for two windows, window job -> consumer too, ordered by
///                        consumer_progress::note_read / wait_read (the drain in place)
///   channel_sets         training thread -> consumer, window job (written at a selection, with
///                        every pushed slot consumed and no job running)
///   landing_buffer       training thread -> consumer, ordered by the ring's push
///   window_params        training thread -> window job, ordered by the queue's submit
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/row_shard.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The consumer's progress: how many pushed slots it has handled, the good steps it has
/// accumulated into each accumulator (n_w), the error that stopped it, and the steps it saw
/// skipped. Written by the consumer; the training thread and the window job wait on it. Every
/// write the consumer made before a slot was counted is visible to whoever saw the count reach
/// that slot (the mutex), which is what orders the accumulators and the masses.
class consumer_progress {
public:
  // ---- the consumer ----

  /// One more slot handled (its effects written).
  void note_consumed() {
    {
      std::lock_guard lock(mutex_);
      ++consumed_;
    }
    cv_.notify_all();
  }
  /// The consumer failed with `error` (it handles no more slots); waiters wake and rethrow it.
  void fail(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      error_ = std::move(error);
    }
    cv_.notify_all();
  }
  /// True when accumulator `a` holds no step of its window yet (the next good one writes it).
  [[nodiscard]] bool window_empty(std::size_t a) {
    std::lock_guard lock(mutex_);
    return n_w_[a] == 0;
  }
  /// One more good step in accumulator `a`.
  void count_step(std::size_t a) {
    std::lock_guard lock(mutex_);
    ++n_w_[a];
  }
  /// One more skipped step seen.
  void note_skipped() noexcept { skipped_.fetch_add(1, std::memory_order_relaxed); }

  // ---- the training thread and the window job ----

  /// Rethrows the consumer's error, if it met one.
  void rethrow_error() {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex_);
      e = error_;
    }
    if (e) {
      std::rethrow_exception(e);
    }
  }
  /// Blocks until the consumer has handled the first `seq` pushed slots; rethrows its error.
  void wait_consumed(std::uint64_t seq) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return consumed_ >= seq || error_; });
    if (error_) {
      std::rethrow_exception(error_);
    }
  }
  /// True when the consumer has handled the first `seq` pushed slots (never blocks).
  [[nodiscard]] bool consumed(std::uint64_t seq) {
    std::lock_guard lock(mutex_);
    return consumed_ >= seq;
  }
  /// n_w of accumulator `a` once the consumer has handled every slot pushed before `seq`; reset
  /// (the window job takes its window's steps, and with them its accumulator).
  std::int32_t take_n_w(std::size_t a, std::uint64_t seq) {
    wait_consumed(seq);
    std::lock_guard lock(mutex_);
    return std::exchange(n_w_[a], 0);
  }
  /// Steps accumulated so far into accumulator `a`.
  [[nodiscard]] std::int32_t n_w(std::size_t a) {
    std::lock_guard lock(mutex_);
    return n_w_[a];
  }
  /// Skipped steps whose flag the consumer has read (relaxed: a statistic).
  [[nodiscard]] std::int64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }

  // ---- one accumulator buffer for two windows (config::host_accumulators 1, overlap_step) ----
  // The job of window w reads the buffer while the consumer takes in window w + 1, whose first
  // good step writes every row: before it writes a parameter's rows, the consumer waits until the
  // job has read them (the job goes parameter by parameter, in the order the consumer took them
  // in: drain_order). A wait only delays; the bits are those of two buffers.

  /// initialize() (no thread started): `params` parameters; `shared`: the drain applies.
  void set_drain(std::size_t params, bool shared) {
    std::lock_guard lock(mutex_);
    shared_ = shared;
    read_.assign(params, 0);
    order_.clear();
  }
  /// Training thread, at a window's close, before the job is submitted and before any slot of the
  /// next window is pushed: the job of accumulator `a` will read the buffer. Returns its number.
  std::uint64_t begin_read(std::size_t a) {
    std::lock_guard lock(mutex_);
    reading_[a] = ++jobs_;
    return jobs_;
  }
  /// The window job `job`: parameter `p`'s rows are read (the consumer may write them).
  void note_read(std::size_t p, std::uint64_t job) {
    {
      std::lock_guard lock(mutex_);
      read_[p] = job;
    }
    cv_.notify_all();
  }
  /// The window job `job` is over (done, nothing to read, or failed): every row is free.
  void note_all_read(std::uint64_t job) {
    {
      std::lock_guard lock(mutex_);
      std::fill(read_.begin(), read_.end(), job);
    }
    cv_.notify_all();
  }
  /// The consumer, before it writes `p`'s rows into accumulator `a` for the first time in a
  /// window: waits until the job of the other accumulator's window has read them.
  void wait_read(std::size_t a, std::size_t p) {
    std::unique_lock lock(mutex_);
    if (!shared_) {
      return;
    }
    const std::uint64_t job = reading_[a ^ 1u];
    cv_.wait(lock, [&] { return read_[p] >= job; });
  }
  /// The consumer, at a step's last record: the parameters in the order their rows came in.
  void set_drain_order(const std::vector<std::size_t>& order) {
    std::lock_guard lock(mutex_);
    order_ = order;
  }
  /// The window job: the order of the last step taken in (the next step's, most likely).
  [[nodiscard]] std::vector<std::size_t> drain_order() {
    std::lock_guard lock(mutex_);
    return order_;
  }
  /// A checkpoint's restore (no job running): no job reads the buffer.
  void reset_reads() {
    std::lock_guard lock(mutex_);
    reading_[0] = reading_[1] = 0;
    std::fill(read_.begin(), read_.end(), jobs_);
  }

  // ---- a checkpoint's restore (training thread, every pushed slot consumed) ----

  void restore_n_w(std::size_t a, std::int32_t n) {
    std::lock_guard lock(mutex_);
    n_w_[a] = n;
  }
  void restore_skipped(std::int64_t n) noexcept { skipped_.store(n, std::memory_order_relaxed); }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t consumed_ = 0;   // guarded by mutex_
  std::int32_t n_w_[2] = {0, 0}; // guarded by mutex_
  std::exception_ptr error_;     // guarded by mutex_
  std::atomic<std::int64_t> skipped_{0};
  // the drain in place, guarded by mutex_
  bool shared_ = false;
  std::uint64_t jobs_ = 0;            // window jobs that read the buffer so far
  std::uint64_t reading_[2] = {0, 0}; // by accumulator: the job that reads (or read) it
  std::vector<std::uint64_t> read_;   // by parameter: the last job that has read its rows
  std::vector<std::size_t> order_;    // drain_order()
};

/// The masses of the last few steps, by step: the consumer writes step t's from its last record;
/// the training thread reads step t - zen_auto_lag's once consumer_progress says that record was
/// consumed, while the consumer may be writing those of t - 1 and t: a ring of 4. A checkpoint
/// (training thread, every pushed slot consumed) saves and restores them.
class step_mass_ring {
public:
  static constexpr std::size_t slots = 4;

  /// The slot that holds (or will hold) step `t`'s masses.
  [[nodiscard]] step_masses& operator[](std::int64_t t) { return ring_[index(t)]; }
  [[nodiscard]] const step_masses& operator[](std::int64_t t) const { return ring_[index(t)]; }
  /// Forgets every step's masses.
  void clear() {
    for (auto& m : ring_) {
      m.step = -1;
      m.valid = false;
    }
  }

private:
  static std::size_t index(std::int64_t t) { return static_cast<std::size_t>(t) % slots; }
  step_masses ring_[slots];
};

/// A parameter's window sums: the host-set rows this rank keeps, row i = the channel at host-set
/// position shard.pos + i (channel_sets::shard.rows[i]), so the selected channels take no bytes.
/// Accumulator a is acc[a], or acc[0] when acc[1] is not kept: one buffer (host_accumulators 1,
/// no overlap, or device accumulation), two with overlap_step and host_accumulators 2 (the open
/// window fills one while the job of the closed one reads the other). The consumer writes
/// accumulator a while a's window is open; the window job reads it after
/// consumer_progress::take_n_w(a, seq) saw the window's last slot consumed, and the consumer does
/// not write it again before the job has read it: with two buffers the training thread drains that
/// job before the next window of a is pushed; with one, the consumer waits for the job's
/// note_read of each parameter (consumer_progress::wait_read). Checkpoints (training thread) read
/// and restore them with every slot consumed and no job running; the training thread resizes them
/// (fit) when the host set changes, under the same conditions.
///
/// With accumulate = device the consumer writes no step into them: each closed window's sum
/// lands from the device (window_sum_slot) into acc[0]. One buffer is enough because the sum of
/// window w goes down only after the job of window w - 1, which read it, is done
/// (host_jobs::close_window).
struct window_accumulators {
  /// sum over the window's good steps of coef * g of this rank's host-set rows.
  std::vector<float> acc[2];
  /// The buffer of accumulator `a`: acc[a], or acc[0] where acc[1] is not kept.
  [[nodiscard]] std::vector<float>& sum(std::size_t a) noexcept { return acc[two ? a : 0]; }
  [[nodiscard]] const std::vector<float>& sum(std::size_t a) const noexcept { return acc[two ? a : 0]; }
  /// Matrices: sum over the window's good steps of coef * |g|_1 of the host channels (the pack's
  /// rest mass); host_lr_scale "snr" compares it with |acc|_1. The window job resets it.
  double rest_l1[2] = {0.0, 0.0};
  bool two = false;   ///< acc[1] is kept
  bool exact = false; ///< the buffers are sized to the rows exactly (one rank), else to a block

  /// The buffers for `rows` rows of `len` (the host set changed; no thread reads them): exactly
  /// that many (the memory given back where fewer), or, with a block's capacity, at least.
  void fit(std::int64_t rows, std::int64_t len) {
    const auto n = static_cast<std::size_t>(rows * len);
    for (std::size_t i = 0; i < (two ? 2u : 1u); ++i) {
      acc[i].resize(n);
      if (exact) {
        acc[i].shrink_to_fit();
      }
    }
  }
  /// Bytes held (stats().memory.host_accumulators).
  [[nodiscard]] std::size_t accumulator_bytes() const noexcept {
    return (acc[0].capacity() + acc[1].capacity()) * sizeof(float);
  }
};

/// A parameter's channel sets and this rank's rows of them. The training thread writes them (at
/// initialize(), a selection, a restore) only with every pushed slot consumed and no window job
/// running; the consumer (which rows a slot adds to) and the window job (which rows it updates
/// and uploads) read them in between.
struct channel_sets {
  std::int64_t matrix_index = -1;     ///< index of the matrix in the step record (-1: a vector)
  std::vector<std::int32_t> sel;      ///< device set, ascending
  std::vector<std::int32_t> host_set; ///< host set, ascending
  std::uint64_t host_set_version = 0; ///< changed by every set_host_set()
  /// The rows of the host state (master, m, v, counts, acc): this rank's block of the matrix
  /// (data parallel: the owner partition), every channel with one rank. The device's host set
  /// stays every unselected channel (the all-gathered weights are applied to all of them).
  row_shard shard;

  /// The host set becomes `hs` (ascending); this rank's share of it follows.
  void set_host_set(std::vector<std::int32_t> hs) {
    host_set = std::move(hs);
    ++host_set_version;
    shard.follow(host_set);
  }
};

/// Gradients announced early (grad_ready()), packed in host-set order in the working type, kept
/// until the step's coef arrives. The training thread sizes it before the first early slot of its
/// parameter is pushed (the ring's push hands it over; it never shrinks); the consumer alone
/// writes and reads its bytes after that.
class landing_buffer {
public:
  [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }
  void resize(std::size_t n) { bytes_.resize(n); }
  [[nodiscard]] std::byte* data() noexcept { return bytes_.data(); }
  [[nodiscard]] const std::byte* data() const noexcept { return bytes_.data(); }

private:
  std::vector<std::byte> bytes_;
};

/// What a closed window's host job updates with, fixed at the close: every parameter's lr scale
/// then (engine::set_lr_scale may change it while the job runs) and whether the parameter had a
/// gradient in any of the window's steps (step_options::no_grad). The training thread fills it at
/// the close and hands it to the job by value through the queue's submit (or runs the job itself:
/// a synchronous window). Empty vectors: every parameter had a gradient, at its current lr scale.
struct window_params {
  std::vector<float> lr_scale;
  std::vector<std::uint8_t> had_grad;
  [[nodiscard]] bool updates(std::size_t p) const noexcept { return had_grad.empty() || had_grad[p] != 0; }
};

} // namespace detail
ZF_NAMESPACE_END
