/// @file
/// An emulated CUDA device on the host: "device" memory is host memory, every stream is an
/// in-order executor thread, events complete when their stream reaches them, and copies and
/// kernels (host twins of the device primitives) run asynchronously on those threads. Code written
/// against streams and events -- the rings, the engine's pipeline, a user's integration -- runs with
/// its real concurrency on a machine without a GPU, under ThreadSanitizer, and with an optional
/// timing model (bandwidth per copy direction, device memory bandwidth, launch latency, modelled
/// compute) so that a timeline looks like a GPU's.
///
/// Semantics follow CUDA's where they matter to stream-ordered code:
/// - work on one stream runs in enqueue order; streams run concurrently;
/// - `record(e, s)` then `stream_wait(t, e)`: work enqueued on `t` afterwards starts once `s` has
///   reached the record; waiting on an event never recorded returns at once; a re-record moves
///   the event to the new point, on any stream (waits already enqueued keep the old one, even
///   when the new one, on another stream, completes first);
/// - the null stream is an ordinary stream of the device (no legacy implicit synchronisation);
/// - copies in one direction share one copy engine (they serialise across streams, as on a GPU
///   with one engine per direction), the two directions overlap; modelled kernels share one
///   compute resource;
/// - an operation enqueued behind another of its stream (no event wait, no idle time between)
///   starts at that one's modelled end, and a body (a copy's memcpy) runs within its operation's
///   modelled time where it fits: the emulation's own costs (a thread's wake-up, the memcpy) do
///   not add to a timeline that a GPU would run back to back. A body longer than its modelled
///   time still ends the operation when it is done (the trace shows that real time);
/// - an operation that throws makes the device's error sticky (like a CUDA context error): later
///   operations are skipped (events still complete, so nothing hangs) and every synchronising call
///   rethrows the first error.
///
/// Results never depend on timing: the delays and jitter change when things happen, never what
/// the ordered operations compute.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/copy_direction.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// The timing model of an `emulated_device`. Every field defaults to "as fast as the host".
struct emulated_timing {
  double d2h_bytes_per_second = 0.0;          ///< device -> host copy engine; 0 = no modelled delay
  double h2d_bytes_per_second = 0.0;          ///< host -> device copy engine; 0 = no modelled delay
  double device_bytes_per_second = 0.0;       ///< memory bandwidth charged to kernels by their bytes
  std::chrono::nanoseconds launch_latency{0}; ///< added to every kernel
  /// Random extra delay in [0, max_jitter) before one operation in four (tests: copies that land
  /// late, slow kernels); drawn from a generator per stream seeded from `jitter_seed`.
  std::chrono::microseconds max_jitter{0};
  /// Random extra delay in [0, max_host_jitter) after one host-side wait in two (an event's or a
  /// stream's synchronize): the thread that waited comes back late, as a slow consumer, a slow
  /// host job or a descheduled training thread would; drawn from one generator seeded from
  /// `jitter_seed`.
  std::chrono::microseconds max_host_jitter{0};
  std::uint64_t jitter_seed = 1;
  /// Fault injection: the `fail_at_op`-th operation the device runs (1-based, counted across
  /// streams in the order they start; 0 = never) throws `cuda_error(cudaErrorLaunchFailure)`
  /// instead of running, and the device's error becomes sticky, as after a faulting kernel.
  std::uint64_t fail_at_op = 0;
};

/// One operation of the device's timeline (recorded when tracing is on).
struct emulated_op {
  enum class kind : std::uint8_t { kernel, copy_d2h, copy_h2d, copy_d2d, compute };
  kind what = kind::kernel;
  int stream = 0;            ///< index of the stream in creation order (0 = the null stream)
  std::size_t bytes = 0;     ///< bytes copied, or bytes charged to a kernel
  std::int64_t start_ns = 0; ///< since the device was created
  std::int64_t end_ns = 0;
  std::string name; ///< the label given at enqueue, if any
};

/// An event's records (shared by copies of an `emulated_device::event`). Each record is a point
/// of its own stream: a wait is for the record it saw, and a later record that completes first
/// (on another stream) does not complete it, as in CUDA (one fork event recorded on two streams).
struct emulated_event_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t recorded = 0;        ///< number of records so far; record n is numbered n
  std::set<std::uint64_t> unreached; ///< records their stream has not reached yet
  /// Record `n` has completed (0: never recorded).
  [[nodiscard]] bool reached(std::uint64_t n) const { return n == 0 || unreached.count(n) == 0; }
};

class emulated_device {
public:
  using clock = std::chrono::steady_clock;

  /// An event handle (copyable; copies share one event). Default-constructed = not created.
  struct event {
    std::shared_ptr<emulated_event_state> state;
  };

