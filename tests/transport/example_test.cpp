// The transport classes together, in the shape of ZenFlow's overlapped step, on the host
// backend: gradients go down through a d2h ring every step, a host job per window (staleness
// bound 1) folds them into fp32 masters and copies the new weights up on a copy stream of their
// own, and the training thread applies them at the next boundary, ordered after that copy. The result must be
// bit-identical to a serial simulation of the same schedule, whatever the timing. The part
// between the example markers is quoted in docs/transport.md.
#include <chrono>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/transport/copy_backend.hpp>
#include <zenflow/transport/pinned_ring.hpp>
#include <zenflow/transport/window_queue.hpp>

#include "support/random.hpp"

namespace {

TEST(transport_example, overlapped_windows_match_a_serial_schedule_bit_for_bit) {
  const std::uint64_t seed = zf_test::base_seed() + 300;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::size_t n = 257;      // parameters
  const int steps_per_window = 3; // S
  const int windows = 40;
  const float lr = 0.05f;
  const auto target = zf_test::random_values<float>(n, seed);
  std::minstd_rand jitter(static_cast<unsigned>(seed));
  auto sometimes_slow = [&](std::minstd_rand& rng) {
    if (rng() % 4 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    }
  };
  std::minstd_rand job_jitter(static_cast<unsigned>(seed + 1));

  // example-begin transport-loop
  // "Device" memory: on the host backend device pointers are host pointers.
  std::vector<float> weight(n, 0.0f), grad(n), upload(n);
  std::vector<float> master(n, 0.0f), staged(n); // host: fp32 masters, new weights (pinned on a GPU)

  zenflow::d2h_ring<> grads(4, n * sizeof(float)); // >= chunks per window: the job drains them
  zenflow::host_copy_backend copier;               // cuda_copy_backend on a GPU
  zenflow::copy_stream<> uploads(copier);          // the uploads' own stream
  zenflow::window_queue jobs(1);                   // device at most one window ahead

  for (int w = 0; w < windows; ++w) {
    for (int s = 0; s < steps_per_window; ++s) {
      for (std::size_t i = 0; i < n; ++i) { // the backward pass
        grad[i] = weight[i] - target[i];
      }
      zenflow::ring_meta meta;
      meta.step = w * steps_per_window + s;
      (void)grads.push(grad.data(), n * sizeof(float), meta); // D2H on a copy stream
    }
    // Window boundary: apply job w-1's weights (a stall only if it is not done), submit job w.
    if (w > 0) {
      jobs.wait_applied(w - 1);
      uploads.join_into(nullptr); // the device waits for the upload, not the host
      std::memcpy(weight.data(), upload.data(), n * sizeof(float));
    }
    jobs.submit([&] {
      std::vector<float> acc(n, 0.0f);
      for (int s = 0; s < steps_per_window; ++s) {
        grads.consume_next([&](const zenflow::d2h_ring<>::read_slot& slot) {
          const auto* g = reinterpret_cast<const float*>(slot.data);
          for (std::size_t i = 0; i < n; ++i) {
            acc[i] += g[i];
          }
        });
      }
      sometimes_slow(job_jitter); // a host that is slow sometimes changes the stall, not the result
      uploads.synchronize();      // the previous window's upload has read `staged`
      for (std::size_t i = 0; i < n; ++i) {
        master[i] -= lr * acc[i] / static_cast<float>(steps_per_window);
        staged[i] = master[i];
      }
      copier.copy(upload.data(), staged.data(), n * sizeof(float), zenflow::copy_direction::host_to_device,
                  uploads); // H2D on the copy stream
    });
    sometimes_slow(jitter);
  }
  jobs.drain();
  uploads.join_into(nullptr);
  std::memcpy(weight.data(), upload.data(), n * sizeof(float));
  // example-end transport-loop

  // Serial simulation of the same schedule: job w sees window w's gradients, its weights take
  // effect at the end of window w + 1.
  std::vector<float> ref_w(n, 0.0f), ref_m(n, 0.0f), ref_up(n, 0.0f);
  for (int w = 0; w < windows; ++w) {
    std::vector<float> acc(n, 0.0f);
    for (int s = 0; s < steps_per_window; ++s) {
      for (std::size_t i = 0; i < n; ++i) {
        acc[i] += ref_w[i] - target[i];
      }
    }
    if (w > 0) {
      ref_w = ref_up;
    }
    for (std::size_t i = 0; i < n; ++i) {
      ref_m[i] -= lr * acc[i] / static_cast<float>(steps_per_window);
    }
    ref_up = ref_m;
  }
  ref_w = ref_up;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(weight[i], ref_w[i]) << i;
  }
  EXPECT_EQ(jobs.stats().max_in_flight, 1);
  EXPECT_EQ(grads.stats().transfers, static_cast<std::uint64_t>(windows * steps_per_window));
  // The weights moved toward the target: the loop did real work.
  double before = 0, after = 0;
  for (std::size_t i = 0; i < n; ++i) {
    before += static_cast<double>(target[i]) * target[i];
    after += static_cast<double>(weight[i] - target[i]) * (weight[i] - target[i]);
  }
  EXPECT_LT(after, 0.5 * before);
}

} // namespace
