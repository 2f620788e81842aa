// Every kernel of include/ ran in this process: checked when the whole suite ran (no gtest
// filter but exclusions), after the last test. A kernel added to include/ without a case here fails the
// suite, naming it (scripts/check-kernel-seam --kernels lists the same names).
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <zenflow/emu/emulator.hpp>

namespace {

/// The ZF_KERNEL names declared in the headers under `root`/include.
std::set<std::string> declared_kernels(const std::filesystem::path& root) {
  const std::regex kernel(R"(ZF_KERNEL\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\()");
  std::set<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "include")) {
    const auto ext = e.path().extension();
    if (!e.is_regular_file() || (ext != ".hpp" && ext != ".cuh")) {
      continue;
    }
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), kernel), end; it != end; ++it) {
      names.insert((*it)[1].str());
    }
  }
  return names;
}

class every_kernel_ran : public ::testing::Environment {
public:
  void TearDown() override {
    const std::string filter = ::testing::GTEST_FLAG(filter);
    if (filter != "*" && filter.rfind('-', 0) != 0) {
      return; // a chosen subset ran (exclusions alone still check): coverage is the whole suite's
    }
    const auto declared = declared_kernels(ZF_SOURCE_DIR);
    ASSERT_GE(declared.size(), 40u) << "the kernel list of " << ZF_SOURCE_DIR << "/include looks wrong";
    const auto launched = zenflow::emu::launched_kernels();
    std::string missing;
    for (const auto& k : declared) {
      if (launched.count(k) == 0) {
        missing += " " + k;
      }
    }
    EXPECT_TRUE(missing.empty()) << "kernels of include/ no test of the emulator suite launched:" << missing;
  }
};

const auto* registered = ::testing::AddGlobalTestEnvironment(new every_kernel_ran);

} // namespace
