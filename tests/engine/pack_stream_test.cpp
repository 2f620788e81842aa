// Issue 11: the packs of a step's host-set gradients run on the engine's pack stream, after an
// event on the training stream, so that the training stream's next work does not queue behind
// them; gradient_release says who keeps the next backward from overwriting what they still read
// (docs/engine.md, "The pack stream and your gradients"). The same bits in both release modes, on
// the host and emulated backends (late, slow packs included); the training stream's next op not
// delayed by slow modelled packs, and the packs not waiting for the prologue, read on the emulated
// device's own trace; a missing release refused before anything changes.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/gradient_release.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "../support/random.hpp"
#include "engine_harness.hpp"
#include "plan_scenarios.hpp"

namespace {

using zf_engine_test::digest_run;
using zf_engine_test::emulated_driver_timing;
using zf_engine_test::plan_scenarios;

/// A trainer that releases the gradients itself (gradient_release::by_caller): right before the
/// backward writes the next step's gradients, which is the latest point the contract allows.
template <class Base>
struct releasing : Base {
  using Base::Base;
  typename Base::engine_type* eng = nullptr;
  std::unique_ptr<typename Base::engine_type> make_engine(const zenflow::config& cfg) {
    auto e = Base::make_engine(cfg);
    e->set_gradient_release(zenflow::gradient_release::by_caller);
    eng = e.get();
    return e;
  }
  void publish_grads() {
    if constexpr (std::is_same_v<typename Base::engine_type, zenflow::engine<zenflow::host_backend>>) {
      eng->release_gradients();
    } else {
      eng->release_gradients(this->stream);
    }
    Base::publish_grads();
  }
};
template <class T>
using host_by_caller = releasing<zf_engine_test::host_plan_driver<T>>;
template <class T>
using emulated_by_caller = releasing<zf_engine_test::emulated_plan_driver<T>>;

/// Every long-run scenario (fixed and Zen-auto windows, overlap on and off, grad_ready, warm-up, NaN
/// steps, both baselines) gives the same state and counters whoever releases the gradients, on the
/// host backend and on the emulated device. There the packs run late and slow (jitter on every
/// stream, a slow memory bandwidth charged to every kernel): a backward that overwrote gradients a
/// pack still reads would change the bits (and ThreadSanitizer would report the race).
TEST(engine_pack_stream, both_release_modes_give_the_same_bits_on_every_backend) {
  for (auto sc : plan_scenarios()) {
    sc.steps = 40;
    emulated_driver_timing() = {};
    const auto host = digest_run<zf_engine_test::host_plan_driver>(sc);
    const auto host_caller = digest_run<host_by_caller>(sc);
    emulated_driver_timing().max_jitter = std::chrono::microseconds(300);
    emulated_driver_timing().jitter_seed = 11;
    emulated_driver_timing().device_bytes_per_second = 50e6; // kPlanShapes' packs: ~10-100 us each
    const auto emulated_step = digest_run<zf_engine_test::emulated_plan_driver>(sc);
    const auto emulated_caller = digest_run<emulated_by_caller>(sc);
    emulated_driver_timing() = {};
    EXPECT_EQ(host_caller.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(emulated_step.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(emulated_caller.state_digest, host.state_digest) << sc.name;
    EXPECT_EQ(host_caller.counters_digest, host.counters_digest) << sc.name;
    EXPECT_EQ(emulated_step.counters_digest, host.counters_digest) << sc.name;
    EXPECT_EQ(emulated_caller.counters_digest, host.counters_digest) << sc.name;
  }
}

struct timeline {
  zenflow::emulated_op next;               // the training stream's first op after step()
  std::vector<zenflow::emulated_op> packs; // the step's packs
  int training_stream = 0;
};

// One 64-channel matrix with one selected channel (k = int(0.02 x 64) = 1), windows of 4, no
// re-selection, 16 KiB ring slots: the pack-stream traces' engine.
zenflow::config one_selected_channel_config() {
  zenflow::config cfg = zf_engine_test::small_config();
  cfg.topk_ratio = 0.02;
  cfg.select_interval = 1000;
  cfg.update_interval = 4;
  cfg.ring_slot_bytes = 16384;
  cfg.ring_slots = 64;
  return cfg;
}

/// One f32 matrix of 64 channels x 1024, one selected (k = 1): 63 host-set channels in 16 packs
/// of 32 KiB each (4 channels per 16 KiB slot), charged at 8 MB/s of modelled memory bandwidth: 4
/// ms per pack, 64 ms for the step's packs, against 4 ms for the device update of the selected
/// channel. Steps 0 (the selection) and 1, then step 2 traced, and the op the trainer enqueues
/// right after step() returns (its next forward: a zero-cost marker, which no resource delays).
timeline trace_step_2(zenflow::gradient_release release) {
  zenflow::emulated_timing timing;
  timing.device_bytes_per_second = 8e6;
  zenflow::emulated_device device(timing);
  const cudaStream_t stream = device.create_stream();
  const zenflow::config cfg = one_selected_channel_config();
  constexpr std::int64_t channels = 64;
  constexpr std::int64_t len = 1024;
  std::vector<float> w = zf_test::random_values<float>(static_cast<std::size_t>(channels * len), 3);
  std::vector<float> g(w.size());
  timeline out;
  {
    zenflow::engine<zenflow::emulated_backend> eng(cfg, zenflow::emulated_backend{device});
    eng.set_gradient_release(release);
    eng.add_matrix(w.data(), g.data(), channels, len);
    eng.initialize(stream);
    for (int t = 0; t < 3; ++t) {
      eng.release_gradients(stream); // before the backward writes them (a no-op wait at_step)
      if (t == 2) {
        device.synchronize();
        device.set_tracing(true);
      }
      const auto seed = static_cast<std::uint64_t>(40 + t);
      device.launch(stream, [&g, seed] { // the backward
        const std::vector<float> fresh = zf_test::random_values<float>(g.size(), seed);
        std::copy(fresh.begin(), fresh.end(), g.begin());
      });
      eng.step(1e-3f, stream);
    }
    device.launch(
        stream, [] {}, 0, "next forward");
    device.synchronize();
    device.set_tracing(false);
    eng.release_gradients(stream);
    eng.flush(stream);
    device.synchronize_stream(stream);
  }
  for (const auto& op : device.trace()) {
    if (op.name == "next forward") {
      out.next = op;
      out.training_stream = op.stream;
    } else if (op.name == "zenflow::engine: gather_channels") {
      out.packs.push_back(op);
    }
  }
  return out;
}

/// by_caller: the training stream's next op runs while the step's packs are still running, on a
/// stream of their own (counted on the emulated device's trace, whose clock places every
/// operation; the gap is the structure of the run, ~60 ms of modelled packs, not a race). at_step:
/// the same op waits for the last pack (the default contract: the next backward cannot overwrite
/// gradients a pack still reads), yet the packs still ran beside the step's device update.
TEST(engine_pack_stream, the_training_streams_next_op_is_not_delayed_by_the_packs) {
  const timeline caller = trace_step_2(zenflow::gradient_release::by_caller);
  const timeline at_step = trace_step_2(zenflow::gradient_release::at_step);
  for (const timeline* tl : {&caller, &at_step}) {
    ASSERT_EQ(tl->next.name, "next forward");
    ASSERT_EQ(tl->packs.size(), 16u);
    for (const auto& p : tl->packs) {
      EXPECT_NE(p.stream, tl->training_stream) << "a pack ran on the training stream";
    }
  }
  const auto last_end = [](const timeline& tl) {
    std::int64_t e = 0;
    for (const auto& p : tl.packs) {
      e = std::max(e, p.end_ns);
    }
    return e;
  };
  // The marker runs once the step's update is done (4 ms of modelled bandwidth, interleaved with
  // at most a pack or two); the last of the 16 packs ends ~60 ms later.
  EXPECT_LT(caller.next.start_ns, last_end(caller)) << "by_caller: the next op waited for the packs ("
                                                    << (last_end(caller) - caller.next.start_ns) << " ns)";
  EXPECT_GE(at_step.next.start_ns, last_end(at_step)) << "at_step: the next op ran beside a pack";
}

/// The first pack of each of three steps (0: the selection; 1, 2: host sets known beforehand) and
/// the prologue's last kernel (finish_scalars), on the emulated device's trace.
struct prologue_and_packs {
  std::int64_t first_pack_start[3] = {0, 0, 0};
  std::int64_t first_copy_start[3] = {0, 0, 0}; // of the gradients (the records' copies are 24 B)
  std::int64_t prologue_end[3] = {0, 0, 0};
  int packs[3] = {0, 0, 0};
  int copies[3] = {0, 0, 0};
};

/// One f32 matrix of 64 channels x 256, k = 1: 63 host-set channels in 4 packs (16 KiB slots).
/// Every kernel costs 10 ms of modelled launch latency on the device's one compute resource, so
/// the order in which the streams book it is set by what each waits for, not by the host's speed:
/// a pack that waits only for the backward books its turn while the norms run (10 ms before
/// sq_totals and finish_scalars can); one that waits for the prologue books after finish_scalars.
prologue_and_packs trace_prologue_and_packs() {
  zenflow::emulated_timing timing;
  timing.launch_latency = std::chrono::milliseconds(10);
  zenflow::emulated_device device(timing);
  const cudaStream_t stream = device.create_stream();
  const zenflow::config cfg = one_selected_channel_config();
  constexpr std::int64_t channels = 64;
  constexpr std::int64_t len = 256;
  std::vector<float> w = zf_test::random_values<float>(static_cast<std::size_t>(channels * len), 5);
  std::vector<float> g(w.size());
  {
    zenflow::engine<zenflow::emulated_backend> eng(cfg, zenflow::emulated_backend{device});
    eng.add_matrix(w.data(), g.data(), channels, len);
    eng.initialize(stream);
    device.synchronize();
    device.set_tracing(true);
    for (int t = 0; t < 3; ++t) {
      const auto seed = static_cast<std::uint64_t>(60 + t);
      device.launch(
          stream,
          [&g, seed] {
            const std::vector<float> fresh = zf_test::random_values<float>(g.size(), seed);
            std::copy(fresh.begin(), fresh.end(), g.begin());
          },
          0, "backward");
      eng.step(1e-3f, stream);
    }
    device.launch(
        stream, [] {}, 0, "backward"); // closes step 2's interval
    device.synchronize();
    device.set_tracing(false);
    eng.flush(stream);
    device.synchronize_stream(stream);
  }
  std::vector<zenflow::emulated_op> ops = device.trace();
  std::vector<std::int64_t> backward;
  for (const auto& op : ops) {
    if (op.name == "backward") {
      backward.push_back(op.start_ns);
    }
  }
  EXPECT_EQ(backward.size(), 4u);
  prologue_and_packs out;
  // The prologue runs on the training stream, between its step's backward and the next one. The
  // packs (pack stream) and the gradients' copies (copy stream) are each in order on their own
  // stream, which the next backward does not wait for (a slow machine starts step t's last copy
  // after step t+1's backward): they are counted in order, four per step.
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  int packs = 0;
  int copies = 0;
  for (const auto& op : ops) {
    if (op.name == "zenflow::engine: gather_channels") {
      const int t = packs++ / 4;
      if (t < 3) {
        out.first_pack_start[t] = out.packs[t]++ == 0 ? op.start_ns : out.first_pack_start[t];
      }
    } else if (op.what == zenflow::emulated_op::kind::copy_d2h && op.bytes >= 1024) {
      const int t = copies++ / 4;
      if (t < 3) {
        out.first_copy_start[t] = out.copies[t]++ == 0 ? op.start_ns : out.first_copy_start[t];
      }
    }
    for (int t = 0; t < 3 && backward.size() == 4u; ++t) {
      if (op.name == "zenflow::engine: finish_scalars" &&
          op.start_ns >= backward[static_cast<std::size_t>(t)] &&
          op.start_ns < backward[static_cast<std::size_t>(t) + 1]) {
        out.prologue_end[t] = op.end_ns;
      }
    }
  }
  EXPECT_EQ(packs, 12);
  EXPECT_EQ(copies, 12);
  return out;
}

/// A step whose host sets are known before it starts packs its gradients beside its prologue (the
/// norms' read of every gradient, the totals, coef_t): its first pack starts before the
/// prologue's last kernel ends; it waits for the gradients only (the packs add into the record's
/// rest masses, which the pack stream zeroes, and read neither coef_t nor the skip flag). Its
/// first gradient copy follows that pack, not the prologue (the record's header, which does wait
/// for the prologue, goes down on a stream of its own). A selection step still packs after the
/// prologue (its packs read the host sets the selection installs).
/// Whether the masses and bits stay right is the long-run scenarios' (above, and plan_digest_test).
TEST(engine_pack_stream, the_packs_start_beside_the_prologue_when_the_host_sets_are_known) {
  const prologue_and_packs r = trace_prologue_and_packs();
  for (int t = 0; t < 3; ++t) {
    ASSERT_EQ(r.packs[t], 4) << "step " << t;
    ASSERT_EQ(r.copies[t], 4) << "step " << t;
    ASSERT_GT(r.prologue_end[t], 0) << "step " << t;
  }
  EXPECT_GE(r.first_pack_start[0], r.prologue_end[0]) << "the selection step packed before its new host sets";
  for (int t = 1; t < 3; ++t) {
    EXPECT_LT(r.first_pack_start[t], r.prologue_end[t])
        << "step " << t << ": the first pack waited for the prologue ("
        << (r.first_pack_start[t] - r.prologue_end[t]) << " ns after its end)";
    EXPECT_LT(r.first_copy_start[t], r.prologue_end[t])
        << "step " << t << ": the first gradient copy waited for the prologue ("
        << (r.first_copy_start[t] - r.prologue_end[t]) << " ns after its end)";
  }
}

/// by_caller, a trainer that forgets release_gradients(): step() and grad_ready() throw naming
/// 'this' and change nothing (same step count, same state after the release and the step it
/// refused); set_gradient_release after initialize() and release_gradients() before it are refused.
TEST(engine_pack_stream, an_unreleased_step_is_refused_and_changes_nothing) {
  zenflow::config cfg = zf_engine_test::small_config();
  zf_engine_test::model<float> forgetful(zf_engine_test::kShapes, 77);
  zf_engine_test::model<float> careful(zf_engine_test::kShapes, 77);
  zenflow::engine<zenflow::host_backend> a(cfg);
  zenflow::engine<zenflow::host_backend> b(cfg);
  zf_engine_test::expect_invalid([&] { a.release_gradients(); }, "'this'");
  zf_engine_test::expect_invalid([&] { a.set_gradient_release(static_cast<zenflow::gradient_release>(7)); },
                                 "'release'");
  a.set_gradient_release(zenflow::gradient_release::by_caller);
  b.set_gradient_release(zenflow::gradient_release::by_caller);
  std::vector<zenflow::param_id> ids, ids_b;
  for (std::size_t p = 0; p < forgetful.shapes.size(); ++p) {
    const auto& sh = forgetful.shapes[p];
    ids.push_back(sh.matrix ? a.add_matrix(forgetful.w[p].data(), forgetful.g[p].data(), sh.channels, sh.len)
                            : a.add_vector(forgetful.w[p].data(), forgetful.g[p].data(), sh.len));
    ids_b.push_back(sh.matrix ? b.add_matrix(careful.w[p].data(), careful.g[p].data(), sh.channels, sh.len)
                              : b.add_vector(careful.w[p].data(), careful.g[p].data(), sh.len));
  }
  a.initialize();
  b.initialize();
  zf_engine_test::expect_invalid([&] { a.set_gradient_release(zenflow::gradient_release::at_step); },
                                 "'this'");
  for (int t = 0; t < 12; ++t) {
    forgetful.next_grads();
    careful.next_grads();
    if (t == 3 || t == 9) { // forgot: refused, nothing changed
      const std::int64_t steps = a.steps();
      zf_engine_test::expect_invalid([&] { a.grad_ready(ids[0]); }, "release_gradients()");
      zf_engine_test::expect_invalid([&] { (void)a.step(1e-2f); }, "'this'");
      EXPECT_EQ(a.steps(), steps);
    }
    if (t > 0) {
      a.release_gradients();
      b.release_gradients();
    }
    (void)a.step(1e-2f);
    (void)b.step(1e-2f);
  }
  a.release_gradients();
  b.release_gradients();
  a.flush();
  b.flush();
  EXPECT_EQ(a.stats().steps, 12);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(forgetful.w[p], careful.w[p]) << "parameter " << p;
    const auto sa = a.state(ids[p]);
    const auto sb = b.state(ids_b[p]);
    EXPECT_EQ(sa.master, sb.master) << "parameter " << p;
    EXPECT_EQ(sa.m, sb.m) << "parameter " << p;
    EXPECT_EQ(sa.counts, sb.counts) << "parameter " << p;
  }
}

} // namespace
