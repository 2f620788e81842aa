// zenflow's Python module (_zenflow): Config, Engine over the host and emulated backends (and
// CUDA when built with ZENFLOW_PY_CUDA, in cuda_engine.cu), arrays through DLPack, the host
// primitives. Errors: zenflow::invalid_argument -> ValueError, everything else -> RuntimeError,
// with the library's message. The GIL is released in every call that can wait.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/core/emulated_device.hpp>
#include <zenflow/engine/emulated_backend.hpp>
#include <zenflow/engine/engine.hpp>
#include <zenflow/engine/host_backend.hpp>

#include "arrays.hpp"
#include "engine_iface.hpp"
#include "primitives.hpp"

using namespace nb::literals;

namespace zenflow_py {
namespace {

struct options_in {
  std::optional<float> lr_scale;
  std::optional<float> weight_decay;
  std::string name;
  [[nodiscard]] zenflow::param_options get() const { return {lr_scale, weight_decay, name}; }
};

/// A weights/grads pair checked against each other and the backend.
elem check_pair(const std::string& fn, const array& w, const array& g, where wh, int device) {
  if (w.data() == nullptr && w.size() > 0) {
    bad(fn, "weights", "has no storage (freed, or resized to 0 bytes)");
  }
  if (g.data() == nullptr && g.size() > 0) {
    bad(fn, "grads", "has no storage (freed, or resized to 0 bytes)");
  }
  const auto t = elem_of(w.dtype());
  if (!t) {
    bad(fn, "weights",
        "has dtype " + dtype_name(w.dtype()) + "; the engine takes float32, float16 or bfloat16");
  }
  if (!(g.dtype() == w.dtype())) {
    bad(fn, "grads", "has dtype " + dtype_name(g.dtype()) + ", not the weights' " + dtype_name(w.dtype()));
  }
  check_place(fn, "weights", w, wh, device);
  check_place(fn, "grads", g, wh, device);
  if (g.ndim() != w.ndim()) {
    bad(fn, "grads",
        "has " + std::to_string(g.ndim()) + " dimensions, the weights " + std::to_string(w.ndim()));
  }
  for (std::size_t d = 0; d < w.ndim(); ++d) {
    if (g.shape(d) != w.shape(d)) {
      bad(fn, "grads",
          "has another shape than 'weights' (dimension " + std::to_string(d) + ": " +
              std::to_string(g.shape(d)) + " vs " + std::to_string(w.shape(d)) + ")");
    }
    if (g.shape(d) != 1 && g.stride(d) != w.stride(d)) {
      bad(fn, "grads", "has other strides than 'weights' (dimension " + std::to_string(d) + ")");
    }
  }
  if (w.size() == 0) {
    bad(fn, "weights", "is empty");
  }
  return *t;
}

// ---- Engine ------------------------------------------------------------------------------

/// The emulated device's timing model from a dict (tests: streams that run late): its keys are
/// emulated_timing's fields, the durations in microseconds (`launch_latency_us`).
zenflow::emulated_timing emulated_timing_of(const nb::dict& d) {
  constexpr const char* fn = "zenflow.Engine";
  zenflow::emulated_timing t;
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    const auto number = [&] {
      try {
        return nb::cast<double>(v);
      } catch (const nb::cast_error&) {
        bad(fn, "emulated_timing." + key, "must be a number");
      }
    };
    const double x = number();
    if (!(x >= 0.0)) {
      bad(fn, "emulated_timing." + key, "must be >= 0");
    }
    if (key == "d2h_bytes_per_second") {
      t.d2h_bytes_per_second = x;
    } else if (key == "h2d_bytes_per_second") {
      t.h2d_bytes_per_second = x;
    } else if (key == "device_bytes_per_second") {
      t.device_bytes_per_second = x;
    } else if (key == "launch_latency_us") {
      t.launch_latency = std::chrono::nanoseconds(static_cast<std::int64_t>(x * 1e3));
    } else if (key == "max_jitter_us") {
      t.max_jitter = std::chrono::microseconds(static_cast<std::int64_t>(x));
    } else if (key == "max_host_jitter_us") {
      t.max_host_jitter = std::chrono::microseconds(static_cast<std::int64_t>(x));
    } else if (key == "jitter_seed") {
      t.jitter_seed = static_cast<std::uint64_t>(x);
    } else {
      bad(fn, "emulated_timing",
          "has an unknown key '" + key +
              "' (d2h_bytes_per_second, h2d_bytes_per_second, device_bytes_per_second, "
              "launch_latency_us, max_jitter_us, max_host_jitter_us, jitter_seed)");
    }
  }
  return t;
}

/// The Python Engine: the backend-erased engine, the arrays it was given (kept alive), its backend.
class py_engine {
public:
  py_engine(const zenflow::config& cfg,
            const std::string& backend,
            int device,
            const std::optional<zenflow::emulated_timing>& timing)
      : backend_(backend) {
    constexpr const char* fn = "zenflow.Engine";
    if (timing && backend != "emulated") {
      bad(fn, "emulated_timing", "is for backend \"emulated\" only (the backend is \"" + backend + "\")");
    }
    if (backend == "host") {
      e_ = std::make_unique<engine_impl<zenflow::engine<zenflow::host_backend>>>(cfg);
      where_ = where::host;
    } else if (backend == "emulated") {
      emu_ = std::make_unique<zenflow::emulated_device>(timing.value_or(zenflow::emulated_timing{}));
      e_ = std::make_unique<engine_impl<zenflow::engine<zenflow::emulated_backend>>>(cfg, *emu_);
      where_ = where::host;
    } else if (backend == "cuda") {
#if ZENFLOW_PY_CUDA
      if (device >= 0) {
        if (cudaSetDevice(device) != cudaSuccess) {
          bad(fn, "device", "is not a usable CUDA device (" + std::to_string(device) + ")");
        }
      } else if (cudaGetDevice(&device) != cudaSuccess) {
        throw std::runtime_error("zenflow.Engine: no usable CUDA device");
      }
      e_ = make_cuda_engine(cfg);
      where_ = where::cuda;
      device_ = device;
#else
      (void)device;
      bad(fn, "backend",
          "is \"cuda\", but this zenflow module was built without CUDA (ZENFLOW_ENABLE_CUDA=OFF; see "
          "docs/python.md)");
#endif
    } else {
      bad(fn, "backend", "must be \"host\", \"emulated\" or \"cuda\", not \"" + backend + "\"");
    }
  }
  ~py_engine() {
    nb::gil_scoped_release nogil; // the destructor joins the engine's threads
    e_.reset();
    emu_.reset();
  }

