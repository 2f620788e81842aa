// Size sweep of zenflow's host optimizer primitives against DeepSpeed's CPU Adam, in one run.
//
// For each size n (elements, 4K .. 64M by default) it times, in interleaved rounds (the order of
// the cases rotates every round, with a pause between samples so that no case inherits another's
// spinning threads), and reports the median per call:
//   zf_adamw       host::adamw_span, fp32 master/m/v/grad (28 B per parameter)
//   zf_adamw_bf16m the same with bf16 moments (20 B per parameter)
//   ds_adamw       DeepSpeed's CPU Adam (Step_AVX<8>, OpenMP), fp32, 28 B per parameter
//   zf_window      host::adamw_window: the fused ZenFlow host window (bf16 slot and upload),
//                  1024-element channels, every channel unselected (36 B per parameter)
//   zf_window_keep  the same leaving the accumulator as it is (32 B; the next window assigns it)
//   zf_window_bf16m the same as zf_window_keep with bf16 moments (24 B per parameter)
//   zf_window_int8m the same with int8 moments (20 B per parameter, + an fp32 scale per 64 each)
//   zf_accumulate  host::accumulate_channels, bf16 slot into fp32 (10 B per parameter)
//   zf_assign      the same on a window's first step: acc written, not read (6 B per parameter)
//   ds_adamw_bf16   DeepSpeed's CPU Adam on bf16 params, grads and moments (14 B; no fp32 master)
//   ds_adamw_bf16p  DeepSpeed's CPU Adam on bf16 params and grads, fp32 moments (22 B)
//                   (the two bf16 pairs DeepSpeed registers; AVX-512 builds only; DeepSpeed has no
//                   fp32-master + bf16-moment pair, zenflow's zf_adamw_bf16m)
//   zf_window_work  ZenFlow's whole CPU work of one host window as the engine does it: S steps of
//                   accumulation (assign, then S - 1 accumulates) and the window's AdamW (accumulator
//                   kept, bf16 upload), on the unselected share u of the channels:
//                   u x (6 + 10 (S - 1) + 30) B per parameter (S = --window-steps, u = --unselected)
//   ds_zenflow_host DeepSpeed ZenFlow's CPU work for the same window: its optimizer process's CPU
//                   Adam on the whole fp32 partition plus the copy into the stale snapshot
//                   (cpu_adam_impl.cpp, ZenFlowAdam::run_step): 28 + 8 = 36 B per parameter; its
//                   accumulation goes through the GPU (DMA only, no CPU pass: see NOTES)
// and zf/ds = median(zf case) / median(ds_adamw) per size. DeepSpeed is optional: a shared library
// built by deepspeed_baseline/build_deepspeed_baseline.sh, given with --ds PATH or the environment
// variable ZF_DEEPSPEED_ADAM; without it the ds columns are absent (never made up).
//
//   zf_host_sweep [--ds LIB] [--threads 2] [--min 4096] [--max 67108864] [--factor 4]
//                 [--rounds 11] [--pause-ms 20] [--sample-mb 256] [--spin-us 50]
//                 [--cases zf_adamw,ds_adamw] [--json FILE]
//
// The machine's load average (/proc/loadavg) before and after each size goes into the JSON: on a
// shared machine a median is only as good as the minute it was taken in, so say which minute.
//
// Output: a table on stdout (one line per size and case) and the JSON file (default
// host_sweep.json). A sample is one untimed call (it wakes the threads that slept through the
// pause) and then `reps` timed calls back to back, the same `reps` for every case of a size; small
// sizes therefore run on warm caches (the same arrays back to back), for both libraries alike.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/optim/cpu_adamw.hpp>

