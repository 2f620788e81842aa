// The sharded engine (ZeRO-3) on the CUDA backend over NCCL (gpu label: skipped without a device
// unless ZENFLOW_REQUIRE_GPU=1). One rank, an NCCL world of one (as nccl_communicator_test.cu: a
// machine has one GPU here), driven as a trainer drives it: each matrix's shard registered with
// `param_options::shard` (at one rank the whole matrix), its gradient made by reduce_scatter_shard
// over a second NCCL communicator from the full gradient on the device, the new weights gathered
// back with all_gather_shard (shard.cuh's kernels). Beside it a one-rank host engine on the same
// gradients: after every step the gathered weights, the selections and the skipped steps, and at
// the end the state (masters, moments, counts), must equal its bit for bit, as the CUDA backend's
// other engine tests claim (engine_gpu_test.cu). Every device path of the sharded side runs
// (initialize's checks through device memory, the scores' all-gather, the fp64 rescans); the
// paths that need two ranks (the OR of the flags, the rescans' sum) are the emulated device
// communicator's, tested under mpiexec (sharded_mpi_test.cpp). A bad shard is refused by name.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nccl.h>

#include <zenflow/comm/nccl_communicator.cuh>
#include <zenflow/comm/shard.cuh>
#include <zenflow/core/memory.hpp>
#include <zenflow/engine/engine.cuh>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/sharded.hpp>

#include "engine_harness.hpp"
#include "sharded_cases.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_sharded_test;

template <class T>
void put(zenflow::device_buffer<T>& d, const std::vector<T>& h, cudaStream_t s) {
  ZF_CUDA_TRY(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s));
}

/// An NCCL communicator of one rank on device 0, destroyed with the object.
struct one_rank_nccl {
  ncclComm_t comm = nullptr;
  one_rank_nccl() {
    int dev = 0;
    EXPECT_EQ(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  }
  one_rank_nccl(const one_rank_nccl&) = delete;
  one_rank_nccl& operator=(const one_rank_nccl&) = delete;
  ~one_rank_nccl() {
    if (comm != nullptr) {
      (void)ncclCommDestroy(comm);
    }
  }
};

/// The sharded engine on CUDA over NCCL, and the one-rank host reference.
template <class T>
struct sharded_cuda_run {
  using engine_type = zenflow::engine<zenflow::cuda_backend, zenflow::sharded<zenflow::nccl_communicator>>;

  zenflow::config cfg;
  zenflow::stream s;
  one_rank_nccl engine_nccl, trainer_nccl; // the engine's collectives, the trainer's
  zenflow::nccl_communicator trainer{trainer_nccl.comm};
  zenflow::shard_layout layout;
  std::vector<std::vector<T>> ref_w, ref_g;
  std::vector<zenflow::device_buffer<T>> w, g;   // the model's full weights and gradients
  std::vector<zenflow::device_buffer<T>> ws, gs; // the matrices' shards (the engine's)
  zenflow::device_buffer<float> staging;
  std::vector<zenflow::param_id> ref_id, id;
  std::unique_ptr<zenflow::engine<zenflow::host_backend>> ref;
  std::unique_ptr<engine_type> e;

  explicit sharded_cuda_run(const zenflow::config& c) : cfg(c) {
    std::vector<zenflow::shard_matrix> list;
    for (const auto& sh : kModel) {
      if (sh.matrix) {
        list.push_back({sh.channels, sh.len, cfg.host_moments == zenflow::moment_precision::bf16 ? 8u : 12u});
      }
    }
    layout = zenflow::shard_channels(list, 1);
    staging = zenflow::device_buffer<float>(zenflow::shard_staging_floats(layout, 0), s);
    ref = std::make_unique<zenflow::engine<zenflow::host_backend>>(cfg);
    e = std::make_unique<engine_type>(cfg, zenflow::cuda_backend{},
                                      zenflow::nccl_communicator(engine_nccl.comm));
  }

