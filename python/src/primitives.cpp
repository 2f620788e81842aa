// The host primitives' binding (zenflow.channel_norms, zenflow.topk, zenflow.adamw): host (cpu)
// arrays, checked by name; the GIL is released while they run.
#include "primitives.hpp"

#include <cstdint>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/select/channel_norms.hpp>
#include <zenflow/select/topk.hpp>

#include "arrays.hpp"

using namespace nb::literals;

namespace zenflow_py {
namespace {

// ---- primitives (host arrays) ------------------------------------------------------------

void check_cuda(cudaError_t e, const char* fn) {
  if (e != cudaSuccess) {
    const std::string& msg = zenflow::last_error_message();
    throw nb::value_error(msg.empty() ? fn : msg.c_str());
  }
}

template <class T>
std::vector<float>
norms_of(const T* g, const shape2& s, zenflow::channel_layout layout, zenflow::channel_norm norm) {
  const std::int64_t ch = layout == zenflow::channel_layout::contiguous ? s.rows : s.cols;
  const std::int64_t len = layout == zenflow::channel_layout::contiguous ? s.cols : s.rows;
  std::vector<float> out(static_cast<std::size_t>(ch));
  std::size_t bytes = 0;
  auto run = [&](void* tmp) {
    return norm == zenflow::channel_norm::sq_l2
               ? zenflow::host::channel_norms<zenflow::channel_norm::sq_l2>(tmp, bytes, g, ch, len, s.ld,
                                                                            layout, out.data())
               : zenflow::host::channel_norms<zenflow::channel_norm::l1>(tmp, bytes, g, ch, len, s.ld, layout,
                                                                         out.data());
  };
  check_cuda(run(nullptr), "zenflow.channel_norms");
  std::vector<std::byte> tmp(std::max<std::size_t>(bytes, 1));
  check_cuda(run(tmp.data()), "zenflow.channel_norms");
  return out;
}

nb::ndarray<nb::numpy, float>
channel_norms(const array& g, const std::string& layout_s, const std::string& norm_s) {
  const std::string fn = "zenflow.channel_norms";
  const auto layout = parse_layout(fn, layout_s);
  if (norm_s != "sq_l2" && norm_s != "l1") {
    bad(fn, "norm", "must be \"sq_l2\" or \"l1\", not \"" + norm_s + "\"");
  }
  const auto norm = norm_s == "sq_l2" ? zenflow::channel_norm::sq_l2 : zenflow::channel_norm::l1;
  if (!on_host(g)) {
    bad(fn, "grad", "is on " + device_name(g) + "; the primitives' binding takes host (cpu) arrays");
  }
  const auto t = elem_of(g.dtype());
  if (!t) {
    bad(fn, "grad", "has dtype " + dtype_name(g.dtype()) + "; float32, float16 or bfloat16");
  }
  const shape2 s = matrix_shape(fn, "grad", g);
  std::vector<float> out;
  {
    nb::gil_scoped_release nogil;
    switch (*t) {
    case elem::f32:
      out = norms_of(static_cast<const float*>(g.data()), s, layout, norm);
      break;
    case elem::f16:
      out = norms_of(static_cast<const zenflow::half*>(g.data()), s, layout, norm);
      break;
    case elem::bf16:
      out = norms_of(static_cast<const zenflow::bfloat16*>(g.data()), s, layout, norm);
      break;
    }
  }
  return to_numpy(std::move(out));
}

nb::ndarray<nb::numpy, std::int32_t> topk(const array& scores, std::int64_t k) {
  const std::string fn = "zenflow.topk";
  if (!on_host(scores)) {
    bad(fn, "scores", "is on " + device_name(scores) + "; the primitives' binding takes host (cpu) arrays");
  }
  if (!(elem_of(scores.dtype()) == elem::f32) || scores.ndim() != 1 || !dense(scores)) {
    bad(fn, "scores", "must be a contiguous 1-D float32 array");
  }
  const auto n = static_cast<std::int64_t>(scores.size());
  if (k < 0 || k > n) {
    bad(fn, "k", "must be in [0, " + std::to_string(n) + "], not " + std::to_string(k));
  }
  std::vector<std::int32_t> idx(static_cast<std::size_t>(k));
  {
    nb::gil_scoped_release nogil;
    std::size_t bytes = 0;
    const auto* p = static_cast<const float*>(scores.data());
    check_cuda(zenflow::host::topk(nullptr, bytes, p, n, k, idx.data()), "zenflow.topk");
    std::vector<std::byte> tmp(std::max<std::size_t>(bytes, 1));
    check_cuda(zenflow::host::topk(tmp.data(), bytes, p, n, k, idx.data()), "zenflow.topk");
  }
  return to_numpy(std::move(idx));
}

void adamw(const array& master,
           const array& m,
           const array& v,
           const array& grad,
           std::int32_t count,
           float lr,
           float beta1,
           float beta2,
           float eps,
           float weight_decay,
           bool decoupled,
           float grad_scale,
           std::optional<array> out) {
  const std::string fn = "zenflow.adamw";
  const auto n = static_cast<std::int64_t>(master.size());
  auto f32 = [&](const char* name, const array& a) {
    if (!on_host(a)) {
      bad(fn, name, "is on " + device_name(a) + "; the primitives' binding takes host (cpu) arrays");
    }
    if (!(elem_of(a.dtype()) == elem::f32) || !dense(a)) {
      bad(fn, name, "must be a contiguous float32 array");
    }
    if (static_cast<std::int64_t>(a.size()) != n) {
      bad(fn, name, "has " + std::to_string(a.size()) + " elements, 'master' " + std::to_string(n));
    }
  };
  f32("master", master);
  f32("m", m);
  f32("v", v);
  f32("grad", grad);
  if (out) {
    f32("out", *out);
  }
  const zenflow::adamw_hparams hp{lr, beta1, beta2, eps, weight_decay, decoupled};
  nb::gil_scoped_release nogil;
  check_cuda(zenflow::host::adamw_span<float, float, float>(
                 static_cast<float*>(master.data()), static_cast<float*>(m.data()),
                 static_cast<float*>(v.data()), static_cast<const float*>(grad.data()),
                 out ? static_cast<float*>(out->data()) : nullptr, n, count, hp, grad_scale, nullptr),
             "zenflow.adamw");
}

} // namespace

void bind_primitives(nb::module_& mod) {
  mod.def("channel_norms", &channel_norms, "grad"_a, "layout"_a = "contiguous", "norm"_a = "sq_l2");
  mod.def("topk", &topk, "scores"_a, "k"_a);
  mod.def("adamw", &adamw, "master"_a, "m"_a, "v"_a, "grad"_a, "count"_a, "lr"_a, "beta1"_a = 0.9f,
          "beta2"_a = 0.999f, "eps"_a = 1e-8f, "weight_decay"_a = 0.0f, "decoupled"_a = true,
          "grad_scale"_a = 1.0f, "out"_a = nb::none());
}

} // namespace zenflow_py
