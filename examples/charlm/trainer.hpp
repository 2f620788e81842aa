/// @file
/// The training loop, shared by both backends: batches in, forward/backward by the model,
/// `zenflow::engine::step` for the update, a progress line every N steps, a summary table and a
/// JSON report.
///
/// `Model` is host_charlm or cuda_charlm: `table()`, `weights(p)`, `grads(p)`, `train_step(batch)`
/// (returns the loss), `sync()` (waits for the model's stream), `eval(batch)`. `Optimizer` is a
/// zenflow::engine over the matching backend.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/stats.hpp>

#include "corpus.hpp"
#include "model.hpp"
#include "options.hpp"

namespace charlm {

/// One progress line.
struct progress_row {
  std::int64_t step = 0;   ///< steps done at the end of the interval
  double loss = 0;         ///< mean training loss over the interval
  double ms_per_step = 0;  ///< mean wall time per step over the interval
  double stall_ms = 0;     ///< mean engine stall per step over the interval
  double pcie_mb = 0;      ///< mean PCIe MB per step (both directions) over the interval
  std::int64_t window = 0; ///< window length reported by the last step
};

/// What a run produced.
struct run_result {
  std::string backend;
  std::string mode;
  std::int64_t parameters = 0;
  std::uint64_t model_bytes = 0; ///< working-precision (bf16) bytes of all parameters
  std::int32_t vocab = 0;
  std::int64_t steps = 0;
  double eval_loss_initial = 0;
  double eval_loss_final = 0;
  double train_loss_final = 0; ///< mean training loss over the last log interval
  double ms_per_step = 0;      ///< mean over the steps after the first few (start-up)
  double stall_ms_per_step = 0;
  double stall_fraction = 0; ///< engine stall time / step time
  double pcie_bytes_per_step = 0;
  double pcie_model_ratio = 0; ///< PCIe bytes per step / model bytes
  std::int64_t selections = 0;
  std::int64_t mass_drop_selections = 0; ///< of `selections`, those select_on_mass_drop triggered
  std::int64_t windows_closed = 0;
  std::int64_t host_jobs = 0;
  std::int64_t skipped_steps = 0;
  double mean_window = 0;
  double total_s = 0;
  zenflow::memory_usage memory{};
  // Data parallel (more than one rank): rank 0's figures above are its own; these are summed
  // over the ranks (engine::stats_over_ranks()).
  int ranks = 1;
  std::uint64_t comm_bytes = 0;     ///< rank 0's bytes into collectives
  std::uint64_t comm_bytes_all = 0; ///< summed over the ranks
  std::size_t host_memory_all = 0;  ///< host memory summed over the ranks
  std::vector<progress_row> progress;
  std::vector<float> losses; ///< every step's training loss
};

/// Where a run stands between two steps: what a checkpoint set holds besides the model's weights
/// and the engine (checkpoint.hpp), so that a resumed run prints, reports and trains as the
/// uninterrupted one would (the timings excepted).
struct trainer_state {
  std::int64_t step = 0;        ///< steps done
  std::uint64_t data_rng = 0;   ///< the batch sampler's generator after `step` batches
  double eval_loss_initial = 0; ///< of the run's first model, not the resumed one's
  double train_loss_final = 0;
  // the open log interval and the running sums of the summary
  double iv_loss = 0, iv_s = 0, iv_stall = 0, iv_bytes = 0;
  std::int64_t iv_n = 0, window_sum = 0, window_steps = 0;
  double timed_s = 0, timed_stall_s = 0, timed_bytes = 0;
  std::vector<float> losses;          ///< every step's training loss so far
  std::vector<progress_row> progress; ///< the log rows so far
};

/// Checkpointing hooks of `train`: start from `resume` (nullptr: from step 0), and call `save`
/// between steps every `every` steps and after the last one (`save` empty: never).
struct train_hooks {
  const trainer_state* resume = nullptr;
  std::int64_t every = 0;
  std::function<void(const trainer_state&)> save;
};

/// A test hook: sleeps for the milliseconds the environment variable `name` gives (read once per
/// name; unset or 0: no pause), so that a test can kill the trainer at that point
/// (tests/examples/charlm_kill_resume.py: CHARLM_STEP_PAUSE_MS inside a step,
/// CHARLM_CHECKPOINT_PAUSE_MS at each stage of a save).
template <const char* Name>
void test_pause() {
  static const long ms = [] {
    const char* v = std::getenv(Name);
    return v != nullptr ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
}
inline constexpr char step_pause_env[] = "CHARLM_STEP_PAUSE_MS";

/// Corpus for the options: the text file, or the generated one.
[[nodiscard]] inline std::string load_text(const options& o) {
  return o.data_path.empty()
             ? generate_corpus(static_cast<std::size_t>(o.corpus_bytes), o.seed, o.corpus_style == "shifted")
             : read_text_file(o.data_path);
}

template <class Model>
double eval_loss(Model& model, const dataset& data, const options& o) {
  double sum = 0;
  for (std::int32_t i = 0; i < o.eval_batches; ++i) {
    sum += model.eval(data.eval_batch(o.batch, static_cast<std::uint64_t>(i)));
  }
  return sum / o.eval_batches;
}

/// Registers every parameter with the engine: matrices as contiguous channel matrices
/// (channels = input features, channel_len = outputs), vectors (biases) as vectors.
template <class Model, class Optimizer>
void register_params(Model& model, Optimizer& opt) {
  const param_table& t = model.table();
  for (std::int32_t p = 0; p < static_cast<std::int32_t>(t.params.size()); ++p) {
    const param_info& info = t[p];
    if (info.matrix) {
      (void)opt.add_matrix(model.weights(p), model.grads(p), info.rows, info.cols);
    } else {
      (void)opt.add_vector(model.weights(p), model.grads(p), info.size());
    }
  }
}

/// One "progress" line on stderr: steps done, elapsed wall time and the time left at the mean
/// pace so far (the final evaluation comes after it). stderr, so that it passes --quiet runs.
inline void print_progress(std::int64_t done, std::int64_t steps, double elapsed_s, float loss) {
  const double eta_s = elapsed_s / static_cast<double>(done) * static_cast<double>(steps - done);
  std::fprintf(stderr, "progress %lld/%lld steps (%3.0f%%), %.1f s elapsed, ETA %.1f s, loss %.4f\n",
               static_cast<long long>(done), static_cast<long long>(steps),
               100.0 * static_cast<double>(done) / static_cast<double>(steps), elapsed_s, eta_s,
               static_cast<double>(loss));
  std::fflush(stderr);
}

/// Trains `model` with `opt` (already holding the parameters and initialised) on `data`; the
/// engine's work is enqueued on `stream` (the model's; nullptr on the host backend). A step's
/// time runs from the batch to the end of the stream's work for it (model.sync()); the engine's
/// host windows keep running in the background, and what a step waited for them is its stall.
/// Rank `rank`'s rows of `b` out of `ranks` (data parallel: every rank draws the same batches and
/// trains on its own contiguous share of the rows).
[[nodiscard]] inline batch shard(const batch& b, int rank, int ranks) {
  if (ranks == 1) {
    return b;
  }
  const auto lo = static_cast<std::int32_t>(static_cast<std::int64_t>(b.rows) * rank / ranks);
  const auto hi = static_cast<std::int32_t>(static_cast<std::int64_t>(b.rows) * (rank + 1) / ranks);
  batch s;
  s.rows = hi - lo;
  s.context = b.context;
  const auto ctx = static_cast<std::ptrdiff_t>(b.context);
  s.inputs.assign(b.inputs.begin() + lo * ctx, b.inputs.begin() + hi * ctx);
  s.targets.assign(b.targets.begin() + lo, b.targets.begin() + hi);
  return s;
}

/// Data parallel: this is rank `rank` of `ranks`, on its shard of every batch.
template <class Model, class Optimizer>
run_result train(Model& model,
                 Optimizer& opt,
                 dataset& data,
                 const options& o,
                 cudaStream_t stream,
                 int rank = 0,
                 int ranks = 1,
                 const train_hooks* hooks = nullptr) {
  using clock = std::chrono::steady_clock;
  run_result r;
  r.backend = Model::name();
  r.mode = std::string(mode_flag_name(o.zf.mode));
  r.parameters = model.table().count;
  r.model_bytes = static_cast<std::uint64_t>(r.parameters) * 2;
  r.vocab = o.shape.vocab;
  r.steps = o.steps;
  const trainer_state* resume = hooks != nullptr ? hooks->resume : nullptr;
  r.eval_loss_initial = resume != nullptr ? resume->eval_loss_initial : eval_loss(model, data, o);
  if (!o.quiet) {
    std::printf("%s | %s | %lld parameters (%.1f MB bf16) | vocab %d | eval loss %.4f\n", r.backend.c_str(),
                r.mode.c_str(), static_cast<long long>(r.parameters),
                static_cast<double>(r.model_bytes) / 1e6, r.vocab, r.eval_loss_initial);
    std::printf("host threads: %s\n", opt.stats().placement.describe().c_str());
    std::printf("%8s %9s %10s %10s %11s %7s\n", "step", "loss", "ms/step", "stall ms", "PCIe MB/st",
                "window");
  }
  const std::int64_t timing_skip = std::min<std::int64_t>(5, o.steps / 10);
  double timed_s = 0, timed_stall_s = 0, timed_bytes = 0;
  double iv_loss = 0, iv_s = 0, iv_stall = 0, iv_bytes = 0;
  std::int64_t iv_n = 0, window_sum = 0, window_steps = 0;
  std::int64_t first = 0;
  if (resume != nullptr) { // the batches, the sums and the rows where the saved run stood
    first = resume->step;
    data.set_rng_state(resume->data_rng);
    r.losses = resume->losses;
    r.progress = resume->progress;
    r.train_loss_final = resume->train_loss_final;
    iv_loss = resume->iv_loss, iv_s = resume->iv_s, iv_stall = resume->iv_stall, iv_bytes = resume->iv_bytes;
    iv_n = resume->iv_n, window_sum = resume->window_sum, window_steps = resume->window_steps;
    timed_s = resume->timed_s, timed_stall_s = resume->timed_stall_s, timed_bytes = resume->timed_bytes;
  }
  const bool saving = hooks != nullptr && hooks->save && hooks->every >= 0;
  const auto start = clock::now();
  for (std::int64_t t = first; t < o.steps; ++t) {
    const batch b = shard(data.next_train(o.batch), rank, ranks);
    const auto t0 = clock::now();
    const float loss = model.train_step(b);
    test_pause<step_pause_env>(); // the gradients made, the optimizer's step not yet taken
    const zenflow::step_report rep = opt.step(learning_rate(o, t), stream);
    model.sync();
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    const double bytes = static_cast<double>(rep.d2h_bytes + rep.h2d_bytes);
    r.losses.push_back(loss);
    if (t >= timing_skip) {
      timed_s += dt;
      timed_stall_s += rep.stall_s;
      timed_bytes += bytes;
    }
    if (rep.window_closed) { // mean over closed windows of their length
      window_sum += rep.window_length;
      ++window_steps;
    }
    iv_loss += loss;
    iv_s += dt;
    iv_stall += rep.stall_s;
    iv_bytes += bytes;
    ++iv_n;
    if (o.progress_every > 0 && ((t + 1) % o.progress_every == 0 || t + 1 == o.steps)) {
      print_progress(t + 1, o.steps, std::chrono::duration<double>(clock::now() - start).count(), loss);
    }
    if ((t + 1) % o.log_every == 0 || t + 1 == o.steps) {
      const auto n = static_cast<double>(iv_n);
      progress_row row{
          t + 1, iv_loss / n, 1e3 * iv_s / n, 1e3 * iv_stall / n, iv_bytes / n / 1e6, rep.window_length};
      r.progress.push_back(row);
      if (!o.quiet) {
        std::printf("%8lld %9.4f %10.2f %10.2f %11.3f %7lld\n", static_cast<long long>(row.step), row.loss,
                    row.ms_per_step, row.stall_ms, row.pcie_mb, static_cast<long long>(row.window));
        std::fflush(stdout);
      }
      r.train_loss_final = row.loss;
      iv_loss = iv_s = iv_stall = iv_bytes = 0;
      iv_n = 0;
    }
    // A checkpoint set between two steps: every `every` steps and after the last one.
    if (saving && ((hooks->every > 0 && (t + 1) % hooks->every == 0) || t + 1 == o.steps)) {
      trainer_state st;
      st.step = t + 1;
      st.data_rng = data.rng_state();
      st.eval_loss_initial = r.eval_loss_initial;
      st.train_loss_final = r.train_loss_final;
      st.iv_loss = iv_loss, st.iv_s = iv_s, st.iv_stall = iv_stall, st.iv_bytes = iv_bytes;
      st.iv_n = iv_n, st.window_sum = window_sum, st.window_steps = window_steps;
      st.timed_s = timed_s, st.timed_stall_s = timed_stall_s, st.timed_bytes = timed_bytes;
      st.losses = r.losses;
      st.progress = r.progress;
      hooks->save(st);
      if (st.step == o.stop_after) { // as if killed right after this save (tests)
        r.steps = st.step;
        return r;
      }
    }
  }
  opt.flush(stream);
  model.sync();
  r.total_s = std::chrono::duration<double>(clock::now() - start).count();
  const auto timed_n = static_cast<double>(std::max<std::int64_t>(1, o.steps - timing_skip));
  r.ms_per_step = 1e3 * timed_s / timed_n;
  r.stall_ms_per_step = 1e3 * timed_stall_s / timed_n;
  r.stall_fraction = timed_s > 0 ? timed_stall_s / timed_s : 0;
  r.pcie_bytes_per_step = timed_bytes / timed_n;
  r.pcie_model_ratio = r.pcie_bytes_per_step / static_cast<double>(r.model_bytes);
  const zenflow::stats& st = opt.stats();
  r.selections = st.selections;
  r.mass_drop_selections = st.mass_drop_selections;
  r.windows_closed = st.windows_closed;
  r.host_jobs = st.host_jobs;
  r.skipped_steps = st.skipped_steps;
  r.memory = st.memory;
  r.mean_window = window_steps > 0 ? static_cast<double>(window_sum) / static_cast<double>(window_steps) : 0;
  r.eval_loss_final = eval_loss(model, data, o);
  return r;
}

[[nodiscard]] inline nlohmann::json to_json(const run_result& r, const options& o) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["mode"] = r.mode;
  j["model"] = {{"parameters", r.parameters}, {"bytes_bf16", r.model_bytes},
                {"vocab", r.vocab},           {"context", o.shape.context},
                {"embed", o.shape.embed},     {"hidden", o.shape.hidden},
                {"layers", o.shape.layers},   {"size", o.size}};
  j["run"] = {{"steps", o.steps},
              {"batch", o.batch},
              {"lr", o.lr},
              {"warmup_steps", o.warmup_steps},
              {"seed", o.seed},
              {"data", o.data_path.empty() ? "generated" : o.data_path},
              {"corpus_style", o.corpus_style},
              {"init_weights", o.init_weights}};
  j["deepspeed_config"] = o.zf.to_deepspeed_json();
  j["summary"] = {{"eval_loss_initial", r.eval_loss_initial},
                  {"eval_loss_final", r.eval_loss_final},
                  {"train_loss_final", r.train_loss_final},
                  {"ms_per_step", r.ms_per_step},
                  {"stall_ms_per_step", r.stall_ms_per_step},
                  {"stall_fraction", r.stall_fraction},
                  {"pcie_bytes_per_step", r.pcie_bytes_per_step},
                  {"pcie_model_ratio", r.pcie_model_ratio},
                  {"selections", r.selections},
                  {"mass_drop_selections", r.mass_drop_selections},
                  {"windows_closed", r.windows_closed},
                  {"host_jobs", r.host_jobs},
                  {"skipped_steps", r.skipped_steps},
                  {"mean_window", r.mean_window},
                  {"total_s", r.total_s},
                  {"device_memory_bytes", r.memory.device_total()},
                  {"host_memory_bytes", r.memory.host_total()}};
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.progress) {
    rows.push_back({{"step", p.step},
                    {"loss", p.loss},
                    {"ms_per_step", p.ms_per_step},
                    {"stall_ms", p.stall_ms},
                    {"pcie_mb", p.pcie_mb},
                    {"window", p.window}});
  }
  j["progress"] = rows;
  if (r.ranks > 1) {
    j["data_parallel"] = {{"ranks", r.ranks},
                          {"comm_bytes_rank0", r.comm_bytes},
                          {"comm_bytes_all_ranks", r.comm_bytes_all},
                          {"host_memory_bytes_rank0", r.memory.host_total()},
                          {"host_memory_bytes_all_ranks", r.host_memory_all}};
  }
  return j;
}

