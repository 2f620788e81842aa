// cpu tier for the emulated device: stream order and asynchrony, events across streams (with
// jitter), the timing model's copy engines, the sticky error, bad handles, and the rules a GPU
// punishes (each broken on purpose: pageable copies, allocations and frees, device calls from a
// host task, use after free, busy destroys, the legacy null stream).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/emulated_device.hpp>

#include "support/random.hpp"

namespace {

using zenflow::copy_direction;
using zenflow::emulated_device;
using zenflow::emulated_op;
using zenflow::emulated_timing;

/// `v` registered with `dev` as pinned for the scope: copies from and to it run asynchronously
/// (pageable memory would make each copy synchronous).
class pinned_scope {
public:
  template <class V>
  pinned_scope(emulated_device& dev, V& v) : dev_(dev), p_(v.data()) {
    dev.register_host(v.data(), v.size() * sizeof(v[0]));
  }
  pinned_scope(const pinned_scope&) = delete;
  pinned_scope& operator=(const pinned_scope&) = delete;
  ~pinned_scope() { dev_.unregister_host(p_); }

private:
  emulated_device& dev_;
  void* p_;
};

TEST(emulated_device, a_stream_runs_its_work_in_order_on_another_thread) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<int> order;
  std::thread::id worker;
  dev.launch(s, [&] {
    worker = std::this_thread::get_id();
    opened.wait(); // blocks the stream until the enqueuing thread has finished enqueuing
  });
  for (int i = 0; i < 100; ++i) {
    dev.launch(s, [&order, i] { order.push_back(i); });
  }
  EXPECT_TRUE(order.empty()); // enqueue returned while the stream was blocked
  gate.set_value();
  dev.synchronize_stream(s);
  EXPECT_NE(worker, std::this_thread::get_id());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  }
}

TEST(emulated_device, events_order_work_across_streams_whatever_the_delays) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  emulated_timing t;
  t.max_jitter = std::chrono::microseconds(50);
  t.jitter_seed = seed;
  t.d2h_bytes_per_second = 500e6;
  t.launch_latency = std::chrono::microseconds(20); // kernels slower than the copies: without the
                                                    // event wait, copies would read unwritten rounds
  emulated_device dev(t);
  cudaStream_t compute = dev.create_stream();
  cudaStream_t copies = dev.create_stream();
  constexpr int rounds = 200;
  constexpr std::size_t n = 257;
  std::vector<std::vector<std::uint32_t>> device(rounds, std::vector<std::uint32_t>(n));
  std::vector<std::vector<std::uint32_t>> host(rounds, std::vector<std::uint32_t>(n, 0));
  std::vector<emulated_device::event> ready(rounds);
  std::vector<std::unique_ptr<pinned_scope>> pinned;
  for (auto& h : host) {
    pinned.push_back(std::make_unique<pinned_scope>(dev, h));
  }
  for (int r = 0; r < rounds; ++r) {
    // "Kernel" on the compute stream writes round r; the copy stream waits for it, then copies.
    dev.launch(compute, [&, r] {
      for (std::size_t i = 0; i < n; ++i) {
        device[static_cast<std::size_t>(r)][i] =
            static_cast<std::uint32_t>(seed * 31 + static_cast<std::uint64_t>(r) * n + i);
      }
    });
    ready[static_cast<std::size_t>(r)] = dev.create_event();
    dev.record(ready[static_cast<std::size_t>(r)], compute);
    dev.stream_wait(copies, ready[static_cast<std::size_t>(r)]);
    dev.copy(host[static_cast<std::size_t>(r)].data(), device[static_cast<std::size_t>(r)].data(),
             n * sizeof(std::uint32_t), copy_direction::device_to_host, copies);
  }
  dev.synchronize_stream(copies);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(host[static_cast<std::size_t>(r)][i],
                static_cast<std::uint32_t>(seed * 31 + static_cast<std::uint64_t>(r) * n + i))
          << "round " << r << " element " << i;
    }
  }
}

