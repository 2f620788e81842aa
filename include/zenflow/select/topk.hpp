/// @file
/// Top-k selection of fp32 scores: the indices (and optionally the values) of the k largest of
/// n scores, by radix selection on a total order (larger score first, ties to the lower index,
/// -0 == +0, NaN below -Inf; see `detail/radix_math.hpp`). The selected *set* is therefore
/// unique and reproducible run to run, on the host and on the device alike.
///
/// This header holds the argument types, the validation shared with the CUDA launchers
/// (`<zenflow/select/topk.cuh>`, namespace `zenflow::device`) and the host backend (namespace
/// `zenflow::host`), which runs the same radix passes with the same arithmetic on host memory
/// over a `worker_pool`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/detail/radix_math.hpp>

ZF_NAMESPACE_BEGIN

/// Order of the selected indices in the output.
enum class topk_order : std::uint8_t {
  /// No order is promised (today both backends write ascending indices: it costs nothing).
  unsorted,
  /// Indices ascending (what the engine wants: a sorted channel set).
  ascending_index,
};

/// One segment of a segmented (batched) top-k: the `k` largest of `n` scores.
struct topk_item {
  const float* scores = nullptr;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int32_t* indices = nullptr; ///< `k` indices out (into `scores`)
  float* values = nullptr;         ///< `k` values out, or nullptr
};

namespace detail {

inline constexpr std::int64_t topk_max_n = std::int64_t{1} << 31; // indices are int32

[[nodiscard]] inline cudaError_t
check_topk_item(const char* function, const char* batch_name, std::int64_t i, const topk_item& it) {
  ZF_EXPECT_ARG(it.n >= 0, function, item_arg(batch_name, i, "n"), "must be >= 0");
  ZF_EXPECT_ARG(it.n < topk_max_n, function, item_arg(batch_name, i, "n"), "must be < 2^31 (int32 indices)");
  ZF_EXPECT_ARG(it.k >= 0, function, item_arg(batch_name, i, "k"), "must be >= 0");
  ZF_EXPECT_ARG(it.k <= it.n, function, item_arg(batch_name, i, "k"), "must be <= n");
  ZF_EXPECT_ARG(it.scores != nullptr || it.n == 0, function, item_arg(batch_name, i, "scores"),
                "must not be null");
  ZF_EXPECT_ARG(it.indices != nullptr || it.k == 0, function, item_arg(batch_name, i, "indices"),
                "must not be null");
  return cudaSuccess;
}

[[nodiscard]] inline cudaError_t check_topk_order(const char* function, topk_order order) {
  ZF_EXPECT_ARG(order == topk_order::unsorted || order == topk_order::ascending_index, function, "order",
                "must be unsorted or ascending_index");
  return cudaSuccess;
}

inline constexpr std::int64_t host_topk_grain = 1 << 15;

/// `p` rounded up to a multiple of 64 bytes (the host backend's scratch carries 64 bytes of slack).
[[nodiscard]] inline std::byte* align_pointer(void* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + 63) / 64 * 64);
}

/// Scratch of one host selection of `n` scores: candidate keys, per-chunk histograms and counts.
[[nodiscard]] inline std::size_t host_topk_temp_bytes(std::int64_t n) {
  const auto chunks = static_cast<std::size_t>(worker_pool::chunk_count(n, host_topk_grain));
  return align_up(static_cast<std::size_t>(n) * sizeof(std::uint64_t)) +
         align_up(chunks * topk_bins * sizeof(std::uint32_t)) + align_up((chunks + 1) * sizeof(std::int64_t));
}