namespace {

using zenflow::bfloat16;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string ds_path;
  unsigned threads = 2;
  std::int64_t min_n = 4096;
  std::int64_t max_n = std::int64_t{64} << 20;
  std::int64_t factor = 4;
  int rounds = 11;
  int pause_ms = 20;
  int spin_us = -1;               // the pool's spin before its workers sleep; -1: the pool's default
  double sample_mb = 256.0;       // fp32 AdamW traffic per timed sample (28 B per parameter per call)
  int window_steps = 4;           // S of zf_window_work
  double unselected = 0.9;        // u of zf_window_work: the host's share of the channels
  std::vector<std::string> cases; // empty: every case
  std::string json = "host_sweep.json";
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "zf_host_sweep: %s\nusage: zf_host_sweep [--ds LIB] [--threads N] [--min N] [--max N] "
               "[--factor F] [--rounds R] [--pause-ms MS] [--sample-mb MB] [--spin-us US] [--cases A,B] "
               "[--json FILE]\n",
               why);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  if (const char* env = std::getenv("ZF_DEEPSPEED_ADAM")) {
    o.ds_path = env;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      usage(("missing value after " + a).c_str());
    }
    const std::string v = argv[++i];
    if (a == "--ds") {
      o.ds_path = v;
    } else if (a == "--threads") {
      o.threads = static_cast<unsigned>(std::stoul(v));
    } else if (a == "--min") {
      o.min_n = std::stoll(v);
    } else if (a == "--max") {
      o.max_n = std::stoll(v);
    } else if (a == "--factor") {
      o.factor = std::stoll(v);
    } else if (a == "--rounds") {
      o.rounds = std::stoi(v);
    } else if (a == "--sample-mb") {
      o.sample_mb = std::stod(v);
    } else if (a == "--spin-us") {
      o.spin_us = std::stoi(v);
    } else if (a == "--window-steps") {
      o.window_steps = std::stoi(v);
    } else if (a == "--unselected") {
      o.unselected = std::stod(v);
    } else if (a == "--pause-ms") {
      o.pause_ms = std::stoi(v);
    } else if (a == "--cases") {
      for (std::size_t b = 0; b <= v.size();) {
        const std::size_t e = std::min(v.find(',', b), v.size());
        o.cases.push_back(v.substr(b, e - b));
        b = e + 1;
      }
    } else if (a == "--json") {
      o.json = v;
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.threads < 1 || o.min_n < 1024 || o.max_n < o.min_n || o.factor < 2 || o.rounds < 1 ||
      o.pause_ms < 0 || o.window_steps < 1 || !(o.unselected > 0.0 && o.unselected <= 1.0)) {
    usage("bad values: need threads >= 1, min >= 1024, max >= min, factor >= 2, rounds >= 1, pause-ms >= 0, "
          "sample-mb > 0");
  }
  return o;
}

/// DeepSpeed's CPU Adam through the driver library (bench/optim/deepspeed_baseline/driver.cpp).
struct deepspeed_adam {
  using step_fn =
      int (*)(float*, float*, float*, float*, std::size_t, std::size_t, float, float, float, float, float);
  void* lib = nullptr;
  step_fn step = nullptr;
  using step_bf16_fn =
      int (*)(void*, void*, void*, void*, std::size_t, std::size_t, float, float, float, float, float);
  step_bf16_fn step_bf16 = nullptr;      // bf16 params/grads/moments; null: an older driver
  step_bf16_fn step_bf16_f32s = nullptr; // bf16 params/grads, fp32 moments
  using zenflow_fn = int (*)(
      float*, float*, float*, float*, float*, std::size_t, std::size_t, float, float, float, float, float);
  zenflow_fn zenflow_step = nullptr; // DeepSpeed ZenFlow's optimizer-process step (with the stale copy)
  int simd_width = 0;

  bool load(const std::string& path, unsigned threads) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "zf_host_sweep: cannot load %s: %s\n", path.c_str(), dlerror());
      return false;
    }
    step = reinterpret_cast<step_fn>(dlsym(lib, "zf_ds_adam_step_f32"));
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "zf_ds_set_threads"));
    auto width = reinterpret_cast<int (*)()>(dlsym(lib, "zf_ds_simd_width"));
    if (step == nullptr || set_threads == nullptr || width == nullptr) {
      std::fprintf(stderr, "zf_host_sweep: %s is not the zenflow DeepSpeed driver\n", path.c_str());
      return false;
    }
    set_threads(static_cast<int>(threads));
    simd_width = width();
    step_bf16 = reinterpret_cast<step_bf16_fn>(dlsym(lib, "zf_ds_adam_step_bf16"));
    step_bf16_f32s = reinterpret_cast<step_bf16_fn>(dlsym(lib, "zf_ds_adam_step_bf16_f32state"));
    zenflow_step = reinterpret_cast<zenflow_fn>(dlsym(lib, "zf_ds_zenflow_step_f32"));
    return true;
  }
};

/// The 1-minute load average, or -1 where /proc/loadavg cannot be read.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1.0;
  return (f >> l) ? l : -1.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::lround(q * static_cast<double>(v.size() - 1)))];
}

