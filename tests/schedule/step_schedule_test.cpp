// The schedule layer's host rules (schedule/step_schedule.hpp, zen_auto.hpp): k against
// DeepSpeed's int(ratio x channels) (values computed by Python) and the clamps; the selection steps
// against a counter; the window rule against its table; the Zen-auto voter against a brute-force
// recomputation from the whole history of masses; add_step_masses against the rules fed by hand;
// and bad arguments named, nothing changed.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/core/error.hpp>
#include <zenflow/schedule/step_schedule.hpp>

#include "../support/random.hpp"

namespace {

TEST(topk_count, is_deepspeeds_int_of_the_double_product_clamped_to_one_and_channels) {
  struct row {
    double ratio;
    std::int64_t channels, k; // k = max(1, int(ratio * channels)) from Python 3.11
  };
  const row rows[] = {{0.29, 100, 28},   {0.1, 10, 1},
                      {0.1, 9, 1},       {0.1, 1, 1},
                      {0.07, 100, 7},    {0.57, 100, 56},
                      {0.3, 10, 3},      {0.7, 10, 7},
                      {0.05, 4096, 204}, {0.01, 4097, 40},
                      {1.0 / 3, 3, 1},   {0.6, 5, 3},
                      {0.58, 100, 57},   {0.1, 123456789, 12345678},
                      {0.99, 1000, 990}, {0.14, 50, 7},
                      {1.0, 77, 77},     {0.0, 77, 1}};
  for (const row& r : rows) {
    EXPECT_EQ(zenflow::topk_count(r.ratio, r.channels), r.k) << r.ratio << " x " << r.channels;
  }
  static_assert(zenflow::topk_count(0.5, 10) == 5); // usable in constant expressions
  EXPECT_EQ(zenflow::topk_count(0.5, 0), 0);
  EXPECT_EQ(zenflow::topk_count(0.5, -3), 0);
  // Outside [0, 1] (configs reject these first): clamped, never undefined.
  EXPECT_EQ(zenflow::topk_count(1.5, 10), 10);
  EXPECT_EQ(zenflow::topk_count(-0.5, 10), 1);
  EXPECT_EQ(zenflow::topk_count(std::numeric_limits<double>::quiet_NaN(), 10), 1);
  EXPECT_EQ(zenflow::topk_count(std::numeric_limits<double>::infinity(), 10), 10);
  // Brute force: the largest k with k <= ratio x channels in double arithmetic, then the clamps.
  for (std::int64_t c = 1; c <= 300; c += 7) {
    for (int i = 0; i <= 100; ++i) {
      const double ratio = i / 100.0;
      const double product = ratio * static_cast<double>(c);
      std::int64_t k = 0;
      while (static_cast<double>(k + 1) <= product) {
        ++k;
      }
      k = std::max<std::int64_t>(1, std::min(k, c));
      ASSERT_EQ(zenflow::topk_count(ratio, c), k) << ratio << " x " << c;
    }
  }
}

TEST(is_selection_step, matches_a_counter) {
  for (const std::int64_t warm : {0, 1, 5}) {
    for (const std::int64_t every : {1, 2, 7}) {
      std::int64_t next = warm;
      for (std::int64_t t = 0; t < 60; ++t) {
        const bool want = t == next;
        if (want) {
          next += every;
        }
        ASSERT_EQ(zenflow::is_selection_step(t, warm, every), want) << t << " " << warm << " " << every;
      }
    }
  }
  EXPECT_TRUE(zenflow::is_selection_step(3, 0, 0)); // an interval < 1 is every step
  EXPECT_TRUE(zenflow::is_selection_step(3, 0, -4));
  EXPECT_FALSE(zenflow::is_selection_step(2, 3, 1));
}

TEST(window_closes, fixed_length_zen_auto_bounds_vote_and_forced) {
  const zenflow::window_rule fixed{3, 1, 2, 0.99};
  EXPECT_FALSE(zenflow::window_closes(fixed, 1, false, 1.0));
  EXPECT_FALSE(zenflow::window_closes(fixed, 2, false, 1.0)); // the vote does not count
  EXPECT_TRUE(zenflow::window_closes(fixed, 3, false, 0.0));
  EXPECT_TRUE(zenflow::window_closes(fixed, 1, true, 0.0)); // the next step selects
  const zenflow::window_rule zen{0, 2, 5, 0.75};
  EXPECT_FALSE(zenflow::window_closes(zen, 1, false, 1.0)); // below the minimum
  EXPECT_TRUE(zenflow::window_closes(zen, 2, false, 0.75));
  EXPECT_FALSE(zenflow::window_closes(zen, 2, false, 0.7499));
  EXPECT_FALSE(zenflow::window_closes(zen, 4, false, 0.5));
  EXPECT_TRUE(zenflow::window_closes(zen, 5, false, 0.0)); // the maximum
  EXPECT_TRUE(zenflow::window_closes(zen, 1, true, 0.0));
}

/// The voter's decision recomputed from the whole history: per matrix the mean of crit/k over the
/// good steps since the selection, the sum of rest/(channels - k) over the window's good steps.
struct voter_history {
  std::vector<std::vector<double>> crit, rest; // per step, per matrix
  std::vector<bool> in_window;
  [[nodiscard]] double share(const std::vector<std::int64_t>& k, const std::vector<std::int64_t>& ch) const {
    std::int64_t yes = 0;
    for (std::size_t i = 0; i < k.size(); ++i) {
      if (ch[i] == k[i]) {
        ++yes;
        continue;
      }
      long double mean = 0.0L, window = 0.0L;
      for (std::size_t s = 0; s < crit.size(); ++s) {
        mean += static_cast<long double>(crit[s][i]) / static_cast<long double>(k[i]);
        if (in_window[s]) {
          window += static_cast<long double>(rest[s][i]) / static_cast<long double>(ch[i] - k[i]);
        }
      }
      if (!crit.empty()) {
        mean /= static_cast<long double>(crit.size());
        yes += window >= mean ? 1 : 0;
      }
    }
    return static_cast<double>(yes) / static_cast<double>(k.size());
  }
};

TEST(zen_auto_voter, vote_share_matches_a_brute_force_over_the_history) {
  const std::uint64_t seed = zf_test::base_seed() + 40;
  SCOPED_TRACE(zf_test::seed_note(seed));
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> mass(0.1f, 10.0f);
  const std::vector<std::int64_t> k = {3, 10, 1, 50, 8};
  const std::vector<std::int64_t> ch = {30, 100, 40, 50, 9}; // one matrix with nothing unselected
  zenflow::zen_auto_voter voter(k, ch);
  EXPECT_EQ(voter.matrices(), 5u);
  voter_history h;
  int decided = 0;
  for (int step = 0; step < 300; ++step) {
    if (step % 41 == 0) { // a selection: the mean and the window start over
      voter.on_selection();
      h = {};
    } else if (step % 7 == 0) { // a window: its sums start over
      voter.on_window_start();
      for (std::size_t s = 0; s < h.in_window.size(); ++s) {
        h.in_window[s] = false;
      }
    }
    std::vector<float> c(5), r(5);
    for (std::size_t i = 0; i < 5; ++i) {
      c[i] = mass(gen) * static_cast<float>(k[i]);
      r[i] = mass(gen) * static_cast<float>(ch[i] - k[i]) * 0.3f;
    }
    const bool in_window = step % 5 != 0;
    voter.add_step(c.data(), r.data(), in_window);
    h.crit.emplace_back(c.begin(), c.end());
    h.rest.emplace_back(r.begin(), r.end());
    h.in_window.push_back(in_window);
    const double want = h.share(k, ch);
    ASSERT_EQ(voter.vote_share(), want) << "step " << step;
    decided += want > 0.2 && want < 1.0 ? 1 : 0;
  }
  EXPECT_GT(decided, 30) << "inputs too tame: the votes never split";
  // A restore puts back what was saved.
  zenflow::zen_auto_voter copy(k, ch);
  copy.restore(voter.crit_sums().data(), voter.rest_sums().data(), voter.crit_steps());
  EXPECT_EQ(copy.vote_share(), voter.vote_share());
  EXPECT_EQ(zenflow::zen_auto_voter({}, {}).vote_share(), 1.0); // no matrix: always
}

template <class F>
void expect_invalid(F&& f, const std::string& arg) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << arg << "'";
  } catch (const zenflow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + arg + "'"), std::string::npos) << e.what();
  }
}

