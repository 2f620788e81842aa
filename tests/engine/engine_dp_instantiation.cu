// Compile-only (the ci preset, sm_80 and sm_90): the engine on the CUDA backend over its
// communicators, every member instantiated: the one-rank default (local_device_communicator) and,
// when zenflow::nccl is built, nccl_communicator; data parallel (owner_partition) and sharded
// (ZeRO-3). The data-parallel paths (detail/dp/) are the same plan code the host tests run; this
// proves their device side builds (the sharded engine's runs in sharded_nccl_gpu_test.cu).
#include <zenflow/engine/engine.cuh>
#include <zenflow/engine/sharded.hpp>
#if defined(ZENFLOW_WITH_NCCL)
#  include <zenflow/comm/nccl_communicator.cuh>
#endif

template class zenflow::engine<zenflow::cuda_backend>;
template class zenflow::engine<zenflow::cuda_backend, zenflow::sharded<zenflow::local_device_communicator>>;
#if defined(ZENFLOW_WITH_NCCL)
template class zenflow::engine<zenflow::cuda_backend, zenflow::nccl_communicator>;
template class zenflow::engine<zenflow::cuda_backend, zenflow::sharded<zenflow::nccl_communicator>>;
#endif
