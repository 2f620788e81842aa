/// @file
/// The pinned D2H ring: a fixed set of page-locked host slots, each guarded by a completion
/// event, that streams data from the device to a host thread.
///
/// `d2h_ring<Meta, Backend>`: the producer (the training thread) acquires a free slot, enqueues
/// the copy into it on a copy stream and publishes it with a sequence number and metadata; the
/// consumer (a host thread) takes the slots in sequence order, waits for each slot's event, reads
/// it and releases it. A slot is never reused before the consumer released it; a full ring blocks
/// the producer (back-pressure), and the time it blocked is counted.
///
/// There is no H2D ring: the engine's uploads go from host buffers the host job writes straight
/// into device buffers on an upload stream, guarded by one event per window
/// (engine/detail/plan/device_plan.hpp), and a ring of host slots there would only add a host copy.
///
/// The memory is allocated once, at construction
/// (`pinned_buffer`: falls back to pageable memory without a driver). `Backend` is
/// `cuda_copy_backend` (real streams and events) or `host_copy_backend` (memcpy, completion at
/// once), so that the same protocol runs in CI and on the GPU.
///
/// Threading: every member is thread-safe; the intended use is one producer thread and one
/// consumer thread. Not capturable in a CUDA graph (acquire and the consumer block on the host).
/// Destroy a ring only after every thread has left its member functions.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// Default metadata that travels with a `d2h_ring` slot (host-known values only: values the
/// device computes, such as a gradient scale, belong in the payload and travel with the copy).
struct ring_meta {
  std::int64_t step = 0;    ///< training step the chunk belongs to
  std::int32_t matrix = -1; ///< matrix (parameter) id
  std::int32_t tag = 0;     ///< free for the user (e.g. "last chunk of the step")
  std::int64_t begin = 0;   ///< first row / channel of the chunk
  std::int64_t end = 0;     ///< one past the last row / channel
  std::uint64_t user = 0;   ///< free for the user
};

/// Counters of a ring. Times are wall-clock nanoseconds.
struct ring_stats {
  std::uint64_t transfers = 0;           ///< slots published
  std::uint64_t bytes = 0;               ///< payload bytes of those transfers
  std::uint64_t released = 0;            ///< slots the consumer released
  std::uint64_t producer_blocked_ns = 0; ///< acquire() waiting for a free slot (back-pressure)
  std::uint64_t consumer_wait_ns = 0;    ///< next() waiting for data
  std::uint64_t max_in_use = 0;          ///< most slots held at once
};

/// Thrown by a blocking ring call once the ring was closed.
class ring_closed : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

namespace detail {
enum class ring_slot_state : unsigned char { free, acquiring, writing, published, reading };

/// Slot stride: a multiple of 256 bytes, so that every slot starts DMA-friendly aligned.
[[nodiscard]] inline std::size_t ring_stride(std::size_t slot_bytes) noexcept {
  return (slot_bytes + 255) / 256 * 256;
}

inline void check_ring_shape(const char* function, std::size_t slots, std::size_t slot_bytes) {
  if (slots == 0) {
    fail_argument(function, "slots",
                  "must be > 0 (a ring needs at least one slot; two for double buffering)");
  }
  if (slot_bytes == 0) {
    fail_argument(function, "slot_bytes", "must be > 0");
  }
  if (slot_bytes > std::numeric_limits<std::size_t>::max() / 2 / slots) {
    fail_argument(function, "slot_bytes", "times slots overflows the address space");
  }
}

[[nodiscard]] inline std::uint64_t elapsed_ns(std::chrono::steady_clock::time_point t0) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}
} // namespace detail

/// Device -> host ring of pinned slots. See the file comment for the protocol.
///
/// @tparam Meta    trivially copyable metadata published with every slot.
/// @tparam Backend `cuda_copy_backend` or `host_copy_backend` (or another `copy_backend`).
template <class Meta = ring_meta, copy_backend Backend = host_copy_backend>
class d2h_ring {
  static_assert(std::is_trivially_copyable_v<Meta>, "ring metadata must be trivially copyable");

public:
  using meta_type = Meta;
  using backend_type = Backend;

