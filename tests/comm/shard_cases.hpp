// The shard helpers' test bodies, written once over a communicator kind and run on one rank
// (shard_test.cpp: local_communicator) and under mpiexec -np 2 and 3 (mpi_shard_test.cpp:
// mpi_communicator), each on the host communicator itself (blocking) and behind
// emulated_device_communicator (stream-ordered on an emulated device, read after the stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/partition.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/comm/shard_prefetcher.hpp>
#include <zenflow/core/emulated_device.hpp>

#include "shard_test_support.hpp"

namespace zf_shard_test {

/// The host communicator itself: every call complete when it returns.
template <class Make>
struct host_kind {
  using base_type = decltype(Make::make());
  base_type comm = Make::make();
  base_type& host() { return comm; }
  [[nodiscard]] cudaStream_t stream() const { return nullptr; }
  void finish() {}
  void run(const std::function<void()>& f) { f(); }
};

/// The host communicator behind emulated_device_communicator: calls enqueue on a stream of an
/// emulated device; results are read after finish().
template <class Make>
struct emulated_kind {
  using base_type = decltype(Make::make());
  zenflow::emulated_device device;
  zenflow::emulated_device_communicator<base_type> comm{device, Make::make()};
  cudaStream_t s = device.create_stream();
  emulated_kind() = default;
  emulated_kind(const emulated_kind&) = delete;
  emulated_kind& operator=(const emulated_kind&) = delete;
  ~emulated_kind() { device.destroy_stream(s); }
  base_type& host() { return comm.wrapped(); } // used only when the stream is idle
  [[nodiscard]] cudaStream_t stream() const { return s; }
  void finish() { device.synchronize_stream(s); }
  void run(const std::function<void()>& f) { device.launch(s, f); }
};

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one with \"" << needle << "\"";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// The shards are the owner partition's blocks: contiguous, in rank order, covering each channel
/// once; holder() names the rank whose block holds a channel.
inline void check_rule(const std::vector<zenflow::shard_matrix>& list, int ranks) {
  const auto layout = zenflow::shard_channels(list, ranks);
  std::vector<zenflow::partition_matrix> plist;
  for (const auto& s : list) {
    plist.push_back({s.channels, static_cast<std::uint64_t>(s.channel_len) * s.state_bytes});
  }
  const auto owners = zenflow::partition_channels(plist, ranks);
  ASSERT_EQ(layout.ranks(), ranks);
  ASSERT_EQ(layout.matrices(), list.size());
  for (std::size_t m = 0; m < list.size(); ++m) {
    std::vector<int> seen(static_cast<std::size_t>(list[m].channels), 0);
    std::int64_t next = 0;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(layout.first(m, r), owners.begin(m, r)) << "matrix " << m << " rank " << r;
      EXPECT_EQ(layout.count(m, r), owners.count(m, r)) << "matrix " << m << " rank " << r;
      EXPECT_EQ(layout.first(m, r), next) << "matrix " << m << " rank " << r; // rank order, no gap
      EXPECT_EQ(layout.shard_elements(m, r),
                static_cast<std::size_t>(layout.count(m, r) * list[m].channel_len));
      for (std::int64_t c = layout.first(m, r); c < layout.first(m, r) + layout.count(m, r); ++c) {
        ASSERT_LT(c, list[m].channels);
        seen[static_cast<std::size_t>(c)] += 1;
        EXPECT_EQ(layout.holder(m, c), r);
      }
      next = layout.first(m, r) + layout.count(m, r);
    }
    for (std::size_t c = 0; c < seen.size(); ++c) {
      EXPECT_EQ(seen[c], 1) << "matrix " << m << " channel " << c;
    }
  }
}

