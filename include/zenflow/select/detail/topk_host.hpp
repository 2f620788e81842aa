/// @file
/// The host backend of the radix top-k (`zenflow::host::topk*`): the same radix passes with the
/// same arithmetic (`radix_math.hpp`) as the kernels, on host memory over a `worker_pool`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/temp_storage.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/select/detail/radix_math.hpp>
#include <zenflow/select/types.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::int64_t host_topk_grain = 1 << 15;

/// Alignment of the host backend's scratch (the size queries add this much slack).
inline constexpr std::size_t host_topk_align = 64;

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

/// After `host_topk_item`: the item's +Inf scores re-ranked by `it.wide` when its k-th largest
/// score is +Inf (radix_math.hpp, "+Inf scores ranked by their fp64 values"), on the calling
/// thread (a rare case: a gradient whose channels' squares overflow fp32).
inline void host_topk_wide(const topk_item& it) {
  if (it.wide == nullptr || it.k == 0) {
    return;
  }
  for (std::int64_t o = 0; o < it.k; ++o) {
    if (!topk_is_pos_inf(it.scores[it.indices[o]])) {
      return; // every +Inf score is selected
    }
  }
  std::vector<std::int64_t> inf;
  for (std::int64_t i = 0; i < it.n; ++i) {
    if (topk_is_pos_inf(it.scores[i])) {
      inf.push_back(i);
    }
  }
  if (static_cast<std::int64_t>(inf.size()) == it.k) {
    return;
  }
  topk_wide96 t{};
  for (int b = topk_wide_bits - 1; b >= 0; --b) {
    const topk_wide96 cand = topk_wide_with_bit(t, b);
    std::int64_t count = 0;
    for (const std::int64_t i : inf) {
      count += topk_wide_selected(it.scores, it.wide, i, cand) ? 1 : 0;
    }
    if (count >= it.k) {
      t = cand;
    }
  }
  std::int64_t o = 0;
  for (const std::int64_t i : inf) {
    if (topk_wide_selected(it.scores, it.wide, i, t)) {
      it.indices[o] = static_cast<std::int32_t>(i);
      if (it.values != nullptr) {
        it.values[o] = it.scores[i];
      }
      ++o;
    }
  }
}

/// Scratch of a segmented host selection (the size query adds `host_topk_align`).
[[nodiscard]] inline std::size_t host_topk_segmented_temp_bytes(const topk_item* items, std::int64_t count) {
  std::size_t need = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    need += align_up(host_topk_temp_bytes(items[i].n));
  }
  return need;
}

/// `count` independent selections; `temp` holds `host_topk_segmented_temp_bytes` bytes, aligned.
inline void
host_topk_segmented(const topk_item* items, std::int64_t count, std::byte* base, worker_pool* pool) {
  std::size_t offset = 0;
  // Many segments: one per task, each single-threaded. Few: one after the other, each parallel.
  const bool across = pool != nullptr && count >= static_cast<std::int64_t>(pool->size());
  if (across) {
    std::vector<std::size_t> offsets(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      offsets[static_cast<std::size_t>(i)] = offset;
      offset += align_up(host_topk_temp_bytes(items[i].n));
    }
    pool->parallel_for(count, 1, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        host_topk_item(items[i], base + offsets[static_cast<std::size_t>(i)], nullptr);
        host_topk_wide(items[i]);
      }
    });
  } else {
    for (std::int64_t i = 0; i < count; ++i) {
      host_topk_item(items[i], base + offset, pool);
      host_topk_wide(items[i]);
      offset += align_up(host_topk_temp_bytes(items[i].n));
    }
  }
}

} // namespace detail

ZF_NAMESPACE_END
