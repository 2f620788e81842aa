// Host-side transport benchmarks: the window queue's handoff latency, the d2h ring's throughput
// on the host backend (producer and consumer on two threads) against plain memcpy measured in the
// same run, and the worker pool's dispatch cost.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/transport/pinned_ring.hpp>
#include <zenflow/transport/window_queue.hpp>

#include "support/harness.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Round trip: submit an empty job and wait until it has been applied (what a bound-1 window
// boundary costs when the host is already done), and the one-way latency until the job starts.
void queue_handoff_latency(benchmark::State& state) {
  zenflow::window_queue q(1);
  std::atomic<std::int64_t> started_ns{0};
  double one_way_total = 0;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    const auto w = q.submit([&] {
      started_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count(),
                       std::memory_order_relaxed);
    });
    q.wait_applied(w);
    one_way_total += static_cast<double>(started_ns.load(std::memory_order_relaxed));
  }
  state.counters["one_way_us"] = benchmark::Counter(
      one_way_total * 1e-3 / static_cast<double>(std::max<std::int64_t>(state.iterations(), 1)));
  state.counters["stall_ms_total"] = static_cast<double>(q.stats().stall_ns) * 1e-6;
}
BENCHMARK(queue_handoff_latency)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Bytes through a d2h ring on the host backend: the producer copies from a "device" buffer into
// the slots (memcpy), the consumer copies each slot out into an accumulator-sized buffer, as the
// host side of ZenFlow does. Baseline in the same run: the same two copies back to back on one
// thread (what the ring pipelines over two threads).
void ring_throughput_host(benchmark::State& state) {
  const auto slot_bytes = static_cast<std::size_t>(state.range(0));
  const auto slots = static_cast<std::size_t>(state.range(1));
  const std::size_t total = std::size_t{64} << 20;
  const std::size_t chunks = total / slot_bytes;
  std::vector<std::byte> src(total, std::byte{1}), dst(total, std::byte{0});

  const auto b0 = clock_type::now();
  std::vector<std::byte> stage(slot_bytes);
  for (std::size_t c = 0; c < chunks; ++c) {
    std::memcpy(stage.data(), src.data() + c * slot_bytes, slot_bytes);
    std::memcpy(dst.data() + c * slot_bytes, stage.data(), slot_bytes);
  }
  const double baseline_bps = static_cast<double>(total) / seconds_since(b0);

  zenflow::d2h_ring<> ring(slots, slot_bytes);
  double ring_seconds = 0;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    std::thread consumer([&] {
      for (std::size_t c = 0; c < chunks; ++c) {
        auto r = ring.next();
        std::memcpy(dst.data() + r->meta.begin, r->data, r->bytes);
        ring.release(*r);
      }
    });
    for (std::size_t c = 0; c < chunks; ++c) {
      zenflow::ring_meta m;
      m.begin = static_cast<std::int64_t>(c * slot_bytes);
      (void)ring.push(src.data() + c * slot_bytes, slot_bytes, m);
    }
    consumer.join();
    ring_seconds += seconds_since(t0);
  }
  benchmark::DoNotOptimize(dst.data());
  zf_bench::set_bytes_per_iteration(state, static_cast<double>(total));
  const auto st = ring.stats();
  const double ring_bps = static_cast<double>(total) * static_cast<double>(state.iterations()) / ring_seconds;
  state.counters["baseline_GBps"] = baseline_bps / 1e9;
  state.counters["fraction_of_baseline"] = ring_bps / baseline_bps;
  state.counters["producer_blocked_ms"] = benchmark::Counter(
      static_cast<double>(st.producer_blocked_ns) * 1e-6, benchmark::Counter::kAvgIterations);
  state.counters["consumer_wait_ms"] =
      benchmark::Counter(static_cast<double>(st.consumer_wait_ns) * 1e-6, benchmark::Counter::kAvgIterations);
}
BENCHMARK(ring_throughput_host)
    ->ArgsProduct({{64 << 10, 1 << 20, 4 << 20}, {2, 8}})
    ->ArgNames({"slot_bytes", "slots"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Cost of one parallel_for dispatch (empty chunks, one per thread): the floor under every
// multithreaded host kernel.
void worker_pool_dispatch(benchmark::State& state) {
  zenflow::worker_pool pool(static_cast<unsigned>(state.range(0)));
  const std::int64_t chunks = pool.size();
  std::atomic<std::int64_t> sink{0};
  for (auto _ : state) {
    pool.parallel_for(chunks, 1, [&](std::int64_t c, std::int64_t, std::int64_t) {
      sink.fetch_add(c, std::memory_order_relaxed);
    });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(worker_pool_dispatch)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same after the workers fell asleep (1 ms idle before each call, past their spin): the
// caller may run every chunk itself and must not wait for sleeping workers to check in.
void worker_pool_dispatch_after_idle(benchmark::State& state) {
  zenflow::worker_pool pool(static_cast<unsigned>(state.range(0)));
  const std::int64_t chunks = pool.size();
  std::atomic<std::int64_t> sink{0};
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(chunks, 1, [&](std::int64_t c, std::int64_t, std::int64_t) {
      sink.fetch_add(c, std::memory_order_relaxed);
    });
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(worker_pool_dispatch_after_idle)->Arg(2)->Arg(4)->Unit(benchmark::kMicrosecond)->UseManualTime();

} // namespace