/// Each rank's shard of every matrix equals, bit for bit, its rows of the float64 reference mean
/// and of the engine's mean (row copies + all_reduce_mean), in either layout, with the matrices'
/// padding untouched; fp32, bf16 and fp16.
template <class T, class Kind>
void reduce_scatter_case(Kind& k, int test) {
  auto& comm = k.comm;
  const int N = comm.size();
  const int me = comm.rank();
  const auto list = sample_list();
  const auto layout = zenflow::shard_channels(list, N);
  layout.verify_same(comm, k.stream());
  std::vector<float> staging(zenflow::shard_staging_floats(layout, me));
  for (std::size_t m = 0; m < list.size(); ++m) {
    SCOPED_TRACE("matrix " + std::to_string(m) + ", " + zf_test::seed_note(seed_of(me, test, m)));
    const auto& s = list[m];
    const auto grad_layout = m % 2 == 1 ? channel_layout::strided : channel_layout::contiguous;
    const auto shard_layout = m % 3 == 2 ? channel_layout::strided : channel_layout::contiguous;
    std::vector<padded_matrix<T>> every;
    for (int r = 0; r < N; ++r) {
      every.push_back(grads_of<T>(r, test, m, s, grad_layout));
    }
    const auto& mine = every[static_cast<std::size_t>(me)];
    padded_matrix<T> shard(layout.count(m, me), s.channel_len, shard_layout, 7.25f);
    zenflow::reduce_scatter_shard<T>(comm, layout, m, mine.cview(), shard.view, staging, k.stream());
    k.finish();
    padded_matrix<T> engine(s.channels, s.channel_len, channel_layout::contiguous, 0.0f);
    engine_mean<T>(k.host(), mine.cview(), engine.view);
    const std::int64_t first = layout.first(m, me);
    for (std::int64_t c = 0; c < shard.view.channels; ++c) {
      for (std::int64_t i = 0; i < s.channel_len; ++i) {
        const T got = shard.view(c, i);
        ASSERT_TRUE(same_bits(got, reference_mean(every, first + c, i)))
            << "channel " << first + c << " element " << i << ": " << zenflow::to_float(got) << " vs "
            << zenflow::to_float(reference_mean(every, first + c, i));
        ASSERT_TRUE(same_bits(got, engine.view(first + c, i))) << "channel " << first + c << " element " << i;
      }
    }
    EXPECT_TRUE(padding_intact(shard, 7.25f));
  }
}

/// Every rank's packed shard gathered into the full matrix: each channel is its holder's row, bit
/// for bit; also in place (the shard at this rank's block of the full matrix).
template <class T, class Kind>
void all_gather_case(Kind& k, int test) {
  auto& comm = k.comm;
  const int N = comm.size();
  const int me = comm.rank();
  const auto list = sample_list();
  const auto layout = zenflow::shard_channels(list, N);
  for (std::size_t m = 0; m < list.size(); ++m) {
    SCOPED_TRACE("matrix " + std::to_string(m));
    const auto& s = list[m];
    std::vector<std::vector<T>> shards;
    for (int r = 0; r < N; ++r) {
      shards.push_back(values<T>(seed_of(r, test, m), layout.shard_elements(m, r)));
    }
    const auto& mine = shards[static_cast<std::size_t>(me)];
    const auto elements = static_cast<std::size_t>(s.channels * s.channel_len);
    std::vector<T> full(elements + 1, zenflow::from_float<T>(3.5f));
    std::vector<T> in_place(elements + 1, zenflow::from_float<T>(3.5f));
    const std::int64_t first = layout.first(m, me);
    std::copy(mine.begin(), mine.end(), in_place.begin() + first * s.channel_len);
    zenflow::all_gather_shard<T>(
        comm, layout, m,
        zenflow::make_channel_matrix<const T>(mine.data(), layout.count(m, me), s.channel_len),
        zenflow::make_channel_matrix(full.data(), s.channels, s.channel_len), k.stream());
    zenflow::all_gather_shard<T>(
        comm, layout, m,
        zenflow::make_channel_matrix<const T>(in_place.data() + first * s.channel_len, layout.count(m, me),
                                              s.channel_len),
        zenflow::make_channel_matrix(in_place.data(), s.channels, s.channel_len), k.stream());
    k.finish();
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const int r = layout.holder(m, c);
      for (std::int64_t i = 0; i < s.channel_len; ++i) {
        const T want = shards[static_cast<std::size_t>(r)]
                             [static_cast<std::size_t>((c - layout.first(m, r)) * s.channel_len + i)];
        const auto e = static_cast<std::size_t>(c * s.channel_len + i);
        ASSERT_TRUE(same_bits(full[e], want)) << "channel " << c << " element " << i;
        ASSERT_TRUE(same_bits(in_place[e], want)) << "in place: channel " << c << " element " << i;
      }
    }
    EXPECT_TRUE(same_bits(full[elements], zenflow::from_float<T>(3.5f)));
    EXPECT_TRUE(same_bits(in_place[elements], zenflow::from_float<T>(3.5f)));
  }
}

