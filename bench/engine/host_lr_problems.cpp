// host_lr_problems: one training run of a small synthetic problem on the engine's host backend,
// for the host-lr / window-length sweep (bench/engine/host_lr_sweep.py, docs/defaults.md).
//
//   host_lr_problems --problem regression|drift --regime scratch|finetune --seed N
//                    [--mode dense|zenflow] [--rule none|sqrt|linear|capped|snr]
//                    [--interval N|auto] [--max-interval N] [--warm-up N] [--overlap true|false]
//                    [--moments-per-step true|false] [--select-interval N|auto]
//                    [--mass-drop F] [--min-select-interval N] [--steps N]
//                    [--host-moments fp32|bf16|int8]
//
// Prints one JSON object: the held-out loss every 20 steps, its start, end and maximum.
//
// Problems (y = x W* + b* + noise, W* stored [in, out]: channel j = input feature j):
//   regression  the noisy isotropic regression: every feature N(0, 1), observation noise
//               1.0, constant lr. The gradient of every channel is mostly noise late in training.
//   drift       skewed features (6 of 64 channels 10x stronger), and the strong set moves by one
//               channel every 25 steps: the important channels drift; lr decays linearly.
// Regimes: scratch starts from W = 0; finetune starts from the solution of a related task
// (W*_A) and trains on W*_B = W*_A + 0.5 N(0, 1) (same b*).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

namespace {

struct options {
  std::string problem = "regression", regime = "scratch", mode = "zenflow", rule = "linear";
  std::uint64_t seed = 1;
  std::int64_t interval = 0, max_interval = 16, warm_up = 0, steps = 400;
  std::int64_t select_interval = 0;     // 0: the library's auto
  double mass_drop = 0.0;               // config::select_on_mass_drop (0: off)
  std::int64_t min_select_interval = 0; // 0: the library's default
  bool overlap = true;
  bool moments_per_step = true;      // config::host_moments_per_step
  std::string host_moments = "fp32"; // config::host_moments
};

constexpr std::int64_t in = 64, out = 16, batch = 32, eval_rows = 2048, eval_every = 20;

struct problem {
  const options& o;
  std::vector<float> w_true, b_true, w_start;
  std::mt19937_64 gen;
  float noise;

