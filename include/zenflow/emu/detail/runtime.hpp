/// @file
/// The kernel emulator's runtime: a grid runs block after block on the calling OS thread, each
/// block's threads as fibers (fiber.hpp) scheduled here. A thread runs until it reaches a barrier
/// (`__syncthreads*`), a warp operation (shuffles, votes, `__syncwarp`), `__nanosleep` or its end;
/// a barrier completes when every thread of the block that has not exited waits at one, a warp
/// operation when every lane of its mask waits at one. Between those points the threads' order is
/// the natural one or, seeded, a random one drawn again at every barrier (options::order).
///
/// The detectors (each reported through `emu::reports()`; a launch that reported fails):
/// - a barrier that some threads of the block do not reach (they exited before it, or wait at
///   another `__syncthreads` in the source), and warp operations whose lanes do not all arrive
///   or arrive at different operations; the stuck wait is then forced through so that the launch
///   ends;
/// - with options::racecheck, two threads of a block writing one byte of shared memory between
///   two barriers (writes of the same value are not seen); under ThreadSanitizer every race of
///   the kernel's memory, reads included, between the threads of a block and between blocks
///   (fibers are threads to it, synchronised only where a barrier, a warp operation or a
///   `__threadfence` says);
/// - launch limits: threads per block, block and grid dimensions, shared memory per block (an
///   H100's: 48 KiB static, 227 KiB with dynamic), kernel parameter bytes;
/// - shared memory starts filled with 0xff bytes (a float NaN), as a GPU's holds garbage.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <vector_types.h>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/emu/detail/fiber.hpp>

// The running thread's indices, as a kernel reads them (CUDA's builtins, in the global namespace):
// the scheduler sets them on the OS thread before it resumes a thread's fiber.
inline thread_local uint3 threadIdx{};
inline thread_local uint3 blockIdx{};
inline thread_local dim3 blockDim{};
inline thread_local dim3 gridDim{};

ZF_NAMESPACE_BEGIN
namespace emu {

/// The order in which the threads of a block run between two synchronisation points.
enum class thread_order : std::uint8_t {
  natural,  ///< thread 0, 1, 2, ... and blocks in grid order
  shuffled, ///< a random permutation, drawn again at every barrier, and blocks in random order
};

/// What the emulator does (process-wide; `set_options`, `scoped_options`).
struct options {
  thread_order order = thread_order::natural;
  /// The shuffled order's seed (with the kernel's name and the block's index).
  std::uint64_t seed = 1;
  /// Check every byte of shared memory for two writers between barriers (a copy and a compare
  /// of the block's shared memory each time a thread stops: slow for large blocks).
  bool racecheck = false;
};

/// The limits a launch is held to: an H100's (compute capability 9.0).
struct device_limits {
  static constexpr unsigned warp_size = 32;
  static constexpr unsigned max_threads_per_block = 1024;
  static constexpr unsigned max_block_x = 1024;
  static constexpr unsigned max_block_y = 1024;
  static constexpr unsigned max_block_z = 64;
  static constexpr unsigned max_grid_x = 2147483647u;
  static constexpr unsigned max_grid_y = 65535;
  static constexpr unsigned max_grid_z = 65535;
  /// Static shared memory per block, and dynamic without the opt-in attribute.
  static constexpr std::size_t shared_bytes = 48 * 1024;
  /// Static plus dynamic shared memory per block with the opt-in (not modelled: dynamic shared
  /// memory above `shared_bytes` is refused).
  static constexpr std::size_t shared_bytes_optin = 227 * 1024;
  /// Kernel parameters (CUDA 12.1 and later, Volta and later).
  static constexpr std::size_t param_bytes = 32764;
};

namespace detail {

struct log_state {
  std::mutex mutex;
  std::vector<std::string> reports;
  std::set<std::string> kernels;
  options opts;
};
inline log_state& log() {
  static auto* s = new log_state; // NOLINT: never freed (stream threads may launch after main)
  return *s;
}

/// The kernel's name as written at a launch site ("ns::name<T, U>"): its last identifier.
inline std::string base_name(const char* written) {
  std::string s(written);
  if (const auto lt = s.find('<'); lt != std::string::npos) {
    s.erase(lt);
  }
  while (!s.empty() && s.back() == ' ') {
    s.pop_back();
  }
  if (const auto colon = s.rfind("::"); colon != std::string::npos) {
    s.erase(0, colon + 2);
  }
  const auto b = s.find_first_not_of(" (");
  return b == std::string::npos ? s : s.substr(b);
}

/// The last error of a launch on this OS thread (`cudaGetLastError`'s twin: taken once).
inline cudaError_t& last_error() noexcept {
  static thread_local cudaError_t e = cudaSuccess;
  return e;
}

enum class wait_state : std::uint8_t { runnable, block_barrier, warp_op, exited };
enum class warp_kind : std::uint8_t { sync, shfl, shfl_up, shfl_down, shfl_xor, any, all, ballot };
enum class barrier_kind : std::uint8_t { plain, vote_or, vote_and, vote_count };

/// One thread of the running block: what the builtins read, and where it waits.
struct thread_rec {
  uint3 thread_idx{};
  uint3 block_idx{};
  dim3 block_dim{};
  dim3 grid_dim{};
  unsigned linear = 0;
  unsigned warp = 0;
  unsigned lane = 0;
  wait_state state = wait_state::runnable;
  const char* file = "";
  int line = 0;
  unsigned block_episode = 0; // barriers passed
  unsigned warp_episode = 0;  // warp operations passed
  // a barrier's vote, or a warp operation's operands and result
  barrier_kind bkind = barrier_kind::plain;
  warp_kind wkind = warp_kind::sync;
  int vote = 0;
  unsigned mask = 0;
  int arg = 0;
  int width = 32;
  unsigned value_bytes = 0;
  alignas(16) unsigned char value[16]{};
  alignas(16) unsigned char result[16]{};
  unsigned vote_result = 0;
};

struct launch_state;
struct fiber_slot;

/// A declared shared variable of the running block: its tag (a static of the declaration), place.
struct shared_entry {
  const void* tag;
  unsigned char* at;
  std::size_t offset; // in the arena (the racecheck's byte maps); past the limit: outside it
  std::size_t bytes;
  const char* name;
};

struct warp_rec {
  unsigned waiting = 0;
  unsigned mask = 0;         // the lanes that exist
  unsigned waiting_bits = 0; // the lanes at a warp operation
  unsigned exited_bits = 0;  // the lanes that have exited
  char sync[2] = {};         // ThreadSanitizer's sync objects, by episode parity
};

/// The block being run: its threads, its shared memory, its detectors' state.
struct block_run {
  launch_state* launch = nullptr;
  uint3 block_idx{};
  unsigned n = 0;
  std::vector<thread_rec> threads;
  std::vector<unsigned> order;
  std::vector<warp_rec> warps;
  unsigned alive = 0;
  unsigned at_barrier = 0;
  unsigned exited_before_barrier_reported = 0;
  char barrier_sync[2] = {};
  // shared memory: the dynamic part first, then the static declarations in the order reached
  unsigned char* arena = nullptr;
  std::size_t capacity = 0;
  std::size_t used = 0;
  std::size_t static_bytes = 0;
  std::vector<shared_entry> entries;
  std::vector<std::unique_ptr<unsigned char[]>> overflow; // declarations past the arena
  // racecheck
  std::vector<unsigned char> snapshot;
  std::vector<std::int32_t> writer;
  std::vector<std::uint32_t> writer_interval;
  std::vector<std::uint32_t> writer_warp_episode;
  std::uint32_t interval = 1;
  std::vector<unsigned char> raced; // racecheck: the variables (entries, then dynamic) reported
  std::mt19937_64 rng;
};

/// What a launch runs: the grid, and how a thread calls the kernel.
struct launch_state {
  dim3 grid{};
  dim3 block{};
  std::size_t dynamic_smem = 0;
  std::string name; // as written at the launch site
  const char* file = "";
  int line = 0;
  options opts;
  void (*invoke)(void*) = nullptr;
  void* invoke_arg = nullptr;
  std::vector<std::string> reports;
  char begin_sync = 0;
  char end_sync = 0;
  std::exception_ptr thrown;

