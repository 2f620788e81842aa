/// @file
/// Emulation-only stand-ins for the CUB block collectives the kernels use (`cub::BlockReduce`,
/// `cub::BlockScan`), with CUB's contract: a `TempStorage` the kernel declares in shared memory,
/// every thread of the block calling, a barrier before the storage is reused, the aggregate
/// valid in thread 0 (reduce) or in every thread (scan). On the GPU path CUB itself runs
/// (core/kernel.hpp chooses).
///
/// Built from the emulated warp shuffles and barriers, so the emulator's detectors watch them too
/// (a call not reached by the whole block is a divergent barrier). The order of a float sum is
/// CUB's warp-reductions order as CUB documents and implements it (a shuffle-down tree in each
/// warp, then the warps' sums added in order by thread 0); it has not been compared with CUB on a
/// GPU. The scans are of integers only, whose order does not matter.
#pragma once

#include <type_traits>

#include <zenflow/emu/detail/device_api.hpp>

ZF_NAMESPACE_BEGIN
namespace emu {

enum block_reduce_algorithm {
  block_reduce_warp_reductions,
  block_reduce_raking,
  block_reduce_raking_commutative
};
enum block_scan_algorithm { block_scan_raking, block_scan_raking_memoize, block_scan_warp_scans };

namespace detail {
inline unsigned block_linear_tid() {
  const auto& t = current_thread();
  return t.thread_idx.x + t.block_dim.x * (t.thread_idx.y + t.block_dim.y * t.thread_idx.z);
}
/// A collective of a DimX x DimY x DimZ block called in a block of another shape fails the launch.
template <int DimX, int DimY, int DimZ>
void check_block_shape(const char* what) {
  const auto& d = current_thread().block_dim;
  if (static_cast<int>(d.x) != DimX || static_cast<int>(d.y) != DimY || static_cast<int>(d.z) != DimZ) {
    throw cuda_error(cudaErrorLaunchFailure, std::string("zenflow::emu: a ") + what + " of " +
                                                 std::to_string(DimX * DimY * DimZ) +
                                                 " threads in a block of " + std::to_string(d.x * d.y * d.z));
  }
}
} // namespace detail

/// `cub::BlockReduce`'s stand-in: `Sum` and `Reduce` of a full block, result in thread 0.
template <class T,
          int DimX,
          block_reduce_algorithm = block_reduce_warp_reductions,
          int DimY = 1,
          int DimZ = 1>
class block_reduce {
  static constexpr int threads = DimX * DimY * DimZ;
  static constexpr int warps = (threads + 31) / 32;

public:
  struct TempStorage {
    T warp_aggregate[warps];
  };
  explicit block_reduce(TempStorage& storage) : s_(storage) {}

  T Sum(T input) {
    return Reduce(input, [](const T& a, const T& b) { return a + b; });
  }
  template <class Op>
  T Reduce(T input, Op op) {
    detail::check_block_shape<DimX, DimY, DimZ>("block_reduce");
    const unsigned tid = detail::block_linear_tid();
    const unsigned lane = tid % 32;
    const unsigned warp = tid / 32;
    const unsigned warp_threads = threads - warp * 32 < 32 ? threads - warp * 32 : 32;
    const unsigned last_lane = warp_threads - 1;
    const unsigned mask = warp_threads == 32 ? 0xffffffffu : ((1u << warp_threads) - 1u);
    T v = input;
    // CUB's WarpReduceShfl: lane i adds lane i + 2^s while that lane is in the warp.
    for (unsigned offset = 1; offset < 32; offset *= 2) {
      const T other = __shfl_down_sync(mask, v, offset);
      if (lane + offset <= last_lane) {
        v = op(v, other);
      }
    }
    if (lane == 0) {
      s_.warp_aggregate[warp] = v;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < warps; ++w) {
        v = op(v, s_.warp_aggregate[w]);
      }
    }
    return v;
  }

private:
  TempStorage& s_;
};

/// `cub::BlockScan`'s stand-in for integers: `ExclusiveSum` and `InclusiveSum`, with or without
/// the block's aggregate (returned to every thread).
template <class T, int DimX, block_scan_algorithm = block_scan_raking, int DimY = 1, int DimZ = 1>
class block_scan {
  static_assert(
      std::is_integral_v<T>,
      "zenflow::emu: block_scan stands in for integer scans only (a float scan's order is CUB's own)");
  static constexpr int threads = DimX * DimY * DimZ;
  static constexpr int warps = (threads + 31) / 32;

public:
  struct TempStorage {
    T warp_aggregate[warps];
  };
  explicit block_scan(TempStorage& storage) : s_(storage) {}

  void ExclusiveSum(T input, T& output) {
    T aggregate;
    ExclusiveSum(input, output, aggregate);
  }
  void ExclusiveSum(T input, T& output, T& block_aggregate) {
    const T inclusive = scan(input, block_aggregate);
    output = inclusive - input;
  }
  void InclusiveSum(T input, T& output) {
    T aggregate;
    output = scan(input, aggregate);
  }
  void InclusiveSum(T input, T& output, T& block_aggregate) { output = scan(input, block_aggregate); }

private:
  /// Inclusive prefix of `input` over the block (a shuffle-up scan in each warp, the warps'
  /// totals through shared memory).
  T scan(T input, T& aggregate) {
    detail::check_block_shape<DimX, DimY, DimZ>("block_scan");
    const unsigned tid = detail::block_linear_tid();
    const unsigned lane = tid % 32;
    const unsigned warp = tid / 32;
    const unsigned warp_threads = threads - warp * 32 < 32 ? threads - warp * 32 : 32;
    const unsigned mask = warp_threads == 32 ? 0xffffffffu : ((1u << warp_threads) - 1u);
    T v = input;
    for (unsigned offset = 1; offset < 32; offset *= 2) {
      const T other = __shfl_up_sync(mask, v, offset);
      if (lane >= offset) {
        v += other;
      }
    }
    if (lane == warp_threads - 1) {
      s_.warp_aggregate[warp] = v;
    }
    __syncthreads();
    T before = 0;
    T total = 0;
    for (int w = 0; w < warps; ++w) {
      if (static_cast<unsigned>(w) < warp) {
        before += s_.warp_aggregate[w];
      }
      total += s_.warp_aggregate[w];
    }
    aggregate = total;
    return before + v;
  }
  TempStorage& s_;
};

} // namespace emu
ZF_NAMESPACE_END
