// Fuzz target for the DeepSpeed JSON reader (config::from_deepspeed_json_string).
//
// Properties checked on every input:
//  1. the reader either returns a config or throws zenflow::invalid_argument: any other exception,
//     a crash, a hang or a sanitizer report is a bug;
//  2. a config it returns survives the writer: to_deepspeed_json() reads back without error into
//     a config that writes the same JSON (the reader and the writer agree on every key).
//
// Entry points: fuzz_main.hpp (libFuzzer, or a replay of tests/fuzz/corpus/config_json/).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include <zenflow/core/error.hpp>
#include <zenflow/engine/config.hpp>

#include "fuzz_main.hpp"

namespace {

[[noreturn]] void bug(const char* what, std::string_view input, const std::string& detail) {
  std::fprintf(stderr, "config_json_fuzz: %s: %s\ninput (%zu bytes): %.*s\n", what, detail.c_str(),
               input.size(), static_cast<int>(input.size() < 2000 ? input.size() : 2000), input.data());
  std::abort();
}

void check_text(std::string_view input) {
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

void check_one(std::span<const std::byte> bytes) {
  check_text(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

} // namespace

ZF_FUZZ_MAIN("config_json_fuzz", check_one)