  void report(std::string what) {
    if (reports.size() < 64) {
      reports.push_back("zenflow::emu: kernel " + name + " (launched at " + file + ":" +
                        std::to_string(line) + "): " + std::move(what));
    }
  }
};

/// A fiber of the OS thread's pool and the thread of the block it runs now.
struct fiber_slot {
  fiber f;
  block_run* block = nullptr;
  unsigned index = 0;
  explicit fiber_slot(std::size_t stack_bytes) : f(&fiber_slot::main, this, stack_bytes) {}
  static void main(void* self);
};

/// The OS thread's scheduler: its fiber pool and the current block, thread and fiber.
struct executor {
  executor() = default;
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;
  ~executor() {
    const tsan_ignore ig; // the fibers' state, last touched by the fibers themselves
    slots.clear();
  }
  home_context home;
  std::vector<std::unique_ptr<fiber_slot>> slots;
  block_run* block = nullptr;
  thread_rec* thread = nullptr;
  fiber_slot* slot = nullptr;
  bool running = false;
  std::uint64_t blocks_run = 0;
  std::unique_ptr<unsigned char[]> arena; // the blocks' shared memory (not under ThreadSanitizer)
  std::size_t arena_bytes = 0;
};
inline executor& this_executor() {
  static thread_local executor e;
  return e;
}

/// The pool holds a warp more fibers than the largest block, and each block starts one warp
/// further along it: thread i of the next block is not the fiber that ran thread i of this one
/// (for ThreadSanitizer a fiber is a thread, and one fiber's blocks are ordered by its program
/// order: races between blocks would hide).
inline constexpr unsigned pool_spare = 32;

/// Stacks: kernels keep little on them; sanitizers' frames are larger.
inline constexpr std::size_t fiber_stack_bytes = (ZF_EMU_ASAN || ZF_EMU_TSAN) ? 512 * 1024 : 128 * 1024;

/// The thread the calling fiber runs (only inside a kernel).
inline thread_rec& current_thread() noexcept {
  return *this_executor().thread;
}
inline block_run& current_block() noexcept {
  return *this_executor().block;
}
[[noreturn]] inline void outside_kernel(const char* what) {
  throw cuda_error(cudaErrorNotPermitted,
                   std::string("zenflow::emu: ") + what + " called outside a kernel run by the emulator");
}
inline void require_in_kernel(const char* what) {
  if (this_executor().thread == nullptr) {
    outside_kernel(what);
  }
}

/// Thrown by `__trap()` on the fiber, caught where its thread started.
struct trap_signal {};

inline void fiber_slot::main(void* self) {
  auto* s = static_cast<fiber_slot*>(self);
  s->f.entered();
  for (;;) {
    block_run& b = *s->block;
    launch_state& L = *b.launch;
    tsan_acquire(&L.begin_sync);
    try {
      L.invoke(L.invoke_arg);
    } catch (const trap_signal&) {
      const tsan_ignore ig;
      const thread_rec& t = b.threads[s->index];
      L.report("__trap() by thread (" + std::to_string(t.thread_idx.x) + "," +
               std::to_string(t.thread_idx.y) + "," + std::to_string(t.thread_idx.z) + ") of block (" +
               std::to_string(b.block_idx.x) + "," + std::to_string(b.block_idx.y) + "," +
               std::to_string(b.block_idx.z) + ")");
    } catch (...) {
      const tsan_ignore ig;
      if (!L.thrown) {
        L.thrown = std::current_exception();
      }
    }
    tsan_release(&L.end_sync);
    {
      const tsan_ignore ig;
      b.threads[s->index].state = wait_state::exited;
    }
    s->f.yield();
  }
}

/// From the running thread back to the scheduler, having set where it waits.
inline void yield_to_scheduler() {
  this_executor().slot->f.yield();
}

inline std::string thread_name(const thread_rec& t) {
  return "thread (" + std::to_string(t.thread_idx.x) + "," + std::to_string(t.thread_idx.y) + "," +
         std::to_string(t.thread_idx.z) + ")";
}
inline std::string block_name(const block_run& b) {
  return "block (" + std::to_string(b.block_idx.x) + "," + std::to_string(b.block_idx.y) + "," +
         std::to_string(b.block_idx.z) + ")";
}
inline std::string site(const char* file, int line) {
  std::string f(file);
  if (const auto slash = f.rfind('/'); slash != std::string::npos) {
    f.erase(0, slash + 1);
  }
  return f + ":" + std::to_string(line);
}

// ---- the fiber side: synchronisation points --------------------------------------------------

/// Stops the calling thread at a synchronisation point until the scheduler completes it: `set`
/// records what it waits for (under the scheduler's own bookkeeping), `sync` are the point's two
/// ThreadSanitizer objects (by the parity of `episode`: the threads resumed first must not pass
/// their next point's release to the ones still resuming from this one).
template <class Set>
void wait_at(wait_state state, const char* file, int line, char (&sync)[2], unsigned& episode, Set&& set) {
  thread_rec& t = *this_executor().thread;
  unsigned parity = 0;
  {
    const tsan_ignore ig;
    t.state = state;
    t.file = file;
    t.line = line;
    set(t);
    parity = episode & 1u;
  }
  tsan_release(&sync[parity]);
  yield_to_scheduler();
  tsan_acquire(&sync[parity]);
  const tsan_ignore ig;
  ++episode;
}

/// `__syncthreads()` and its votes: waits until the block's barrier completes.
inline int block_barrier(barrier_kind kind, int vote, const char* file, int line) {
  require_in_kernel("__syncthreads");
  thread_rec& t = current_thread();
  wait_at(wait_state::block_barrier, file, line, current_block().barrier_sync, t.block_episode,
          [&](thread_rec& r) {
            r.bkind = kind;
            r.vote = vote;
          });
  const tsan_ignore ig;
  return static_cast<int>(t.vote_result);
}

/// A warp operation: the lanes of `mask` exchange `value` (or a vote), in lockstep.
inline void warp_op(warp_kind kind,
                    unsigned mask,
                    const void* value,
                    unsigned bytes,
                    int arg,
                    int width,
                    const char* file,
                    int line) {
  require_in_kernel("a warp operation");
  thread_rec& t = current_thread();
  wait_at(wait_state::warp_op, file, line, current_block().warps[t.warp].sync, t.warp_episode,
          [&](thread_rec& r) {
            r.wkind = kind;
            r.mask = mask;
            r.arg = arg;
            r.width = width;
            r.value_bytes = bytes;
            if (bytes > 0) {
              std::memcpy(r.value, value, bytes);
            }
          });
}

/// `__nanosleep`: lets the other threads run (a spin loop that waits for another thread of the
/// block progresses only through such a point).
inline void soft_yield() {
  if (this_executor().thread == nullptr) {
    return;
  }
  yield_to_scheduler();
}

/// A block's shared variable of type T (static `__shared__`, through ZF_SHARED): the first thread
/// to reach the declaration places it, every thread of the block gets the same object.
template <class T>
T& block_shared(const void* tag, const char* name) {
  // As on a GPU the variable is not initialised (default member initialisers do not run): its
  // storage starts as the block's garbage, an implicit-lifetime object of a trivially copyable type.
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "zenflow::emu: a __shared__ variable must be of a trivially copyable type");
  require_in_kernel("ZF_SHARED");
  block_run& b = current_block();
  const tsan_ignore ig;
  for (const shared_entry& e : b.entries) {
    if (e.tag == tag) {
      return *reinterpret_cast<T*>(e.at);
    }
  }
  constexpr std::size_t align = alignof(T) > 16 ? alignof(T) : 16;
  const std::size_t offset = (b.used + align - 1) / align * align;
  b.static_bytes += sizeof(T);
  if (b.static_bytes > device_limits::shared_bytes) {
    b.launch->report("static shared memory of " + std::to_string(b.static_bytes) + " bytes (with '" + name +
                     "') exceeds the " + std::to_string(device_limits::shared_bytes) + " bytes of a block");
  }
  unsigned char* at = nullptr;
  if (offset + sizeof(T) <= b.capacity) {
    at = b.arena + offset;
    std::memset(b.arena + b.used, 0xff, offset + sizeof(T) - b.used); // the block's garbage
    b.used = offset + sizeof(T);
  } else { // past the limit (reported): the kernel still runs, on memory of its own
    b.overflow.emplace_back(new unsigned char[sizeof(T) + align]);
    at = b.overflow.back().get();
    at += (align - reinterpret_cast<std::uintptr_t>(at) % align) % align;
    std::memset(at, 0xff, sizeof(T));
  }
  b.entries.push_back({tag, at, offset, sizeof(T), name});
  return *reinterpret_cast<T*>(at);
}

/// The block's dynamic shared memory (`extern __shared__`, through ZF_SHARED_DYNAMIC).
inline unsigned char* dynamic_shared() {
  require_in_kernel("ZF_SHARED_DYNAMIC");
  return current_block().arena;
}

// ---- the scheduler ----------------------------------------------------------------------------

inline std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline std::uint64_t hash_name(const std::string& s) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : s) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return h;
}

