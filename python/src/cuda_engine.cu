// The CUDA backend of the Python module: its own TU, compiled by nvcc only when the module is
// built with CUDA (ZENFLOW_ENABLE_CUDA=ON).
#include <zenflow/engine/engine.cuh>

#include "engine_iface.hpp"

namespace zenflow_py {

std::unique_ptr<engine_iface> make_cuda_engine(const zenflow::config& cfg) {
  return std::make_unique<engine_impl<zenflow::engine<zenflow::cuda_backend>>>(cfg);
}

} // namespace zenflow_py
