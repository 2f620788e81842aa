// Compile-only instantiations of every CUDA template of the select area for float, __half and
// __nv_bfloat16 (and both norms); the gpu tests run them.
#include <zenflow/select/channel_norms.cuh>
#include <zenflow/select/topk.cuh>

#define ZF_INSTANTIATE_NORMS(T, NORM)                                                                        \
  template cudaError_t zenflow::device::channel_norms<NORM, T>(                                              \
      void*, std::size_t&, const T*, std::int64_t, std::int64_t, std::int64_t, zenflow::channel_layout,      \
      float*, zenflow::channel_norm_extras, cudaStream_t);                                                   \
  template cudaError_t zenflow::device::channel_norms_batched<NORM, T>(                                      \
      void*, std::size_t&, const zenflow::channel_norm_item<T>*, std::int64_t, zenflow::channel_norm_extras, \
      cudaStream_t);

ZF_INSTANTIATE_NORMS(float, zenflow::channel_norm::sq_l2)
ZF_INSTANTIATE_NORMS(float, zenflow::channel_norm::l1)
ZF_INSTANTIATE_NORMS(zenflow::half, zenflow::channel_norm::sq_l2)
ZF_INSTANTIATE_NORMS(zenflow::half, zenflow::channel_norm::l1)
ZF_INSTANTIATE_NORMS(zenflow::bfloat16, zenflow::channel_norm::sq_l2)
ZF_INSTANTIATE_NORMS(zenflow::bfloat16, zenflow::channel_norm::l1)
