// The host window and the accumulation beside a busy training process, with and without core
// placement (config pin_host_threads). For each configuration, in interleaved rounds (the order
// rotates every round), it times the engine's two host passes on the same arrays:
//   window      host::adamw_window as the engine calls it (fp32 master/m/v, accumulator kept,
//               bf16 upload; 30 B per parameter)
//   accumulate  host::accumulate_channels, a bf16 slot into the fp32 accumulator (10 B)
// under four configurations:
//   alone       zenflow on every allowed core (one pool thread per core), nothing else running
//   alone_placed zenflow pinned to the cores the split leaves it (one thread per such core)
//   spin        as alone, beside a co-running process that busy-waits on every allowed core (as
//               an OpenMP pool with OMP_WAIT_POLICY=active does between parallel regions)
//   placed      as alone_placed, with the spinning process confined to the reserved cores (what
//               pt_reserved_cores_perc + pin_host_threads + pin_to_training_cores give)
// The spinner is this program re-executed (`--spin CORES THREADS`), started before each sample
// and killed after it. JSON out (--json), with /proc/loadavg before and after each round.
//
//   zf_bench_host_placement [--n 4194304] [--rounds 7] [--reps 10] [--reserve 0.5]
//                           [--spin-threads 0 (= allowed cores)] [--json FILE]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

extern char** environ;

