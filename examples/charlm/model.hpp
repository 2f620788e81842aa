/// @file
/// A character-level language model (an MLP LM in the style of Bengio et al. 2003), its
/// parameters, and its forward and backward passes on the host (Eigen, split over a
/// zenflow::worker_pool).
///
///   x0     = concat(emb[tok_1], ..., emb[tok_C])                 [B, C*E]
///   h1     = gelu(x0 W0 + b0)                                    [B, H]
///   h_l+1  = h_l + gelu(h_l W_l + b_l)     l = 1 .. layers-1     [B, H]   (residual)
///   logits = h W_out + b_out                                     [B, V]
///   loss   = mean_b (logsumexp(logits_b) - logits_b[target_b])
///
/// Every weight is stored [in, out], row-major: row i (input feature i) is one contiguous run of
/// `out` values, which is a zenflow channel (contiguous layout, channels = in, channel_len = out).
/// The embedding [V, E] is a channel matrix too (one channel per character): rare characters
/// get little gradient, which is what ZenFlow's importance split exploits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include <zenflow/core/worker_pool.hpp>

#include "corpus.hpp"
#include "math.hpp"

namespace charlm {

/// The model's size.
struct model_shape {
  std::int32_t vocab = 0;   ///< V, set from the data
  std::int32_t context = 8; ///< C, characters of context
  std::int32_t embed = 16;  ///< E, embedding width
  std::int32_t hidden = 256;
  std::int32_t layers = 3; ///< Linear+GELU layers (the first maps C*E -> H, the others are residual H -> H)

  void validate() const {
    auto need = [](bool ok, const char* what) {
      if (!ok) {
        throw std::invalid_argument(what);
      }
    };
    need(vocab >= 2, "vocab must be >= 2");
    need(context >= 1, "--context must be >= 1");
    need(embed >= 1, "--embed must be >= 1");
    need(hidden >= 1, "--hidden must be >= 1");
    need(layers >= 1, "--layers must be >= 1");
  }
};

/// One parameter tensor: a matrix (`rows` channels of `cols` elements) or a vector (`rows` = 1).
struct param_info {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool matrix = false;
  std::int64_t offset = 0; ///< in elements, into the flat parameter buffer
  [[nodiscard]] std::int64_t size() const { return rows * cols; }
};

/// Where every parameter lives in one flat buffer. Offsets are multiples of 64 elements (128-byte
/// aligned bf16 rows for vector loads on the device).
struct param_table {
  std::vector<param_info> params;
  std::int64_t total = 0; ///< flat buffer length (with padding)
  std::int64_t count = 0; ///< parameters (without padding)
  // indices into params
  std::int32_t emb = 0, w_out = 0, b_out = 0;
  std::vector<std::int32_t> w, b; // per layer

  explicit param_table(const model_shape& s) {
    s.validate();
    auto add = [&](std::string name, std::int64_t rows, std::int64_t cols, bool matrix) {
      param_info p{std::move(name), rows, cols, matrix, total};
      total += (p.size() + 63) / 64 * 64;
      count += p.size();
      params.push_back(std::move(p));
      return static_cast<std::int32_t>(params.size() - 1);
    };
    emb = add("emb", s.vocab, s.embed, true);
    for (std::int32_t l = 0; l < s.layers; ++l) {
      const std::int64_t in = l == 0 ? std::int64_t{s.context} * s.embed : s.hidden;
      std::string suffix = std::to_string(l);
      w.push_back(add(std::string(1, 'w').append(suffix), in, s.hidden, true));
      b.push_back(add(std::string(1, 'b').append(suffix), 1, s.hidden, false));
    }
    w_out = add("w_out", s.hidden, s.vocab, true);
    b_out = add("b_out", 1, s.vocab, false);
  }
  [[nodiscard]] const param_info& operator[](std::int32_t i) const {
    return params[static_cast<std::size_t>(i)];
  }
};

/// Initial parameter values (fp32), deterministic from the seed. Biases start at zero; residual
/// layers start small so that the deep stack begins close to the identity.
[[nodiscard]] inline std::vector<float>
init_params(const model_shape& s, const param_table& t, std::uint64_t seed) {
  std::vector<float> out(static_cast<std::size_t>(t.total), 0.0f);
  rng g(seed * 0x2545f4914f6cdd1dull + 1);
  for (std::size_t i = 0; i < t.params.size(); ++i) {
    const param_info& p = t.params[i];
    if (!p.matrix) {
      continue;
    }
    double scale = 1.0 / std::sqrt(static_cast<double>(p.rows));
    if (static_cast<std::int32_t>(i) == t.emb) {
      scale = 1.0;
    } else if (p.name != "w0" && static_cast<std::int32_t>(i) != t.w_out) {
      scale *= 1.0 / std::sqrt(static_cast<double>(s.layers)); // residual branch
    }
    for (std::int64_t k = 0; k < p.size(); ++k) {
      out[static_cast<std::size_t>(p.offset + k)] = static_cast<float>(scale * g.normal());
    }
  }
  return out;
}

/// Forward and backward on the host in precision `Real` (float to train, double for the gradient
/// check). The GEMMs are Eigen products over row blocks handed to the pool; the split depends
/// only on the sizes, so results do not depend on the number of threads.
template <class Real>
class host_model {
public:
  using matrix = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using map = Eigen::Map<matrix>;
  using cmap = Eigen::Map<const matrix>;

