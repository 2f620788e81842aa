// Compile-only: every optimizer launcher instantiated for float, __half and __nv_bfloat16.
#include <zenflow/optim/adamw.cuh>

namespace zenflow {
inline namespace ZF_ABI_NAMESPACE {
namespace device {

#define ZF_OPTIM_INSTANTIATE(T)                                                                              \
  template cudaError_t adamw_dense<T>(const adamw_tensor<T>*, int, std::int32_t*, const adamw_hparams&,      \
                                      const float*, const std::uint32_t*, cudaStream_t);                     \
  template cudaError_t adamw_selective<T>(channel_matrix<T>, channel_matrix<const T>, const selected_rows&,  \
                                          const adamw_hparams&, step_scalars, float*, cudaStream_t);         \
  template cudaError_t gather_channels<T, T>(channel_matrix<const T>, const std::int32_t*, std::int64_t, T*, \
                                             float*, cudaStream_t);                                          \
  template cudaError_t scatter_channels<T, T>(const T*, const std::int32_t*, std::int64_t,                   \
                                              channel_matrix<T>, cudaStream_t);

// Conversions between a 16-bit working type and fp32 (state rows, packed gradients).
#define ZF_OPTIM_INSTANTIATE_MIXED(T)                                                                        \
  template cudaError_t gather_channels<T, float>(channel_matrix<const T>, const std::int32_t*, std::int64_t, \
                                                 float*, float*, cudaStream_t);                              \
  template cudaError_t gather_channels<float, T>(channel_matrix<const float>, const std::int32_t*,           \
                                                 std::int64_t, T*, float*, cudaStream_t);                    \
  template cudaError_t scatter_channels<float, T>(const float*, const std::int32_t*, std::int64_t,           \
                                                  channel_matrix<T>, cudaStream_t);                          \
  template cudaError_t scatter_channels<T, float>(const T*, const std::int32_t*, std::int64_t,               \
                                                  channel_matrix<float>, cudaStream_t);

ZF_OPTIM_INSTANTIATE(float)
ZF_OPTIM_INSTANTIATE(half)
ZF_OPTIM_INSTANTIATE(bfloat16)
ZF_OPTIM_INSTANTIATE_MIXED(half)
ZF_OPTIM_INSTANTIATE_MIXED(bfloat16)

} // namespace device
} // namespace ZF_ABI_NAMESPACE
} // namespace zenflow
