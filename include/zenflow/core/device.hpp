/// @file
/// Device queries that never throw, so that code can decide at run time whether a GPU is there.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// Number of usable CUDA devices; 0 without a driver or a device. Never throws.
[[nodiscard]] inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); // the failure is an answer, not an error to leave behind
    return 0;
  }
  return n;
}

/// True when at least one CUDA device can run kernels. Never throws.
[[nodiscard]] inline bool cuda_available() noexcept {
  return device_count() > 0;
}

/// What a benchmark or a log line wants to know about a device.
struct device_info {
  int ordinal = -1;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t l2_bytes = 0;
};

/// Properties of `ordinal`; `ok` is false (and `out` untouched) without such a device.
[[nodiscard]] inline bool query_device(int ordinal, device_info& out) noexcept {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  try {
    out.name = prop.name;
  } catch (...) {
    return false;
  }
  out.ordinal = ordinal;
  out.cc_major = prop.major;
  out.cc_minor = prop.minor;
  out.sm_count = prop.multiProcessorCount;
  out.global_memory_bytes = prop.totalGlobalMem;
  out.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  return true;
}

ZF_NAMESPACE_END