class block_scheduler {
public:
  block_scheduler(launch_state& L, uint3 block_idx) : L_(L), ex_(this_executor()) {
    b_.launch = &L;
    b_.block_idx = block_idx;
    const dim3 bd = L.block;
    b_.n = bd.x * bd.y * bd.z;
    b_.threads.resize(b_.n);
    const unsigned warps = (b_.n + 31) / 32;
    b_.warps.resize(warps);
    for (unsigned w = 0; w < warps; ++w) {
      const unsigned lanes = std::min(32u, b_.n - w * 32);
      b_.warps[w].mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    }
    for (unsigned i = 0; i < b_.n; ++i) {
      thread_rec& t = b_.threads[i];
      t.thread_idx = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
      t.block_idx = block_idx;
      t.block_dim = bd;
      t.grid_dim = L.grid;
      t.linear = i;
      t.warp = i / 32;
      t.lane = i % 32;
    }
    b_.alive = b_.n;
    b_.order.resize(b_.n);
    for (unsigned i = 0; i < b_.n; ++i) {
      b_.order[i] = i;
    }
    const std::uint64_t bl =
        block_idx.x + static_cast<std::uint64_t>(L.grid.x) *
                          (block_idx.y + static_cast<std::uint64_t>(L.grid.y) * block_idx.z);
    b_.rng.seed(mix(L.opts.seed ^ hash_name(L.name) ^ mix(bl + 1)));
    shuffle();
    // Shared memory: the dynamic part, then room for the static declarations up to the limit.
    // Under ThreadSanitizer new for every block (its shadow starts clean: the last block's
    // threads are no writers of this one's); elsewhere the OS thread's, reused.
    b_.capacity = (L.dynamic_smem + 15) / 16 * 16 + device_limits::shared_bytes + 64;
    if constexpr (ZF_EMU_TSAN != 0) {
      own_arena_.reset(new unsigned char[b_.capacity]);
      b_.arena = own_arena_.get();
    } else {
      if (ex_.arena_bytes < b_.capacity) {
        ex_.arena.reset(new unsigned char[b_.capacity]);
        ex_.arena_bytes = b_.capacity;
      }
      b_.arena = ex_.arena.get();
    }
    b_.used = (L.dynamic_smem + 15) / 16 * 16;
    // As a GPU's shared memory holds garbage: 0xff bytes (a NaN, -1, the largest unsigned), the
    // static declarations' as they are placed (block_shared).
    std::memset(b_.arena, 0xff, b_.used);
    if (L.opts.racecheck) {
      b_.snapshot.assign(b_.capacity, 0xff);
      b_.writer.assign(b_.capacity, -1);
      b_.writer_interval.assign(b_.capacity, 0);
      b_.writer_warp_episode.assign(b_.capacity, 0);
    }
    while (ex_.slots.size() < b_.n + pool_spare) {
      ex_.slots.push_back(std::make_unique<fiber_slot>(fiber_stack_bytes));
    }
    const std::size_t pool = ex_.slots.size();
    first_slot_ = static_cast<std::size_t>(ex_.blocks_run++ % (pool / pool_spare)) * pool_spare;
  }
  block_scheduler(const block_scheduler&) = delete;
  block_scheduler& operator=(const block_scheduler&) = delete;
  ~block_scheduler() = default;

