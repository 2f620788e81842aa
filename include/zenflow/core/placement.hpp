/// @file
/// Where a process's host threads run: DeepSpeed's `pt_reserved_cores_perc` split of the cores
/// the process may use between the training process (PyTorch's threads, data loaders, the thread
/// that launches the kernels) and the host optimizer's threads, and the NUMA nodes of a set of
/// cores.
///
/// The split is DeepSpeed's ZenFlow's (`_split_affinity` in deepspeed/runtime/zenflow/
/// zenflow_utils.py): of the n allowed cores in ascending order, the first
/// `ceil(pt_reserved_cores_perc * n)` are the training side's, the last ones the optimizer's. A
/// reserve of zero leaves both sides every core. Where DeepSpeed then quietly shares every core
/// when the reserve takes them all, `reserve_training_cores` rejects it: pinning the optimizer
/// to no core is a configuration error, not something to paper over.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>

#if defined(__linux__)
#  include <dirent.h>
#endif

ZF_NAMESPACE_BEGIN

/// How many of `n` cores DeepSpeed's rule reserves for training: `ceil(reserved_perc * n)`, the
/// IEEE double product (reserved_perc in [0, 1]).
[[nodiscard]] inline std::int64_t training_core_count(std::int64_t n, double reserved_perc) noexcept {
  return static_cast<std::int64_t>(std::ceil(reserved_perc * static_cast<double>(n)));
}

