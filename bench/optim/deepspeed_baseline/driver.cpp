// A C entry point around DeepSpeed's CPU Adam (Adam_Optimizer::Step_8 from csrc/includes/cpu_adam.h),
// so that zenflow's host sweep can time it in the same run without PyTorch. Built by
// build_deepspeed_baseline.sh from a DeepSpeed checkout the user names; nothing of DeepSpeed is
// in this repository (the script compiles against the checkout's headers).
#include <cstddef>
#include <omp.h>

#include "cpu_adam.h"

extern "C" {

/// Threads for DeepSpeed's `#pragma omp parallel for` (its own default is every core).
void zf_ds_set_threads(int threads) {
  omp_set_num_threads(threads);
}

/// One AdamW step on fp32 params/grads/moments, as DeepSpeed's ds_adam_step does it for fp32
/// tensors: IncrementStep, update_state (bias correction on), then Step_8's vector part
/// (Step_AVX<8>, then Step_AVX<4>, with OpenMP). Step_8 itself and its scalar tail live in
/// cpu_adam_impl.cpp, which needs PyTorch; so `n` must be a multiple of 4 x the SIMD width
/// (returns -1 and does nothing otherwise, 0 on success).
int zf_ds_adam_step_f32(float* params,
                        float* grads,
                        float* exp_avg,
                        float* exp_avg_sq,
                        std::size_t n,
                        std::size_t step,
                        float lr,
                        float beta1,
                        float beta2,
                        float eps,
                        float weight_decay) {
  static Adam_Optimizer opt(lr, beta1, beta2, eps, weight_decay, /*adamw_mode=*/true);
  opt.IncrementStep(step, beta1, beta2);
  opt.update_state(lr, eps, weight_decay, /*bias_correction=*/true);
#if defined(__AVX512__) || defined(__AVX256__)
  if (n % (4 * SIMD_WIDTH) != 0) {
    return -1;
  }
  std::size_t done = 0;
  opt.Step_AVX<8>(&done, params, grads, exp_avg, exp_avg_sq, n, /*parallel=*/true);
  if (done < n) {
    std::size_t tail = 0;
    opt.Step_AVX<4>(&tail, params + done, grads + done, exp_avg + done, exp_avg_sq + done, n - done, true);
  }
  return 0;
#else
  return -1;
#endif
}

/// The SIMD width DeepSpeed was compiled for: 16 (AVX-512), 8 (AVX2) or 1 (scalar).
int zf_ds_simd_width() {
#if defined(__AVX512__)
  return 16;
#elif defined(__AVX256__)
  return 8;
#else
  return 1;
#endif
}
}
