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
///
/// This file: the launch's and the block's state, and the fiber side (what a kernel's thread calls
/// at a synchronisation point); block_scheduler.hpp runs a block's threads, launch.hpp a grid.
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

} // namespace detail
} // namespace emu
ZF_NAMESPACE_END
