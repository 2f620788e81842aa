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
/// - the null stream is an ordinary stream of the device (no legacy implicit synchronisation),
///   unless `emulated_rules::legacy_null_stream` asks for CUDA's legacy default stream;
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
///
/// The rules a GPU punishes, enforced here so that the cpu and sanitizer suites catch them
/// (counted in `stats()`, described in `reports()`):
/// - a copy whose host side is not pinned (`allocate(bytes, emulated_memory::pinned)`,
///   `register_host`, `pinned_buffer`) is pageable: it runs synchronously with the caller, as
///   `cudaMemcpyAsync` does on pageable memory (`pageable_copies`);
/// - `allocate` and `free` synchronise the whole device, as `cudaMalloc`, `cudaHostAlloc`,
///   `cudaFree` and `cudaFreeHost` do (`allocations`, `frees`, `device_syncs`);
/// - a call into a device from a host task (the body of `launch`, on a stream's thread) throws
///   `cuda_error(cudaErrorNotPermitted)`, as any CUDA call inside a host callback is illegal;
/// - freed memory is poisoned (every byte 0xFF: a float NaN) and kept aside for a while: a copy
///   that touches it fails with `cudaErrorIllegalAddress` (sticky), a kernel reads NaN
///   (`use_after_free`); a stream or an event destroyed while work that uses it is still queued
///   is reported (`busy_destroys`);
/// - opt-in (`emulated_rules::legacy_null_stream`): the null stream synchronises with every other
///   stream, as CUDA's legacy default stream does (`legacy_syncs`).
///
/// This header is the interface; its parts are in core/detail/: emulated_streams.hpp (the
/// streams' threads and their set), emulated_timeline.hpp (the timing model and the trace),
/// emulated_quarantine.hpp (the allocations and the poisoned quarantine of freed memory),
/// emulated_checks.hpp (the rules' counts and reports, the sticky error).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#if ZF_ASAN
#  include <sanitizer/asan_interface.h>
#endif

#include <zenflow/core/copy_direction.hpp>
#include <zenflow/core/detail/emulated_checks.hpp>
#include <zenflow/core/detail/emulated_pinned.hpp>
#include <zenflow/core/detail/emulated_quarantine.hpp>
#include <zenflow/core/detail/emulated_streams.hpp>
#include <zenflow/core/detail/emulated_timeline.hpp>
#include <zenflow/core/device_op.hpp>
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

/// Rules of the CUDA model that an `emulated_device` enforces only when asked.
struct emulated_rules {
  /// The null stream behaves as CUDA's legacy default stream: an operation on it waits for the
  /// work enqueued so far on every other stream, and work enqueued on another stream afterwards
  /// waits for it (each such wait counted in `emulated_device_stats::legacy_syncs`). Shows what
  /// code that forgot its stream would cost; off by default (the null stream is then an ordinary
  /// stream, as with a per-thread default stream or streams created non-blocking).
  bool legacy_null_stream = false;
  /// Fresh device allocations hold 0xff bytes (a float NaN, -1) instead of zeros, as a GPU's
  /// `cudaMalloc` returns garbage: code that reads device memory it never wrote shows it (the
  /// kernel emulator's poison). Pinned host allocations stay zero-filled.
  bool poison_allocations = false;
};

/// What an `emulated_device` counted of the rules a GPU punishes (`emulated_device::stats()`;
/// every count since the device was created).
struct emulated_device_stats {
  std::uint64_t pageable_copies = 0; ///< copies whose host side was not pinned: ran synchronously
  std::uint64_t allocations = 0;     ///< `allocate` calls (device or pinned; each synchronised the device)
  std::uint64_t frees = 0;           ///< `free` and `free_async` calls (`free` synchronised the device)
  std::uint64_t device_syncs = 0;    ///< device-wide synchronisations: `synchronize()`, allocate, free
  std::uint64_t legacy_syncs = 0;    ///< implicit waits of the legacy null stream (opt-in)
  std::uint64_t use_after_free = 0;  ///< copies that touched freed memory (each failed, sticky)
  std::uint64_t busy_destroys = 0;   ///< streams or events destroyed with work on them still queued
  std::uint64_t host_task_calls = 0; ///< calls into the device from a host task (each threw)
};

