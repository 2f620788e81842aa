// cpu tier for the pinned D2H ring: its protocol on the host backend (completion at once) and on
// async_host_backend (completion later, on another thread, like a copy engine), stressed with
// random delays on both sides; bad use; close and back-pressure.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/device.hpp>
#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/emulated_copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>

#include "async_host_backend.hpp"
#include "support/random.hpp"

namespace {

using zenflow::d2h_ring;
using zenflow::ring_meta;

// Independent reference: the payload of message `seq` is a function of (seed, seq) alone, so
// producer and consumer compute it separately.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::size_t payload_size(std::uint64_t seed, std::uint64_t seq, std::size_t slot_bytes) {
  return static_cast<std::size_t>(mix(seed ^ (seq * 3)) % (slot_bytes + 1));
}
std::byte payload_byte(std::uint64_t seed, std::uint64_t seq, std::size_t j) {
  return static_cast<std::byte>((mix(seed + seq) >> (8 * (j % 8))) + j * 131u);
}
std::vector<std::byte> payload(std::uint64_t seed, std::uint64_t seq, std::size_t slot_bytes) {
  std::vector<std::byte> v(payload_size(seed, seq, slot_bytes));
  for (std::size_t j = 0; j < v.size(); ++j) {
    v[j] = payload_byte(seed, seq, j);
  }
  return v;
}
bool payload_matches(std::uint64_t seed, std::uint64_t seq, const std::byte* p, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    if (p[j] != payload_byte(seed, seq, j)) {
      return false;
    }
  }
  return true;
}

void maybe_sleep(std::minstd_rand& rng, int max_us) {
  if (max_us > 0 && rng() % 3 == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<unsigned>(max_us)));
  }
}

template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// ---- d2h -----------------------------------------------------------------------------------

struct stress_result {
  std::uint64_t received = 0;
  std::uint64_t errors = 0;
  std::string first_error;
};

// Producer on this thread, consumer on another; every message checked for sequence, size,
// metadata and bytes, and re-checked after a hold (a slot overwritten while held is caught).
template <class Backend>
stress_result run_d2h_stress(Backend backend,
                             std::size_t slots,
                             std::size_t slot_bytes,
                             std::uint64_t messages,
                             std::uint64_t seed,
                             int producer_delay_us,
                             int consumer_delay_us) {
  // The "device" source of every message stays alive and unchanged until the end, as a device
  // buffer must while its copy may be in flight.
  std::vector<std::vector<std::byte>> src(messages);
  for (std::uint64_t i = 0; i < messages; ++i) {
    src[i] = payload(seed, i, slot_bytes);
  }
  d2h_ring<ring_meta, Backend> ring(slots, slot_bytes, backend);
  stress_result res;
  std::thread consumer([&] {
    std::minstd_rand rng(static_cast<unsigned>(seed + 1));
    std::uint64_t expect = 0;
    auto fail = [&](const std::string& what) {
      if (res.errors++ == 0) {
        res.first_error = what;
      }
    };
    while (auto r = ring.next()) {
      if (r->sequence != expect) {
        fail("sequence " + std::to_string(r->sequence) + " where " + std::to_string(expect) + " was due");
      }
      if (r->bytes != payload_size(seed, expect, slot_bytes)) {
        fail("size of " + std::to_string(expect));
      }
      if (r->meta.step != static_cast<std::int64_t>(expect) || r->meta.user != mix(expect) ||
          r->meta.matrix != static_cast<std::int32_t>(expect % 7)) {
        fail("metadata of " + std::to_string(expect));
      }
      if (!payload_matches(seed, expect, r->data, r->bytes)) {
        fail("bytes of " + std::to_string(expect));
      }
      maybe_sleep(rng, consumer_delay_us);
      if (!payload_matches(seed, expect, r->data, r->bytes)) {
        fail("slot of " + std::to_string(expect) + " overwritten while the consumer held it");
      }
      ring.release(*r);
      ++expect;
    }
    res.received = expect;
  });
  std::minstd_rand rng(static_cast<unsigned>(seed + 2));
  for (std::uint64_t i = 0; i < messages; ++i) {
    maybe_sleep(rng, producer_delay_us);
    ring_meta meta;
    meta.step = static_cast<std::int64_t>(i);
    meta.matrix = static_cast<std::int32_t>(i % 7);
    meta.user = mix(i);
    if (i % 2 == 0) {
      (void)ring.push(src[i].data(), src[i].size(), meta);
    } else { // the general path: acquire, enqueue the copy yourself, publish
      const auto w = ring.acquire();
      EXPECT_EQ(w.sequence, i);
      EXPECT_EQ(w.capacity, slot_bytes);
      backend.copy(w.data, src[i].data(), src[i].size(), zenflow::copy_direction::device_to_host, nullptr);
      ring.publish(w, src[i].size(), meta);
    }
  }
  ring.close();
  consumer.join();
  const auto st = ring.stats();
  EXPECT_EQ(st.transfers, messages);
  EXPECT_EQ(st.released, messages);
  EXPECT_LE(st.max_in_use, slots);
  std::uint64_t total = 0;
  for (const auto& s : src) {
    total += s.size();
  }
  EXPECT_EQ(st.bytes, total);
  return res;
}