  void run() {
    for (unsigned i = 0; i < b_.n; ++i) {
      slot(i).block = &b_;
      slot(i).index = i;
    }
    while (b_.alive > 0) {
      bool progress = false;
      for (unsigned k = 0; k < b_.n; ++k) {
        const unsigned i = b_.order[k];
        if (b_.threads[i].state != wait_state::runnable) {
          continue;
        }
        resume(i);
        progress = true;
        after_stop(i);
      }
      if (!progress && b_.alive > 0) {
        force_progress();
      }
    }
  }

private:
  void shuffle() {
    if (L_.opts.order == thread_order::shuffled) {
      std::shuffle(b_.order.begin(), b_.order.end(), b_.rng);
    }
  }
  void resume(unsigned i) {
    const thread_rec& t = b_.threads[i];
    ::threadIdx = t.thread_idx;
    ::blockIdx = t.block_idx;
    ::blockDim = t.block_dim;
    ::gridDim = t.grid_dim;
    ex_.block = &b_;
    ex_.thread = &b_.threads[i];
    ex_.slot = &slot(i);
    ex_.slot->f.resume(ex_.home);
    ex_.thread = nullptr;
    ex_.slot = nullptr;
  }

  void after_stop(unsigned i) {
    thread_rec& t = b_.threads[i];
    if (L_.opts.racecheck) {
      check_writes(t);
    }
    switch (t.state) {
    case wait_state::exited: {
      --b_.alive;
      if (b_.alive > 0 && b_.at_barrier == b_.alive) {
        complete_barrier();
      }
      warp_rec& w = b_.warps[t.warp];
      w.exited_bits |= 1u << t.lane;
      if (b_.alive > 0 && w.waiting > 0) {
        try_complete_warp(t.warp);
      }
      break;
    }
    case wait_state::block_barrier:
      ++b_.at_barrier;
      if (b_.at_barrier == b_.alive) {
        complete_barrier();
      }
      break;
    case wait_state::warp_op: {
      warp_rec& w = b_.warps[t.warp];
      ++w.waiting;
      w.waiting_bits |= 1u << t.lane;
      // The full look only once every lane the mask names waits or is gone (one look per
      // operation, not one per lane).
      if ((t.mask & ~(w.waiting_bits | w.exited_bits | ~w.mask)) == 0) {
        try_complete_warp(t.warp);
      }
      break;
    }
    case wait_state::runnable: // __nanosleep
      break;
    }
  }

