/// @file
/// The engine's host side, one object over its parts (engine/detail/host/): the host state of
/// every parameter (host_param.hpp), the consumer of the D2H ring (consumer.hpp), the host window
/// (window_job.hpp) and what they hand each other (handover.hpp: the consumer's progress, the
/// step masses). The wire protocol between the D2H stream and the consumer is d2h_protocol.hpp.
///
/// Threads: the consumer runs on its own thread (device backends) or on the training thread
/// (host backend, consume_landed()); run_window() on the window queue's executor or the training
/// thread; the rest on the training thread. Each part says what it hands over and how.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/consumer.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/handover.hpp>
#include <zenflow/engine/detail/host/host_param.hpp>
#include <zenflow/engine/detail/host/thread_placement.hpp>
#include <zenflow/engine/detail/host/window_job.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/trace/pipeline_trace.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class HostBuffer>
class host_side {
public:
  /// One parameter's host state (empty for a parameter that lives on the device only).
  using param = host_param<HostBuffer>;

  host_side(const config& cfg, const std::vector<param_info>& params) : cfg_(&cfg), params_(&params) {}
  host_side(const host_side&) = delete;
  host_side& operator=(const host_side&) = delete;
  ~host_side() { stop_consumer(); }

  void resize(std::size_t n, std::int64_t matrices) {
    host_.resize(n);
    consumer_.set_matrices(matrices);
  }
  [[nodiscard]] param& operator[](std::size_t p) { return host_[p]; }
  [[nodiscard]] const param& operator[](std::size_t p) const { return host_[p]; }
  [[nodiscard]] std::size_t size() const noexcept { return host_.size(); }

  // ---- the consumer (host/consumer.hpp) ---------------------------------------------------------

  /// The consumer's own accumulation pool (d2h_consumer::set_threads): `place.threads` threads,
  /// they and the consumer's on `place.pinned_cores()`. Before start_consumer().
  void set_consumer_threads(const host_placement& place) {
    consumer_.set_threads(place.threads, place.pinned_cores());
  }
  /// Spans of the consumer go to `t` (nullptr: none).
  void set_trace(pipeline_trace* t) noexcept { consumer_.set_trace(t); }
  /// Consumes, on the calling thread, every slot of `ring` that has landed (host backend).
  template <class Ring>
  void consume_landed(Ring& ring) {
    consumer_.consume_landed(ring);
  }
  /// Starts the consumer thread on `ring` (device backends); `enter()` runs first on it. An error
  /// it meets is rethrown by the next wait_consumed().
  template <class Ring, class Enter>
  void start_consumer(Ring& ring, Enter enter) {
    consumer_.start(ring, enter);
  }
  /// Joins the consumer thread (close its ring first).
  void stop_consumer() noexcept { consumer_.stop(); }
  /// The skip flag of the last step record consumed (host backend: the step just taken).
  [[nodiscard]] bool last_skip() const noexcept { return consumer_.last_skip(); }

  // ---- its progress (host/handover.hpp) ---------------------------------------------------------

  /// Rethrows the consumer thread's error, if it met one.
  void rethrow_consumer_error() { progress_.rethrow_error(); }
  /// Blocks until the consumer has handled the first `seq` pushed slots; rethrows its error.
  void wait_consumed(std::uint64_t seq) { progress_.wait_consumed(seq); }
  /// True when the consumer has handled the first `seq` pushed slots (never blocks).
  [[nodiscard]] bool consumed(std::uint64_t seq) { return progress_.consumed(seq); }
  /// n_w of accumulator `a` once the consumer has handled every slot pushed before `seq`; reset.
  std::int32_t take_n_w(std::size_t a, std::uint64_t seq) { return progress_.take_n_w(a, seq); }
  /// Steps accumulated so far into accumulator `a` (for the destructor's report).
  [[nodiscard]] std::int32_t n_w(std::size_t a) { return progress_.n_w(a); }
  /// Skipped steps whose flag the consumer has read.
  [[nodiscard]] std::int64_t skipped() const noexcept { return progress_.skipped(); }
  /// The masses of step `t` (valid once its last record was consumed: wait_consumed first).
  [[nodiscard]] const step_masses& masses(std::int64_t t) const { return masses_[t]; }

  // ---- checkpoint restore (training thread, with every pushed slot consumed) ---------------------

  /// Sets the steps accumulated into accumulator `a`.
  void restore_n_w(std::size_t a, std::int32_t n) { progress_.restore_n_w(a, n); }
  /// The slot that holds (or will hold) step `t`'s masses (to save and restore them).
  [[nodiscard]] step_masses& masses_slot_of(std::int64_t t) { return masses_[t]; }
  /// Forgets every step's masses (a restore writes back the ones it saved).
  void clear_masses() { masses_.clear(); }
  /// Sets the count of skipped steps seen.
  void restore_skipped(std::int64_t n) { progress_.restore_skipped(n); }

  // ---- the host window (host/window_job.hpp) ----------------------------------------------------

  /// One host window of accumulator `accumulator` (run_host_window) by window job `job`
  /// (begin_read's number), its new weights to `sink`; the seconds it took.
  template <class Sink>
  double run_window(std::size_t accumulator,
                    std::int32_t n_w,
                    float lr,
                    const window_params& wp,
                    worker_pool* pool,
                    Sink& sink,
                    std::uint64_t job) {
    return run_host_window(*cfg_, *params_, host_, accumulator, n_w, lr, wp, pool, progress_.drain_order(),
                           sink, [&](std::size_t p) { progress_.note_read(p, job); });
  }
  /// Where run_window puts the new weights when every parameter keeps an upload buffer.
  [[nodiscard]] buffered_upload_sink<HostBuffer> buffered_sink() { return {&host_, params_}; }

  // ---- one accumulator buffer for two windows (host/handover.hpp, consumer_progress) -------------

  /// initialize(): whether the closed window's job and the next window share the buffer.
  void set_drain(bool shared) { progress_.set_drain(host_.size(), shared); }
  /// Training thread, before the job of accumulator `a` is submitted: its number.
  std::uint64_t begin_read(std::size_t a) { return progress_.begin_read(a); }
  /// The job `job` is over: every row is free.
  void note_all_read(std::uint64_t job) { progress_.note_all_read(job); }
  /// A restore (no job running): no job reads the buffer.
  void reset_reads() { progress_.reset_reads(); }
  /// Bytes of every parameter's accumulators (stats().memory.host_accumulators).
  [[nodiscard]] std::size_t accumulator_bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& h : host_) {
      n += h.accumulator_bytes();
    }
    return n;
  }

private:
  const config* cfg_;
  const std::vector<param_info>* params_;
  std::vector<param> host_;
  consumer_progress progress_;
  step_mass_ring masses_;
  d2h_consumer<HostBuffer> consumer_{*cfg_, *params_, host_, progress_, masses_}; // last: its thread
};

} // namespace detail
ZF_NAMESPACE_END