/// A prefetcher over layers of mixed types: a forward pass in order (each layer's buffer copied
/// out in stream order, as a layer's compute would read it), then, after the shards change and
/// invalidate(), a backward pass in reverse order with the previous layer prefetched: every copy
/// is the concatenation of the shards current at the time.
template <class Kind>
void prefetcher_case(Kind& k, int test) {
  auto& comm = k.comm;
  const int N = comm.size();
  const int me = comm.rank();
  const auto list = sample_list();
  const auto layout = zenflow::shard_channels(list, N);
  const zenflow::dtype types[] = {zenflow::dtype::f32, zenflow::dtype::bf16, zenflow::dtype::f16};
  // Every rank's shard bytes of every layer (random bits: the gather moves bytes), for a round.
  auto shard_bytes = [&](int r, std::size_t m, int round) {
    const std::size_t n = layout.shard_elements(m, r) * zenflow::dtype_size(types[m % 3]);
    const auto v = values<float>(seed_of(r, test + round, m), (n + 3) / 4);
    std::vector<std::byte> b(n);
    if (n > 0) {
      std::memcpy(b.data(), v.data(), n);
    }
    return b;
  };
  std::vector<std::vector<std::byte>> mine(list.size());
  std::vector<zenflow::shard_gather_layer> layers;
  for (std::size_t m = 0; m < list.size(); ++m) {
    mine[m] = shard_bytes(me, m, 0);
    layers.push_back({m, mine[m].data(), types[m % 3]});
  }
  zenflow::shard_prefetcher<std::remove_reference_t<decltype(comm)>> pre(comm, layout, layers);
  EXPECT_EQ(pre.layers(), list.size());
  auto expected = [&](std::size_t m, int round) {
    std::vector<std::byte> full;
    for (int r = 0; r < N; ++r) {
      const auto b = shard_bytes(r, m, round);
      full.insert(full.end(), b.begin(), b.end());
    }
    return full;
  };
  std::vector<std::vector<std::byte>> seen(list.size());
  auto read = [&](std::size_t m, const void* p) {
    const std::size_t n =
        static_cast<std::size_t>(list[m].channels * list[m].channel_len) * zenflow::dtype_size(types[m % 3]);
    seen[m].assign(n, std::byte{0x5a});
    auto* dst = seen[m].data();
    k.run([dst, p, n] {
      if (n > 0) {
        std::memcpy(dst, p, n);
      }
    });
  };
  for (std::size_t m = 0; m < list.size(); ++m) {
    read(m, pre.acquire(m, k.stream()));
  }
  k.finish();
  for (std::size_t m = 0; m < list.size(); ++m) {
    EXPECT_EQ(seen[m], expected(m, 0)) << "forward, layer " << m;
  }
  // The shards change (an optimizer step), then a backward pass.
  for (std::size_t m = 0; m < list.size(); ++m) {
    const auto b = shard_bytes(me, m, 1);
    std::copy(b.begin(), b.end(), mine[m].begin());
  }
  pre.invalidate();
  for (std::size_t m = list.size(); m-- > 0;) {
    read(m, pre.acquire(m, k.stream(), m > 0 ? m - 1 : pre.none));
  }
  k.finish();
  for (std::size_t m = 0; m < list.size(); ++m) {
    EXPECT_EQ(seen[m], expected(m, 1)) << "backward, layer " << m;
  }
}

