/// @file
/// The trainer's data: a deterministic English-like corpus (or any text file), a character
/// vocabulary, and a batch sampler.
///
/// The corpus comes from a small probabilistic grammar whose word choices follow a Zipf law, so
/// that a few characters and contexts are far more frequent than the rest: the gradient of the
/// embedding and of the first layer is concentrated on few input channels, as in real text.
/// Everything uses the splitmix64 generator below (not <random>'s distributions, whose output
/// differs between standard libraries), so that the same seed gives the same bytes everywhere.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace charlm {

/// splitmix64: tiny, fast, and identical on every platform.
struct rng {
  std::uint64_t state;
  explicit rng(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
  }
  /// Standard normal (Box-Muller, one value per call).
  double normal() {
    const double u1 = 1.0 - uniform(); // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

namespace detail {

/// Cumulative Zipf weights 1 / (rank + 1)^1.1 for lists of up to 32 words, computed once.
inline const std::array<double, 33>& zipf_cumulative() {
  static const std::array<double, 33> table = [] {
    std::array<double, 33> t{};
    for (std::size_t i = 1; i < t.size(); ++i) {
      t[i] = t[i - 1] + 1.0 / std::pow(static_cast<double>(i), 1.1);
    }
    return t;
  }();
  return table;
}

/// Picks an index in [0, n) with Zipf weights, n <= 32.
inline std::size_t zipf_pick(rng& g, std::size_t n) {
  const auto& cum = zipf_cumulative();
  const double u = g.uniform() * cum[n];
  std::size_t i = 0;
  while (i + 1 < n && u >= cum[i + 1]) {
    ++i;
  }
  return i;
}

/// The generator's style. `shifted` (the fine-tuning corpus) reverses every word list's Zipf
/// ranks (the rare words, with their q, x, z, become the frequent ones) and asks more questions:
/// the same characters, different statistics.
struct style {
  bool shifted = false;
};

template <std::size_t N>
const char* pick(rng& g, const std::array<const char*, N>& words, style st) {
  static_assert(N <= 32);
  const std::size_t rank = zipf_pick(g, N);
  return words[st.shifted ? N - 1 - rank : rank];
}

// Word lists, most frequent first (Zipf ranks).
inline constexpr std::array<const char*, 24> nouns = {
    "river", "king",   "house", "child", "garden", "road",    "ship", "mountain",
    "queen", "forest", "horse", "city",  "bridge", "village", "lamp", "winter",
    "bird",  "stone",  "wolf",  "tower", "harbor", "meadow",  "oxen", "quartz"};
inline constexpr std::array<const char*, 20> names = {
    "Anna", "Tom",   "Mara", "John",   "Elsa",  "Peter", "Ruth", "Hugo",  "Clara", "Felix",
    "Ida",  "Oscar", "Vera", "Walter", "Yusuf", "Zoe",   "Kai",  "Jules", "Xena",  "Quincy"};
inline constexpr std::array<const char*, 20> adjectives = {
    "old",   "small", "quiet", "bright", "cold",  "green", "long",   "dark",   "gentle", "wide",
    "proud", "empty", "swift", "heavy",  "brave", "lazy",  "frozen", "jagged", "vexed",  "quaint"};
inline constexpr std::array<const char*, 22> verbs = {
    "sees",    "finds", "keeps", "follows", "leaves", "builds", "watches", "carries",
    "crosses", "hears", "loves", "paints",  "guards", "climbs", "fixes",   "joins",
    "seeks",   "waxes", "zips",  "jumps",   "quits",  "vexes"};
inline constexpr std::array<const char*, 12> intransitive = {"sleeps", "waits",   "sings", "rests",
                                                             "laughs", "wanders", "falls", "grows",
                                                             "fades",  "shivers", "jokes", "quakes"};
inline constexpr std::array<const char*, 10> adverbs = {"slowly", "often", "again", "today",  "quietly",
                                                        "always", "never", "soon",  "gladly", "boldly"};
inline constexpr std::array<const char*, 9> prepositions = {"near",  "under", "behind", "over",   "across",
                                                            "along", "past",  "beyond", "without"};
inline constexpr std::array<const char*, 4> determiners = {"the", "a", "every", "one"};
inline constexpr std::array<const char*, 5> conjunctions = {"and", "but", "while", "because", "so"};

inline void noun_phrase(rng& g, std::string& out, style st) {
  if (g.uniform() < 0.25) {
    out += pick(g, names, st);
    return;
  }
  out += pick(g, determiners, st);
  out += ' ';
  if (g.uniform() < 0.45) {
    out += pick(g, adjectives, st);
    out += ' ';
  }
  out += pick(g, nouns, st);
  if (g.uniform() < 0.15) {
    out += ' ';
    out += pick(g, prepositions, st);
    out += " the ";
    out += pick(g, nouns, st);
  }
}

inline void clause(rng& g, std::string& out, style st) {
  noun_phrase(g, out, st);
  out += ' ';
  if (g.uniform() < 0.7) {
    out += pick(g, verbs, st);
    out += ' ';
    noun_phrase(g, out, st);
  } else {
    out += pick(g, intransitive, st);
  }
  if (g.uniform() < 0.3) {
    out += ' ';
    out += pick(g, adverbs, st);
  }
}

inline void sentence(rng& g, std::string& out, style st) {
  const std::size_t start = out.size();
  clause(g, out, st);
  if (g.uniform() < 0.3) {
    out += g.uniform() < 0.5 ? ", " : " ";
    out += pick(g, conjunctions, st);
    out += ' ';
    clause(g, out, st);
  }
  if (g.uniform() < 0.04) {
    out += " in ";
    out += std::to_string(1000 + g.below(1000));
  }
  out[start] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[start])));
  const double p = g.uniform();
  const double question = st.shifted ? 0.5 : 0.95;
  out += p < (st.shifted ? 0.35 : 0.85) ? ". " : (p < question ? "! " : "? ");
  if (g.uniform() < 0.08) {
    out.back() = '\n';
  }
}

} // namespace detail