  /// A slot held by the producer: write (or copy) at most `capacity` bytes to `data`.
  struct write_slot {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
    std::uint64_t sequence = 0;
  };
  /// A slot held by the consumer: its copy has completed; valid until `release`.
  struct read_slot {
    const std::byte* data = nullptr;
    std::size_t bytes = 0;
    std::uint64_t sequence = 0;
    Meta meta{};
  };

  /// Allocates `slots` slots of `slot_bytes` bytes and one event per slot.
  /// @throws invalid_argument for `slots == 0` or `slot_bytes == 0` (naming the argument);
  ///         cuda_error when the backend cannot create its events (CUDA backend without a device).
  d2h_ring(std::size_t slots, std::size_t slot_bytes, Backend backend = {})
      : backend_(std::move(backend)), slot_bytes_(checked_slot_bytes(slots, slot_bytes)),
        stride_(detail::ring_stride(slot_bytes)), storage_(slots * stride_), slots_(slots) {
    std::size_t created = 0;
    try {
      for (; created < slots_.size(); ++created) {
        backend_.create_event(slots_[created].event);
      }
    } catch (...) {
      for (std::size_t i = 0; i < created; ++i) {
        backend_.destroy_event(slots_[i].event);
      }
      throw;
    }
  }
  d2h_ring(const d2h_ring&) = delete;
  d2h_ring& operator=(const d2h_ring&) = delete;

  /// Waits for the copies still in flight into published slots (the memory is freed next).
  ~d2h_ring() {
    for (auto& s : slots_) {
      if (s.state == detail::ring_slot_state::published || s.state == detail::ring_slot_state::reading) {
        try {
          backend_.synchronize(s.event);
        } catch (...) { // NOLINT(bugprone-empty-catch): a destructor reports nothing
        }
      }
      backend_.destroy_event(s.event);
    }
  }

  // ---- producer side -------------------------------------------------------------------

  /// Takes the next slot in sequence order, blocking while the consumer still holds it (the
  /// time blocked is added to `stats().producer_blocked_ns`).
  /// @throws ring_closed once the ring is closed; std::logic_error when the producer itself
  ///         holds every slot (acquired and not published: waiting would never end).
  [[nodiscard]] write_slot acquire() {
    std::unique_lock lock(mutex_);
    if (!closed_ && head_slot().state != detail::ring_slot_state::free) {
      throw_if_producer_holds_next();
      const auto t0 = std::chrono::steady_clock::now();
      free_cv_.wait(lock, [&] { return closed_ || head_slot().state == detail::ring_slot_state::free; });
      producer_blocked_ns_.fetch_add(detail::elapsed_ns(t0), std::memory_order_relaxed);
    }
    if (closed_) {
      throw ring_closed("zenflow::d2h_ring::acquire: the ring is closed");
    }
    return take_head();
  }

  /// Like `acquire`, but returns nothing instead of blocking (or when closed).
  [[nodiscard]] std::optional<write_slot> try_acquire() {
    std::lock_guard lock(mutex_);
    if (closed_ || head_slot().state != detail::ring_slot_state::free) {
      return std::nullopt;
    }
    return take_head();
  }

  /// Publishes an acquired slot: records its event on `stream` (after the copy the caller
  /// enqueued there) and hands it to the consumer with `bytes` and `meta`. On the host backend
  /// the slot's bytes must already be written. Publishing into a closed ring still records
  /// the event (the copy may be in flight), the consumer just never reads it.
  /// @throws invalid_argument for `bytes > capacity` or a slot that is not held by the producer;
  ///         nothing is published then.
  void publish(const write_slot& slot, std::size_t bytes, const Meta& meta, cudaStream_t stream = nullptr) {
    std::unique_lock lock(mutex_);
    auto& s = slots_[index(slot.sequence)];
    if (s.state != detail::ring_slot_state::writing || s.sequence != slot.sequence) {
      detail::fail_argument("zenflow::d2h_ring::publish", "slot", "is not a slot held by the producer");
    }
    if (bytes > slot_bytes_) {
      detail::fail_argument("zenflow::d2h_ring::publish", "bytes", "exceeds the slot size");
    }
    backend_.record(s.event, stream);
    s.bytes = bytes;
    s.meta = meta;
    s.state = detail::ring_slot_state::published;
    ++transfers_;
    bytes_ += bytes;
    lock.unlock();
    ready_cv_.notify_all();
  }

