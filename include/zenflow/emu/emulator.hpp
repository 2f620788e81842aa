/// @file
/// The kernel emulator: CUDA kernels' own source, compiled by the host compiler, run on the CPU
/// with a block's threads as fibers, so that barriers, warp shuffles and votes, shared memory and
/// atomics behave as on a GPU, and detectors report what a GPU would punish (docs/emulated-device.md).
///
/// A kernel written against <zenflow/core/kernel.hpp> (ZF_SHARED for shared memory, ZF_LAUNCH for
/// its launch) compiles with nvcc for the GPU and with g++ or clang++ for this emulator, unchanged:
///
///     template <int = 0>
///     __global__ void block_sum(const float* x, float* out) {
///       ZF_SHARED(part, float[256]);
///       part[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
///       __syncthreads();
///       ...
///     }
///     ZF_LAUNCH(blocks, 256, 0, stream, block_sum)(d_x, d_out);
///     ZF_CUDA_TRY(zenflow::detail::launch_status());
///
/// Under the emulator "device" memory is host memory. A launch runs at once on the calling thread,
/// or, when an `emulated_device` is current on a thread outside its streams, on `stream` of that
/// device, in stream order. A launch whose detectors fired throws `zenflow::cuda_error`
/// (`cudaErrorLaunchFailure`) naming the first report (on a device's stream: its sticky error);
/// `reports()` keeps them all.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/emu/detail/block_primitives.hpp>
#include <zenflow/emu/detail/device_api.hpp>
#include <zenflow/emu/detail/launch.hpp>
#include <zenflow/emu/detail/runtime.hpp>

ZF_NAMESPACE_BEGIN
namespace emu {

/// The emulator's options now (process-wide).
[[nodiscard]] inline options get_options() {
  const std::lock_guard lock(detail::log().mutex);
  return detail::log().opts;
}
/// Sets the options of the launches started from now on.
inline void set_options(const options& o) {
  const std::lock_guard lock(detail::log().mutex);
  detail::log().opts = o;
}
/// Options for a scope (tests): the previous ones come back at its end.
class scoped_options {
public:
  explicit scoped_options(const options& o) : saved_(get_options()) { set_options(o); }
  scoped_options(const scoped_options&) = delete;
  scoped_options& operator=(const scoped_options&) = delete;
  ~scoped_options() { set_options(saved_); }

private:
  options saved_;
};

/// Every detector report since the last `clear_reports()`, in order.
[[nodiscard]] inline std::vector<std::string> reports() {
  const std::lock_guard lock(detail::log().mutex);
  return detail::log().reports;
}
inline void clear_reports() {
  const std::lock_guard lock(detail::log().mutex);
  detail::log().reports.clear();
}
/// The kernels launched so far in this process, by name (the last identifier of the kernel as
/// written at its launch site).
[[nodiscard]] inline std::set<std::string> launched_kernels() {
  const std::lock_guard lock(detail::log().mutex);
  return detail::log().kernels;
}

} // namespace emu
ZF_NAMESPACE_END
