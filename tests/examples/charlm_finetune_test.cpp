// The trainer's fine-tuning scenario on the host backend: pretrain with dense AdamW on the prose
// corpus, save the weights, fine-tune on the shifted corpus from the same weights in each mode.
// The saved-then-loaded weights reproduce the pretrained eval loss bit for bit; the shifted corpus
// differs in measured character statistics; fine-tuning lowers the shifted corpus' loss; ZenFlow
// with the library's defaults stays within its measured margin of dense AdamW (docs/defaults.md).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "charlm/options.hpp"
#include "charlm/run.hpp"
#include "support/random.hpp"

namespace {

std::uint64_t seed() {
  return zf_test::base_seed() % 1000 + 11;
}

/// A path in the temp folder, unique to this process.
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("zf_charlm_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

charlm::options small(const std::vector<std::string>& extra) {
  charlm::options o;
  std::vector<std::string> args = {"--size",    "tiny", "--hidden",       "64",
                                   "--steps",   "150",  "--corpus-bytes", "200000",
                                   "--quiet",   "true", "--eval-batches", "8",
                                   "--threads", "1",    "--seed",         std::to_string(seed())};
  args.insert(args.end(), extra.begin(), extra.end());
  EXPECT_TRUE(charlm::parse_args(args, o));
  return o;
}

/// A file in the temp folder, removed when the process ends (the runs below are built once).
struct temp_file {
  std::string path;
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

/// The pretrained weights' file, unique to this process and removed when it ends.
const std::string& pretrained_weights_path() {
  static const temp_file file{temp_path("pretrained.bin")};
  return file.path;
}

struct finetune_runs {
  std::string weights;
  charlm::run_result pre, reload_prose, dense, zen_default, zen_none, scratch_shifted;
};

const finetune_runs& runs() {
  static const finetune_runs r = [] {
    finetune_runs m;
    m.weights = pretrained_weights_path();
    m.pre =
        charlm::run_host(small({"--optimizer", "gpu-adamw", "--steps", "300", "--save-weights", m.weights}));
    // One step, only to read the eval loss of the loaded weights (taken before any step).
    m.reload_prose =
        charlm::run_host(small({"--optimizer", "gpu-adamw", "--steps", "1", "--init-weights", m.weights}));
    const std::vector<std::string> ft = {"--init-weights", m.weights, "--corpus-style", "shifted"};
    auto with = [&](std::vector<std::string> flags) {
      flags.insert(flags.end(), ft.begin(), ft.end());
      return charlm::run_host(small(flags));
    };
    m.dense = with({"--optimizer", "gpu-adamw"});
    m.zen_default = with({"--optimizer", "zenflow"}); // the library's defaults, nothing else
    m.zen_none = with({"--optimizer", "zenflow", "--host-lr-scale", "none"});
    m.scratch_shifted = charlm::run_host(small({"--optimizer", "gpu-adamw", "--corpus-style", "shifted"}));
    return m;
  }();
  return r;
}

TEST(CharlmFinetune, SavedWeightsReloadBitForBit) {
  SCOPED_TRACE(zf_test::seed_note(seed()));
  const auto& m = runs();
  EXPECT_LT(m.pre.eval_loss_final, 0.8 * m.pre.eval_loss_initial); // pretraining learned something
  // The loaded weights are the saved ones: the same eval loss on the same held-out batches, to the bit.
  EXPECT_EQ(m.reload_prose.eval_loss_initial, m.pre.eval_loss_final);
  // The file holds the shape and the vocabulary: the fine-tunes start from the same model.
  EXPECT_EQ(m.dense.eval_loss_initial, m.zen_default.eval_loss_initial);
  EXPECT_EQ(m.dense.eval_loss_initial, m.zen_none.eval_loss_initial);
  EXPECT_EQ(m.dense.parameters, m.pre.parameters);
}

// Independent count of character statistics of the two generated styles.
TEST(CharlmFinetune, ShiftedCorpusDiffersInMeasuredStatistics) {
  const std::string prose = charlm::generate_corpus(300000, seed(), false);
  const std::string shifted = charlm::generate_corpus(300000, seed(), true);
  auto share = [](const std::string& text, const std::string& chars) {
    std::int64_t n = 0;
    for (char c : text) {
      n += chars.find(c) != std::string::npos ? 1 : 0;
    }
    return static_cast<double>(n) / static_cast<double>(text.size());
  };
  auto sentence_share = [&](const std::string& text, char end) {
    return share(text, std::string(1, end)) / share(text, ".!?");
  };
  // Prose ends ~5% of sentences with '?', the shifted style ~50%.
  EXPECT_LT(sentence_share(prose, '?'), 0.08);
  EXPECT_GT(sentence_share(shifted, '?'), 0.4);
  // The rare letters of prose (q, x, z: the lists' last Zipf ranks) are frequent in the shifted style.
  EXPECT_GT(share(shifted, "qxzQXZ"), 4.0 * share(prose, "qxzQXZ"));
  // ... over the same characters, so that one vocabulary serves both.
  EXPECT_EQ(charlm::vocabulary(prose).chars(), charlm::vocabulary(shifted).chars());
}

TEST(CharlmFinetune, FinetuningLowersTheShiftedLossInEveryMode) {
  SCOPED_TRACE(zf_test::seed_note(seed()));
  const auto& m = runs();
  // The pretrained model is worse on the shifted text than on its own: the shift is real.
  EXPECT_GT(m.dense.eval_loss_initial, 1.15 * m.pre.eval_loss_final);
  for (const auto* r : {&m.dense, &m.zen_default, &m.zen_none}) {
    EXPECT_LT(r->eval_loss_final, 0.9 * r->eval_loss_initial) << r->mode;
    EXPECT_TRUE(std::isfinite(r->eval_loss_final));
  }
  // Pretraining helps: the fine-tune ends below the same steps from a fresh init.
  EXPECT_LT(m.dense.eval_loss_final, m.scratch_shifted.eval_loss_final);
}

TEST(CharlmFinetune, DefaultsStayCloseToDenseAndNeverSpike) {
  SCOPED_TRACE(zf_test::seed_note(seed()));
  const auto& m = runs();
  std::printf("fine-tune eval loss: start %.4f, dense %.4f, zenflow defaults %.4f, host_lr_scale none %.4f\n",
              m.dense.eval_loss_initial, m.dense.eval_loss_final, m.zen_default.eval_loss_final,
              m.zen_none.eval_loss_final);
  // Issue 15 asks for 2% with Zen-auto; the defaults ("linear", per-step host moments) are within
  // 1%: measured 3.1% to 4.5% *below* dense AdamW over 7 seeds ("snr" with per-window moments, the
  // defaults before 2026-11-24: +0.05% to +1.0%).
  EXPECT_LT(m.zen_default.eval_loss_final, 1.01 * m.dense.eval_loss_final);
  // The default rule is not worse than DeepSpeed's "none" (docs/defaults.md: never by more than 1%).
  EXPECT_LT(m.zen_default.eval_loss_final, 1.01 * m.zen_none.eval_loss_final);
  // No progress interval's training loss rises above the starting loss.
  for (const auto& row : m.zen_default.progress) {
    EXPECT_LT(row.loss, m.zen_default.eval_loss_initial) << "step " << row.step;
  }
}

TEST(CharlmFinetune, BadWeightsFilesAreRejectedByName) {
  auto rejects = [](const std::vector<std::string>& extra, const std::string& what) {
    try {
      (void)charlm::run_host(small(extra));
      ADD_FAILURE() << "accepted " << extra.back();
    } catch (const zenflow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--init-weights"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  rejects({"--init-weights", temp_path("missing.bin")}, "cannot be opened");
  const std::string junk = temp_path("junk.bin");
  std::ofstream(junk) << "not a weights file at all";
  rejects({"--init-weights", junk}, "not a charlm weights file");
  // A truncated copy of a real file.
  std::string bytes;
  {
    std::ifstream in(runs().weights, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = temp_path("cut.bin");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  rejects({"--init-weights", cut}, "truncated");
  // A text with a character the pretrained vocabulary lacks.
  const std::string odd = temp_path("odd.txt");
  std::ofstream(odd) << std::string(5000, '#');
  rejects({"--init-weights", runs().weights, "--data", odd}, "vocabulary");
  charlm::options bad;
  EXPECT_THROW((void)charlm::parse_args({"--corpus-style", "poetry"}, bad), zenflow::invalid_argument);
  for (const auto& f : {junk, cut, odd}) {
    std::filesystem::remove(f);
  }
}

} // namespace