/// What an `emulated_device::allocate` returns: device memory, or pinned host memory (a copy
/// from or to it runs asynchronously). Both are host memory here.
enum class emulated_memory : std::uint8_t { device, pinned };

/// One operation of the device's timeline (recorded when tracing is on): core/device_op.hpp.
using emulated_op = device_op;

/// An event's records (shared by copies of an `emulated_device::event`). Each record is a point
/// of its own stream: a wait is for the record it saw, and a later record that completes first
/// (on another stream) does not complete it, as in CUDA (one fork event recorded on two streams).
struct emulated_event_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t recorded = 0;        ///< number of records so far; record n is numbered n
  std::set<std::uint64_t> unreached; ///< records their stream has not reached yet
  std::uint64_t waiting = 0;         ///< stream waits on it enqueued and not over yet
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

  explicit emulated_device(emulated_timing timing = {}, emulated_rules rules = {})
      : timing_(timing), rules_(rules), timeline_(timing.jitter_seed, timing.max_host_jitter) {
    streams_.add(timing_.jitter_seed, timing_.max_jitter); // the null stream
    const std::lock_guard lock(live().mutex);
    live().devices.insert(this);
  }
  emulated_device(const emulated_device&) = delete;
  emulated_device& operator=(const emulated_device&) = delete;
  /// Drains every stream (all enqueued work completes) and joins the threads, then releases the
  /// device's memory, as a CUDA context's end does (a buffer must not outlive its device).
  ~emulated_device() {
    {
      const std::lock_guard lock(live().mutex);
      live().devices.erase(this);
    }
    std::vector<std::unique_ptr<stream_state>> all = streams_.take_all();
    all.clear(); // each stream drains and joins in its destructor; then memory_ releases the memory
  }

  [[nodiscard]] const emulated_timing& timing() const noexcept { return timing_; }
  [[nodiscard]] const emulated_rules& rules() const noexcept { return rules_; }

  /// The device allocations on the calling thread go to (`emulated_backend`'s buffers), as a
  /// CUDA device is current on a thread: the last one made current there, if still alive.
  [[nodiscard]] static emulated_device* current() noexcept {
    emulated_device* d = current_slot();
    const std::lock_guard lock(live().mutex);
    return d != nullptr && live().devices.count(d) != 0 ? d : nullptr;
  }
  /// Makes this device the calling thread's current one (`cudaSetDevice`'s twin).
  void make_current() noexcept { current_slot() = this; }

  /// The freed memory the device keeps aside, poisoned, to catch a use after free (up to 64 MiB):
  /// resident, but no allocation's (a measurement of the process's memory subtracts it).
  [[nodiscard]] std::size_t quarantined_bytes() { return memory_.quarantined_bytes(); }

  /// What the device counted of the rules (see the file comment and docs/emulated-device.md).
  [[nodiscard]] emulated_device_stats stats() const noexcept {
    emulated_device_stats out;
    out.pageable_copies = checks_.pageable_copies.load();
    out.allocations = checks_.allocations.load();
    out.frees = checks_.frees.load();
    out.device_syncs = checks_.device_syncs.load();
    out.legacy_syncs = checks_.legacy_syncs.load();
    out.use_after_free = checks_.use_after_free.load();
    out.busy_destroys = checks_.busy_destroys.load();
    out.host_task_calls = checks_.host_task_calls.load();
    return out;
  }
  /// One line per broken rule that was reported (a use after free, a busy destroy, a call from a
  /// host task), in the order they happened.
  [[nodiscard]] std::vector<std::string> reports() const { return checks_.reports(); }

  /// `bytes` of device memory (`emulated_memory::device`) or of pinned host memory, 256-byte
  /// aligned, zero-filled (device memory 0xff bytes with `emulated_rules::poison_allocations`);
  /// nullptr for 0 bytes. Synchronises the whole device first, as
  /// `cudaMalloc` and `cudaHostAlloc` do (counted: `allocations`, `device_syncs`).
  [[nodiscard]] void* allocate(std::size_t bytes, emulated_memory kind = emulated_memory::device) {
    no_host_task("allocate");
    quiet_synchronize();
    checks_.allocations.fetch_add(1, std::memory_order_relaxed);
    if (bytes == 0) {
      return nullptr;
    }
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) {
      throw std::bad_alloc();
    }
    std::memset(p, rules_.poison_allocations && kind == emulated_memory::device ? 0xff : 0, rounded);