  /// acquire + copy `bytes` from `src` (a device pointer on the CUDA backend) on `stream` +
  /// publish. Returns the slot's sequence number.
  /// @throws invalid_argument (nothing acquired) for `bytes > slot_bytes()` or a null `src`.
  std::uint64_t push(const void* src, std::size_t bytes, const Meta& meta, cudaStream_t stream = nullptr) {
    if (bytes > slot_bytes_) {
      detail::fail_argument("zenflow::d2h_ring::push", "bytes", "exceeds the slot size (split the payload)");
    }
    if (src == nullptr && bytes > 0) {
      detail::fail_argument("zenflow::d2h_ring::push", "src", "must not be null");
    }
    const write_slot w = acquire();
    try {
      backend_.copy(w.data, src, bytes, copy_direction::device_to_host, stream);
    } catch (...) {
      close(); // the acquired slot can never be published: stop the consumer instead of hanging it
      throw;
    }
    publish(w, bytes, meta, stream);
    return w.sequence;
  }

  // ---- consumer side -------------------------------------------------------------------

  /// Takes the next slot in sequence order once it is published and its copy has completed.
  /// Returns nothing when the ring is closed and no published slot is left in order.
  [[nodiscard]] std::optional<read_slot> next() {
    std::unique_lock lock(mutex_);
    if (!tail_ready()) {
      if (closed_) {
        return std::nullopt;
      }
      const auto t0 = std::chrono::steady_clock::now();
      ready_cv_.wait(lock, [&] { return closed_ || tail_ready(); });
      consumer_wait_ns_.fetch_add(detail::elapsed_ns(t0), std::memory_order_relaxed);
      if (!tail_ready()) {
        return std::nullopt;
      }
    }
    auto& s = slots_[index(tail_)];
    s.state = detail::ring_slot_state::reading;
    ++tail_;
    const read_slot r = make_read(s);
    lock.unlock();
    // The slot is ours now: the producer cannot touch it or its event until release().
    if (!backend_.query(s.event)) {
      const auto t0 = std::chrono::steady_clock::now();
      backend_.synchronize(s.event);
      consumer_wait_ns_.fetch_add(detail::elapsed_ns(t0), std::memory_order_relaxed);
    }
    return r;
  }

  /// Like `next`, but returns nothing instead of blocking (not published or copy not done).
  [[nodiscard]] std::optional<read_slot> try_next() {
    std::lock_guard lock(mutex_);
    if (!tail_ready()) {
      return std::nullopt;
    }
    auto& s = slots_[index(tail_)];
    if (!backend_.query(s.event)) {
      return std::nullopt;
    }
    s.state = detail::ring_slot_state::reading;
    ++tail_;
    return make_read(s);
  }

  /// Hands a slot taken by `next`/`try_next` back to the producer.
  /// @throws invalid_argument when `slot` is not held by the consumer.
  void release(const read_slot& slot) {
    std::unique_lock lock(mutex_);
    auto& s = slots_[index(slot.sequence)];
    if (s.state != detail::ring_slot_state::reading || s.sequence != slot.sequence) {
      detail::fail_argument("zenflow::d2h_ring::release", "slot", "is not a slot held by the consumer");
    }
    s.state = detail::ring_slot_state::free;
    --in_use_;
    ++released_;
    lock.unlock();
    free_cv_.notify_all();
  }

