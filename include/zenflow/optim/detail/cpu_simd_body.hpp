/// @file
/// The CPU AdamW loops, written once over an ISA's `ops` and included once per SIMD target by
/// cpu_simd.hpp (inside ZF_SIMD_TARGET regions, each in its own namespace), so that one
/// body serves the scalar, AVX2 and AVX-512 paths (Highway's "foreach target" idea).
///
/// Each vector lane runs exactly the operations of `zenflow::adam_update` (math/adam.hpp) in the
/// same order, and tails run that function itself, so every path writes the same bits.
/// L1 sums are kept in 16 lanes on every path and reduced in lane order, so they too agree.
///
/// No include guard on purpose. Included on its own (header self-containment check) it is empty.
#if defined(ZF_CPU_SIMD_BODY)

/// The vector constants of one update.
struct vconsts {
  ops::reg beta1, omb1, beta2, omb2, eps, nss, ibc2, decay, l2, scale;
};

ZF_FORCEINLINE vconsts broadcast(const adam_constants& c, float scale) {
  return {ops::set1(c.beta1),        ops::set1(c.one_minus_beta1),
          ops::set1(c.beta2),        ops::set1(c.one_minus_beta2),
          ops::set1(c.eps),          ops::set1(c.neg_step_size),
          ops::set1(c.inv_sqrt_bc2), ops::set1(c.decay),
          ops::set1(c.l2),           ops::set1(scale)};
}

/// The lanes' version of zenflow::adam_update: same operations, same order.
ZF_FORCEINLINE ops::reg update(ops::reg& p, ops::reg& m, ops::reg& v, ops::reg g, const vconsts& k) {
  g = ops::mul(g, k.scale);
  g = ops::fma(k.l2, p, g);
  m = ops::fma(k.beta1, m, ops::mul(k.omb1, g));
  v = ops::fma(ops::mul(k.omb2, g), g, ops::mul(k.beta2, v));
  const ops::reg denom = ops::fma(ops::sqrt(v), k.ibc2, k.eps);
  p = ops::fma(k.nss, ops::div(m, denom), ops::mul(p, k.decay));
  return p;
}

/// Stores a moment register: fp32 as it is, bf16 with the stochastic rounding of
/// detail/moment_rounding.hpp (`index` = the first lane's element index, `count` = this update).
template <class M>
ZF_FORCEINLINE void
store_moment(M* p, ops::reg x, std::int64_t index, std::uint32_t count, std::uint32_t which) {
  if constexpr (std::is_same_v<M, float>) {
    ops::store(p, x);
  } else {
    const auto lo = static_cast<std::uint32_t>(index);
    if (lo <= 0xffffffffu - ops::width) { // the lanes share the index's high bits
      ops::store_stochastic(
          p, x, lo,
          moment_hash_key(static_cast<std::uint32_t>(static_cast<std::uint64_t>(index) >> 32), count, which));
    } else {
      float lanes[ops::width];
      std::uint16_t bits[ops::width];
      ops::store(lanes, x);
      for (int j = 0; j < ops::width; ++j) {
        bits[j] = round_moment_bf16(lanes[j], static_cast<std::uint64_t>(index + j), count, which);
      }
      std::memcpy(static_cast<void*>(p), bits, sizeof(bits));
    }
  }
}

/// One element of the tails: zenflow::adam_update on a widened moment pair, stored back.
template <class M, class G>
ZF_FORCEINLINE float adam_element(float& master,
                                  M& m,
                                  M& v,
                                  G g,
                                  float scale,
                                  const adam_constants& c,
                                  std::int64_t index,
                                  std::uint32_t count) {
  if constexpr (std::is_same_v<M, float>) {
    return adam_update(master, m, v, g, scale, c);
  } else {
    float mf = to_float(m), vf = to_float(v);
    const float p = adam_update(master, mf, vf, g, scale, c);
    m = from_raw_bits<bfloat16>(round_moment_bf16(mf, static_cast<std::uint64_t>(index), count, moment_m));
    v = from_raw_bits<bfloat16>(round_moment_bf16(vf, static_cast<std::uint64_t>(index), count, moment_v));
    return p;
  }
}