/// Bad arguments throw naming the argument on every rank (each rank makes the same mistake, so no
/// rank enters a collective), and write nothing; the communicator stays in step. A rank whose
/// list differs makes verify_same throw on every rank.
template <class Kind>
void bad_arguments_case(Kind& k) {
  auto& comm = k.comm;
  const int N = comm.size();
  const int me = comm.rank();
  const auto list = sample_list();
  const auto layout = zenflow::shard_channels(list, N);
  const std::size_t m = 4;
  const auto& s = list[m];
  auto grads = grads_of<float>(me, 90, m, s, channel_layout::contiguous);
  padded_matrix<float> wrong(layout.count(m, me) + 1, s.channel_len, channel_layout::contiguous, 7.25f);
  padded_matrix<float> right(layout.count(m, me), s.channel_len, channel_layout::contiguous, 7.25f);
  std::vector<float> staging(zenflow::shard_staging_floats(layout, m, me), -1.0f);
  const std::vector<float> staging_before = staging;
  expect_invalid(
      [&] {
        zenflow::reduce_scatter_shard<float>(comm, layout, m, grads.cview(), wrong.view, staging, k.stream());
      },
      "zenflow::reduce_scatter_shard: argument 'shard.channels' is " +
          std::to_string(layout.count(m, me) + 1));
  expect_invalid(
      [&] {
        zenflow::reduce_scatter_shard<float>(comm, layout, m, grads.cview(), right.view,
                                             std::span<float>(staging).first(staging.size() - 1), k.stream());
      },
      "argument 'staging' holds");
  expect_invalid(
      [&] {
        zenflow::reduce_scatter_shard<float>(comm, layout, 99, grads.cview(), right.view, staging,
                                             k.stream());
      },
      "argument 'matrix' is 99");
  auto narrow_grads = grads.cview();
  narrow_grads.channel_len -= 1;
  expect_invalid(
      [&] {
        zenflow::reduce_scatter_shard<float>(comm, layout, m, narrow_grads, right.view, staging, k.stream());
      },
      "argument 'grads.channel_len'");
  const auto other = zenflow::shard_channels(list, N + 1);
  expect_invalid(
      [&] {
        zenflow::reduce_scatter_shard<float>(comm, other, m, grads.cview(), right.view, staging, k.stream());
      },
      "argument 'layout' was built for " + std::to_string(N + 1) + " ranks");
  std::vector<float> full(static_cast<std::size_t>(s.channels * s.channel_len), 2.0f);
  const auto padded_full = grads.view; // ld = channel_len + 3: not packed
  expect_invalid(
      [&] {
        zenflow::all_gather_shard<float>(comm, layout, m,
                                         zenflow::make_channel_matrix<const float>(
                                             right.storage.data(), layout.count(m, me), s.channel_len),
                                         padded_full, k.stream());
      },
      "argument 'full' must be packed");
  if (layout.count(m, me) > 0 && N > 1) {
    // The shard inside `full`, but not at this rank's block.
    const std::int64_t off = layout.first(m, me) == 0 ? 1 : 0;
    expect_invalid(
        [&] {
          zenflow::all_gather_shard<float>(
              comm, layout, m,
              zenflow::make_channel_matrix<const float>(full.data() + off * s.channel_len,
                                                        layout.count(m, me), s.channel_len),
              zenflow::make_channel_matrix(full.data(), s.channels, s.channel_len), k.stream());
        },
        "argument 'shard' overlaps 'full'");
  }
  expect_invalid([&] { (void)zenflow::shard_channels(list, 0); }, "argument 'ranks' is 0");
  auto bad_list = list;
  bad_list[2].channel_len = 0;
  expect_invalid([&] { (void)zenflow::shard_channels(bad_list, N); },
                 "argument 'matrices[2].channel_len' is 0");
  bad_list = list;
  bad_list[1].channels = -3;
  expect_invalid([&] { (void)zenflow::shard_channels(bad_list, N); },
                 "argument 'matrices[1].channels' is negative");
  bad_list = list;
  bad_list[3].state_bytes = 0;
  expect_invalid([&] { (void)zenflow::shard_channels(bad_list, N); },
                 "argument 'matrices[3].state_bytes' is 0");
  expect_invalid([&] { other.verify_same(comm, k.stream()); },
                 "zenflow::shard_layout::verify_same: argument 'comm'");
  std::vector<zenflow::shard_gather_layer> bad_layers = {{list.size(), nullptr, zenflow::dtype::f32}};
  expect_invalid(
      [&] { zenflow::shard_prefetcher<std::remove_reference_t<decltype(comm)>> p(comm, layout, bad_layers); },
      "argument 'layers[0].matrix' is " + std::to_string(list.size()));
  k.finish();
  EXPECT_TRUE(padding_intact(wrong, 7.25f));
  EXPECT_TRUE(padding_intact(right, 7.25f));
  for (const auto* mat : {&wrong, &right}) {
    for (std::int64_t c = 0; c < mat->view.channels; ++c) {
      for (std::int64_t i = 0; i < s.channel_len; ++i) {
        ASSERT_EQ(mat->view(c, i), 7.25f);
      }
    }
  }
  EXPECT_EQ(staging, staging_before);
  EXPECT_EQ(full, std::vector<float>(full.size(), 2.0f));
  // The last rank registers one more matrix: verify_same throws on every rank.
  if (N > 1) {
    auto longer = list;
    if (me == N - 1) {
      longer.push_back({4, 4, 12});
    }
    expect_invalid([&] { zenflow::shard_channels(longer, N).verify_same(comm, k.stream()); },
                   "the sharded matrix list differs across ranks");
  }
  // Still in step: a good call after the errors gives the mean.
  zenflow::reduce_scatter_shard<float>(comm, layout, m, grads.cview(), right.view, staging, k.stream());
  k.finish();
  std::vector<padded_matrix<float>> every;
  for (int r = 0; r < N; ++r) {
    every.push_back(grads_of<float>(r, 90, m, s, channel_layout::contiguous));
  }
  for (std::int64_t c = 0; c < right.view.channels; ++c) {
    for (std::int64_t i = 0; i < s.channel_len; ++i) {
      ASSERT_TRUE(same_bits(right.view(c, i), reference_mean(every, layout.first(m, me) + c, i)));
    }
  }
}

} // namespace zf_shard_test
