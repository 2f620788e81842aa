// The shard helpers over a CUDA communicator (shard.cuh; gpu label: skipped without a device
// unless ZENFLOW_REQUIRE_GPU=1), on one rank (local_device_communicator): the kernels' widen and
// narrow write the bits the host loops write (the same case over local_communicator is the
// reference), in fp32, bf16 and fp16 and both channel layouts; the gather and the prefetcher
// (side stream, events) return every layer; each also under CUDA graph capture. Several ranks
// over NCCL have not run here (one GPU): the multi-rank semantics are the MPI tests'.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/comm/shard.cuh>
#include <zenflow/core/memory.hpp>

#include "shard_test_support.hpp"
#include "support/gpu.hpp"

namespace {

using zf_shard_test::channel_layout;
using zf_shard_test::padded_matrix;

class shard_device : public zf_test::gpu_test {
protected:
  void SetUp() override {
    zf_test::gpu_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    ZF_CUDA_TRY(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      (void)cudaStreamDestroy(stream_);
    }
  }
  cudaStream_t stream_ = nullptr;
};

// The same matrix on the device: its storage uploaded, the view's data pointing there.
template <class T>
struct on_device {
  zenflow::device_buffer<T> buf;
  zenflow::channel_matrix<T> view;
  on_device(const padded_matrix<T>& h, cudaStream_t s) : buf(zf_test::upload(h.storage, s)), view(h.view) {
    view.data = buf.data();
  }
  [[nodiscard]] zenflow::channel_matrix<const T> cview() const {
    return {view.data, view.channels, view.channel_len, view.ld, view.layout};
  }
};

template <class T>
void reduce_scatter_matches_the_host(cudaStream_t s, int test) {
  const auto list = zf_shard_test::sample_list();
  const auto layout = zenflow::shard_channels(list, 1);
  zenflow::local_device_communicator dc;
  zenflow::local_communicator hc;
  zenflow::device_buffer<float> staging(zenflow::shard_staging_floats(layout, 0), s);
  std::vector<float> host_staging(staging.size());
  for (const bool graph : {false, true}) {
    for (std::size_t m = 0; m < list.size(); ++m) {
      SCOPED_TRACE(std::string(graph ? "graph" : "direct") + ", matrix " + std::to_string(m));
      const auto& sm = list[m];
      const auto gl = m % 2 == 1 ? channel_layout::strided : channel_layout::contiguous;
      const auto sl = m % 3 == 2 ? channel_layout::strided : channel_layout::contiguous;
      const auto grads = zf_shard_test::grads_of<T>(0, test, m, sm, gl);
      padded_matrix<T> want(sm.channels, sm.channel_len, sl, 7.25f);
      zenflow::reduce_scatter_shard<T>(hc, layout, m, grads.cview(), want.view, host_staging, nullptr);
      const on_device<T> dg(grads, s);
      on_device<T> out(padded_matrix<T>(sm.channels, sm.channel_len, sl, 7.25f), s);
      zf_test::run(s, graph, [&](cudaStream_t st) {
        zenflow::reduce_scatter_shard<T>(dc, layout, m, dg.cview(), out.view,
                                         std::span<float>(staging.data(), staging.size()), st);
      });
      const auto got = zf_test::download(out.buf, s);
      ASSERT_EQ(got.size(), want.storage.size());
      ASSERT_EQ(std::memcmp(got.data(), want.storage.data(), got.size() * sizeof(T)), 0);
    }
  }
}

TEST_F(shard_device, reduce_scatter_writes_the_host_loops_bits) {
  reduce_scatter_matches_the_host<float>(stream_, 21);
  reduce_scatter_matches_the_host<zenflow::bfloat16>(stream_, 22);
  reduce_scatter_matches_the_host<zenflow::half>(stream_, 23);
}

TEST_F(shard_device, gather_and_prefetcher_return_every_layer_direct_and_in_a_graph) {
  const auto list = zf_shard_test::sample_list();
  const auto layout = zenflow::shard_channels(list, 1);
  zenflow::local_device_communicator dc;
  std::vector<std::vector<float>> host(list.size());
  std::vector<zenflow::device_buffer<float>> shards;
  std::vector<zenflow::shard_gather_layer> layers;
  for (std::size_t m = 0; m < list.size(); ++m) {
    host[m] = zf_shard_test::values<float>(zf_shard_test::seed_of(0, 24, m), layout.shard_elements(m, 0));
    shards.push_back(zf_test::upload(host[m], stream_));
    layers.push_back({m, shards.back().data(), zenflow::dtype::f32});
  }
  zenflow::shard_prefetcher<zenflow::local_device_communicator> pre(dc, layout, layers);
  std::vector<zenflow::device_buffer<float>> seen;
  for (std::size_t m = 0; m < list.size(); ++m) {
    seen.emplace_back(host[m].size(), stream_);
  }
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "direct");
    pre.invalidate();
    zf_test::run(stream_, graph, [&](cudaStream_t st) {
      for (std::size_t m = 0; m < list.size(); ++m) {
        const void* p = pre.acquire(m, st);
        if (!host[m].empty()) {
          ZF_CUDA_TRY(cudaMemcpyAsync(seen[m].data(), p, host[m].size() * 4, cudaMemcpyDeviceToDevice, st));
        }
      }
    });
    for (std::size_t m = 0; m < list.size(); ++m) {
      EXPECT_EQ(zf_test::download(seen[m], stream_), host[m]) << "layer " << m;
    }
    zenflow::device_buffer<float> full(host[4].size(), stream_);
    zf_test::run(stream_, graph, [&](cudaStream_t st) {
      zenflow::all_gather_shard<float>(
          dc, layout, 4,
          zenflow::make_channel_matrix<const float>(shards[4].data(), list[4].channels, list[4].channel_len),
          zenflow::make_channel_matrix(full.data(), list[4].channels, list[4].channel_len), st);
    });
    EXPECT_EQ(zf_test::download(full, stream_), host[4]);
  }
}

} // namespace
