/// @file
/// One training run from parsed options, on the host backend (run_host) or the CUDA backend
/// (run_cuda, in train_cuda.cu, present when the example is built with CUDA).
#pragma once

#include <algorithm>
#include <string>
#include <thread>

#include <zenflow/engine/engine.hpp>
#include <zenflow/transport/worker_pool.hpp>

#include "corpus.hpp"
#include "host_charlm.hpp"
#include "options.hpp"
#include "trainer.hpp"

namespace charlm {

/// Reads or generates the text, fixes the vocabulary in `o.shape`, and builds the dataset.
[[nodiscard]] inline dataset make_dataset(options& o) {
  const std::string text = load_text(o);
  const vocabulary vocab(text);
  o.shape.vocab = vocab.size();
  return dataset(vocab.encode(text), o.shape.context, o.seed);
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
[[nodiscard]] inline run_result run_host(options o) {
  dataset data = make_dataset(o);
  zenflow::worker_pool pool(model_threads(o));
  host_charlm model(o.shape, o.seed, &pool);
  zenflow::engine<zenflow::host_backend> opt(o.zf);
  register_params(model, opt);
  opt.initialize(nullptr);
  return train(model, opt, data, o, nullptr);
}

#if defined(CHARLM_HAS_CUDA)
/// The CUDA backend (train_cuda.cu).
run_result run_cuda(options o);
#endif

} // namespace charlm