TEST(emulated_device, query_and_synchronize_follow_the_last_record) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  auto e = dev.create_event();
  EXPECT_TRUE(dev.query(e)); // never recorded: complete, as in CUDA
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.launch(s, [opened] { opened.wait(); });
  dev.record(e, s);
  EXPECT_FALSE(dev.query(e));
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    dev.synchronize(e);
    waited = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(waited.load()); // still blocked behind the gate
  gate.set_value();
  waiter.join();
  EXPECT_TRUE(waited.load());
  EXPECT_TRUE(dev.query(e));
}

/// One event recorded on a blocked stream, then re-recorded on a free one (a fork event shared by
/// two producers, as the engine's copy stream waits for the training and pack streams): the wait
/// enqueued after the first record waits for that record, not for the later one that completes
/// first. (The device once kept a "highest record reached" counter, which let it through.)
TEST(emulated_device, a_wait_is_for_the_record_it_saw_even_if_a_later_one_on_another_stream_completes) {
  emulated_device dev;
  cudaStream_t blocked = dev.create_stream();
  cudaStream_t free_stream = dev.create_stream();
  cudaStream_t waiter = dev.create_stream();
  auto e = dev.create_event();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> first_done{false};
  dev.launch(blocked, [opened, &first_done] {
    opened.wait();
    first_done = true;
  });
  dev.record(e, blocked);
  dev.stream_wait(waiter, e); // for the record on `blocked`
  std::atomic<bool> ran{false};
  std::atomic<bool> saw_first{false};
  dev.launch(waiter, [&] {
    saw_first = first_done.load();
    ran = true;
  });
  dev.record(e, free_stream); // completes at once
  dev.synchronize_stream(free_stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(ran.load()) << "the wait passed on the later record of another stream";
  EXPECT_TRUE(dev.query(e));
  gate.set_value();
  dev.synchronize_stream(waiter);
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(saw_first.load());
}

TEST(emulated_device, copies_in_one_direction_share_one_engine_and_take_their_modelled_time) {
  emulated_timing t;
  t.d2h_bytes_per_second = 1e9; // 1 MB = 1 ms
  emulated_device dev(t);
  dev.set_tracing(true);
  cudaStream_t a = dev.create_stream();
  cudaStream_t b = dev.create_stream();
  constexpr std::size_t bytes = 1 << 20;
  std::vector<std::uint8_t> src(bytes, 7), dst_a(bytes, 0), dst_b(bytes, 0);
  const pinned_scope pin_a(dev, dst_a), pin_b(dev, dst_b);
  dev.copy(dst_a.data(), src.data(), bytes, copy_direction::device_to_host, a);
  dev.copy(dst_b.data(), src.data(), bytes, copy_direction::device_to_host, b);
  dev.synchronize();
  EXPECT_EQ(dst_a, src);
  EXPECT_EQ(dst_b, src);
  const std::vector<emulated_op> ops = dev.trace();
  ASSERT_EQ(ops.size(), 2u);
  const std::int64_t modelled_ns = static_cast<std::int64_t>(bytes / 1e9 * 1e9);
  for (const emulated_op& op : ops) {
    EXPECT_EQ(op.what, emulated_op::kind::copy_d2h);
    EXPECT_EQ(op.bytes, bytes);
    EXPECT_GE(op.end_ns - op.start_ns, modelled_ns);
  }
  // One engine: the reservations do not overlap, whichever stream got it first.
  const auto& first = ops[0].start_ns <= ops[1].start_ns ? ops[0] : ops[1];
  const auto& second = ops[0].start_ns <= ops[1].start_ns ? ops[1] : ops[0];
  EXPECT_GE(second.start_ns, first.start_ns + modelled_ns);
  EXPECT_NE(first.stream, second.stream);
}

// The ops of `stream` named `name`, in the order they ran (one stream runs in order).
std::vector<emulated_op> ops_named(const std::vector<emulated_op>& all, const std::string& name) {
  std::vector<emulated_op> out;
  for (const emulated_op& op : all) {
    if (op.name == name) {
      out.push_back(op);
    }
  }
  return out;
}

TEST(emulated_device, back_to_back_operations_of_a_stream_run_on_its_modelled_clock) {
  // A GPU runs a stream's queued work back to back: neither the emulating thread's wake-up after
  // a modelled sleep nor a copy's memcpy may open gaps in the timeline (they did: ~0.1 ms per
  // kernel and the memcpy's time per copy, a few ms per step of the pipeline benchmark).
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  emulated_timing t;
  t.d2h_bytes_per_second = 1e9;
  emulated_device dev(t);
  dev.set_tracing(true);
  cudaStream_t s = dev.create_stream();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.launch(
      s, [opened] { opened.wait(); }, 0, "gate"); // everything below is queued behind it
  constexpr int n = 4;
  constexpr std::size_t bytes = 1 << 20;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::uint8_t>> src(n, std::vector<std::uint8_t>(bytes));
  std::vector<std::vector<std::uint8_t>> dst(n, std::vector<std::uint8_t>(bytes, 0));
  std::vector<std::unique_ptr<pinned_scope>> pinned;
  for (auto& d : dst) {
    pinned.push_back(std::make_unique<pinned_scope>(dev, d));
  }
  for (auto& v : src) {
    for (auto& b : v) {
      b = static_cast<std::uint8_t>(rng());
    }
  }
  for (int i = 0; i < n; ++i) {
    dev.compute(s, std::chrono::milliseconds(1), "compute");
  }
  for (int i = 0; i < n; ++i) {
    dev.copy(dst[static_cast<std::size_t>(i)].data(), src[static_cast<std::size_t>(i)].data(), bytes,
             copy_direction::device_to_host, s, "copy");
  }
  gate.set_value();
  dev.synchronize_stream(s);
  EXPECT_EQ(dst, src);
  const std::vector<emulated_op> all = dev.trace();
  const std::vector<emulated_op> gates = ops_named(all, "gate");
  const std::vector<emulated_op> computes = ops_named(all, "compute");
  const std::vector<emulated_op> copies = ops_named(all, "copy");
  ASSERT_EQ(gates.size(), 1u);
  ASSERT_EQ(computes.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(copies.size(), static_cast<std::size_t>(n));
  EXPECT_GE(computes[0].start_ns, gates[0].end_ns); // the gate's body is real time: after it
  const std::int64_t copy_ns = static_cast<std::int64_t>(static_cast<double>(bytes) / 1e9 * 1e9);
  for (int i = 0; i < n; ++i) {
    const auto& c = computes[static_cast<std::size_t>(i)];
    EXPECT_EQ(c.end_ns - c.start_ns, 1000000) << "compute " << i; // modelled, no wake-up added
    const auto& next = i + 1 < n ? computes[static_cast<std::size_t>(i + 1)] : copies[0];
    EXPECT_EQ(next.start_ns, c.end_ns) << "after compute " << i; // no gap
    const auto& d = copies[static_cast<std::size_t>(i)];
    EXPECT_GE(d.end_ns - d.start_ns, copy_ns) << "copy " << i;
    if (i + 1 < n) {
      EXPECT_EQ(copies[static_cast<std::size_t>(i + 1)].start_ns, d.end_ns) << "after copy " << i;
    }
  }
}

TEST(emulated_device, an_operation_after_a_wait_or_idle_time_starts_no_earlier_than_it_could) {
  // The modelled clock is a stream's only while its work runs back to back: after an event wait
  // the next operation starts once the event completed, after idle time once it was enqueued.
  emulated_timing t;
  t.d2h_bytes_per_second = 1e9;
  emulated_device dev(t);
  dev.set_tracing(true);
  cudaStream_t a = dev.create_stream();
  cudaStream_t b = dev.create_stream();
  constexpr std::size_t bytes = 1 << 20; // ~1 ms
  std::vector<std::uint8_t> src(bytes, 3), dst(bytes, 0);
  const pinned_scope pin(dev, dst);
  dev.compute(a, std::chrono::milliseconds(20), "slow"); // "before" ends first (on an idle machine)
  const auto e = dev.create_event();
  dev.record(e, a);
  dev.copy(dst.data(), src.data(), bytes, copy_direction::device_to_host, b, "before");
  dev.stream_wait(b, e);
  dev.copy(dst.data(), src.data(), bytes, copy_direction::device_to_host, b, "after wait");
  dev.synchronize();
  const std::int64_t enqueued = dev.now_ns();
  dev.copy(dst.data(), src.data(), bytes, copy_direction::device_to_host, b, "after idle");
  dev.synchronize();
  const std::vector<emulated_op> all = dev.trace();
  const auto slow = ops_named(all, "slow");
  const auto before = ops_named(all, "before");
  const auto waited = ops_named(all, "after wait");
  const auto idle = ops_named(all, "after idle");
  ASSERT_EQ(slow.size(), 1u);
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(waited.size(), 1u);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_GE(waited[0].start_ns, slow[0].end_ns);
  EXPECT_GE(idle[0].start_ns, enqueued);
  EXPECT_EQ(dst, src);
}

TEST(emulated_device, a_failed_operation_is_sticky_and_nothing_hangs) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  int ran_after = 0;
  dev.launch(s, [] { throw std::runtime_error("illegal address in kernel 3"); });
  dev.launch(s, [&] { ++ran_after; });
  auto e = dev.create_event();
  dev.record(e, s);
  try {
    dev.synchronize(e);
    FAIL() << "synchronize did not rethrow the sticky error";
  } catch (const std::runtime_error& err) {
    EXPECT_EQ(std::string(err.what()), "illegal address in kernel 3");
  }
  EXPECT_EQ(ran_after, 0);   // work after the failure is skipped
  EXPECT_TRUE(dev.query(e)); // but events still complete
  EXPECT_THROW(dev.synchronize_stream(s), std::runtime_error);
  EXPECT_THROW(dev.synchronize(), std::runtime_error);
}

TEST(emulated_device, bad_handles_are_rejected_naming_the_argument) {
  emulated_device dev;
  emulated_device other;
  cudaStream_t foreign = other.create_stream();
  try {
    dev.launch(foreign, [] {});
    FAIL() << "a stream of another device was accepted";
  } catch (const zenflow::invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("'stream'"), std::string::npos) << err.what();
  }
  emulated_device::event never_created;
  try {
    dev.record(never_created, nullptr);
    FAIL() << "an event never created was accepted";
  } catch (const zenflow::invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("'event'"), std::string::npos) << err.what();
  }
  cudaStream_t s = dev.create_stream();
  dev.destroy_stream(s);
  EXPECT_THROW(dev.launch(s, [] {}), zenflow::invalid_argument); // destroyed: no longer live
  dev.synchronize(); // the device is still usable and has no sticky error
}

