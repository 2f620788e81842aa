/// @file
/// The library's log hook. zenflow writes nothing to stdout or stderr by itself: what it has to
/// say (a fallback taken, a configuration key ignored, an error nobody collected) goes to the
/// handler the application installs, filtered by a minimum level. With no handler installed,
/// messages are dropped: the default is quiet.
///
/// ```cpp
/// zenflow::set_log_handler(zenflow::stderr_log_handler, zenflow::log_level::info);
/// ```
///
/// Thread-safe: any thread may log while another installs a handler; a handler may be called
/// from the library's own threads (host jobs, the consumer), so it must be thread-safe itself.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// Severity of a log message, lowest first. `off` as a minimum level silences everything.
enum class log_level : std::uint8_t { debug, info, warning, error, off };

/// The level's name: "debug", "info", "warning", "error", "off".
[[nodiscard]] constexpr std::string_view to_string(log_level level) noexcept {
  switch (level) {
  case log_level::debug:
    return "debug";
  case log_level::info:
    return "info";
  case log_level::warning:
    return "warning";
  case log_level::error:
    return "error";
  case log_level::off:
    return "off";
  }
  return "?";
}

/// Receives every message at or above the installed minimum level.
using log_handler = std::function<void(log_level level, std::string_view message)>;

namespace detail {
struct log_sink {
  std::mutex mutex;
  std::shared_ptr<const log_handler> handler; // null: quiet
  log_level min_level = log_level::warning;
};
inline log_sink& log_state() {
  static log_sink sink;
  return sink;
}
} // namespace detail

/// Installs `handler` for messages at or above `min_level` (an empty handler restores the quiet
/// default). Returns the handler it replaces.
inline log_handler set_log_handler(log_handler handler, log_level min_level = log_level::warning) {
  auto& sink = detail::log_state();
  auto next = handler ? std::make_shared<const log_handler>(std::move(handler)) : nullptr;
  std::lock_guard lock(sink.mutex);
  log_handler previous = sink.handler ? *sink.handler : log_handler{};
  sink.handler = std::move(next);
  sink.min_level = min_level;
  return previous;
}

/// True when a message at `level` reaches a handler (build expensive messages only then).
[[nodiscard]] inline bool log_enabled(log_level level) {
  auto& sink = detail::log_state();
  std::lock_guard lock(sink.mutex);
  return sink.handler != nullptr && level != log_level::off && level >= sink.min_level;
}

/// Sends `message` to the installed handler when `level` passes its filter. Never throws: a
/// handler that throws is ignored (logging must not turn a warning into a failure).
inline void log(log_level level, std::string_view message) noexcept {
  std::shared_ptr<const log_handler> handler;
  {
    auto& sink = detail::log_state();
    std::lock_guard lock(sink.mutex);
    if (!sink.handler || level == log_level::off || level < sink.min_level) {
      return;
    }
    handler = sink.handler; // called outside the lock: a handler may log or reinstall
  }
  try {
    (*handler)(level, message);
  } catch (...) { // NOLINT(bugprone-empty-catch): see above
  }
}

/// A ready-made handler for applications and examples to install (the library never installs
/// it): one line "zenflow <level>: <message>" on stderr.
inline void stderr_log_handler(log_level level, std::string_view message) {
  std::string line = "zenflow ";
  line += to_string(level);
  line += ": ";
  line += message;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

ZF_NAMESPACE_END
