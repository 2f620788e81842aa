/// @file
/// The consumer of the D2H ring: what the host does with each landed slot (host/d2h_protocol.hpp),
/// on a thread of its own on device backends (start()), or on the training thread, slot by slot
/// as they are pushed, on the host backend (consume_landed()). Its per-step state (coef, skip,
/// the parameters landed early) is the consumer's alone; it writes the window accumulators, the
/// landing buffers and the step masses, and publishes its progress (host/handover.hpp). The
/// accumulation is spread over a pool of the consumer's own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/handover.hpp>
#include <zenflow/engine/detail/host/host_param.hpp>
#include <zenflow/engine/detail/plan/step_record.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/trace/pipeline_trace.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class HostBuffer>
class d2h_consumer {
public:
  d2h_consumer(const config& cfg,
               const std::vector<param_info>& params,
               std::vector<host_param<HostBuffer>>& host,
               consumer_progress& progress,
               step_mass_ring& masses)
      : cfg_(&cfg), params_(&params), host_(&host), progress_(&progress), masses_(&masses) {}
  d2h_consumer(const d2h_consumer&) = delete;
  d2h_consumer& operator=(const d2h_consumer&) = delete;
  ~d2h_consumer() { stop(); }

  /// The step record's matrix count (before the first slot).
  void set_matrices(std::int64_t matrices) noexcept { matrices_ = matrices; }

  /// The consumer's own pool for the accumulation (`threads` threads, the consumer's included;
  /// 1: none). Its own, because the window job uses the engine's pool at the same time and a
  /// pool has one caller at a time. Rows are split across threads and each row is added by one
  /// thread, so the accumulator has the same bits for any thread count. `cores` not empty: the
  /// pool's threads and the consumer thread run on those cores only (core/placement.hpp). Before
  /// start().
  void set_threads(unsigned threads, const std::vector<int>& cores = {}) {
    worker_pool_options o;
    o.threads = threads;
    o.confine_to = cores;
    pool_ = threads > 1 ? std::make_unique<worker_pool>(o) : nullptr;
    cores_ = cores;
  }

  /// Spans of the consumer go to `t` (nullptr: none). Before start().
  void set_trace(pipeline_trace* t) noexcept { trace_ = t; }

  /// Consumes, on the calling thread, every slot of `ring` that has landed (host backend).
  template <class Ring>
  void consume_landed(Ring& ring) {
    while (auto slot = ring.try_next()) {
      consume(*slot);
      ring.release(*slot);
      progress_->note_consumed();
    }
  }