TEST(emulated_device, the_null_stream_is_a_stream_of_the_device) {
  emulated_device dev;
  std::vector<int> seen;
  for (int i = 0; i < 10; ++i) {
    dev.launch(nullptr, [&seen, i] { seen.push_back(i); });
  }
  dev.synchronize_stream(nullptr);
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_EQ(seen.front(), 0);
  EXPECT_EQ(seen.back(), 9);
}

TEST(emulated_device, example_a_step_pipeline_rehearsed_on_the_cpu) {
  std::vector<float> grads(1 << 16), host_grads(grads.size());
  // example-begin emulated-pipeline
  zenflow::emulated_timing timing;
  timing.d2h_bytes_per_second = 25e9;                   // PCIe Gen5 x16, one direction
  timing.launch_latency = std::chrono::microseconds(5); // per kernel
  zenflow::emulated_device gpu(timing);
  gpu.set_tracing(true);
  cudaStream_t compute = gpu.create_stream();
  cudaStream_t copies = gpu.create_stream();
  auto grads_ready = gpu.create_event();
  gpu.register_host(host_grads.data(), host_grads.size() * sizeof(float)); // pinned: copies run async
  for (int step = 0; step < 3; ++step) {
    gpu.compute(compute, std::chrono::microseconds(200), "forward+backward"); // modelled time
    gpu.launch(
        compute, [&, step] { std::fill(grads.begin(), grads.end(), float(step)); }, 0, "grads");
    gpu.record(grads_ready, compute);
    gpu.stream_wait(copies, grads_ready); // the copy starts once the gradients exist
    gpu.copy(host_grads.data(), grads.data(), grads.size() * sizeof(float),
             zenflow::copy_direction::device_to_host, copies, "grads D2H");
    gpu.synchronize_stream(copies); // a real trainer overlaps the next step instead
  }
  const std::vector<zenflow::emulated_op> timeline = gpu.trace(); // start/end of every operation
  // example-end emulated-pipeline
  gpu.unregister_host(host_grads.data());
  EXPECT_EQ(gpu.stats().pageable_copies, 0u);
  EXPECT_EQ(host_grads.front(), 2.0f);
  EXPECT_EQ(host_grads.back(), 2.0f);
  ASSERT_EQ(timeline.size(), 9u);
  // Every copy starts after the kernel that produced its gradients ended.
  std::int64_t last_grads_end = -1;
  int copies_seen = 0;
  for (const zenflow::emulated_op& op : timeline) {
    if (op.name == "grads") {
      last_grads_end = op.end_ns;
    } else if (op.name == "grads D2H") {
      EXPECT_GE(op.start_ns, last_grads_end);
      EXPECT_GE(op.end_ns - op.start_ns,
                static_cast<std::int64_t>(grads.size() * sizeof(float) / 25e9 * 1e9));
      ++copies_seen;
    }
  }
  EXPECT_EQ(copies_seen, 3);
}

