/// @file
/// A model weights file: the shape, the vocabulary and the bf16 working weights, exactly as
/// trained, so that a fine-tuning run starts from the very bits the pretraining run ended with.
/// Not the engine's checkpoint (no optimizer state): a fine-tune starts a fresh optimizer.
///
/// Layout (little-endian): "CHARLMW1", int32 vocab, context, embed, hidden, layers, the `vocab`
/// characters, int64 n, then n uint16 bf16 bit patterns (the flat padded parameter buffer).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>

#include "corpus.hpp"
#include "model.hpp"

namespace charlm {

/// What a weights file holds.
struct weights_file {
  model_shape shape{};
  std::string vocab_chars;                  ///< the vocabulary's bytes, in token order
  std::vector<zenflow::bfloat16> weights{}; ///< param_table(shape).total values
};

static_assert(sizeof(zenflow::bfloat16) == 2, "weights files hold bf16 bit patterns");

namespace detail {
inline constexpr std::array<char, 8> weights_magic = {'C', 'H', 'A', 'R', 'L', 'M', 'W', '1'};
} // namespace detail

/// Writes `w` to `path`. Throws zenflow::invalid_argument naming --save-weights on failure.
inline void save_weights_file(const std::string& path, const weights_file& w) {
  std::ofstream f(path, std::ios::binary);
  auto put = [&](const void* p, std::size_t n) {
    f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  };
  put(detail::weights_magic.data(), detail::weights_magic.size());
  const std::array<std::int32_t, 5> dims = {w.shape.vocab, w.shape.context, w.shape.embed, w.shape.hidden,
                                            w.shape.layers};
  put(dims.data(), sizeof dims);
  put(w.vocab_chars.data(), w.vocab_chars.size());
  const auto n = static_cast<std::int64_t>(w.weights.size());
  put(&n, sizeof n);
  put(w.weights.data(), w.weights.size() * sizeof(zenflow::bfloat16));
  if (!f) {
    throw zenflow::invalid_argument("--save-weights: cannot write '" + path + "'");
  }
}

/// Reads a weights file. Throws zenflow::invalid_argument naming --init-weights when the file
/// cannot be read, is not a weights file, or its sizes disagree with its shape.
[[nodiscard]] inline weights_file load_weights_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  auto fail = [&](const std::string& why) {
    return zenflow::invalid_argument("--init-weights: '" + path + "' " + why);
  };
  if (!f) {
    throw fail("cannot be opened");
  }
  auto get = [&](void* p, std::size_t n) {
    f.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (!f) {
      throw fail("is truncated");
    }
  };
  std::array<char, 8> magic{};
  get(magic.data(), magic.size());
  if (magic != detail::weights_magic) {
    throw fail("is not a charlm weights file");
  }
  std::array<std::int32_t, 5> dims{};
  get(dims.data(), sizeof dims);
  weights_file w;
  w.shape.vocab = dims[0], w.shape.context = dims[1], w.shape.embed = dims[2], w.shape.hidden = dims[3],
  w.shape.layers = dims[4];
  if (w.shape.vocab < 2 || w.shape.vocab > 256 || w.shape.context < 1 || w.shape.embed < 1 ||
      w.shape.hidden < 1 || w.shape.layers < 1) {
    throw fail("has an invalid model shape");
  }
  w.vocab_chars.resize(static_cast<std::size_t>(w.shape.vocab));
  get(w.vocab_chars.data(), w.vocab_chars.size());
  std::int64_t n = 0;
  get(&n, sizeof n);
  if (n != param_table(w.shape).total) {
    throw fail("holds " + std::to_string(n) + " weights, its shape needs " +
               std::to_string(param_table(w.shape).total));
  }
  w.weights.resize(static_cast<std::size_t>(n));
  get(w.weights.data(), w.weights.size() * sizeof(zenflow::bfloat16));
  return w;
}

} // namespace charlm