TEST(d2h_ring, stress_host_backend_every_message_once_in_order) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (std::size_t slots : {1u, 2u, 3u, 8u}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    const auto r = run_d2h_stress(zenflow::host_copy_backend{}, slots, 200, 1500, seed + slots, 20, 20);
    EXPECT_EQ(r.received, 1500u);
    EXPECT_EQ(r.errors, 0u) << r.first_error;
  }
}

TEST(d2h_ring, stress_deferred_completion_every_message_once_in_order) {
  const std::uint64_t seed = zf_test::base_seed() + 100;
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (std::size_t slots : {1u, 2u, 5u}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    const auto r =
        run_d2h_stress(zf_test::async_host_backend(seed, 30), slots, 300, 1500, seed + slots, 15, 15);
    EXPECT_EQ(r.received, 1500u);
    EXPECT_EQ(r.errors, 0u) << r.first_error;
  }
}

// The same protocol over the emulated device: copies run on the device's stream threads with a
// modelled copy bandwidth (so a slot is published long before its bytes land) and jitter.
zenflow::emulated_timing slow_copies(std::uint64_t seed) {
  zenflow::emulated_timing t;
  t.d2h_bytes_per_second = 200e6; // a 300-byte slot takes ~1.5 us of "PCIe"
  t.h2d_bytes_per_second = 200e6;
  t.max_jitter = std::chrono::microseconds(40);
  t.jitter_seed = seed;
  return t;
}

TEST(d2h_ring, stress_emulated_device_every_message_once_in_order) {
  const std::uint64_t seed = zf_test::base_seed() + 300;
  SCOPED_TRACE(zf_test::seed_note(seed));
  for (std::size_t slots : {1u, 2u, 5u}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    zenflow::emulated_device device(slow_copies(seed + slots));
    const auto r =
        run_d2h_stress(zenflow::emulated_copy_backend(device), slots, 300, 1200, seed + slots, 15, 15);
    EXPECT_EQ(r.received, 1200u);
    EXPECT_EQ(r.errors, 0u) << r.first_error;
  }
}

