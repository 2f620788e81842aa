// Compiled to assembly by scripts/check-fp-contract (the ctest cpu.engine.host_fp_contract), never
// linked: the library's host code, every engine member instantiated over the host and emulated
// backends, one rank, data parallel and sharded, which instantiates the host primitives under
// them (AdamW and its window on every SIMD path, channel norms, top-k, the step scalars, L1 masses,
// bf16 and int8 moments, the owners' reductions) for every working and moment type.
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/sharded.hpp>
#include <zenflow/zenflow.hpp>

template class zenflow::engine<zenflow::host_backend>;
template class zenflow::engine<zenflow::emulated_backend>;
template class zenflow::engine<zenflow::host_backend, zenflow::local_communicator>;
template class zenflow::engine<zenflow::host_backend, zenflow::sharded<zenflow::local_communicator>>;
template class zenflow::engine<zenflow::emulated_backend,
                               zenflow::emulated_device_communicator<zenflow::local_communicator>>;
template class zenflow::engine<
    zenflow::emulated_backend,
    zenflow::sharded<zenflow::emulated_device_communicator<zenflow::local_communicator>>>;
