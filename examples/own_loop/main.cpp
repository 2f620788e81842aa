// The own loop (own_loop.hpp: ZenFlow from the primitives, no engine) on a least-squares problem
// (problem.hpp): `own_loop` trains on the host; `own_loop --backend cuda` (a CUDA build) runs the
// device half on the GPU, the problem's gradients computed on the host and copied up each step.
//
//   own_loop [--backend host|cuda] [--steps N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zenflow/core/worker_pool.hpp>

#include "own_loop/own_loop.hpp"
#include "own_loop/problem.hpp"

#if defined(OWN_LOOP_HAS_CUDA)
int train_cuda(int steps); // main_cuda.cu
#endif

namespace {

int train_host(int steps) {
  own_loop::problem pb;
  std::vector<float> w(static_cast<std::size_t>(pb.inputs * pb.outputs), 0.0f),
      b(static_cast<std::size_t>(pb.outputs), 0.0f);
  std::vector<float> g(w.size()), gb(b.size());
  zenflow::worker_pool pool(2);
  own_loop::zenflow_loop<float, own_loop::on_host> zf(own_loop::demo_settings(), own_loop::on_host{&pool},
                                                      &pool);
  zf.add_matrix(w.data(), g.data(), pb.inputs, pb.outputs);
  zf.add_vector(b.data(), gb.data(), pb.outputs);
  zf.start();
  int selections = 0, windows = 0;
  std::vector<float> losses;
  for (int t = 0; t < steps; ++t) {
    const float loss = pb.gradients(w, b, g, gb);
    losses.push_back(loss);
    const own_loop::step_result r = zf.step(1e-2f);
    selections += r.selection ? 1 : 0;
    windows += r.window_closed ? 1 : 0;
    if (t % 25 == 0 || t + 1 == steps) {
      std::printf("step %4d  loss %10.4f  selections %d  windows %d\n", t, static_cast<double>(loss),
                  selections, windows);
    }
  }
  zf.finish();
  double first = 0.0, last = 0.0;
  const bool fell = own_loop::loss_fell(losses, 10, first, last);
  std::printf("%s: mean loss of the first 10 steps %.4f, of the last 10 %.4f\n",
              fell ? "loss fell" : "loss did not fall to half", first, last);
  return fell ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  std::string backend = "host";
  int steps = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      backend = argv[++i];
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: own_loop [--backend host|cuda] [--steps N]\n");
      return 2;
    }
  }
  if (backend == "host") {
    return train_host(steps);
  }
#if defined(OWN_LOOP_HAS_CUDA)
  if (backend == "cuda") {
    return train_cuda(steps);
  }
#endif
  std::fprintf(stderr, "own_loop: backend '%s' is not built here\n", backend.c_str());
  return 2;
}