  explicit problem(const options& opt)
      : o(opt), gen(opt.seed), noise(opt.problem == "regression" ? 1.0f : 0.3f) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    w_true.resize(static_cast<std::size_t>(in * out));
    b_true.resize(static_cast<std::size_t>(out));
    for (auto& v : w_true) {
      v = nd(gen);
    }
    for (auto& v : b_true) {
      v = nd(gen);
    }
    w_start.assign(w_true.size(), 0.0f);
    if (o.regime == "finetune") { // pretrained on task A = the current W*, fine-tuned on B
      w_start = w_true;
      for (auto& v : w_true) {
        v += 0.5f * nd(gen);
      }
    }
  }
  [[nodiscard]] float feature_scale(std::int64_t j, std::int64_t t) const {
    if (o.problem == "regression") {
      return 1.0f;
    }
    return (j + t / 25) % 10 == 3 ? 1.0f : 0.1f;
  }
  /// `n` samples at step `t` from `g`: x [n, in], y [n, out].
  void sample(std::int64_t n,
              std::int64_t t,
              std::mt19937_64& g,
              std::vector<float>& x,
              std::vector<float>& y) const {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    x.resize(static_cast<std::size_t>(n * in));
    y.resize(static_cast<std::size_t>(n * out));
    for (std::int64_t s = 0; s < n; ++s) {
      for (std::int64_t j = 0; j < in; ++j) {
        x[static_cast<std::size_t>(s * in + j)] = feature_scale(j, t) * nd(g);
      }
      for (std::int64_t k = 0; k < out; ++k) {
        double acc = b_true[static_cast<std::size_t>(k)] + noise * nd(g);
        for (std::int64_t j = 0; j < in; ++j) {
          acc += static_cast<double>(x[static_cast<std::size_t>(s * in + j)]) *
                 w_true[static_cast<std::size_t>(j * out + k)];
        }
        y[static_cast<std::size_t>(s * out + k)] = static_cast<float>(acc);
      }
    }
  }
  /// Mean squared error / 2 of (w, b) on (x, y); with gw/gb, the gradients too.
  static double loss(const std::vector<float>& w,
                     const std::vector<float>& b,
                     const std::vector<float>& x,
                     const std::vector<float>& y,
                     std::vector<float>* gw,
                     std::vector<float>* gb) {
    const std::int64_t n = static_cast<std::int64_t>(y.size()) / out;
    if (gw != nullptr) {
      std::fill(gw->begin(), gw->end(), 0.0f);
      std::fill(gb->begin(), gb->end(), 0.0f);
    }
    double total = 0.0;
    std::vector<double> r(static_cast<std::size_t>(out));
    for (std::int64_t s = 0; s < n; ++s) {
      for (std::int64_t k = 0; k < out; ++k) {
        double p = b[static_cast<std::size_t>(k)];
        for (std::int64_t j = 0; j < in; ++j) {
          p += static_cast<double>(x[static_cast<std::size_t>(s * in + j)]) *
               w[static_cast<std::size_t>(j * out + k)];
        }
        r[static_cast<std::size_t>(k)] = p - y[static_cast<std::size_t>(s * out + k)];
        total += 0.5 * r[static_cast<std::size_t>(k)] * r[static_cast<std::size_t>(k)];
      }
      if (gw != nullptr) {
        for (std::int64_t j = 0; j < in; ++j) {
          const double xs = x[static_cast<std::size_t>(s * in + j)] / static_cast<double>(n);
          for (std::int64_t k = 0; k < out; ++k) {
            (*gw)[static_cast<std::size_t>(j * out + k)] +=
                static_cast<float>(xs * r[static_cast<std::size_t>(k)]);
          }
        }
        for (std::int64_t k = 0; k < out; ++k) {
          (*gb)[static_cast<std::size_t>(k)] +=
              static_cast<float>(r[static_cast<std::size_t>(k)] / static_cast<double>(n));
        }
      }
    }
    return total / static_cast<double>(n);
  }
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--problem" && (v == "regression" || v == "drift")) {
      o.problem = v;
    } else if (f == "--regime" && (v == "scratch" || v == "finetune")) {
      o.regime = v;
    } else if (f == "--mode" && (v == "dense" || v == "zenflow")) {
      o.mode = v;
    } else if (f == "--rule") {
      o.rule = v;
    } else if (f == "--seed") {
      o.seed = std::stoull(v);
    } else if (f == "--interval") {
      o.interval = v == "auto" ? 0 : std::stoll(v);
    } else if (f == "--max-interval") {
      o.max_interval = std::stoll(v);
    } else if (f == "--select-interval") {
      o.select_interval = v == "auto" ? 0 : std::stoll(v);
    } else if (f == "--mass-drop") {
      o.mass_drop = std::stod(v);
    } else if (f == "--min-select-interval") {
      o.min_select_interval = std::stoll(v);
    } else if (f == "--warm-up") {
      o.warm_up = std::stoll(v);
    } else if (f == "--overlap" && (v == "true" || v == "false")) {
      o.overlap = v == "true";
    } else if (f == "--moments-per-step" && (v == "true" || v == "false")) {
      o.moments_per_step = v == "true";
    } else if (f == "--host-moments" && (v == "fp32" || v == "bf16" || v == "int8")) {
      o.host_moments = v;
    } else if (f == "--steps") {
      o.steps = std::stoll(v);
    } else {
      throw zenflow::invalid_argument("bad option " + f + " " + v);
    }
  }
  if ((argc - 1) % 2 != 0) {
    throw zenflow::invalid_argument("options come in pairs: --flag value");
  }
  return o;
}