TEST(d2h_ring, single_thread_protocol_and_metadata) {
  d2h_ring<> ring(2, 16);
  EXPECT_EQ(ring.slot_count(), 2u);
  EXPECT_EQ(ring.slot_bytes(), 16u);
  EXPECT_GE(ring.footprint_bytes(), 32u);
  EXPECT_EQ(ring.pinned(), zenflow::cuda_available());
  const char a[] = "hello ring";
  ring_meta m;
  m.step = 41;
  m.begin = 3;
  m.end = 9;
  EXPECT_EQ(ring.push(a, sizeof(a), m), 0u);
  m.step = 42;
  EXPECT_EQ(ring.push(a, 4, m), 1u);
  EXPECT_FALSE(ring.try_acquire().has_value()); // full: the consumer holds nothing, both published
  auto r0 = ring.try_next();
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(r0->sequence, 0u);
  EXPECT_EQ(r0->bytes, sizeof(a));
  EXPECT_EQ(std::memcmp(r0->data, a, sizeof(a)), 0);
  EXPECT_EQ(r0->meta.step, 41);
  EXPECT_EQ(r0->meta.begin, 3);
  EXPECT_EQ(r0->meta.end, 9);
  EXPECT_FALSE(ring.try_acquire().has_value()); // read but not released: still not reusable
  ring.release(*r0);
  auto w = ring.try_acquire();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->sequence, 2u);
  EXPECT_EQ(w->data, r0->data); // slot 0 again
  std::memcpy(w->data, "xyz", 3);
  m.step = 43;
  ring.publish(*w, 3, m);
  int seen = 0;
  while (ring.consume_next([&](const d2h_ring<>::read_slot& r) {
    EXPECT_EQ(r.meta.step, 42 + seen);
    EXPECT_EQ(r.sequence, 1u + static_cast<unsigned>(seen));
    ++seen;
    if (seen == 2) {
      ring.close();
    }
  })) {
  }
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(ring.stats().released, 3u);
}

TEST(d2h_ring, bad_use_is_rejected_naming_the_argument_and_changes_nothing) {
  using ring_t = d2h_ring<>;
  EXPECT_NE(thrown_message([] { ring_t r(0, 64); }).find("'slots'"), std::string::npos);
  EXPECT_NE(thrown_message([] { ring_t r(4, 0); }).find("'slot_bytes'"), std::string::npos);
  EXPECT_THROW(ring_t(0, 64), zenflow::invalid_argument);
  EXPECT_NE(thrown_message([] { ring_t r(2, std::size_t{1} << 62); }).find("'slot_bytes'"),
            std::string::npos);

  ring_t ring(2, 8);
  std::vector<std::byte> big(9, std::byte{1});
  const std::string too_big = thrown_message([&] { ring.push(big.data(), big.size(), {}); });
  EXPECT_NE(too_big.find("'bytes'"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("zenflow::d2h_ring::push"), std::string::npos) << too_big;
  EXPECT_NE(thrown_message([&] { ring.push(nullptr, 4, {}); }).find("'src'"), std::string::npos);
  EXPECT_EQ(ring.stats().transfers, 0u); // nothing published
  EXPECT_FALSE(ring.try_next().has_value());

  auto w = ring.acquire();
  EXPECT_EQ(w.sequence, 0u); // the rejected pushes acquired nothing
  std::memset(w.data, 7, 8);
  EXPECT_NE(thrown_message([&] { ring.publish(w, 9, {}); }).find("'bytes'"), std::string::npos);
  EXPECT_FALSE(ring.try_next().has_value()); // still not published
  auto forged = w;
  forged.sequence = 5;
  EXPECT_NE(thrown_message([&] { ring.publish(forged, 1, {}); }).find("'slot'"), std::string::npos);
  ring.publish(w, 8, {}); // the slot is still the producer's and publishes fine
  EXPECT_NE(thrown_message([&] { ring.publish(w, 8, {}); }).find("'slot'"), std::string::npos); // twice
  auto r = ring.next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, 8u);
  EXPECT_EQ(r->data[7], std::byte{7});
  ring.release(*r);
  EXPECT_NE(thrown_message([&] { ring.release(*r); }).find("'slot'"), std::string::npos); // twice

  ring_t one(1, 8);
  auto held = one.acquire();
  EXPECT_THROW((void)one.acquire(), std::logic_error); // would wait for itself
  one.publish(held, 0, {});
}