/// AdamW over n elements: master/m/v updated in place, `out` (nullable) gets the new weights.
/// Moments M are float or bfloat16 (then `index0` is the first element's index and `count` this
/// update's count, the inputs of the rounding's hash).
template <class G, class T, class M>
void adam_span(float* master,
               M* m,
               M* v,
               const G* grad,
               T* out,
               std::int64_t n,
               const adam_constants& c,
               float scale,
               std::int64_t index0,
               std::uint32_t count) {
  const vconsts k = broadcast(c, scale);
  std::int64_t i = 0;
  for (; i + ops::width <= n; i += ops::width) {
    ops::reg p = ops::load(master + i);
    ops::reg mm = ops::load(m + i);
    ops::reg vv = ops::load(v + i);
    update(p, mm, vv, ops::load(grad + i), k);
    ops::store(master + i, p);
    store_moment(m + i, mm, index0 + i, count, moment_m);
    store_moment(v + i, vv, index0 + i, count, moment_v);
    if (out != nullptr) {
      ops::store(out + i, p);
    }
  }
  for (; i < n; ++i) {
    const float p = adam_element(master[i], m[i], v[i], grad[i], scale, c, index0 + i, count);
    if (out != nullptr) {
      out[i] = from_float<T>(p);
    }
  }
}

/// acc += coef * slot over n elements.
template <class S>
void accumulate_span(float* acc, const S* slot, float coef, std::int64_t n) {
  const ops::reg k = ops::set1(coef);
  std::int64_t i = 0;
  for (; i + ops::width <= n; i += ops::width) {
    ops::store(acc + i, ops::fma(k, ops::load(slot + i), ops::load(acc + i)));
  }
  for (; i < n; ++i) {
    acc[i] = accumulate_value(acc[i], coef, to_float(slot[i]));
  }
}

/// The fused host window on one channel: acc += coef * slot (slot nullable), AdamW with acc as
/// the gradient and `scale` (1 / steps) as its scale, new weights to `out`, acc zeroed unless
/// `keep_acc` (the next window's first step overwrites it). Moments as in adam_span.
template <class S, class T, class M>
void window_span(float* acc,
                 const S* slot,
                 float coef,
                 float* master,
                 M* m,
                 M* v,
                 T* out,
                 std::int64_t n,
                 const adam_constants& c,
                 float scale,
                 std::int64_t index0,
                 std::uint32_t count,
                 bool keep_acc) {
  const vconsts k = broadcast(c, scale);
  const ops::reg kc = ops::set1(coef);
  const ops::reg zero = ops::set1(0.0f);
  std::int64_t i = 0;
  for (; i + ops::width <= n; i += ops::width) {
    ops::reg g = ops::load(acc + i);
    if (slot != nullptr) {
      g = ops::fma(kc, ops::load(slot + i), g);
    }
    ops::reg p = ops::load(master + i);
    ops::reg mm = ops::load(m + i);
    ops::reg vv = ops::load(v + i);
    update(p, mm, vv, g, k);
    ops::store(master + i, p);
    store_moment(m + i, mm, index0 + i, count, moment_m);
    store_moment(v + i, vv, index0 + i, count, moment_v);
    ops::store(out + i, p);
    if (!keep_acc) {
      ops::store(acc + i, zero);
    }
  }
  for (; i < n; ++i) {
    float g = acc[i];
    if (slot != nullptr) {
      g = accumulate_value(g, coef, to_float(slot[i]));
    }
    out[i] = from_float<T>(adam_element(master[i], m[i], v[i], g, scale, c, index0 + i, count));
    if (!keep_acc) {
      acc[i] = 0.0f;
    }
  }
}