nlohmann::json run(const options& o) {
  problem p(o);
  zenflow::config cfg;
  cfg.mode = o.mode == "dense" ? zenflow::optimizer_mode::gpu_adamw : zenflow::optimizer_mode::zenflow;
  const bool constant_lr = o.problem == "regression";
  cfg.adam.lr = constant_lr ? 1e-2f : 3e-2f;
  cfg.host_threads = 1;
  cfg.update_interval = o.interval;
  cfg.max_update_interval = o.max_interval;
  cfg.min_update_interval = std::min<std::int64_t>(cfg.min_update_interval, o.max_interval);
  cfg.full_warm_up_rounds = o.warm_up;
  cfg.overlap_step = o.overlap;
  cfg.host_moments_per_step = o.moments_per_step;
  cfg.host_moments = o.host_moments == "int8"   ? zenflow::moment_precision::int8
                     : o.host_moments == "bf16" ? zenflow::moment_precision::bf16
                                                : zenflow::moment_precision::fp32;
  if (o.select_interval > 0) {
    cfg.select = zenflow::select_strategy::step;
    cfg.select_interval = o.select_interval;
  }
  cfg.select_on_mass_drop = o.mass_drop;
  if (o.min_select_interval > 0) {
    cfg.min_select_interval = o.min_select_interval;
  }
  nlohmann::json rule = o.rule;
  nlohmann::json ds = cfg.to_deepspeed_json();
  ds["zenflow_ext"]["host_lr_scale"] = rule; // the config's own reader names a bad rule
  cfg = zenflow::config::from_deepspeed_json(ds);
  cfg.mode = o.mode == "dense" ? zenflow::optimizer_mode::gpu_adamw : zenflow::optimizer_mode::zenflow;

  std::vector<float> w = p.w_start, b(static_cast<std::size_t>(out), 0.0f);
  if (o.regime == "finetune") {
    b = p.b_true;
  }
  std::vector<float> gw(w.size()), gb(b.size()), x, y, ex, ey;
  auto eval = [&](std::int64_t t) { // fixed held-out draws per evaluation point
    std::mt19937_64 g(o.seed * 7919 + 1 + static_cast<std::uint64_t>(t));
    p.sample(eval_rows, t, g, ex, ey);
    return problem::loss(w, b, ex, ey, nullptr, nullptr);
  };
  zenflow::engine<zenflow::host_backend> zf(cfg);
  zf.add_matrix(w.data(), gw.data(), in, out);
  zf.add_vector(b.data(), gb.data(), out);
  zf.initialize();
  nlohmann::json curve = nlohmann::json::array();
  const double start = eval(0);
  double worst = start;
  curve.push_back({0, start});
  std::int64_t window_sum = 0, windows = 0;
  nlohmann::json selections = nlohmann::json::array(); // [step, "schedule" | "mass_drop"]
  for (std::int64_t t = 0; t < o.steps; ++t) {
    p.sample(batch, t, p.gen, x, y);
    (void)problem::loss(w, b, x, y, &gw, &gb);
    const float lr = constant_lr ? cfg.adam.lr
                                 : cfg.adam.lr * (1.0f - static_cast<float>(t) / static_cast<float>(o.steps));
    const zenflow::step_report rep = zf.step(lr);
    if (rep.selection) {
      selections.push_back(
          {t, rep.selection_reason == zenflow::selection_cause::mass_drop ? "mass_drop" : "schedule"});
    }
    if (rep.window_closed) {
      window_sum += rep.window_length;
      ++windows;
    }
    if ((t + 1) % eval_every == 0) {
      const double l = eval(t + 1);
      worst = std::max(worst, l);
      curve.push_back({t + 1, l});
    }
  }
  zf.flush();
  const double final_loss = eval(o.steps);
  nlohmann::json j;
  j["problem"] = o.problem;
  j["regime"] = o.regime;
  j["mode"] = o.mode;
  j["rule"] = o.rule;
  j["seed"] = o.seed;
  j["interval"] = o.interval;
  j["max_interval"] = o.max_interval;
  j["select_interval"] = o.select_interval;
  j["mass_drop"] = o.mass_drop;
  j["min_select_interval"] = cfg.min_select_interval;
  j["selections"] = zf.stats().selections;
  j["mass_drop_selections"] = zf.stats().mass_drop_selections;
  j["selection_steps"] = selections;
  j["stall_s"] = zf.stats().stall_s;
  j["warm_up"] = o.warm_up;
  j["overlap"] = o.overlap;
  j["moments_per_step"] = o.moments_per_step;
  j["host_moments"] = o.host_moments;
  j["steps"] = o.steps;
  j["loss_start"] = start;
  j["loss_final"] = final_loss;
  j["loss_max"] = std::max(worst, final_loss);
  j["mean_window"] = windows > 0 ? static_cast<double>(window_sum) / static_cast<double>(windows) : 0.0;
  j["curve"] = curve;
  return j;
}

} // namespace

int main(int argc, char** argv) {
  try {
    std::printf("%s\n", run(parse(argc, argv)).dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_lr_problems: %s\n", e.what());
    return 2;
  }
}
