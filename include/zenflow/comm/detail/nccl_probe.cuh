/// @file
/// nccl_probe: collective_watchdog's view of an NCCL communicator (CUDA events mark the
/// collectives; ncclCommGetAsyncError and ncclCommRevoke), used by nccl_communicator.
#pragma once

#include <mutex>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <zenflow/comm/detail/collective_watchdog.hpp>
#include <zenflow/core/config.hpp>

// ncclCommRevoke (and NCCL_REVOKE_DEFAULT) first appeared in NCCL 2.28.7, not 2.28.0: with 2.28.0
// to 2.28.6 the watchdog would not compile. NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z
// since 2.9, so 2.28.7 is 22807.
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 7)
#  define ZF_NCCL_HAS_REVOKE 1
#else
#  define ZF_NCCL_HAS_REVOKE 0
#endif

ZF_NAMESPACE_BEGIN

namespace detail::comm {

/// collective_watchdog's probe over CUDA events and an NCCL communicator. Its NCCL calls take
/// `nccl_lock`, which the communicator holds around each of its own.
struct nccl_probe {
  using token = cudaEvent_t;
  ncclComm_t comm = nullptr;
  int device = 0;
  std::mutex* nccl_lock = nullptr;

  void enter_thread() const {
    (void)cudaSetDevice(device);
    // A user's global-mode capture on another thread must not be invalidated by our queries.
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
  }
  watch_state poll(cudaEvent_t e) const {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) {
      return {watch_state::complete, {}};
    }
    if (q == cudaErrorNotReady) {
      return {};
    }
    return {watch_state::failed, std::string("cudaEventQuery: ") + cudaGetErrorString(q)};
  }
  std::string async_error() const {
    std::lock_guard lk(*nccl_lock);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) {
      return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(rc);
    }
    if (state == ncclSuccess || state == ncclInProgress) {
      return {};
    }
    std::string msg = ncclGetErrorString(state);
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') {
      msg += std::string(" (") + last + ")";
    }
    return msg;
  }
  void stop_transport() const {
#if ZF_NCCL_HAS_REVOKE
    std::lock_guard lk(*nccl_lock);
    (void)ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
#endif
  }
};

} // namespace detail::comm

ZF_NAMESPACE_END
