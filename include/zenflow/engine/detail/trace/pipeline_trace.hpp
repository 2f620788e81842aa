/// @file
/// The engine's pipeline trace (engine::start_trace / write_trace): spans of the training thread
/// (each step, each stall with its cause), the consumer thread (each D2H slot it takes in) and
/// the host jobs (each window's AdamW), plus, on a backend that keeps a timeline (the emulated
/// device), each stream's kernels and copies with their bytes. Written as Chrome trace-event JSON
/// (chrome://tracing, https://ui.perfetto.dev): complete events ("ph": "X"), microseconds.
/// Recording is off until start_trace(); when off, a span costs one relaxed atomic load.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/device_op.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// The host-side tracks of the trace (thread ids in the JSON).
enum class trace_track : int { training = 1, consumer = 2, host_job = 3 };

struct trace_span {
  int pid = 1; ///< 1: host threads, 2: device streams
  int tid = 0;
  std::int64_t start_ns = 0; ///< on std::chrono::steady_clock
  std::int64_t end_ns = 0;
  std::string name;
  std::string cat;
  std::string args; ///< a JSON object's members, without braces (may be empty)
};

class pipeline_trace {
public:
  using clock = std::chrono::steady_clock;

  [[nodiscard]] static std::int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
  }
  [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void start() { on_.store(true, std::memory_order_relaxed); }

  /// A span of a host track (any thread).
  void span(trace_track track,
            std::string name,
            const char* cat,
            std::int64_t t0,
            std::int64_t t1,
            std::string args = {}) {
    if (!on()) {
      return;
    }
    add({1, static_cast<int>(track), t0, t1, std::move(name), cat, std::move(args)});
  }

  /// Writes every span so far and `extra` (a device's timeline) to `path` (Chrome trace JSON),
  /// sorted by track then start. Throws zenflow::invalid_argument naming 'path' when it cannot be
  /// written.
  void write(const std::string& path, std::vector<trace_span> extra = {}) const {
    std::vector<trace_span> spans = std::move(extra);
    {
      std::lock_guard lock(mutex_);
      spans.insert(spans.end(), spans_.begin(), spans_.end());
    }
    std::stable_sort(spans.begin(), spans.end(), [](const trace_span& a, const trace_span& b) {
      return a.pid != b.pid ? a.pid < b.pid : (a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns);
    });
    std::int64_t origin = 0;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      origin = i == 0 ? spans[i].start_ns : std::min(origin, spans[i].start_ns);
    }
    // Metadata (process and thread names), then the spans: one event per line.
    std::vector<std::string> events;
    events.push_back(R"({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "host"}})");
    events.push_back(R"({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "device streams"}})");
    const char* host_names[] = {"", "training thread", "consumer (D2H ring)", "host job (window AdamW)"};
    for (int t = 1; t <= 3; ++t) {
      events.push_back(R"({"ph": "M", "pid": 1, "tid": )" + std::to_string(t) +
                       R"(, "name": "thread_name", "args": {"name": ")" + host_names[t] + "\"}}");
    }
    std::vector<int> streams;
    for (const auto& s : spans) {
      if (s.pid == 2 && std::find(streams.begin(), streams.end(), s.tid) == streams.end()) {
        streams.push_back(s.tid);
      }
    }
    for (const int s : streams) {
      events.push_back(R"({"ph": "M", "pid": 2, "tid": )" + std::to_string(s) +
                       R"(, "name": "thread_name", "args": {"name": "stream )" + std::to_string(s) + "\"}}");
    }
    for (const auto& s : spans) {
      std::string e = R"({"ph": "X", "pid": )" + std::to_string(s.pid) + R"(, "tid": )" +
                      std::to_string(s.tid) + R"(, "ts": )" + us(s.start_ns - origin) + R"(, "dur": )" +
                      us(std::max<std::int64_t>(s.end_ns - s.start_ns, 0)) + R"(, "name": ")" +
                      escaped(s.name) + R"(", "cat": ")" + escaped(s.cat) + "\"";
      if (!s.args.empty()) {
        e += ", \"args\": {" + s.args + "}";
      }
      events.push_back(e + "}");
    }
    std::ofstream out(path);
    detail::require(static_cast<bool>(out), "zenflow::engine::write_trace", "path",
                    "cannot be opened for writing");
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    for (std::size_t i = 0; i < events.size(); ++i) {
      out << events[i] << (i + 1 < events.size() ? ",\n" : "\n");
    }
    out << "]}\n";
    detail::require(static_cast<bool>(out), "zenflow::engine::write_trace", "path", "could not be written");
  }

private:
  void add(trace_span s) {
    std::lock_guard lock(mutex_);
    spans_.push_back(std::move(s));
  }
  static std::string us(std::int64_t ns) {
    // Microseconds with 3 decimals, from integers: no locale, same text for the same spans.
    const std::int64_t whole = ns / 1000;
    const std::int64_t frac = ns % 1000;
    std::string f = std::to_string(frac);
    return std::to_string(whole) + "." + std::string(3 - f.size(), '0') + f;
  }
  static std::string escaped(const std::string& s) {
    std::string out;
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
      }
      out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
    return out;
  }

  std::atomic<bool> on_{false};
  mutable std::mutex mutex_;
  std::vector<trace_span> spans_;
};

/// The span of one step() on the training thread, from `t0` to now, with its report.
inline void trace_step(pipeline_trace& tr, const step_report& rep, std::int64_t t0) {
  if (!tr.on()) {
    return;
  }
  tr.span(trace_track::training, "step " + std::to_string(rep.step), "step", t0, pipeline_trace::now(),
          "\"window_length\": " + std::to_string(rep.window_length) +
              ", \"window_closed\": " + (rep.window_closed ? "true" : "false") + ", \"selection\": " +
              (rep.selection ? "true" : "false") + ", \"d2h_bytes\": " + std::to_string(rep.d2h_bytes) +
              ", \"stall_us\": " + std::to_string(static_cast<std::int64_t>(rep.stall_s * 1e6)));
}

/// Each stream's operations, on a backend that keeps a timeline (`timeline().trace()` and
/// `timeline().now_ns()`: the emulated device's own record; the CUDA backend's, timed by events);
/// none on the others (the host backend).
template <class Backend>
std::vector<trace_span> device_timeline(const Backend& b) {
  std::vector<trace_span> out;
  if constexpr (requires {
                  b.timeline().trace();
                  b.timeline().now_ns();
                }) {
    const auto& dev = b.timeline();
    // The timeline's clock is steady_clock (from the emulated device's creation): one offset maps it
    // onto ours.
    const std::int64_t offset = pipeline_trace::now() - dev.now_ns();
    for (const device_op& op : dev.trace()) {
      const std::string kind(to_string(op.what));
      out.push_back({2, op.stream, op.start_ns + offset, op.end_ns + offset, op.name.empty() ? kind : op.name,
                     kind, "\"bytes\": " + std::to_string(op.bytes)});
    }
  }
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