  void complete_barrier() {
    // Every waiting thread at one barrier of the source, and none gone before it.
    const thread_rec* first = nullptr;
    std::string sites;
    bool split = false;
    for (const thread_rec& t : b_.threads) {
      if (t.state != wait_state::block_barrier) {
        continue;
      }
      if (first == nullptr) {
        first = &t;
      } else if (t.line != first->line || (t.file != first->file && std::strcmp(t.file, first->file) != 0)) {
        split = true;
      }
    }
    if (split) {
      std::set<std::string> where;
      for (const thread_rec& t : b_.threads) {
        if (t.state == wait_state::block_barrier) {
          where.insert(site(t.file, t.line));
        }
      }
      for (const auto& w : where) {
        sites += (sites.empty() ? "" : ", ") + w;
      }
      L_.report("divergent __syncthreads in " + block_name(b_) +
                ": the threads wait at different barriers (" + sites + ")");
    }
    const unsigned exited = b_.n - b_.alive;
    if (exited > 0 && b_.exited_before_barrier_reported == 0) {
      b_.exited_before_barrier_reported = 1;
      L_.report("__syncthreads at " + site(first->file, first->line) + " not reached by every thread of " +
                block_name(b_) + ": " + std::to_string(exited) + " of " + std::to_string(b_.n) +
                " threads had exited (a barrier must be reached by the whole block)");
    }
    unsigned any = 0, all = 1, count = 0;
    for (const thread_rec& t : b_.threads) {
      if (t.state == wait_state::block_barrier) {
        any |= t.vote != 0 ? 1u : 0u;
        all &= t.vote != 0 ? 1u : 0u;
        count += t.vote != 0 ? 1u : 0u;
      }
    }
    for (thread_rec& t : b_.threads) {
      if (t.state == wait_state::block_barrier) {
        t.vote_result = t.bkind == barrier_kind::vote_or      ? any
                        : t.bkind == barrier_kind::vote_and   ? all
                        : t.bkind == barrier_kind::vote_count ? count
                                                              : 0u;
        t.state = wait_state::runnable;
      }
    }
    b_.at_barrier = 0;
    ++b_.interval;
    shuffle();
  }

  /// Completes the operations of warp `w` whose every named lane waits at one with the same mask
  /// (or, `force`, with the lanes that do, reported). Returns whether any completed.
  bool try_complete_warp(unsigned w, bool force = false) {
    warp_rec& wr = b_.warps[w];
    if (wr.waiting == 0) {
      return false;
    }
    thread_rec* lanes[32] = {};
    unsigned waiting_mask = 0;
    unsigned exited_mask = 0;
    for (unsigned l = 0; l < 32 && w * 32 + l < b_.n; ++l) {
      thread_rec& t = b_.threads[w * 32 + l];
      lanes[l] = &t;
      if (t.state == wait_state::warp_op) {
        waiting_mask |= 1u << l;
      } else if (t.state == wait_state::exited) {
        exited_mask |= 1u << l;
      }
    }
    bool completed = false;
    unsigned todo = waiting_mask;
    while (todo != 0) {
      const thread_rec& first = *lanes[static_cast<unsigned>(__builtin_ctz(todo))];
      const unsigned mask = first.mask;
      unsigned group = 0; // the waiting lanes of this mask
      for (unsigned l = 0; l < 32; ++l) {
        if ((todo >> l & 1u) != 0 && lanes[l]->mask == mask) {
          group |= 1u << l;
        }
      }
      todo &= ~group;
      const unsigned missing = mask & ~group;
      // Lanes that cannot arrive any more: exited, or not in the block.
      const unsigned gone = missing & (exited_mask | ~wr.mask);
      if (missing != 0 && missing != gone && !force) {
        continue; // some still run, or wait elsewhere: not yet
      }
      if ((mask & ~wr.mask) != 0) {
        L_.report(warp_what(first) + " names lanes that do not exist in warp " + std::to_string(w) + " of " +
                  block_name(b_) + " (mask 0x" + hex(mask) + ", lanes 0x" + hex(wr.mask) + ")");
      } else if (missing != 0) {
        L_.report(warp_what(first) + " in warp " + std::to_string(w) + " of " + block_name(b_) +
                  ": lanes 0x" + hex(missing) + " of mask 0x" + hex(mask) +
                  (missing == gone ? " had exited" : " never arrived (they wait elsewhere: deadlock)"));
      }
      for (unsigned l = 0; l < 32; ++l) {
        if ((group >> l & 1u) == 0) {
          continue;
        }
        const thread_rec& t = *lanes[l];
        const bool same_site =
            t.line == first.line && (t.file == first.file || std::strcmp(t.file, first.file) == 0);
        if (t.wkind != first.wkind || t.value_bytes != first.value_bytes ||
            (!same_site && first.wkind != warp_kind::sync)) {
          L_.report("divergent warp operations in warp " + std::to_string(w) + " of " + block_name(b_) +
                    ": " + warp_what(first) + " and " + warp_what(t));
          break;
        }
      }
      unsigned ballot = 0;
      for (unsigned l = 0; l < 32; ++l) {
        if ((group >> l & 1u) != 0 && lanes[l]->vote != 0) {
          ballot |= 1u << l;
        }
      }
      for (unsigned l = 0; l < 32; ++l) {
        if ((group >> l & 1u) != 0) {
          finish_lane(*lanes[l], lanes, group, ballot);
        }
      }
      for (unsigned l = 0; l < 32; ++l) {
        if ((group >> l & 1u) != 0) {
          lanes[l]->state = wait_state::runnable;
          --wr.waiting;
        }
      }
      wr.waiting_bits &= ~group;
      completed = true;
    }
    return completed;
  }

