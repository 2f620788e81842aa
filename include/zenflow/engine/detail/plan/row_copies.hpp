/// @file
/// Rows of many matrices copied to or from packed rows in one call: the data-parallel reduction's
/// gathers into its fp32 buffer and scatters back, and a selection's entering rows' gradients
/// gathered from and scattered to their owners in the working type (one launch each instead of
/// one per matrix and owner: on a GPU, 200 matrices over 8 ranks were ~2,200 small launches).
/// Each item is `gather_channels` / `scatter_channels` of one matrix with fp32 or the matrix's
/// own type on the packed side (or, scattered from nothing, zeros): the host loop calls those
/// host twins; the CUDA kernel (kernels.cuh) applies the same conversions element by element
/// (through float: widening is exact, narrowing is `from_float`'s rounding to nearest even), so
/// both backends write the same bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/optim/detail/channels_host.hpp>
#include <zenflow/optim/detail/host_grain.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Which way a batched row copy goes.
enum class row_copy_direction : std::uint8_t {
  gather,  ///< packed[r] <- matrix row idx[r], widened to fp32
  scatter, ///< matrix row idx[r] <- packed[r] rounded to the working type (zeros without `packed`)
};

/// One matrix's rows in a batched row copy.
struct row_copy_item {
  void* matrix = nullptr; ///< the working type `type`; read by a gather, written by a scatter
  dtype type = dtype::f32;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;
  const std::int32_t* idx = nullptr; ///< `count` channels, in the packed side's row order
  std::int64_t count = 0;
  /// Row r at `packed + r * channel_len` elements of `packed_type`; null in a scatter: zeros.
  void* packed = nullptr;
  /// The packed rows' type: fp32, or `type` (the rows as the matrix holds them).
  dtype packed_type = dtype::f32;
  /// The device launch's first block for this item: written by `row_copy_blocks`, read by the
  /// kernel (host arithmetic, as adamw_selective_batch_blocks).
  std::int64_t block_begin = 0;
};

/// Rows per block of a strided item (a 32 x 32 tile through shared memory, so that both the
/// matrix's columns and the packed rows are read and written in whole warps); a contiguous item
/// takes one block per row.
inline constexpr std::int64_t row_copy_tile = 32;

/// The blocks of item `it` in the kernel's launch.
[[nodiscard]] inline std::int64_t row_copy_item_blocks(const row_copy_item& it) {
  if (it.count == 0 || it.channel_len == 0) {
    return 0;
  }
  return it.layout == channel_layout::contiguous ? it.count : (it.count + row_copy_tile - 1) / row_copy_tile;
}

/// Writes every item's `block_begin`; returns the blocks of the whole launch.
inline std::int64_t row_copy_blocks(row_copy_item* items, int n) {
  std::int64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    items[i].block_begin = blocks;
    blocks += row_copy_item_blocks(items[i]);
  }
  return blocks;
}

/// The bytes a batched row copy reads and writes (the emulated device's time model).
[[nodiscard]] inline std::size_t row_copy_bytes(const row_copy_item* items, int n) {
  std::size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    bytes += static_cast<std::size_t>(items[i].count * items[i].channel_len) *
             (dtype_size(items[i].type) + dtype_size(items[i].packed_type));
  }
  return bytes;
}

/// True when an item with rows to copy has its matrix or packed side off its element's boundary:
/// a GPU faults on it (cudaErrorMisalignedAddress, the context lost).
inline bool row_copies_misaligned(const row_copy_item* items, int n) noexcept {
  const auto misaligned = [](const void* p, dtype t) {
    return reinterpret_cast<std::uintptr_t>(p) % dtype_size(t) != 0;
  };
  for (int i = 0; i < n; ++i) {
    if (items[i].count > 0 &&
        (misaligned(items[i].matrix, items[i].type) || misaligned(items[i].packed, items[i].packed_type))) {
      return true;
    }
  }
  return false;
}

