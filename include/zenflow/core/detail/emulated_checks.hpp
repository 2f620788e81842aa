/// @file
/// What an `emulated_device` (core/emulated_device.hpp) keeps of the CUDA rules it enforces: the
/// count of each broken rule (its `stats()`), one line per reported one (its `reports()`), the
/// check that no call into a device comes from a host task, and the device's sticky error (the
/// first operation that threw, rethrown by every synchronising call). Apart from the device so that
/// the public header holds its interface and the rules it documents.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/emulated_streams.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// The counts (each since the device was created: `emulated_device_stats` has their meaning) and
/// the reports of the rules.
class emulated_rule_log {
public:
  std::atomic<std::uint64_t> pageable_copies{0}, allocations{0}, frees{0}, device_syncs{0}, legacy_syncs{0},
      use_after_free{0}, busy_destroys{0}, host_task_calls{0};

  /// Keeps one line describing a broken rule.
  void report(std::string line) noexcept {
    try {
      const std::lock_guard lock(mutex_);
      reports_.push_back(std::move(line));
    } catch (...) { // NOLINT(bugprone-empty-catch): a report lost to bad_alloc is still counted
    }
  }
  /// The lines reported so far, in the order they happened.
  [[nodiscard]] std::vector<std::string> reports() const {
    const std::lock_guard lock(mutex_);
    return reports_;
  }
  /// Throws (and reports) when called from a stream's thread: CUDA calls are illegal there.
  void no_host_task(const char* call) {
    if (!on_emulated_stream_thread()) {
      return;
    }
    host_task_calls.fetch_add(1, std::memory_order_relaxed);
    const std::string what = std::string("zenflow::emulated_device::") + call +
                             ": called from a host task (a stream's thread); a CUDA call inside a host "
                             "callback (cudaLaunchHostFunc) is not allowed";
    report(what);
    throw cuda_error(cudaErrorNotPermitted, what);
  }

private:
  mutable std::mutex mutex_;
  std::vector<std::string> reports_;
};

/// The device's sticky error (like a CUDA context error): the first operation that threw.
class emulated_sticky_error {
public:
  bool is_set() {
    std::lock_guard lock(mutex_);
    return error_ != nullptr;
  }
  /// Keeps `e` unless an error is already kept.
  void set(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    if (!error_) {
      error_ = std::move(e);
    }
  }
  void rethrow() {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex_);
      e = error_;
    }
    if (e) {
      std::rethrow_exception(e);
    }
  }

private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

} // namespace detail

ZF_NAMESPACE_END
