/// @file
/// The kernel emulator's fibers: one per thread of a block, each on a stack of its own, switched
/// by the block's scheduler (block_scheduler.hpp) so that `__syncthreads()` and the warp
/// operations are real waits in the middle of a thread's code.
///
/// Why stackful fibers: a kernel's `__syncthreads()` sits anywhere in ordinary code (loops, device
/// functions); C++20 coroutines are stackless and would need `co_await` written into the kernels'
/// source, which then would not be CUDA. Boost.Context would be a new compiled dependency. So the
/// switch is ours: a dozen instructions on x86-64 (about 60 ns a round trip here, against about
/// 1 us for `swapcontext`, which makes a signal-mask system call each time), and POSIX ucontext
/// on other targets.
///
/// Sanitizers: a switch tells AddressSanitizer which stack is current
/// (`__sanitizer_start_switch_fiber` / `__sanitizer_finish_switch_fiber`, so that its stack
/// checks and fake stacks follow the fiber), and ThreadSanitizer that another fiber runs
/// (`__tsan_switch_to_fiber`, without synchronisation: a fiber is a thread of its own to it, and
/// the emulator says where threads synchronise, runtime.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <sys/mman.h>
#include <unistd.h>

#include <zenflow/core/config.hpp>

#if ZF_ASAN
#  define ZF_EMU_ASAN 1
#  include <sanitizer/asan_interface.h>
#  include <sanitizer/common_interface_defs.h>
#else
#  define ZF_EMU_ASAN 0
#endif
#if ZF_TSAN
#  define ZF_EMU_TSAN 1
#  include <sanitizer/tsan_interface.h>
extern "C" {
// ThreadSanitizer's dynamic annotations (its runtime exports them; no header declares them).
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#else
#  define ZF_EMU_TSAN 0
#endif

#if defined(__x86_64__) && defined(__linux__) && !defined(ZF_EMU_USE_UCONTEXT)
#  define ZF_EMU_ASM_SWITCH 1
#else
#  define ZF_EMU_ASM_SWITCH 0
#  include <ucontext.h>
#endif

ZF_NAMESPACE_BEGIN
namespace emu::detail {

/// The emulator's own bookkeeping, which fibers and the scheduler share without a happens-before
/// edge ThreadSanitizer could see (the scheduler runs between them): hidden from it, so that it
/// reports only races of the kernel's own memory. Synchronisation annotations still count.
struct tsan_ignore {
#if ZF_EMU_TSAN
  tsan_ignore() noexcept {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~tsan_ignore() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  tsan_ignore() noexcept {} // user-provided: a scope object, not an unused variable
#endif
  tsan_ignore(const tsan_ignore&) = delete;
  tsan_ignore& operator=(const tsan_ignore&) = delete;
};

/// A happens-before edge for ThreadSanitizer: everything before `release(x)` in one fiber happens
/// before everything after a later `acquire(x)` in another (nothing without it).
inline void tsan_release([[maybe_unused]] void* x) noexcept {
#if ZF_EMU_TSAN
  __tsan_release(x);
#endif
}
inline void tsan_acquire([[maybe_unused]] void* x) noexcept {
#if ZF_EMU_TSAN
  __tsan_acquire(x);
#endif
}

#if ZF_EMU_ASM_SWITCH
// switch_stack(save, to): pushes the callee-saved registers and the floating-point control words on
// the current stack, stores the stack pointer in *save, loads `to` and pops the same from there.
// A new fiber's stack is laid out as if it had been switched away from just before fiber_start.
__attribute__((naked, noinline)) inline void zf_emu_switch_stack(void** /*save*/, void* /*to*/) {
  asm volatile("pushq %rbp\n\t"
               "pushq %rbx\n\t"
               "pushq %r12\n\t"
               "pushq %r13\n\t"
               "pushq %r14\n\t"
               "pushq %r15\n\t"
               "subq $8, %rsp\n\t"
               "stmxcsr (%rsp)\n\t"
               "fnstcw 4(%rsp)\n\t"
               "movq %rsp, (%rdi)\n\t"
               "movq %rsi, %rsp\n\t"
               "ldmxcsr (%rsp)\n\t"
               "fldcw 4(%rsp)\n\t"
               "addq $8, %rsp\n\t"
               "popq %r15\n\t"
               "popq %r14\n\t"
               "popq %r13\n\t"
               "popq %r12\n\t"
               "popq %rbx\n\t"
               "popq %rbp\n\t"
               "ret\n\t");
}
// The first instruction a new fiber runs: entry(arg) with entry in r13 and arg in r12 (the stack
// is 16-byte aligned here, as before a call); the entry never returns.
__attribute__((naked, noinline)) inline void zf_emu_fiber_start() {
  asm volatile("movq %r12, %rdi\n\t"
               "callq *%r13\n\t"
               "ud2\n\t");
}
#endif

/// A fiber's stack: anonymous memory with an inaccessible guard page below it (an overflow
/// faults instead of writing over the next stack). Committed only where touched.
class fiber_stack {
public:
  explicit fiber_stack(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, size_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      throw std::bad_alloc();
    }
    mprotect(p, page, PROT_NONE);
    map_ = p;
    map_bytes_ = size_ + page;
    bottom_ = static_cast<char*>(p) + page;
  }
  fiber_stack(const fiber_stack&) = delete;
  fiber_stack& operator=(const fiber_stack&) = delete;
  ~fiber_stack() { munmap(map_, map_bytes_); }
  [[nodiscard]] char* bottom() const noexcept { return bottom_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  char* bottom_ = nullptr;
  std::size_t size_ = 0;
};

/// The context a fiber is switched from and back to (the scheduler's, on the OS thread's stack).
struct home_context {
#if ZF_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
  void* tsan = nullptr;               // ThreadSanitizer's state of the OS thread
  void* asan_fake = nullptr;          // its fake stack while a fiber runs
  const void* stack_bottom = nullptr; // its stack, learnt at a fiber's first switch
  std::size_t stack_size = 0;
};

/// One fiber: `entry(arg)` on its own stack; `entry` must never return (it switches home when it
/// has nothing to do, and is resumed or dropped).
class fiber {
public:
  using entry_fn = void (*)(void*);

  fiber(entry_fn entry, void* arg, std::size_t stack_bytes) : entry_(entry), arg_(arg), stack_(stack_bytes) {
#if ZF_EMU_ASM_SWITCH
    auto* top = reinterpret_cast<std::uintptr_t*>(stack_.bottom() + stack_.size());
    std::uintptr_t* sp = top - 2; // keeps 16-byte alignment at zf_emu_fiber_start's call
    *--sp = reinterpret_cast<std::uintptr_t>(&zf_emu_fiber_start);
    *--sp = 0;                                       // rbp
    *--sp = 0;                                       // rbx
    *--sp = reinterpret_cast<std::uintptr_t>(arg);   // r12
    *--sp = reinterpret_cast<std::uintptr_t>(entry); // r13
    *--sp = 0;                                       // r14
    *--sp = 0;                                       // r15
    std::uint32_t mxcsr = 0;
    std::uint16_t fpucw = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    --sp;
    auto* words = reinterpret_cast<unsigned char*>(sp);
    __builtin_memcpy(words, &mxcsr, 4);
    __builtin_memcpy(words + 4, &fpucw, 2);
    sp_ = sp;
#else
    getcontext(&uc_);
    uc_.uc_stack.ss_sp = stack_.bottom();
    uc_.uc_stack.ss_size = stack_.size();
    uc_.uc_link = nullptr;
    // makecontext passes int arguments: this fiber's address in two halves.
    const auto bits = reinterpret_cast<std::uintptr_t>(this);
    makecontext(&uc_, reinterpret_cast<void (*)()>(&fiber::ucontext_start), 2,
                static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits & 0xffffffffu));
#endif
#if ZF_EMU_TSAN
    tsan_ = __tsan_create_fiber(0);
#endif
  }
  fiber(const fiber&) = delete;
  fiber& operator=(const fiber&) = delete;
  ~fiber() {
#if ZF_EMU_TSAN
    __tsan_destroy_fiber(tsan_);
#endif
  }

  /// From `home` into this fiber, until it switches back.
  void resume(home_context& home) {
#if ZF_EMU_ASAN
    __sanitizer_start_switch_fiber(&home.asan_fake, stack_.bottom(), stack_.size());
#endif
#if ZF_EMU_TSAN
    if (home.tsan == nullptr) {
      home.tsan = __tsan_get_current_fiber();
    }
    __tsan_switch_to_fiber(tsan_, __tsan_switch_to_fiber_no_sync);
#endif
    home_ = &home;
#if ZF_EMU_ASM_SWITCH
    zf_emu_switch_stack(&home.sp, sp_);
#else
    swapcontext(&home.uc, &uc_);
#endif
#if ZF_EMU_ASAN
    __sanitizer_finish_switch_fiber(home.asan_fake, nullptr, nullptr);
#endif
  }
  /// From this fiber back to the context that resumed it (called on the fiber).
  void yield() {
    home_context& home = *home_;
#if ZF_EMU_ASAN
    __sanitizer_start_switch_fiber(&asan_fake_, home.stack_bottom, home.stack_size);
#endif
#if ZF_EMU_TSAN
    __tsan_switch_to_fiber(home.tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if ZF_EMU_ASM_SWITCH
    zf_emu_switch_stack(&sp_, home.sp);
#else
    swapcontext(&uc_, &home.uc);
#endif
    entered();
  }
  /// First thing on the fiber after every switch into it (its entry calls it once too).
  void entered() {
#if ZF_EMU_ASAN
    __sanitizer_finish_switch_fiber(asan_fake_, &home_->stack_bottom, &home_->stack_size);
#endif
  }

private:
#if !ZF_EMU_ASM_SWITCH
  static void ucontext_start(unsigned hi, unsigned lo) {
    auto* self = reinterpret_cast<fiber*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
    self->entry_(self->arg_);
  }
  ucontext_t uc_{};
#else
  void* sp_ = nullptr;
#endif
  [[maybe_unused]] entry_fn entry_; // the ucontext path starts from them
  [[maybe_unused]] void* arg_;
  fiber_stack stack_;
  home_context* home_ = nullptr;
  [[maybe_unused]] void* asan_fake_ = nullptr; // AddressSanitizer's fake stack of the fiber
  [[maybe_unused]] void* tsan_ = nullptr;      // ThreadSanitizer's state of the fiber
};

} // namespace emu::detail
ZF_NAMESPACE_END
