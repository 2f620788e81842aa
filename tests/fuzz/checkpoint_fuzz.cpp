// Fuzz target for the checkpoint reader (checkpoint_reader over bytes in memory).
//
// Properties checked on every input:
//  1. the reader either accepts the bytes or throws zenflow::checkpoint_error: any other
//     exception, a crash, a hang, an allocation out of proportion to the input or a sanitizer
//     report is a bug;
//  2. a file it accepts reads back: every section it lists is read without error (the whole-file
//     check promised that), and `expect` with the file's own identity passes.
//
// Built with libFuzzer by scripts/fuzz (-DZF_FUZZ_LIBFUZZER), and as a replay program run over
// tests/fuzz/corpus/checkpoint by the cpu suite (seeds: valid files from the writer, then damaged).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <zenflow/engine/checkpoint_file.hpp>

namespace {

[[noreturn]] void bug(const char* what, const std::string& detail) {
  std::fprintf(stderr, "checkpoint_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void check_one(std::span<const std::byte> input) {
  try {
    zenflow::checkpoint_reader reader(input);
    reader.expect(reader.identity());
    for (const zenflow::checkpoint_section& s : reader.sections()) {
      if (s.bytes > input.size()) {
        bug("a section longer than the file was accepted", s.tag);
      }
      std::vector<std::byte> dst(static_cast<std::size_t>(s.bytes));
      reader.read(s.tag, dst.data(), dst.size());
    }
  } catch (const zenflow::checkpoint_error&) {
    return; // rejected, saying why: the documented behaviour
  } catch (const std::exception& e) {
    bug("something other than zenflow::checkpoint_error was thrown", e.what());
  }
}

} // namespace

#if defined(ZF_FUZZ_LIBFUZZER)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_one(std::span(reinterpret_cast<const std::byte*>(data), size));
  return 0;
}
#else
// Replays every file given, and every file of every directory given.
int main(int argc, char** argv) {
  int replayed = 0;
  auto replay = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    check_one(std::span(reinterpret_cast<const std::byte*>(chars.data()), chars.size()));
    ++replayed;
  };
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& entry : std::filesystem::directory_iterator(p)) {
        if (entry.is_regular_file()) {
          replay(entry.path());
        }
      }
    } else {
      replay(p);
    }
  }
  std::printf("checkpoint_fuzz: %d input(s) replayed, no bug\n", replayed);
  return replayed > 0 ? 0 : 1; // an empty corpus proves nothing
}
#endif