  std::int32_t add_matrix(const array& w,
                          const array& g,
                          std::optional<std::int64_t> channels,
                          std::optional<std::int64_t> channel_len,
                          std::optional<std::int64_t> ld,
                          const std::string& layout_s,
                          options_in opt) {
    const std::string fn = "zenflow.Engine.add_matrix";
    const auto layout = parse_layout(fn, layout_s);
    const elem t = check_pair(fn, w, g, where_, device_);
    std::int64_t ch = 0, len = 0, lead = 0;
    if (!channels &&
        !channel_len) { // from the shape: contiguous [channels, channel_len], strided [channel_len, channels]
      const shape2 s = matrix_shape(fn, "weights", w);
      ch = layout == zenflow::channel_layout::contiguous ? s.rows : s.cols;
      len = layout == zenflow::channel_layout::contiguous ? s.cols : s.rows;
      lead = s.ld;
      if (ld && *ld != 0 && *ld != lead) {
        bad(fn, "ld",
            "is " + std::to_string(*ld) + ", but the array's row stride is " + std::to_string(lead));
      }
    } else {
      if (!channels || !channel_len) {
        bad(fn, channels ? "channel_len" : "channels", "must be given with the other one (or neither)");
      }
      if (!dense(w)) {
        bad(fn, "weights", "must be contiguous when 'channels' and 'channel_len' are given");
      }
      ch = *channels;
      len = *channel_len;
      lead = ld.value_or(0);
      if (ch >= 1 && len >= 1) {
        const std::int64_t l = lead != 0 ? lead : (layout == zenflow::channel_layout::contiguous ? len : ch);
        const std::int64_t extent =
            layout == zenflow::channel_layout::contiguous ? (ch - 1) * l + len : (len - 1) * l + ch;
        if (l > 0 && extent > static_cast<std::int64_t>(w.size())) {
          bad(fn, "weights",
              "has " + std::to_string(w.size()) + " elements, fewer than the " + std::to_string(extent) +
                  " that channels, channel_len and ld span");
        }
      }
    }
    const auto id = e_->add_matrix(t, w.data(), g.data(), ch, len, lead, layout, opt.get());
    keep_.push_back(w);
    keep_.push_back(g);
    return id.index;
  }

