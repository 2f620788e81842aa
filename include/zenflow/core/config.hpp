/// @file
/// Compiler and backend annotations shared by every zenflow header.
///
/// Rule: a `.hpp` compiles with the host compiler alone (the CUDA toolkit's headers on the
/// include path, nothing else); a `.cuh` needs nvcc. Arithmetic that both the kernels and the
/// host backend run lives in `ZF_HOST_DEVICE` functions in `.hpp` files.
#pragma once

#define ZENFLOW_VERSION_MAJOR 0
#define ZENFLOW_VERSION_MINOR 1
#define ZENFLOW_VERSION_PATCH 0

#if defined(__CUDACC__)
#  define ZF_HOST_DEVICE __host__ __device__
#  define ZF_DEVICE __device__
#  define ZF_HOST __host__
#else
#  define ZF_HOST_DEVICE
#  define ZF_DEVICE
#  define ZF_HOST
#endif

#if defined(__CUDA_ARCH__)
#  define ZF_DEVICE_COMPILE 1
#else
#  define ZF_DEVICE_COMPILE 0
#endif

// Which sanitizer instruments this translation unit (the kernel emulator and the emulated device
// tell them about fibers and about memory that is not the caller's).
#if defined(__SANITIZE_ADDRESS__)
#  define ZF_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define ZF_ASAN 1
#  endif
#endif
#if defined(__SANITIZE_THREAD__)
#  define ZF_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define ZF_TSAN 1
#  endif
#endif
#ifndef ZF_ASAN
#  define ZF_ASAN 0
#endif
#ifndef ZF_TSAN
#  define ZF_TSAN 0
#endif

#if defined(_MSC_VER)
#  define ZF_FORCEINLINE __forceinline
#else
#  define ZF_FORCEINLINE inline __attribute__((always_inline))
#endif

// Kernels in header-only code get hidden visibility: two shared libraries that both carry a
// zenflow kernel must not resolve to one weak symbol (CUB learned this the hard way). And every
// kernel is a template (`template <int = 0>` where it has no parameter of its own; a launch
// deduces it): a plain __global__ function defined in a header is defined again by every .cu
// file that includes it, and two of them in one program fail to link (the ci preset links two
// such files: zenflow_header_check_two_units).
// Under a host compiler a kernel is a plain function template, run by the kernel emulator
// (<zenflow/core/kernel.hpp>, <zenflow/emu/emulator.hpp>).
#if defined(__CUDACC__)
#  define ZF_KERNEL __global__ __attribute__((visibility("hidden")))
#else
#  define ZF_KERNEL
#endif

// Everything lives in a versioned inline namespace so that two zenflow versions linked into
// one process never share a symbol.
#define ZF_ABI_NAMESPACE v0_1
#define ZF_NAMESPACE_BEGIN                                                                                   \
  namespace zenflow {                                                                                        \
  inline namespace ZF_ABI_NAMESPACE {
#define ZF_NAMESPACE_END                                                                                     \
  }                                                                                                          \
  }