inline void print_summary(const run_result& r, std::FILE* out = stdout) {
  std::fprintf(out, "\n%-30s %s\n", "summary", (r.backend + " / " + r.mode).c_str());
  auto row = [&](const char* k, const std::string& v) { std::fprintf(out, "  %-28s %s\n", k, v.c_str()); };
  char buf[128];
  auto f = [&](const char* fmt, double v) {
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  row("parameters", std::to_string(r.parameters));
  row("eval loss (start -> end)", f("%.4f", r.eval_loss_initial) + " -> " + f("%.4f", r.eval_loss_final));
  row("train loss (last interval)", f("%.4f", r.train_loss_final));
  row("ms / step", f("%.3f", r.ms_per_step));
  row("stall ms / step", f("%.3f", r.stall_ms_per_step) + f(" (%.1f%% of the step)", 100 * r.stall_fraction));
  row("PCIe MB / step", f("%.3f", r.pcie_bytes_per_step / 1e6) + f(" (%.3f x model)", r.pcie_model_ratio));
  row("selections / windows / jobs", std::to_string(r.selections) + " / " + std::to_string(r.windows_closed) +
                                         " / " + std::to_string(r.host_jobs));
  row("mean window length", f("%.2f", r.mean_window));
  row("skipped steps", std::to_string(r.skipped_steps));
  row("engine memory (dev / host)", f("%.1f MB", static_cast<double>(r.memory.device_total()) / 1e6) + " / " +
                                        f("%.1f MB", static_cast<double>(r.memory.host_total()) / 1e6));
  row("wall time", f("%.1f s", r.total_s));
}

/// --losses-out: every step's training loss, "step bits value" per line (bits: the float's pattern
/// in hex, for bit-exact comparisons).
inline void write_losses(const run_result& r, const options& o) {
  if (o.losses_out.empty()) {
    return;
  }
  std::FILE* f = std::fopen(o.losses_out.c_str(), "w");
  if (f == nullptr) {
    throw zenflow::invalid_argument("--losses-out: cannot write '" + o.losses_out + "'");
  }
  for (std::size_t t = 0; t < r.losses.size(); ++t) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &r.losses[t], sizeof bits);
    std::fprintf(f, "%zu %08x %.9g\n", t + 1, bits, static_cast<double>(r.losses[t]));
  }
  if (std::fclose(f) != 0) {
    throw zenflow::invalid_argument("--losses-out: cannot write '" + o.losses_out + "'");
  }
}

inline void write_json(const run_result& r, const options& o) {
  if (o.json_out.empty()) {
    return;
  }
  std::ofstream f(o.json_out);
  if (!f) {
    throw std::runtime_error("cannot write --json-out file '" + o.json_out + "'");
  }
  f << to_json(r, o).dump(2) << "\n";
}

} // namespace charlm
