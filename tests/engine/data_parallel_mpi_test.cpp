// The engine data parallel under mpiexec (1, 2 and 3 ranks; cpu.engine.dp_mpi_np*): the shared
// case bodies of the engine tests (reference_cases.hpp, engine_cases.hpp: the float64 reference's
// cases, the bit-exact baselines, overflowing scores) run through the data-parallel Driver
// (data_parallel_driver.hpp) on the host backend over mpi_communicator, the emulated backend over
// it, and the emulated backend over a device communicator (the path NCCL takes). Each rank is fed
// its own gradient, the reference the mean of them, and every rank must equal, bit for bit, a
// one-rank engine fed that mean (weights after every step, the same on every rank, selections,
// state, counters, skipped steps: one rank's NaN skips the step everywhere), with the bytes each
// rank puts on the wire, copies down and holds. One rank runs the engine_dp_cases suites only.
// What data parallel refuses, and a training loop as a user writes it, are below; the checks of
// initialize(), checkpoints and timeouts: data_parallel_mpi_checks_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mpi.h>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "data_parallel_driver.hpp"
#include "data_parallel_support.hpp"
#include "engine_cases.hpp"
#include "engine_harness.hpp"
#include "reference_cases.hpp"
#include "support/mpi_gtest_main.hpp"
#include "support/random.hpp"

