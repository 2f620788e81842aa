/// @file
/// One training run from parsed options, on the host backend (run_host) or the CUDA backend
/// (run_cuda, in train_cuda.cu, present when the example is built with CUDA).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "corpus.hpp"
#include "host_charlm.hpp"
#include "options.hpp"
#include "trainer.hpp"
#include "weights.hpp"

namespace charlm {

/// Reads or generates the text, fixes the vocabulary in `o.shape`, and builds the dataset. With
/// `init` (a weights file) the model shape and the vocabulary are the file's, and the text must
/// use no other character.
[[nodiscard]] inline dataset make_dataset(options& o, const weights_file* init = nullptr) {
  const std::string text = load_text(o);
  const vocabulary vocab(init != nullptr ? std::string_view(init->vocab_chars) : std::string_view(text));
  if (init != nullptr) {
    o.shape = init->shape;
  }
  o.shape.vocab = vocab.size();
  o.vocab_chars = vocab.chars();
  std::vector<std::int32_t> tokens = vocab.encode(text);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      throw zenflow::invalid_argument("--init-weights: the training text has a character (byte " +
                                      std::to_string(static_cast<unsigned char>(text[i])) +
                                      ") outside the weights file's vocabulary");
    }
  }
  return dataset(std::move(tokens), o.shape.context, o.seed);
}

/// The weights file `o.init_weights` (nullopt when not given).
[[nodiscard]] inline std::optional<weights_file> load_init_weights(const options& o) {
  if (o.init_weights.empty()) {
    return std::nullopt;
  }
  return load_weights_file(o.init_weights);
}

/// Threads the model may use: --threads, or the cores the engine leaves to the training thread.
[[nodiscard]] inline unsigned model_threads(const options& o) {
  if (o.threads > 0) {
    return o.threads;
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned host = o.zf.resolved_host_threads(hw);
  return hw > host ? hw - host : 1u;
}

/// The host backend: the "device" is host memory and the model runs on `model_threads` threads;
/// the engine's host windows run on its own threads.
/// --init-weights starts from a weights file, --save-weights writes the trained weights.
[[nodiscard]] inline run_result run_host(options o) {
  const std::optional<weights_file> init = load_init_weights(o);
  dataset data = make_dataset(o, init ? &*init : nullptr);
  zenflow::worker_pool pool(model_threads(o));
  host_charlm model(o.shape, o.seed, &pool);
  if (init) {
    model.set_weights(init->weights);
  }
  zenflow::engine<zenflow::host_backend> opt(o.zf);
  register_params(model, opt);
  opt.initialize(nullptr);
  run_result r = train(model, opt, data, o, nullptr);
  if (!o.save_weights.empty()) {
    save_weights_file(o.save_weights, weights_file{o.shape, o.vocab_chars, model.all_weights()});
  }
  return r;
}

#if defined(CHARLM_HAS_CUDA)
/// The CUDA backend (train_cuda.cu).
run_result run_cuda(options o);
#endif

} // namespace charlm
