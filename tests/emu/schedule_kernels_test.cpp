// The schedule layer's gpu test bodies (tests/schedule/schedule_gpu_test.cu) on the kernel
// emulator: the step scalars' and the L1 masses' kernels against their host twins, bit for bit.
#include "schedule/schedule_gpu_test.cu"
