// Compile-only: the shard helpers over the CUDA communicators, every member instantiated for each
// working type: local_device_communicator and, when zenflow::nccl is built, nccl_communicator
// (whose multi-rank path cannot run here: one GPU at most).
#include <cstddef>
#include <span>

#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/comm/shard.cuh>
#include <zenflow/comm/shard_prefetcher.hpp>
#if defined(ZENFLOW_WITH_NCCL)
#  include <zenflow/comm/nccl_communicator.cuh>
#endif

namespace zf_shard_instantiation {

template <class T, class C>
void calls(C& c,
           const zenflow::shard_layout& l,
           zenflow::channel_matrix<const T> g,
           zenflow::channel_matrix<T> s,
           std::span<float> staging,
           cudaStream_t st) {
  zenflow::reduce_scatter_shard<T>(c, l, 0, g, s, staging, st);
  zenflow::all_gather_shard<T>(c, l, 0, g, s, st);
}

template <class C>
void all_types(C& c, const zenflow::shard_layout& l, std::span<float> staging, cudaStream_t st) {
  calls<float>(c, l, {}, {}, staging, st);
  calls<zenflow::half>(c, l, {}, {}, staging, st);
  calls<zenflow::bfloat16>(c, l, {}, {}, staging, st);
}

template void
all_types(zenflow::local_device_communicator&, const zenflow::shard_layout&, std::span<float>, cudaStream_t);
#if defined(ZENFLOW_WITH_NCCL)
template void
all_types(zenflow::nccl_communicator&, const zenflow::shard_layout&, std::span<float>, cudaStream_t);
#endif

} // namespace zf_shard_instantiation

template class zenflow::shard_prefetcher<zenflow::local_device_communicator>;
#if defined(ZENFLOW_WITH_NCCL)
template class zenflow::shard_prefetcher<zenflow::nccl_communicator>;
#endif