/// window_span on one whole row of `n` elements with int8 moments at the
/// row's start: acc += coef * slot (slot nullable), AdamW with acc times `scale` as the gradient,
/// new weights to `out`, acc zeroed unless `keep_acc`. `index0` is the row's first whole-matrix
/// element index and `count` this update's count (the rounding hash's inputs). Scalar code over
/// scalar math (math/adam.hpp, core/detail/moment_q8.hpp: exact IEEE operations), compiled per
/// target so that fma, floor and the loops use the target's instructions: the same bits on every
/// path, as the tails of the loops above.
template <class S, class T>
void window_row_q8(float* acc,
                   const S* slot,
                   float coef,
                   float* master,
                   q8_ptr m,
                   q8_ptr v,
                   T* out,
                   std::int64_t n,
                   const adam_constants& c,
                   float scale,
                   std::int64_t index0,
                   std::uint32_t count,
                   bool keep_acc) {
  const vconsts k = broadcast(c, scale);
  const ops::reg kc = ops::set1(coef);
  const ops::reg zero = ops::set1(0.0f);
  alignas(64) float mf[q8_block], vf[q8_block], uf[q8_block], tm[q8_block], tu[q8_block];
  alignas(64) float lanes[2][ops::width];
  for (std::int64_t b = 0; b * q8_block < n; ++b) {
    const std::int64_t o = b * q8_block;
    const int nb = static_cast<int>(n - o < q8_block ? n - o : q8_block);
    const float sm = q8_step(m.scale[b], q8_m_levels), su = q8_step(v.scale[b], q8_u_levels);
    // Dequantize in lanes (q8_m_value's and q8_u_value's operations: the codes widen exactly), then
    // the partial block's tail.
    int j = 0;
    const ops::reg vsm = ops::set1(sm), vsu = ops::set1(su);
    for (; j + ops::width <= nb; j += ops::width) {
      ops::store(mf + j, ops::mul(ops::load_i8(m.code + o + j), vsm));
      const ops::reg u = ops::mul(ops::load_u8(v.code + o + j), vsu);
      ops::store(vf + j, ops::mul(u, u));
    }
    for (; j < nb; ++j) {
      mf[j] = q8_m_value(m.code[o + j], sm);
      const float u = q8_u_value(v.code[o + j], su);
      vf[j] = mul_f(u, u);
    }
    // The update in lanes (zenflow::adam_update's operations, as window_span), the new u = sqrt(v)
    // and both absmax (max ignores NaN lanes alike on every path).
    ops::reg am = zero, au = zero;
    j = 0;
    for (; j + ops::width <= nb; j += ops::width) {
      const std::int64_t i = o + j;
      ops::reg g = ops::load(acc + i);
      if (slot != nullptr) {
        g = ops::fma(kc, ops::load(slot + i), g);
      }
      ops::reg p = ops::load(master + i);
      ops::reg mm = ops::load(mf + j);
      ops::reg vv = ops::load(vf + j);
      update(p, mm, vv, g, k);
      const ops::reg uu = ops::sqrt(vv);
      ops::store(master + i, p);
      ops::store(out + i, p);
      ops::store(mf + j, mm);
      ops::store(uf + j, uu);
      am = ops::max(ops::abs(mm), am);
      au = ops::max(uu, au);
      if (!keep_acc) {
        ops::store(acc + i, zero);
      }
    }
    ops::store(lanes[0], am);
    ops::store(lanes[1], au);
    float amax = 0.0f, umax = 0.0f;
    for (int l = 0; l < ops::width; ++l) {
      amax = lanes[0][l] > amax ? lanes[0][l] : amax;
      umax = lanes[1][l] > umax ? lanes[1][l] : umax;
    }
    for (; j < nb; ++j) { // a partial block's tail
      const std::int64_t i = o + j;
      float g = acc[i];
      if (slot != nullptr) {
        g = accumulate_value(g, coef, to_float(slot[i]));
      }
      out[i] = from_float<T>(adam_update(master[i], mf[j], vf[j], g, scale, c));
      uf[j] = sqrt_f(vf[j]);
      const float a = std::fabs(mf[j]);
      amax = a > amax ? a : amax;
      umax = uf[j] > umax ? uf[j] : umax;
      if (!keep_acc) {
        acc[i] = 0.0f;
      }
    }
    m.scale[b] = amax;
    v.scale[b] = umax;
    // Requantize: the stochastic rounding in lanes (q8_round_stochastic's operations), then the
    // codes (q8_quantize_block's steps).
    q8_thresholds(static_cast<std::uint64_t>(index0 + o), nb, count, tm, tu);
    const float im = q8_inverse(amax, q8_m_levels), iu = q8_inverse(umax, q8_u_levels);
    const ops::reg vim = ops::set1(im), viu = ops::set1(iu);
    j = 0;
    for (; j + ops::width <= nb; j += ops::width) {
      const ops::reg qm = ops::mul(ops::load(mf + j), vim), qu = ops::mul(ops::load(uf + j), viu);
      const ops::reg fm = ops::floor(qm), fu = ops::floor(qu);
      ops::store(mf + j, ops::add_one_if_greater(fm, ops::sub(qm, fm), ops::load(tm + j)));
      ops::store(uf + j, ops::add_one_if_greater(fu, ops::sub(qu, fu), ops::load(tu + j)));
    }
    for (; j < nb; ++j) {
      mf[j] = q8_round_stochastic(mul_f(mf[j], im), tm[j]);
      uf[j] = q8_round_stochastic(mul_f(uf[j], iu), tu[j]);
    }
    q8_codes(mf, uf, nb, umax > 0.0f, m.code + o, v.code + o);
  }
}