  explicit emulated_device(emulated_timing timing = {}) : timing_(timing), epoch_(clock::now()) {
    streams_.push_back(std::make_unique<stream_state>(*this, 0)); // the null stream
  }
  emulated_device(const emulated_device&) = delete;
  emulated_device& operator=(const emulated_device&) = delete;
  /// Drains every stream (all enqueued work completes) and joins the threads.
  ~emulated_device() {
    std::vector<std::unique_ptr<stream_state>> all;
    {
      std::lock_guard lock(streams_mutex_);
      all = std::move(streams_);
    }
    all.clear(); // each stream drains and joins in its destructor
  }

  [[nodiscard]] const emulated_timing& timing() const noexcept { return timing_; }

  /// A new stream: an in-order executor thread of its own.
  [[nodiscard]] cudaStream_t create_stream() {
    std::lock_guard lock(streams_mutex_);
    streams_.push_back(std::make_unique<stream_state>(*this, static_cast<int>(streams_.size())));
    return handle(*streams_.back());
  }
  /// Drains the stream's work, then ends its thread. The null stream cannot be destroyed.
  void destroy_stream(cudaStream_t s) noexcept {
    if (s == nullptr) {
      return;
    }
    std::unique_ptr<stream_state> gone;
    {
      std::lock_guard lock(streams_mutex_);
      auto it = std::find_if(streams_.begin(), streams_.end(),
                             [&](const std::unique_ptr<stream_state>& p) { return handle(*p) == s; });
      if (it != streams_.end()) {
        gone = std::move(*it);
        it->reset();
      }
    }
  }

  /// A kernel: `body` runs on the stream's thread, after `launch_latency` plus `bytes` over the
  /// device bandwidth on the shared compute resource.
  void launch(cudaStream_t s, std::function<void()> body, std::size_t bytes = 0, std::string name = {}) {
    const auto cost = timing_.launch_latency + duration_of(bytes, timing_.device_bytes_per_second);
    enqueue(s, emulated_op::kind::kernel, bytes, cost, std::move(body), std::move(name));
  }
  /// Modelled compute (a forward/backward pass stand-in): occupies the compute resource for `t`.
  void compute(cudaStream_t s, std::chrono::nanoseconds t, std::string name = {}) {
    enqueue(s, emulated_op::kind::compute, 0, t, {}, std::move(name));
  }
  /// An asynchronous copy on `s`; the direction's copy engine is busy for `bytes` over its
  /// bandwidth. The memory must stay valid until the copy has run (as with cudaMemcpyAsync).
  void copy(void* dst,
            const void* src,
            std::size_t bytes,
            copy_direction dir,
            cudaStream_t s,
            std::string name = {}) {
    const double bw =
        dir == copy_direction::device_to_host ? timing_.d2h_bytes_per_second : timing_.h2d_bytes_per_second;
    const auto what =
        dir == copy_direction::device_to_host ? emulated_op::kind::copy_d2h : emulated_op::kind::copy_h2d;
    enqueue(
        s, what, bytes, duration_of(bytes, bw),
        [dst, src, bytes] {
          if (bytes > 0) {
            std::memcpy(dst, src, bytes);
          }
        },
        std::move(name));
  }
  /// A device-to-device copy, charged to the compute resource at twice its bytes (read + write).
  void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t s, std::string name = {}) {
    enqueue(
        s, emulated_op::kind::copy_d2d, bytes, duration_of(2 * bytes, timing_.device_bytes_per_second),
        [dst, src, bytes] {
          if (bytes > 0) {
            std::memmove(dst, src, bytes);
          }
        },
        std::move(name));
  }

  [[nodiscard]] event create_event() const { return event{std::make_shared<emulated_event_state>()}; }
  /// Marks the point of `s` reached by the work enqueued so far.
  void record(const event& e, cudaStream_t s) {
    auto st = checked(e);
    std::uint64_t target = 0;
    {
      std::lock_guard lock(st->mutex);
      target = ++st->recorded;
      st->unreached.insert(target);
    }
    find(s).push([st, target] {
      {
        std::lock_guard lock(st->mutex);
        st->unreached.erase(target);
      }
      st->cv.notify_all();
    });
  }
  /// Work enqueued on `s` from now on starts after the event's last record completes.
  void stream_wait(cudaStream_t s, const event& e) {
    auto st = checked(e);
    std::uint64_t target = 0;
    {
      std::lock_guard lock(st->mutex);
      target = st->recorded;
    }
    if (target == 0) {
      return;
    }
    stream_state& on = find(s);
    on.push([st, target, &on] {
      on.chained = false; // the next operation starts when the wait is over, not before
      std::unique_lock lock(st->mutex);
      st->cv.wait(lock, [&] { return st->reached(target); });
    });
  }
  /// True when the event's last record has completed (or it was never recorded).
  [[nodiscard]] bool query(const event& e) const {
    auto st = checked(e);
    std::lock_guard lock(st->mutex);
    return st->reached(st->recorded);
  }
  /// Blocks until the event's last record has completed; rethrows the device's sticky error.
  void synchronize(const event& e) {
    auto st = checked(e);
    {
      std::unique_lock lock(st->mutex);
      const std::uint64_t target = st->recorded;
      st->cv.wait(lock, [&] { return st->reached(target); });
    }
    host_jitter();
    rethrow_sticky();
  }
  /// Blocks until everything enqueued on `s` so far has run; rethrows the sticky error.
  void synchronize_stream(cudaStream_t s) {
    find(s).drain();
    host_jitter();
    rethrow_sticky();
  }
  /// Blocks until every stream is idle; rethrows the sticky error.
  void synchronize() {
    std::vector<stream_state*> all;
    {
      std::lock_guard lock(streams_mutex_);
      for (auto& p : streams_) {
        if (p) {
          all.push_back(p.get());
        }
      }
    }
    for (stream_state* p : all) {
      p->drain();
    }
    rethrow_sticky();
  }

  /// Records every operation's start and end from now on (off by default).
  void set_tracing(bool on) {
    std::lock_guard lock(trace_mutex_);
    tracing_ = on;
  }
  /// The operations recorded so far, in completion order.
  [[nodiscard]] std::vector<emulated_op> trace() const {
    std::lock_guard lock(trace_mutex_);
    return trace_;
  }
  /// Time since the device was created, on the clock the trace uses.
  [[nodiscard]] std::int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - epoch_).count();
  }

