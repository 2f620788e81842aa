/// @file
/// The trainer's checkpoint sets (--checkpoint-dir, --checkpoint-every, --resume): everything a
/// killed run needs to go on bit-identically, saved as one consistent set, so that the trainer
/// survives being killed at any moment, in the middle of a save included.
///
/// A set is a directory `DIR/set-<step>` (the step in ten digits) holding
///
///     engine.zfck    the optimizer (zenflow::engine::save)
///     trainer.zfck   a zenflow checkpoint file (checked sections): the run's identity (every
///                    option that changes the run, as text), the trainer state (step, the batch
///                    sampler's generator, the loss sums and rows so far, every step's loss) and
///                    the model's bf16 weights with its shape and vocabulary
///
/// Saving: both files go into `DIR/.partial-set-<step>` (each written to a temporary file,
/// synced and renamed by zenflow's checkpoint writer), the directory is renamed to
/// `DIR/set-<step>` and DIR is synced, then `DIR/latest` (the set's name) is replaced by a rename,
/// and only then are the older sets removed. A set named `set-*` is complete; at any moment DIR
/// holds a complete set that `latest` names, or (killed between the rename and `latest`) a newer
/// complete one beside it. Resuming takes the set `latest` names, else the newest `set-*` whose
/// two files pass their checks; a `.partial-*` directory is never read, and the next save
/// removes it.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/checkpoint_file.hpp>

#include "model.hpp"
#include "options.hpp"
#include "trainer.hpp"

namespace charlm {

namespace ckpt_detail {

namespace fs = std::filesystem;

inline constexpr std::int64_t state_layout = 1; ///< trainer.zfck's layout version

/// The fixed part of the trainer state (8-byte fields: no padding).
struct state_scalars {
  std::int64_t layout = state_layout;
  std::int64_t step = 0;
  std::uint64_t data_rng = 0;
  double eval_loss_initial = 0, train_loss_final = 0;
  double iv_loss = 0, iv_s = 0, iv_stall = 0, iv_bytes = 0;
  std::int64_t iv_n = 0, window_sum = 0, window_steps = 0;
  double timed_s = 0, timed_stall_s = 0, timed_bytes = 0;
  std::int64_t losses = 0, progress = 0, weights = 0;
  std::int32_t vocab = 0, context = 0, embed = 0, hidden = 0, layers = 0, pad = 0;
};
static_assert(std::is_trivially_copyable_v<state_scalars> && sizeof(state_scalars) == 21 * 8);
static_assert(std::is_trivially_copyable_v<progress_row> && sizeof(progress_row) == 6 * 8);

[[nodiscard]] inline std::string set_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "set-%010lld", static_cast<long long>(step));
  return buf;
}

/// The step of a set's name, or -1 when `name` is not one.
[[nodiscard]] inline std::int64_t step_of(const std::string& name) {
  if (name.size() != 14 || name.rfind("set-", 0) != 0 ||
      !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(name.substr(4));
}

[[noreturn]] inline void fail_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

/// fsync of a directory: a rename in it lasts a power cut.
inline void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fail_errno("cannot open directory '" + dir + "'");
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    fail_errno("cannot sync directory '" + dir + "'");
  }
}

/// Writes `text` to `path` atomically: a temporary file, fsync, rename, fsync of the directory.
inline void write_small_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    fail_errno("cannot create '" + tmp + "'");
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = e;
      fail_errno("cannot write '" + tmp + "'");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail_errno("cannot sync '" + tmp + "'");
  }
  if (::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) {
    fail_errno("cannot rename '" + tmp + "'");
  }
  sync_dir(dir);
}

/// The test hook CHARLM_CHECKPOINT_PAUSE_MS: a pause at each stage of a save (between the files,
/// inside trainer.zfck, around the renames), so that a test can kill the trainer there.
inline constexpr char save_pause_env[] = "CHARLM_CHECKPOINT_PAUSE_MS";
inline void stage_pause() {
  test_pause<save_pause_env>();
}

