// run_cuda: the trainer on the CUDA backend (cuBLAS model, zenflow::engine<cuda_backend>).
#include <zenflow/core/memory.hpp>
#include <zenflow/engine/engine.cuh>

#include "cuda_charlm.cuh"
#include "run.hpp"
#include "trainer.hpp"

namespace charlm {

run_result run_cuda(options o) {
  dataset data = make_dataset(o);
  zenflow::stream st;
  cuda_charlm model(o.shape, o.seed, st);
  zenflow::engine<zenflow::cuda_backend> opt(o.zf);
  register_params(model, opt);
  opt.initialize(st);
  return train(model, opt, data, o, st.get());
}

} // namespace charlm
