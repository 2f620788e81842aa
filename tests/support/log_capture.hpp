/// @file
/// Captures the library's log messages while alive (then restores the quiet default), keeping
/// only those that start with a source prefix: other parts of the library log too (the pinned-
/// memory fallback note comes once per process, in whichever test allocates first), and a test
/// that counts messages must not depend on the order tests run in.
#pragma once

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zenflow/core/log.hpp>

namespace zf_test {

struct log_capture {
  std::mutex mutex;
  std::vector<std::pair<zenflow::log_level, std::string>> lines; ///< level and message, in order
  std::vector<std::string> messages;                             ///< the same messages alone

  explicit log_capture(std::string source = "zenflow") {
    zenflow::set_log_handler(
        [this, source = std::move(source)](zenflow::log_level level, std::string_view msg) {
          if (msg.substr(0, source.size()) != source) {
            return;
          }
          std::lock_guard lock(mutex);
          lines.emplace_back(level, std::string(msg));
          messages.emplace_back(msg);
        },
        zenflow::log_level::debug);
  }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;
  ~log_capture() { zenflow::set_log_handler({}); }

  [[nodiscard]] bool any_contains(const std::string& text) const {
    return std::any_of(messages.begin(), messages.end(),
                       [&](const std::string& m) { return m.find(text) != std::string::npos; });
  }
};

} // namespace zf_test
