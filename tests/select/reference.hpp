/// @file
/// Independent references for the select area: float64 loops for channel norms, a brute-force
/// full sort (plain float comparisons, no radix keys) for top-k.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/math/norms.hpp>

namespace zf_test {

/// float64 score of every channel of a `channels x len` matrix in `layout` with leading dim `ld`.
template <class T>
std::vector<double> reference_norms(const T* data,
                                    std::int64_t channels,
                                    std::int64_t len,
                                    std::int64_t ld,
                                    zenflow::channel_layout layout,
                                    zenflow::channel_norm norm) {
  std::vector<double> out(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t c = 0; c < channels; ++c) {
    double s = 0;
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int64_t off = layout == zenflow::channel_layout::contiguous ? c * ld + i : i * ld + c;
      const double x = static_cast<double>(zenflow::to_float(data[off]));
      s += norm == zenflow::channel_norm::sq_l2 ? x * x : std::fabs(x);
    }
    out[static_cast<std::size_t>(c)] = s;
  }
  return out;
}

/// A bound on the relative error of an fp32 sum of `terms` non-negative terms accumulated in
/// runs of at most `run` terms then combined in a tree (the rounding of each term included).
inline double norm_tolerance(std::int64_t terms, std::int64_t run) {
  const double eps = 1.0 / (1 << 23);
  return (static_cast<double>(std::min(terms, run)) + 2.0 * std::log2(static_cast<double>(terms) + 2.0) +
          4.0) *
         eps;
}

/// True when score `a` at index `ia` ranks before score `b` at index `ib`: larger first, NaN
/// last, -0 == +0, ties to the lower index. Plain float comparisons only.
inline bool ranks_before(float a, std::int64_t ia, float b, std::int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) {
    return nb;
  }
  if (!na && a != b) {
    return a > b;
  }
  return ia < ib;
}

/// Indices of the top k of `scores` by brute-force full sort, ascending.
inline std::vector<std::int32_t> reference_topk(const float* scores, std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](std::int64_t a, std::int64_t b) { return ranks_before(scores[a], a, scores[b], b); });
  std::vector<std::int32_t> out(idx.begin(), idx.begin() + k);
  std::sort(out.begin(), out.end());
  return out;
}

/// Brute-force top-k with `topk_item::wide`: as reference_topk, except that two +Inf scores
/// rank by their fp64 values `wide` (larger first, NaN last, ties to the lower index). Plain
/// double comparisons only.
inline std::vector<std::int32_t>
reference_topk_wide(const float* scores, const double* wide, std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const auto pos_inf = [](float v) { return std::isinf(v) && v > 0; };
  std::sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
    if (pos_inf(scores[a]) && pos_inf(scores[b])) {
      const bool na = std::isnan(wide[a]), nb = std::isnan(wide[b]);
      if (na != nb) {
        return nb;
      }
      if (!na && wide[a] != wide[b]) {
        return wide[a] > wide[b];
      }
      return a < b;
    }
    return ranks_before(scores[a], a, scores[b], b);
  });
  std::vector<std::int32_t> out(idx.begin(), idx.begin() + k);
  std::sort(out.begin(), out.end());
  return out;
}

/// Scores of a selection whose squared norms overflowed fp32 in places: random finite scores
/// (a few NaN, -Inf and FLT_MAX among them), `inf` of them +Inf with fp64 values in [3.5e38,
/// 3.5e40) in `wide` (a few equal, a few at the smallest and largest such value, one NaN);
/// `wide` is NaN where the score is finite (the selection must not read it there).
struct overflow_scores {
  std::vector<float> scores;
  std::vector<double> wide;
};

inline overflow_scores make_overflow_scores(std::int64_t n, std::int64_t inf, std::uint64_t seed) {
  overflow_scores o;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> finite(0.0f, 1e30f);
  std::uniform_real_distribution<double> big(0.0, 2.0);
  o.scores.resize(static_cast<std::size_t>(n));
  o.wide.assign(static_cast<std::size_t>(n), std::nan(""));
  for (auto& x : o.scores) {
    x = finite(gen);
  }
  if (n > 8) {
    o.scores[1] = std::nanf("");
    o.scores[2] = -std::numeric_limits<float>::infinity();
    o.scores[3] = std::numeric_limits<float>::max();
  }
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), gen);
  for (std::int64_t j = 0; j < inf; ++j) {
    const auto i = static_cast<std::size_t>(idx[static_cast<std::size_t>(j)]);
    o.scores[i] = std::numeric_limits<float>::infinity();
    double w = 3.5e38 * std::pow(10.0, big(gen));
    switch (j % 7) {
    case 0:
      w = 1e40; // equal values: ties to the lower index
      break;
    case 1:
      w = 3.5e38;
      break;
    case 2:
      w = std::nextafter(1e40, 0.0);
      break;
    default:
      break;
    }
    o.wide[i] = w;
  }
  if (inf > 3) {
    o.wide[static_cast<std::size_t>(idx[3])] = std::nan(""); // lowest of the +Inf scores
  }
  return o;
}

} // namespace zf_test
