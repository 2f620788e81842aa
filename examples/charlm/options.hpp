/// @file
/// The trainer's command line: model size, data, schedule, output, and every zenflow knob (as a
/// flag, or from a DeepSpeed JSON file through zenflow::config::from_deepspeed_json_file; flags
/// given on the command line override the file, and `zf_sources` records where each value came
/// from for the resolved-config printout, zenflow::config::describe).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/core/log.hpp>
#include <zenflow/engine/config.hpp>

#include "model.hpp"

namespace charlm {

struct options {
  // what runs
  std::string backend = "auto"; ///< host | cuda | auto (cuda when a device is usable)
  int zero =
      2; ///< under mpirun: 2 (every rank holds the whole model) | 3 (each rank its shard; host backend)
  std::string size = "cpu"; ///< preset the model flags start from: tiny | cpu | gpu | h200
  // data
  std::string data_path;                 ///< a text file; empty = the generated corpus
  std::int64_t corpus_bytes = 4'000'000; ///< size of the generated corpus
  std::uint64_t seed = 1;                ///< model init, batch order and corpus
  std::string corpus_style = "prose";    ///< generated corpus: prose | shifted (the fine-tuning text)
  std::string init_weights; ///< start from this weights file (fine-tuning) instead of a fresh init
  std::string save_weights; ///< write the trained weights here (weights.hpp)
  std::string vocab_chars;  ///< set by make_dataset: the vocabulary in use
  // checkpoint sets (checkpoint.hpp), host backend
  std::string checkpoint_dir;        ///< save checkpoint sets here ("": none)
  std::int64_t checkpoint_every = 0; ///< a set every N steps (0: only after the last step)
  bool resume = false;               ///< continue from the newest complete set in checkpoint_dir
  std::string losses_out;            ///< write every step's training loss here
  std::int64_t stop_after = 0;       ///< tests only, no flag: end the run once the set of this step is saved
  // model and schedule
  model_shape shape{};
  std::int32_t batch = 64;
  std::int64_t steps = 300;
  float lr = 2e-3f;
  std::int64_t warmup_steps = 20; ///< linear lr warm-up, then cosine decay to min_lr_ratio * lr
  float min_lr_ratio = 0.1f;
  // output
  std::int64_t log_every = 50;
  std::int32_t eval_batches = 8;
  std::string json_out;
  bool quiet = false;
  std::int64_t progress_every = 0; ///< a progress line with elapsed time and ETA on stderr every N steps
  zenflow::log_level log_level =
      zenflow::log_level::warning; ///< zenflow's messages shown on stderr from here up
  unsigned threads = 0; ///< host backend: threads of the model's GEMMs (0: what zenflow leaves free)
  // zenflow
  std::string deepspeed_config;
  bool strict_config = false; ///< --strict-config: what the reader would warn about is an error
  bool print_config = false;  ///< --print-config: print the resolved configuration and exit
  zenflow::config zf{};
  zenflow::config_sources zf_sources; ///< where each zenflow setting came from (file key or flag)
};

/// Model sizes. tiny: CI; cpu: the demo on a 2-core machine; gpu: a quick GPU check;
/// h200: ~1.6 B parameters, ~19 GB of fp32 master + Adam moments (offload matters).
inline void apply_size_preset(options& o, std::string_view size) {
  model_shape& s = o.shape;
  if (size == "tiny") {
    s.context = 4, s.embed = 8, s.hidden = 64, s.layers = 2, o.batch = 32;
  } else if (size == "cpu") {
    s.context = 8, s.embed = 16, s.hidden = 512, s.layers = 4, o.batch = 64;
  } else if (size == "gpu") {
    s.context = 16, s.embed = 64, s.hidden = 2048, s.layers = 8, o.batch = 1024;
  } else if (size == "h200") {
    s.context = 16, s.embed = 64, s.hidden = 8192, s.layers = 24, o.batch = 8192;
  } else {
    throw zenflow::invalid_argument("--size: expected tiny, cpu, gpu or h200, got '" + std::string(size) +
                                    "'");
  }
  o.size = size;
}

inline const char* usage_text() {
  return R"(charlm_train: a character-level language model trained with zenflow.

usage: charlm_train [options]

  --optimizer MODE          gpu-adamw | offload-sync | zenflow (default: zenflow, or the
                            DeepSpeed file's choice)
  --backend B               host | cuda | auto (default auto: cuda when a device is usable)
  --zero N                  under mpirun: 2 (default: every rank holds the whole model, the host
                            state split) | 3 (each rank trains its shard of every matrix; with
                            --backend cuda over NCCL)
  --size S                  model preset: tiny | cpu (default) | gpu | h200; the model flags below
                            override it
  --context N --embed N --hidden N --layers N     model shape
  --batch N --steps N --lr X --warmup-steps N --min-lr-ratio X --seed N
  --data FILE               train on any text file (default: a generated English-like corpus)
  --corpus-bytes N          size of the generated corpus (default 4000000)
  --corpus-style S          generated corpus: prose (default) | shifted (another style of the same
                            characters: rare words frequent, more questions; for fine-tuning)
  --save-weights FILE       after training, write the model's weights (and vocabulary) to FILE
  --init-weights FILE       start from FILE's weights instead of a fresh init (fine-tuning): the
                            model shape and vocabulary are the file's; host backend
  --checkpoint-dir DIR      save checkpoint sets in DIR (host backend): the model's weights, the
                            data position, the loss history and the engine, one consistent set
                            (a new set is complete before the old one goes); after the last step
                            always, and every --checkpoint-every steps. DIR must hold no set
                            unless --resume is given
  --checkpoint-every N      a set every N steps (N >= 1; needs --checkpoint-dir)
  --resume                  continue from DIR's newest complete set, bit-identically to a run
                            that never stopped (from step 0 when DIR holds none); the other
                            options must be the ones the set was saved with
  --losses-out FILE         after training, write every step's loss to FILE ("step bits value"
                            per line, bits the float's hex pattern; a resumed run's whole history)
  --log-every N             progress line every N steps (default 50)
  --eval-batches N          held-out batches for the eval loss (default 8)
  --json-out FILE           write the progress and the summary as JSON
  --threads N               host backend: threads of the model (default: the cores zenflow
                            leaves to the training thread)
  --quiet                   no progress lines
  --progress-every N        also with --quiet: "progress" lines on stderr every N steps with the
                            elapsed time and an estimate of the time left (default 0: none)
  --log-level L             zenflow's messages shown on stderr: debug | info | warning (default;
                            hides expected notes such as the pageable-memory fallback without a
                            driver) | error | off

