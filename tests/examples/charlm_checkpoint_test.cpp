// The trainer's checkpoint sets (examples/charlm/checkpoint.hpp) in one process, so that the
// sanitizer builds run them too: a run stopped right after a set and resumed with --resume ends
// with the weights and losses of a run that never stopped, bit for bit; bad options and a
// directory of another configuration are refused by name, changing nothing. The same with real
// SIGKILLs, mid-save included, and a full disk: charlm_kill_resume.py (cpu.examples.charlm_kill_resume).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "charlm/options.hpp"
#include "charlm/run.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> base_args() {
  return {"--backend",
          "host",
          "--size",
          "tiny",
          "--steps",
          "16",
          "--corpus-bytes",
          "60000",
          "--quiet",
          "--eval-batches",
          "2",
          "--threads",
          "1",
          "--host-threads",
          "1",
          "--seed",
          "7",
          "--topk-ratio",
          "0.1",
          "--update-interval",
          "4",
          "--select-strategy",
          "step",
          "--select-interval",
          "6",
          "--overlap-step",
          "true"};
}

charlm::options parse(std::vector<std::string> extra) {
  std::vector<std::string> args = base_args();
  args.insert(args.end(), extra.begin(), extra.end());
  charlm::options o;
  charlm::apply_size_preset(o, "cpu");
  EXPECT_TRUE(charlm::parse_args(args, o));
  return o;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::map<std::string, std::string> snapshot(const fs::path& d) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(d)) {
    if (e.is_regular_file()) {
      out[fs::relative(e.path(), d).string()] = slurp(e.path());
    }
  }
  return out;
}

struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name)
      : path(fs::temp_directory_path() / ("charlm_ckpt_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CharlmCheckpoint, BadOptionsAreRefusedByName) {
  auto refused = [](std::vector<std::string> extra) {
    return error_of([&] { (void)parse(std::move(extra)); });
  };
  EXPECT_NE(refused({"--resume"}).find("--resume: needs --checkpoint-dir"), std::string::npos);
  EXPECT_NE(
      refused({"--checkpoint-dir", "d", "--checkpoint-every", "0"}).find("--checkpoint-every: must be >= 1"),
      std::string::npos);
  EXPECT_NE(
      refused({"--checkpoint-dir", "d", "--checkpoint-every", "-3"}).find("--checkpoint-every: must be >= 1"),
      std::string::npos);
  EXPECT_NE(refused({"--checkpoint-every", "4"}).find("--checkpoint-every: needs --checkpoint-dir"),
            std::string::npos);
  EXPECT_NE(refused({"--checkpoint-dir", ""}).find("--checkpoint-dir"), std::string::npos);
}

TEST(CharlmCheckpoint, StoppedAndResumedEqualsUninterrupted) {
  temp_dir tmp("resume");
  const fs::path ref_w = tmp.path / "ref.weights", ref_l = tmp.path / "ref.losses";
  const charlm::run_result ref =
      charlm::run_host(parse({"--save-weights", ref_w.string(), "--losses-out", ref_l.string()}));
  charlm::write_losses(ref, parse({"--losses-out", ref_l.string()}));
  ASSERT_EQ(ref.losses.size(), 16u);

  const fs::path dir = tmp.path / "sets";
  const fs::path w = tmp.path / "resumed.weights", l = tmp.path / "resumed.losses";
  const std::vector<std::string> ckpt = {"--checkpoint-dir", dir.string(), "--checkpoint-every", "3",
                                         "--save-weights",   w.string(),   "--losses-out",       l.string()};
  // Stopped after the set of step 6 (mid-window: the windows are 4 steps), then after step 12
  // (a window still open and a host job in flight), each time resumed from the set.
  for (const std::int64_t stop : {6, 12}) {
    std::vector<std::string> args = ckpt;
    if (stop != 6) {
      args.push_back("--resume");
    }
    charlm::options o = parse(args);
    o.stop_after = stop;
    const charlm::run_result part = charlm::run_host(o);
    EXPECT_EQ(part.steps, stop);
    EXPECT_EQ(slurp(dir / "latest"), charlm::ckpt_detail::set_name(stop) + "\n");
  }
  std::vector<std::string> args = ckpt;
  args.push_back("--resume");
  const charlm::options o = parse(args);
  const charlm::run_result r = charlm::run_host(o);
  charlm::write_losses(r, o);
  ASSERT_EQ(r.losses.size(), ref.losses.size());
  for (std::size_t t = 0; t < r.losses.size(); ++t) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(r.losses[t]), std::bit_cast<std::uint32_t>(ref.losses[t]))
        << "step " << t;
  }
  EXPECT_EQ(slurp(w), slurp(ref_w));
  EXPECT_EQ(slurp(l), slurp(ref_l));
  EXPECT_EQ(r.eval_loss_initial, ref.eval_loss_initial);
  EXPECT_EQ(r.eval_loss_final, ref.eval_loss_final);
  EXPECT_EQ(r.train_loss_final, ref.train_loss_final);
  EXPECT_EQ(r.selections, ref.selections);
  EXPECT_EQ(r.windows_closed, ref.windows_closed);
  ASSERT_EQ(r.progress.size(), ref.progress.size());
  for (std::size_t i = 0; i < r.progress.size(); ++i) {
    EXPECT_EQ(r.progress[i].step, ref.progress[i].step);
    EXPECT_EQ(r.progress[i].loss, ref.progress[i].loss);
  }
  // Only the last set is left.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) {
    left.push_back(e.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"latest", "set-0000000016"}));

  // Another configuration, or no --resume: refused by name, the sets unchanged.
  const auto before = snapshot(dir);
  auto refused = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--checkpoint-dir", dir.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return error_of([&] { (void)charlm::run_host(parse(a)); });
  };
  EXPECT_NE(refused({"--resume", "--batch", "16"}).find("'--batch 32' there, '--batch 16' here"),
            std::string::npos);
  EXPECT_NE(refused({"--resume", "--topk-ratio", "0.2"}).find("topk_ratio"), std::string::npos);
  EXPECT_NE(refused({"--resume", "--steps", "20"}).find("--steps"), std::string::npos);
  EXPECT_NE(refused({}).find("holds checkpoint sets already"), std::string::npos);
  EXPECT_NE(refused({"--resume", "--checkpoint-dir", (tmp.path / "none").string()}).find("does not exist"),
            std::string::npos);
  EXPECT_EQ(snapshot(dir), before);
}

} // namespace