#if ZF_ASAN
    // The rounding's tail is not the caller's: AddressSanitizer reports a kernel or a copy that
    // reads or writes there, as past any heap block.
    __asan_poison_memory_region(static_cast<char*>(p) + bytes, rounded - bytes);
#endif
    memory_.add(p, bytes, kind == emulated_memory::pinned);
    if (kind == emulated_memory::pinned) {
      detail::emulated_pinned_ranges::instance().add(p, bytes);
    }
    return p;
  }
  /// Frees an allocation of this device (nullptr: nothing), after synchronising the whole device,
  /// as `cudaFree` and `cudaFreeHost` do (counted: `frees`, `device_syncs`). The memory is
  /// poisoned and kept aside for a while: a copy enqueued on it later fails (`use_after_free`).
  /// Throws `zenflow::invalid_argument` naming `p` for a pointer it did not allocate, or one
  /// already freed.
  void free(void* p) {
    no_host_task("free");
    if (p == nullptr) {
      return;
    }
    memory_.live_allocation(p, "free");
    quiet_synchronize();
    checks_.frees.fetch_add(1, std::memory_order_relaxed);
    memory_.retire(p);
  }
  /// Frees an allocation when `s` reaches this point, without synchronising (`cudaFreeAsync`'s
  /// twin): work of other streams that still uses it must be ordered before, or it reads poison
  /// (a copy fails with `cudaErrorIllegalAddress`, counted in `use_after_free`).
  void free_async(void* p, cudaStream_t s) {
    no_host_task("free_async");
    if (p == nullptr) {
      return;
    }
    memory_.live_allocation(p, "free_async");
    checks_.frees.fetch_add(1, std::memory_order_relaxed);
    push_op(find(s), [this, p] { memory_.retire(p); });
  }
  /// Host memory the device's copies treat as pinned from now on (`cudaHostRegister`'s twin).
  void register_host(void* p, std::size_t bytes) {
    no_host_task("register_host");
    detail::emulated_pinned_ranges::instance().add(p, bytes);
  }
  /// Ends a `register_host` (`cudaHostUnregister`'s twin).
  void unregister_host(void* p) {
    no_host_task("unregister_host");
    detail::emulated_pinned_ranges::instance().remove(p);
  }
  static constexpr std::size_t alignment = 256;

  /// A new stream: an in-order executor thread of its own.
  [[nodiscard]] cudaStream_t create_stream() {
    no_host_task("create_stream");
    return streams_.add(timing_.jitter_seed, timing_.max_jitter);
  }
  /// Drains the stream's work, then ends its thread. The null stream cannot be destroyed. A
  /// stream destroyed with work still queued on it is reported (`busy_destroys`): the code that
  /// destroys it has usually not ordered its own teardown after that work. From a host task it
  /// is reported (`host_task_calls`) and does nothing.
  void destroy_stream(cudaStream_t s) noexcept {
    if (s == nullptr) {
      return;
    }
    if (detail::on_emulated_stream_thread()) {
      checks_.host_task_calls.fetch_add(1, std::memory_order_relaxed);
      checks_.report("zenflow::emulated_device::destroy_stream: called from a host task (a stream's thread), "
                     "where CUDA calls are not allowed; the stream was not destroyed");
      return;
    }
    const std::unique_ptr<stream_state> gone = streams_.take(s);
    if (gone) {
      if (const std::uint64_t queued = gone->pending(); queued > 0) {
        checks_.busy_destroys.fetch_add(1, std::memory_order_relaxed);
        checks_.report("zenflow::emulated_device::destroy_stream: stream " + std::to_string(gone->index) +
                       " destroyed with " + std::to_string(queued) + " operation(s) still queued on it");
      }
    }
  }

  /// A kernel: `body` runs on the stream's thread, after `launch_latency` plus `bytes` over the
  /// device bandwidth on the shared compute resource.
  void launch(cudaStream_t s, std::function<void()> body, std::size_t bytes = 0, std::string name = {}) {
    no_host_task("launch");
    const auto cost = timing_.launch_latency + timeline::duration_of(bytes, timing_.device_bytes_per_second);
    enqueue(find(s), emulated_op::kind::kernel, bytes, cost, std::move(body), std::move(name));
  }
  /// Modelled compute (a forward/backward pass stand-in): occupies the compute resource for `t`.
  void compute(cudaStream_t s, std::chrono::nanoseconds t, std::string name = {}) {
    no_host_task("compute");
    enqueue(find(s), emulated_op::kind::compute, 0, t, {}, std::move(name));
  }
  /// An asynchronous copy on `s`; the direction's copy engine is busy for `bytes` over its
  /// bandwidth. The memory must stay valid until the copy has run (as with cudaMemcpyAsync).
  /// Pageable host memory (the host side not pinned: see `allocate`, `register_host`): the copy
  /// runs synchronously, the call returns once it and everything before it on `s` have run, as
  /// `cudaMemcpyAsync` on pageable memory does (counted: `pageable_copies`).
  void copy(void* dst,
            const void* src,
            std::size_t bytes,
            copy_direction dir,
            cudaStream_t s,
            std::string name = {}) {
    no_host_task("copy");
    const double bw =
        dir == copy_direction::device_to_host ? timing_.d2h_bytes_per_second : timing_.h2d_bytes_per_second;
    const auto what =
        dir == copy_direction::device_to_host ? emulated_op::kind::copy_d2h : emulated_op::kind::copy_h2d;
    const void* host = dir == copy_direction::device_to_host ? static_cast<const void*>(dst) : src;
    const bool pageable = !detail::emulated_pinned_ranges::instance().contains(host, bytes);
    stream_state& st = find(s);
    enqueue(
        st, what, bytes, timeline::duration_of(bytes, bw),
        [this, dst, src, bytes] {
          if (bytes > 0) {
            check_live(dst, src, bytes, "copy");
            std::memcpy(dst, src, bytes);
          }
        },
        std::move(name));
    if (pageable) {
      checks_.pageable_copies.fetch_add(1, std::memory_order_relaxed);
      st.drain();
    }
  }
  /// A device-to-device copy, charged to the compute resource at twice its bytes (read + write).
  void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t s, std::string name = {}) {
    no_host_task("copy_device");
    enqueue(
        find(s), emulated_op::kind::copy_d2d, bytes,
        timeline::duration_of(2 * bytes, timing_.device_bytes_per_second),
        [this, dst, src, bytes] {
          if (bytes > 0) {
            check_live(dst, src, bytes, "copy_device");
            std::memmove(dst, src, bytes);
          }
        },
        std::move(name));
  }

  [[nodiscard]] event create_event() const {
    no_host_task("create_event");
    return event{std::make_shared<emulated_event_state>()};
  }
  /// Ends this handle of the event (`cudaEventDestroy`'s twin; other copies of the handle keep
  /// it). An event destroyed while a record of it or a stream's wait on it is still queued is
  /// reported (`busy_destroys`); the queued work still completes.
  void destroy_event(event& e) noexcept {
    if (!e.state) {
      return;
    }
    std::uint64_t records = 0, waits = 0;
    {
      const std::lock_guard lock(e.state->mutex);
      records = e.state->unreached.size();
      waits = e.state->waiting;
    }
    if (records + waits > 0) {
      checks_.busy_destroys.fetch_add(1, std::memory_order_relaxed);
      checks_.report("zenflow::emulated_device::destroy_event: event destroyed with " +
                     std::to_string(records) + " record(s) and " + std::to_string(waits) +
                     " stream wait(s) on it still queued");
    }
    e.state.reset();
  }
  /// Marks the point of `s` reached by the work enqueued so far.
  void record(const event& e, cudaStream_t s) {
    no_host_task("record");
    auto st = checked(e);
    std::uint64_t target = 0;
    {
      std::lock_guard lock(st->mutex);
      target = ++st->recorded;
      st->unreached.insert(target);
    }
    push_op(find(s), [st, target] {
      {
        std::lock_guard lock(st->mutex);
        st->unreached.erase(target);
      }
      st->cv.notify_all();
    });
  }
  /// Work enqueued on `s` from now on starts after the event's last record completes.
  void stream_wait(cudaStream_t s, const event& e) {
    no_host_task("stream_wait");
    auto st = checked(e);
    stream_state& on = find(s);
    std::uint64_t target = 0;
    {
      std::lock_guard lock(st->mutex);
      target = st->recorded;
      st->waiting += target == 0 ? 0 : 1;
    }
    if (target == 0) {
      return;
    }
    push_op(on, [st, target, &on] {
      on.chained = false; // the next operation starts when the wait is over, not before
      std::unique_lock lock(st->mutex);
      st->cv.wait(lock, [&] { return st->reached(target); });
      --st->waiting;
    });
  }
  /// True when the event's last record has completed (or it was never recorded).
  [[nodiscard]] bool query(const event& e) const {
    no_host_task("query");
    auto st = checked(e);
    std::lock_guard lock(st->mutex);
    return st->reached(st->recorded);
  }
  /// Blocks until the event's last record has completed; rethrows the device's sticky error.
  void synchronize(const event& e) {
    no_host_task("synchronize");
    auto st = checked(e);
    {
      std::unique_lock lock(st->mutex);
      const std::uint64_t target = st->recorded;
      st->cv.wait(lock, [&] { return st->reached(target); });
    }
    timeline_.host_jitter();
    sticky_.rethrow();
  }
  /// Blocks until everything enqueued on `s` so far has run; rethrows the sticky error.
  void synchronize_stream(cudaStream_t s) {
    no_host_task("synchronize_stream");
    find(s).drain();
    timeline_.host_jitter();
    sticky_.rethrow();
  }
  /// Blocks until every stream is idle; rethrows the sticky error (counted: `device_syncs`).
  void synchronize() {
    no_host_task("synchronize");
    quiet_synchronize();
    sticky_.rethrow();
  }

  /// Records every operation's start and end from now on (off by default).
  void set_tracing(bool on) {
    timeline_.set_tracing(on);
  }
  /// The operations recorded so far, in completion order.
  [[nodiscard]] std::vector<emulated_op> trace() const {
    return timeline_.trace();
  }
  /// Time since the device was created, on the clock the trace uses.
  [[nodiscard]] std::int64_t now_ns() const {
    return timeline_.now_ns();
  }