  /// Registers the model on both engines; `shift`: the shards start that many channels late.
  void add(std::int64_t shift = 0) {
    ref_w.reserve(kModel.size()); // the reference keeps pointers into them
    ref_g.reserve(kModel.size());
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      ref_w.push_back(initial<T>(p));
      ref_g.emplace_back(ref_w.back().size());
      w.emplace_back(ref_w[p].size(), s); // stream-ordered on s, as everything here
      g.emplace_back(ref_w[p].size(), s);
      put(w[p], ref_w[p], s);
      const std::string name = "p" + std::to_string(p);
      ref_id.push_back(
          sh.matrix ? ref->add_matrix(ref_w[p].data(), ref_g[p].data(), sh.channels, sh.len, {.name = name})
                    : ref->add_vector(ref_w[p].data(), ref_g[p].data(), sh.len, {.name = name}));
      if (!sh.matrix) {
        ws.emplace_back();
        gs.emplace_back();
        id.push_back(e->add_vector(w[p].data(), g[p].data(), sh.len, {.name = name}));
        continue;
      }
      const std::int64_t f = layout.first(m, 0) + shift;
      const std::int64_t n = layout.count(m, 0) - shift;
      ws.emplace_back(static_cast<std::size_t>(n * sh.len), s);
      gs.emplace_back(static_cast<std::size_t>(n * sh.len), s);
      ZF_CUDA_TRY(cudaMemcpyAsync(ws[p].data(), w[p].data() + f * sh.len, ws[p].bytes(),
                                  cudaMemcpyDeviceToDevice, s));
      id.push_back(e->add_matrix(ws[p].data(), gs[p].data(), n, sh.len,
                                 {.name = name, .shard = zenflow::shard_range{f, sh.channels}}));
      ++m;
    }
    s.synchronize();
  }
  void initialize() {
    ref->initialize();
    e->initialize(s);
  }

  /// Step `t`: the gradients up, each matrix's shard of them reduce-scattered (one rank: the
  /// gradient, through the widen and narrow kernels), both engines step and flush, the shards
  /// gathered back into the full weights. Then the checks of the step.
  void step(std::int64_t t, bool nan = false, bool huge = false, bool drift = false) {
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      const std::vector<T> grad = grad_of<T>(0, 1, p, t, nan, huge, drift);
      std::copy(grad.begin(), grad.end(), ref_g[p].begin()); // in place: the reference reads ref_g[p].data()
      put(g[p], ref_g[p], s);
      if (sh.matrix) {
        zenflow::reduce_scatter_shard<T>(
            trainer, layout, m, zenflow::make_channel_matrix<const T>(g[p].data(), sh.channels, sh.len),
            zenflow::make_channel_matrix(gs[p].data(), layout.count(m, 0), sh.len),
            std::span<float>(staging.data(), staging.size()), s);
        ++m;
      }
    }
    (void)ref->step(1e-2f);
    (void)e->step(1e-2f, s);
    ref->flush();
    e->flush(s);
    gather();
    check("step " + std::to_string(t));
  }

  void gather() {
    std::size_t m = 0;
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto& sh = kModel[p];
      if (sh.matrix) {
        zenflow::all_gather_shard<T>(
            trainer, layout, m,
            zenflow::make_channel_matrix<const T>(ws[p].data(), layout.count(m, 0), sh.len),
            zenflow::make_channel_matrix(w[p].data(), sh.channels, sh.len), s);
        ++m;
      }
    }
  }

  /// The model's full weights of `p` (`shard`: the engine's, a matrix's shard).
  std::vector<T> weights(std::size_t p, bool shard = false) {
    const auto& d = shard && kModel[p].matrix ? ws[p] : w[p];
    std::vector<T> out(d.size());
    ZF_CUDA_TRY(cudaMemcpyAsync(out.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, s));
    s.synchronize();
    return out;
  }

  void check(const std::string& when) {
    SCOPED_TRACE(when + ", " + zf_test::seed_note(zf_test::base_seed()));
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const std::vector<T> got = weights(p);
      ASSERT_TRUE(same_bits(got.data(), ref_w[p].data(), got.size())) << "weights of p" << p;
      if (kModel[p].matrix) {
        ASSERT_EQ(e->selected(id[p]), ref->selected(ref_id[p])) << "selection of p" << p;
      }
    }
    ASSERT_EQ(e->stats().skipped_steps, ref->stats().skipped_steps);
  }

  void check_state() {
    SCOPED_TRACE("state");
    for (std::size_t p = 0; p < kModel.size(); ++p) {
      const auto a = e->state(id[p], s);
      const auto b = ref->state(ref_id[p]);
      ASSERT_EQ(a.master.size(), b.master.size());
      EXPECT_TRUE(same_bits(a.master.data(), b.master.data(), a.master.size())) << "master p" << p;
      ASSERT_EQ(a.m.size(), b.m.size());
      EXPECT_TRUE(same_bits(a.m.data(), b.m.data(), a.m.size())) << "m p" << p;
      EXPECT_TRUE(same_bits(a.v.data(), b.v.data(), a.v.size())) << "v p" << p;
      EXPECT_EQ(a.counts, b.counts) << "counts p" << p;
    }
  }
};