namespace {

using zenflow::bfloat16;
using clock_type = std::chrono::steady_clock;

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string cores_text(const std::vector<int>& v) {
  std::string s;
  for (int c : v) {
    s += (s.empty() ? "" : ",") + std::to_string(c);
  }
  return s;
}

/// The spinner: `threads` threads that busy-wait forever on `cores` (a comma list).
[[noreturn]] void spin(const std::string& cores, unsigned threads) {
  const std::vector<int> set = zenflow::parse_cpu_list(cores);
  (void)zenflow::pin_current_thread(set); // the threads below inherit it
  std::vector<std::thread> t;
  static std::atomic<std::uint64_t> sink{0};
  for (unsigned i = 0; i < threads; ++i) {
    t.emplace_back([] {
      std::uint64_t x = 0;
      for (;;) {
        for (int k = 0; k < 1 << 20; ++k) {
          x = x * 6364136223846793005ull + 1;
        }
        sink.fetch_add(x & 1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& th : t) {
    th.join();
  }
  std::exit(0);
}

/// A running spinner process (none when `cores` is empty).
struct spinner {
  pid_t pid = -1;
  spinner(const std::vector<int>& cores, unsigned threads) {
    if (cores.empty() || threads == 0) {
      return;
    }
    std::string exe = "/proc/self/exe";
    std::string flag = "--spin";
    std::string list = cores_text(cores);
    std::string n = std::to_string(threads);
    char* argv[] = {exe.data(), flag.data(), list.data(), n.data(), nullptr};
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, environ) != 0) {
      std::fprintf(stderr, "zf_bench_host_placement: cannot start the spinner\n");
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // its threads running
  }
  ~spinner() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  }
  spinner(const spinner&) = delete;
  spinner& operator=(const spinner&) = delete;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "zf_bench_host_placement: %s failed (%d)\n", what, static_cast<int>(e));
    std::exit(1);
  }
}

struct configuration {
  std::string name;
  bool placed;           // zenflow's pool and the calling thread on the worker cores
  std::vector<int> spin; // the spinner's cores (empty: none)
  zenflow::worker_pool* pool;
  std::vector<double> window_us, accumulate_us;
};

} // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--spin") {
    spin(argv[2], static_cast<unsigned>(std::stoul(argv[3])));
  }
  std::int64_t n = std::int64_t{4} << 20;
  int rounds = 7;
  int reps = 10;
  double reserve = 0.5;
  unsigned spin_threads = 0;
  std::string json = "host_placement.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::string v = argv[i + 1];
    if (a == "--n") {
      n = std::stoll(v);
    } else if (a == "--rounds") {
      rounds = std::stoi(v);
    } else if (a == "--reps") {
      reps = std::stoi(v);
    } else if (a == "--reserve") {
      reserve = std::stod(v);
    } else if (a == "--spin-threads") {
      spin_threads = static_cast<unsigned>(std::stoul(v));
    } else if (a == "--json") {
      json = v;
    } else {
      std::fprintf(stderr, "zf_bench_host_placement: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<int> allowed = zenflow::allowed_cores();
  const zenflow::core_split split =
      zenflow::reserve_training_cores(allowed, reserve, "zf_bench_host_placement", "--reserve");
  if (spin_threads == 0) {
    spin_threads = static_cast<unsigned>(allowed.size());
  }
  zenflow::host_placement placed_info;
  placed_info.pinned = true;
  placed_info.threads = static_cast<unsigned>(split.workers.size());
  placed_info.worker_cores = split.workers;
  placed_info.training_cores = split.training;
  placed_info.numa_nodes = zenflow::numa_nodes_of(split.workers);

  zenflow::worker_pool_options all;
  all.threads = static_cast<unsigned>(allowed.size());
  zenflow::worker_pool pool_all(all);
  zenflow::worker_pool_options w;
  w.confine_to = split.workers;
  zenflow::worker_pool pool_placed(w);

  const std::int64_t L = 1024;
  const std::int64_t channels = n / L;
  n = channels * L;
  const auto N = static_cast<std::size_t>(n);
  std::mt19937 gen(2026);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> master(N), m(N, 0.0f), v(N, 0.0f), acc(N, 0.0f);
  std::vector<bfloat16> slot(N), upload(N);
  for (std::size_t i = 0; i < N; ++i) {
    master[i] = dist(gen);
    slot[i] = zenflow::from_float<bfloat16>(1e-2f * dist(gen));
  }
  std::vector<std::int32_t> idx(static_cast<std::size_t>(channels)), counts(idx.size(), 0);
  for (std::size_t c = 0; c < idx.size(); ++c) {
    idx[c] = static_cast<std::int32_t>(c);
  }
  zenflow::adamw_hparams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.01f;
  const zenflow::channel_state st{master.data(), m.data(), v.data(), counts.data(), channels, L};

  std::vector<configuration> configs = {
      {"alone", false, {}, &pool_all, {}, {}},
      {"alone_placed", true, {}, &pool_placed, {}, {}},
      {"spin", false, allowed, &pool_all, {}, {}},
      {"placed", true, split.training, &pool_placed, {}, {}},
  };
  std::printf(
      "zf_bench_host_placement: n %lld, %d rounds x %d calls, allowed cores %s; placed: %s; spinner: %u "
      "threads\nload before: %s\n",
      static_cast<long long>(n), rounds, reps, cores_text(allowed).c_str(), placed_info.describe().c_str(),
      spin_threads, load_average().c_str());
  nlohmann::json out;
  out["n"] = n;
  out["rounds"] = rounds;
  out["reps"] = reps;
  out["allowed_cores"] = allowed;
  out["placement"] = placed_info.describe();
  out["spin_threads"] = spin_threads;
  out["hardware_concurrency"] = std::thread::hardware_concurrency();
  out["load"] = nlohmann::json::array();
  std::int32_t windows = 0;
  for (int r = 0; r < rounds; ++r) {
    out["load"].push_back(load_average());
    for (std::size_t k = 0; k < configs.size(); ++k) {
      auto& c = configs[(k + static_cast<std::size_t>(r)) % configs.size()];
      (void)zenflow::pin_current_thread(c.placed ? split.workers : allowed);
      const spinner s(c.spin, spin_threads);
      const auto time = [&](const std::function<void()>& call) {
        call(); // wakes the pool, warms the pages
        const auto t0 = clock_type::now();
        for (int i = 0; i < reps; ++i) {
          call();
        }
        return 1e6 * std::chrono::duration<double>(clock_type::now() - t0).count() / reps;
      };
      c.window_us.push_back(time([&] {
        check(zenflow::host::adamw_window<bfloat16, bfloat16>(st, acc.data(), idx.data(), channels, nullptr,
                                                              1.0f, 4, hp, upload.data(), c.pool,
                                                              zenflow::host::window_acc::keep, 4),
              "adamw_window");
        ++windows;
      }));
      c.accumulate_us.push_back(time([&] {
        check(zenflow::host::accumulate_channels<bfloat16>(acc.data(), channels, L, slot.data(), idx.data(),
                                                           channels, 0.25f, c.pool),
              "accumulate_channels");
      }));
    }
  }
  (void)zenflow::pin_current_thread(allowed);
  out["load"].push_back(load_average());
  const double alone_w = median(configs[0].window_us);
  const double alone_a = median(configs[0].accumulate_us);
  std::printf("%-13s %12s %8s %14s %8s\n", "config", "window_us", "/alone", "accumulate_us", "/alone");
  for (const auto& c : configs) {
    const double mw = median(c.window_us);
    const double ma = median(c.accumulate_us);
    std::printf("%-13s %12.0f %8.2f %14.0f %8.2f\n", c.name.c_str(), mw, mw / alone_w, ma, ma / alone_a);
    nlohmann::json e;
    e["placed"] = c.placed;
    e["spinner_cores"] = c.spin;
    e["window_us"] = c.window_us;
    e["accumulate_us"] = c.accumulate_us;
    e["window_median_us"] = mw;
    e["accumulate_median_us"] = ma;
    e["window_GB_per_s"] = 30.0 * static_cast<double>(n) / (mw * 1e-6) / 1e9;
    e["accumulate_GB_per_s"] = 10.0 * static_cast<double>(n) / (ma * 1e-6) / 1e9;
    out["configs"][c.name] = e;
  }
  std::printf("load after: %s\n", out["load"].back().get<std::string>().c_str());
  std::ofstream(json) << out.dump(2) << "\n";
  std::printf("wrote %s\n", json.c_str());
  return windows > 0 ? 0 : 1;
}
