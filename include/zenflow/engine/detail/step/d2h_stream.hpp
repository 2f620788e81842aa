/// @file
/// The engine's D2H stream: step records and packed host-set gradients, from the device plan's
/// staging slots into the pinned D2H ring on the copy stream, and the cost of each push. The
/// producer half of the pipeline (the consumer is host/consumer.hpp, the wire protocol
/// host/d2h_protocol.hpp); training thread only.
///
/// Streams: the packs run on a pack stream of their own, after an event on the user's stream
/// (the gradients exist); the copy stream waits for the pack stream before each slot's copy, the
/// pack stream for the copy out of a staging slot before it packs into it again. So the packs do
/// not queue the user's next work behind them; what keeps the user's next backward from
/// overwriting gradients that a pack still reads is the gradient release (gradient_release.hpp):
/// the user's stream waits for the packs at the end of step(), or where the caller says. The
/// packs of a step whose host sets are known wait for the gradients only, not the prologue; the
/// step record's header (coef_t, the skip flag), which does, goes down on a third stream, so that
/// the gradients' copies wait for their packs only.
///
/// With `accumulate = device` the windows' steps send no gradients: each slot's pack goes on, on
/// the pack stream, into the device's window sum (plan/device_window_sum.hpp) instead of the ring,
/// and the sum goes down once, at the window's close (window_sum_slot). The packs are kept as
/// they are because they compute the rest masses that Zen-auto and the trigger read every step,
/// with the same slot boundaries, so the masses keep their bits; the add needs the step's coef,
/// so those packs start after the prologue.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/host_side.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/plan/device_window_sum.hpp>
#include <zenflow/engine/detail/plan/step_record.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/step/call_cost.hpp>
#include <zenflow/engine/detail/step/schedule.hpp>
#include <zenflow/engine/detail/trace/pipeline_trace.hpp>
#include <zenflow/engine/gradient_release.hpp>
#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <engine_backend Backend>
class d2h_stream {
public:
  using host_side_type = host_side<typename Backend::template host_buffer<std::byte>>;
  using ring_type = d2h_ring<ring_meta, typename Backend::copy_backend_type>;

  d2h_stream(device_plan<Backend>& plan, const std::vector<param_info>& params, host_side_type& host)
      : plan_(plan), params_(params), host_(host) {}

  /// Allocates the ring (`ring_slots` x `slot_bytes`, pinned), the copy stream, the pack stream
  /// and the headers' stream, and with `site` device the window sums; counts them in `mem`.
  void open(std::size_t ring_slots, std::size_t slot_bytes, accumulation_site site, memory_usage& mem) {
    ring_ = std::make_unique<ring_type>(ring_slots, slot_bytes, plan_.backend().copier());
    copies_ = std::make_unique<stream_type>(plan_.backend().copier());
    packs_ = std::make_unique<stream_type>(plan_.backend().copier());
    headers_ = std::make_unique<stream_type>(plan_.backend().copier());
    mem.host_ring += ring_->footprint_bytes();
    if (site == accumulation_site::device) {
      mem.device_window_sum += sum_.setup(plan_.backend(), params_);
      for (auto& s : sum_sent_) { // after headers_: the emulated device numbers streams in order
        s = std::make_unique<stream_type>(plan_.backend().copier());
      }
    }
  }
  /// The windows' gradients are summed on the device (accumulate = device).
  [[nodiscard]] bool sums_on_device() const noexcept { return sum_.on(); }
  [[nodiscard]] device_window_sum<Backend>& window_sum() noexcept { return sum_; }

  // ---- the pack stream and the gradient release ------------------------------------------------