TEST(d2h_ring, back_pressure_blocks_the_producer_and_is_measured) {
  d2h_ring<> ring(2, 64);
  std::atomic<bool> consumer_started{false};
  std::thread consumer([&] {
    consumer_started = true;
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      auto r = ring.next();
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->sequence, static_cast<std::uint64_t>(i));
      ring.release(*r);
    }
  });
  const int payload_value = 5;
  for (int i = 0; i < 6; ++i) {
    (void)ring.push(&payload_value, sizeof(payload_value), {});
  }
  consumer.join();
  const auto st = ring.stats();
  EXPECT_GT(st.producer_blocked_ns, 0u); // 6 pushes into 2 slots against a slow consumer
  EXPECT_EQ(st.max_in_use, 2u);
  EXPECT_TRUE(consumer_started);
}

TEST(d2h_ring, close_wakes_a_blocked_producer_and_a_blocked_consumer) {
  {
    d2h_ring<> ring(1, 8);
    (void)ring.push("a", 1, {});
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ring.close(); // e.g. a consumer that failed
    });
    EXPECT_THROW((void)ring.acquire(), zenflow::ring_closed);
    closer.join();
    auto r = ring.next(); // what was published is still drained
    ASSERT_TRUE(r.has_value());
    ring.release(*r);
    EXPECT_FALSE(ring.next().has_value());
  }
  {
    d2h_ring<> ring(2, 8);
    std::thread producer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      (void)ring.push("b", 1, {});
      ring.close();
    });
    auto r = ring.next();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(static_cast<char>(r->data[0]), 'b');
    ring.release(*r);
    EXPECT_FALSE(ring.next().has_value());
    producer.join();
    EXPECT_TRUE(ring.closed());
    EXPECT_THROW((void)ring.acquire(), zenflow::ring_closed);
  }
}

TEST(d2h_ring, consume_next_releases_when_the_consumer_throws) {
  d2h_ring<> ring(1, 8);
  (void)ring.push("x", 1, {});
  EXPECT_THROW(ring.consume_next([](const auto&) { throw std::runtime_error("consumer failed"); }),
               std::runtime_error);
  EXPECT_TRUE(ring.try_acquire().has_value()); // the slot came back
}

TEST(d2h_ring, destructor_waits_for_copies_in_flight) {
  const std::uint64_t seed = zf_test::base_seed() + 7;
  zf_test::async_host_backend backend(seed, 200);
  std::vector<std::byte> src(4096, std::byte{3});
  {
    d2h_ring<ring_meta, zf_test::async_host_backend> ring(4, 4096, backend);
    for (int i = 0; i < 4; ++i) {
      (void)ring.push(src.data(), src.size(), {});
    }
  } // nobody consumed: the slots' copies must be over before the memory goes
  EXPECT_EQ(backend.pending(), 0u);
}

TEST(d2h_ring, cuda_backend_without_a_device_fails_at_construction) {
  if (zenflow::cuda_available()) {
    GTEST_SKIP() << "a device is present: covered by the gpu tests";
  }
  using ring_t = d2h_ring<ring_meta, zenflow::cuda_copy_backend>;
  EXPECT_THROW(ring_t(2, 64), zenflow::cuda_error);
  EXPECT_THROW(zenflow::copy_stream<zenflow::cuda_copy_backend>{}, zenflow::cuda_error);
}

TEST(copy_stream, host_backend_orders_nothing_and_never_fails) {
  zenflow::copy_stream<> cs;
  EXPECT_EQ(cs.get(), nullptr);
  cs.wait_for(nullptr);
  cs.join_into(nullptr);
  cs.synchronize();
  zf_test::async_host_backend backend(zf_test::base_seed(), 100);
  zenflow::copy_stream<zf_test::async_host_backend> acs(backend);
  std::vector<int> a(1000, 4), b(1000, 0);
  backend.copy(b.data(), a.data(), a.size() * sizeof(int), zenflow::copy_direction::host_to_device, acs);
  acs.synchronize(); // waits for the deferred copy
  EXPECT_EQ(b[999], 4);
}

} // namespace