/// The options a set's run must share with the resuming one, one "flag value" per line; then
/// zenflow's resolved configuration (config::describe), which the engine's checkpoint hashes too.
[[nodiscard]] inline std::string run_identity(const options& o) {
  std::string s;
  auto line = [&](const char* flag, const std::string& v) { s += std::string(flag) + " " + v + "\n"; };
  auto num = [](double x) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return std::string(buf);
  };
  line("--context", std::to_string(o.shape.context));
  line("--embed", std::to_string(o.shape.embed));
  line("--hidden", std::to_string(o.shape.hidden));
  line("--layers", std::to_string(o.shape.layers));
  line("--batch", std::to_string(o.batch));
  line("--steps", std::to_string(o.steps));
  line("--lr", num(o.lr));
  line("--warmup-steps", std::to_string(o.warmup_steps));
  line("--min-lr-ratio", num(o.min_lr_ratio));
  line("--seed", std::to_string(o.seed));
  line("--data", o.data_path.empty() ? "(generated)" : o.data_path);
  line("--corpus-bytes", o.data_path.empty() ? std::to_string(o.corpus_bytes) : "-");
  line("--corpus-style", o.data_path.empty() ? o.corpus_style : "-");
  line("--init-weights", o.init_weights.empty() ? "(none)" : o.init_weights);
  line("vocabulary", std::to_string(o.vocab_chars.size()) + " characters, hash " +
                         std::to_string(zenflow::checkpoint_hash(std::as_bytes(std::span(o.vocab_chars)))));
  s += "zenflow:\n" + o.zf.describe();
  return s;
}

/// The first line where two identities differ, as "'<there>' there, '<here>' here".
[[nodiscard]] inline std::string first_difference(const std::string& there, const std::string& here) {
  std::size_t a = 0, b = 0;
  while (a < there.size() || b < here.size()) {
    const std::size_t ae = std::min(there.find('\n', a), there.size());
    const std::size_t be = std::min(here.find('\n', b), here.size());
    const std::string la = there.substr(a, ae - a), lb = here.substr(b, be - b);
    if (la != lb) {
      return "'" + la + "' there, '" + lb + "' here";
    }
    a = ae + 1, b = be + 1;
  }
  return "";
}

} // namespace ckpt_detail

/// A set loaded for --resume: where it is, the trainer state and the model's weights.
struct loaded_set {
  std::string path; ///< DIR/set-<step>
  trainer_state state;
  std::vector<zenflow::bfloat16> weights;
};

/// The checkpoint sets of one directory (file comment).
class checkpoint_sets {
public:
  explicit checkpoint_sets(std::string dir) : dir_(std::move(dir)) {}

  [[nodiscard]] const std::string& dir() const { return dir_; }

  /// The complete sets in the directory, newest first (the one `latest` names leading).
  [[nodiscard]] std::vector<std::string> candidates() const {
    namespace fs = ckpt_detail::fs;
    std::vector<std::pair<std::int64_t, std::string>> sets;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      if (const std::int64_t step = ckpt_detail::step_of(name); step >= 0 && e.is_directory()) {
        sets.emplace_back(step, name);
      }
    }
    std::sort(sets.begin(), sets.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<std::string> out;
    const std::string latest = latest_name();
    for (const auto& [step, name] : sets) {
      if (name == latest) {
        out.insert(out.begin(), name);
      } else {
        out.push_back(name);
      }
    }
    return out;
  }

  /// What `DIR/latest` names ("" when absent or not a set's name).
  [[nodiscard]] std::string latest_name() const {
    std::ifstream f(dir_ + "/latest");
    std::string name;
    if (!(f >> name) || ckpt_detail::step_of(name) < 0) {
      return "";
    }
    return name;
  }