/// Cores reserved for the training side, DeepSpeed's rule: `ceil(reserved_perc * n)` of the
/// n distinct `cores` (the double product), the lowest ids; the workers get the rest.
/// `reserved_perc == 0` (or a product that rounds to 0): both sides get every core.
/// @throws invalid_argument naming `argument` (as `function` says) unless `0 <= reserved_perc <= 1`,
/// or when the reserve leaves the workers no core (`cores` empty included).
[[nodiscard]] inline core_split
reserve_training_cores(std::span<const int> cores,
                       double reserved_perc,
                       std::string_view function = "zenflow::reserve_training_cores",
                       std::string_view argument = "reserved_perc") {
  detail::require(std::isfinite(reserved_perc) && reserved_perc >= 0.0 && reserved_perc <= 1.0, function,
                  argument, "must be in [0, 1], got " + std::to_string(reserved_perc));
  std::vector<int> sorted(cores.begin(), cores.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const auto n = static_cast<std::int64_t>(sorted.size());
  const std::int64_t reserved = training_core_count(n, reserved_perc);
  detail::require(n > 0 && reserved < n, function, argument,
                  "reserves " + std::to_string(reserved) + " of the process's " + std::to_string(n) +
                      " allowed cores for training and leaves the host workers none (lower it, or allow "
                      "the process more cores)");
  if (reserved == 0) {
    return core_split{sorted, sorted};
  }
  core_split out;
  out.training.assign(sorted.begin(), sorted.begin() + reserved);
  out.workers.assign(sorted.begin() + reserved, sorted.end());
  return out;
}

/// The CPU ids of a Linux cpulist ("0-3,8,10-11\n"), ascending; an unreadable entry is skipped.
[[nodiscard]] inline std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> out;
  std::size_t i = 0;
  const auto number = [&](int& v) {
    const std::size_t start = i;
    v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && v < (1 << 20)) {
      v = v * 10 + (text[i++] - '0');
    }
    return i > start;
  };
  while (i < text.size()) {
    int lo = 0;
    int hi = 0;
    if (number(lo)) {
      hi = lo;
      if (i < text.size() && text[i] == '-') {
        ++i;
        if (!number(hi)) {
          hi = lo - 1;
        }
      }
      for (int c = lo; c <= hi; ++c) {
        out.push_back(c);
      }
    }
    while (i < text.size() && text[i] != ',') {
      ++i;
    }
    ++i;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The NUMA nodes (ascending) that hold at least one of `cores`, read from
/// `root`/node<N>/cpulist (Linux sysfs). Empty when the layout is unknown: no such directory, or
/// a core that no node lists.
[[nodiscard]] inline std::vector<int> numa_nodes_of(std::span<const int> cores,
                                                    const std::string& root = "/sys/devices/system/node") {
  std::vector<int> nodes;
#if defined(__linux__)
  std::vector<int> found(cores.size(), 0);
  DIR* dir = opendir(root.c_str());
  if (dir == nullptr) {
    return {};
  }
  while (const dirent* e = readdir(dir)) {
    const std::string_view name(e->d_name);
    if (name.size() <= 4 || name.substr(0, 4) != "node" ||
        name.find_first_not_of("0123456789", 4) != std::string_view::npos) {
      continue;
    }
    std::ifstream in(root + "/" + std::string(name) + "/cpulist");
    const std::string list((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<int> cpus = parse_cpu_list(list);
    bool holds = false;
    for (std::size_t k = 0; k < cores.size(); ++k) {
      if (std::binary_search(cpus.begin(), cpus.end(), cores[k])) {
        found[k] = 1;
        holds = true;
      }
    }
    if (holds) {
      nodes.push_back(std::stoi(std::string(name.substr(4))));
    }
  }
  closedir(dir);
  if (std::find(found.begin(), found.end(), 0) != found.end()) {
    return {};
  }
  std::sort(nodes.begin(), nodes.end());
#else
  (void)cores;
  (void)root;
#endif
  return nodes;
}

/// Where a process's host optimizer threads were placed (engine: `stats().placement`).
struct host_placement {
  bool pinned = false;             ///< the host threads were confined to `worker_cores` (all of them)
  unsigned threads = 0;            ///< threads per host pool (its caller included)
  std::vector<int> worker_cores;   ///< the host threads' cores (every allowed core when not pinned)
  std::vector<int> training_cores; ///< reserved for the training side (pin_to_training_cores)
  std::vector<int> numa_nodes;     ///< NUMA nodes of `worker_cores`; empty: unknown

  /// The cores to confine the host threads to: `worker_cores` when pinned, else none (anywhere).
  [[nodiscard]] std::vector<int> pinned_cores() const { return pinned ? worker_cores : std::vector<int>{}; }

  /// One line: "pinned to cores 2-3 (NUMA node 0), training cores 0-1, 2 threads per pool".
  [[nodiscard]] std::string describe() const {
    const auto ranges = [](const std::vector<int>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size();) {
        std::size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) {
          ++j;
        }
        s += (s.empty() ? "" : ",") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
        i = j + 1;
      }
      return s.empty() ? std::string("none") : s;
    };
    std::string nodes = numa_nodes.empty()
                            ? std::string("NUMA node unknown")
                            : (numa_nodes.size() == 1 ? "NUMA node " : "NUMA nodes ") + ranges(numa_nodes);
    return std::string(pinned ? "pinned to cores " : "not pinned, cores ") + ranges(worker_cores) + " (" +
           nodes + "), training cores " + ranges(training_cores) + ", " + std::to_string(threads) +
           " thread" + (threads == 1 ? "" : "s") + " per pool";
  }
};

/// Runs the calling thread on `cores` for its lifetime, then gives it back the mask it had: memory
/// first touched in between (zero-filled vectors, copies) lands on the NUMA node of `cores` under
/// Linux's first-touch policy. Nothing happens for empty `cores`, or where the system refuses.
class scoped_thread_affinity {
public:
  explicit scoped_thread_affinity(std::span<const int> cores) {
    if (!cores.empty()) {
      saved_ = current_thread_affinity();
      active_ = !saved_.empty() && pin_current_thread(cores);
    }
  }
  scoped_thread_affinity(const scoped_thread_affinity&) = delete;
  scoped_thread_affinity& operator=(const scoped_thread_affinity&) = delete;
  ~scoped_thread_affinity() {
    if (active_) {
      (void)pin_current_thread(saved_);
    }
  }
  /// True when the thread was moved (and will be moved back).
  [[nodiscard]] bool active() const noexcept { return active_; }

private:
  std::vector<int> saved_;
  bool active_ = false;
};

/// Pins the calling thread (the training thread: it launches the kernels) to the cores the
/// placement reserved for training, as DeepSpeed does to its training process. Call it from
/// the training thread after the engine's initialize(); the threads it starts afterwards (an
/// OpenMP pool first used later, data loaders) inherit the mask. Returns false, and changes
/// nothing, where the system refuses or nothing was pinned.
inline bool pin_to_training_cores(const host_placement& placement) {
  return placement.pinned && pin_current_thread(placement.training_cores);
}

ZF_NAMESPACE_END
