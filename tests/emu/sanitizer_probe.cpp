// Bugs a sanitizer catches in emulated kernels (cpu.emu.*_probe tests, added only to the builds
// with that sanitizer: the tsan and asan presets). Each mode plants one bug, or none, and runs the
// kernel on the emulator; the test expects the sanitizer's report (or, `clean`, none). Under
// ThreadSanitizer every thread of a block is a fiber it follows, synchronised only where a barrier,
// a warp operation or a __threadfence says: a race between two threads of a block (a read too) or
// between blocks is a race to it.
//
//   zf_emu_sanitizer_probe shared_read_write | two_blocks_one_address | ticket_without_fences |
//                          ticket_with_fences | read_past_the_buffer | in_bounds
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <zenflow/core/kernel.hpp>

namespace {

/// Thread 0 writes, thread 5 reads, no barrier between.
template <int = 0>
ZF_KERNEL void rw_race_kernel(float* out) {
  ZF_SHARED(s, float);
  if (threadIdx.x == 0) {
    s = 1.0f;
  }
  if (threadIdx.x == 5) {
    out[0] = s;
  }
}
/// Every block's thread 0 writes out[0].
template <int = 0>
ZF_KERNEL void blocks_race_kernel(float* out) {
  if (threadIdx.x == 0) {
    out[0] = static_cast<float>(blockIdx.x);
  }
}
/// The last block to finish (a ticket) sums what the others wrote; `fence`: with the fences the
/// pattern needs on a GPU.
template <int = 0>
ZF_KERNEL void ticket_kernel(float* data, unsigned* ticket, float* out, int fence) {
  ZF_SHARED(last, bool);
  if (threadIdx.x == 0) {
    data[blockIdx.x] = static_cast<float>(blockIdx.x + 1);
  }
  if (fence != 0) {
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    if (fence != 0) {
      __threadfence();
    }
    float s = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      s += __ldcg(data + b);
    }
    *out = s;
  }
}
/// Thread i reads x[i + shift]: past the end of x for the last threads when shift > 0.
template <int = 0>
ZF_KERNEL void shifted_read_kernel(const float* x, float* out, int n, int shift) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] = x[i + shift];
  }
}

} // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  std::vector<float> out(64, 0.0f), data(8, 0.0f);
  unsigned ticket = 0;
  if (mode == "shared_read_write") {
    ZF_LAUNCH(1, 32, 0, nullptr, rw_race_kernel)(out.data());
  } else if (mode == "two_blocks_one_address") {
    ZF_LAUNCH(4, 32, 0, nullptr, blocks_race_kernel)(out.data());
  } else if (mode == "ticket_without_fences" || mode == "ticket_with_fences") {
    ZF_LAUNCH(8, 32, 0, nullptr, ticket_kernel)
    (data.data(), &ticket, out.data(), mode == "ticket_with_fences" ? 1 : 0);
    if (out[0] != 36.0f) {
      std::printf("wrong sum %g\n", static_cast<double>(out[0]));
      return 1;
    }
  } else if (mode == "read_past_the_buffer" || mode == "in_bounds") {
    const int n = 100;
    std::vector<float> x(n, 1.0f);
    ZF_LAUNCH(4, 32, 0, nullptr, shifted_read_kernel)
    (x.data(), out.data(), n > 64 ? 64 : n, mode == "in_bounds" ? 0 : n - 60);
  } else {
    std::printf("unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  std::printf("%s: ran\n", mode.c_str());
  return 0;
}