  zenflow (DeepSpeed zero_optimization.zenflow names; a flag overrides the file):
  --deepspeed-config FILE   read it as DeepSpeed does (zero_optimization.zenflow, optimizer,
                            gradient_clipping, fp16/bf16; DeepSpeed's defaults for what it leaves
                            out, overlap_step false included) plus zenflow's own zenflow_ext block
  --strict-config           reject what the reader would only warn about (an unknown top-level or
                            zero_optimization key such as a misspelt block name)
  --print-config            print the resolved configuration (mode, every setting and where it
                            came from) and exit; without --quiet it is printed before training
  --topk-ratio X  --select-strategy step|epoch|auto  --select-interval N|auto (N alone: "step")
  --update-interval N|auto  --full-warm-up-rounds N  --overlap-step true|false
  --auto-ratio X  --pt-reserved-cores-perc X  --host-lr-scale linear|sqrt|none|capped|snr
  --max-update-interval N  --min-update-interval N  --steps-per-epoch N  --importance sq_l2|l1
  --host-moments-per-step true|false  --host-moments fp32|bf16|int8  --host-accumulators 1|2
  --select-on-mass-drop X  --min-select-interval N
  --pin-host-threads true|false  (the engine's host threads on the cores --pt-reserved-cores-perc
                            leaves them; the model's threads and the training thread on the rest)
  --beta1 X --beta2 X --eps X --weight-decay X --adam-mode adamw|adam
  --gradient-clipping X  --loss-scale X
  --upload whole_window|chunk_ring  --ring-slot-bytes N  --ring-slots N  --host-threads N
)";
}

namespace detail {

inline zenflow::log_level parse_log_level(const std::string& flag, const std::string& v) {
  for (const zenflow::log_level l :
       {zenflow::log_level::debug, zenflow::log_level::info, zenflow::log_level::warning,
        zenflow::log_level::error, zenflow::log_level::off}) {
    if (v == zenflow::to_string(l)) {
      return l;
    }
  }
  throw zenflow::invalid_argument(flag + ": expected debug, info, warning, error or off, got '" + v + "'");
}

inline std::int64_t parse_int(const std::string& flag, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) {
      return x;
    }
  } catch (const std::exception&) {
  }
  throw zenflow::invalid_argument(flag + ": expected an integer, got '" + v + "'");
}

