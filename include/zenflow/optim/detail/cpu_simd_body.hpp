/// @file
/// The CPU AdamW loops, written once over an ISA's `ops` and included once per SIMD target by
/// cpu_simd.hpp (inside `#pragma GCC target` regions, each in its own namespace), so that one
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

/// AdamW over n elements: master/m/v updated in place, `out` (nullable) gets the new weights.
template <class G, class T>
void adam_span(float* master,
               float* m,
               float* v,
               const G* grad,
               T* out,
               std::int64_t n,
               const adam_constants& c,
               float scale) {
  const vconsts k = broadcast(c, scale);
  std::int64_t i = 0;
  for (; i + ops::width <= n; i += ops::width) {
    ops::reg p = ops::load(master + i);
    ops::reg mm = ops::load(m + i);
    ops::reg vv = ops::load(v + i);
    update(p, mm, vv, ops::load(grad + i), k);
    ops::store(master + i, p);
    ops::store(m + i, mm);
    ops::store(v + i, vv);
    if (out != nullptr) {
      ops::store(out + i, p);
    }
  }
  for (; i < n; ++i) {
    const float p = adam_update(master[i], m[i], v[i], grad[i], scale, c);
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
/// the gradient and `scale` (1 / steps) as its scale, new weights to `out`, acc zeroed.
template <class S, class T>
void window_span(float* acc,
                 const S* slot,
                 float coef,
                 float* master,
                 float* m,
                 float* v,
                 T* out,
                 std::int64_t n,
                 const adam_constants& c,
                 float scale) {
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
    ops::store(m + i, mm);
    ops::store(v + i, vv);
    ops::store(out + i, p);
    ops::store(acc + i, zero);
  }
  for (; i < n; ++i) {
    float g = acc[i];
    if (slot != nullptr) {
      g = accumulate_value(g, coef, to_float(slot[i]));
    }
    out[i] = from_float<T>(adam_update(master[i], m[i], v[i], g, scale, c));
    acc[i] = 0.0f;
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
