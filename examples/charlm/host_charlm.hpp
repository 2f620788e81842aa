/// @file
/// The model on the host backend: bf16 working weights and gradients in host memory (what the
/// engine sees, exactly as it would see device memory), computed through the fp32 host model.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/worker_pool.hpp>

#include "corpus.hpp"
#include "model.hpp"

namespace charlm {

class host_charlm {
public:
  using weight_t = zenflow::bfloat16;

  /// `pool` runs the model's GEMMs (nullptr: the calling thread).
  host_charlm(const model_shape& shape, std::uint64_t seed, zenflow::worker_pool* pool)
      : model_(shape, pool), pool_(pool) {
    const auto& t = model_.table();
    const std::vector<float> init = init_params(shape, t, seed);
    weights_.resize(init.size());
    grads_.assign(init.size(), zenflow::from_float<weight_t>(0.0f));
    for (std::size_t i = 0; i < init.size(); ++i) {
      weights_[i] = zenflow::from_float<weight_t>(init[i]);
    }
    wf_.resize(init.size());
    gf_.resize(init.size());
  }

  [[nodiscard]] static const char* name() { return "host"; }
  [[nodiscard]] const param_table& table() const { return model_.table(); }
  [[nodiscard]] weight_t* weights(std::int32_t p) { return weights_.data() + table()[p].offset; }
  [[nodiscard]] weight_t* grads(std::int32_t p) { return grads_.data() + table()[p].offset; }
  [[nodiscard]] const std::vector<weight_t>& all_weights() const { return weights_; }
  /// Replaces every weight (a weights file's, of this model's shape) before training starts.
  void set_weights(const std::vector<weight_t>& w) {
    if (w.size() != weights_.size()) {
      throw std::invalid_argument("host_charlm::set_weights: " + std::to_string(w.size()) +
                                  " weights, the model has " + std::to_string(weights_.size()));
    }
    weights_ = w;
  }

  /// Forward and backward of one batch: the bf16 gradients are written; returns the loss.
  float train_step(const batch& b) {
    widen_weights();
    const float loss = model_.forward(wf_.data(), b);
    model_.backward(wf_.data(), b, gf_.data());
    for_chunks(static_cast<std::int64_t>(gf_.size()), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        grads_[static_cast<std::size_t>(i)] = zenflow::from_float<weight_t>(gf_[static_cast<std::size_t>(i)]);
      }
    });
    return loss;
  }

  /// Nothing to wait for on the host.
  void sync() {}

  /// Loss of a batch with the current weights (no gradient).
  float eval(const batch& b) {
    widen_weights();
    return model_.forward(wf_.data(), b);
  }

private:
  template <class F>
  void for_chunks(std::int64_t n, F&& f) {
    if (pool_ != nullptr) {
      pool_->parallel_for(n, 1 << 16, [&](std::int64_t, std::int64_t lo, std::int64_t hi) { f(lo, hi); });
    } else {
      f(0, n);
    }
  }
  void widen_weights() {
    for_chunks(static_cast<std::int64_t>(wf_.size()), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        wf_[static_cast<std::size_t>(i)] = zenflow::to_float(weights_[static_cast<std::size_t>(i)]);
      }
    });
  }

  host_model<float> model_;
  zenflow::worker_pool* pool_;
  std::vector<weight_t> weights_, grads_;
  std::vector<float> wf_, gf_;
};

} // namespace charlm