private:
  struct stream_state {
    stream_state(emulated_device& dev, int stream_index)
        : device(dev), index(stream_index),
          rng(dev.timing_.jitter_seed * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(stream_index)) {
      thread = std::thread([this] { loop(); });
    }
    stream_state(const stream_state&) = delete;
    stream_state& operator=(const stream_state&) = delete;
    ~stream_state() {
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      cv.notify_all();
      thread.join();
    }
    void push(std::function<void()> task) {
      {
        std::lock_guard lock(mutex);
        tasks.push_back(std::move(task));
        ++enqueued;
      }
      cv.notify_all();
    }
    void drain() {
      std::unique_lock lock(mutex);
      const std::uint64_t target = enqueued;
      cv.wait(lock, [&] { return done >= target; });
    }
    void loop() {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock lock(mutex);
          cv.wait(lock, [&] { return stop || !tasks.empty(); });
          if (tasks.empty()) {
            return; // stop requested and everything ran
          }
          task = std::move(tasks.front());
          tasks.pop_front();
        }
        task();
        {
          std::lock_guard lock(mutex);
          ++done;
        }
        cv.notify_all();
      }
    }
    std::chrono::microseconds jitter() {
      const auto max = device.timing_.max_jitter.count();
      if (max <= 0 || rng() % 4 != 0) {
        return std::chrono::microseconds{0};
      }
      return std::chrono::microseconds(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max)));
    }

    emulated_device& device;
    int index;
    std::mt19937_64 rng; // used on the stream's own thread only
    // The stream's modelled clock (its own thread only): an operation that follows the previous
    // one directly (no wait, no idle time between) starts at that one's modelled end, as on a GPU,
    // instead of when this thread woke up; and its body is started early by the time bodies of its
    // kind took per byte on this stream, so that it ends at its modelled end (see enqueue()).
    bool chained = false;
    clock::time_point chain_end{};
    double body_ns_per_byte[5] = {0, 0, 0, 0, 0}; // by emulated_op::kind
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::uint64_t enqueued = 0;
    std::uint64_t done = 0;
    bool stop = false;
    std::thread thread; // last: starts after every other member is constructed
  };

  /// A resource that serves one operation at a time (a copy engine, the compute units).
  struct resource {
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

  static cudaStream_t handle(stream_state& s) noexcept {
    // The handle is the state's address, opaque to callers and mapped back by find() only.
    return reinterpret_cast<cudaStream_t>(&s);
  }
  stream_state& find(cudaStream_t s) {
    std::lock_guard lock(streams_mutex_);
    if (s == nullptr) {
      return *streams_.front();
    }
    for (auto& p : streams_) {
      if (p && handle(*p) == s) {
        return *p;
      }
    }
    detail::fail_argument("zenflow::emulated_device", "stream", "is not a live stream of this device");
  }
  static std::shared_ptr<emulated_event_state> checked(const event& e) {
    if (!e.state) {
      detail::fail_argument("zenflow::emulated_device", "event", "was not created by create_event()");
    }
    return e.state;
  }
  static std::chrono::nanoseconds duration_of(std::size_t bytes, double bytes_per_second) {
    if (bytes_per_second <= 0.0 || bytes == 0) {
      return std::chrono::nanoseconds{0};
    }
    return std::chrono::nanoseconds(
        static_cast<std::int64_t>(static_cast<double>(bytes) / bytes_per_second * 1e9));
  }
  resource& resource_for(emulated_op::kind what) {
    switch (what) {
    case emulated_op::kind::copy_d2h:
      return d2h_engine_;
    case emulated_op::kind::copy_h2d:
      return h2d_engine_;
    default:
      return compute_units_;
    }
  }

  void enqueue(cudaStream_t s,
               emulated_op::kind what,
               std::size_t bytes,
               std::chrono::nanoseconds cost,
               std::function<void()> body,
               std::string name) {
    stream_state& st = find(s);
    const auto enqueued = clock::now();
    st.push([this, &st, what, bytes, cost, enqueued, body = std::move(body),
             name = std::move(name)]() mutable {
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
      if (body && !sticky_set()) {
        try {
          if (timing_.fail_at_op != 0 &&
              ops_started_.fetch_add(1, std::memory_order_relaxed) + 1 == timing_.fail_at_op) {
            throw cuda_error(cudaErrorLaunchFailure,
                             "zenflow::emulated_device: injected fault (emulated_timing::fail_at_op = " +
                                 std::to_string(timing_.fail_at_op) + ", '" + name + "')");
          }
          body();
        } catch (...) {
          set_sticky(std::current_exception());
        }
      }
      const auto body_end = clock::now();
      // Per byte from large bodies only: a small copy's time is its call overhead, which would
      // start a large copy's memcpy far too early.
      if (body && bytes >= (std::size_t{1} << 16)) {
        const double took = static_cast<double>((body_end - body_start).count()) / static_cast<double>(bytes);
        per_byte = per_byte == 0.0 ? took : 0.5 * (per_byte + took);
      }
      if (cost.count() > 0) {
        std::this_thread::sleep_until(end); // never complete before the modelled end
      }
      // Ends at its modelled end, or later where the body ran past it (real time on this machine).
      const auto done = body ? std::max(end, body_end) : end;
      st.chained = true;
      st.chain_end = done;
      note(emulated_op{what, st.index, bytes, since_epoch(start), since_epoch(done), std::move(name)});
    });
  }

  std::int64_t since_epoch(clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count();
  }
  void note(emulated_op op) {
    std::lock_guard lock(trace_mutex_);
    if (tracing_) {
      trace_.push_back(std::move(op));
    }
  }
  /// The host-side delay of `max_host_jitter` (see emulated_timing), on the calling thread.
  void host_jitter() {
    if (timing_.max_host_jitter.count() <= 0) {
      return;
    }
    std::uint64_t draw = 0;
    {
      std::lock_guard lock(host_rng_mutex_);
      draw = host_rng_();
    }
    if ((draw & 1u) != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<std::int64_t>(
          (draw >> 1) % static_cast<std::uint64_t>(timing_.max_host_jitter.count()))));
    }
  }

  bool sticky_set() {
    std::lock_guard lock(error_mutex_);
    return sticky_ != nullptr;
  }
  void set_sticky(std::exception_ptr e) {
    std::lock_guard lock(error_mutex_);
    if (!sticky_) {
      sticky_ = std::move(e);
    }
  }
  void rethrow_sticky() {
    std::exception_ptr e;
    {
      std::lock_guard lock(error_mutex_);
      e = sticky_;
    }
    if (e) {
      std::rethrow_exception(e);
    }
  }

  emulated_timing timing_;
  clock::time_point epoch_;
  std::atomic<std::uint64_t> ops_started_{0}; // fault injection's count
  std::mutex host_rng_mutex_;
  std::mt19937_64 host_rng_{timing_.jitter_seed ^ 0xC2B2AE3D27D4EB4Full}; // host_jitter(), under its mutex
  resource d2h_engine_, h2d_engine_, compute_units_;
  std::mutex error_mutex_;
  std::exception_ptr sticky_;
  mutable std::mutex trace_mutex_;
  bool tracing_ = false;
  std::vector<emulated_op> trace_;
  std::mutex streams_mutex_;
  std::vector<std::unique_ptr<stream_state>> streams_; // [0] = the null stream; destroyed slots are null
};

ZF_NAMESPACE_END
