/// @file
/// The engine's host side as an object of its own: the full-size host optimizer state of every
/// host-side parameter, the window accumulators, the consumer of the D2H ring (what the host does
/// with each landed slot, on a thread of its own on device backends) with the progress it
/// publishes, and the host window itself as a value: (accumulator, n_w, lr) -> new working
/// weights in the upload buffers.
///
/// Threads: `consume` runs on the consumer (the consumer thread, or the training thread on the
/// host backend), its accumulation spread over a pool of the consumer's own; `run_window` on the window
/// queue's executor or the training thread; the rest on the training thread. What they hand each other
/// is named in host/handover.hpp (the consumer's progress, the step masses, the per-parameter parts).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/handover.hpp>
#include <zenflow/engine/detail/host/host_param.hpp>
#include <zenflow/engine/detail/params.hpp>
#include <zenflow/engine/detail/pipeline_trace.hpp>
#include <zenflow/engine/detail/step_record.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/optim/types.hpp>
#include <zenflow/transport/pinned_ring.hpp>

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
    matrices_ = matrices;
  }
  [[nodiscard]] param& operator[](std::size_t p) { return host_[p]; }
  [[nodiscard]] const param& operator[](std::size_t p) const { return host_[p]; }
  [[nodiscard]] std::size_t size() const noexcept { return host_.size(); }

  // ---- the consumer -----------------------------------------------------------------------------

  /// The consumer's own pool for the accumulation (`threads` threads, the consumer's included;
  /// 1: none). Its own, because the window job uses the engine's pool at the same time and a
  /// pool has one caller at a time. Rows are split across threads and each row is added by one
  /// thread, so the accumulator has the same bits for any thread count. Before start_consumer().
  void set_consumer_threads(unsigned threads) {
    consume_pool_ = threads > 1 ? std::make_unique<worker_pool>(threads) : nullptr;
  }

  /// Spans of the consumer go to `t` (nullptr: none).
  void set_trace(pipeline_trace* t) noexcept { trace_ = t; }

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

private:
  template <class Slot>
  void consume_slot(const Slot& s) {
    const auto a = static_cast<std::size_t>(s.meta.user);
    switch (s.meta.tag) {
    case grad_early_slot: {
      // The step's coef is not known yet (it follows in the step's first record): land the slot.
      const auto p = static_cast<std::size_t>(s.meta.matrix);
      const std::size_t cb = (*params_)[p].channel_bytes();
      std::memcpy(host_[p].land.data() + static_cast<std::size_t>(s.meta.begin) * cb, s.data,
                  static_cast<std::size_t>(s.meta.end - s.meta.begin) * cb);
      if (s.meta.begin == 0) {
        landed_.push_back(p);
      }
      return;
    }
    case record_first_slot: {
      const step_record_view rec{s.data, matrices_};
      coef_ = rec.coef();
      skip_ = rec.skip();
      last_skip_ = skip_;
      // The window's first good step writes the accumulator instead of adding to it: the
      // last window left its rows as they were (run_window), and every good step carries
      // every host-set row, so nothing stale survives this step.
      assign_ = progress_.window_empty(a);
      // The gradients announced early for this step (all landed before this record) join the
      // accumulator now, row by row exactly as if their slots came after the record.
      for (const std::size_t p : landed_) {
        if (!skip_) {
          const auto& h = host_[p];
          accumulate(a, p,
                     h.land.data() + static_cast<std::size_t>(h.shard.pos) * (*params_)[p].channel_bytes(),
                     h.shard.pos, h.shard.end());
        }
      }
      landed_.clear();
      if (skip_) {
        progress_.note_skipped();
      } else {
        progress_.count_step(a);
      }
      return;
    }
    case record_last_slot: {
      const step_record_view rec{s.data, matrices_};
      auto& mass = masses_[s.meta.step];
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
        for (auto& h : host_) {
          if (h.matrix_index >= 0) {
            h.rest_l1[a] += static_cast<double>(mass.rest[static_cast<std::size_t>(h.matrix_index)]);
          }
        }
      }
      return;
    }
    default:
      if (!skip_) {
        accumulate(a, static_cast<std::size_t>(s.meta.matrix), s.data, s.meta.begin, s.meta.end);
      }
    }
  }

