// The C++ side of test_engine.py's bit-for-bit comparison: runs zenflow::engine<host_backend> on
// the inputs the test wrote and writes what the engine produced, for the test to compare with the
// Python binding's run on the same inputs.
//
//   engine_driver config.json inputs.bin outputs.bin
//
// inputs.bin (little-endian): int64 ch_a, len_a, ch_b, len_b, n, steps; float32 initial a
// ([ch_a, len_a], contiguous layout), b ([len_b, ch_b] row-major, strided layout), v ([n]); then
// per step: float32 lr, grads of a, b, v. outputs.bin: after each step the weights a, b, v; then
// the state (master, m, v) of a and b and the stats' d2h and h2d bytes (uint64).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

namespace {
template <class T>
void get(std::ifstream& in, T* p, std::size_t n) {
  in.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(n * sizeof(T)));
  if (!in) {
    throw std::runtime_error("engine_driver: inputs.bin is short");
  }
}
template <class T>
void put(std::ofstream& out, const T* p, std::size_t n) {
  out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n * sizeof(T)));
}
} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: engine_driver config.json inputs.bin outputs.bin\n";
    return 2;
  }
  try {
    const auto cfg = zenflow::config::from_deepspeed_json_file(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    std::int64_t h[6];
    get(in, h, 6);
    const auto [ch_a, len_a, ch_b, len_b, n, steps] = std::tuple{h[0], h[1], h[2], h[3], h[4], h[5]};
    const auto na = static_cast<std::size_t>(ch_a * len_a), nb = static_cast<std::size_t>(ch_b * len_b),
               nv = static_cast<std::size_t>(n);
    std::vector<float> a(na), b(nb), v(nv), ga(na), gb(nb), gv(nv);
    get(in, a.data(), na);
    get(in, b.data(), nb);
    get(in, v.data(), nv);
    zenflow::engine<zenflow::host_backend> zf(cfg);
    const auto ia = zf.add_matrix(a.data(), ga.data(), ch_a, len_a, {.name = "a"});
    const auto ib = zf.add_matrix(b.data(), gb.data(), ch_b, len_b, ch_b, zenflow::channel_layout::strided,
                                  {.name = "b"});
    zf.add_vector(v.data(), gv.data(), n, {.weight_decay = 0.0f, .name = "v"});
    zf.initialize();
    std::ofstream out(argv[3], std::ios::binary);
    for (std::int64_t s = 0; s < steps; ++s) {
      float lr = 0;
      get(in, &lr, 1);
      get(in, ga.data(), na);
      get(in, gb.data(), nb);
      get(in, gv.data(), nv);
      (void)zf.step(lr);
      put(out, a.data(), na);
      put(out, b.data(), nb);
      put(out, v.data(), nv);
    }
    zf.flush();
    for (const auto id : {ia, ib}) {
      const auto st = zf.state(id);
      put(out, st.master.data(), st.master.size());
      put(out, st.m.data(), st.m.size());
      put(out, st.v.data(), st.v.size());
    }
    const std::uint64_t bytes[2] = {zf.stats().d2h_bytes, zf.stats().h2d_bytes};
    put(out, bytes, 2);
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