  std::int32_t add_vector(const array& w, const array& g, options_in opt) {
    const std::string fn = "zenflow.Engine.add_vector";
    const elem t = check_pair(fn, w, g, where_, device_);
    if (!dense(w)) {
      bad(fn, "weights", "must be contiguous");
    }
    const auto id = e_->add_vector(t, w.data(), g.data(), static_cast<std::int64_t>(w.size()), opt.get());
    keep_.push_back(w);
    keep_.push_back(g);
    return id.index;
  }

  void initialize(std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    e_->initialize(to_stream(s));
  }
  void grad_ready(std::int32_t p, std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    e_->grad_ready(zenflow::param_id{p}, to_stream(s));
  }
  /// One step; `loss_scale`, `found_inf`: one float32 each in the backend's memory (checked, and
  /// kept alive for the two steps after: the backend reads them when its stream gets there).
  zenflow::step_report step(float lr,
                            std::uintptr_t s,
                            const std::optional<array>& loss_scale,
                            const std::optional<array>& found_inf,
                            std::optional<float> max_norm,
                            const std::vector<std::int32_t>& no_grad) {
    const std::string fn = "zenflow.Engine.step";
    zenflow::step_options opt;
    if (loss_scale) {
      opt.loss_scale = static_cast<const float*>(scalar_f32(fn, "loss_scale", *loss_scale).data());
    }
    if (found_inf) {
      opt.found_inf = static_cast<float*>(scalar_f32(fn, "found_inf", *found_inf).data());
    }
    opt.max_norm = max_norm;
    std::vector<zenflow::param_id> ids;
    ids.reserve(no_grad.size());
    for (const std::int32_t p : no_grad) {
      ids.push_back(zenflow::param_id{p});
    }
    opt.no_grad = ids;
    zenflow::step_report r;
    {
      nb::gil_scoped_release nogil;
      r = e_->step(lr, to_stream(s), opt);
    }
    step_arrays_[1] = std::move(step_arrays_[0]);
    step_arrays_[0].clear();
    for (const auto* a : {&loss_scale, &found_inf}) {
      if (*a) {
        step_arrays_[0].push_back(**a);
      }
    }
    return r;
  }
  void set_lr_scale(std::int32_t p, float lr_scale) {
    check_param("zenflow.Engine.set_lr_scale", p);
    e_->set_lr_scale(zenflow::param_id{p}, lr_scale);
  }
  /// A one-element float32 array in the backend's memory.
  const array& scalar_f32(const std::string& fn, const char* name, const array& a) const {
    if (a.size() != 1 || !(a.dtype() == nb::dtype<float>())) {
      bad(fn, name,
          "must be one float32 (it has " + std::to_string(a.size()) + " elements of " +
              dtype_name(a.dtype()) + ")");
    }
    check_place(fn, name, a, where_, device_);
    return a;
  }
  void flush(std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    e_->flush(to_stream(s));
  }
  /// Waits until the work enqueued on `s` so far is done (the emulated device's stream, or the CUDA
  /// stream): after it the host may write the gradients the last step read. The host backend runs
  /// everything when it is enqueued.
  void synchronize(std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    if (emu_) {
      emu_->synchronize_stream(to_stream(s));
    } else if (where_ == where::cuda) {
      if (const cudaError_t e = cudaStreamSynchronize(to_stream(s)); e != cudaSuccess) {
        throw std::runtime_error(std::string("zenflow.Engine.synchronize: ") + cudaGetErrorString(e));
      }
    }
  }
  void save(const std::string& path, std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    e_->save(path, to_stream(s));
  }
  void load(const std::string& path, std::uintptr_t s) {
    nb::gil_scoped_release nogil;
    e_->load(path, to_stream(s));
  }
  nb::dict state(std::int32_t p, std::uintptr_t s) {
    check_param("zenflow.Engine.state", p);
    zenflow::param_state st;
    {
      nb::gil_scoped_release nogil;
      st = e_->state(zenflow::param_id{p}, to_stream(s));
    }
    nb::dict d;
    d["master"] = to_numpy(std::move(st.master));
    d["m"] = to_numpy(std::move(st.m));
    d["v"] = to_numpy(std::move(st.v));
    d["counts"] = to_numpy(std::move(st.counts));
    return d;
  }
  void check_param(const char* fn, std::int32_t p) const {
    if (p < 0 || static_cast<std::size_t>(p) >= e_->param_count()) {
      bad(fn, "param", "is not a registered parameter (" + std::to_string(p) + ")");
    }
  }