public:
  /// Consumes, on the calling thread, every slot of `ring` that has landed (host backend).
  template <class Ring>
  void consume_landed(Ring& ring) {
    while (auto slot = ring.try_next()) {
      consume(*slot);
      ring.release(*slot);
      progress_.note_consumed();
    }
  }

  /// Starts the consumer thread on `ring` (device backends); `enter()` runs first on it (the
  /// engine's device made current). It stops when the ring is closed and drained; an error it
  /// meets (`enter()`'s included) is rethrown by the next wait_consumed().
  template <class Ring, class Enter>
  void start_consumer(Ring& ring, Enter enter) {
    consumer_ = std::thread([this, &ring, enter] {
      std::int64_t last_step = -1; // of the last slot consumed, for the error's message
      try {
        enter();
        while (auto slot = ring.next()) {
          consume(*slot);
          last_step = slot->meta.step;
          ring.release(*slot);
          progress_.note_consumed();
        }
      } catch (...) {
        std::exception_ptr error;
        try {
          rethrow_with_context("zenflow::engine: the D2H ring's consumer failed after a slot of step " +
                               std::to_string(last_step));
        } catch (...) {
          error = std::current_exception();
        }
        progress_.fail(error);
        ring.close();
      }
    });
  }
  /// Joins the consumer thread (close its ring first).
  void stop_consumer() noexcept {
    if (consumer_.joinable()) {
      consumer_.join();
    }
  }

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
  /// The masses of step `t` (valid once its last record was consumed: wait_consumed first).
  [[nodiscard]] const step_masses& masses(std::int64_t t) const { return masses_[t]; }
  /// The skip flag of the last step record consumed (host backend: the step just taken).
  [[nodiscard]] bool last_skip() const noexcept { return last_skip_; }
  /// Skipped steps whose flag the consumer has read.
  [[nodiscard]] std::int64_t skipped() const noexcept { return progress_.skipped(); }

  // ---- checkpoint restore (training thread, with every pushed slot consumed) ---------------------

  /// Sets the steps accumulated into accumulator `a`.
  void restore_n_w(std::size_t a, std::int32_t n) { progress_.restore_n_w(a, n); }
  /// The slot that holds (or will hold) step `t`'s masses (to save and restore them).
  [[nodiscard]] step_masses& masses_slot_of(std::int64_t t) { return masses_[t]; }
  /// Forgets every step's masses (a restore writes back the ones it saved).
  void clear_masses() { masses_.clear(); }
  /// Sets the count of skipped steps seen.
  void restore_skipped(std::int64_t n) { progress_.restore_skipped(n); }

  // ---- the host window --------------------------------------------------------------------------

  /// One host window: AdamW on acc[accumulator] / n_w for every host-set channel, the new working
  /// weights into the upload buffers. The accumulator is left as it is (4 bytes per element fewer
  /// than zeroing it): the next window's first good step overwrites it. With host_moments_per_step
  /// the window stands for n_w steps: the moments decay by beta^n_w and the counts advance by n_w,
  /// so that their memory is as many steps long as on the device (beta1 0.9 and windows of 4 would
  /// otherwise remember 40 steps). Returns the seconds it took.
  double run_window(std::size_t accumulator, std::int32_t n_w, float lr, worker_pool* pool) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t a = accumulator;
    for (std::size_t p = 0; p < host_.size(); ++p) {
      const auto& pi = (*params_)[p];
      auto& h = host_[p];
      const double rest_l1 = std::exchange(h.rest_l1[a], 0.0);
      if (!pi.host_side || h.host_set.empty()) {
        continue;
      }
      // The parameter's lr (lr x lr_scale, as on the device), then the window's scaling.
      adamw_hparams hp = pi.hparams(cfg_->adam, lr);
      const double coherence = cfg_->host_lr_scale == host_lr_scaling::snr
                                   ? l1_norm(h.acc[a], h.shard.rows, pi.channel_len, pool) / rest_l1
                                   : 1.0;
      hp.lr = static_cast<float>(static_cast<double>(hp.lr) *
                                 host_lr_factor(cfg_->host_lr_scale, n_w, coherence));
      // This rank's share only (data parallel: its block; the others' weights come by all-gather).
      h.moments.visit([&](auto* m, auto* v) {
        using M = std::remove_pointer_t<decltype(m)>;
        const basic_channel_state<M> st{h.master.data(), m, v, h.counts.data(), h.shard.channels,
                                        pi.channel_len};
        dispatch_dtype(pi.type, [&](auto tag) {
          using T = decltype(tag);
          check(host::adamw_window<T, T, M>(
                    st, h.acc[a].data(), h.shard.rows.data(), static_cast<std::int64_t>(h.shard.rows.size()),
                    nullptr, 1.0f, n_w, hp,
                    reinterpret_cast<T*>(h.upload.data()) + h.shard.pos * pi.channel_len, pool,
                    host::window_acc::keep, cfg_->host_moments_per_step && n_w > 0 ? n_w : 1, h.shard.first),
                "zenflow::engine: adamw_window");
        });
      });
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

private:
  /// acc[a] += coef_ * host-set positions [begin, end) of `p`'s packed gradients at `rows`, all of
  /// them this rank's (data parallel: the D2H stream sends only those).
  void accumulate(std::size_t a, std::size_t p, const std::byte* rows, std::int64_t begin, std::int64_t end) {
    const auto& pi = (*params_)[p];
    auto& h = host_[p];
    const auto mode = assign_ ? host::accumulate_mode::assign : host::accumulate_mode::add;
    dispatch_dtype(pi.type, [&](auto tag) {
      using T = decltype(tag);
      check(host::accumulate_channels<T>(
                h.acc[a].data(), h.shard.channels, pi.channel_len, reinterpret_cast<const T*>(rows),
                h.shard.rows.data() + (begin - h.shard.pos), end - begin, coef_, consume_pool_.get(), mode),
            "zenflow::engine: accumulate_channels");
    });
  }

  /// |x|_1 over the rows `rows` (ascending) of x (rows of `len`), in double, summed in fixed chunks
  /// of x in a fixed order: the same bits for any thread count. The other rows may hold an earlier
  /// window's values (run_window keeps the accumulator); skipping them gives the same bits as
  /// summing the whole array with those rows zeroed (adding +0 to a sum >= 0 changes nothing).
  static double l1_norm(const std::vector<float>& x,
                        const std::vector<std::int32_t>& rows,
                        std::int64_t len,
                        worker_pool* pool) {
    constexpr std::int64_t chunk = 1 << 16;
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<double> part(static_cast<std::size_t>((n + chunk - 1) / chunk), 0.0);
    auto sum = [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      double s = 0.0;
      auto r = std::lower_bound(rows.begin(), rows.end(), static_cast<std::int32_t>(lo / len));
      for (; r != rows.end() && *r * len < hi; ++r) {
        const std::int64_t end = std::min(hi, (*r + 1) * len);
        for (std::int64_t i = std::max(lo, *r * len); i < end; ++i) {
          s += std::fabs(static_cast<double>(x[static_cast<std::size_t>(i)]));
        }
      }
      part[static_cast<std::size_t>(c)] = s;
    };
    if (pool != nullptr) {
      pool->parallel_for(n, chunk, sum);
    } else {
      for (std::int64_t c = 0; c * chunk < n; ++c) {
        sum(c, c * chunk, std::min(n, (c + 1) * chunk));
      }
    }
    double total = 0.0;
    for (const double s : part) {
      total += s;
    }
    return total;
  }

  const config* cfg_;
  const std::vector<param_info>* params_;
  std::int64_t matrices_ = 0;
  std::vector<param> host_;

  // consumer state (the consumer's thread only)
  float coef_ = 1.0f;
  bool skip_ = false;
  bool last_skip_ = false;
  bool assign_ = false; // this step is its window's first good one: write the accumulator
  pipeline_trace* trace_ = nullptr;
  std::vector<std::size_t> landed_;           // parameters landed early for the coming record
  std::unique_ptr<worker_pool> consume_pool_; // the accumulation's threads (consumer thread only)

  // the hand-overs to the training thread and the window job (host/handover.hpp)
  consumer_progress progress_;
  step_mass_ring masses_;
  std::thread consumer_; // last: it runs on everything above
};

} // namespace detail
ZF_NAMESPACE_END