TEST(zen_auto_voter, bad_arguments_are_named_and_change_nothing) {
  expect_invalid([] { zenflow::zen_auto_voter v({1, 2}, {5}); }, "channels");
  expect_invalid([] { zenflow::zen_auto_voter v({0}, {5}); }, "k");
  expect_invalid([] { zenflow::zen_auto_voter v({6}, {5}); }, "k");
  zenflow::zen_auto_voter v({1}, {4});
  const float c = 2.0f, r = 9.0f;
  v.add_step(&c, &r, true);
  const double before = v.vote_share();
  expect_invalid([&] { v.add_step(nullptr, &r, true); }, "crit");
  expect_invalid([&] { v.add_step(&c, nullptr, true); }, "rest");
  expect_invalid([&] { v.restore(nullptr, v.rest_sums().data(), 1); }, "crit");
  expect_invalid([&] { v.restore(v.crit_sums().data(), v.rest_sums().data(), -1); }, "crit_steps");
  EXPECT_EQ(v.crit_steps(), 1);
  EXPECT_EQ(v.vote_share(), before);
}

TEST(mass_trigger, bad_arguments_are_named_and_change_nothing) {
  expect_invalid([] { zenflow::mass_trigger t(1.5, 4); }, "fraction");
  expect_invalid([] { zenflow::mass_trigger t(-0.1, 4); }, "fraction");
  expect_invalid([] { zenflow::mass_trigger t(std::nan(""), 4); }, "fraction");
  expect_invalid([] { zenflow::mass_trigger t(0.5, 0); }, "min_gap");
  zenflow::mass_trigger t(0.5, 1);
  const float c[2] = {1.0f, 2.0f}, r[2] = {3.0f, 4.0f};
  t.add_step(c, r, 2);
  expect_invalid([&] { t.add_step(nullptr, r, 2); }, "crit");
  expect_invalid([&] { t.add_step(c, nullptr, 2); }, "rest");
  expect_invalid([&] { t.add_step(c, r, -1); }, "m");
  EXPECT_EQ(t.reference().steps, 1);
  EXPECT_EQ(t.reference().crit, 3.0);
}