  /// next + `fn(read_slot)` + release (also when `fn` throws). Returns false at the end.
  template <class F>
  bool consume_next(F&& fn) {
    const auto r = next();
    if (!r) {
      return false;
    }
    try {
      fn(*r);
    } catch (...) {
      release(*r);
      throw;
    }
    release(*r);
    return true;
  }

  // ---- both sides ----------------------------------------------------------------------

  /// Ends the stream: blocked and later `acquire` calls throw `ring_closed`; the consumer
  /// drains what was published and then gets nothing. Either side may call it (a consumer
  /// that fails closes the ring so that the producer does not block forever).
  void close() noexcept {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    free_cv_.notify_all();
    ready_cv_.notify_all();
  }
  [[nodiscard]] bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  [[nodiscard]] ring_stats stats() const {
    std::lock_guard lock(mutex_);
    ring_stats st;
    st.transfers = transfers_;
    st.bytes = bytes_;
    st.released = released_;
    st.max_in_use = max_in_use_;
    st.producer_blocked_ns = producer_blocked_ns_.load(std::memory_order_relaxed);
    st.consumer_wait_ns = consumer_wait_ns_.load(std::memory_order_relaxed);
    return st;
  }

  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Host memory the ring holds (all slots).
  [[nodiscard]] std::size_t footprint_bytes() const noexcept { return storage_.bytes(); }
  /// True when the slots are page-locked.
  [[nodiscard]] bool pinned() const noexcept { return storage_.pinned(); }

private:
  struct slot_entry {
    detail::ring_slot_state state = detail::ring_slot_state::free;
    std::uint64_t sequence = std::numeric_limits<std::uint64_t>::max();
    std::size_t bytes = 0;
    Meta meta{};
    typename Backend::event_type event{};
  };

  static std::size_t checked_slot_bytes(std::size_t slots, std::size_t slot_bytes) {
    detail::check_ring_shape("zenflow::d2h_ring", slots, slot_bytes);
    return slot_bytes;
  }
  [[nodiscard]] std::size_t index(std::uint64_t seq) const noexcept {
    return static_cast<std::size_t>(seq % slots_.size());
  }
  slot_entry& head_slot() noexcept { return slots_[index(head_)]; }
  [[nodiscard]] bool tail_ready() const noexcept {
    const auto& s = slots_[index(tail_)];
    return s.state == detail::ring_slot_state::published && s.sequence == tail_;
  }
  void throw_if_producer_holds_next() const {
    if (head_slot_const().state == detail::ring_slot_state::writing) {
      throw std::logic_error("zenflow::d2h_ring::acquire: the producer holds every slot (publish one first)");
    }
  }
  [[nodiscard]] const slot_entry& head_slot_const() const noexcept { return slots_[index(head_)]; }
  write_slot take_head() {
    auto& s = head_slot();
    s.state = detail::ring_slot_state::writing;
    s.sequence = head_;
    const std::size_t i = index(head_);
    ++head_;
    ++in_use_;
    max_in_use_ = std::max<std::uint64_t>(max_in_use_, in_use_);
    return write_slot{storage_.data() + i * stride_, slot_bytes_, s.sequence};
  }
  read_slot make_read(const slot_entry& s) const {
    return read_slot{storage_.data() + index(s.sequence) * stride_, s.bytes, s.sequence, s.meta};
  }

  Backend backend_;
  std::size_t slot_bytes_;
  std::size_t stride_;
  pinned_buffer<std::byte> storage_;
  std::vector<slot_entry> slots_;

  mutable std::mutex mutex_;
  std::condition_variable free_cv_;
  std::condition_variable ready_cv_;
  std::uint64_t head_ = 0; // next sequence to acquire
  std::uint64_t tail_ = 0; // next sequence to consume
  bool closed_ = false;
  std::uint64_t in_use_ = 0;
  std::uint64_t max_in_use_ = 0;
  std::uint64_t transfers_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t released_ = 0;
  std::atomic<std::uint64_t> producer_blocked_ns_{0};
  std::atomic<std::uint64_t> consumer_wait_ns_{0};
};

ZF_NAMESPACE_END
