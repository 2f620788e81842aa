// Compile-only (the ci preset, sm_80 and sm_90): the engine on the CUDA backend over its
// communicators, every member instantiated: the one-rank default (local_device_communicator) and,
// when zenflow::nccl is built, nccl_communicator. The data-parallel path (detail/data_parallel.hpp)
// is the same plan code the host tests run; this proves its device side builds.
#include <zenflow/engine/engine.cuh>
#if defined(ZENFLOW_WITH_NCCL)
#  include <zenflow/comm/nccl_communicator.cuh>
#endif

template class zenflow::engine<zenflow::cuda_backend>;
#if defined(ZENFLOW_WITH_NCCL)
template class zenflow::engine<zenflow::cuda_backend, zenflow::nccl_communicator>;
#endif
