/// @file
/// The kernel seam: how zenflow's kernels launch, declare shared memory and use CUB's block
/// collectives, so that one source compiles for the GPU (nvcc) and for the kernel emulator (a
/// host compiler, <zenflow/emu/emulator.hpp>). Under nvcc every macro is the plain CUDA syntax:
/// the device code is the same (the PTX of the kernels does not change).
///
/// - `ZF_LAUNCH(grid, block, smem, stream, kernel)(args...)` is `kernel<<<grid, block, smem,
///   stream>>>(args...)`; `detail::launch_status()` is `cudaGetLastError()` after it.
/// - `ZF_SHARED(name, type)` is `__shared__ type name` (arrays included: `ZF_SHARED(buf,
///   float[32][33])`), `ZF_SHARED_DYNAMIC(name, T)` is `extern __shared__ T name[]`.
/// - `block_reduce<T, X, ...>` / `block_scan<T, X, ...>` (in `zenflow::detail`) are
///   `cub::BlockReduce` / `cub::BlockScan`; `block_reduce_warp_reductions` is CUB's algorithm.
/// - `ZF_UNROLL` is `#pragma unroll` (a host compiler ignores it).
/// - `detail::memset_async` is `cudaMemsetAsync`.
///
/// scripts/check-kernel-seam (a cpu test) fails when a `<<<` or a `__shared__` appears in
/// include/ outside this file, or a kernel is launched with more threads than its
/// `__launch_bounds__`.
#pragma once

#include <cstddef>
#include <type_traits>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>

#if defined(__CUDACC__)
#  include <cub/block/block_reduce.cuh>
#  include <cub/block/block_scan.cuh>

#  define ZF_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#  define ZF_SHARED(name, ...) __shared__ ::std::type_identity_t<__VA_ARGS__> name
#  define ZF_SHARED_DYNAMIC(name, ...)                                                                       \
    extern __shared__ __align__(16) unsigned char zf_dynamic_shared_##name[];                                \
    auto* const name = reinterpret_cast<__VA_ARGS__*>(zf_dynamic_shared_##name)
#  define ZF_UNROLL _Pragma("unroll")

ZF_NAMESPACE_BEGIN
namespace detail {
template <class T,
          int DimX,
          cub::BlockReduceAlgorithm Algorithm = cub::BLOCK_REDUCE_WARP_REDUCTIONS,
          int DimY = 1,
          int DimZ = 1>
using block_reduce = cub::BlockReduce<T, DimX, Algorithm, DimY, DimZ>;
template <class T,
          int DimX,
          cub::BlockScanAlgorithm Algorithm = cub::BLOCK_SCAN_RAKING,
          int DimY = 1,
          int DimZ = 1>
using block_scan = cub::BlockScan<T, DimX, Algorithm, DimY, DimZ>;
inline constexpr cub::BlockReduceAlgorithm block_reduce_warp_reductions = cub::BLOCK_REDUCE_WARP_REDUCTIONS;

/// The status of the launches just made (cudaGetLastError).
[[nodiscard]] inline cudaError_t launch_status() noexcept {
  return cudaGetLastError();
}
[[nodiscard]] inline cudaError_t
memset_async(void* p, int value, std::size_t bytes, cudaStream_t stream) noexcept {
  return cudaMemsetAsync(p, value, bytes, stream);
}
} // namespace detail
ZF_NAMESPACE_END

#else // a host compiler: the emulator

#  include <zenflow/emu/emulator.hpp>

// The kernel is called by name from a lambda, as a launch deduces a kernel template's arguments;
// `[=]` copies a kernel held in a variable (a function pointer) for a launch run later.
#  define ZF_LAUNCH(grid, block, smem, stream, ...)                                                          \
    ::zenflow::emu::detail::make_launch_site(                                                                \
        grid, block, smem, stream, #__VA_ARGS__, __FILE__, __LINE__,                                         \
        [=](const auto&... zf_emu_args) { __VA_ARGS__(zf_emu_args...); })
#  define ZF_SHARED(name, ...)                                                                               \
    static constexpr char zf_shared_tag_##name = 0;                                                          \
    ::std::add_lvalue_reference_t<__VA_ARGS__> name =                                                        \
        ::zenflow::emu::detail::block_shared<__VA_ARGS__>(&zf_shared_tag_##name, #name)
#  define ZF_SHARED_DYNAMIC(name, ...)                                                                       \
    auto* const name = reinterpret_cast<__VA_ARGS__*>(::zenflow::emu::detail::dynamic_shared())
#  define ZF_UNROLL

ZF_NAMESPACE_BEGIN
namespace detail {
template <class T,
          int DimX,
          emu::block_reduce_algorithm Algorithm = emu::block_reduce_warp_reductions,
          int DimY = 1,
          int DimZ = 1>
using block_reduce = emu::block_reduce<T, DimX, Algorithm, DimY, DimZ>;
template <class T,
          int DimX,
          emu::block_scan_algorithm Algorithm = emu::block_scan_raking,
          int DimY = 1,
          int DimZ = 1>
using block_scan = emu::block_scan<T, DimX, Algorithm, DimY, DimZ>;
inline constexpr emu::block_reduce_algorithm block_reduce_warp_reductions = emu::block_reduce_warp_reductions;

/// The status of the launches just made: a launch the emulator refused (its configuration).
[[nodiscard]] inline cudaError_t launch_status() noexcept {
  return emu::detail::take_last_error();
}
[[nodiscard]] inline cudaError_t memset_async(void* p, int value, std::size_t bytes, cudaStream_t stream) {
  return emu::detail::memset_async(p, value, bytes, stream);
}
} // namespace detail
ZF_NAMESPACE_END

#endif
