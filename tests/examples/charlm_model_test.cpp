// The example model: corpus determinism, gradient check of the host backward against float64
// finite differences of the forward, and the float path against the double path.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/worker_pool.hpp>

#include "charlm/corpus.hpp"
#include "charlm/model.hpp"
#include "support/random.hpp"

namespace {

charlm::model_shape tiny_shape(std::int32_t vocab) {
  charlm::model_shape s;
  s.vocab = vocab;
  s.context = 3;
  s.embed = 4;
  s.hidden = 7;
  s.layers = 3;
  return s;
}

TEST(CharlmCorpus, DeterministicAndEnglishLike) {
  const std::string a = charlm::generate_corpus(20000, 7);
  const std::string b = charlm::generate_corpus(20000, 7);
  const std::string c = charlm::generate_corpus(20000, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 20000u);
  // Skewed: spaces and 'e' are frequent, 'q' and 'z' rare, as the grammar's word lists intend.
  std::vector<std::size_t> count(256, 0);
  for (unsigned char ch : a) {
    ++count[ch];
  }
  EXPECT_GT(count[' '], a.size() / 8);
  EXPECT_GT(count['e'], 20 * count['z']);
  EXPECT_GT(count['q'], 0u);
  const charlm::vocabulary v(a);
  EXPECT_GT(v.size(), 30);
  EXPECT_LT(v.size(), 80);
  for (char ch : std::string("The river.")) {
    EXPECT_EQ(v.decode(v.encode(ch)), ch);
  }
}

TEST(CharlmCorpus, BatchesComeFromTheText) {
  const std::string text = charlm::generate_corpus(5000, 3);
  const charlm::vocabulary v(text);
  const auto tokens = v.encode(text);
  charlm::dataset d(tokens, 5, 11);
  const charlm::batch b = d.next_train(32);
  ASSERT_EQ(b.inputs.size(), 32u * 5u);
  // Each row must be a window of the text followed by its next character.
  for (std::int32_t r = 0; r < b.rows; ++r) {
    std::string window;
    for (std::int32_t c = 0; c < 5; ++c) {
      window += v.decode(b.inputs[static_cast<std::size_t>(r * 5 + c)]);
    }
    window += v.decode(b.targets[static_cast<std::size_t>(r)]);
    EXPECT_NE(text.substr(0, d.train_tokens()).find(window), std::string::npos) << window;
  }
  const charlm::batch e1 = d.eval_batch(16, 2), e2 = d.eval_batch(16, 2);
  EXPECT_EQ(e1.inputs, e2.inputs);
  EXPECT_THROW(charlm::dataset(std::vector<std::int32_t>(10, 0), 8, 1), std::invalid_argument);
}

// Analytic gradient of the double-precision host model against central finite differences of
// the same forward, for every parameter of a tiny model (the embedding rows that the batch does
// not touch must get exactly zero).
TEST(CharlmModel, BackwardMatchesFiniteDifferences) {
  const std::uint64_t seed = zf_test::base_seed();
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::string text = charlm::generate_corpus(4000, seed);
  const charlm::vocabulary v(text);
  const charlm::model_shape s = tiny_shape(v.size());
  charlm::dataset d(v.encode(text), s.context, seed);
  const charlm::batch b = d.next_train(5);

  zenflow::worker_pool pool(2);
  charlm::host_model<double> m(s, &pool);
  const auto& t = m.table();
  const std::vector<float> init = charlm::init_params(s, t, seed);
  std::vector<double> p(init.begin(), init.end());
  // Non-zero biases so that their gradients flow through every term.
  charlm::rng g(seed + 5);
  for (const auto& info : t.params) {
    if (!info.matrix) {
      for (std::int64_t k = 0; k < info.size(); ++k) {
        p[static_cast<std::size_t>(info.offset + k)] = 0.1 * g.normal();
      }
    }
  }
  std::vector<double> grad(static_cast<std::size_t>(t.total));
  const double loss = m.forward(p.data(), b);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0);
  m.backward(p.data(), b, grad.data());