/// `bytes` characters of English-like text from the grammar, the same for the same seed;
/// `shifted`: the fine-tuning style (detail::style), from an independent stream of the seed.
[[nodiscard]] inline std::string
generate_corpus(std::size_t bytes, std::uint64_t seed, bool shifted = false) {
  rng g(seed ^ (shifted ? 0x5b1f7ed5eedull : 0x5a17c0de5eedull));
  const detail::style st{shifted};
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    detail::sentence(g, out, st);
  }
  out.resize(bytes);
  return out;
}

/// The whole content of a text file. Throws std::runtime_error naming the path on failure.
[[nodiscard]] inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open data file '" + path + "'");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Byte-level vocabulary: the distinct bytes of a text, in byte order.
class vocabulary {
public:
  explicit vocabulary(std::string_view text) {
    std::array<bool, 256> seen{};
    for (unsigned char c : text) {
      seen[c] = true;
    }
    index_.fill(-1);
    for (int c = 0; c < 256; ++c) {
      if (seen[static_cast<std::size_t>(c)]) {
        index_[static_cast<std::size_t>(c)] = static_cast<std::int32_t>(chars_.size());
        chars_.push_back(static_cast<char>(c));
      }
    }
  }
  [[nodiscard]] std::int32_t size() const { return static_cast<std::int32_t>(chars_.size()); }
  /// Token of a byte, -1 when the byte is not in the vocabulary.
  [[nodiscard]] std::int32_t encode(char c) const { return index_[static_cast<unsigned char>(c)]; }
  [[nodiscard]] char decode(std::int32_t t) const { return chars_.at(static_cast<std::size_t>(t)); }
  /// The vocabulary's bytes in token order (vocabulary(chars()) is the same vocabulary).
  [[nodiscard]] std::string chars() const { return {chars_.begin(), chars_.end()}; }
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> out(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
      out[i] = encode(text[i]);
    }
    return out;
  }

private:
  std::vector<char> chars_;
  std::array<std::int32_t, 256> index_{};
};

/// One batch: `batch` rows of `context` input tokens and the token that follows them.
struct batch {
  std::int32_t rows = 0;
  std::int32_t context = 0;
  std::vector<std::int32_t> inputs;  ///< [rows, context], row-major
  std::vector<std::int32_t> targets; ///< [rows]
};

/// Samples training batches from the first 90% of a token stream and fixed evaluation batches
/// from the last 10%, deterministically from a seed.
class dataset {
public:
  dataset(std::vector<std::int32_t> tokens, std::int32_t context, std::uint64_t seed)
      : tokens_(std::move(tokens)), context_(context), gen_(seed) {
    if (context < 1) {
      throw std::invalid_argument("context must be >= 1");
    }
    const auto n = static_cast<std::int64_t>(tokens_.size());
    split_ = n * 9 / 10;
    if (split_ <= context || n - split_ <= context) {
      throw std::invalid_argument("text too short for context " + std::to_string(context) + " (" +
                                  std::to_string(n) + " characters)");
    }
  }

  [[nodiscard]] std::int64_t train_tokens() const { return split_; }
  [[nodiscard]] std::int64_t eval_tokens() const {
    return static_cast<std::int64_t>(tokens_.size()) - split_;
  }

  /// The next random training batch.
  [[nodiscard]] batch next_train(std::int32_t rows) { return sample(rows, 0, split_, gen_); }

  /// The training sampler's generator state (a checkpoint's data position), and its restore.
  [[nodiscard]] std::uint64_t rng_state() const { return gen_.state; }
  void set_rng_state(std::uint64_t s) { gen_.state = s; }

  /// Evaluation batch `i`: the same for the same (seed, i), independent of training progress.
  [[nodiscard]] batch eval_batch(std::int32_t rows, std::uint64_t i) const {
    rng g(0xe7a1ull * (i + 1) + 17);
    return sample(rows, split_, static_cast<std::int64_t>(tokens_.size()), g);
  }

private:
  batch sample(std::int32_t rows, std::int64_t lo, std::int64_t hi, rng& g) const {
    batch b;
    b.rows = rows;
    b.context = context_;
    b.inputs.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(context_));
    b.targets.resize(static_cast<std::size_t>(rows));
    const auto span = static_cast<std::uint64_t>(hi - lo - context_);
    for (std::int32_t r = 0; r < rows; ++r) {
      const std::int64_t t = lo + context_ + static_cast<std::int64_t>(g.below(span)); // target position
      for (std::int32_t c = 0; c < context_; ++c) {
        b.inputs[static_cast<std::size_t>(r) * context_ + c] =
            tokens_[static_cast<std::size_t>(t - context_ + c)];
      }
      b.targets[static_cast<std::size_t>(r)] = tokens_[static_cast<std::size_t>(t)];
    }
    return b;
  }

  std::vector<std::int32_t> tokens_;
  std::int32_t context_;
  std::int64_t split_ = 0;
  rng gen_;
};

} // namespace charlm