  /// Starts the consumer thread on `ring` (device backends); `enter()` runs first on it (the
  /// engine's device made current). It stops when the ring is closed and drained; an error it
  /// meets (`enter()`'s included) goes to the progress, and the ring is closed.
  template <class Ring, class Enter>
  void start(Ring& ring, Enter enter) {
    thread_ = std::thread([this, &ring, enter] {
      std::int64_t last_step = -1; // of the last slot consumed, for the error's message
      try {
        enter();
        while (auto slot = ring.next()) {
          consume(*slot);
          last_step = slot->meta.step;
          ring.release(*slot);
          progress_->note_consumed();
        }
      } catch (...) {
        std::exception_ptr error;
        try {
          rethrow_with_context("zenflow::engine: the D2H ring's consumer failed after a slot of step " +
                               std::to_string(last_step));
        } catch (...) {
          error = std::current_exception();
        }
        progress_->fail(error);
        ring.close();
      }
    });
#if defined(__linux__)
    if (!cores_.empty()) { // settled when start() returns, whatever the new thread is doing
      (void)set_thread_affinity(thread_.native_handle(), cores_);
    }
#endif
  }
  /// Joins the consumer thread (close its ring first).
  void stop() noexcept {
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  /// The skip flag of the last step record consumed (host backend: the step just taken; the
  /// consumer's own thread otherwise).
  [[nodiscard]] bool last_skip() const noexcept {
    return last_skip_;
  }

private:
  /// What the host does with one landed slot (its data valid until the slot is released).
  template <class Slot>
  void consume(const Slot& s) {
    if (trace_ != nullptr && trace_->on()) {
      const std::int64_t t0 = pipeline_trace::now();
      consume_slot(s);
      trace_->span(trace_track::consumer, slot_name(s.meta.tag), "consume", t0, pipeline_trace::now(),
                   "\"step\": " + std::to_string(s.meta.step) +
                       ", \"param\": " + std::to_string(s.meta.matrix));
      return;
    }
    consume_slot(s);
  }

  template <class Slot>
  void consume_slot(const Slot& s) {
    const auto a = static_cast<std::size_t>(s.meta.user);
    auto& host = *host_;
    switch (s.meta.tag) {
    case grad_early_slot: {
      // The step's coef is not known yet (it follows in the step's first record): land the slot.
      const auto p = static_cast<std::size_t>(s.meta.matrix);
      const std::size_t cb = (*params_)[p].channel_bytes();
      std::memcpy(host[p].land.data() + static_cast<std::size_t>(s.meta.begin) * cb, s.data,
                  static_cast<std::size_t>(s.meta.end - s.meta.begin) * cb);
      // Announced again (grad_ready() after a step not taken): the new slots replace the old.
      if (s.meta.begin == 0 && std::find(landed_.begin(), landed_.end(), p) == landed_.end()) {
        landed_.push_back(p);
      }
      return;
    }
    case record_first_slot: {
      const step_record_view rec{s.data, matrices_};
      step_ = s.meta.step;
      coef_ = rec.coef();
      skip_ = rec.skip();
      last_skip_ = skip_;
      // The window's first good step writes the accumulator instead of adding to it: the
      // last window left its rows as they were (run_host_window), and every good step carries
      // every host-set row, so nothing stale survives this step.
      assign_ = progress_->window_empty(a);
      // The gradients announced early for this step (all landed before this record) join the
      // accumulator now, row by row exactly as if their slots came after the record.
      for (const std::size_t p : landed_) {
        if (!skip_) {
          const auto& h = host[p];
          accumulate(a, p,
                     h.land.data() + static_cast<std::size_t>(h.shard.pos) * (*params_)[p].channel_bytes(),
                     h.shard.pos, h.shard.end());
        }
      }
      landed_.clear();
      if (skip_) {
        progress_->note_skipped();
      } else {
        progress_->count_step(a);
      }
      return;
    }
    case record_last_slot: {
      const step_record_view rec{s.data, matrices_};
      auto& mass = (*masses_)[s.meta.step];
      mass.step = s.meta.step;
      mass.valid = !rec.skip();
      mass.crit.resize(static_cast<std::size_t>(rec.matrices));
      mass.rest.resize(static_cast<std::size_t>(rec.matrices));
      for (std::int64_t i = 0; i < rec.matrices; ++i) {
        // |coef * g| = coef * |g|: coef > 0.
        mass.crit[static_cast<std::size_t>(i)] = rec.crit(i) * rec.coef();
        mass.rest[static_cast<std::size_t>(i)] = rec.rest(i) * rec.coef();
      }
      if (mass.valid && cfg_->host_lr_scale == host_lr_scaling::snr) {
        for (auto& h : host) {
          if (h.matrix_index >= 0) {
            h.rest_l1[a] += static_cast<double>(mass.rest[static_cast<std::size_t>(h.matrix_index)]);
          }
        }
      }
      if (!order_.empty()) { // the next window's job drains the parameters in this order
        progress_->set_drain_order(order_);
        order_.clear();
      }
      return;
    }
    case window_sum_slot:
      land_window_sum(a, static_cast<std::size_t>(s.meta.matrix), s.data, s.meta.begin, s.meta.end);
      return;
    default:
      if (!skip_) {
        accumulate(a, static_cast<std::size_t>(s.meta.matrix), s.data, s.meta.begin, s.meta.end);
      }
    }
  }

  /// acc[a] += coef_ * host-set positions [begin, end) of `p`'s packed gradients at `rows`, all of
  /// them this rank's (data parallel: the D2H stream sends only those). The accumulator holds the
  /// same rows in the same order (window_accumulators), so row r of the slot is its row
  /// begin - shard.pos + r. The window's first good step writes the rows: with one buffer for two
  /// windows, once the last window's job has read them.
  void accumulate(std::size_t a, std::size_t p, const std::byte* rows, std::int64_t begin, std::int64_t end) {
    const auto& pi = (*params_)[p];
    auto& h = (*host_)[p];
    const std::int64_t count = end - begin;
    if (assign_) {
      progress_->wait_read(a, p);
    }
    if (seen_.size() <= p) {
      seen_.resize(host_->size(), -1);
    }
    if (seen_[p] != step_) {
      seen_[p] = step_;
      order_.push_back(p);
    }
    if (static_cast<std::int64_t>(iota_.size()) < count) {
      const auto from = static_cast<std::int32_t>(iota_.size());
      iota_.resize(static_cast<std::size_t>(count));
      std::iota(iota_.begin() + from, iota_.end(), from);
    }
    const auto mode = assign_ ? host::accumulate_mode::assign : host::accumulate_mode::add;
    dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      check(host::accumulate_channels<T>(h.sum(a).data() + (begin - h.shard.pos) * pi.channel_len, count,
                                         pi.channel_len, reinterpret_cast<const T*>(rows), iota_.data(),
                                         count, coef_, pool_.get(), mode),
            "zenflow::engine: accumulate_channels");
    });
  }

  /// accumulate = device: elements [begin, end) of `p`'s window sum (host-set order, one rank)
  /// into the accumulator, which holds the host-set rows in that order: bit for bit.
  void
  land_window_sum(std::size_t a, std::size_t p, const std::byte* data, std::int64_t begin, std::int64_t end) {
    auto& h = (*host_)[p];
    const std::int64_t L = (*params_)[p].channel_len;
    std::memcpy(h.sum(a).data() + (begin - h.shard.pos * L), data, static_cast<std::size_t>(end - begin) * 4);
  }

  const config* cfg_;
  const std::vector<param_info>* params_;
  std::vector<host_param<HostBuffer>>* host_;
  consumer_progress* progress_;
  step_mass_ring* masses_;
  std::int64_t matrices_ = 0;
  pipeline_trace* trace_ = nullptr;
  std::unique_ptr<worker_pool> pool_; // the accumulation's threads
  std::vector<int> cores_;            // where the consumer's threads run (empty: anywhere)

  // the step being consumed
  float coef_ = 1.0f;
  bool skip_ = false;
  bool last_skip_ = false;
  bool assign_ = false;             // this step is its window's first good one: write the accumulator
  std::vector<std::size_t> landed_; // parameters landed early for the coming record
  std::int64_t step_ = -1;          // of the last step record
  std::vector<std::int64_t> seen_;  // by parameter: the last step whose rows it took in
  std::vector<std::size_t> order_;  // the parameters of this step in the order they came in
  std::vector<std::int32_t> iota_;  // 0, 1, 2, ...: the accumulator's rows of a slot, in order

  std::thread thread_; // last: it runs on everything above
};

} // namespace detail
ZF_NAMESPACE_END
