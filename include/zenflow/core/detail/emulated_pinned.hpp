/// @file
/// The host ranges an `emulated_device` treats as pinned (page-locked): its own pinned
/// allocations, ranges registered with it (`cudaHostRegister`'s twin), and `pinned_buffer`'s
/// fallback when there is no driver (memory that a GPU machine would have pinned). One table per
/// process, as page-locked memory is a property of the host memory, seen by every device. A copy
/// whose host side is not inside one of these ranges is pageable: the emulated device runs it
/// synchronously and counts it (core/emulated_device.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

class emulated_pinned_ranges {
public:
  /// The process's table (never destroyed: a static buffer may be freed after main returns).
  [[nodiscard]] static emulated_pinned_ranges& instance() {
    static auto* table = new emulated_pinned_ranges; // NOLINT: deliberately never freed
    return *table;
  }
  void add(const void* p, std::size_t bytes) {
    if (p == nullptr || bytes == 0) {
      return;
    }
    const std::lock_guard lock(mutex_);
    ranges_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  }
  void remove(const void* p) noexcept {
    const std::lock_guard lock(mutex_);
    ranges_.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  /// True when [p, p + bytes) lies inside one pinned range (an empty range always does).
  [[nodiscard]] bool contains(const void* p, std::size_t bytes) const {
    if (bytes == 0) {
      return true;
    }
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    const std::lock_guard lock(mutex_);
    auto it = ranges_.upper_bound(at);
    if (it == ranges_.begin()) {
      return false;
    }
    it = std::prev(it);
    return at - it->first <= it->second && bytes <= it->second - (at - it->first);
  }

private:
  emulated_pinned_ranges() = default;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_; // start -> bytes
};

} // namespace detail

ZF_NAMESPACE_END
