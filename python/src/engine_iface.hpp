// The Python binding's view of zenflow::engine<Backend>: one virtual interface, so that the
// binding's TU is written once and the CUDA backend can live in its own .cu TU (cuda_engine.cu).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/dtype.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/params.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/engine/step_options.hpp>

namespace zenflow_py {

/// The working types an array may have (DLPack float32, float16, bfloat16).
enum class elem : std::uint8_t { f32, f16, bf16 };

class engine_iface {
public:
  virtual ~engine_iface() = default;
  virtual zenflow::param_id add_matrix(elem t,
                                       void* w,
                                       const void* g,
                                       std::int64_t channels,
                                       std::int64_t channel_len,
                                       std::int64_t ld,
                                       zenflow::channel_layout layout,
                                       const zenflow::param_options& opt) = 0;
  virtual zenflow::param_id
  add_vector(elem t, void* w, const void* g, std::int64_t n, const zenflow::param_options& opt) = 0;
  virtual void initialize(cudaStream_t s) = 0;
  virtual void grad_ready(zenflow::param_id p, cudaStream_t s) = 0;
  virtual zenflow::step_report step(float lr, cudaStream_t s, const zenflow::step_options& opt) = 0;
  virtual void set_lr_scale(zenflow::param_id p, float lr_scale) = 0;
  virtual void release_gradients(cudaStream_t s) = 0;
  virtual void flush(cudaStream_t s) = 0;
  virtual void save(const std::string& path, cudaStream_t s) = 0;
  virtual void load(const std::string& path, cudaStream_t s) = 0;
  [[nodiscard]] virtual zenflow::stats stats() const = 0;
  virtual zenflow::param_state state(zenflow::param_id p, cudaStream_t s) = 0;
  [[nodiscard]] virtual std::vector<std::int32_t> selected(zenflow::param_id p) const = 0;
  [[nodiscard]] virtual zenflow::param_settings settings(zenflow::param_id p) const = 0;
  virtual void start_trace() = 0;
  virtual void write_trace(const std::string& path) const = 0;
  [[nodiscard]] virtual std::int64_t steps() const = 0;
  [[nodiscard]] virtual std::size_t param_count() const = 0;
  [[nodiscard]] virtual bool initialized() const = 0;
  [[nodiscard]] virtual const zenflow::config& configuration() const = 0;
};

/// engine_iface over zenflow::engine<Backend>; `Holder` keeps what the backend refers to alive
/// (the emulated device) and is constructed first, destroyed last.
template <class Engine>
class engine_impl final : public engine_iface {
public:
  template <class... A>
  explicit engine_impl(const zenflow::config& cfg, A&&... backend_args)
      : e_(cfg, typename Engine::backend_type(std::forward<A>(backend_args)...)) {}

  zenflow::param_id add_matrix(elem t,
                               void* w,
                               const void* g,
                               std::int64_t channels,
                               std::int64_t channel_len,
                               std::int64_t ld,
                               zenflow::channel_layout layout,
                               const zenflow::param_options& opt) override {
    switch (t) {
    case elem::f32:
      return e_.add_matrix(static_cast<float*>(w), static_cast<const float*>(g), channels, channel_len, ld,
                           layout, opt);
    case elem::f16:
      return e_.add_matrix(static_cast<zenflow::half*>(w), static_cast<const zenflow::half*>(g), channels,
                           channel_len, ld, layout, opt);
    case elem::bf16:
      break;
    }
    return e_.add_matrix(static_cast<zenflow::bfloat16*>(w), static_cast<const zenflow::bfloat16*>(g),
                         channels, channel_len, ld, layout, opt);
  }
  zenflow::param_id
  add_vector(elem t, void* w, const void* g, std::int64_t n, const zenflow::param_options& opt) override {
    switch (t) {
    case elem::f32:
      return e_.add_vector(static_cast<float*>(w), static_cast<const float*>(g), n, opt);
    case elem::f16:
      return e_.add_vector(static_cast<zenflow::half*>(w), static_cast<const zenflow::half*>(g), n, opt);
    case elem::bf16:
      break;
    }
    return e_.add_vector(static_cast<zenflow::bfloat16*>(w), static_cast<const zenflow::bfloat16*>(g), n,
                         opt);
  }
  void initialize(cudaStream_t s) override { e_.initialize(s); }
  void grad_ready(zenflow::param_id p, cudaStream_t s) override { e_.grad_ready(p, s); }
  zenflow::step_report step(float lr, cudaStream_t s, const zenflow::step_options& opt) override {
    return e_.step(lr, s, opt);
  }
  void set_lr_scale(zenflow::param_id p, float lr_scale) override { e_.set_lr_scale(p, lr_scale); }
  void release_gradients(cudaStream_t s) override { e_.release_gradients(s); }
  void flush(cudaStream_t s) override { e_.flush(s); }
  void save(const std::string& path, cudaStream_t s) override { e_.save(path, s); }
  void load(const std::string& path, cudaStream_t s) override { e_.load(path, s); }
  [[nodiscard]] zenflow::stats stats() const override { return e_.stats(); }
  zenflow::param_state state(zenflow::param_id p, cudaStream_t s) override { return e_.state(p, s); }
  [[nodiscard]] std::vector<std::int32_t> selected(zenflow::param_id p) const override {
    return e_.selected(p);
  }
  [[nodiscard]] zenflow::param_settings settings(zenflow::param_id p) const override {
    return e_.settings(p);
  }
  void start_trace() override { e_.start_trace(); }
  void write_trace(const std::string& path) const override { e_.write_trace(path); }
  [[nodiscard]] std::int64_t steps() const override { return e_.steps(); }
  [[nodiscard]] std::size_t param_count() const override { return e_.param_count(); }
  [[nodiscard]] bool initialized() const override { return e_.initialized(); }
  [[nodiscard]] const zenflow::config& configuration() const override { return e_.configuration(); }

private:
  Engine e_;
};

/// Defined in cuda_engine.cu when the module is built with CUDA (ZENFLOW_PY_CUDA).
std::unique_ptr<engine_iface> make_cuda_engine(const zenflow::config& cfg);

} // namespace zenflow_py
