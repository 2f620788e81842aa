/// @file
/// The model on the CUDA backend: bf16 weights and gradients in device memory, GEMMs on cuBLAS
/// (bf16 inputs, fp32 accumulation), and small kernels for the embedding, GELU and softmax
/// cross-entropy, whose arithmetic is math.hpp's (the host model computes the same function).
///
/// Layout reminder: a weight is [in, out] row-major, i.e. column-major [out x in]; an activation
/// [B, n] row-major is column-major [n x B]. So for Y = X W (row-major) cuBLAS computes
/// Y^T = W^T X^T with no transposition flag: gemm(N, N, m = out, n = B, k = in).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>

#include "corpus.hpp"
#include "math.hpp"
#include "model.hpp"

namespace charlm {

namespace kernels {

using bf16 = __nv_bfloat16;

/// x0[b, c*E + e] = emb[tok[b*C + c], e]
__global__ void embed_gather(const bf16* __restrict__ emb,
                             const std::int32_t* __restrict__ tok,
                             bf16* __restrict__ x0,
                             std::int64_t rows,
                             std::int32_t ctx,
                             std::int32_t E) {
  const std::int64_t n = rows * ctx * E;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bc = i / E;
    const std::int32_t e = static_cast<std::int32_t>(i - bc * E);
    x0[i] = emb[static_cast<std::int64_t>(tok[bc]) * E + e];
  }
}

/// demb[tok[b*C + c], e] += dx0[b, c*E + e]   (demb fp32, zeroed before)
__global__ void embed_scatter_add(const float* __restrict__ dx0,
                                  const std::int32_t* __restrict__ tok,
                                  float* __restrict__ demb,
                                  std::int64_t rows,
                                  std::int32_t ctx,
                                  std::int32_t E) {
  const std::int64_t n = rows * ctx * E;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bc = i / E;
    const std::int32_t e = static_cast<std::int32_t>(i - bc * E);
    atomicAdd(demb + static_cast<std::int64_t>(tok[bc]) * E + e, dx0[i]);
  }
}

/// out[i] = bf16(in[i])
__global__ void to_bf16(const float* __restrict__ in, bf16* __restrict__ out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

/// z += bias; h = (residual ? h : 0) + gelu(z); hb = bf16(h)      ([rows, H], bias [H])
__global__ void bias_gelu_forward(float* __restrict__ z,
                                  const bf16* __restrict__ bias,
                                  float* __restrict__ h,
                                  bf16* __restrict__ hb,
                                  std::int64_t rows,
                                  std::int32_t H,
                                  bool residual) {
  const std::int64_t n = rows * H;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float zz = z[i] + __bfloat162float(bias[i % H]);
    z[i] = zz;
    const float hh = (residual ? h[i] : 0.0f) + gelu(zz);
    h[i] = hh;
    hb[i] = __float2bfloat16_rn(hh);
  }
}

/// dz = bf16(dh * gelu'(z))
__global__ void gelu_backward(const float* __restrict__ dh,
                              const float* __restrict__ z,
                              bf16* __restrict__ dz,
                              std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dz[i] = __float2bfloat16_rn(dh[i] * gelu_grad(z[i]));
  }
}

/// One warp per row: logits += bias, row loss = logsumexp - logit[target],
/// dlogits = (softmax - onehot) / rows, in bf16.
__global__ void softmax_xent(const float* __restrict__ logits,
                             const bf16* __restrict__ bias,
                             const std::int32_t* __restrict__ targets,
                             float* __restrict__ row_loss,
                             bf16* __restrict__ dlogits,
                             std::int64_t rows,
                             std::int32_t V) {
  const std::int64_t warps_per_block = blockDim.x / 32;
  const std::int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) {
    return;
  }
  const float* lg = logits + r * V;
  float mx = -INFINITY;
  for (int j = lane; j < V; j += 32) {
    mx = fmaxf(mx, lg[j] + __bfloat162float(bias[j]));
  }
  for (int o = 16; o > 0; o /= 2) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  float sum = 0.0f;
  for (int j = lane; j < V; j += 32) {
    sum += expf(lg[j] + __bfloat162float(bias[j]) - mx);
  }
  for (int o = 16; o > 0; o /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  const std::int32_t y = targets[r];
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (int j = lane; j < V; j += 32) {
    const float p = expf(lg[j] + __bfloat162float(bias[j]) - mx) / sum;
    dlogits[r * V + j] = __float2bfloat16_rn((p - (j == y ? 1.0f : 0.0f)) * inv_rows);
  }
  if (lane == 0) {
    row_loss[r] = logf(sum) + mx - (lg[y] + __bfloat162float(bias[y]));
  }
}