  /// engine::set_gradient_release(): `registering`, the engine is not initialized yet.
  void set_release(gradient_release r, bool registering) {
    constexpr const char* fn = "zenflow::engine::set_gradient_release";
    require(registering, fn, "this", "is already initialized (choose the release before initialize())");
    require(r == gradient_release::at_step || r == gradient_release::by_caller, fn, "release",
            "is not a gradient_release value");
    release_ = r;
  }
  [[nodiscard]] gradient_release release_mode() const noexcept { return release_; }
  /// by_caller: step() and grad_ready() (`fn`) refuse to read gradients while the last step's packs
  /// are unreleased (the backward may be overwriting what they read); nothing is changed.
  void require_released(const char* fn) const {
    require(released_, fn, "this",
            "runs before release_gradients(): gradient_release::by_caller needs it after each step() and "
            "before the backward writes the gradients that step's packs read");
  }
  /// The step's packs start after the work enqueued on `stream` so far (after begin_step(): its
  /// gradients, and a selection's new host sets where there is one; the prologue need not come
  /// first), the record's rest masses zeroed on the pack stream first; `adopt_early`: they start
  /// from the masses of the packs grad_ready() did, in the order they had on one stream. Once per
  /// step: a later call is a no-op.
  void begin_packs(cudaStream_t stream, bool adopt_early) {
    if (begun_) {
      return;
    }
    after(stream);
    plan_.begin_rest_masses(adopt_early, packs_->get());
    begun_ = true;
  }
  /// The end of step(): at_step, `stream` waits for the packs (no host wait); by_caller, the
  /// caller owes a release().
  void end_step(cudaStream_t stream) {
    begun_ = false;
    if (release_ == gradient_release::at_step) {
      join(stream);
    } else {
      released_ = false;
    }
  }
  /// Work enqueued on `stream` from now on starts after every pack enqueued so far (whichever
  /// stream the caller names: not skipped when another stream was joined already).
  void release(cudaStream_t stream) {
    if (packs_) {
      packs_->join_into(stream);
    }
    released_ = true;
  }
  /// Work enqueued on the pack stream from now on starts after the work enqueued on `stream` so
  /// far (data parallel: the rest masses that overwrite the packs').
  void packs_after(cudaStream_t stream) { after(stream); }
  /// The pack stream (after open()): work that must follow the step's packs, on the device.
  [[nodiscard]] cudaStream_t pack_stream() const noexcept { return packs_->get(); }
  /// Blocks until every pack enqueued so far has run (a checkpoint's settle: some packs of a
  /// data-parallel run feed no copy that a later wait would cover).
  void wait_packs() {
    if (packs_) {
      packs_->synchronize();
    }
  }

  /// Closes the ring: the consumer drains what was published, then stops.
  void close() noexcept {
    if (ring_) {
      ring_->close();
    }
  }

  [[nodiscard]] ring_type& ring() { return *ring_; }
  [[nodiscard]] ring_stats stats() const { return ring_ ? ring_->stats() : ring_stats{}; }

  /// Slots pushed so far (the consumer's progress is host_side's).
  [[nodiscard]] std::uint64_t pushed() const noexcept { return pushed_; }

  /// The step record of step `t` into the ring, after the work on `stream`; `tag` is
  /// record_first_slot or record_last_slot, `acc` the window's accumulator.
  void push_record(std::int64_t t, std::int32_t tag, std::size_t acc, cudaStream_t stream, call_cost& cost) {
    ring_meta meta{};
    meta.step = t;
    meta.tag = tag;
    meta.user = static_cast<std::uint64_t>(acc);
    if (tag == record_first_slot) {
      // The header alone (the packs are still adding their rest masses into the record), on a
      // stream of its own: it waits for the prologue, and the gradients' copies behind it in the
      // ring, on the copy stream, need not (they wait for their packs only). The consumer still
      // reads the slots in ring order, the header first.
      const std::size_t bytes = step_record_layout::header_bytes();
      headers_->wait_for(stream);
      push_slot(plan_.record(), bytes, meta, headers_->get(), cost);
      plan_.record_pushed(headers_->get());
      pushed(bytes, cost);
      return;
    }
    const std::size_t bytes = plan_.record_layout().bytes();
    copies_->wait_for(stream);
    copies_->wait_for(packs_->get());   // the rest masses, added by the packs
    copies_->wait_for(headers_->get()); // the record is free once this copy is done: after both
    push_slot(plan_.record(), bytes, meta, copies_->get(), cost);
    plan_.record_pushed(copies_->get());
    pushed(bytes, cost);
  }