inline double parse_real(const std::string& flag, const std::string& v) {
  try {
    std::size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size()) {
      return x;
    }
  } catch (const std::exception&) {
  }
  throw zenflow::invalid_argument(flag + ": expected a number, got '" + v + "'");
}

inline bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") {
    return true;
  }
  if (v == "false" || v == "0" || v == "off") {
    return false;
  }
  throw zenflow::invalid_argument(flag + ": expected true or false, got '" + v + "'");
}

template <class E>
E parse_enum(const std::string& flag,
             const std::string& v,
             std::initializer_list<std::pair<std::string_view, E>> names) {
  std::string choices;
  for (const auto& [n, e] : names) {
    if (v == n) {
      return e;
    }
    choices += choices.empty() ? "" : " | ";
    choices += n;
  }
  throw zenflow::invalid_argument(flag + ": expected " + choices + ", got '" + v + "'");
}

inline std::int64_t parse_interval(const std::string& flag, const std::string& v) {
  return v == "auto" ? 0 : parse_int(flag, v);
}

using handler = std::function<void(const std::string& flag, const std::string& value)>;

/// The setting (as zenflow::config::describe names it) that a flag sets, or "" for the
/// trainer's own flags.
inline std::string setting_of_flag(const std::string& flag) {
  static const std::vector<std::pair<std::string_view, std::string_view>> special = {
      {"--optimizer", "mode"},
      {"--lr", "optimizer.params.lr"},
      {"--beta1", "optimizer.params.betas"},
      {"--beta2", "optimizer.params.betas"},
      {"--eps", "optimizer.params.eps"},
      {"--weight-decay", "optimizer.params.weight_decay"},
      {"--adam-mode", "optimizer.type"},
      {"--loss-scale", "fp16.loss_scale"}};
  for (const auto& [f, setting] : special) {
    if (flag == f) {
      return std::string(setting);
    }
  }
  static const std::vector<std::string_view> same_name = {"topk_ratio",          "select_strategy",
                                                          "select_interval",     "update_interval",
                                                          "full_warm_up_rounds", "overlap_step",
                                                          "auto_ratio",          "pt_reserved_cores_perc",
                                                          "host_lr_scale",       "max_update_interval",
                                                          "min_update_interval", "steps_per_epoch",
                                                          "importance",          "host_moments_per_step",
                                                          "gradient_clipping",   "upload",
                                                          "ring_slot_bytes",     "ring_slots",
                                                          "host_threads",        "host_moments",
                                                          "select_on_mass_drop", "min_select_interval",
                                                          "pin_host_threads",    "host_accumulators"};
  std::string name = flag.substr(2);
  std::replace(name.begin(), name.end(), '-', '_');
  return std::find(same_name.begin(), same_name.end(), name) != same_name.end() ? name : std::string();
}

} // namespace detail

