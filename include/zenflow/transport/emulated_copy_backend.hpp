/// @file
/// `emulated_copy_backend`: the transport classes (rings, copy streams) over an `emulated_device`,
/// so that their event-guarded protocol runs with copies that complete later, on the device's
/// stream threads, with the device's timing model. Host pointers stand for device pointers.
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// A copy backend over an `emulated_device`, which must outlive every object using the backend.
/// Copyable (copies use the same device).
class emulated_copy_backend {
public:
  static constexpr bool is_device = true; // copies complete asynchronously, like cuda_copy_backend
  using event_type = emulated_device::event;

  explicit emulated_copy_backend(emulated_device& device) noexcept : device_(&device) {}

  void create_event(event_type& e) const { e = device_->create_event(); }
  void destroy_event(event_type& e) const noexcept { device_->destroy_event(e); }
  void copy(void* dst, const void* src, std::size_t bytes, copy_direction dir, cudaStream_t s) const {
    device_->copy(dst, src, bytes, dir, s);
  }
  void record(event_type& e, cudaStream_t s) const { device_->record(e, s); }
  void synchronize(event_type& e) const { device_->synchronize(e); }
  [[nodiscard]] bool query(event_type& e) const { return device_->query(e); }
  void stream_wait(cudaStream_t s, event_type& e) const { device_->stream_wait(s, e); }
  [[nodiscard]] cudaStream_t create_stream(int /*priority: one executor thread per stream*/) const {
    return device_->create_stream();
  }
  void destroy_stream(cudaStream_t s) const noexcept { device_->destroy_stream(s); }
  void synchronize_stream(cudaStream_t s) const { device_->synchronize_stream(s); }

  [[nodiscard]] emulated_device& device() const noexcept { return *device_; }

private:
  emulated_device* device_;
};

static_assert(copy_backend<emulated_copy_backend>);

ZF_NAMESPACE_END
