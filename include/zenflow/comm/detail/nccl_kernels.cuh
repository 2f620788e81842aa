/// @file
/// The two element-wise kernels nccl_communicator needs beyond NCCL's own operations: the mean's
/// division after the sum, and the bitwise or over gathered flags (NCCL has no or).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/kernel.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

// Templates, so that a header included by several translation units defines no strong symbol.

/// x[i] = x[i] / ranks, correctly rounded (explicit, whatever the fast-math flags).
template <class T = float>
ZF_KERNEL void divide_kernel(T* x, std::size_t n, T ranks) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    x[i] = __fdiv_rn(x[i], ranks);
  }
}

/// out[i] = or over r of gathered[r * n + i].
template <class U = std::uint32_t>
ZF_KERNEL void or_kernel(const U* gathered, std::size_t n, int ranks, U* out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    U acc = 0;
    for (int r = 0; r < ranks; ++r) {
      acc |= gathered[static_cast<std::size_t>(r) * n + i];
    }
    out[i] = acc;
  }
}

inline unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

} // namespace detail::comm

ZF_NAMESPACE_END
