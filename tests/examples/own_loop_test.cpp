// examples/own_loop (ZenFlow from the primitives, no engine) against zenflow::engine on the host
// backend, the same model, gradients and settings (own_loop_cases.hpp): after every step the
// working weights of every parameter bit for bit, and whether the step selected, closed a window
// or was skipped; at the end every channel's master, moments and count. The run covers scheduled
// selections and one the mass trigger fires (the strong channels move), Zen-auto windows of
// several lengths, clipping, a NaN step (skipped, and a selection carried past it), with and
// without overlap, in fp32 and bf16.
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "own_loop_cases.hpp"

namespace {

using namespace zf_own_loop_test;

/// The loop's parameters in host memory (the host side: "device" memory is host memory).
template <class T>
struct host_mirror {
  std::vector<std::vector<T>> w = initial_weights<T>(), g;
  host_mirror() {
    for (const auto& x : w) {
      g.emplace_back(x.size());
    }
  }
  T* weights(std::size_t p) { return w[p].data(); }
  const T* grads(std::size_t p) { return g[p].data(); }
  void grads_written(std::size_t p, const std::vector<T>& src) { g[p] = src; }
  const std::vector<T>& weights_now(std::size_t p) { return w[p]; }
};

template <class T>
void run(bool overlap) {
  zenflow::worker_pool pool(2);
  host_mirror<T> mirror;
  run_against_engine<T>(overlap, own_loop::on_host{&pool}, mirror);
}

TEST(own_loop, equals_the_engine_bit_for_bit_fp32_overlap) {
  run<float>(true);
}
TEST(own_loop, equals_the_engine_bit_for_bit_fp32_no_overlap) {
  run<float>(false);
}
TEST(own_loop, equals_the_engine_bit_for_bit_bf16_overlap) {
  run<zenflow::bfloat16>(true);
}

} // namespace
