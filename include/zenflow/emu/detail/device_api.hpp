/// @file
/// What a kernel uses of CUDA, for the host compiler: the thread and block indices, barriers,
/// warp shuffles and votes, atomics, fences, the cache-hinted loads and stores, and the float and
/// bit intrinsics the CUDA headers declare only for the device. In the global namespace, where
/// CUDA puts them, so that a kernel's source compiles unchanged. (The half and bfloat16
/// conversions and arithmetic have host versions in CUDA's own headers.)
///
/// Semantics are the device's: atomics are relaxed read-modify-writes; `__threadfence` orders
/// (and, under ThreadSanitizer, is the edge that makes another block's writes visible); a warp
/// operation waits for every lane of its mask (runtime.hpp).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector_functions.h>
#include <vector_types.h>

#include <cuda_runtime_api.h>

#include <zenflow/emu/detail/runtime.hpp>

#if defined(__CUDACC__)
#  error "zenflow/emu: the emulator is for host compilers; nvcc compiles the kernels for the GPU"
#endif

// ---- indices: threadIdx, blockIdx, blockDim and gridDim are runtime.hpp's -------------------------
inline constexpr int warpSize = 32;

// ---- declarations the host compiler does not know ----------------------------------------------
#ifndef __launch_bounds__
#  define __launch_bounds__(...)
#endif
// A plain `__shared__` would be a variable of each thread here: ZF_SHARED (core/kernel.hpp) is the
// one way a kernel declares block-shared memory.
#undef __shared__
#define __shared__ static_assert(false, "zenflow::emu: declare shared memory with ZF_SHARED(name, type)");

ZF_NAMESPACE_BEGIN
namespace emu::detail {
template <class T>
constexpr bool plain_v = std::is_trivially_copyable_v<T> && sizeof(T) <= 16;

template <class T>
T warp_exchange(warp_kind kind, unsigned mask, T v, int arg, int width, const char* file, int line) {
  static_assert(plain_v<T>, "zenflow::emu: a shuffled value must be trivially copyable, at most 16 bytes");
  warp_op(kind, mask, &v, sizeof(T), arg, width, file, line);
  T r;
  const tsan_ignore ig;
  std::memcpy(&r, current_thread().result, sizeof(T));
  return r;
}
inline unsigned warp_vote(warp_kind kind, unsigned mask, int pred, const char* file, int line) {
  require_in_kernel("a warp vote");
  {
    const tsan_ignore ig;
    current_thread().vote = pred;
  }
  warp_op(kind, mask, nullptr, 0, 0, 32, file, line);
  const tsan_ignore ig;
  return current_thread().vote_result;
}
/// ThreadSanitizer's model of `__threadfence`: one sync object for the whole device, released
/// and acquired, so that writes before a fence in one block happen before reads after a fence
/// in another (the last-block tickets); a read without the fences is a race to it.
inline char& fence_object() noexcept {
  static char f = 0;
  return f;
}
template <class T>
T* atomic_address(T* p) {
  static_assert(std::is_trivially_copyable_v<T>, "zenflow::emu: atomics on trivially copyable types");
  return p;
}
/// A relaxed compare-and-swap loop applying `op` to the value at `p` (float and double atomics).
template <class T, class Op>
T atomic_update(T* p, Op op) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(T) == sizeof(U));
  auto* u = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(u, __ATOMIC_RELAXED);
  for (;;) {
    T cur;
    std::memcpy(&cur, &old, sizeof(T));
    const T next = op(cur);
    U want;
    std::memcpy(&want, &next, sizeof(T));
    if (__atomic_compare_exchange_n(u, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      return cur;
    }
  }
}
} // namespace emu::detail
ZF_NAMESPACE_END