// add_step_masses against the voter and the trigger fed by the rules written out by hand, on a
// run with selections, windows, skipped steps and masses from before a selection.
TEST(add_step_masses, feeds_the_voter_and_the_trigger_by_the_schedules_rules) {
  std::mt19937_64 gen(zf_test::base_seed() + 41);
  std::uniform_real_distribution<float> mass(0.5f, 4.0f);
  const std::vector<std::int64_t> k = {2, 5};
  const std::vector<std::int64_t> ch = {20, 40};
  zenflow::zen_auto_voter voter(k, ch), by_hand(k, ch);
  zenflow::mass_trigger trigger(0.9, 1), trigger_by_hand(0.9, 1);
  std::int64_t selection = -1, window = 0;
  int fed = 0;
  for (std::int64_t s = 0; s < 80; ++s) {
    if (s % 17 == 3) {
      selection = s;
      voter.on_selection();
      by_hand.on_selection();
      trigger.on_selection();
      trigger_by_hand.on_selection();
    }
    if (s % 4 == 0) {
      window = s;
    }
    const float c[2] = {mass(gen), mass(gen)}, r[2] = {mass(gen) * 3, mass(gen) * 5};
    const bool good = s % 9 != 4;
    // The masses of a step a little before `s` (the lag), sometimes older than the selection.
    const std::int64_t step = s - (s % 3);
    zenflow::add_step_masses(&voter, &trigger, step, good, c, r, 2, selection, window);
    if (good && selection >= 0 && step >= selection) {
      by_hand.add_step(c, r, step >= window);
      if (step > selection) {
        trigger_by_hand.add_step(c, r, 2);
      }
      ++fed;
    }
    ASSERT_EQ(voter.crit_sums(), by_hand.crit_sums()) << s;
    ASSERT_EQ(voter.rest_sums(), by_hand.rest_sums()) << s;
    ASSERT_EQ(voter.crit_steps(), by_hand.crit_steps()) << s;
    ASSERT_EQ(trigger.reference().crit, trigger_by_hand.reference().crit) << s;
    ASSERT_EQ(trigger.current().steps, trigger_by_hand.current().steps) << s;
    ASSERT_EQ(trigger.last().total, trigger_by_hand.last().total) << s;
  }
  EXPECT_GT(fed, 30);
  // Nullable voter and trigger; a step the rules leave out reads nothing.
  zenflow::add_step_masses(nullptr, nullptr, 5, true, nullptr, nullptr, 2, -1, 0);
  zenflow::add_step_masses(nullptr, nullptr, 5, false, nullptr, nullptr, 2, 0, 0);
  const float c[2] = {1, 1};
  expect_invalid([&] { zenflow::add_step_masses(&voter, nullptr, 90, true, c, c, 3, 0, 0); }, "m");
  expect_invalid([&] { zenflow::add_step_masses(&voter, nullptr, 90, true, nullptr, c, 2, 0, 0); }, "crit");
  expect_invalid([&] { zenflow::add_step_masses(nullptr, &trigger, 90, true, c, nullptr, 2, 0, 0); }, "rest");
  EXPECT_EQ(voter.crit_sums(), by_hand.crit_sums());
}

} // namespace
