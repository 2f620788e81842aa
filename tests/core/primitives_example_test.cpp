// The primitives composed by hand, as docs/primitives.md shows them (the snippet between the
// example markers): score channels, pick the top-k, gather their fp32 state, run one fused
// selective AdamW step. Checked against a float64 brute-force reference.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/zenflow.hpp>

#include "support/random.hpp"

namespace {

using bf16 = zenflow::bfloat16;

TEST(primitives_example, select_and_update_the_important_channels) {
  const std::int64_t channels = 300, channel_len = 77, k = 30;
  const std::uint64_t seed = zf_test::base_seed() + 11;
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::vector<bf16> weights = zf_test::random_values<bf16>(channels * channel_len, seed);
  std::vector<bf16> grad = zf_test::random_values<bf16>(channels * channel_len, seed + 1);
  for (std::int64_t c = 0; c < channels; ++c) { // skewed channels: a few carry most of the energy
    const float scale = std::exp(4.0f * static_cast<float>((c * 37) % channels) / channels);
    for (std::int64_t i = 0; i < channel_len; ++i) {
      auto& g = grad[static_cast<std::size_t>(c * channel_len + i)];
      g = zenflow::from_float<bf16>(scale * zenflow::to_float(g));
    }
  }
  const std::vector<bf16> weights_before = weights;
  std::vector<float> scores(channels);
  std::vector<std::int32_t> selected(k);
  std::vector<float> master(k * channel_len), m(k * channel_len, 0.0f), v(k * channel_len, 0.0f);
  std::vector<std::int32_t> counts(k, 0);
  zenflow::worker_pool pool(2);

  // example-begin select-and-update
  using zenflow::channel_layout;
  // 1. One fp32 importance score per channel (squared L2), then the top-k channel indices.
  //    CUB's two-phase shape: a call with temp == nullptr only returns the scratch size.
  std::size_t norm_bytes = 0, topk_bytes = 0;
  ZF_CUDA_TRY(zenflow::host::channel_norms(nullptr, norm_bytes, grad.data(), channels, channel_len,
                                           channel_len, channel_layout::contiguous, scores.data()));
  ZF_CUDA_TRY(zenflow::host::topk(nullptr, topk_bytes, scores.data(), channels, k, selected.data()));
  std::vector<std::byte> temp(std::max(norm_bytes, topk_bytes));
  ZF_CUDA_TRY(zenflow::host::channel_norms(temp.data(), norm_bytes, grad.data(), channels, channel_len,
                                           channel_len, channel_layout::contiguous, scores.data(), {},
                                           &pool));
  ZF_CUDA_TRY(zenflow::host::topk(temp.data(), topk_bytes, scores.data(), channels, k, selected.data(),
                                  nullptr, zenflow::topk_order::ascending_index, &pool));

  // 2. fp32 masters of the selected channels, gathered from the bf16 working weights.
  const auto w = zenflow::make_channel_matrix(weights.data(), channels, channel_len);
  const auto g = zenflow::make_channel_matrix<const bf16>(grad.data(), channels, channel_len);
  const auto w_read = zenflow::make_channel_matrix<const bf16>(weights.data(), channels, channel_len);
  ZF_CUDA_TRY(
      zenflow::host::gather_channels<bf16, float>(w_read, selected.data(), k, master.data(), nullptr, &pool));

  // 3. One fused AdamW pass over the selected channels: compact fp32 master/m/v, per-channel
  //    update counts, bf16 working weights written in place (round to nearest even).
  const zenflow::adamw_hparams hp{.lr = 1e-2f, .weight_decay = 0.1f};
  const zenflow::selected_rows rows{selected.data(), k, master.data(), m.data(), v.data(), counts.data()};
  ZF_CUDA_TRY(zenflow::host::adamw_selective<bf16>(w, g, rows, hp, /*scalars: scale 1, no skip*/ {},
                                                   /*l1_mass=*/nullptr, &pool));
  // example-end select-and-update

  // Reference: float64 channel energies, brute-force top-k (ties to the lower index).
  std::vector<double> energy(channels, 0.0);
  for (std::int64_t c = 0; c < channels; ++c) {
    for (std::int64_t i = 0; i < channel_len; ++i) {
      const double x = zenflow::to_float(grad[static_cast<std::size_t>(c * channel_len + i)]);
      energy[static_cast<std::size_t>(c)] += x * x;
    }
  }
  std::vector<std::int32_t> order(channels);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return energy[a] > energy[b]; });
  std::vector<std::int32_t> expected(order.begin(), order.begin() + k);
  std::sort(expected.begin(), expected.end());
  ASSERT_EQ(selected, expected);

  // First AdamW step in float64: m = (1-b1) g, v = (1-b2) g^2, bias-corrected -> g / (|g| + eps).
  for (std::int64_t c = 0; c < channels; ++c) {
    const bool is_selected =
        std::binary_search(expected.begin(), expected.end(), static_cast<std::int32_t>(c));
    for (std::int64_t i = 0; i < channel_len; ++i) {
      const auto at = static_cast<std::size_t>(c * channel_len + i);
      if (!is_selected) {
        ASSERT_EQ(zenflow::bit_pattern(weights[at]), zenflow::bit_pattern(weights_before[at])) << c;
        continue;
      }
      const double w0 = zenflow::to_float(weights_before[at]);
      const double gi = zenflow::to_float(grad[at]);
      const double ref = w0 - 1e-2 * 0.1 * w0 - 1e-2 * gi / (std::fabs(gi) + 1e-8);
      const double ulp = std::ldexp(1.0, std::ilogb(std::fabs(ref)) - 7); // one bf16 ulp at ref
      ASSERT_NEAR(zenflow::to_float(weights[at]), ref, ulp) << "channel " << c << " element " << i;
    }
  }
  for (std::int32_t n : counts) {
    EXPECT_EQ(n, 1);
  }
}

} // namespace