  host_model(const model_shape& shape, zenflow::worker_pool* pool) : s_(shape), t_(shape), pool_(pool) {}

  [[nodiscard]] const param_table& table() const { return t_; }
  [[nodiscard]] const model_shape& shape() const { return s_; }

  /// Mean cross-entropy of the batch; keeps the activations for backward().
  Real forward(const Real* params, const batch& b) {
    check_batch(b);
    const std::int64_t B = b.rows, C = s_.context, E = s_.embed, H = s_.hidden, V = s_.vocab;
    resize(B);
    // Embedding gather.
    const Real* emb = params + t_[t_.emb].offset;
    for (std::int64_t r = 0; r < B; ++r) {
      for (std::int64_t c = 0; c < C; ++c) {
        const Real* src = emb + static_cast<std::int64_t>(b.inputs[static_cast<std::size_t>(r * C + c)]) * E;
        std::copy(src, src + E, x0_.data() + r * C * E + c * E);
      }
    }
    // Hidden layers.
    for (std::int32_t l = 0; l < s_.layers; ++l) {
      const param_info& w = t_[t_.w[static_cast<std::size_t>(l)]];
      const Real* in = l == 0 ? x0_.data() : h_[static_cast<std::size_t>(l - 1)].data();
      Real* z = z_[static_cast<std::size_t>(l)].data();
      gemm_nn(in, params + w.offset, z, B, w.rows, H);
      const Real* bias = params + t_[t_.b[static_cast<std::size_t>(l)]].offset;
      Real* h = h_[static_cast<std::size_t>(l)].data();
      parallel_rows(B, [&](std::int64_t r) {
        for (std::int64_t j = 0; j < H; ++j) {
          Real& zz = z[r * H + j];
          zz += bias[j];
          h[r * H + j] = (l == 0 ? Real(0) : in[r * H + j]) + gelu(zz);
        }
      });
    }
    // Output layer and softmax cross-entropy (dlogits kept for backward).
    const param_info& wo = t_[t_.w_out];
    const Real* bo = params + t_[t_.b_out].offset;
    gemm_nn(h_.back().data(), params + wo.offset, logits_.data(), B, H, V);
    parallel_rows(B, [&](std::int64_t r) {
      Real* lg = logits_.data() + r * V;
      Real mx = -INFINITY;
      for (std::int64_t j = 0; j < V; ++j) {
        lg[j] += bo[j];
        mx = std::max(mx, lg[j]);
      }
      Real sum = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        sum += std::exp(lg[j] - mx);
      }
      const std::int32_t y = b.targets[static_cast<std::size_t>(r)];
      row_loss_[static_cast<std::size_t>(r)] = std::log(sum) + mx - lg[y];
      Real* dl = dlogits_.data() + r * V;
      for (std::int64_t j = 0; j < V; ++j) {
        dl[j] = std::exp(lg[j] - mx) / sum / static_cast<Real>(B);
      }
      dl[y] -= Real(1) / static_cast<Real>(B);
    });
    Real loss = 0;
    for (Real v : row_loss_) {
      loss += v;
    }
    return loss / static_cast<Real>(B);
  }