  void finish_lane(thread_rec& t, thread_rec* const* lanes, unsigned present, unsigned ballot) {
    switch (t.wkind) {
    case warp_kind::sync:
      return;
    case warp_kind::any:
      t.vote_result = ballot != 0 ? 1u : 0u;
      return;
    case warp_kind::all:
      t.vote_result = ballot == present ? 1u : 0u;
      return;
    case warp_kind::ballot:
      t.vote_result = ballot;
      return;
    default:
      break;
    }
    const int width = t.width;
    const int lane = static_cast<int>(t.lane);
    const int base = lane / width * width;
    int src = lane;
    bool own = false;
    switch (t.wkind) {
    case warp_kind::shfl:
      src = base + (t.arg % width + width) % width;
      break;
    case warp_kind::shfl_up:
      src = lane - t.arg;
      own = src < base;
      break;
    case warp_kind::shfl_down:
      src = lane + t.arg;
      own = src >= base + width;
      break;
    case warp_kind::shfl_xor:
      src = lane ^ t.arg;
      own = src >= base + width || src < base;
      break;
    default:
      break;
    }
    if (own) {
      std::memcpy(t.result, t.value, t.value_bytes);
      return;
    }
    if (src < 0 || src >= 32 || ((present >> src) & 1u) == 0 || ((t.mask >> src) & 1u) == 0) {
      L_.report(warp_what(t) + ": lane " + std::to_string(lane) + " reads lane " + std::to_string(src) +
                ", which takes no part (outside the mask, exited or absent): an undefined value on a GPU");
      std::memcpy(t.result, t.value, t.value_bytes);
      return;
    }
    std::memcpy(t.result, lanes[src]->value, t.value_bytes);
  }

  void force_progress() {
    // Nothing can run: warps whose lanes cannot all arrive, or a barrier some threads never reach
    // because they wait in a warp operation. Forced through, reported, so that the launch ends.
    bool done = false;
    for (unsigned w = 0; w < b_.warps.size(); ++w) {
      done = try_complete_warp(w, true) || done;
    }
    if (!done && b_.at_barrier > 0) {
      L_.report("deadlock in " + block_name(b_) + ": " + std::to_string(b_.at_barrier) + " of " +
                std::to_string(b_.alive) + " live threads wait at __syncthreads, the others cannot reach it");
      complete_barrier();
    }
  }

  static std::string hex(unsigned v) {
    static const char* digits = "0123456789abcdef";
    std::string s(8, '0');
    for (int i = 7; i >= 0; --i) {
      s[static_cast<std::size_t>(i)] = digits[v & 15u];
      v >>= 4;
    }
    return s;
  }
  static const char* warp_name(warp_kind k) {
    switch (k) {
    case warp_kind::sync:
      return "__syncwarp";
    case warp_kind::shfl:
      return "__shfl_sync";
    case warp_kind::shfl_up:
      return "__shfl_up_sync";
    case warp_kind::shfl_down:
      return "__shfl_down_sync";
    case warp_kind::shfl_xor:
      return "__shfl_xor_sync";
    case warp_kind::any:
      return "__any_sync";
    case warp_kind::all:
      return "__all_sync";
    case warp_kind::ballot:
      return "__ballot_sync";
    }
    return "?";
  }
  static std::string warp_what(const thread_rec& t) {
    return std::string(warp_name(t.wkind)) + " at " + site(t.file, t.line);
  }

