/// @file
/// The shard helpers (shard.hpp, shard_prefetcher.hpp) over a CUDA communicator
/// (local_device_communicator, nccl_communicator): include this header, compiled by nvcc,
/// instead of shard.hpp. It adds the two conversions of reduce_scatter_shard as kernels, each
/// element through `to_float` / `from_float` as the host loops (detail/shard_rows.hpp) and the
/// engine's row copies do, so that every backend writes the same bits. Stream-ordered launches,
/// no allocation, no synchronisation.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <zenflow/comm/shard.hpp>
#include <zenflow/comm/shard_prefetcher.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/kernel.hpp>
#include <zenflow/core/views.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

template <class T>
ZF_KERNEL void shard_widen_kernel(channel_matrix<const T> m, float* out) {
  const std::int64_t n = m.elements();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    out[e] = to_float(m(e / m.channel_len, e % m.channel_len));
  }
}

template <class T>
ZF_KERNEL void shard_narrow_kernel(const float* in, channel_matrix<T> m) {
  const std::int64_t n = m.elements();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    m(e / m.channel_len, e % m.channel_len) = from_float<T>(in[e]);
  }
}

/// Blocks of 256 threads, one element per thread up to a cap (the loops stride past it).
inline unsigned shard_rows_grid(std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

template <class C>
struct cuda_shard_rows {
  static constexpr bool available = true;

  template <class T>
  static void widen(channel_matrix<const T> m, float* out, cudaStream_t stream) {
    ZF_LAUNCH(shard_rows_grid(m.elements()), 256, 0, stream, shard_widen_kernel<T>)(m, out);
    check(launch_status(), "zenflow::reduce_scatter_shard: widen kernel");
  }
  template <class T>
  static void narrow(const float* in, channel_matrix<T> m, cudaStream_t stream) {
    ZF_LAUNCH(shard_rows_grid(m.elements()), 256, 0, stream, shard_narrow_kernel<T>)(in, m);
    check(launch_status(), "zenflow::reduce_scatter_shard: narrow kernel");
  }
};

} // namespace detail::comm

ZF_NAMESPACE_END
