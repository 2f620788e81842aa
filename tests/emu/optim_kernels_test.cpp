// The optim area's gpu test bodies (tests/optim/optim_gpu_test.cu) on the kernel emulator: every
// AdamW, gather and scatter kernel against its host twin, bit for bit.
#include "optim/optim_gpu_test.cu"