  /// racecheck: the bytes of shared memory thread `t` changed since it last started (it alone ran
  /// meanwhile); a byte another thread wrote in the same interval between barriers, not ordered
  /// by a warp operation of theirs, is a race.
  void check_writes(const thread_rec& t) {
    const std::size_t n = b_.used;
    unsigned char* cur = b_.arena;
    unsigned char* old = b_.snapshot.data();
    for (std::size_t c = 0; c < n; c += 64) {
      const std::size_t len = std::min<std::size_t>(64, n - c);
      if (std::memcmp(cur + c, old + c, len) == 0) {
        continue;
      }
      for (std::size_t i = c; i < c + len; ++i) {
        if (cur[i] == old[i]) {
          continue;
        }
        const std::int32_t prev = b_.writer[i];
        if (prev >= 0 && prev != static_cast<std::int32_t>(t.linear) &&
            b_.writer_interval[i] == b_.interval) {
          const thread_rec& p = b_.threads[static_cast<std::size_t>(prev)];
          const bool ordered = p.warp == t.warp && b_.writer_warp_episode[i] < t.warp_episode;
          if (!ordered) {
            report_race(p, t, i);
          }
        }
        b_.writer[i] = static_cast<std::int32_t>(t.linear);
        b_.writer_interval[i] = b_.interval;
        b_.writer_warp_episode[i] = t.warp_episode;
        old[i] = cur[i];
      }
    }
  }
  /// One report per shared variable and block (its first conflicting byte).
  void report_race(const thread_rec& p, const thread_rec& t, std::size_t byte) {
    std::string what = "byte " + std::to_string(byte) + " of dynamic shared memory";
    std::size_t which = b_.entries.size();
    for (std::size_t k = 0; k < b_.entries.size(); ++k) {
      const shared_entry& e = b_.entries[k];
      if (byte >= e.offset && byte < e.offset + e.bytes) {
        what = "byte " + std::to_string(byte - e.offset) + " of __shared__ '" + e.name + "' (" +
               std::to_string(e.bytes) + " bytes)";
        which = k;
      }
    }
    if (b_.raced.size() <= which) {
      b_.raced.resize(which + 1, 0);
    }
    if (b_.raced[which] != 0) {
      return;
    }
    b_.raced[which] = 1;
    L_.report("shared-memory race in " + block_name(b_) + ": " + thread_name(p) + " and " + thread_name(t) +
              " both wrote " + what + " between two barriers");
  }

  fiber_slot& slot(unsigned i) { return *ex_.slots[(first_slot_ + i) % ex_.slots.size()]; }

  launch_state& L_;
  executor& ex_;
  // On the heap, and new for every block: ThreadSanitizer keys its sync objects by address.
  std::unique_ptr<block_run> own_ = std::make_unique<block_run>();
  block_run& b_ = *own_;
  std::unique_ptr<unsigned char[]> own_arena_; // ThreadSanitizer: the block's own shared memory
  std::size_t first_slot_ = 0;
};

/// Runs the grid of `L` on the calling OS thread (blocks in order, or shuffled). Detector
/// reports are collected in `L.reports`.
inline void run_grid(launch_state& L) {
  executor& ex = this_executor();
  if (ex.running) {
    throw cuda_error(cudaErrorNotPermitted, "zenflow::emu: a kernel launched from inside a kernel");
  }
  ex.running = true;
  struct reset {
    executor& e;
    ~reset() {
      e.running = false;
      e.block = nullptr;
      e.thread = nullptr;
      e.slot = nullptr;
    }
  } on_exit{ex};
  tsan_release(&L.begin_sync);
  {
    const tsan_ignore ig; // the scheduler's own state: shared with the fibers, hidden from TSan
    const std::uint64_t blocks = static_cast<std::uint64_t>(L.grid.x) * L.grid.y * L.grid.z;
    std::vector<std::uint64_t> order;
    if (L.opts.order == thread_order::shuffled) {
      order.resize(blocks);
      for (std::uint64_t i = 0; i < blocks; ++i) {
        order[i] = i;
      }
      std::mt19937_64 rng(mix(L.opts.seed ^ hash_name(L.name)));
      std::shuffle(order.begin(), order.end(), rng);
    }
    for (std::uint64_t k = 0; k < blocks; ++k) {
      const std::uint64_t i = order.empty() ? k : order[k];
      const uint3 idx{static_cast<unsigned>(i % L.grid.x), static_cast<unsigned>((i / L.grid.x) % L.grid.y),
                      static_cast<unsigned>(i / (static_cast<std::uint64_t>(L.grid.x) * L.grid.y))};
      block_scheduler s(L, idx);
      s.run();
    }
  }
  tsan_acquire(&L.end_sync);
}