// The rules a GPU punishes: each broken on purpose, and the device's report seen.

/// A body that keeps its stream busy for `ms`, then sets `done`.
std::function<void()> busy_for(int ms, std::atomic<bool>& done) {
  return [ms, &done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    done = true;
  };
}

TEST(emulated_device_rules, a_copy_from_or_to_pageable_memory_runs_synchronously_and_is_counted) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  constexpr std::size_t bytes = 4096;
  std::vector<std::uint8_t> pageable(bytes, 5), device(bytes, 0);
  std::atomic<bool> before{false};
  dev.launch(s, busy_for(20, before)); // queued before the copies
  dev.copy(device.data(), pageable.data(), bytes, copy_direction::host_to_device, s);
  EXPECT_TRUE(before.load()) << "a pageable upload returned before the stream's earlier work ran";
  EXPECT_EQ(device, pageable); // and it has run: the caller may reuse its memory
  std::fill(device.begin(), device.end(), std::uint8_t{9});
  dev.copy(pageable.data(), device.data(), bytes, copy_direction::device_to_host, s);
  EXPECT_EQ(pageable, device);
  EXPECT_EQ(dev.stats().pageable_copies, 2u);

  // Pinned (allocated or registered): the same copies are asynchronous and not counted.
  auto* pinned = static_cast<std::uint8_t*>(dev.allocate(bytes, zenflow::emulated_memory::pinned));
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.launch(s, [opened] { opened.wait(); });
  dev.copy(device.data(), pinned, bytes, copy_direction::host_to_device, s); // returns at once
  dev.copy(pinned, device.data(), bytes, copy_direction::device_to_host, s); // (the gate is shut)
  const pinned_scope registered(dev, pageable);
  dev.copy(device.data(), pageable.data(), bytes, copy_direction::host_to_device, s);
  EXPECT_EQ(dev.stats().pageable_copies, 2u);
  gate.set_value();
  dev.synchronize_stream(s);
  EXPECT_EQ(device, pageable);
  dev.free(pinned);
}