/// Parses the command line into `o` (which holds the defaults). Throws zenflow::invalid_argument
/// naming the flag (or the DeepSpeed key) on a bad one. Returns false when --help was given.
inline bool parse_args(const std::vector<std::string>& args, options& o) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      return false;
    }
    if (a.rfind("--", 0) != 0) {
      throw zenflow::invalid_argument("unexpected argument '" + a + "' (see --help)");
    }
    std::string value;
    const auto eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if ((a == "--quiet" || a == "--strict-config" || a == "--print-config" || a == "--resume") &&
               (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = "true";
    } else {
      if (i + 1 >= args.size()) {
        throw zenflow::invalid_argument(a + ": missing value");
      }
      value = args[++i];
    }
    flags.emplace_back(a, value);
  }
  // The file and the size preset first, so that every other flag overrides them.
  bool mode_given = false;
  bool strategy_given = false;
  bool lr_given = false;
  bool every_given = false;
  for (const auto& [f, v] : flags) {
    if (f == "--strict-config") {
      o.strict_config = detail::parse_bool(f, v);
    }
  }
  for (const auto& [f, v] : flags) {
    if (f == "--deepspeed-config") {
      o.deepspeed_config = v;
      o.zf = zenflow::config::from_deepspeed_json_file(v, {.strict = o.strict_config}, &o.zf_sources);
      o.lr = o.zf.adam.lr; // the file's lr is the schedule's peak unless --lr says otherwise
    } else if (f == "--size") {
      apply_size_preset(o, v);
    }
  }
  auto& z = o.zf;
  using detail::parse_int;
  using detail::parse_real;
  auto i32 = [](const std::string& f, const std::string& v) {
    return static_cast<std::int32_t>(parse_int(f, v));
  };
  auto f32 = [](const std::string& f, const std::string& v) { return static_cast<float>(parse_real(f, v)); };
  using S = const std::string&;
  const std::vector<std::pair<std::string_view, detail::handler>> table = {
      {"--optimizer",
       [&](S f, S v) {
         z.mode = detail::parse_enum<zenflow::optimizer_mode>(
             f, v,
             {{"gpu-adamw", zenflow::optimizer_mode::gpu_adamw},
              {"offload-sync", zenflow::optimizer_mode::offload_sync},
              {"zenflow", zenflow::optimizer_mode::zenflow}});
         mode_given = true;
       }},
      {"--backend",
       [&](S f, S v) {
         if (v != "host" && v != "cuda" && v != "auto") {
           throw zenflow::invalid_argument(f + ": expected host | cuda | auto, got '" + v + "'");
         }
         o.backend = v;
       }},
      {"--zero",
       [&](S f, S v) {
         if (v != "2" && v != "3") {
           throw zenflow::invalid_argument(f + ": expected 2 | 3, got '" + v + "'");
         }
         o.zero = v == "3" ? 3 : 2;
       }},
      {"--size", [](S, S) {}},
      {"--deepspeed-config", [](S, S) {}},
      {"--strict-config", [](S, S) {}},
      {"--print-config", [&](S f, S v) { o.print_config = detail::parse_bool(f, v); }},
      {"--context", [&](S f, S v) { o.shape.context = i32(f, v); }},
      {"--embed", [&](S f, S v) { o.shape.embed = i32(f, v); }},
      {"--hidden", [&](S f, S v) { o.shape.hidden = i32(f, v); }},
      {"--layers", [&](S f, S v) { o.shape.layers = i32(f, v); }},
      {"--batch", [&](S f, S v) { o.batch = i32(f, v); }},
      {"--steps", [&](S f, S v) { o.steps = parse_int(f, v); }},
      {"--lr",
       [&](S f, S v) {
         o.lr = f32(f, v);
         z.adam.lr = o.lr;
         lr_given = true;
       }},
      {"--warmup-steps", [&](S f, S v) { o.warmup_steps = parse_int(f, v); }},
      {"--min-lr-ratio", [&](S f, S v) { o.min_lr_ratio = f32(f, v); }},
      {"--seed", [&](S f, S v) { o.seed = static_cast<std::uint64_t>(parse_int(f, v)); }},
      {"--data", [&](S, S v) { o.data_path = v; }},
      {"--corpus-bytes", [&](S f, S v) { o.corpus_bytes = parse_int(f, v); }},
      {"--corpus-style",
       [&](S f, S v) {
         if (v != "prose" && v != "shifted") {
           throw zenflow::invalid_argument(f + ": expected prose | shifted, got '" + v + "'");
         }
         o.corpus_style = v;
       }},
      {"--save-weights", [&](S, S v) { o.save_weights = v; }},
      {"--init-weights", [&](S, S v) { o.init_weights = v; }},
      {"--checkpoint-dir",
       [&](S f, S v) {
         if (v.empty()) {
           throw zenflow::invalid_argument(f + ": expected a directory, got ''");
         }
         o.checkpoint_dir = v;
       }},
      {"--checkpoint-every",
       [&](S f, S v) {
         o.checkpoint_every = parse_int(f, v);
         every_given = true;
       }},
      {"--resume", [&](S f, S v) { o.resume = detail::parse_bool(f, v); }},
      {"--losses-out", [&](S, S v) { o.losses_out = v; }},
      {"--log-every", [&](S f, S v) { o.log_every = parse_int(f, v); }},
      {"--eval-batches", [&](S f, S v) { o.eval_batches = i32(f, v); }},
      {"--json-out", [&](S, S v) { o.json_out = v; }},
      {"--threads", [&](S f, S v) { o.threads = static_cast<unsigned>(parse_int(f, v)); }},
      {"--quiet", [&](S f, S v) { o.quiet = detail::parse_bool(f, v); }},
      {"--progress-every", [&](S f, S v) { o.progress_every = parse_int(f, v); }},
      {"--log-level", [&](S f, S v) { o.log_level = detail::parse_log_level(f, v); }},
      // zero_optimization.zenflow
      {"--topk-ratio", [&](S f, S v) { z.topk_ratio = parse_real(f, v); }},
      {"--select-strategy",
       [&](S f, S v) {
         z.select =
             detail::parse_enum<zenflow::select_strategy>(f, v,
                                                          {{"step", zenflow::select_strategy::step},
                                                           {"epoch", zenflow::select_strategy::epoch},
                                                           {"auto", zenflow::select_strategy::automatic}});
         strategy_given = true;
       }},
      {"--select-interval", [&](S f, S v) { z.select_interval = detail::parse_interval(f, v); }},
      {"--update-interval", [&](S f, S v) { z.update_interval = detail::parse_interval(f, v); }},
      {"--full-warm-up-rounds", [&](S f, S v) { z.full_warm_up_rounds = parse_int(f, v); }},
      {"--overlap-step", [&](S f, S v) { z.overlap_step = detail::parse_bool(f, v); }},
      {"--auto-ratio", [&](S f, S v) { z.auto_ratio = parse_real(f, v); }},
      {"--pt-reserved-cores-perc", [&](S f, S v) { z.pt_reserved_cores_perc = parse_real(f, v); }},
      {"--host-lr-scale",
       [&](S f, S v) {
         z.host_lr_scale =
             detail::parse_enum<zenflow::host_lr_scaling>(f, v,
                                                          {{"linear", zenflow::host_lr_scaling::linear},
                                                           {"sqrt", zenflow::host_lr_scaling::sqrt},
                                                           {"none", zenflow::host_lr_scaling::none},
                                                           {"capped", zenflow::host_lr_scaling::capped},
                                                           {"snr", zenflow::host_lr_scaling::snr}});
       }},
      {"--max-update-interval", [&](S f, S v) { z.max_update_interval = parse_int(f, v); }},
      {"--min-update-interval", [&](S f, S v) { z.min_update_interval = parse_int(f, v); }},
      {"--select-on-mass-drop", [&](S f, S v) { z.select_on_mass_drop = parse_real(f, v); }},
      {"--min-select-interval", [&](S f, S v) { z.min_select_interval = parse_int(f, v); }},
      {"--steps-per-epoch", [&](S f, S v) { z.steps_per_epoch = parse_int(f, v); }},
      {"--host-moments-per-step", [&](S f, S v) { z.host_moments_per_step = detail::parse_bool(f, v); }},
      {"--host-accumulators",
       [&](S f, S v) { z.host_accumulators = static_cast<std::int32_t>(parse_int(f, v)); }},
      {"--host-moments",
       [&](S f, S v) {
         z.host_moments =
             detail::parse_enum<zenflow::moment_precision>(f, v,
                                                           {{"fp32", zenflow::moment_precision::fp32},
                                                            {"bf16", zenflow::moment_precision::bf16},
                                                            {"int8", zenflow::moment_precision::int8}});
       }},
      {"--importance",
       [&](S f, S v) {
         z.importance = detail::parse_enum<zenflow::channel_norm>(
             f, v, {{"sq_l2", zenflow::channel_norm::sq_l2}, {"l1", zenflow::channel_norm::l1}});
       }},
      // optimizer block, gradient_clipping, loss scale
      {"--beta1", [&](S f, S v) { z.adam.beta1 = f32(f, v); }},
      {"--beta2", [&](S f, S v) { z.adam.beta2 = f32(f, v); }},
      {"--eps", [&](S f, S v) { z.adam.eps = f32(f, v); }},
      {"--weight-decay", [&](S f, S v) { z.adam.weight_decay = f32(f, v); }},
      {"--adam-mode",
       [&](S f, S v) {
         z.adam.decoupled = detail::parse_enum<bool>(f, v, {{"adamw", true}, {"adam", false}});
       }},
      {"--gradient-clipping", [&](S f, S v) { z.gradient_clipping = f32(f, v); }},
      {"--loss-scale", [&](S f, S v) { z.loss_scale = f32(f, v); }},
      // transport
      {"--upload",
       [&](S f, S v) {
         z.upload = detail::parse_enum<zenflow::upload_policy>(
             f, v,
             {{"whole_window", zenflow::upload_policy::whole_window},
              {"chunk_ring", zenflow::upload_policy::chunk_ring}});
       }},
      {"--ring-slot-bytes", [&](S f, S v) { z.ring_slot_bytes = parse_int(f, v); }},
      {"--ring-slots", [&](S f, S v) { z.ring_slots = i32(f, v); }},
      {"--host-threads", [&](S f, S v) { z.host_threads = static_cast<unsigned>(parse_int(f, v)); }},
      {"--pin-host-threads", [&](S f, S v) { z.pin_host_threads = detail::parse_bool(f, v); }},
  };
  for (const auto& [f, v] : flags) {
    bool known = false;
    for (const auto& [name, handle] : table) {
      if (f == name) {
        handle(f, v);
        known = true;
        if (const std::string setting = detail::setting_of_flag(f); !setting.empty()) {
          o.zf_sources.set(setting, f);
        }
        break;
      }
    }
    if (!known) {
      throw zenflow::invalid_argument("unknown option '" + f + "' (see --help)");
    }
  }
  if (!mode_given && o.deepspeed_config.empty()) {
    z.mode = zenflow::optimizer_mode::zenflow;
  }
  z.adam.lr = o.lr;
  if (!lr_given && o.deepspeed_config.empty()) {
    o.zf_sources.set("optimizer.params.lr", "charlm_train's default --lr (the schedule's peak)");
  }
  // A fixed --select-interval alone means "every N steps" (DeepSpeed needs select_strategy "step").
  if (!strategy_given && z.select_interval > 0 && z.select == zenflow::select_strategy::automatic) {
    z.select = zenflow::select_strategy::step;
    o.zf_sources.set("select_strategy", "--select-interval (a number alone means \"step\")");
  }
  auto need = [](bool ok, const char* msg) {
    if (!ok) {
      throw zenflow::invalid_argument(msg);
    }
  };
  need(o.batch >= 1, "--batch: must be >= 1");
  need(o.steps >= 1, "--steps: must be >= 1");
  need(o.lr > 0.0f && std::isfinite(o.lr), "--lr: must be > 0");
  need(o.warmup_steps >= 0, "--warmup-steps: must be >= 0");
  need(o.min_lr_ratio >= 0.0f && o.min_lr_ratio <= 1.0f, "--min-lr-ratio: must be in [0, 1]");
  need(o.log_every >= 1, "--log-every: must be >= 1");
  need(o.progress_every >= 0, "--progress-every: must be >= 0");
  need(o.eval_batches >= 1, "--eval-batches: must be >= 1");
  need(o.corpus_bytes >= 1000, "--corpus-bytes: must be >= 1000");
  need(o.shape.context >= 1, "--context: must be >= 1");
  need(o.shape.embed >= 1, "--embed: must be >= 1");
  need(o.shape.hidden >= 1, "--hidden: must be >= 1");
  need(o.shape.layers >= 1, "--layers: must be >= 1");
  if (every_given && o.checkpoint_every < 1) {
    throw zenflow::invalid_argument(
        "--checkpoint-every: must be >= 1 (steps between two checkpoint sets), got " +
        std::to_string(o.checkpoint_every));
  }
  need(!every_given || !o.checkpoint_dir.empty(), "--checkpoint-every: needs --checkpoint-dir DIR");
  need(!o.resume || !o.checkpoint_dir.empty(),
       "--resume: needs --checkpoint-dir DIR (the directory of the checkpoint sets to resume from)");
  z.validate();
  return true;
}

/// The learning rate of step t: linear warm-up, then cosine decay to min_lr_ratio * lr.
[[nodiscard]] inline float learning_rate(const options& o, std::int64_t t) {
  if (t < o.warmup_steps) {
    return o.lr * static_cast<float>(t + 1) / static_cast<float>(o.warmup_steps);
  }
  const double span = static_cast<double>(std::max<std::int64_t>(1, o.steps - o.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(t - o.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return static_cast<float>(o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine));
}

[[nodiscard]] inline std::string_view mode_flag_name(zenflow::optimizer_mode m) {
  switch (m) {
  case zenflow::optimizer_mode::gpu_adamw:
    return "gpu-adamw";
  case zenflow::optimizer_mode::offload_sync:
    return "offload-sync";
  default:
    return "zenflow";
  }
}

} // namespace charlm
