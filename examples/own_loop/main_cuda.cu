// `own_loop --backend cuda`: the own loop's device half on the GPU (on_cuda.cuh). The problem
// stays on the host: each step its gradients go up and the weights come back down (a real model
// would compute them on the device). Compiled by the CUDA build; not run anywhere yet.
#include <cstdio>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/worker_pool.hpp>

#include "own_loop/on_cuda.cuh"
#include "own_loop/problem.hpp"

int train_cuda(int steps) {
  own_loop::problem pb;
  const std::size_t n = static_cast<std::size_t>(pb.inputs * pb.outputs),
                    nb = static_cast<std::size_t>(pb.outputs);
  std::vector<float> w(n, 0.0f), b(nb, 0.0f), g(n), gb(nb);
  zenflow::stream s;
  zenflow::device_buffer<float> dw(n, s.get()), db(nb, s.get()), dg(n, s.get()), dgb(nb, s.get());
  ZF_CUDA_TRY(cudaMemcpyAsync(dw.data(), w.data(), n * 4, cudaMemcpyHostToDevice, s.get()));
  ZF_CUDA_TRY(cudaMemcpyAsync(db.data(), b.data(), nb * 4, cudaMemcpyHostToDevice, s.get()));
  zenflow::worker_pool pool(2);
  own_loop::zenflow_loop<float, own_loop::on_cuda> zf(own_loop::demo_settings(), own_loop::on_cuda{s.get()},
                                                      &pool);
  zf.add_matrix(dw.data(), dg.data(), pb.inputs, pb.outputs);
  zf.add_vector(db.data(), dgb.data(), pb.outputs);
  zf.start();
  std::vector<float> losses;
  for (int t = 0; t < steps; ++t) {
    ZF_CUDA_TRY(cudaMemcpyAsync(w.data(), dw.data(), n * 4, cudaMemcpyDeviceToHost, s.get()));
    ZF_CUDA_TRY(cudaMemcpyAsync(b.data(), db.data(), nb * 4, cudaMemcpyDeviceToHost, s.get()));
    ZF_CUDA_TRY(cudaStreamSynchronize(s.get()));
    const float loss = pb.gradients(w, b, g, gb);
    losses.push_back(loss);
    ZF_CUDA_TRY(cudaMemcpyAsync(dg.data(), g.data(), n * 4, cudaMemcpyHostToDevice, s.get()));
    ZF_CUDA_TRY(cudaMemcpyAsync(dgb.data(), gb.data(), nb * 4, cudaMemcpyHostToDevice, s.get()));
    (void)zf.step(1e-2f);
    if (t % 25 == 0 || t + 1 == steps) {
      std::printf("step %4d  loss %10.4f (cuda)\n", t, static_cast<double>(loss));
    }
  }
  zf.finish();
  ZF_CUDA_TRY(cudaStreamSynchronize(s.get()));
  double first = 0.0, last = 0.0;
  const bool fell = own_loop::loss_fell(losses, 10, first, last);
  std::printf("%s: mean loss of the first 10 steps %.4f, of the last 10 %.4f (cuda)\n",
              fell ? "loss fell" : "loss did not fall to half", first, last);
  return fell ? 0 : 1;
}