/// One selection on the host (see the file comment for the order). `temp` holds
/// `host_topk_temp_bytes(n)` bytes.
inline void host_topk_item(const topk_item& it, std::byte* temp, worker_pool* pool) {
  const std::int64_t n = it.n;
  const std::int64_t k = it.k;
  if (k == 0) {
    return;
  }
  const std::int64_t chunks = worker_pool::chunk_count(n, host_topk_grain);
  auto* cand = reinterpret_cast<std::uint64_t*>(temp);
  auto* hist = reinterpret_cast<std::uint32_t*>(temp + align_up(static_cast<std::size_t>(n) * 8));
  auto* counts = reinterpret_cast<std::int64_t*>(reinterpret_cast<std::byte*>(hist) +
                                                 align_up(static_cast<std::size_t>(chunks) * topk_bins * 4));
  const float* scores = it.scores;
  auto key_at = [scores](std::int64_t i) {
    return topk_composite(topk_value_key(scores[i]), static_cast<std::uint32_t>(i));
  };

  // Histogram of pass p over `m` keys given by `get`, counting those that match the known prefix;
  // chunk histograms are summed in chunk order (integers: any order gives the same counts).
  topk_radix_state s{};
  s.k_remaining = static_cast<std::uint64_t>(k);
  auto run_pass = [&](int p, std::int64_t m, auto get) {
    const std::int64_t nch = worker_pool::chunk_count(m, host_topk_grain);
    const std::uint64_t mask = topk_known_mask(p);
    const std::uint64_t prefix = s.prefix;
    parallel_for(pool, m, host_topk_grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      std::uint32_t* h = hist + c * topk_bins;
      std::fill(h, h + topk_bins, 0u);
      for (std::int64_t i = lo; i < hi; ++i) {
        const std::uint64_t key = get(i);
        if ((key & mask) == prefix) {
          ++h[topk_digit(key, p)];
        }
      }
    });
    for (std::int64_t c = 1; c < nch; ++c) {
      const std::uint32_t* h = hist + c * topk_bins;
      for (int d = 0; d < topk_bins; ++d) {
        hist[d] += h[d];
      }
    }
    topk_advance(s, p, topk_find_bucket(hist, s.k_remaining));
  };

  run_pass(0, n, key_at);
  if (s.done == 0) {
    // Gather the keys of the chosen top-level bucket once; later passes read only those.
    const std::uint64_t mask = topk_known_mask(1);
    const std::uint64_t prefix = s.prefix;
    parallel_for(pool, n, host_topk_grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      std::int64_t m = 0;
      for (std::int64_t i = lo; i < hi; ++i) {
        m += (key_at(i) & mask) == prefix ? 1 : 0;
      }
      counts[c] = m;
    });
    std::int64_t total = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t m = counts[c];
      counts[c] = total;
      total += m;
    }
    parallel_for(pool, n, host_topk_grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      std::int64_t o = counts[c];
      for (std::int64_t i = lo; i < hi; ++i) {
        const std::uint64_t key = key_at(i);
        if ((key & mask) == prefix) {
          cand[o++] = key;
        }
      }
    });
    for (int p = 1; p < topk_passes && s.done == 0; ++p) {
      run_pass(p, total, [cand](std::int64_t i) { return cand[i]; });
    }
  }

  // Every key >= the threshold is selected: exactly k of them. Chunk counts, then a prefix sum,
  // then writes in index order.
  const std::uint64_t threshold = s.prefix;
  parallel_for(pool, n, host_topk_grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
    std::int64_t m = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      m += key_at(i) >= threshold ? 1 : 0;
    }
    counts[c] = m;
  });
  std::int64_t total = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t m = counts[c];
    counts[c] = total;
    total += m;
  }
  parallel_for(pool, n, host_topk_grain, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
    std::int64_t o = counts[c];
    for (std::int64_t i = lo; i < hi; ++i) {
      if (key_at(i) >= threshold) {
        it.indices[o] = static_cast<std::int32_t>(i);
        if (it.values != nullptr) {
          it.values[o] = scores[i];
        }
        ++o;
      }
    }
  });
}

} // namespace detail