// ---- barriers and warps -------------------------------------------------------------------------
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  (void)::zenflow::emu::detail::block_barrier(::zenflow::emu::detail::barrier_kind::plain, 0, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::block_barrier(::zenflow::emu::detail::barrier_kind::vote_or, pred, file,
                                               line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::block_barrier(::zenflow::emu::detail::barrier_kind::vote_and, pred, file,
                                               line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::block_barrier(::zenflow::emu::detail::barrier_kind::vote_count, pred, file,
                                               line);
}
inline void
__syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::zenflow::emu::detail::warp_op(::zenflow::emu::detail::warp_kind::sync, mask, nullptr, 0, 0, 32, file,
                                  line);
}
template <class T>
T __shfl_sync(unsigned mask,
              T var,
              int src_lane,
              int width = 32,
              const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::warp_exchange(::zenflow::emu::detail::warp_kind::shfl, mask, var, src_lane,
                                               width, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask,
                 T var,
                 unsigned delta,
                 int width = 32,
                 const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::warp_exchange(::zenflow::emu::detail::warp_kind::shfl_up, mask, var,
                                               static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask,
                   T var,
                   unsigned delta,
                   int width = 32,
                   const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::warp_exchange(::zenflow::emu::detail::warp_kind::shfl_down, mask, var,
                                               static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask,
                  T var,
                  int lane_mask,
                  int width = 32,
                  const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::warp_exchange(::zenflow::emu::detail::warp_kind::shfl_xor, mask, var,
                                               lane_mask, width, file, line);
}
inline int
__any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(
      ::zenflow::emu::detail::warp_vote(::zenflow::emu::detail::warp_kind::any, mask, pred, file, line));
}
inline int
__all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(
      ::zenflow::emu::detail::warp_vote(::zenflow::emu::detail::warp_kind::all, mask, pred, file, line));
}
inline unsigned
__ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::zenflow::emu::detail::warp_vote(::zenflow::emu::detail::warp_kind::ballot, mask, pred, file, line);
}
/// The lanes of the caller's warp that have not exited (those that run between warp operations
/// here are not in lockstep: this is the set a converged warp would report).
inline unsigned __activemask() {
  ::zenflow::emu::detail::require_in_kernel("__activemask");
  const auto& b = ::zenflow::emu::detail::current_block();
  const unsigned w = ::zenflow::emu::detail::current_thread().warp;
  const ::zenflow::emu::detail::tsan_ignore ig;
  unsigned m = 0;
  for (unsigned l = 0; l < 32 && w * 32 + l < b.n; ++l) {
    if (b.threads[w * 32 + l].state != ::zenflow::emu::detail::wait_state::exited) {
      m |= 1u << l;
    }
  }
  return m;
}
inline void __nanosleep(unsigned) {
  ::zenflow::emu::detail::soft_yield();
}
[[noreturn]] inline void __trap() {
  throw ::zenflow::emu::detail::trap_signal{};
}

// ---- fences and atomics ------------------------------------------------------------------------
// A grid runs on one OS thread: the fence orders nothing the compiler may move (a signal fence),
// and under ThreadSanitizer it is the annotation alone.
inline void __threadfence() {
  ::zenflow::emu::detail::tsan_release(&::zenflow::emu::detail::fence_object());
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  ::zenflow::emu::detail::tsan_acquire(&::zenflow::emu::detail::fence_object());
}
inline void __threadfence_system() {
  __threadfence();
}
inline void __threadfence_block() {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

#define ZF_EMU_INT_ATOMIC(name, builtin)                                                                     \
  inline int name(int* p, int v) {                                                                           \
    return builtin(p, v, __ATOMIC_RELAXED);                                                                  \
  }                                                                                                          \
  inline unsigned name(unsigned* p, unsigned v) {                                                            \
    return builtin(p, v, __ATOMIC_RELAXED);                                                                  \
  }                                                                                                          \
  inline unsigned long long name(unsigned long long* p, unsigned long long v) {                              \
    return builtin(p, v, __ATOMIC_RELAXED);                                                                  \
  }                                                                                                          \
  inline long long name(long long* p, long long v) {                                                         \
    return builtin(p, v, __ATOMIC_RELAXED);                                                                  \
  }
ZF_EMU_INT_ATOMIC(atomicAdd, __atomic_fetch_add)
ZF_EMU_INT_ATOMIC(atomicSub, __atomic_fetch_sub)
ZF_EMU_INT_ATOMIC(atomicAnd, __atomic_fetch_and)
ZF_EMU_INT_ATOMIC(atomicOr, __atomic_fetch_or)
ZF_EMU_INT_ATOMIC(atomicXor, __atomic_fetch_xor)
ZF_EMU_INT_ATOMIC(atomicExch, __atomic_exchange_n)
#undef ZF_EMU_INT_ATOMIC
inline float atomicAdd(float* p, float v) {
  return ::zenflow::emu::detail::atomic_update(p, [v](float x) { return x + v; });
}
inline double atomicAdd(double* p, double v) {
  return ::zenflow::emu::detail::atomic_update(p, [v](double x) { return x + v; });
}
inline float atomicExch(float* p, float v) {
  return ::zenflow::emu::detail::atomic_update(p, [v](float) { return v; });
}
template <class T>
T atomicMin(T* p, T v) {
  static_assert(std::is_integral_v<T>);
  return ::zenflow::emu::detail::atomic_update(p, [v](T x) { return v < x ? v : x; });
}
template <class T>
T atomicMax(T* p, T v) {
  static_assert(std::is_integral_v<T>);
  return ::zenflow::emu::detail::atomic_update(p, [v](T x) { return v > x ? v : x; });
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  static_assert(std::is_integral_v<T>);
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  return ::zenflow::emu::detail::atomic_update(p, [limit](unsigned x) { return x >= limit ? 0u : x + 1u; });
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
  return ::zenflow::emu::detail::atomic_update(
      p, [limit](unsigned x) { return (x == 0u || x > limit) ? limit : x - 1u; });
}

// ---- cache-hinted loads and stores: plain accesses here --------------------------------------
template <class T>
T __ldg(const T* p) {
  return *p;
}
template <class T>
T __ldcg(const T* p) {
  return *p;
}
template <class T>
T __ldca(const T* p) {
  return *p;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}
template <class T>
T __ldlu(const T* p) {
  return *p;
}
template <class T>
T __ldcv(const T* p) {
  return *p;
}
template <class T>
void __stcg(T* p, T v) {
  *p = v;
}
template <class T>
void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
void __stwb(T* p, T v) {
  *p = v;
}
template <class T>
void __stwt(T* p, T v) {
  *p = v;
}

// ---- float and bit intrinsics (IEEE round-to-nearest: the host's default mode) ---------------
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long i;
  std::memcpy(&i, &d, 8);
  return i;
}
// Each an operation of its own, never contracted with a neighbour (as their PTX is not).
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __frcp_rn(float a) {
  return 1.0f / a;
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dadd_rn(double a, double b) {
  volatile double r = a + b;
  return r;
}
inline double __dmul_rn(double a, double b) {
  volatile double r = a * b;
  return r;
}
inline double __ddiv_rn(double a, double b) {
  return a / b;
}
inline double __fma_rn(double a, double b, double c) {
  return std::fma(a, b, c);
}
inline float __saturatef(float x) {
  return x > 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); // NaN -> 0, as the device
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline int __ffsll(long long x) {
  return __builtin_ffsll(x);
}
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