/// The host loop: each item with the host twins of gather_channels / scatter_channels, in order
/// (no two items of one call write the same element).
inline cudaError_t
host_copy_rows_batched(const row_copy_item* items, int n, row_copy_direction direction, worker_pool* pool) {
  // The host loop refuses a misaligned item too, before writing anything, so that a staging
  // layout that would fault on a GPU fails on the emulated device as well.
  if (row_copies_misaligned(items, n)) {
    return cudaErrorMisalignedAddress;
  }
  for (int i = 0; i < n; ++i) {
    const row_copy_item& it = items[i];
    if (it.count == 0 || it.channel_len == 0) {
      continue;
    }
    const cudaError_t status = dispatch_dtype(it.type, [&](auto tag) -> cudaError_t {
      using T = decltype(tag);
      const channel_matrix<T> m{static_cast<T*>(it.matrix), it.channels, it.channel_len, it.ld, it.layout};
      // The packed side: fp32 or T (any other type is the caller's error: read as fp32).
      auto with_packed = [&](auto&& f) {
        return it.packed_type == it.type ? f(static_cast<T*>(it.packed)) : f(static_cast<float*>(it.packed));
      };
      if (direction == row_copy_direction::gather) {
        const channel_matrix<const T> src{m.data, m.channels, m.channel_len, m.ld, m.layout};
        return with_packed(
            [&](auto* packed) { return host_gather_channels(src, it.idx, it.count, packed, nullptr, pool); });
      }
      if (it.packed != nullptr) {
        return with_packed([&](auto* packed) {
          return host_scatter_channels(static_cast<const std::remove_pointer_t<decltype(packed)>*>(packed),
                                       it.idx, it.count, m, pool);
        });
      }
      const T zero = from_float<T>(0.0f);
      parallel_for(pool, it.count, rows_per_chunk(it.channel_len),
                   [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
                     for (std::int64_t r = lo; r < hi; ++r) {
                       for (std::int64_t k = 0; k < it.channel_len; ++k) {
                         m(it.idx[r], k) = zero;
                       }
                     }
                   });
      return cudaSuccess;
    });
    if (status != cudaSuccess) {
      return status;
    }
  }
  return cudaSuccess;
}

/// A batched row copy's table in device memory: sized once (nothing allocated after
/// initialize()), filled from a host table through pinned staging of the same size (a copy from
/// pageable memory would run synchronously), launched as one operation of the backend.
template <class Backend>
struct row_copy_table {
  typename Backend::template device_buffer<row_copy_item> items;
  typename Backend::template host_buffer<row_copy_item> staging; // pinned: what the upload reads
  int n = 0;
  std::int64_t blocks = 0;
  std::size_t bytes = 0;

  row_copy_table() = default;
  explicit row_copy_table(std::size_t capacity)
      : items(std::max<std::size_t>(capacity, 1)), staging(std::max<std::size_t>(capacity, 1)) {}

  /// `host` (at most the capacity; its block_begin written here) copied up on `s` through the
  /// staging, which must not be rewritten (by another assign) until the stream has read it.
  /// @throws cuda_error (cudaErrorMisalignedAddress) for an item off its element's boundary,
  ///         before anything is copied: on a GPU the kernel would fault and lose the context.
  void assign(const Backend& b, std::vector<row_copy_item>& host, cudaStream_t s) {
    if (row_copies_misaligned(host.data(), static_cast<int>(host.size()))) {
      detail::check(cudaErrorMisalignedAddress,
                    "zenflow::engine: a batched row copy's item is not aligned to its "
                    "element size");
    }
    n = static_cast<int>(host.size());
    blocks = row_copy_blocks(host.data(), n);
    bytes = row_copy_bytes(host.data(), n);
    if (n > 0) {
      std::copy(host.begin(), host.end(), staging.data());
      b.copy_h2d(items.data(), staging.data(), host.size() * sizeof(row_copy_item), s);
    }
  }
  void run(const Backend& b,
           row_copy_direction dir,
           cudaStream_t s,
           const char* name = "zenflow::engine: copy_rows_batched") const {
    run_range(b, {0, n, blocks, bytes}, dir, s, name);
  }

  /// Items [first, first + n) of the table, launched on their own: `blocks` from their first.
  struct range {
    std::size_t first = 0;
    int n = 0;
    std::int64_t blocks = 0;
    std::size_t bytes = 0;
  };
  /// assign() of consecutive ranges of `host`, `sizes[i]` items each, that run_range() launches
  /// one at a time (each range's block_begin counted from its first item). Returns the ranges.
  std::vector<range> assign_ranges(const Backend& b,
                                   std::vector<row_copy_item>& host,
                                   const std::vector<int>& sizes,
                                   cudaStream_t s) {
    std::vector<range> out;
    std::size_t first = 0;
    for (const int k : sizes) {
      out.push_back(
          {first, k, row_copy_blocks(host.data() + first, k), row_copy_bytes(host.data() + first, k)});
      first += static_cast<std::size_t>(k);
    }
    if (row_copies_misaligned(host.data(), static_cast<int>(host.size()))) {
      detail::check(cudaErrorMisalignedAddress,
                    "zenflow::engine: a batched row copy's item is not aligned to its element size");
    }
    n = static_cast<int>(host.size());
    blocks = 0; // run() launches nothing: run_range() each range
    bytes = 0;
    if (n > 0) {
      std::copy(host.begin(), host.end(), staging.data());
      b.copy_h2d(items.data(), staging.data(), host.size() * sizeof(row_copy_item), s);
    }
    return out;
  }
  void run_range(const Backend& b,
                 const range& r,
                 row_copy_direction dir,
                 cudaStream_t s,
                 const char* name = "zenflow::engine: copy_rows_batched") const {
    if (r.blocks > 0) {
      b.run(s, r.bytes, name,
            [table = items.data() + r.first, n = r.n, blocks = r.blocks, dir](auto prim, auto on) {
              return prim.copy_rows_batched(table, n, blocks, dir, on);
            });
    }
  }
};

} // namespace detail
ZF_NAMESPACE_END