/// *loss = mean(row_loss), one block, fixed order (deterministic).
__global__ void mean_loss(const float* __restrict__ row_loss, std::int64_t rows, float* __restrict__ loss) {
  __shared__ float partial[256];
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    s += row_loss[i];
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      partial[threadIdx.x] += partial[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = partial[0] / static_cast<float>(rows);
  }
}

__global__ void fill_bf16(bf16* p, std::int64_t n, float v) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16_rn(v);
  }
}

inline unsigned grid_for(std::int64_t n, unsigned block = 256) {
  const std::int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65535 * 8 ? 65535 * 8 : g));
}

} // namespace kernels

inline void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS: ") + what + " failed with status " +
                             std::to_string(static_cast<int>(s)));
  }
}
inline void cuda_check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    throw zenflow::cuda_error(s, std::string(what) + ": " + cudaGetErrorName(s) + " (" +
                                     cudaGetErrorString(s) + ")");
  }
}

class cuda_charlm {
public:
  using weight_t = zenflow::bfloat16;

  cuda_charlm(const model_shape& shape, std::uint64_t seed, cudaStream_t stream)
      : s_(shape), t_(shape), stream_(stream) {
    cublas_check(cublasCreate(&handle_), "cublasCreate");
    cublas_check(cublasSetStream(handle_, stream_), "cublasSetStream");
    // A workspace of our own: cuBLAS then never allocates inside a step (graph-capture safe).
    workspace_ = zenflow::device_buffer<std::byte>(std::size_t{32} << 20, stream_);
    cublas_check(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
    cublas_check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");

    const std::vector<float> init = init_params(shape, t_, seed);
    std::vector<weight_t> w(init.size());
    for (std::size_t i = 0; i < init.size(); ++i) {
      w[i] = zenflow::from_float<weight_t>(init[i]);
    }
    weights_ = zenflow::device_buffer<weight_t>(w.size(), stream_);
    grads_ = zenflow::device_buffer<weight_t>(w.size(), stream_);
    cuda_check(cudaMemcpyAsync(weights_.data(), w.data(), w.size() * sizeof(weight_t), cudaMemcpyHostToDevice,
                               stream_),
               "cudaMemcpyAsync(weights)");
    cuda_check(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_), "cudaMemsetAsync(grads)");
    demb_ = zenflow::device_buffer<float>(static_cast<std::size_t>(t_[t_.emb].size()), stream_);
    d_loss_ = zenflow::device_buffer<float>(1, stream_);
    h_loss_ = zenflow::pinned_buffer<float>(1);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); // `w` dies here
  }
  cuda_charlm(const cuda_charlm&) = delete;
  cuda_charlm& operator=(const cuda_charlm&) = delete;
  ~cuda_charlm() {
    if (handle_ != nullptr) {
      (void)cublasDestroy(handle_);
    }
  }

  [[nodiscard]] static const char* name() { return "cuda"; }
  [[nodiscard]] const param_table& table() const { return t_; }
  [[nodiscard]] weight_t* weights(std::int32_t p) { return weights_.data() + t_[p].offset; }
  [[nodiscard]] weight_t* grads(std::int32_t p) { return grads_.data() + t_[p].offset; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  /// Every weight, copied down (blocking; data parallel compares the replicas at the end).
  [[nodiscard]] std::vector<weight_t> all_weights() const {
    std::vector<weight_t> w(weights_.size());
    cuda_check(cudaMemcpyAsync(w.data(), weights_.data(), weights_.bytes(), cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync(all_weights)");
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return w;
  }

  /// Copies a batch's tokens to the device (stream-ordered; the host batch must stay alive
  /// until the stream reaches the copy: the trainer synchronises every step).
  void upload(const batch& b) {
    if (b.context != s_.context || b.rows < 1) {
      throw std::invalid_argument("batch does not match the model's context");
    }
    reserve(b.rows);
    current_rows_ = b.rows;
    const auto n = static_cast<std::size_t>(b.rows) * static_cast<std::size_t>(b.context);
    std::copy(b.inputs.begin(), b.inputs.end(), h_tokens_.data());
    std::copy(b.targets.begin(), b.targets.end(), h_targets_.data());
    cuda_check(cudaMemcpyAsync(tokens_.data(), h_tokens_.data(), n * 4, cudaMemcpyHostToDevice, stream_),
               "tokens");
    cuda_check(cudaMemcpyAsync(targets_.data(), h_targets_.data(), static_cast<std::size_t>(b.rows) * 4,
                               cudaMemcpyHostToDevice, stream_),
               "targets");
  }

  /// Enqueues forward (and backward when `grad`) of the uploaded batch; the mean loss lands in
  /// device memory (loss_device()). Kernels and cuBLAS only: capture-safe.
  void enqueue(bool grad) {
    forward();
    if (grad) {
      backward();
    }
  }
  [[nodiscard]] const float* loss_device() const { return d_loss_.data(); }

  /// Forward + backward of one batch; waits for the stream and returns the loss.
  float train_step(const batch& b) {
    upload(b);
    enqueue(true);
    return read_loss();
  }
  float eval(const batch& b) {
    upload(b);
    enqueue(false);
    return read_loss();
  }
  void sync() { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  float read_loss() {
    cuda_check(cudaMemcpyAsync(h_loss_.data(), d_loss_.data(), 4, cudaMemcpyDeviceToHost, stream_), "loss");
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return h_loss_[0];
  }

private:
  void reserve(std::int32_t rows) {
    if (rows <= rows_) {
      return;
    }
    rows_ = rows;
    const auto B = static_cast<std::size_t>(rows);
    const auto H = static_cast<std::size_t>(s_.hidden);
    const std::size_t in0 = static_cast<std::size_t>(s_.context) * static_cast<std::size_t>(s_.embed);
    tokens_ = zenflow::device_buffer<std::int32_t>(B * static_cast<std::size_t>(s_.context), stream_);
    targets_ = zenflow::device_buffer<std::int32_t>(B, stream_);
    h_tokens_ = zenflow::pinned_buffer<std::int32_t>(B * static_cast<std::size_t>(s_.context));
    h_targets_ = zenflow::pinned_buffer<std::int32_t>(B);
    x0_ = zenflow::device_buffer<kernels::bf16>(B * in0, stream_);
    dx0_ = zenflow::device_buffer<float>(B * in0, stream_);
    z_ = zenflow::device_buffer<float>(B * H * static_cast<std::size_t>(s_.layers), stream_);
    hb_ = zenflow::device_buffer<kernels::bf16>(B * H * static_cast<std::size_t>(s_.layers), stream_);
    h_ = zenflow::device_buffer<float>(B * H, stream_);
    dh_ = zenflow::device_buffer<float>(B * H, stream_);
    dz_ = zenflow::device_buffer<kernels::bf16>(B * H, stream_);
    logits_ = zenflow::device_buffer<float>(B * static_cast<std::size_t>(s_.vocab), stream_);
    dlogits_ = zenflow::device_buffer<kernels::bf16>(logits_.size(), stream_);
    row_loss_ = zenflow::device_buffer<float>(B, stream_);
    ones_ = zenflow::device_buffer<kernels::bf16>(B, stream_);
    kernels::fill_bf16<<<kernels::grid_for(static_cast<std::int64_t>(B)), 256, 0, stream_>>>(
        ones_.data(), static_cast<std::int64_t>(B), 1.0f);
    cuda_check(cudaGetLastError(), "fill_bf16");
  }

  kernels::bf16* w(std::int32_t p) { return reinterpret_cast<kernels::bf16*>(weights(p)); }
  kernels::bf16* g(std::int32_t p) { return reinterpret_cast<kernels::bf16*>(grads(p)); }
  kernels::bf16* hb(std::int32_t l) { return hb_.data() + static_cast<std::size_t>(l) * rows_ * s_.hidden; }
  float* z(std::int32_t l) { return z_.data() + static_cast<std::size_t>(l) * rows_ * s_.hidden; }

  /// Column-major C[m x n] = op(A) op(B), bf16 inputs, fp32 accumulation, C fp32 or bf16.
  void gemm(cublasOperation_t ta,
            cublasOperation_t tb,
            int m,
            int n,
            int k,
            const kernels::bf16* a,
            int lda,
            const kernels::bf16* b,
            int ldb,
            void* c,
            cudaDataType ctype,
            int ldc,
            float beta = 0.0f) {
    const float alpha = 1.0f;
    cublas_check(cublasGemmEx(handle_, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                              &beta, c, ctype, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }

  void forward() {
    const std::int64_t B = batch_rows();
    const int Bi = static_cast<int>(B), H = s_.hidden, V = s_.vocab, C = s_.context, E = s_.embed;
    kernels::embed_gather<<<kernels::grid_for(B * C * E), 256, 0, stream_>>>(w(t_.emb), tokens_.data(),
                                                                             x0_.data(), B, C, E);
    for (std::int32_t l = 0; l < s_.layers; ++l) {
      const int in = l == 0 ? C * E : H;
      const kernels::bf16* x = l == 0 ? x0_.data() : hb(l - 1);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, H, Bi, in, w(t_.w[static_cast<std::size_t>(l)]), H, x, in, z(l),
           CUDA_R_32F, H);
      kernels::bias_gelu_forward<<<kernels::grid_for(B * H), 256, 0, stream_>>>(
          z(l), w(t_.b[static_cast<std::size_t>(l)]), h_.data(), hb(l), B, H, l > 0);
    }
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, V, Bi, H, w(t_.w_out), V, hb(s_.layers - 1), H, logits_.data(), CUDA_R_32F,
         V);
    const unsigned warps = 8;
    kernels::softmax_xent<<<static_cast<unsigned>((B + warps - 1) / warps), warps * 32, 0, stream_>>>(
        logits_.data(), w(t_.b_out), targets_.data(), row_loss_.data(), dlogits_.data(), B, V);
    kernels::mean_loss<<<1, 256, 0, stream_>>>(row_loss_.data(), B, d_loss_.data());
    cuda_check(cudaGetLastError(), "forward kernels");
  }

  void backward() {
    const std::int64_t B = batch_rows();
    const int Bi = static_cast<int>(B), H = s_.hidden, V = s_.vocab, C = s_.context, E = s_.embed;
    // Output layer: dW_out[H,V] = h^T dlogits; db_out = dlogits^T 1; dh = dlogits W_out^T.
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, V, H, Bi, dlogits_.data(), V, hb(s_.layers - 1), H, g(t_.w_out),
         CUDA_R_16BF, V);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, V, 1, Bi, dlogits_.data(), V, ones_.data(), Bi, g(t_.b_out), CUDA_R_16BF,
         V);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, H, Bi, V, w(t_.w_out), V, dlogits_.data(), V, dh_.data(), CUDA_R_32F, H);
    for (std::int32_t l = s_.layers - 1; l >= 0; --l) {
      const int in = l == 0 ? C * E : H;
      const kernels::bf16* x = l == 0 ? x0_.data() : hb(l - 1);
      kernels::gelu_backward<<<kernels::grid_for(B * H), 256, 0, stream_>>>(dh_.data(), z(l), dz_.data(),
                                                                            B * H);
      const std::int32_t wp = t_.w[static_cast<std::size_t>(l)];
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, H, in, Bi, dz_.data(), H, x, in, g(wp), CUDA_R_16BF, H);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, H, 1, Bi, dz_.data(), H, ones_.data(), Bi,
           g(t_.b[static_cast<std::size_t>(l)]), CUDA_R_16BF, H);
      if (l == 0) {
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, in, Bi, H, w(wp), H, dz_.data(), H, dx0_.data(), CUDA_R_32F, in);
      } else {
        // Residual: dh_in = dh_out + dz W^T (beta = 1 accumulates into dh in place).
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, in, Bi, H, w(wp), H, dz_.data(), H, dh_.data(), CUDA_R_32F, in, 1.0f);
      }
    }
    cuda_check(cudaMemsetAsync(demb_.data(), 0, demb_.bytes(), stream_), "cudaMemsetAsync(demb)");
    kernels::embed_scatter_add<<<kernels::grid_for(B * C * E), 256, 0, stream_>>>(dx0_.data(), tokens_.data(),
                                                                                  demb_.data(), B, C, E);
    kernels::to_bf16<<<kernels::grid_for(static_cast<std::int64_t>(demb_.size())), 256, 0, stream_>>>(
        demb_.data(), g(t_.emb), static_cast<std::int64_t>(demb_.size()));
    cuda_check(cudaGetLastError(), "backward kernels");
  }

  [[nodiscard]] std::int64_t batch_rows() const { return current_rows_; }

  model_shape s_;
  param_table t_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  zenflow::device_buffer<std::byte> workspace_;
  zenflow::device_buffer<weight_t> weights_, grads_;
  zenflow::device_buffer<float> demb_, d_loss_;
  zenflow::pinned_buffer<float> h_loss_;
  std::int32_t rows_ = 0;
  std::int64_t current_rows_ = 0; ///< rows of the uploaded batch (rows_ is the buffers' capacity)
  zenflow::device_buffer<std::int32_t> tokens_, targets_;
  zenflow::pinned_buffer<std::int32_t> h_tokens_, h_targets_;
  zenflow::device_buffer<kernels::bf16> x0_, hb_, dz_, dlogits_, ones_;
  zenflow::device_buffer<float> dx0_, z_, h_, dh_, logits_, row_loss_;
};

} // namespace charlm
