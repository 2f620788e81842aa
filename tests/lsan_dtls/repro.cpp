// The minimal reproduction of LeakSanitizer's crash at exit (NOTES.md): a dlopen'd library's 4-byte
// TLS block that glibc mallocs at page offset 16, which GCC 12's sanitizer runtime takes for a
// glibc-2.19 block with a header in front; LeakSanitizer then scans the range that "header" names.
//
//   repro MODULE [--anywhere]
//
// It walks ASan's allocator until its next 4-byte chunk starts a page (a 16-byte chunk header, then
// the block at offset 16), then lets glibc allocate the module's block there; --anywhere skips the
// walk (the control: the block lands elsewhere). It prints the block's page offset and exits 0;
// the crash, if any, is LeakSanitizer's at exit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODULE [--anywhere]\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto module_tls = reinterpret_cast<int* (*)()>(dlsym(lib, "module_tls"));
  const bool anywhere = argc > 2 && std::strcmp(argv[2], "--anywhere") == 0;
  std::vector<void*> walked;
  if (!anywhere) {
    // Consecutive 4-byte chunks are 32 bytes apart (ASan's size class for 16 + 4 bytes): stop
    // when the next one, in the direction the allocator hands them out, is at page offset 16.
    void* prev = std::malloc(4);
    walked.push_back(prev);
    for (int i = 0; i < 100000; ++i) {
      void* p = std::malloc(4);
      walked.push_back(p);
      const std::intptr_t step = static_cast<char*>(p) - static_cast<char*>(prev);
      if ((step == 32 || step == -32) && (reinterpret_cast<std::uintptr_t>(p) + step) % 4096 == 16) {
        break;
      }
      prev = p;
    }
  }
  const int* block = module_tls(); // glibc's __tls_get_addr mallocs the module's block now
  for (void* p : walked) {
    std::free(p);
  }
  std::fprintf(stderr, "repro: the module's TLS block is at %p, page offset %ju\n",
               static_cast<const void*>(block),
               static_cast<std::uintmax_t>(reinterpret_cast<std::uintptr_t>(block) % 4096));
  return 0;
}
