// emulated_device_communicator over one rank (local_communicator): its collectives run in stream
// order on the emulated device (after the work enqueued before them, never when called), a bad
// argument throws naming it on the calling thread and enqueues nothing, and a failure where the
// collective runs becomes the device's sticky error. The multi-rank path runs under mpiexec in
// tests/engine/data_parallel_mpi_test.cpp (the engine over MPI behind this wrapper).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/comm/emulated_device_communicator.hpp>
#include <zenflow/comm/local_communicator.hpp>
#include <zenflow/core/emulated_device.hpp>

#include "support/random.hpp"

namespace {

using comm_type = zenflow::emulated_device_communicator<zenflow::local_communicator>;

static_assert(zenflow::communicator<comm_type>);
static_assert(comm_type::is_device && zenflow::emulates_device_memory<comm_type>);
static_assert(!zenflow::emulates_device_memory<zenflow::local_communicator>);

template <class F>
void expect_invalid(F&& f, const std::string& argument) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << argument << "'";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + argument + "'"), std::string::npos) << e.what();
  }
}

// A kernel that writes `values` into `dst` late (after a sleep): a collective enqueued after it must
// see what it wrote, which only stream order guarantees.
void write_late(zenflow::emulated_device& device,
                cudaStream_t s,
                float* dst,
                const std::vector<float>& values) {
  device.launch(s, [dst, values] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::memcpy(dst, values.data(), values.size() * sizeof(float));
  });
}

TEST(emulated_device_communicator, a_gather_runs_after_the_work_before_it_on_the_stream) {
  zenflow::emulated_device device;
  const cudaStream_t s = device.create_stream();
  comm_type comm(device, zenflow::local_communicator{});
  const auto values = zf_test::random_values<float>(257, 11, 2.0f);
  std::vector<float> src(values.size(), -1.0f);
  std::vector<float> dst(values.size(), -2.0f);
  write_late(device, s, src.data(), values);
  const std::size_t counts[] = {values.size() * sizeof(float)};
  comm.all_gather_bytes(src.data(), dst.data(), counts, s);
  device.synchronize_stream(s);
  EXPECT_EQ(std::memcmp(dst.data(), values.data(), values.size() * sizeof(float)), 0);
}

TEST(emulated_device_communicator, a_reduce_scatter_runs_in_stream_order) {
  zenflow::emulated_device device;
  const cudaStream_t s = device.create_stream();
  comm_type comm(device, zenflow::local_communicator{});
  const auto values = zf_test::random_values<float>(100, 12, 2.0f);
  std::vector<float> send(values.size(), 0.5f);
  std::vector<float> recv(values.size(), 0.0f);
  write_late(device, s, send.data(), values);
  const std::size_t counts[] = {values.size()};
  comm.reduce_scatter_mean(send.data(), recv.data(), counts, s); // one rank: the mean is the value
  device.synchronize_stream(s);
  EXPECT_EQ(std::memcmp(recv.data(), values.data(), values.size() * sizeof(float)), 0);
}

TEST(emulated_device_communicator, bad_arguments_throw_before_anything_is_enqueued) {
  zenflow::emulated_device device;
  const cudaStream_t s = device.create_stream();
  device.set_tracing(true);
  comm_type comm(device, zenflow::local_communicator{});
  std::vector<float> buf(8, 1.0f);
  const std::size_t two[] = {4, 4}; // two ranks' counts on a one-rank communicator
  expect_invalid([&] { comm.all_reduce_mean(nullptr, 8, s); }, "buf");
  expect_invalid([&] { comm.reduce_scatter_sum(buf.data(), buf.data() + 4, two, s); }, "counts");
  const std::size_t one[] = {8};
  expect_invalid([&] { comm.reduce_scatter_mean(nullptr, buf.data(), one, s); }, "send");
  expect_invalid([&] { comm.all_gather_bytes(buf.data(), nullptr, one, s); }, "recv");
  expect_invalid([&] { comm.broadcast_bytes(buf.data(), 32, 1, s); }, "root");
  device.synchronize_stream(s);
  EXPECT_TRUE(device.trace().empty()); // nothing ran
  EXPECT_EQ(buf, std::vector<float>(8, 1.0f));
}

// A host communicator whose float sum fails as a lost rank would (comm_timeout) when it runs.
struct timing_out_communicator : zenflow::local_communicator {
  using zenflow::local_communicator::all_reduce_sum;
  void all_reduce_sum(float*, std::size_t, cudaStream_t) const {
    throw zenflow::comm_timeout("rank 1 is gone");
  }
};

TEST(emulated_device_communicator, a_failure_where_it_runs_is_the_devices_sticky_error) {
  zenflow::emulated_device device;
  const cudaStream_t s = device.create_stream();
  zenflow::emulated_device_communicator<timing_out_communicator> comm(device, {});
  std::vector<float> buf(16, 1.0f);
  comm.all_reduce_sum(buf.data(), buf.size(), s); // enqueued: no error yet
  EXPECT_THROW(device.synchronize_stream(s), zenflow::comm_timeout);
  EXPECT_THROW(device.synchronize_stream(s), zenflow::comm_timeout); // sticky
}

} // namespace