/// acc = coef * slot over n elements, as accumulate_span would compute it into a zeroed acc
/// (the same fma with +0, so the same bits), without reading acc.
template <class S>
void assign_span(float* acc, const S* slot, float coef, std::int64_t n) {
  const ops::reg k = ops::set1(coef);
  const ops::reg zero = ops::set1(0.0f);
  std::int64_t i = 0;
  for (; i + ops::width <= n; i += ops::width) {
    ops::store(acc + i, ops::fma(k, ops::load(slot + i), zero));
  }
  for (; i < n; ++i) {
    acc[i] = accumulate_value(0.0f, coef, to_float(slot[i]));
  }
}

/// out[i] = convert(in[i]) over n elements; returns sum |in[i]| (16 lanes, reduced in lane order,
/// then the tail in order) when `want_l1`, else 0.
template <class Tin, class Tout>
float convert_span(const Tin* in, Tout* out, std::int64_t n, bool want_l1) {
  constexpr int regs = 16 / ops::width;
  ops::reg acc[regs];
  for (int r = 0; r < regs; ++r) {
    acc[r] = ops::set1(0.0f);
  }
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int r = 0; r < regs; ++r) {
      const ops::reg x = ops::load(in + i + r * ops::width);
      if (want_l1) {
        acc[r] = ops::add(acc[r], ops::abs(x));
      }
      ops::store(out + i + r * ops::width, x);
    }
  }
  float lanes[16];
  for (int r = 0; r < regs; ++r) {
    ops::store(lanes + r * ops::width, acc[r]);
  }
  float sum = 0.0f;
  for (float l : lanes) {
    sum += l;
  }
  for (; i < n; ++i) {
    const float x = to_float(in[i]);
    sum += x < 0.0f ? -x : x;
    out[i] = from_float<Tout>(x);
  }
  return want_l1 ? sum : 0.0f;
}

/// sum |in[i]| with the lane scheme of convert_span.
template <class Tin>
float l1_span(const Tin* in, std::int64_t n) {
  constexpr int regs = 16 / ops::width;
  ops::reg acc[regs];
  for (int r = 0; r < regs; ++r) {
    acc[r] = ops::set1(0.0f);
  }
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int r = 0; r < regs; ++r) {
      acc[r] = ops::add(acc[r], ops::abs(ops::load(in + i + r * ops::width)));
    }
  }
  float lanes[16];
  for (int r = 0; r < regs; ++r) {
    ops::store(lanes + r * ops::width, acc[r]);
  }
  float sum = 0.0f;
  for (float l : lanes) {
    sum += l;
  }
  for (; i < n; ++i) {
    const float x = to_float(in[i]);
    sum += x < 0.0f ? -x : x;
  }
  return sum;
}

#endif
