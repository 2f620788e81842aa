/// @file
/// The kernel emulator's scheduler (runtime.hpp has the whole picture): one block's threads as
/// fibers, resumed in the natural or a seeded random order until every thread exited, each
/// barrier and warp operation completed when its threads arrive, and the detectors that watch
/// them (a barrier or a warp operation some threads never reach, shared-memory races).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector_types.h>

#include <zenflow/core/config.hpp>
#include <zenflow/emu/detail/runtime.hpp>

ZF_NAMESPACE_BEGIN
namespace emu {
namespace detail {

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

} // namespace detail
} // namespace emu
ZF_NAMESPACE_END