struct bench_case {
  std::string name;
  double bytes_per_param;
  std::function<void()> call;
  std::int64_t reps = 1;
  std::vector<double> samples_us;
};

/// Seconds for `reps` calls.
double time_calls(const std::function<void()>& call, std::int64_t reps) {
  const auto t0 = clock_type::now();
  for (std::int64_t r = 0; r < reps; ++r) {
    call();
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "zf_host_sweep: %s failed (%d)\n", what, static_cast<int>(e));
    std::exit(1);
  }
}

} // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  deepspeed_adam ds;
  const bool with_ds = !o.ds_path.empty() && ds.load(o.ds_path, o.threads);
  if (!o.ds_path.empty() && !with_ds) {
    return 1;
  }
  zenflow::worker_pool_options pool_options;
  pool_options.threads = o.threads;
  if (o.spin_us >= 0) {
    pool_options.spin_microseconds = static_cast<unsigned>(o.spin_us);
  }
  zenflow::worker_pool pool(pool_options);
  std::printf("zf_host_sweep: %u threads, zenflow SIMD path %s, DeepSpeed %s\n", o.threads,
              zenflow::host::simd_path_name(zenflow::host::active_simd_path()),
              with_ds ? (o.ds_path + " (SIMD width " + std::to_string(ds.simd_width) + ")").c_str()
                      : "not given (--ds or ZF_DEEPSPEED_ADAM): no ds columns");
  std::printf("median of %d interleaved rounds per size, us per call; zf/ds < 1 means zenflow is faster\n",
              o.rounds);
  std::printf("%10s  %-16s %10s %10s %9s %7s\n", "n", "case", "median_us", "p25-p75", "GB/s", "zf/ds");

  nlohmann::json out;
  out["threads"] = o.threads;
  out["rounds"] = o.rounds;
  out["pause_ms"] = o.pause_ms;
  out["pool_spin_us"] = pool_options.spin_microseconds;
  out["sample_mb"] = o.sample_mb;
  out["window_steps"] = o.window_steps;
  out["unselected"] = o.unselected;
  out["zenflow_simd"] = zenflow::host::simd_path_name(zenflow::host::active_simd_path());
  out["deepspeed_library"] = with_ds ? o.ds_path : "";
  out["hardware_concurrency"] = std::thread::hardware_concurrency();
  out["sizes"] = nlohmann::json::array();

  zenflow::adamw_hparams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.01f;
  // Longer than OpenMP's spin-wait after a parallel region (3-5 ms measured here), so that no
  // case inherits another's spinning threads.
  const auto pause = std::chrono::milliseconds(o.pause_ms);
  for (std::int64_t n = o.min_n; n <= o.max_n; n *= o.factor) {
    std::mt19937 gen(static_cast<unsigned>(n));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const auto N = static_cast<std::size_t>(n);
    const auto wanted = [&](const char* name) {
      return o.cases.empty() || std::find(o.cases.begin(), o.cases.end(), name) != o.cases.end();
    };
    // Each case's own buffers only when it runs (--cases), so that larger sizes fit with fewer cases.
    std::vector<float> p(N), g(N), m, v, dp, dm, dv, dg;
    for (std::size_t i = 0; i < N; ++i) {
      p[i] = dist(gen);
      g[i] = 1e-2f * dist(gen);
    }
    if (wanted("zf_adamw")) {
      m.assign(N, 0.0f);
      v.assign(N, 0.0f);
    }
    if (with_ds && wanted("ds_adamw")) {
      dp = p;
      dg = g;
      dm.assign(N, 0.0f);
      dv.assign(N, 0.0f);
    }
    const std::int64_t L = 1024;
    const std::int64_t channels = n / L;
    std::vector<float> acc(N, 0.0f);
    std::vector<bfloat16> slot(N), upload(N);
    for (std::size_t i = 0; i < N; ++i) {
      slot[i] = zenflow::from_float<bfloat16>(1e-2f * dist(gen));
    }
    std::vector<std::int32_t> idx(static_cast<std::size_t>(channels)), counts(idx.size(), 0);
    for (std::size_t c = 0; c < idx.size(); ++c) {
      idx[c] = static_cast<std::int32_t>(c);
    }
    const bfloat16 zero16 = zenflow::from_float<bfloat16>(0.0f);
    std::vector<float> wp, wm, wv, wpk, wmk, wvk, wpb, pb;
    std::vector<bfloat16> mb, vb, wmb, wvb;
    if (wanted("zf_window")) {
      wp = p;
      wm.assign(N, 0.0f);
      wv.assign(N, 0.0f);
    }
    if (wanted("zf_window_keep")) {
      wpk = p;
      wmk.assign(N, 0.0f);
      wvk.assign(N, 0.0f);
    }
    if (wanted("zf_window_bf16m")) {
      wpb = p;
      wmb.assign(N, zero16);
      wvb.assign(N, zero16);
    }
    if (wanted("zf_adamw_bf16m")) {
      pb = p;
      mb.assign(N, zero16);
      vb.assign(N, zero16);
    }
    std::vector<std::int32_t> counts_k(counts), counts_b(counts);
    std::int32_t count_b = 0;
    std::int32_t count = 0;
    std::size_t ds_step = 0;

    std::vector<bench_case> cases;
    cases.push_back({"zf_adamw", 28.0, [&] {
                       check(zenflow::host::adamw_span<float, float>(p.data(), m.data(), v.data(), g.data(),
                                                                     nullptr, n, ++count, hp, 1.0f, &pool),
                             "adamw_span");
                     }});
    cases.push_back({"zf_adamw_bf16m", 20.0, [&] {
                       check(zenflow::host::adamw_span<float, float, bfloat16>(pb.data(), mb.data(),
                                                                               vb.data(), g.data(), nullptr,
                                                                               n, ++count_b, hp, 1.0f, &pool),
                             "adamw_span bf16 moments");
                     }});
    if (with_ds) {
      cases.push_back({"ds_adamw", 28.0, [&] {
                         if (ds.step(dp.data(), dg.data(), dm.data(), dv.data(), N, ++ds_step, hp.lr,
                                     hp.beta1, hp.beta2, hp.eps, hp.weight_decay) != 0) {
                           std::fprintf(stderr, "zf_host_sweep: DeepSpeed driver refused n=%lld\n",
                                        static_cast<long long>(n));
                           std::exit(1);
                         }
                       }});
    }
    const zenflow::channel_state wstate{wp.data(), wm.data(), wv.data(), counts.data(), channels, L};
    cases.push_back({"zf_window", 36.0, [&] {
                       check(zenflow::host::adamw_window<bfloat16, bfloat16>(wstate, acc.data(), idx.data(),
                                                                             channels, slot.data(), 0.5f, 4,
                                                                             hp, upload.data(), &pool),
                             "adamw_window");
                     }});
    const zenflow::channel_state kstate{wpk.data(), wmk.data(), wvk.data(), counts_k.data(), channels, L};
    cases.push_back({"zf_window_keep", 32.0, [&] {
                       check(zenflow::host::adamw_window<bfloat16, bfloat16>(
                                 kstate, acc.data(), idx.data(), channels, slot.data(), 0.5f, 4, hp,
                                 upload.data(), &pool, zenflow::host::window_acc::keep),
                             "adamw_window keep");
                     }});
    const zenflow::channel_state_bf16m bstate{wpb.data(),      wmb.data(), wvb.data(),
                                              counts_b.data(), channels,   L};
    cases.push_back({"zf_window_bf16m", 24.0, [&] {
                       check(zenflow::host::adamw_window<bfloat16, bfloat16, bfloat16>(
                                 bstate, acc.data(), idx.data(), channels, slot.data(), 0.5f, 4, hp,
                                 upload.data(), &pool, zenflow::host::window_acc::keep),
                             "adamw_window bf16 moments");
                     }});
    // int8 moments (host_moments "int8"): a byte per moment and an fp32 scale per 64 of a row.
    const auto blocks =
        static_cast<std::size_t>(zenflow::detail::q8_blocks(L)) * static_cast<std::size_t>(channels);
    const bool int8m = wanted("zf_window_int8m");
    std::vector<std::uint8_t> qm(int8m ? N : 0, 0), qv(int8m ? N : 0, 0);
    std::vector<float> qms(int8m ? blocks : 0, 0.0f), qvs(int8m ? blocks : 0, 0.0f);
    std::vector<float> wpq = int8m ? p : std::vector<float>{};
    std::vector<std::int32_t> counts_q(counts);
    const zenflow::basic_channel_state<zenflow::int8_moment> qstate{
        wpq.data(),
        {qm.data(), qms.data(), L, zenflow::detail::moment_m},
        {qv.data(), qvs.data(), L, zenflow::detail::moment_v},
        counts_q.data(),
        channels,
        L};
    cases.push_back({"zf_window_int8m", 20.0, [&] {
                       check(zenflow::host::adamw_window<bfloat16, bfloat16, zenflow::int8_moment>(
                                 qstate, acc.data(), idx.data(), channels, slot.data(), 0.5f, 4, hp,
                                 upload.data(), &pool, zenflow::host::window_acc::keep),
                             "adamw_window int8 moments");
                     }});
    cases.push_back({"zf_assign", 6.0, [&] {
                       check(zenflow::host::accumulate_channels<bfloat16>(
                                 acc.data(), channels, L, slot.data(), idx.data(), channels, 0.5f, &pool,
                                 zenflow::host::accumulate_mode::assign),
                             "accumulate_channels assign");
                     }});
    cases.push_back({"zf_accumulate", 10.0, [&] {
                       check(zenflow::host::accumulate_channels<bfloat16>(
                                 acc.data(), channels, L, slot.data(), idx.data(), channels, 0.5f, &pool),
                             "accumulate_channels");
                     }});

    // bf16 DeepSpeed (AVX-512 builds: the driver refuses otherwise, and the case is left out).
    std::vector<bfloat16> bp, bg, bm, bv, bp2;
    std::vector<float> bm2, bv2;
    std::size_t ds_step_b = 0;
    std::size_t ds_step_b2 = 0;
    const auto ds_call = [&](deepspeed_adam::step_bf16_fn f, void* pp, void* mm, void* vv, std::size_t& t) {
      return f(pp, bg.data(), mm, vv, N, ++t, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay);
    };
    if (with_ds && (wanted("ds_adamw_bf16") || wanted("ds_adamw_bf16p"))) {
      bp.resize(N);
      bg.resize(N);
      for (std::size_t i = 0; i < N; ++i) {
        bp[i] = zenflow::from_float<bfloat16>(p[i]);
        bg[i] = zenflow::from_float<bfloat16>(g[i]);
      }
      bp2 = bp;
      bm.assign(N, zenflow::from_float<bfloat16>(0.0f));
      bv = bm;
      bm2.assign(N, 0.0f);
      bv2.assign(N, 0.0f);
      if (ds.step_bf16 != nullptr && ds_call(ds.step_bf16, bp.data(), bm.data(), bv.data(), ds_step_b) == 0) {
        cases.push_back({"ds_adamw_bf16", 14.0,
                         [&] { (void)ds_call(ds.step_bf16, bp.data(), bm.data(), bv.data(), ds_step_b); }});
      }
      if (ds.step_bf16_f32s != nullptr &&
          ds_call(ds.step_bf16_f32s, bp2.data(), bm2.data(), bv2.data(), ds_step_b2) == 0) {
        cases.push_back({"ds_adamw_bf16p", 22.0, [&] {
                           (void)ds_call(ds.step_bf16_f32s, bp2.data(), bm2.data(), bv2.data(), ds_step_b2);
                         }});
      }
    }
    // One host window of ZenFlow against DeepSpeed ZenFlow's CPU work for it.
    const auto u_channels =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(o.unselected * static_cast<double>(channels)));
    std::vector<float> xp, xm, xv, xacc;
    std::vector<std::int32_t> xcounts;
    if (wanted("zf_window_work")) {
      xp = p;
      xm.assign(N, 0.0f);
      xv.assign(N, 0.0f);
      xacc.assign(N, 0.0f);
      xcounts.assign(idx.size(), 0);
      const double bytes = static_cast<double>(u_channels) / static_cast<double>(channels) *
                           (6.0 + 10.0 * (o.window_steps - 1) + 30.0);
      cases.push_back(
          {"zf_window_work", bytes, [&] {
             const zenflow::channel_state xs{xp.data(), xm.data(), xv.data(), xcounts.data(), channels, L};
             for (int s = 0; s < o.window_steps; ++s) {
               check(
                   zenflow::host::accumulate_channels<bfloat16>(
                       xacc.data(), channels, L, slot.data(), idx.data(), u_channels, 0.25f, &pool,
                       s == 0 ? zenflow::host::accumulate_mode::assign : zenflow::host::accumulate_mode::add),
                   "accumulate_channels");
             }
             check(zenflow::host::adamw_window<bfloat16, bfloat16>(
                       xs, xacc.data(), idx.data(), u_channels, nullptr, 1.0f, o.window_steps, hp,
                       upload.data(), &pool, zenflow::host::window_acc::keep, o.window_steps),
                   "adamw_window");
           }});
    }
    std::vector<float> sp, sm, sv, sstale;
    std::size_t ds_step_z = 0;
    if (with_ds && ds.zenflow_step != nullptr && wanted("ds_zenflow_host")) {
      sp = p;
      sm.assign(N, 0.0f);
      sv.assign(N, 0.0f);
      sstale.assign(N, 0.0f);
      cases.push_back({"ds_zenflow_host", 36.0, [&] {
                         if (ds.zenflow_step(sp.data(), g.data(), sm.data(), sv.data(), sstale.data(), N,
                                             ++ds_step_z, hp.lr, hp.beta1, hp.beta2, hp.eps,
                                             hp.weight_decay) != 0) {
                           std::exit(1);
                         }
                       }});
    }

    if (!o.cases.empty()) {
      std::erase_if(cases, [&](const bench_case& c) {
        return std::find(o.cases.begin(), o.cases.end(), c.name) == o.cases.end();
      });
    }
    const double load_before = load_average();
    // Warm-up (first touch, page faults). Every case at a size makes the same number of calls per
    // sample, fixed by the size (about sample_mb of fp32 AdamW traffic), never by a timing: an
    // estimate taken in one noisy moment once gave DeepSpeed 2 calls per sample and zenflow 800
    // at the same size, so the medians compared different things.
    for (auto& c : cases) {
      c.call();
    }
    const std::int64_t reps = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::ceil(o.sample_mb * 1e6 / (28.0 * static_cast<double>(n)))));
    for (auto& c : cases) {
      c.reps = reps;
    }
    for (int r = 0; r < o.rounds; ++r) {
      for (std::size_t k = 0; k < cases.size(); ++k) {
        auto& c = cases[(k + static_cast<std::size_t>(r)) % cases.size()];
        std::this_thread::sleep_for(pause);
        // One untimed call wakes the library's threads (both libraries' threads sleep during the
        // pause): the sample times back-to-back calls, as the engine makes them (a window's
        // parameters, a step's slots). The pool's cost after idle is zf_bench_transport's
        // worker_pool_dispatch_after_idle.
        c.call();
        c.samples_us.push_back(1e6 * time_calls(c.call, c.reps) / static_cast<double>(c.reps));
      }
    }

    nlohmann::json row;
    row["n"] = n;
    row["load_average_before"] = load_before;
    row["load_average_after"] = load_average();
    double ds_median = 0.0;
    for (const auto& c : cases) {
      if (c.name == "ds_adamw") {
        ds_median = median(c.samples_us);
      }
    }
    for (const auto& c : cases) {
      const double med = median(c.samples_us);
      const double gbs = c.bytes_per_param * static_cast<double>(n) / (med * 1e-6) / 1e9;
      nlohmann::json e;
      e["median_us"] = med;
      e["min_us"] = *std::min_element(c.samples_us.begin(), c.samples_us.end());
      e["p25_us"] = quantile(c.samples_us, 0.25);
      e["p75_us"] = quantile(c.samples_us, 0.75);
      e["reps_per_sample"] = c.reps;
      e["bytes_per_param"] = c.bytes_per_param;
      e["GB_per_s"] = gbs;
      e["samples_us"] = c.samples_us;
      char ratio[16] = "";
      if (ds_median > 0.0 && c.name != "ds_adamw") {
        e["zf_over_ds"] = med / ds_median;
        std::snprintf(ratio, sizeof(ratio), "%.2f", med / ds_median);
      }
      row[c.name] = e;
      char spread[32];
      std::snprintf(spread, sizeof(spread), "%.1f-%.1f", quantile(c.samples_us, 0.25),
                    quantile(c.samples_us, 0.75));
      std::printf("%10lld  %-16s %10.1f %10s %9.2f %7s\n", static_cast<long long>(n), c.name.c_str(), med,
                  spread, gbs, ratio);
    }
    std::printf("%10lld  load average %.2f -> %.2f\n", static_cast<long long>(n), load_before,
                row["load_average_after"].get<double>());
    std::fflush(stdout);
    out["sizes"].push_back(row);
  }
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}