  engine_iface& e() {
    return *e_;
  }
  [[nodiscard]] const std::string& backend() const {
    return backend_;
  }

private:
  std::string backend_;
  where where_ = where::host;
  int device_ = -1;
  std::unique_ptr<zenflow::emulated_device> emu_; // before e_: outlives the engine on it
  std::unique_ptr<engine_iface> e_;
  std::vector<array> keep_;           // the arrays registered: the engine writes them until it is gone
  std::vector<array> step_arrays_[2]; // the last two steps' loss_scale / found_inf
};

// ---- config: the enums as their JSON spellings --------------------------------------------

template <class E>
E parse_enum(const char* key, const std::string& s, std::initializer_list<E> all) {
  std::string names;
  for (E e : all) {
    if (zenflow::to_string(e) == s) {
      return e;
    }
    names += (names.empty() ? "\"" : ", \"") + std::string(zenflow::to_string(e)) + "\"";
  }
  throw nb::value_error(
      ("zenflow.Config: '" + std::string(key) + "' must be one of " + names + ", not \"" + s + "\"").c_str());
}

#define ZF_PY_ENUM(cls, field, key, ...)                                                                     \
  cls.def_prop_rw(                                                                                           \
      key, [](const zenflow::config& c) { return std::string(zenflow::to_string(c.field)); },                \
      [](zenflow::config& c, const std::string& s) { c.field = parse_enum(key, s, {__VA_ARGS__}); })

std::string norm_name(zenflow::channel_norm n) {
  return n == zenflow::channel_norm::sq_l2 ? "sq_l2" : "l1";
}

const char* cause_name(zenflow::selection_cause c) {
  switch (c) {
  case zenflow::selection_cause::schedule:
    return "schedule";
  case zenflow::selection_cause::mass_drop:
    return "mass_drop";
  case zenflow::selection_cause::none:
    break;
  }
  return "none";
}

nb::dict memory_dict(const zenflow::memory_usage& m) {
  nb::dict d;
  d["device_selected_state"] = m.device_selected_state;
  d["device_vector_state"] = m.device_vector_state;
  d["device_staging"] = m.device_staging;
  d["device_upload"] = m.device_upload;
  d["device_scratch"] = m.device_scratch;
  d["device_window_sum"] = m.device_window_sum;
  d["device_reduction"] = m.device_reduction;
  d["host_state"] = m.host_state;
  d["host_accumulators"] = m.host_accumulators;
  d["host_ring"] = m.host_ring;
  d["host_upload"] = m.host_upload;
  d["host_landing"] = m.host_landing;
  d["host_staging"] = m.host_staging;
  d["device_total"] = m.device_total();
  d["host_total"] = m.host_total();
  return d;
}

} // namespace
} // namespace zenflow_py