  const double h = 1e-6;
  double max_err = 0;
  std::int64_t checked = 0;
  for (const auto& info : t.params) {
    for (std::int64_t k = 0; k < info.size(); ++k) {
      const auto i = static_cast<std::size_t>(info.offset + k);
      const double saved = p[i];
      p[i] = saved + h;
      const double up = m.forward(p.data(), b);
      p[i] = saved - h;
      const double down = m.forward(p.data(), b);
      p[i] = saved;
      const double fd = (up - down) / (2 * h);
      const double err = std::abs(fd - grad[i]) / std::max(1e-3, std::abs(fd) + std::abs(grad[i]));
      max_err = std::max(max_err, err);
      EXPECT_LT(err, 1e-5) << info.name << "[" << k << "] analytic " << grad[i] << " numeric " << fd;
      ++checked;
    }
  }
  EXPECT_EQ(checked, t.count);
  // The embedding rows of characters absent from the batch have exactly zero gradient.
  std::vector<bool> used(static_cast<std::size_t>(s.vocab), false);
  for (auto tok : b.inputs) {
    used[static_cast<std::size_t>(tok)] = true;
  }
  const auto& emb = t[t.emb];
  for (std::int32_t r = 0; r < s.vocab; ++r) {
    double sum = 0;
    for (std::int32_t e = 0; e < s.embed; ++e) {
      sum += std::abs(grad[static_cast<std::size_t>(emb.offset + r * s.embed + e)]);
    }
    EXPECT_EQ(sum == 0.0, !used[static_cast<std::size_t>(r)]) << "row " << r;
  }
}

// The float model (what training runs) agrees with the double model, with and without a pool.
TEST(CharlmModel, FloatPathMatchesDouble) {
  const std::uint64_t seed = zf_test::base_seed() + 1;
  SCOPED_TRACE(zf_test::seed_note(seed));
  const std::string text = charlm::generate_corpus(8000, seed);
  const charlm::vocabulary v(text);
  charlm::model_shape s = tiny_shape(v.size());
  s.hidden = 67;
  s.embed = 9;
  charlm::dataset d(v.encode(text), s.context, seed);
  const charlm::batch b = d.next_train(37);
  zenflow::worker_pool pool(3);
  charlm::host_model<double> md(s, nullptr);
  charlm::host_model<float> mf(s, &pool);
  const auto init = charlm::init_params(s, md.table(), seed);
  const std::vector<double> pd(init.begin(), init.end());
  std::vector<double> gd(pd.size());
  std::vector<float> gf(pd.size());
  const double ld = md.forward(pd.data(), b);
  const float lf = mf.forward(init.data(), b);
  EXPECT_NEAR(lf, ld, 1e-5 * std::abs(ld));
  md.backward(pd.data(), b, gd.data());
  mf.backward(init.data(), b, gf.data());
  double scale = 0;
  for (double x : gd) {
    scale = std::max(scale, std::abs(x));
  }
  ASSERT_GT(scale, 0.0);
  for (std::size_t i = 0; i < gd.size(); ++i) {
    ASSERT_NEAR(gf[i], gd[i], 1e-5 * scale) << i;
  }
}

TEST(CharlmModel, RejectsBadShapesAndBatches) {
  charlm::model_shape s = tiny_shape(10);
  s.layers = 0;
  EXPECT_THROW(charlm::param_table{s}, std::invalid_argument);
  s = tiny_shape(10);
  charlm::host_model<float> m(s, nullptr);
  charlm::batch b;
  b.rows = 1;
  b.context = 3;
  b.inputs = {1, 2, 10};
  b.targets = {0};
  const auto p = charlm::init_params(s, m.table(), 1);
  EXPECT_THROW(m.forward(p.data(), b), std::invalid_argument);
  b.context = 2;
  EXPECT_THROW(m.forward(p.data(), b), std::invalid_argument);
}

} // namespace