  /// Refuses a directory that holds sets already (a run without --resume would overwrite them),
  /// and creates a missing one.
  void prepare_fresh() const {
    namespace fs = ckpt_detail::fs;
    std::error_code ec;
    if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) {
      throw zenflow::invalid_argument("--checkpoint-dir: '" + dir_ + "' is not a directory");
    }
    if (const auto sets = candidates(); !sets.empty()) {
      throw zenflow::invalid_argument("--checkpoint-dir: '" + dir_ + "' holds checkpoint sets already (" +
                                      sets.front() +
                                      "): add --resume to continue from it, or give an empty directory");
    }
    fs::create_directories(dir_, ec);
    if (ec) {
      throw zenflow::invalid_argument("--checkpoint-dir: cannot create '" + dir_ + "': " + ec.message());
    }
  }

  /// The set to resume from: the one `latest` names, else the newest complete one whose files pass
  /// their checks (a set that fails them is reported on stderr and passed over); nullopt when the
  /// directory holds no set (a run killed before its first save); throws when it holds sets but
  /// none passes. Throws invalid_argument naming --resume when the directory is missing,
  /// and naming the option that differs when the set was written by another configuration.
  [[nodiscard]] std::optional<loaded_set> load_latest(const options& o) const {
    namespace fs = ckpt_detail::fs;
    std::error_code ec;
    if (!fs::is_directory(dir_, ec)) {
      throw zenflow::invalid_argument("--resume: the checkpoint directory '" + dir_ + "' does not exist");
    }
    const std::vector<std::string> sets = candidates();
    std::string why;
    for (const std::string& name : sets) {
      const std::string path = dir_ + "/" + name;
      std::optional<zenflow::checkpoint_reader> trainer;
      try {
        const zenflow::checkpoint_reader engine_file(path + "/engine.zfck"); // checked whole
        trainer.emplace(path + "/trainer.zfck");
      } catch (const zenflow::checkpoint_error& e) {
        std::fprintf(stderr, "checkpoint: %s is unusable (%s); trying an older set\n", name.c_str(),
                     e.what());
        why = e.what();
        continue;
      }
      return read_set(*trainer, path, o);
    }
    if (!sets.empty()) { // starting over would overwrite them: the user decides
      throw zenflow::invalid_argument("--resume: no checkpoint set in '" + dir_ +
                                      "' passes its checks (the last: " + why + ")");
    }
    return std::nullopt;
  }

  /// Saves one set (file comment): the engine, the trainer state `st` and the weights `w`; says
  /// "checkpoint: saving <set>" and "checkpoint: saved <set>" on stderr (not with --quiet, unless
  /// --progress-every asks for progress lines). On
  /// failure (a full disk, an I/O error) the partial set is removed and invalid_argument naming
  /// --checkpoint-dir says what failed; the previous set stays the one `latest` names.
  template <class Engine>
  void save(Engine& opt, const trainer_state& st, const std::vector<zenflow::bfloat16>& w, const options& o) {
    namespace fs = ckpt_detail::fs;
    const std::string name = ckpt_detail::set_name(st.step);
    const std::string partial = dir_ + "/.partial-" + name;
    const std::string final_path = dir_ + "/" + name;
    if (latest_name() == name) {
      return; // this very set is in place already
    }
    std::string previous; // the set --resume would take if this save fails
    for (const std::string& c : candidates()) {
      if (c != name) {
        previous = c;
        break;
      }
    }
    const bool announce = !o.quiet || o.progress_every > 0; // as the progress lines
    if (announce) {
      std::fprintf(stderr, "checkpoint: saving %s\n", name.c_str());
      std::fflush(stderr);
    }
    try {
      fs::remove_all(partial); // a save killed earlier at this step
      fs::create_directory(partial);
      ckpt_detail::stage_pause();
      opt.save(partial + "/engine.zfck");
      ckpt_detail::stage_pause();
      write_trainer_file(partial + "/trainer.zfck", st, w, o);
      ckpt_detail::stage_pause();
      fs::remove_all(final_path); // complete but never named by `latest` (a save killed before it)
      fs::rename(partial, final_path);
      ckpt_detail::sync_dir(dir_);
      ckpt_detail::stage_pause();
      ckpt_detail::write_small_file(dir_, "latest", name + "\n");
      ckpt_detail::stage_pause();
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove_all(partial, ec);
      throw zenflow::invalid_argument(
          "--checkpoint-dir: saving " + name + " in '" + dir_ + "' failed: " + e.what() + "; " +
          (previous.empty()
               ? std::string("no earlier set was complete")
               : "the previous set " + previous + " is intact: rerun with --resume to continue from it"));
    }
    // The new set is complete and named: only now do the older ones go.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const std::string n = e.path().filename().string();
      if (n != name && (ckpt_detail::step_of(n) >= 0 || n.rfind(".partial-", 0) == 0)) {
        std::error_code ec2;
        fs::remove_all(e.path(), ec2);
      }
    }
    if (announce) {
      std::fprintf(stderr, "checkpoint: saved %s\n", name.c_str());
      std::fflush(stderr);
    }
  }