  /// Gradients of the last forward()'s loss with respect to every parameter (the whole flat
  /// buffer is overwritten; padding is zero).
  void backward(const Real* params, const batch& b, Real* grads) {
    const std::int64_t B = b.rows, C = s_.context, E = s_.embed, H = s_.hidden, V = s_.vocab;
    std::fill(grads, grads + t_.total, Real(0));
    const param_info& wo = t_[t_.w_out];
    gemm_tn(h_.back().data(), dlogits_.data(), grads + wo.offset, B, H, V);
    col_sums(dlogits_.data(), B, V, grads + t_[t_.b_out].offset);
    gemm_nt(dlogits_.data(), params + wo.offset, dh_.data(), B, V, H);
    for (std::int32_t l = s_.layers - 1; l >= 0; --l) {
      const param_info& w = t_[t_.w[static_cast<std::size_t>(l)]];
      const Real* z = z_[static_cast<std::size_t>(l)].data();
      parallel_rows(B, [&](std::int64_t r) {
        for (std::int64_t j = 0; j < H; ++j) {
          dz_[static_cast<std::size_t>(r * H + j)] =
              dh_[static_cast<std::size_t>(r * H + j)] * gelu_grad(z[r * H + j]);
        }
      });
      const Real* in = l == 0 ? x0_.data() : h_[static_cast<std::size_t>(l - 1)].data();
      gemm_tn(in, dz_.data(), grads + w.offset, B, w.rows, H);
      col_sums(dz_.data(), B, H, grads + t_[t_.b[static_cast<std::size_t>(l)]].offset);
      if (l == 0) {
        gemm_nt(dz_.data(), params + w.offset, dx0_.data(), B, H, C * E);
      } else {
        // residual: dh_in = dh_out + dz W^T
        gemm_nt(dz_.data(), params + w.offset, tmp_.data(), B, H, H);
        for (std::size_t i = 0; i < dh_.size(); ++i) {
          dh_[i] += tmp_[i];
        }
      }
    }
    // Embedding scatter-add, serial: deterministic and tiny (B*C*E).
    Real* demb = grads + t_[t_.emb].offset;
    for (std::int64_t r = 0; r < B; ++r) {
      for (std::int64_t c = 0; c < C; ++c) {
        Real* dst = demb + static_cast<std::int64_t>(b.inputs[static_cast<std::size_t>(r * C + c)]) * E;
        const Real* src = dx0_.data() + r * C * E + c * E;
        for (std::int64_t e = 0; e < E; ++e) {
          dst[e] += src[e];
        }
      }
    }
  }

private:
  void check_batch(const batch& b) const {
    if (b.context != s_.context || b.rows < 1 ||
        b.inputs.size() != static_cast<std::size_t>(b.rows) * static_cast<std::size_t>(b.context) ||
        b.targets.size() != static_cast<std::size_t>(b.rows)) {
      throw std::invalid_argument("batch does not match the model's context");
    }
    for (std::int32_t v : b.inputs) {
      if (v < 0 || v >= s_.vocab) {
        throw std::invalid_argument("batch token out of the vocabulary");
      }
    }
    for (std::int32_t v : b.targets) {
      if (v < 0 || v >= s_.vocab) {
        throw std::invalid_argument("batch target out of the vocabulary");
      }
    }
  }

  void resize(std::int64_t B) {
    if (B == rows_) {
      return;
    }
    rows_ = B;
    const auto H = static_cast<std::size_t>(s_.hidden);
    const auto n = static_cast<std::size_t>(B);
    x0_.assign(n * static_cast<std::size_t>(s_.context) * static_cast<std::size_t>(s_.embed), 0);
    dx0_.assign(x0_.size(), 0);
    z_.assign(static_cast<std::size_t>(s_.layers), std::vector<Real>(n * H));
    h_.assign(static_cast<std::size_t>(s_.layers), std::vector<Real>(n * H));
    dh_.assign(n * H, 0);
    dz_.assign(n * H, 0);
    tmp_.assign(n * H, 0);
    logits_.assign(n * static_cast<std::size_t>(s_.vocab), 0);
    dlogits_.assign(logits_.size(), 0);
    row_loss_.assign(n, 0);
  }

  template <class F>
  void parallel_rows(std::int64_t rows, F&& f) {
    auto body = [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) {
        f(r);
      }
    };
    if (pool_ != nullptr) {
      pool_->parallel_for(rows, 16, body);
    } else {
      body(0, 0, rows);
    }
  }

  template <class F>
  void parallel_blocks(std::int64_t n, std::int64_t grain, F&& f) {
    if (pool_ != nullptr) {
      pool_->parallel_for(n, grain, [&](std::int64_t, std::int64_t lo, std::int64_t hi) { f(lo, hi); });
    } else {
      f(0, n);
    }
  }

  /// C[m,n] = A[m,k] B[k,n]
  void gemm_nn(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t k, std::int64_t n) {
    cmap A(a, m, k), Bm(b, k, n);
    map Cm(c, m, n);
    parallel_blocks(m, 16, [&](std::int64_t lo, std::int64_t hi) {
      Cm.middleRows(lo, hi - lo).noalias() = A.middleRows(lo, hi - lo) * Bm;
    });
  }
  /// C[k,n] = A[m,k]^T B[m,n]   (weight gradients: split over the rows of C, the channels)
  void gemm_tn(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t k, std::int64_t n) {
    cmap A(a, m, k), Bm(b, m, n);
    map Cm(c, k, n);
    parallel_blocks(k, 16, [&](std::int64_t lo, std::int64_t hi) {
      Cm.middleRows(lo, hi - lo).noalias() = A.middleCols(lo, hi - lo).transpose() * Bm;
    });
  }
  /// C[m,k] = A[m,n] B[k,n]^T
  void gemm_nt(const Real* a, const Real* b, Real* c, std::int64_t m, std::int64_t n, std::int64_t k) {
    cmap A(a, m, n), Bm(b, k, n);
    map Cm(c, m, k);
    parallel_blocks(m, 16, [&](std::int64_t lo, std::int64_t hi) {
      Cm.middleRows(lo, hi - lo).noalias() = A.middleRows(lo, hi - lo) * Bm.transpose();
    });
  }
  static void col_sums(const Real* a, std::int64_t m, std::int64_t n, Real* out) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        out[j] += a[i * n + j];
      }
    }
  }

  model_shape s_;
  param_table t_;
  zenflow::worker_pool* pool_;
  std::int64_t rows_ = -1;
  std::vector<Real> x0_, dx0_, dh_, dz_, tmp_, logits_, dlogits_, row_loss_;
  std::vector<std::vector<Real>> z_, h_;
};

} // namespace charlm