  /// Packs and pushes the host-set gradients of parameter `p`, slot by slot; `tag` grad_slot
  /// (in step(): the rest mass into the record) or grad_early_slot (in grad_ready(): into the
  /// backend's early masses, adopted by step()).
  void push_gradients(std::int64_t t,
                      std::size_t p,
                      std::int32_t tag,
                      std::size_t acc,
                      cudaStream_t stream,
                      call_cost& cost) {
    const auto& pi = params_[p];
    const auto& h = host_[p];
    if (!pi.host_side || h.host_set.empty()) {
      return;
    }
    if (tag == grad_early_slot) {
      after(stream); // after the backward wrote this gradient on `stream` (its masses: the early ones)
    }
    const cudaStream_t on = packs_->get();
    const auto n = static_cast<std::int64_t>(h.host_set.size());
    const std::int64_t per_slot = pi.rows_per_slot(ring_->slot_bytes());
    for (std::int64_t b = 0; b < n; b += per_slot) {
      const std::int64_t e = std::min(n, b + per_slot);
      const std::size_t slot = staging_next_++ % plan_.staging_slots();
      std::byte* staging = plan_.staging(slot, on);
      // Every slot is packed, with one rank's slot boundaries, so that the rest mass (summed per
      // pack call) has a one-rank run's bits on every rank; only this rank's positions
      // [shard.pos, shard.end()) go down (data parallel: its block; all of them with one rank).
      plan_.pack(p, b, e, staging, tag == grad_early_slot, on);
      const std::int64_t ob = std::max(b, h.shard.pos);
      const std::int64_t oe = std::min(e, h.shard.end());
      if (ob >= oe) {
        continue;
      }
      ring_meta meta{};
      meta.step = t;
      meta.matrix = static_cast<std::int32_t>(p);
      meta.tag = tag;
      meta.begin = ob;
      meta.end = oe;
      meta.user = static_cast<std::uint64_t>(acc);
      copies_->wait_for(on);
      const std::size_t bytes = static_cast<std::size_t>(oe - ob) * pi.channel_bytes();
      push_slot(staging + static_cast<std::size_t>(ob - b) * pi.channel_bytes(), bytes, meta, copies_->get(),
                cost);
      plan_.staging_pushed(slot, copies_->get());
      pushed(bytes, cost);
    }
  }

  /// push_gradients() of every host-side parameter in step(), those grad_ready() already pushed
  /// (`announced[p] == streamed`) excepted; after begin_packs(). A step of a window (`window`)
  /// with the sums on the device adds them there instead (after the prologue: it reads coef).
  void push_all_gradients(std::int64_t t,
                          const std::vector<announcement>& announced,
                          std::size_t acc,
                          cudaStream_t stream,
                          call_cost& cost,
                          bool window = false) {
    if (window && sum_.on()) {
      for (std::size_t p = 0; p < params_.size(); ++p) {
        sum_gradients(p);
      }
      sum_.count_step(plan_.backend(), plan_.record(), packs_->get());
      return;
    }
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (announced[p] != announcement::streamed) {
        push_gradients(t, p, grad_slot, acc, stream, cost);
      }
    }
  }

  /// The window of accumulator `acc` closes at step `t`: with the sums on the device they go
  /// down now (window_sum_slot, after the window's last adds) while the next window fills the
  /// other sums (after the copies of the close before, which sent those: long done). Returns the
  /// slots pushed so far.
  std::uint64_t close_window(std::int64_t t, std::size_t acc, call_cost& cost) {
    if (!sum_.on()) {
      return pushed_;
    }
    copies_->wait_for(packs_->get());
    const auto per_slot = static_cast<std::int64_t>(ring_->slot_bytes() / 4);
    for (std::size_t p = 0; p < params_.size(); ++p) {
      std::int64_t n = static_cast<std::int64_t>(host_[p].host_set.size()) * params_[p].channel_len;
      n = n <= sum_.elements(p) ? n : 0; // larger: no selection yet, every step skipped (sum_gradients)
      for (std::int64_t b = 0; params_[p].host_side && b < n; b += per_slot) {
        ring_meta meta{};
        meta.step = t;
        meta.matrix = static_cast<std::int32_t>(p);
        meta.tag = window_sum_slot;
        meta.begin = b;
        meta.end = std::min(n, b + per_slot);
        meta.user = static_cast<std::uint64_t>(acc);
        const auto bytes = static_cast<std::size_t>(meta.end - b) * 4;
        push_slot(sum_.rows(p) + b, bytes, meta, copies_->get(), cost);
        pushed(bytes, cost);
      }
    }
    // These copies' end, marked: the next close makes the packs wait for it before the window
    // after writes these sums again. Now the packs wait for the last close's copies (the sums the
    // next window writes), one window old: done in the common case.
    sum_sent_[cur_sum_]->wait_for(copies_->get());
    sum_.flip();
    cur_sum_ ^= 1u;
    sum_sent_[cur_sum_]->join_into(packs_->get());
    sum_.reset(plan_.backend(), packs_->get());
    return pushed_;
  }

