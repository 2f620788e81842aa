/// @file
/// The host channel-norm loops, written once over an ISA's `ops` and included once per SIMD
/// target by `norm_simd.hpp` (inside ZF_SIMD_TARGET regions, each in its own namespace),
/// so that one body serves the scalar, AVX2 and AVX-512 paths.
///
/// Every path adds the same terms in the same order, every product rounded before it is added (no FMA
/// contraction), so all of them write the same bits:
/// - a contiguous channel keeps `norm_lanes` (64) fp32 partial sums, element `i` going to lane
///   `i % 64`; the lanes are folded pairwise (lane l += lane l + s, s = 32, 16, ..., 1);
/// - a strided block keeps one fp32 sum per column and adds the rows it is given in order (the
///   caller walks the chunks and row lanes of norm_order.hpp).
///
/// No include guard on purpose. Included on its own (header self-containment check) it is empty.
#if defined(ZF_NORM_SIMD_BODY)

/// The norm term of `x` (one register of working values widened to fp32).
template <channel_norm Norm>
ZF_FORCEINLINE ops::reg term(ops::reg x) {
  if constexpr (Norm == channel_norm::sq_l2) {
    return ops::mul(x, x);
  } else {
    return ops::abs(x);
  }
}

/// The same term for one element (tails).
template <channel_norm Norm, class T>
ZF_FORCEINLINE float term1(T v) {
  const float x = to_float(v);
  if constexpr (Norm == channel_norm::sq_l2) {
    return mul_f(x, x);
  } else {
    return std::fabs(x);
  }
}

/// Score of one contiguous channel of `len` elements.
template <channel_norm Norm, class T>
inline float contiguous_score(const T* p, std::int64_t len) {
  constexpr int regs = norm_lanes / ops::width;
  ops::reg acc[regs];
  for (int r = 0; r < regs; ++r) {
    acc[r] = ops::zero();
  }
  std::int64_t i = 0;
  for (; i + norm_lanes <= len; i += norm_lanes) {
    for (int r = 0; r < regs; ++r) {
      acc[r] = ops::add(acc[r], term<Norm>(ops::load(p + i + r * ops::width)));
    }
  }
  float lane[norm_lanes];
  for (int r = 0; r < regs; ++r) {
    ops::store(lane + r * ops::width, acc[r]);
  }
  for (int l = 0; i < len; ++i, ++l) {
    lane[l] = lane[l] + term1<Norm>(p[i]);
  }
  for (int s = norm_lanes / 2; s > 0; s /= 2) {
    for (int l = 0; l < s; ++l) {
      lane[l] = lane[l] + lane[l + s];
    }
  }
  return lane[0];
}

/// Adds `rows` rows (leading dimension `ld`) of `w` columns starting at `p` into `acc[0, w)`,
/// row after row for every column.
template <channel_norm Norm, class T>
inline void strided_accumulate(const T* p, std::int64_t ld, std::int64_t rows, std::int64_t w, float* acc) {
  std::int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T* r0 = p + r * ld;
    const T* r1 = r0 + ld;
    const T* r2 = r1 + ld;
    const T* r3 = r2 + ld;
    std::int64_t j = 0;
    for (; j + ops::width <= w; j += ops::width) {
      ops::reg a = ops::load(acc + j);
      a = ops::add(a, term<Norm>(ops::load(r0 + j)));
      a = ops::add(a, term<Norm>(ops::load(r1 + j)));
      a = ops::add(a, term<Norm>(ops::load(r2 + j)));
      a = ops::add(a, term<Norm>(ops::load(r3 + j)));
      ops::store(acc + j, a);
    }
    for (; j < w; ++j) {
      float a = acc[j];
      a = a + term1<Norm>(r0[j]);
      a = a + term1<Norm>(r1[j]);
      a = a + term1<Norm>(r2[j]);
      a = a + term1<Norm>(r3[j]);
      acc[j] = a;
    }
  }
  for (; r < rows; ++r) {
    const T* r0 = p + r * ld;
    std::int64_t j = 0;
    for (; j + ops::width <= w; j += ops::width) {
      ops::store(acc + j, ops::add(ops::load(acc + j), term<Norm>(ops::load(r0 + j))));
    }
    for (; j < w; ++j) {
      acc[j] = acc[j] + term1<Norm>(r0[j]);
    }
  }
}

#endif