namespace host {

/// Host twin of `zenflow::device::topk`: the indices (and values) of the `k` largest of `n`
/// scores, in the order described in `<zenflow/select/topk.hpp>`.
///
/// @param temp        scratch; nullptr only writes `temp_bytes` (about 8 bytes per score)
/// @param temp_bytes  size of `temp` in bytes
/// @param scores      `n` fp32 scores (host memory)
/// @param n           0 <= n < 2^31
/// @param k           0 <= k <= n; k == 0 writes nothing
/// @param indices     `k` int32 indices out; may be null when k == 0
/// @param values      `k` scores out, or nullptr
/// @param order       `ascending_index` or `unsorted` (no order promised)
/// @param pool        threads to use; nullptr runs on the calling thread
/// Deterministic: the same set, in the same order, whatever the thread count. Outputs must not
/// alias `scores` or `temp`.
[[nodiscard]] inline cudaError_t topk(void* temp,
                                      std::size_t& temp_bytes,
                                      const float* scores,
                                      std::int64_t n,
                                      std::int64_t k,
                                      std::int32_t* indices,
                                      float* values = nullptr,
                                      topk_order order = topk_order::ascending_index,
                                      worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::topk";
  const topk_item it{scores, n, k, indices, values};
  if (const cudaError_t e = detail::check_topk_item(fn, nullptr, 0, it); e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = detail::check_topk_order(fn, order); e != cudaSuccess) {
    return e;
  }
  const std::size_t need = std::max(detail::min_temp_bytes, detail::host_topk_temp_bytes(n) + 64);
  if (temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  detail::host_topk_item(it, detail::align_pointer(temp), pool);
  return cudaSuccess;
}

/// Host twin of `zenflow::device::topk_segmented`: one independent top-k per item.
///
/// @param temp        scratch; nullptr only writes `temp_bytes`
/// @param temp_bytes  size of `temp` in bytes
/// @param items       `count` segments (host array of descriptors; the data is host memory)
/// @param count       number of items, >= 0
/// @param order       as for `topk`
/// @param pool        threads to use (segments run in parallel); nullptr: the calling thread
[[nodiscard]] inline cudaError_t topk_segmented(void* temp,
                                                std::size_t& temp_bytes,
                                                const topk_item* items,
                                                std::int64_t count,
                                                topk_order order = topk_order::ascending_index,
                                                worker_pool* pool = nullptr) {
  constexpr const char* fn = "zenflow::host::topk_segmented";
  ZF_EXPECT_ARG(count >= 0, fn, "count", "must be >= 0");
  ZF_EXPECT_ARG(items != nullptr || count == 0, fn, "items", "must not be null");
  for (std::int64_t i = 0; i < count; ++i) {
    if (const cudaError_t e = detail::check_topk_item(fn, "items", i, items[i]); e != cudaSuccess) {
      return e;
    }
  }
  if (const cudaError_t e = detail::check_topk_order(fn, order); e != cudaSuccess) {
    return e;
  }
  std::size_t need = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    need += detail::align_up(detail::host_topk_temp_bytes(items[i].n));
  }
  need = std::max(need + 64, detail::min_temp_bytes);
  if (temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  ZF_EXPECT_ARG(temp_bytes >= need, fn, "temp_bytes", "is smaller than the size query returned");
  std::byte* base = detail::align_pointer(temp);
  std::size_t offset = 0;
  // Many segments: one per task, each single-threaded. Few: one after the other, each parallel.
  const bool across = pool != nullptr && count >= static_cast<std::int64_t>(pool->size());
  if (across) {
    std::vector<std::size_t> offsets(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      offsets[static_cast<std::size_t>(i)] = offset;
      offset += detail::align_up(detail::host_topk_temp_bytes(items[i].n));
    }
    pool->parallel_for(count, 1, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        detail::host_topk_item(items[i], base + offsets[static_cast<std::size_t>(i)], nullptr);
      }
    });
  } else {
    for (std::int64_t i = 0; i < count; ++i) {
      detail::host_topk_item(items[i], base + offset, pool);
      offset += detail::align_up(detail::host_topk_temp_bytes(items[i].n));
    }
  }
  return cudaSuccess;
}

} // namespace host

ZF_NAMESPACE_END