/// Returns the CUDA engine's stats at the end.
template <class T>
zenflow::stats run(const zenflow::config& cfg,
                   std::int64_t steps,
                   std::int64_t nan_step = -1,
                   bool huge = false,
                   bool drift = false) {
  sharded_cuda_run<T> r(cfg);
  r.add();
  r.initialize();
  EXPECT_EQ(r.e->comm().size(), 1);
  for (std::int64_t t = 0; t < steps; ++t) {
    r.step(t, t == nan_step, huge, drift);
    if (::testing::Test::HasFatalFailure()) {
      return r.e->stats();
    }
  }
  r.check_state();
  if (nan_step >= 0) {
    EXPECT_EQ(r.e->stats().skipped_steps, 1);
  }
  return r.e->stats();
}

class sharded_nccl_gpu : public zf_test::gpu_test {};

TEST_F(sharded_nccl_gpu, fp32_equals_the_host_engine_bit_for_bit) {
  run<float>(base(2), 14);
}

TEST_F(sharded_nccl_gpu, bf16_with_bf16_host_moments_equals_the_host_engine) {
  auto c = base(2);
  c.host_moments = zenflow::moment_precision::bf16;
  c.ring_slots = 0; // auto: sized from the shard's channels
  run<zenflow::bfloat16>(c, 12);
}

TEST_F(sharded_nccl_gpu, fp16_with_clipping_equals_the_host_engine) {
  auto c = base(2);
  c.gradient_clipping = 0.05f;
  c.loss_scale = 4.0f;
  run<zenflow::half>(c, 12);
}

TEST_F(sharded_nccl_gpu, l1_importance_without_overlap_equals_the_host_engine) {
  auto c = base(2);
  c.importance = zenflow::channel_norm::l1;
  c.overlap_step = false;
  c.full_warm_up_rounds = 0;
  run<float>(c, 12);
}

TEST_F(sharded_nccl_gpu, gpu_adamw_with_clipping_equals_the_host_engine) {
  auto c = base(2);
  c.mode = zenflow::optimizer_mode::gpu_adamw;
  c.gradient_clipping = 0.05f;
  run<float>(c, 6);
}

// Zen-auto's windows and select_on_mass_drop's re-selections decided on the shard's masses (one
// rank: its own), with the whole matrix's k.
TEST_F(sharded_nccl_gpu, bf16_zen_auto_windows_equal_the_host_engine) {
  const auto st = run<zenflow::bfloat16>(zen_auto_case(2), zen_auto_steps, zen_auto_nan_step, false, true);
  EXPECT_GE(st.windows_closed, zen_auto_min_windows); // the masses decided something
}

TEST_F(sharded_nccl_gpu, the_mass_trigger_fires_as_on_the_host) {
  const auto st = run<float>(mass_trigger_case(2), mass_trigger_steps, -1, false, true);
  EXPECT_GT(st.mass_drop_selections, 0);
}

TEST_F(sharded_nccl_gpu, a_nan_skips_the_step_as_on_the_host) {
  run<float>(base(2), 10, 5); // a selection step (select_interval 4, warm-up 2)
}

TEST_F(sharded_nccl_gpu, overflowing_scores_clip_and_rank_by_their_rescans_as_on_the_host) {
  auto c = base(2);
  c.gradient_clipping = 1.0f;
  run<float>(c, 10, -1, true);
}

// initialize()'s tiling check reads the ranks' shards through device memory: a shard that starts
// at channel 1 is refused naming options.shard, and nothing is set up (the engine's weights
// untouched).
TEST_F(sharded_nccl_gpu, a_shard_that_does_not_start_at_channel_0_is_refused_by_name) {
  sharded_cuda_run<float> r(base(2));
  r.add(1);
  std::vector<std::vector<float>> before;
  for (std::size_t p = 0; p < kModel.size(); ++p) {
    before.push_back(r.weights(p, true));
  }
  zf_engine_test::expect_invalid([&] { r.e->initialize(r.s); }, "options.shard' of parameter 0 ('p0')");
  zf_engine_test::expect_invalid([&] { r.e->initialize(r.s); }, "rank 0 must start at 0");
  EXPECT_FALSE(r.e->initialized());
  for (std::size_t p = 0; p < kModel.size(); ++p) {
    EXPECT_EQ(r.weights(p, true), before[p]) << "p" << p;
  }
}

} // namespace
