// A C entry point around DeepSpeed's CPU Adam (Adam_Optimizer::Step_8 from csrc/includes/cpu_adam.h),
// so that zenflow's host sweep can time it in the same run without PyTorch. Built by
// build_deepspeed_baseline.sh from a DeepSpeed checkout the user names; nothing of DeepSpeed is
// in this repository (the script compiles against the checkout's headers).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <omp.h>

#include "cpu_adam.h"

#if defined(__AVX512__)
/// The same step with bf16 params and grads and `State` moments (c10::BFloat16 or float): two of
/// the dtype pairs DeepSpeed's CPU Adam registers (cpu_adam_impl.cpp's invokers; bf16 needs
/// AVX-512 there). `n` a multiple of 4 x 16; returns -1 otherwise, 0 on success.
namespace {
template <class State>
int ds_step_bf16(void* params,
                 void* grads,
                 void* exp_avg,
                 void* exp_avg_sq,
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
  if (n % (4 * SIMD_WIDTH) != 0) {
    return -1;
  }
  auto* p = static_cast<c10::BFloat16*>(params);
  auto* g = static_cast<c10::BFloat16*>(grads);
  auto* m = static_cast<State*>(exp_avg);
  auto* v = static_cast<State*>(exp_avg_sq);
  std::size_t done = 0;
  opt.Step_AVX<8>(&done, p, g, m, v, n, /*parallel=*/true);
  if (done < n) {
    std::size_t tail = 0;
    opt.Step_AVX<4>(&tail, p + done, g + done, m + done, v + done, n - done, true);
  }
  return 0;
}
} // namespace
#endif

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

/// bf16 params and grads, bf16 moments (DeepSpeed's bf16/bf16 pair: 14 B per parameter).
int zf_ds_adam_step_bf16(void* params,
                         void* grads,
                         void* exp_avg,
                         void* exp_avg_sq,
                         std::size_t n,
                         std::size_t step,
                         float lr,
                         float beta1,
                         float beta2,
                         float eps,
                         float weight_decay) {
#if defined(__AVX512__)
  return ds_step_bf16<c10::BFloat16>(params, grads, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps,
                                     weight_decay);
#else
  return -1;
#endif
}

/// bf16 params and grads, fp32 moments (DeepSpeed's bf16/fp32 pair: 22 B per parameter).
int zf_ds_adam_step_bf16_f32state(void* params,
                                  void* grads,
                                  void* exp_avg,
                                  void* exp_avg_sq,
                                  std::size_t n,
                                  std::size_t step,
                                  float lr,
                                  float beta1,
                                  float beta2,
                                  float eps,
                                  float weight_decay) {
#if defined(__AVX512__)
  return ds_step_bf16<float>(params, grads, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps,
                             weight_decay);
#else
  return -1;
#endif
}

/// DeepSpeed ZenFlow's optimizer-process step (cpu_adam_impl.cpp, ZenFlowAdam::run_step) on fp32:
/// one contiguous slice per thread (the slice rounded up to 8 x the SIMD width, as its pinned
/// pool does), each thread running the serial kernel on its slice and then copying the slice's
/// new params into `stale` (the snapshot the training process uploads). Here the threads are
/// OpenMP's (zf_ds_set_threads), not its pinned pool. 0 on success, -1 when the build has no
/// SIMD path.
int zf_ds_zenflow_step_f32(float* params,
                           float* grads,
                           float* exp_avg,
                           float* exp_avg_sq,
                           float* stale,
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
  const std::size_t align = SIMD_WIDTH * 8;
#  pragma omp parallel
  {
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    std::size_t chunk = (n + threads - 1) / threads;
    chunk = (chunk + align - 1) / align * align;
    const std::size_t b = std::min(t * chunk, n);
    const std::size_t e = std::min(b + chunk, n);
    if (b < e) {
      std::size_t done = 0;
      opt.Step_AVX<8>(&done, params + b, grads + b, exp_avg + b, exp_avg_sq + b, e - b, false);
      if (done < e - b) {
        std::size_t tail = 0;
        opt.Step_AVX<4>(&tail, params + b + done, grads + b + done, exp_avg + b + done, exp_avg_sq + b + done,
                        e - b - done, false);
      }
      std::memcpy(stale + b, params + b, (e - b) * sizeof(float));
    }
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
