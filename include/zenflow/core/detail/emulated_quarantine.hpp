/// @file
/// The memory of an `emulated_device` (core/emulated_device.hpp): its live allocations and the
/// quarantine of freed ones, poisoned (every byte 0xFF: a float NaN) and kept aside, up to 64 MiB,
/// so that a copy that touches freed memory is caught (`use_after_free`) and a kernel reads NaN.
/// Apart from the device so that the public header holds its interface and the rules it
/// documents; the device counts and reports what this finds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/emulated_pinned.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

class emulated_allocations {
public:
  emulated_allocations() = default;
  emulated_allocations(const emulated_allocations&) = delete;
  emulated_allocations& operator=(const emulated_allocations&) = delete;
  /// Releases everything, freed or not (the device's end: its streams have stopped).
  ~emulated_allocations() {
    for (auto& [p, a] : freed_) {
      std::free(p);
    }
    for (auto& [p, a] : allocated_) {
      if (a.pinned) {
        emulated_pinned_ranges::instance().remove(p);
      }
      std::free(p);
    }
  }

  /// Records a new allocation of `bytes` at `p` (pinned host memory, or device memory).
  void add(void* p, std::size_t bytes, bool pinned) {
    const std::lock_guard lock(mutex_);
    allocated_[p] = allocation{bytes, pinned};
  }
  /// Throws naming `p` unless it is a live allocation of this device.
  void live_allocation(void* p, const char* call) {
    const std::lock_guard lock(mutex_);
    if (allocated_.count(p) == 0) {
      fail_argument(std::string("zenflow::emulated_device::") + call, "p",
                    freed_.count(p) != 0 ? "was already freed" : "was not allocated by this device");
    }
  }
  /// Poisons `p` and keeps it aside (the oldest beyond `quarantine_bytes` really freed).
  void retire(void* p) {
    const std::lock_guard lock(mutex_);
    auto it = allocated_.find(p);
    if (it == allocated_.end()) {
      return;
    }
    const allocation a = it->second;
    allocated_.erase(it);
    if (a.pinned) {
      emulated_pinned_ranges::instance().remove(p);
    }
    std::memset(p, 0xFF, a.bytes);
    freed_[p] = a;
    freed_order_.push_back(p);
    freed_bytes_ += a.bytes;
    while (freed_bytes_ > quarantine_bytes && !freed_order_.empty()) {
      void* oldest = freed_order_.front();
      freed_order_.pop_front();
      freed_bytes_ -= freed_[oldest].bytes;
      freed_.erase(oldest);
      std::free(oldest);
    }
  }
  /// The bytes of freed memory kept aside (resident: poisoned).
  [[nodiscard]] std::size_t quarantined_bytes() {
    const std::lock_guard lock(mutex_);
    return freed_bytes_;
  }
  /// The side of a copy of `bytes` from `src` to `dst` that touches freed memory ("destination",
  /// else "source"), or nullptr when neither does.
  const char* freed_side(const void* dst, const void* src, std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    return touches_freed(dst, bytes) ? "destination" : touches_freed(src, bytes) ? "source" : nullptr;
  }

private:
  struct allocation {
    std::size_t bytes = 0;
    bool pinned = false;
  };
  /// True when [p, p + bytes) overlaps freed memory kept aside (under mutex_).
  bool touches_freed(const void* p, std::size_t bytes) const {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    auto it = freed_.lower_bound(reinterpret_cast<void*>(at + bytes));
    if (it == freed_.begin()) {
      return false;
    }
    it = std::prev(it);
    return reinterpret_cast<std::uintptr_t>(it->first) + it->second.bytes > at;
  }

  static constexpr std::size_t quarantine_bytes = std::size_t{64} << 20; // freed memory kept aside
  std::mutex mutex_;
  std::map<void*, allocation> allocated_, freed_; // freed_: poisoned, kept aside
  std::deque<void*> freed_order_;
  std::size_t freed_bytes_ = 0;
};

} // namespace detail

ZF_NAMESPACE_END
