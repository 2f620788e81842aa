// The CUDA model against the host model (fp32 on the same bf16 weights): loss and every
// gradient, as a plain launch and under CUDA graph capture.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/memory.hpp>

#include "charlm/corpus.hpp"
#include "charlm/cuda_charlm.cuh"
#include "charlm/host_charlm.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

class CharlmGpu : public zf_test::gpu_test {};

void compare_with_host(bool in_graph) {
  const std::uint64_t seed = zf_test::base_seed() + 3;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::string text = charlm::generate_corpus(20000, seed);
  const charlm::vocabulary v(text);
  charlm::model_shape s;
  s.vocab = v.size();
  s.context = 5;
  s.embed = 12;
  s.hidden = 96;
  s.layers = 3;
  charlm::dataset d(v.encode(text), s.context, seed);
  const charlm::batch b = d.next_train(77);

  charlm::host_charlm host(s, seed, nullptr);
  const float host_loss = host.train_step(b);

  zenflow::stream st;
  charlm::cuda_charlm dev(s, seed, st);
  dev.upload(b);
  if (in_graph) {
    zf_test::run_in_graph(st, [&](cudaStream_t) { dev.enqueue(true); });
  } else {
    dev.enqueue(true);
  }
  const float dev_loss = dev.read_loss();
  EXPECT_NEAR(dev_loss, host_loss, 2e-2 * host_loss);

  const auto& t = host.table();
  std::vector<zenflow::bfloat16> g(static_cast<std::size_t>(t.total));
  ZF_CUDA_TRY(cudaMemcpy(g.data(), dev.grads(0) - t[0].offset, g.size() * 2, cudaMemcpyDeviceToHost));
  for (std::int32_t p = 0; p < static_cast<std::int32_t>(t.params.size()); ++p) {
    const auto& info = t[p];
    double diff = 0, norm = 0;
    for (std::int64_t k = 0; k < info.size(); ++k) {
      const double ref = zenflow::to_float(host.grads(p)[k]);
      const double got = zenflow::to_float(g[static_cast<std::size_t>(info.offset + k)]);
      diff += (got - ref) * (got - ref);
      norm += ref * ref;
    }
    ASSERT_GT(norm, 0.0) << info.name;
    EXPECT_LT(std::sqrt(diff / norm), 5e-2) << info.name; // bf16 activations on the device
  }
}

TEST_F(CharlmGpu, MatchesHostModel) {
  compare_with_host(false);
}
TEST_F(CharlmGpu, MatchesHostModelUnderGraphCapture) {
  compare_with_host(true);
}

} // namespace