NB_MODULE(_zenflow, mod) {
  using namespace zenflow_py;
  using zenflow::config;
  mod.doc() = "zenflow: ZenFlow's stall-free offloaded optimizer (C++ engine binding)";
#if ZENFLOW_PY_CUDA
  mod.attr("has_cuda") = true;
#else
  mod.attr("has_cuda") = false;
#endif
#if ZENFLOW_WITH_JSON
  mod.attr("has_json") = true;
#else
  mod.attr("has_json") = false;
#endif

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const zenflow::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  // ---- Config ----
  auto cfg = nb::class_<config>(mod, "_Config");
  cfg.def(nb::init<>())
      .def("_assign", [](config& c, const config& o) { c = o; })
      .def("validate", &config::validate)
      .def("describe", [](const config& c) { return c.describe(); })
      .def("topk", &config::topk, "channels"_a)
      .def_static("_deepspeed_defaults", &config::deepspeed_defaults)
      .def_rw("topk_ratio", &config::topk_ratio)
      .def_rw("select_interval", &config::select_interval)
      .def_rw("update_interval", &config::update_interval)
      .def_rw("full_warm_up_rounds", &config::full_warm_up_rounds)
      .def_rw("overlap_step", &config::overlap_step)
      .def_rw("auto_ratio", &config::auto_ratio)
      .def_rw("pt_reserved_cores_perc", &config::pt_reserved_cores_perc)
      .def_rw("steps_per_epoch", &config::steps_per_epoch)
      .def_rw("max_update_interval", &config::max_update_interval)
      .def_rw("min_update_interval", &config::min_update_interval)
      .def_rw("host_moments_per_step", &config::host_moments_per_step)
      .def_rw("host_accumulators", &config::host_accumulators)
      .def_rw("select_on_mass_drop", &config::select_on_mass_drop)
      .def_rw("min_select_interval", &config::min_select_interval)
      .def_rw("gradient_clipping", &config::gradient_clipping)
      .def_rw("loss_scale", &config::loss_scale)
      .def_rw("ring_slot_bytes", &config::ring_slot_bytes)
      .def_rw("ring_slots", &config::ring_slots)
      .def_rw("host_threads", &config::host_threads)
      .def_rw("pin_host_threads", &config::pin_host_threads)
      .def_prop_rw(
          "lr", [](const config& c) { return c.adam.lr; }, [](config& c, float v) { c.adam.lr = v; })
      .def_prop_rw(
          "beta1", [](const config& c) { return c.adam.beta1; }, [](config& c, float v) { c.adam.beta1 = v; })
      .def_prop_rw(
          "beta2", [](const config& c) { return c.adam.beta2; }, [](config& c, float v) { c.adam.beta2 = v; })
      .def_prop_rw(
          "eps", [](const config& c) { return c.adam.eps; }, [](config& c, float v) { c.adam.eps = v; })
      .def_prop_rw(
          "weight_decay", [](const config& c) { return c.adam.weight_decay; },
          [](config& c, float v) { c.adam.weight_decay = v; })
      .def_prop_rw(
          "decoupled", [](const config& c) { return c.adam.decoupled; },
          [](config& c, bool v) { c.adam.decoupled = v; })
      .def_prop_rw(
          "importance", [](const config& c) { return norm_name(c.importance); },
          [](config& c, const std::string& s) {
            if (s != "sq_l2" && s != "l1") {
              throw nb::value_error(
                  ("zenflow.Config: 'importance' must be \"sq_l2\" or \"l1\", not \"" + s + "\"").c_str());
            }
            c.importance = s == "sq_l2" ? zenflow::channel_norm::sq_l2 : zenflow::channel_norm::l1;
          })
      .def_prop_rw(
          "param_groups",
          [](const config& c) {
            nb::list l;
            for (const auto& g : c.param_groups) {
              nb::dict d;
              d["match"] = g.match;
              if (g.lr_scale) {
                d["lr_scale"] = *g.lr_scale;
              }
              if (g.weight_decay) {
                d["weight_decay"] = *g.weight_decay;
              }
              l.append(d);
            }
            return l;
          },
          [](config& c, const nb::list& l) {
            std::vector<zenflow::param_group> gs;
            for (nb::handle h : l) {
              nb::dict d = nb::cast<nb::dict>(h);
              zenflow::param_group g;
              g.match = nb::cast<std::string>(d["match"]);
              if (d.contains("lr_scale")) {
                g.lr_scale = nb::cast<float>(d["lr_scale"]);
              }
              if (d.contains("weight_decay")) {
                g.weight_decay = nb::cast<float>(d["weight_decay"]);
              }
              gs.push_back(std::move(g));
            }
            c.param_groups = std::move(gs);
          });
  ZF_PY_ENUM(cfg, mode, "mode", zenflow::optimizer_mode::zenflow, zenflow::optimizer_mode::offload_sync,
             zenflow::optimizer_mode::gpu_adamw);
  ZF_PY_ENUM(cfg, select, "select_strategy", zenflow::select_strategy::step, zenflow::select_strategy::epoch,
             zenflow::select_strategy::automatic);
  ZF_PY_ENUM(cfg, host_lr_scale, "host_lr_scale", zenflow::host_lr_scaling::linear,
             zenflow::host_lr_scaling::sqrt, zenflow::host_lr_scaling::none, zenflow::host_lr_scaling::capped,
             zenflow::host_lr_scaling::snr);
  ZF_PY_ENUM(cfg, host_moments, "host_moments", zenflow::moment_precision::fp32,
             zenflow::moment_precision::bf16, zenflow::moment_precision::int8);
  ZF_PY_ENUM(cfg, upload, "upload", zenflow::upload_policy::whole_window, zenflow::upload_policy::chunk_ring);
  ZF_PY_ENUM(cfg, accumulate, "accumulate", zenflow::accumulation_site::host,
             zenflow::accumulation_site::device);
#if ZENFLOW_WITH_JSON
  cfg.def_static(
         "_from_deepspeed_json_string",
         [](const std::string& text, bool strict) {
           return config::from_deepspeed_json_string(text, zenflow::config_read_options{strict});
         },
         "text"_a, "strict"_a = false)
      .def_static(
          "_from_deepspeed_json_file",
          [](const std::string& path, bool strict) {
            return config::from_deepspeed_json_file(path, zenflow::config_read_options{strict});
          },
          "path"_a, "strict"_a = false)
      .def("_to_deepspeed_json_string", [](const config& c) { return c.to_deepspeed_json().dump(); });
#endif

  // ---- reports ----
  nb::class_<zenflow::step_report>(mod, "StepReport")
      .def_ro("step", &zenflow::step_report::step)
      .def_ro("warm_up", &zenflow::step_report::warm_up)
      .def_ro("selection", &zenflow::step_report::selection)
      .def_ro("window_closed", &zenflow::step_report::window_closed)
      .def_ro("skip_known", &zenflow::step_report::skip_known)
      .def_ro("skipped", &zenflow::step_report::skipped)
      .def_ro("d2h_bytes", &zenflow::step_report::d2h_bytes)
      .def_ro("h2d_bytes", &zenflow::step_report::h2d_bytes)
      .def_ro("stall_s", &zenflow::step_report::stall_s)
      .def_ro("comm_bytes", &zenflow::step_report::comm_bytes)
      .def_ro("window_length", &zenflow::step_report::window_length)
      .def_ro("selection_age", &zenflow::step_report::selection_age)
      .def_prop_ro("selection_reason",
                   [](const zenflow::step_report& r) { return cause_name(r.selection_reason); })
      .def("__repr__", [](const zenflow::step_report& r) {
        return "StepReport(step=" + std::to_string(r.step) + ", warm_up=" + (r.warm_up ? "True" : "False") +
               ", selection=" + (r.selection ? "True" : "False") +
               ", window_closed=" + (r.window_closed ? "True" : "False") +
               ", skipped=" + (r.skipped ? "True" : "False") + ", d2h_bytes=" + std::to_string(r.d2h_bytes) +
               ", h2d_bytes=" + std::to_string(r.h2d_bytes) + ", stall_s=" + std::to_string(r.stall_s) +
               ", window_length=" + std::to_string(r.window_length) + ")";
      });

  nb::class_<zenflow::stats>(mod, "Stats")
      .def_ro("last", &zenflow::stats::last)
      .def_ro("steps", &zenflow::stats::steps)
      .def_ro("skipped_steps", &zenflow::stats::skipped_steps)
      .def_ro("selections", &zenflow::stats::selections)
      .def_ro("mass_drop_selections", &zenflow::stats::mass_drop_selections)
      .def_ro("windows_closed", &zenflow::stats::windows_closed)
      .def_ro("host_jobs", &zenflow::stats::host_jobs)
      .def_ro("d2h_bytes", &zenflow::stats::d2h_bytes)
      .def_ro("h2d_bytes", &zenflow::stats::h2d_bytes)
      .def_ro("stall_s", &zenflow::stats::stall_s)
      .def_ro("comm_bytes", &zenflow::stats::comm_bytes)
      .def_ro("host_window_s", &zenflow::stats::host_window_s)
      .def_ro("last_host_window_s", &zenflow::stats::last_host_window_s)
      .def_ro("last_window_length", &zenflow::stats::last_window_length)
      .def_ro("model_bytes", &zenflow::stats::model_bytes)
      .def_ro("max_staleness_windows", &zenflow::stats::max_staleness_windows)
      .def_prop_ro("memory", [](const zenflow::stats& s) { return memory_dict(s.memory); })
      .def_prop_ro("placement",
                   [](const zenflow::stats& s) {
                     nb::dict d;
                     d["pinned"] = s.placement.pinned;
                     d["threads"] = s.placement.threads;
                     d["worker_cores"] = s.placement.worker_cores;
                     d["training_cores"] = s.placement.training_cores;
                     d["numa_nodes"] = s.placement.numa_nodes;
                     d["describe"] = s.placement.describe();
                     return d;
                   })
      .def("pcie_model_ratio", &zenflow::stats::pcie_model_ratio);

  // ---- Engine ----
  nb::class_<py_engine>(mod, "_Engine")
      .def(
          "__init__",
          [](py_engine* self, const config& c, const std::string& backend, int device,
             std::optional<nb::dict> timing) {
            std::optional<zenflow::emulated_timing> t;
            if (timing) {
              t = emulated_timing_of(*timing);
            }
            new (self) py_engine(c, backend, device, t);
          },
          "config"_a, "backend"_a = "host", "device"_a = -1, "emulated_timing"_a = nb::none())
      .def(
          "add_matrix",
          [](py_engine& e, const array& w, const array& g, std::optional<std::int64_t> channels,
             std::optional<std::int64_t> channel_len, std::optional<std::int64_t> ld,
             const std::string& layout, std::optional<float> lr_scale, std::optional<float> weight_decay,
             const std::string& name) {
            return e.add_matrix(w, g, channels, channel_len, ld, layout, {lr_scale, weight_decay, name});
          },
          "weights"_a, "grads"_a, "channels"_a = nb::none(), "channel_len"_a = nb::none(),
          "ld"_a = nb::none(), "layout"_a = "contiguous", "lr_scale"_a = nb::none(),
          "weight_decay"_a = nb::none(), "name"_a = "")
      .def(
          "add_vector",
          [](py_engine& e, const array& w, const array& g, std::optional<float> lr_scale,
             std::optional<float> weight_decay, const std::string& name) {
            return e.add_vector(w, g, {lr_scale, weight_decay, name});
          },
          "weights"_a, "grads"_a, "lr_scale"_a = nb::none(), "weight_decay"_a = nb::none(), "name"_a = "")
      .def("initialize", &py_engine::initialize, "stream"_a = 0)
      .def("grad_ready", &py_engine::grad_ready, "param"_a, "stream"_a = 0)
      .def("step", &py_engine::step, "lr"_a, "stream"_a = 0, "loss_scale"_a = nb::none(),
           "found_inf"_a = nb::none(), "max_norm"_a = nb::none(), "no_grad"_a = std::vector<std::int32_t>{})
      .def("set_lr_scale", &py_engine::set_lr_scale, "param"_a, "lr_scale"_a)
      .def(
          "release_gradients",
          [](py_engine& e, std::uintptr_t s) {
            nb::gil_scoped_release nogil;
            e.e().release_gradients(to_stream(s));
          },
          "stream"_a = 0)
      .def("flush", &py_engine::flush, "stream"_a = 0)
      .def("synchronize", &py_engine::synchronize, "stream"_a = 0)
      .def("save", &py_engine::save, "path"_a, "stream"_a = 0)
      .def("load", &py_engine::load, "path"_a, "stream"_a = 0)
      .def("state", &py_engine::state, "param"_a, "stream"_a = 0)
      .def("stats", [](py_engine& e) { return e.e().stats(); })
      .def("selected",
           [](py_engine& e, std::int32_t p) {
             e.check_param("zenflow.Engine.selected", p);
             return to_numpy(e.e().selected(zenflow::param_id{p}));
           })
      .def("settings",
           [](py_engine& e, std::int32_t p) {
             e.check_param("zenflow.Engine.settings", p);
             const auto s = e.e().settings(zenflow::param_id{p});
             nb::dict d;
             d["name"] = s.name;
             d["lr_scale"] = s.lr_scale;
             d["weight_decay"] = s.weight_decay;
             return d;
           })
      .def("start_trace", [](py_engine& e) { e.e().start_trace(); })
      .def("write_trace",
           [](py_engine& e, const std::string& path) {
             nb::gil_scoped_release nogil;
             e.e().write_trace(path);
           })
      .def_prop_ro("steps", [](py_engine& e) { return e.e().steps(); })
      .def_prop_ro("param_count", [](py_engine& e) { return e.e().param_count(); })
      .def_prop_ro("initialized", [](py_engine& e) { return e.e().initialized(); })
      .def_prop_ro("backend", &py_engine::backend)
      .def_prop_ro("config", [](py_engine& e) { return e.e().configuration(); });

  // ---- primitives ----
  // The training thread onto the cores the engine's placement reserved for it (Stats.placement).
  mod.def(
      "pin_to_training_cores",
      [](const zenflow::stats& s) { return zenflow::pin_to_training_cores(s.placement); }, "stats"_a);
  bind_primitives(mod);
}
