// The array checks and conversions the binding's TUs share (binding.cpp, primitives.cpp): each
// check names the function and the argument, and throws ValueError.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/views.hpp>

#include "engine_iface.hpp"

namespace nb = nanobind;

namespace zenflow_py {

using array = nb::ndarray<>;

[[noreturn]] inline void bad(const std::string& fn, const std::string& arg, const std::string& what) {
  throw nb::value_error((fn + ": '" + arg + "' " + what).c_str());
}

inline cudaStream_t to_stream(std::uintptr_t s) {
  return reinterpret_cast<cudaStream_t>(s);
} // NOLINT

inline std::string dtype_name(nb::dlpack::dtype t) {
  const char* kind = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)    ? "float"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)    ? "int"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)   ? "uint"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool)   ? "bool"
                                                                                           : "complex";
  return std::string(kind) + std::to_string(t.bits);
}

inline std::optional<elem> elem_of(nb::dlpack::dtype t) {
  if (t.lanes != 1) {
    return std::nullopt;
  }
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 32) {
    return elem::f32;
  }
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16) {
    return elem::f16;
  }
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16) {
    return elem::bf16;
  }
  return std::nullopt;
}

inline std::string device_name(const array& a) {
  switch (a.device_type()) {
  case nb::device::cpu::value:
    return "cpu";
  case nb::device::cuda::value:
    return "cuda:" + std::to_string(a.device_id());
  case nb::device::cuda_host::value:
    return "cuda_host (pinned cpu)";
  case nb::device::cuda_managed::value:
    return "cuda_managed";
  default:
    return "device type " + std::to_string(a.device_type());
  }
}

/// Where a backend's "device" arrays live.
enum class where : std::uint8_t { host, cuda };

inline bool on_host(const array& a) {
  return a.device_type() == nb::device::cpu::value || a.device_type() == nb::device::cuda_host::value;
}

/// The checks every array argument of the engine gets, naming the argument.
inline void check_place(const std::string& fn, const char* name, const array& a, where w, int device) {
  if (w == where::host && !on_host(a)) {
    bad(fn, name, "is on " + device_name(a) + ", but this engine's backend takes host (cpu) memory");
  }
  if (w == where::cuda &&
      !(a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value)) {
    bad(fn, name, "is on " + device_name(a) + ", but this engine's backend (cuda) takes CUDA device memory");
  }
  if (w == where::cuda && a.device_type() == nb::device::cuda::value && device >= 0 &&
      a.device_id() != device) {
    bad(fn, name, "is on " + device_name(a) + ", but this engine runs on cuda:" + std::to_string(device));
  }
}

/// The leading dimension of a 2-D array whose last dimension is dense, or of a dense array.
struct shape2 {
  std::int64_t rows = 0, cols = 0, ld = 0;
};

inline bool dense(const array& a) {
  std::int64_t expect = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expect) {
      return false;
    }
    expect *= a.shape(d);
  }
  return true;
}

inline shape2 matrix_shape(const std::string& fn, const char* name, const array& a) {
  if (a.ndim() < 2) {
    bad(fn, name, "must have 2 (or more) dimensions, it has " + std::to_string(a.ndim()));
  }
  shape2 s;
  s.rows = a.shape(0);
  if (a.ndim() == 2) {
    s.cols = a.shape(1);
    s.ld = a.stride(0);
    if (a.stride(1) != 1 && s.cols != 1) {
      bad(fn, name, "must be contiguous in its last dimension (stride " + std::to_string(a.stride(1)) + ")");
    }
    if (s.cols == 1) {
      s.ld = std::max<std::int64_t>(s.ld, 1);
    }
    return s;
  }
  if (!dense(a)) {
    bad(fn, name, "has more than 2 dimensions and is not contiguous");
  }
  s.cols = static_cast<std::int64_t>(a.size()) / std::max<std::int64_t>(s.rows, 1);
  s.ld = s.cols;
  return s;
}

inline zenflow::channel_layout parse_layout(const std::string& fn, const std::string& s) {
  if (s == "contiguous") {
    return zenflow::channel_layout::contiguous;
  }
  if (s == "strided") {
    return zenflow::channel_layout::strided;
  }
  bad(fn, "layout", "must be \"contiguous\" or \"strided\", not \"" + s + "\"");
}

// ---- numpy results -------------------------------------------------------------------------

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T> v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t n = heap->size();
  return nb::ndarray<nb::numpy, T>(heap->data(), {n}, owner);
}

} // namespace zenflow_py
