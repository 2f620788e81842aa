/// @file
/// The single-rank policy's side of the engine (parallel_side.hpp): the step reads the user's
/// gradients, this rank keeps every host row, and nothing crosses a wire. Every member is the
/// plain path the owner partition reduces to with one rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/policy/parallel_side.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/parallel.hpp>
#include <zenflow/engine/param_state.hpp>
#include <zenflow/engine/stats.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

template <class Backend, class Host>
class parallel_side<Backend, single_rank, Host> : public whole_rows_side<Backend, Host> {
public:
  using argument_type = single_rank;

  explicit parallel_side(single_rank /*unused*/ = {}) {}

  [[nodiscard]] static constexpr int rank() noexcept { return 0; }
  [[nodiscard]] static constexpr int ranks() noexcept { return 1; }

  std::uint64_t verify(const config&, const std::vector<param_info>&, cudaStream_t) { return 0; }
  /// Every host row is this rank's (the ring is sized by the whole matrices); the gradients are
  /// the user's, streamed as grad_ready() announces them.
  parallel_layout setup(const config& /*cfg*/,
                        device_plan<Backend>& plan,
                        std::vector<param_info>& params,
                        Host& host,
                        std::size_t /*slot_bytes*/,
                        cudaStream_t /*stream*/) {
    this->bind(plan, params, host);
    return {};
  }
  std::size_t init_host_rows(std::size_t p, cudaStream_t stream) {
    return init_whole_rows(*plan_, p, (*params_)[p], (*host_)[p], stream);
  }

  [[nodiscard]] static no_step_hooks begin_step(std::int64_t /*t*/, cudaStream_t /*stream*/) noexcept {
    return {};
  }
  bool select(channel_norm kind,
              std::vector<std::vector<std::int32_t>>& sets,
              std::size_t& d2h,
              cudaStream_t stream) {
    return plan_->select_all(kind, sets, d2h, stream);
  }
  template <class Order>
  void write_rest(cudaStream_t /*stream*/, cudaStream_t /*pack_stream*/, Order&& /*order*/) {}
  [[nodiscard]] static constexpr parallel_step_end end_step() noexcept { return {}; }

  [[nodiscard]] zenflow::stats summed(const zenflow::stats& s, cudaStream_t /*stream*/) const { return s; }

private:
  using whole_rows_side<Backend, Host>::plan_;
  using whole_rows_side<Backend, Host>::params_;
  using whole_rows_side<Backend, Host>::host_;
};

} // namespace detail
ZF_NAMESPACE_END
