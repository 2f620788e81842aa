/// @file
/// The entry point of a fuzz target, from its `check_one(std::span<const std::byte>)`: libFuzzer's
/// `LLVMFuzzerTestOneInput` when built by scripts/fuzz (-DZF_FUZZ_LIBFUZZER), else a `main` that
/// replays every file given and every file of every directory given (the cpu suite runs it over
/// the committed corpus, so an input that once crashed stays a regression test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <vector>

#if defined(ZF_FUZZ_LIBFUZZER)
#  define ZF_FUZZ_MAIN(name, check_one)                                                                      \
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {                      \
      check_one(std::span(reinterpret_cast<const std::byte*>(data), size));                                  \
      return 0;                                                                                              \
    }
#else
#  define ZF_FUZZ_MAIN(name, check_one)                                                                      \
    int main(int argc, char** argv) {                                                                        \
      return zf_fuzz::replay(name, argc, argv, check_one);                                                   \
    }
#endif

namespace zf_fuzz {

template <class Check>
int replay(const char* name, int argc, char** argv, Check check_one) {
  int replayed = 0;
  auto run = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    check_one(std::span(reinterpret_cast<const std::byte*>(chars.data()), chars.size()));
    ++replayed;
  };
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& entry : std::filesystem::directory_iterator(p)) {
        if (entry.is_regular_file()) {
          run(entry.path());
        }
      }
    } else {
      run(p);
    }
  }
  std::printf("%s: %d input(s) replayed, no bug\n", name, replayed);
  return replayed > 0 ? 0 : 1; // an empty corpus proves nothing
}

} // namespace zf_fuzz
