/// @file
/// The conversions behind reduce_scatter_shard (shard.hpp): a matrix's rows widened into packed
/// fp32 rows, and packed fp32 rows narrowed into a matrix, each element through `to_float` /
/// `from_float` (widening is exact; narrowing rounds to nearest even once), as the engine's
/// mean gradient widens and narrows its rows (engine/detail/plan/row_copies.hpp). Where they run
/// follows the communicator: now on the calling thread (host communicators), on the emulated
/// device's stream (emulated_device_communicator), or as a CUDA kernel on the stream
/// (local_device_communicator, nccl_communicator: `cuda_shard_rows`, defined in shard.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::comm {

/// out[c * channel_len + i] = m(c, i) widened to fp32, for every channel c and element i.
template <class T>
void host_widen_rows(channel_matrix<const T> m, float* out) noexcept {
  for (std::int64_t c = 0; c < m.channels; ++c) {
    float* row = out + c * m.channel_len;
    for (std::int64_t i = 0; i < m.channel_len; ++i) {
      row[i] = to_float(m(c, i));
    }
  }
}

/// m(c, i) = in[c * channel_len + i] rounded once to T, for every channel c and element i.
template <class T>
void host_narrow_rows(const float* in, channel_matrix<T> m) noexcept {
  for (std::int64_t c = 0; c < m.channels; ++c) {
    const float* row = in + c * m.channel_len;
    for (std::int64_t i = 0; i < m.channel_len; ++i) {
      m(c, i) = from_float<T>(row[i]);
    }
  }
}

/// The CUDA launches of the two conversions (`widen`, `narrow`, each stream-ordered, throwing
/// `cuda_error` when a launch fails). Defined in <zenflow/comm/shard.cuh>, which a translation
/// unit compiled by nvcc includes to use the shard helpers with a CUDA communicator.
template <class C>
struct cuda_shard_rows;

template <class C>
concept has_cuda_shard_rows = requires {
  cuda_shard_rows<C>::available;
};

template <class C, class T>
void widen_rows(C& comm, channel_matrix<const T> m, float* out, cudaStream_t stream) {
  if (m.channels == 0 || m.channel_len == 0) {
    return;
  }
  if constexpr (!C::is_device) {
    (void)comm;
    (void)stream;
    host_widen_rows(m, out);
  } else if constexpr (emulates_device_memory<C>) {
    const auto bytes = static_cast<std::size_t>(m.elements()) * (sizeof(T) + sizeof(float));
    comm.device().launch(
        stream, [m, out] { host_widen_rows(m, out); }, bytes, "zenflow::reduce_scatter_shard: widen");
  } else {
    static_assert(has_cuda_shard_rows<C>,
                  "zenflow: the shard helpers over a CUDA communicator need <zenflow/comm/shard.cuh> (nvcc)");
    (void)comm;
    cuda_shard_rows<C>::widen(m, out, stream);
  }
}

template <class C, class T>
void narrow_rows(C& comm, const float* in, channel_matrix<T> m, cudaStream_t stream) {
  if (m.channels == 0 || m.channel_len == 0) {
    return;
  }
  if constexpr (!C::is_device) {
    (void)comm;
    (void)stream;
    host_narrow_rows(in, m);
  } else if constexpr (emulates_device_memory<C>) {
    const auto bytes = static_cast<std::size_t>(m.elements()) * (sizeof(T) + sizeof(float));
    comm.device().launch(
        stream, [in, m] { host_narrow_rows(in, m); }, bytes, "zenflow::reduce_scatter_shard: narrow");
  } else {
    static_assert(has_cuda_shard_rows<C>,
                  "zenflow: the shard helpers over a CUDA communicator need <zenflow/comm/shard.cuh> (nvcc)");
    (void)comm;
    cuda_shard_rows<C>::narrow(in, m, stream);
  }
}

} // namespace detail::comm

ZF_NAMESPACE_END