private:
  using stream_type = copy_stream<typename Backend::copy_backend_type>;

  /// The packs of `p`'s host set, slot by slot as push_gradients() cuts them (the same rest
  /// masses), each added into the window sum instead of pushed.
  void sum_gradients(std::size_t p) {
    const auto& pi = params_[p];
    const auto n = static_cast<std::int64_t>(host_[p].host_set.size());
    if (!pi.host_side || n == 0) {
      return;
    }
    // A host set larger than the sum (every channel: no selection made yet) only in a step whose
    // pending selection waits for finite gradients: a skipped step, which adds nothing.
    const bool adds = n * pi.channel_len <= sum_.elements(p);
    const cudaStream_t on = packs_->get();
    const std::int64_t per_slot = pi.rows_per_slot(ring_->slot_bytes());
    for (std::int64_t b = 0; b < n; b += per_slot) {
      const std::int64_t e = std::min(n, b + per_slot);
      std::byte* staging = plan_.staging(staging_next_++ % plan_.staging_slots(), on);
      plan_.pack(p, b, e, staging, false, on);
      if (adds) {
        sum_.add(plan_.backend(), pi, p, b, e, staging, plan_.record(), on);
      }
    }
  }

  /// Packs enqueued from now on start after the work enqueued on `stream` so far.
  void after(cudaStream_t stream) {
    packs_->wait_for(stream);
    unjoined_ = true;
  }

  void join(cudaStream_t stream) {
    if (unjoined_) {
      packs_->join_into(stream);
      unjoined_ = false;
    }
  }

  /// One slot into the ring, copied on `on`. A full ring blocks the producer, and that
  /// back-pressure is a stall, counted from the ring's own blocked time (a push that finds a free
  /// slot counts nothing). A ring closed by its consumer (which failed: a device error, say)
  /// reports the consumer's error, not the closed ring.
  void
  push_slot(const void* src, std::size_t bytes, const ring_meta& meta, cudaStream_t on, call_cost& cost) {
    const std::uint64_t blocked_before = ring_->stats().producer_blocked_ns;
    try {
      ring_->push(src, bytes, meta, on);
    } catch (const ring_closed&) {
      host_.rethrow_consumer_error();
      throw;
    }
    if constexpr (Backend::is_device) {
      const std::uint64_t blocked = ring_->stats().producer_blocked_ns - blocked_before;
      cost.stall_s += static_cast<double>(blocked) / 1e9; // as timed_stall: nothing to contract
      if (cost.trace != nullptr && blocked > 0) {
        const std::int64_t t1 = pipeline_trace::now();
        cost.trace->span(trace_track::training, "stall: D2H ring full", "stall",
                         t1 - static_cast<std::int64_t>(blocked), t1);
      }
    }
  }

  /// A slot is in the ring and its source free to reuse: counted, and on the host backend
  /// consumed right away, on this thread (there is no consumer thread).
  void pushed(std::size_t bytes, call_cost& cost) {
    cost.d2h += bytes;
    ++pushed_;
    if constexpr (!Backend::is_device) {
      host_.consume_landed(*ring_);
    }
  }

  device_plan<Backend>& plan_;
  const std::vector<param_info>& params_;
  host_side_type& host_;
  std::unique_ptr<ring_type> ring_;
  std::unique_ptr<stream_type> copies_;
  std::unique_ptr<stream_type> packs_;   // destroyed before the copies it feeds: it drains first
  std::unique_ptr<stream_type> headers_; // the step records' first copies (created last: the emulated
                                         // device numbers its streams in creation order)
  gradient_release release_ = gradient_release::at_step;
  bool released_ = true;  // by_caller: no step's packs are waiting for a release()
  bool unjoined_ = false; // packs enqueued since the last join into a caller's stream
  bool begun_ = false;    // begin_packs() ran in this step
  std::size_t staging_next_ = 0;
  std::uint64_t pushed_ = 0;
  device_window_sum<Backend> sum_;           // accumulate = device: the windows' sums (else empty)
  std::unique_ptr<stream_type> sum_sent_[2]; // per sum: waits for the copies of its last close
  std::size_t cur_sum_ = 0;
};

} // namespace detail
ZF_NAMESPACE_END
