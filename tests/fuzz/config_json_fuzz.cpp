// Fuzz target for the DeepSpeed JSON reader (config::from_deepspeed_json_string).
//
// Properties checked on every input:
//  1. the reader either returns a config or throws zenflow::invalid_argument: any other exception,
//     a crash, a hang or a sanitizer report is a bug;
//  2. a config it returns survives the writer: to_deepspeed_json() reads back without error into
//     a config that writes the same JSON (the reader and the writer agree on every key).
//
// Built two ways: with clang's libFuzzer (scripts/fuzz; -DZF_FUZZ_LIBFUZZER), and as a plain
// program that replays files and directories (the cpu suite replays the committed corpus, so a
// crash once found stays a regression test: save the input under tests/fuzz/corpus/<target>/).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>

namespace {

[[noreturn]] void bug(const char* what, std::string_view input, const std::string& detail) {
  std::fprintf(stderr, "config_json_fuzz: %s: %s\ninput (%zu bytes): %.*s\n", what, detail.c_str(),
               input.size(), static_cast<int>(input.size() < 2000 ? input.size() : 2000), input.data());
  std::abort();
}

void check_one(std::string_view input) {
  zenflow::config parsed;
  try {
    parsed = zenflow::config::from_deepspeed_json_string(input);
  } catch (const zenflow::invalid_argument&) {
    return; // rejected with a message naming the key: the documented behaviour
  } catch (const std::exception& e) {
    bug("the reader threw something other than zenflow::invalid_argument", input, e.what());
  }
  const std::string written = parsed.to_deepspeed_json().dump();
  try {
    const zenflow::config again = zenflow::config::from_deepspeed_json_string(written);
    const std::string rewritten = again.to_deepspeed_json().dump();
    if (rewritten != written) {
      bug("the writer's JSON reads back into a different config", input, written + "\n  vs\n" + rewritten);
    }
  } catch (const std::exception& e) {
    bug("the reader rejects what the writer wrote", input, written + "\n  -> " + e.what());
  }
}

} // namespace

#if defined(ZF_FUZZ_LIBFUZZER)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_one(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
#else
// Replays every file given, and every file of every directory given.
int main(int argc, char** argv) {
  int replayed = 0;
  auto replay = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    check_one(text.str());
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
  std::printf("config_json_fuzz: %d input(s) replayed, no bug\n", replayed);
  return replayed > 0 ? 0 : 1; // an empty corpus proves nothing
}
#endif
