/// @file
/// The demo's problem: a linear layer y = W x fitted to a teacher's by least squares, in fp32 on
/// the host. W is stored by input channel (channel j = the weights from input j: `outputs`
/// floats), as ZenFlow's matrices are; a few inputs carry most of the signal, so a few channels
/// carry most of the gradient. A bias vector rides along.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "own_loop/own_loop.hpp"

namespace own_loop {

/// The demo's settings: 12 of 96 input channels on the device, a scheduled selection every 50
/// steps, Zen-auto windows of 1 to 4 steps, clipping.
inline settings demo_settings() {
  settings s;
  s.topk_ratio = 0.125;
  s.select_interval = 50;
  s.windows = {0, 1, 4, 0.9};
  s.adam.lr = 1e-2f;
  s.gradient_clipping = 10.0f;
  return s;
}

/// The mean of the first and of the last `n` losses: the demo's verdict that it trains.
inline bool loss_fell(const std::vector<float>& losses, std::size_t n, double& first, double& last) {
  first = last = 0.0;
  if (losses.size() < 2 * n) {
    return false;
  }
  for (std::size_t i = 0; i < n; ++i) {
    first += losses[i] / static_cast<double>(n);
    last += losses[losses.size() - 1 - i] / static_cast<double>(n);
  }
  return last < 0.5 * first;
}

struct problem {
  std::int64_t inputs = 96, outputs = 64, batch = 32;
  std::vector<float> teacher, teacher_bias, scale;
  std::mt19937_64 rng{42};

  problem() {
    std::normal_distribution<float> n(0.0f, 1.0f);
    teacher.resize(static_cast<std::size_t>(inputs * outputs));
    for (float& x : teacher) {
      x = n(rng);
    }
    teacher_bias.resize(static_cast<std::size_t>(outputs));
    for (float& x : teacher_bias) {
      x = n(rng);
    }
    for (std::int64_t j = 0; j < inputs; ++j) { // every 8th input strong
      scale.push_back(j % 8 == 0 ? 3.0f : 0.3f);
    }
  }

  /// One batch: the gradients of 0.5 x mean |W x + b - (W* x + b*)|^2 into `g` and `gb`; returns the loss.
  float gradients(const std::vector<float>& w,
                  const std::vector<float>& b,
                  std::vector<float>& g,
                  std::vector<float>& gb) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::fill(g.begin(), g.end(), 0.0f);
    std::fill(gb.begin(), gb.end(), 0.0f);
    double loss = 0.0;
    std::vector<float> x(static_cast<std::size_t>(inputs)), err(static_cast<std::size_t>(outputs));
    for (std::int64_t s = 0; s < batch; ++s) {
      for (std::int64_t j = 0; j < inputs; ++j) {
        x[static_cast<std::size_t>(j)] = n(rng) * scale[static_cast<std::size_t>(j)];
      }
      for (std::int64_t o = 0; o < outputs; ++o) {
        float e = b[static_cast<std::size_t>(o)] - teacher_bias[static_cast<std::size_t>(o)];
        for (std::int64_t j = 0; j < inputs; ++j) {
          const auto at = static_cast<std::size_t>(j * outputs + o);
          e += (w[at] - teacher[at]) * x[static_cast<std::size_t>(j)];
        }
        err[static_cast<std::size_t>(o)] = e;
        loss += 0.5 * static_cast<double>(e) * e;
      }
      for (std::int64_t j = 0; j < inputs; ++j) {
        for (std::int64_t o = 0; o < outputs; ++o) {
          g[static_cast<std::size_t>(j * outputs + o)] +=
              err[static_cast<std::size_t>(o)] * x[static_cast<std::size_t>(j)] / static_cast<float>(batch);
        }
      }
      for (std::int64_t o = 0; o < outputs; ++o) {
        gb[static_cast<std::size_t>(o)] += err[static_cast<std::size_t>(o)] / static_cast<float>(batch);
      }
    }
    return static_cast<float>(loss / static_cast<double>(batch));
  }
};

} // namespace own_loop