TEST(emulated_device_rules, allocations_and_frees_synchronise_the_whole_device_and_are_counted) {
  emulated_device dev;
  cudaStream_t a = dev.create_stream();
  cudaStream_t b = dev.create_stream();
  std::atomic<bool> on_a{false}, on_b{false};
  dev.launch(a, busy_for(20, on_a));
  dev.launch(b, busy_for(10, on_b));
  void* d = dev.allocate(1000); // device memory, as cudaMalloc: waits for both streams
  EXPECT_TRUE(on_a.load() && on_b.load()) << "an allocation did not synchronise the device";
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(d) % emulated_device::alignment, 0u);
  EXPECT_EQ(static_cast<unsigned char*>(d)[999], 0u); // zero-filled
  on_a = false;
  dev.launch(a, busy_for(20, on_a));
  void* h = dev.allocate(64, zenflow::emulated_memory::pinned); // as cudaHostAlloc
  EXPECT_TRUE(on_a.load());
  on_a = false;
  dev.launch(a, busy_for(20, on_a));
  dev.free(d); // as cudaFree
  EXPECT_TRUE(on_a.load()) << "a free did not synchronise the device";
  on_b = false;
  dev.launch(b, busy_for(10, on_b));
  dev.free(h); // as cudaFreeHost
  EXPECT_TRUE(on_b.load());
  dev.free(nullptr); // nothing, not counted
  const zenflow::emulated_device_stats st = dev.stats();
  EXPECT_EQ(st.allocations, 2u);
  EXPECT_EQ(st.frees, 2u);
  EXPECT_EQ(st.device_syncs, 4u);
  // A pointer the device did not allocate, or one already freed: rejected naming 'p'.
  int local = 0;
  for (void* bad : {static_cast<void*>(&local), d}) {
    try {
      dev.free(bad);
      FAIL() << "a bad free was accepted";
    } catch (const zenflow::invalid_argument& err) {
      EXPECT_NE(std::string(err.what()).find("'p'"), std::string::npos) << err.what();
    }
  }
  dev.synchronize(); // no sticky error
}