/// The problems of a launch configuration (empty: none), as CUDA's launch would refuse it.
inline cudaError_t check_config(const launch_state& L, std::size_t param_bytes, std::string& why) {
  const dim3 g = L.grid, b = L.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    why = "a grid or block dimension is 0";
    return cudaErrorInvalidConfiguration;
  }
  if (static_cast<std::uint64_t>(b.x) * b.y * b.z > device_limits::max_threads_per_block) {
    why = std::to_string(static_cast<std::uint64_t>(b.x) * b.y * b.z) +
          " threads per block exceed the 1024 of a block";
    return cudaErrorInvalidConfiguration;
  }
  if (b.x > device_limits::max_block_x || b.y > device_limits::max_block_y ||
      b.z > device_limits::max_block_z) {
    why = "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) +
          ") exceeds the block dimensions (1024, 1024, 64)";
    return cudaErrorInvalidConfiguration;
  }
  if (g.x > device_limits::max_grid_x || g.y > device_limits::max_grid_y || g.z > device_limits::max_grid_z) {
    why = "grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," + std::to_string(g.z) +
          ") exceeds the grid dimensions (2^31 - 1, 65535, 65535)";
    return cudaErrorInvalidConfiguration;
  }
  if (L.dynamic_smem > device_limits::shared_bytes) {
    why = std::to_string(L.dynamic_smem) + " bytes of dynamic shared memory exceed the " +
          std::to_string(device_limits::shared_bytes) +
          " a block gets without cudaFuncAttributeMaxDynamicSharedMemorySize (not modelled)";
    return cudaErrorInvalidValue;
  }
  if (param_bytes > device_limits::param_bytes) {
    why = std::to_string(param_bytes) + " bytes of kernel parameters exceed " +
          std::to_string(device_limits::param_bytes);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

inline void record_reports(const std::vector<std::string>& reports, const std::string& kernel) {
  log_state& g = log();
  const std::lock_guard lock(g.mutex);
  g.kernels.insert(kernel);
  g.reports.insert(g.reports.end(), reports.begin(), reports.end());
}

/// Runs a launch now, on the calling thread; throws `cuda_error(cudaErrorLaunchFailure)` with the
/// first report when a detector fired (the rest in `emu::reports()`).
inline void execute(launch_state& L) {
  run_grid(L);
  record_reports(L.reports, base_name(L.name.c_str()));
  if (L.thrown) {
    std::rethrow_exception(L.thrown);
  }
  if (!L.reports.empty()) {
    std::string what = L.reports.front();
    if (L.reports.size() > 1) {
      what += " (and " + std::to_string(L.reports.size() - 1) + " more: zenflow::emu::reports())";
    }
    throw cuda_error(cudaErrorLaunchFailure, what);
  }
}

template <class T>
dim3 to_dim3(const T& v) {
  if constexpr (std::is_same_v<T, dim3>) {
    return v;
  } else if constexpr (std::is_same_v<T, uint3>) {
    return dim3(v.x, v.y, v.z);
  } else {
    return dim3(static_cast<unsigned>(v));
  }
}

/// A launch site (ZF_LAUNCH under a host compiler): the configuration, then the arguments.
template <class Body>
class launch_site {
public:
  template <class G, class B>
  launch_site(const G& grid,
              const B& block,
              std::size_t smem,
              cudaStream_t stream,
              const char* name,
              const char* file,
              int line,
              Body body)
      : grid_(to_dim3(grid)), block_(to_dim3(block)), smem_(smem), stream_(stream), name_(name), file_(file),
        line_(line), body_(std::move(body)) {}

  /// The kernel's arguments, copied once (as CUDA copies them to the parameter space); every
  /// thread calls the kernel with them. Enqueued on `stream` when an emulated device is current
  /// on a thread outside its streams, else run now.
  template <class... Args>
  void operator()(Args&&... args) {
    auto L = std::make_shared<launch_state>();
    L->grid = grid_;
    L->block = block_;
    L->dynamic_smem = smem_;
    L->name = name_;
    L->file = file_;
    L->line = line_;
    {
      const std::lock_guard lock(log().mutex);
      L->opts = log().opts;
    }
    std::string why;
    const std::size_t param_bytes = (0 + ... + ((sizeof(std::decay_t<Args>) + 7) / 8 * 8));
    if (const cudaError_t e = check_config(*L, param_bytes, why); e != cudaSuccess) {
      L->report(why);
      record_reports(L->reports, base_name(name_));
      last_error() = e;
      return;
    }
    using params_t = std::tuple<std::decay_t<Args>...>;
    struct job {
      Body body;
      params_t params;
      static void invoke(void* self) {
        auto& j = *static_cast<const job*>(self);
        std::apply([&](const auto&... a) { j.body(a...); }, j.params);
      }
    };
    auto j = std::make_shared<job>(job{body_, params_t(std::forward<Args>(args)...)});
    L->invoke = &job::invoke;
    L->invoke_arg = j.get();
    emulated_device* device = emulated_device::current();
    if (device != nullptr && !zenflow::detail::on_emulated_stream_thread()) {
      device->launch(
          stream_, [L, j] { execute(*L); }, 0, std::string("kernel ") + base_name(name_));
      return;
    }
    execute(*L);
  }

private:
  dim3 grid_, block_;
  std::size_t smem_;
  cudaStream_t stream_;
  const char* name_;
  const char* file_;
  int line_;
  Body body_;
};

template <class G, class B, class Body>
launch_site<Body> make_launch_site(const G& grid,
                                   const B& block,
                                   std::size_t smem,
                                   cudaStream_t stream,
                                   const char* name,
                                   const char* file,
                                   int line,
                                   Body body) {
  return launch_site<Body>(grid, block, smem, stream, name, file, line, std::move(body));
}

/// `cudaMemsetAsync`'s twin: on the current emulated device's stream, or now.
inline cudaError_t memset_async(void* p, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) {
    return cudaSuccess;
  }
  if (p == nullptr) {
    return cudaErrorInvalidValue;
  }
  emulated_device* device = emulated_device::current();
  if (device != nullptr && !zenflow::detail::on_emulated_stream_thread()) {
    device->launch(
        stream, [p, value, bytes] { std::memset(p, value, bytes); }, bytes, "memset");
    return cudaSuccess;
  }
  std::memset(p, value, bytes);
  return cudaSuccess;
}

/// `cudaGetLastError`'s twin for the emulator's launches.
inline cudaError_t take_last_error() noexcept {
  const cudaError_t e = last_error();
  last_error() = cudaSuccess;
  return e;
}

} // namespace detail
} // namespace emu
ZF_NAMESPACE_END