private:
  static void write_trainer_file(const std::string& path,
                                 const trainer_state& st,
                                 const std::vector<zenflow::bfloat16>& w,
                                 const options& o) {
    const std::string id = ckpt_detail::run_identity(o);
    zenflow::checkpoint_writer out(path, {zenflow::checkpoint_hash(std::as_bytes(std::span(id))), 0, 0, 1});
    out.section("trainer/identity", id.data(), id.size());
    ckpt_detail::state_scalars s;
    s.step = st.step, s.data_rng = st.data_rng;
    s.eval_loss_initial = st.eval_loss_initial, s.train_loss_final = st.train_loss_final;
    s.iv_loss = st.iv_loss, s.iv_s = st.iv_s, s.iv_stall = st.iv_stall, s.iv_bytes = st.iv_bytes;
    s.iv_n = st.iv_n, s.window_sum = st.window_sum, s.window_steps = st.window_steps;
    s.timed_s = st.timed_s, s.timed_stall_s = st.timed_stall_s, s.timed_bytes = st.timed_bytes;
    s.losses = static_cast<std::int64_t>(st.losses.size());
    s.progress = static_cast<std::int64_t>(st.progress.size());
    s.weights = static_cast<std::int64_t>(w.size());
    s.vocab = o.shape.vocab, s.context = o.shape.context, s.embed = o.shape.embed, s.hidden = o.shape.hidden,
    s.layers = o.shape.layers;
    out.section("trainer/scalars", &s, sizeof s);
    out.section("trainer/losses", st.losses.data(), st.losses.size() * sizeof(float));
    out.section("trainer/progress", st.progress.data(), st.progress.size() * sizeof(progress_row));
    out.section("model/vocab", o.vocab_chars.data(), o.vocab_chars.size());
    // The weights in two halves, with the test hook's pause between: a kill there leaves a
    // half-written temporary file in the partial set.
    const std::size_t half = w.size() / 2;
    out.begin_section("model/weights", w.size() * sizeof(zenflow::bfloat16));
    out.write(w.data(), half * sizeof(zenflow::bfloat16));
    ckpt_detail::stage_pause();
    out.write(w.data() + half, (w.size() - half) * sizeof(zenflow::bfloat16));
    out.end_section();
    out.commit();
  }

  static loaded_set
  read_set(const zenflow::checkpoint_reader& in, const std::string& path, const options& o) {
    const zenflow::checkpoint_section* idsec = in.find("trainer/identity");
    if (idsec == nullptr) {
      throw zenflow::invalid_argument("--resume: " + path + "/trainer.zfck is not a charlm_train checkpoint");
    }
    std::string id(idsec->bytes, '\0');
    in.read("trainer/identity", id.data(), id.size());
    const std::string mine = ckpt_detail::run_identity(o);
    if (id != mine) {
      throw zenflow::invalid_argument("--resume: " + path + " was written by a run with other options (" +
                                      ckpt_detail::first_difference(id, mine) +
                                      "): resume with the same options, or give another --checkpoint-dir");
    }
    ckpt_detail::state_scalars s;
    in.read("trainer/scalars", &s, sizeof s);
    if (s.layout != ckpt_detail::state_layout || s.losses != s.step || s.progress < 0 ||
        s.weights != param_table(o.shape).total) {
      throw zenflow::invalid_argument("--resume: " + path +
                                      "/trainer.zfck holds an inconsistent trainer state");
    }
    loaded_set ls;
    ls.path = path;
    trainer_state& st = ls.state;
    st.step = s.step, st.data_rng = s.data_rng;
    st.eval_loss_initial = s.eval_loss_initial, st.train_loss_final = s.train_loss_final;
    st.iv_loss = s.iv_loss, st.iv_s = s.iv_s, st.iv_stall = s.iv_stall, st.iv_bytes = s.iv_bytes;
    st.iv_n = s.iv_n, st.window_sum = s.window_sum, st.window_steps = s.window_steps;
    st.timed_s = s.timed_s, st.timed_stall_s = s.timed_stall_s, st.timed_bytes = s.timed_bytes;
    st.losses.resize(static_cast<std::size_t>(s.losses));
    in.read("trainer/losses", st.losses.data(), st.losses.size() * sizeof(float));
    st.progress.resize(static_cast<std::size_t>(s.progress));
    in.read("trainer/progress", st.progress.data(), st.progress.size() * sizeof(progress_row));
    ls.weights.resize(static_cast<std::size_t>(s.weights));
    in.read("model/weights", ls.weights.data(), ls.weights.size() * sizeof(zenflow::bfloat16));
    return ls;
  }

  std::string dir_;
};

} // namespace charlm