TEST(emulated_device_rules, a_device_call_from_a_host_task_throws_naming_the_rule) {
  // Each device call a host callback might be tempted to make, from a launch's body.
  const std::vector<std::pair<std::string, std::function<void(emulated_device&, cudaStream_t)>>> calls = {
      {"launch", [](emulated_device& dev, cudaStream_t s) { dev.launch(s, [] {}); }},
      {"copy",
       [](emulated_device& dev, cudaStream_t s) {
         static float x = 0, y = 0;
         dev.copy(&x, &y, sizeof(float), copy_direction::device_to_host, s);
       }},
      {"synchronize_stream", [](emulated_device& dev, cudaStream_t s) { dev.synchronize_stream(s); }},
      {"allocate", [](emulated_device& dev, cudaStream_t) { (void)dev.allocate(16); }},
      {"create_event", [](emulated_device& dev, cudaStream_t) { (void)dev.create_event(); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    emulated_device dev;
    cudaStream_t s = dev.create_stream();
    cudaStream_t other = dev.create_stream();
    dev.launch(
        s, [&dev, other, &call = call] { call(dev, other); }, 0, "host task");
    try {
      dev.synchronize_stream(s);
      FAIL() << "a device call from a host task went through";
    } catch (const zenflow::cuda_error& err) {
      EXPECT_EQ(err.code(), cudaErrorNotPermitted);
      EXPECT_NE(std::string(err.what()).find("from a host task"), std::string::npos) << err.what();
    }
    EXPECT_EQ(dev.stats().host_task_calls, 1u);
    ASSERT_EQ(dev.reports().size(), 1u);
    EXPECT_NE(dev.reports()[0].find(name), std::string::npos) << dev.reports()[0];
  }
}

TEST(emulated_device_rules, memory_freed_while_a_queued_copy_still_uses_it_is_detected) {
  // Stream-ordered free on one stream while another stream's copy of it is still queued (the bug
  // of a cudaFreeAsync on the wrong stream): the copy fails instead of reading freed memory.
  emulated_device dev;
  cudaStream_t reader = dev.create_stream();
  cudaStream_t freer = dev.create_stream();
  constexpr std::size_t n = 256;
  auto* d = static_cast<float*>(dev.allocate(n * sizeof(float)));
  auto* h = static_cast<float*>(dev.allocate(n * sizeof(float), zenflow::emulated_memory::pinned));
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.launch(reader, [opened] { opened.wait(); }); // the copy below waits behind it
  dev.copy(h, d, n * sizeof(float), copy_direction::device_to_host, reader);
  dev.free_async(d, freer); // nothing orders it after the reader's copy
  dev.synchronize_stream(freer);
  EXPECT_TRUE(std::isnan(d[0])) << "freed memory is poisoned (a kernel reading it sees NaN)";
  gate.set_value();
  try {
    dev.synchronize_stream(reader);
    FAIL() << "a copy of freed memory went through";
  } catch (const zenflow::cuda_error& err) {
    EXPECT_EQ(err.code(), cudaErrorIllegalAddress);
    EXPECT_NE(std::string(err.what()).find("use after free"), std::string::npos) << err.what();
  }
  EXPECT_EQ(h[0], 0.0f); // the copy did not run
  EXPECT_EQ(dev.stats().use_after_free, 1u);
  ASSERT_EQ(dev.reports().size(), 1u);
  dev.free(h);
}

TEST(emulated_device_rules, a_copy_enqueued_after_a_free_is_detected) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  std::vector<float> host(64, 1.0f);
  const pinned_scope pin(dev, host);
  auto* d = static_cast<float*>(dev.allocate(host.size() * sizeof(float)));
  dev.free(d);
  dev.copy(d + 8, host.data(), 8 * sizeof(float), copy_direction::host_to_device, s); // stale pointer
  EXPECT_THROW(dev.synchronize_stream(s), zenflow::cuda_error);
  EXPECT_EQ(dev.stats().use_after_free, 1u);
}

TEST(emulated_device_rules, a_stream_or_event_destroyed_with_work_still_queued_is_reported) {
  emulated_device dev;
  cudaStream_t s = dev.create_stream();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> ran{false};
  dev.launch(s, [opened, &ran] {
    opened.wait();
    ran = true;
  });
  auto e = dev.create_event();
  dev.record(e, s);
  auto waited_on = dev.create_event();
  dev.record(waited_on, s);
  cudaStream_t t = dev.create_stream();
  dev.stream_wait(t, waited_on);
  auto kept = waited_on; // the waits keep the event's state alive; this handle is another copy
  dev.destroy_event(e);  // its record is still queued behind the busy body
  EXPECT_EQ(dev.stats().busy_destroys, 1u);
  dev.destroy_event(waited_on); // its record and a stream's wait on it are still queued
  EXPECT_EQ(dev.stats().busy_destroys, 2u);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gate.set_value();
  });
  dev.destroy_stream(s); // still busy: reported, then drained
  opener.join();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(dev.stats().busy_destroys, 3u);
  dev.synchronize_stream(t);
  dev.destroy_event(kept); // everything has run: not reported
  cudaStream_t idle = dev.create_stream();
  dev.destroy_stream(idle);
  EXPECT_EQ(dev.stats().busy_destroys, 3u);
  EXPECT_EQ(dev.reports().size(), 3u);
}

TEST(emulated_device_rules, the_legacy_null_stream_synchronises_with_every_other_stream) {
  for (const bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "legacy null stream" : "ordinary null stream");
    zenflow::emulated_rules rules;
    rules.legacy_null_stream = legacy;
    emulated_device dev({}, rules);
    cudaStream_t a = dev.create_stream();
    cudaStream_t b = dev.create_stream();
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    dev.launch(a, [opened] { opened.wait(); });
    std::atomic<bool> null_ran{false}, b_ran{false};
    dev.launch(nullptr, [&] { null_ran = true; }); // legacy: waits for `a`
    dev.launch(b, [&] { b_ran = true; });          // legacy: waits for the null stream's work
    if (!legacy) {
      dev.synchronize_stream(nullptr);
      dev.synchronize_stream(b);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(null_ran.load(), !legacy);
    EXPECT_EQ(b_ran.load(), !legacy);
    gate.set_value();
    dev.synchronize();
    EXPECT_TRUE(null_ran.load() && b_ran.load());
    EXPECT_EQ(dev.stats().legacy_syncs, legacy ? 2u : 0u);
  }
}

} // namespace
