/// @file
/// One training run from parsed options, on the host backend (run_host) or the CUDA backend
/// (run_cuda, in train_cuda.cu, present when the example is built with CUDA).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>
#if defined(CHARLM_HAS_MPI)
#  include <cstring>
#  include <mpi.h>
#  include <vector>

#  include <zenflow/comm/mpi_communicator.hpp>
#endif
#include <zenflow/engine/data_parallel.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "checkpoint.hpp"
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

/// The model's pool: with --pin-host-threads on the cores the engine's split reserves for training
/// (the engine's own threads take the others), else wherever the system puts it.
[[nodiscard]] inline zenflow::worker_pool_options model_pool_options(const options& o, unsigned threads) {
  zenflow::worker_pool_options p;
  p.threads = threads;
  const std::vector<int> cores = zenflow::allowed_cores();
  const auto n = static_cast<std::int64_t>(cores.size());
  // A share that leaves the engine no core: its initialize() says so, naming the config key.
  if (o.zf.pin_host_threads && zenflow::training_core_count(n, o.zf.pt_reserved_cores_perc) < n) {
    p.confine_to = zenflow::reserve_training_cores(cores, o.zf.pt_reserved_cores_perc).training;
  }
  return p;
}

/// The host backend: the "device" is host memory and the model runs on `model_threads` threads;
/// the engine's host windows run on its own threads.
/// --init-weights starts from a weights file, --save-weights writes the trained weights;
/// --checkpoint-dir saves checkpoint sets and --resume continues from the newest (checkpoint.hpp):
/// the directory and the set are checked before anything trains.
[[nodiscard]] inline run_result run_host(options o) {
  const std::optional<weights_file> init = load_init_weights(o);
  dataset data = make_dataset(o, init ? &*init : nullptr);
  std::optional<checkpoint_sets> sets;
  std::optional<loaded_set> resumed;
  if (!o.checkpoint_dir.empty()) {
    sets.emplace(o.checkpoint_dir);
    if (o.resume) {
      resumed = sets->load_latest(o);
      if (!resumed) {
        std::fprintf(stderr, "checkpoint: no complete set in '%s': starting at step 0\n",
                     o.checkpoint_dir.c_str());
      }
    } else {
      sets->prepare_fresh();
    }
  }
  zenflow::worker_pool pool(model_pool_options(o, model_threads(o)));
  host_charlm model(o.shape, o.seed, &pool);
  if (init) {
    model.set_weights(init->weights);
  }
  if (resumed) {
    model.set_weights(resumed->weights); // before initialize(): the engine's arrays hold the saved values
  }
  zenflow::engine<zenflow::host_backend> opt(o.zf);
  register_params(model, opt);
  opt.initialize(nullptr);
  (void)zenflow::pin_to_training_cores(opt.stats().placement); // the training thread: the model's cores
  train_hooks hooks;
  if (resumed) {
    opt.load(resumed->path + "/engine.zfck");
    hooks.resume = &resumed->state;
    std::fprintf(stderr, "checkpoint: resuming from %s (step %lld)\n", resumed->path.c_str(),
                 static_cast<long long>(resumed->state.step));
  }
  if (sets) {
    hooks.every = o.checkpoint_every;
    hooks.save = [&](const trainer_state& st) { sets->save(opt, st, model.all_weights(), o); };
  }
  run_result r;
  try {
    r = train(model, opt, data, o, nullptr, 0, 1, &hooks);
  } catch (...) {
    // A failed save ends the run: finish the host window in flight rather than have the engine
    // warn, as it is destroyed, that its updates are dropped (the set kept has its own).
    try {
      opt.flush(nullptr);
    } catch (...) {
    }
    throw;
  }
  if (!o.save_weights.empty()) {
    save_weights_file(o.save_weights, weights_file{o.shape, o.vocab_chars, model.all_weights()});
  }
  return r;
}

#if defined(CHARLM_HAS_MPI)
/// This process's rank in MPI_COMM_WORLD, with `ranks` set to the world's size; `--batch` must
/// give every rank a row, and only rank 0 reports (the others' `o` made quiet).
[[nodiscard]] inline int world_rank_for_training(options& o, int& ranks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (o.batch < ranks) {
    throw zenflow::invalid_argument("--batch: must be >= the number of ranks (" + std::to_string(ranks) +
                                    ")");
  }
  if (rank != 0) { // rank 0 reports
    o.quiet = true;
    o.progress_every = 0;
  }
  return rank;
}

/// True on every rank when every rank's weights `w` are rank 0's, bit for bit (a collective).
template <class T>
[[nodiscard]] bool replicas_identical(const std::vector<T>& w) {
  std::vector<T> w0 = w;
  MPI_Bcast(w0.data(), static_cast<int>(w0.size() * sizeof(T)), MPI_BYTE, 0, MPI_COMM_WORLD);
  int differs = std::memcmp(w.data(), w0.data(), w.size() * sizeof(T)) != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return differs == 0;
}

/// The host backend data parallel over MPI_COMM_WORLD (launched by mpirun): every rank holds a
/// replica of the model and trains on its shard of every batch; the engine averages the
/// gradients. `replicas_same`: every rank ended with rank 0's weights, bit for bit.
[[nodiscard]] inline run_result run_host_mpi(options o, bool& replicas_same) {
  int ranks = 1;
  const int rank = world_rank_for_training(o, ranks);
  const std::optional<weights_file> init = load_init_weights(o);
  dataset data = make_dataset(o, init ? &*init : nullptr); // the same batches on every rank
  zenflow::worker_pool pool(std::max(1u, model_threads(o) / static_cast<unsigned>(ranks)));
  host_charlm model(o.shape, o.seed, &pool); // the same seed: the replicas start equal
  if (init) {
    model.set_weights(init->weights);
  }
  zenflow::engine<zenflow::host_backend, zenflow::mpi_communicator> opt(
      o.zf, zenflow::host_backend{}, zenflow::mpi_communicator(MPI_COMM_WORLD));
  register_params(model, opt);
  opt.initialize(nullptr);
  run_result r = train(model, opt, data, o, nullptr, rank, ranks);
  const zenflow::stats all = opt.stats_over_ranks(); // every rank calls it
  r.ranks = ranks;
  r.comm_bytes = opt.stats().comm_bytes;
  r.comm_bytes_all = all.comm_bytes;
  r.host_memory_all = all.memory.host_total();
  using weight_t = host_charlm::weight_t;
  std::vector<weight_t> w = model.all_weights();
  replicas_same = replicas_identical(w);
  if (rank == 0 && !o.save_weights.empty()) {
    save_weights_file(o.save_weights, weights_file{o.shape, o.vocab_chars, w});
  }
  return r;
}
#endif

#if defined(CHARLM_HAS_CUDA)
/// The CUDA backend (train_cuda.cu).
run_result run_cuda(options o);
#endif
#if defined(CHARLM_HAS_NCCL)
/// The CUDA backend under mpirun, one rank per GPU over NCCL (train_cuda.cu); `replicas_same` as
/// run_host_mpi's.
run_result run_cuda_mpi(options o, bool& replicas_same);
#endif

} // namespace charlm
