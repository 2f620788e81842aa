/// @file
/// The timeline of an `emulated_device` (core/emulated_device.hpp): the resources that serve one
/// operation at a time (a copy engine per direction, the compute units), the modelled time of one
/// operation on its stream (when it starts and ends, where its body runs inside that time), the
/// host-side jitter of a wait, and the trace of what ran when. Apart from the device so that the
/// public header holds its interface and the rules it documents; results never depend on any of
/// this, only when things happen.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/emulated_streams.hpp>
#include <zenflow/core/device_op.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// A resource that serves one operation at a time (a copy engine, the compute units).
struct emulated_resource {
  using clock = std::chrono::steady_clock;
  std::mutex mutex;
  clock::time_point free_at{};
  /// Reserves `d` from max(`from`, free_at) on and returns the reservation's [start, end).
  std::pair<clock::time_point, clock::time_point> reserve(std::chrono::nanoseconds d,
                                                          clock::time_point from) {
    std::lock_guard lock(mutex);
    const auto start = std::max(from, free_at);
    free_at = start + d;
    return {start, free_at};
  }
};

class emulated_timeline {
public:
  using clock = std::chrono::steady_clock;

  /// The host-side jitter draws from a generator seeded from `jitter_seed`, delays below
  /// `host_jitter_bound` (`emulated_timing::max_host_jitter`).
  emulated_timeline(std::uint64_t jitter_seed, std::chrono::microseconds host_jitter_bound)
      : epoch_(clock::now()), max_host_jitter_(host_jitter_bound),
        host_rng_(jitter_seed ^ 0xC2B2AE3D27D4EB4Full) {}

  /// The modelled time of `bytes` at `bytes_per_second` (0 for no modelled delay).
  static std::chrono::nanoseconds duration_of(std::size_t bytes, double bytes_per_second) {
    if (bytes_per_second <= 0.0 || bytes == 0) {
      return std::chrono::nanoseconds{0};
    }
    return std::chrono::nanoseconds(
        static_cast<std::int64_t>(static_cast<double>(bytes) / bytes_per_second * 1e9));
  }

  /// Runs one operation on its stream's thread: `run_body()` (when `has_body`) within the
  /// modelled time `cost` on the resource of its kind, then notes it in the trace as `name`.
  template <class Body>
  void run(emulated_stream& st,
           device_op::kind what,
           std::size_t bytes,
           std::chrono::nanoseconds cost,
           clock::time_point enqueued,
           bool has_body,
           Body&& run_body,
           std::string& name) {
    if (const auto j = st.jitter(); j.count() > 0) {
      std::this_thread::sleep_for(j);
      st.chained = false;
    }
    // Back to back on this stream, the operation starts at the previous one's modelled end (or
    // when it was enqueued, if later: the stream was idle), not when this thread got to it: the
    // thread's wake-up after a sleep (~0.1 ms) and a body that ran past its modelled end are the
    // emulation's costs, which a GPU does not pay between two operations of one stream.
    clock::time_point start{}, end{};
    auto& per_byte = st.body_ns_per_byte[static_cast<int>(what)];
    if (cost.count() > 0) {
      std::tie(start, end) =
          resource_for(what).reserve(cost, st.chained ? std::max(st.chain_end, enqueued) : clock::now());
      // The body (a copy's memcpy) runs in the last part of the modelled time, not after it: the
      // data still lands near the end, and the operation does not take its time plus the memcpy.
      // Twice the expected time: a memcpy slower than the running mean must not overrun.
      const auto early =
          std::chrono::nanoseconds(static_cast<std::int64_t>(2.0 * per_byte * static_cast<double>(bytes)));
      std::this_thread::sleep_until(end - std::min(early, cost));
    } else {
      start = end = clock::now();
    }
    const auto body_start = clock::now();
    if (has_body) {
      std::forward<Body>(run_body)();
    }
    const auto body_end = clock::now();
    // Per byte from large bodies only: a small copy's time is its call overhead, which would
    // start a large copy's memcpy far too early.
    if (has_body && bytes >= (std::size_t{1} << 16)) {
      const double took = static_cast<double>((body_end - body_start).count()) / static_cast<double>(bytes);
      per_byte = per_byte == 0.0 ? took : 0.5 * (per_byte + took);
    }
    if (cost.count() > 0) {
      std::this_thread::sleep_until(end); // never complete before the modelled end
    }
    // Ends at its modelled end, or later where the body ran past it (real time on this machine).
    const auto done = has_body ? std::max(end, body_end) : end;
    st.chained = true;
    st.chain_end = done;
    note(device_op{what, st.index, bytes, since_epoch(start), since_epoch(done), std::move(name)});
  }

  /// The host-side delay of `max_host_jitter` (see emulated_timing), on the calling thread.
  void host_jitter() {
    if (max_host_jitter_.count() <= 0) {
      return;
    }
    std::uint64_t draw = 0;
    {
      std::lock_guard lock(host_rng_mutex_);
      draw = host_rng_();
    }
    if ((draw & 1u) != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<std::int64_t>((draw >> 1) % static_cast<std::uint64_t>(max_host_jitter_.count()))));
    }
  }

  void set_tracing(bool on) {
    std::lock_guard lock(trace_mutex_);
    tracing_ = on;
  }
  [[nodiscard]] std::vector<device_op> trace() const {
    std::lock_guard lock(trace_mutex_);
    return trace_;
  }
  /// Time since the timeline (its device) was created.
  [[nodiscard]] std::int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - epoch_).count();
  }

private:
  emulated_resource& resource_for(device_op::kind what) {
    switch (what) {
    case device_op::kind::copy_d2h:
      return d2h_engine_;
    case device_op::kind::copy_h2d:
      return h2d_engine_;
    default:
      return compute_units_;
    }
  }
  std::int64_t since_epoch(clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count();
  }
  void note(device_op op) {
    std::lock_guard lock(trace_mutex_);
    if (tracing_) {
      trace_.push_back(std::move(op));
    }
  }

  clock::time_point epoch_;
  std::chrono::microseconds max_host_jitter_;
  std::mutex host_rng_mutex_;
  std::mt19937_64 host_rng_; // host_jitter(), under its mutex
  emulated_resource d2h_engine_, h2d_engine_, compute_units_;
  mutable std::mutex trace_mutex_;
  bool tracing_ = false;
  std::vector<device_op> trace_;
};

} // namespace detail

ZF_NAMESPACE_END
