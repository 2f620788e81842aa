/// @file
/// The engine's host backend: "device" memory is host memory and every operation runs on the
/// calling thread when it is enqueued (streams are ignored, events are empty). The engine's
/// device plan runs on it unchanged, with the host twins of the primitives, so that the whole
/// algorithm is tested without a GPU. For the engine's real concurrency on a CPU (streams as
/// threads, copies that land later) use `emulated_backend`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/plan/host_primitives.hpp>
#include <zenflow/transport/copy_backend.hpp>

ZF_NAMESPACE_BEGIN

/// Host backend of `zenflow::engine`: parameters are host pointers; see the file comment.
class host_backend : public detail::host_memory {
public:
  static constexpr bool is_device = false;
  using copy_backend_type = host_copy_backend;

  [[nodiscard]] copy_backend_type copier() const noexcept { return {}; }

  void copy_d2h(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void copy_h2d(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t) const noexcept {
    move(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes, cudaStream_t) const noexcept {
    if (bytes > 0) {
      std::memset(dst, 0, bytes);
    }
  }
  void synchronize(cudaStream_t) const noexcept {}
  void synchronize_all() const noexcept {}
  [[nodiscard]] int current_device() const noexcept { return 0; }
  void bind_device(int) const noexcept {}
  void enter_engine_thread(int) const noexcept {}

  /// Host work in stream order (`f()`): here now, on the calling thread.
  template <class F>
  void host_task(cudaStream_t, const char* /*name*/, F&& f) const {
    std::forward<F>(f)();
  }

  /// An operation of the plan, `op(primitives, exec)`: here the host twins, on the calling thread,
  /// now. `bytes` (what it moves, for a timing model) is unused.
  template <class Op>
  void run(cudaStream_t, std::size_t /*bytes*/, const char* name, Op&& op) const {
    detail::check(std::forward<Op>(op)(detail::host_primitives{}, static_cast<worker_pool*>(nullptr)), name);
  }
  /// A host-side query of an operation (temporary storage sizes), answered now.
  template <class Op>
  [[nodiscard]] cudaError_t query(Op&& op) const {
    return std::forward<Op>(op)(detail::host_primitives{}, static_cast<worker_pool*>(nullptr));
  }

private:
  static void move(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes > 0) {
      std::memmove(dst, src, bytes);
    }
  }
};

static_assert(engine_backend<host_backend>);

ZF_NAMESPACE_END
