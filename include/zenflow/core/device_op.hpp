/// @file
/// One operation of a device stream's timeline: what the emulated device records while tracing
/// (emulated_op) and what the CUDA backend's event timing reads back (detail::timeline_op). One
/// type, so that the pipeline trace writes both alike and a new kind is added in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

struct device_op {
  enum class kind : std::uint8_t { kernel, copy_d2h, copy_h2d, copy_d2d, compute };
  kind what = kind::kernel;
  /// The stream's index: in creation order on the emulated device (0 = its null stream); in order
  /// of first use while tracing on CUDA.
  int stream = 0;
  std::size_t bytes = 0; ///< bytes copied, or the bytes the plan charged to a kernel
  /// Emulated device: since its creation; CUDA: on std::chrono::steady_clock (cuda_timeline::now_ns).
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string name; ///< the label given at enqueue, if any
};

/// The kind's name as the pipeline trace shows it.
[[nodiscard]] constexpr std::string_view to_string(device_op::kind k) noexcept {
  switch (k) {
  case device_op::kind::kernel:
    return "kernel";
  case device_op::kind::copy_d2h:
    return "copy D2H";
  case device_op::kind::copy_h2d:
    return "copy H2D";
  case device_op::kind::copy_d2d:
    return "copy D2D";
  case device_op::kind::compute:
    return "compute";
  }
  return "unknown";
}

ZF_NAMESPACE_END
