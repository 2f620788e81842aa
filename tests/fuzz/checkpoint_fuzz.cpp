// Fuzz target for the checkpoint reader (checkpoint_reader over bytes in memory).
//
// Properties checked on every input:
//  1. the reader either accepts the bytes or throws zenflow::checkpoint_error: any other
//     exception, a crash, a hang, an allocation out of proportion to the input or a sanitizer
//     report is a bug;
//  2. a file it accepts reads back: every section it lists is read without error (the whole-file
//     check promised that), and `expect` with the file's own identity passes.
//
// Entry points: fuzz_main.hpp (libFuzzer, or a replay of tests/fuzz/corpus/checkpoint/: valid
// files from the writer, one truncated).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include <zenflow/engine/checkpoint_file.hpp>

#include "fuzz_main.hpp"

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

ZF_FUZZ_MAIN("checkpoint_fuzz", check_one)