namespace {

using namespace zf_dp_test;
using zf_engine_test::small_config;

// The reference case `name` on `Driver`. "snr" needs every block's accumulator inside the window
// job: with more than one rank initialize() refuses it on every rank, naming the setting, and
// nothing is set up (one rank runs it as any case).
template <template <class> class Driver>
void run_case(const std::string& name) {
  const auto cases = zf_engine_test::reference_cases();
  const auto it = std::find_if(cases.begin(), cases.end(),
                               [&](const zf_engine_test::reference_case& c) { return c.name == name; });
  ASSERT_NE(it, cases.end()) << "no reference case " << name;
  auto cfg = small_config();
  it->configure(cfg);
  if (world_size() > 1 && cfg.host_lr_scale == zenflow::host_lr_scaling::snr) {
    SCOPED_TRACE("reference case " + name + ": refused");
    zf_engine_test::model<float> m(it->shapes, zf_test::base_seed());
    Driver<float> d(m);
    const auto e = d.make_engine(cfg);
    for (std::size_t p = 0; p < m.shapes.size(); ++p) {
      (void)d.add(*e, p);
    }
    zf_engine_test::expect_invalid([&] { d.initialize(*e); }, "host_lr_scale");
    EXPECT_FALSE(e->initialized());
    return;
  }
  zf_engine_test::run_reference_case<Driver>(name);
}

class engine_dp_cases : public ::testing::TestWithParam<std::string> {};

TEST_P(engine_dp_cases, host_backend) {
  run_case<dp_host_driver>(GetParam());
}

TEST_P(engine_dp_cases, emulated_backend) {
  run_case<dp_emulated_driver>(GetParam());
}

TEST_P(engine_dp_cases, emulated_backend_device_communicator) {
  run_case<dp_device_comm_driver>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(reference,
                         engine_dp_cases,
                         ::testing::ValuesIn(zf_engine_test::reference_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The baselines (reference_cases.hpp), bit for bit, with every engine data parallel: zenflow with
// a selection every step is offload_sync, offload_sync is gpu_adamw, a warm-up longer than the run
// is gpu_adamw, top-k ratio 1 is dense AdamW.
template <template <class> class Driver>
void baselines() {
  zf_engine_test::run_baseline_cases<Driver>();
}

TEST(engine_dp_cases_baselines, host_backend) {
  baselines<dp_host_driver>();
}

TEST(engine_dp_cases_baselines, emulated_backend_device_communicator) {
  baselines<dp_device_comm_driver>();
}

// Finite gradients whose fp32 scores overflow (engine_cases.hpp): the step is applied, clipped by
// the true norm, whose fp64 rescans of the host-set rows come from their owners; and at selection
// steps such rows rank by their fp64 sums (issue 36), a device-set row against a row of the last
// rank's block among them. A wrong norm on any rank changes every weight.
template <template <class> class Driver>
void overflows() {
  std::uint64_t i = 0;
  for (const auto kind :
       {zf_engine_test::overflow_kind::one_element, zf_engine_test::overflow_kind::near_flt_max,
        zf_engine_test::overflow_kind::channel_aggregate, zf_engine_test::overflow_kind::tensor_aggregate}) {
    EXPECT_LT((zf_engine_test::overflow_against_reference<Driver, float>(small_config(), kind, 10, 5,
                                                                         zf_test::base_seed() + 500 + i++)),
              64.0);
  }
  zf_engine_test::expect_overflowing_channels_rank_by_fp64<Driver, float>(small_config(), 64.0);
  auto no_overlap = small_config();
  no_overlap.overlap_step = false;
  zf_engine_test::expect_overflowing_channels_rank_by_fp64<Driver, zenflow::bfloat16>(no_overlap, 1.01);
}

TEST(engine_dp_cases_overflow, host_backend) {
  overflows<dp_host_driver>();
}

TEST(engine_dp_cases_overflow, emulated_backend_device_communicator) {
  overflows<dp_device_comm_driver>();
}

// A device communicator gathers a window's shares in the device upload buffer: chunk_ring has
// none, so initialize() refuses it, naming the setting, and nothing is set up.
TEST(engine_data_parallel, chunk_ring_is_refused_over_a_device_communicator) {
  auto cfg = small_config();
  cfg.upload = zenflow::upload_policy::chunk_ring;
  auto w = initial_weights<float>();
  auto g = w;
  zenflow::emulated_device device;
  const cudaStream_t stream = device.create_stream();
  using comm = zenflow::emulated_device_communicator<zenflow::mpi_communicator>;
  zenflow::engine<zenflow::emulated_backend, comm> e(cfg, zenflow::emulated_backend{device},
                                                     comm(device, make_comm()));
  register_all(e, w, g);
  zf_engine_test::expect_invalid([&] { e.initialize(stream); }, "upload");
  EXPECT_FALSE(e.initialized());
}

// A training loop as a user writes it: least squares y = W x, each rank on its own shard of every
// batch. The loss over the whole batch must fall, and every replica must hold the same weights.
TEST(engine_data_parallel, a_training_loop_each_rank_on_its_shard) {
  const std::int64_t in = 16;
  const std::int64_t out = 4;
  const int batch = 12;                            // samples per step, split over the ranks
  std::mt19937_64 gen(zf_test::base_seed() + 99u); // the same data on every rank
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> truth(static_cast<std::size_t>(in * out));
  for (auto& x : truth) {
    x = nd(gen);
  }
  auto sample = [&](std::vector<float>& x, std::vector<float>& y) {
    for (auto& v : x) {
      v = nd(gen);
    }
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (std::int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(truth[static_cast<std::size_t>(i * out + o)]) *
               x[static_cast<std::size_t>(i)];
      }
      y[static_cast<std::size_t>(o)] = static_cast<float>(acc);
    }
  };
  // The loss of one sample and its gradient added into `w_grad` (W stored channel-major: [in][out]).
  auto loss_and_grad = [&](const std::vector<float>& w, const std::vector<float>& x,
                           const std::vector<float>& y, std::vector<float>* w_grad) {
    double loss = 0.0;
    for (std::int64_t o = 0; o < out; ++o) {
      double pred = 0.0;
      for (std::int64_t i = 0; i < in; ++i) {
        pred +=
            static_cast<double>(w[static_cast<std::size_t>(i * out + o)]) * x[static_cast<std::size_t>(i)];
      }
      const double err = pred - y[static_cast<std::size_t>(o)];
      loss += 0.5 * err * err;
      for (std::int64_t i = 0; w_grad != nullptr && i < in; ++i) {
        (*w_grad)[static_cast<std::size_t>(i * out + o)] +=
            static_cast<float>(err * x[static_cast<std::size_t>(i)]);
      }
    }
    return loss;
  };
  auto cfg = small_config();
  cfg.adam.lr = 5e-2f;
  std::vector<float> w(static_cast<std::size_t>(in * out), 0.0f), w_grad(w.size());
  std::vector<std::vector<float>> xs(batch, std::vector<float>(static_cast<std::size_t>(in)));
  std::vector<std::vector<float>> ys(batch, std::vector<float>(static_cast<std::size_t>(out)));
  // A held-out set, the same on every rank.
  std::vector<std::vector<float>> hx(32, std::vector<float>(static_cast<std::size_t>(in)));
  std::vector<std::vector<float>> hy(32, std::vector<float>(static_cast<std::size_t>(out)));
  for (std::size_t s = 0; s < hx.size(); ++s) {
    sample(hx[s], hy[s]);
  }
  auto held_out_loss = [&] {
    double loss = 0.0;
    for (std::size_t s = 0; s < hx.size(); ++s) {
      loss += loss_and_grad(w, hx[s], hy[s], nullptr);
    }
    return loss;
  };
  const double before = held_out_loss();
  // example-begin engine-data-parallel
  // Every rank: the same configuration and registrations, the same initial weights.
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> zf(
      cfg, zenflow::host_backend{}, zenflow::mpi_communicator(MPI_COMM_WORLD));
  zf.add_matrix(w.data(), w_grad.data(), /*channels=*/in, /*channel_len=*/out);
  zf.initialize(); // throws on every rank if a rank's configuration or parameters differ
  const int rank = zf.comm().rank();
  const int ranks = zf.comm().size();
  for (int step = 0; step < 60; ++step) {
    for (int s = 0; s < batch; ++s) {
      sample(xs[static_cast<std::size_t>(s)], ys[static_cast<std::size_t>(s)]);
    }
    std::fill(w_grad.begin(), w_grad.end(), 0.0f);
    for (int s = rank; s < batch; s += ranks) { // this rank's shard of the batch
      loss_and_grad(w, xs[static_cast<std::size_t>(s)], ys[static_cast<std::size_t>(s)], &w_grad);
    }
    zf.step(cfg.adam.lr); // the gradients' mean over the ranks first, then the ZenFlow step
  }
  zf.flush();
  const zenflow::stats mine = zf.stats();           // this rank: its bytes, its block's host state
  const zenflow::stats all = zf.stats_over_ranks(); // summed over the ranks (every rank calls it)
  // example-end engine-data-parallel
  EXPECT_LT(held_out_loss(), 0.25 * before);
  // The host state of the one matrix (fp32 master, m, v and a count per channel), split by owner.
  EXPECT_EQ(all.memory.host_state, static_cast<std::size_t>(in * (12 * out + 4)));
  EXPECT_EQ(mine.memory.host_state, static_cast<std::size_t>(zf.partition().count(0, rank) * (12 * out + 4)));
  EXPECT_TRUE(same_on_every_rank(w));
}

} // namespace

int main(int argc, char** argv) {
  return zf_test::mpi_gtest_main(argc, argv);
}