private:
  using stream_state = detail::emulated_stream;
  using timeline = detail::emulated_timeline;

  stream_state& find(cudaStream_t s) {
    return streams_.find(s);
  }
  static std::shared_ptr<emulated_event_state> checked(const event& e) {
    if (!e.state) {
      detail::fail_argument("zenflow::emulated_device", "event", "was not created by create_event()");
    }
    return e.state;
  }

  void enqueue(stream_state& st,
               emulated_op::kind what,
               std::size_t bytes,
               std::chrono::nanoseconds cost,
               std::function<void()> body,
               std::string name) {
    const auto enqueued = clock::now();
    push_op(st, [this, &st, what, bytes, cost, enqueued, body = std::move(body),
                 name = std::move(name)]() mutable {
      timeline_.run(
          st, what, bytes, cost, enqueued, static_cast<bool>(body), [&] { run_body(body, name); }, name);
    });
  }
  /// An operation's body, unless the device's error is sticky; one that throws makes it sticky
  /// (or the injected fault of `emulated_timing::fail_at_op`, in its place).
  void run_body(const std::function<void()>& body, const std::string& name) {
    if (sticky_.is_set()) {
      return;
    }
    try {
      if (timing_.fail_at_op != 0 &&
          ops_started_.fetch_add(1, std::memory_order_relaxed) + 1 == timing_.fail_at_op) {
        throw cuda_error(cudaErrorLaunchFailure,
                         "zenflow::emulated_device: injected fault (emulated_timing::fail_at_op = " +
                             std::to_string(timing_.fail_at_op) + ", '" + name + "')");
      }
      body();
    } catch (...) {
      sticky_.set(std::current_exception());
    }
  }

  /// `st.push(task)`, after the legacy null stream's implicit waits where they are on.
  void push_op(stream_state& st, std::function<void()> task) {
    if (rules_.legacy_null_stream) {
      legacy_order(st);
    }
    st.push(std::move(task));
  }
  /// The legacy null stream: an operation on it waits for the work so far on every other stream;
  /// an operation on another stream waits for the null stream's work so far.
  void legacy_order(stream_state& st) {
    std::vector<stream_state*> before;
    streams_.with_streams([&](std::vector<std::unique_ptr<stream_state>>& streams) {
      for (auto& p : streams) {
        const bool other = st.index == 0 ? p && p.get() != &st : p && p->index == 0;
        if (other && p->pending() > 0) {
          before.push_back(p.get());
        }
      }
      for (stream_state* p : before) {
        auto mark = std::make_shared<emulated_event_state>();
        mark->recorded = 1;
        mark->unreached.insert(1);
        p->push([mark] {
          {
            std::lock_guard l(mark->mutex);
            mark->unreached.clear();
          }
          mark->cv.notify_all();
        });
        st.push([mark, &st] {
          st.chained = false;
          std::unique_lock l(mark->mutex);
          mark->cv.wait(l, [&] { return mark->unreached.empty(); });
        });
        checks_.legacy_syncs.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  static emulated_device*& current_slot() noexcept {
    static thread_local emulated_device* d = nullptr;
    return d;
  }
  struct live_devices {
    std::mutex mutex;
    std::set<const emulated_device*> devices;
  };
  static live_devices& live() {
    static auto* all = new live_devices; // NOLINT: never freed (a thread may ask after main)
    return *all;
  }
  /// Throws (and reports) when called from a stream's thread: CUDA calls are illegal there.
  void no_host_task(const char* call) const {
    checks_.no_host_task(call);
  }
  /// Every stream drained, no rethrow (allocate, free, synchronize), counted.
  void quiet_synchronize() {
    checks_.device_syncs.fetch_add(1, std::memory_order_relaxed);
    for (stream_state* p : streams_.live()) {
      p->drain();
    }
  }

  /// On a stream's thread, before a copy's memcpy: fails when either side touches freed memory.
  void check_live(const void* dst, const void* src, std::size_t bytes, const char* call) {
    const char* side = memory_.freed_side(dst, src, bytes);
    if (side == nullptr) {
      return;
    }
    checks_.use_after_free.fetch_add(1, std::memory_order_relaxed);
    const std::string what = std::string("zenflow::emulated_device::") + call + ": use after free: the " +
                             side + " of a " + std::to_string(bytes) +
                             "-byte copy was freed before the copy ran (freed while work that uses it "
                             "was still queued, or used after its free)";
    checks_.report(what);
    throw cuda_error(cudaErrorIllegalAddress, what);
  }

  emulated_timing timing_;
  emulated_rules rules_;
  mutable detail::emulated_rule_log checks_;  // stats() and reports()
  detail::emulated_allocations memory_;       // released after the streams have stopped (~emulated_device)
  std::atomic<std::uint64_t> ops_started_{0}; // fault injection's count
  detail::emulated_sticky_error sticky_;
  timeline timeline_;
  detail::emulated_stream_set streams_; // [0] = the null stream; destroyed slots are null
};

ZF_NAMESPACE_END
