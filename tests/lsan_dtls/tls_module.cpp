// The minimal reproduction's library (NOTES.md): 4 bytes of thread-local storage, as
// libOpenCL.so.1 has. Loaded by dlopen, its TLS is a block that glibc mallocs in each thread that
// first uses it.
thread_local int module_counter = 0;

extern "C" int* module_tls() {
  ++module_counter;
  return &module_counter;
}
