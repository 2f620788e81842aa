// The select area's gpu test bodies (tests/select/select_gpu_test.cu) on the kernel emulator:
// the channel-norm and top-k kernels' own source against the float64 and brute-force references
// and the host twins, bit for bit (tests/support/gpu.hpp's emulated half).
#include "select/select_gpu_test.cu"
