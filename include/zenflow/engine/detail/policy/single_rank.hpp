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
  std::size_t setup(const config& /*cfg*/,
                    device_plan<Backend>& plan,
                    std::vector<param_info>& params,
                    Host& host,
                    std::size_t /*slot_bytes*/,
                    cudaStream_t /*stream*/) {
    this->bind(plan, params, host);
    return 0;
  }
  [[nodiscard]] plan_inputs inputs() const { return {}; }
  /// Every host row is this rank's: the ring is sized by the whole matrices.
  [[nodiscard]] static std::vector<std::int64_t> kept_channels() { return {}; }
  std::size_t init_host_rows(std::size_t p, cudaStream_t stream) {
    return init_whole_rows(*plan_, p, (*params_)[p], (*host_)[p], stream);
  }

  [[nodiscard]] static constexpr bool streams_early() noexcept { return true; }
  [[nodiscard]] static constexpr bool packs_before_norms() noexcept { return true; }

  std::uint64_t reduce_gradients(std::int64_t /*t*/, cudaStream_t /*stream*/) { return 0; }
  [[nodiscard]] static no_step_hooks hooks(std::int64_t /*t*/) noexcept { return {}; }
  bool select(channel_norm kind,
              std::vector<std::vector<std::int32_t>>& sets,
              std::size_t& d2h,
              cudaStream_t stream) {
    return plan_->select_all(kind, sets, d2h, stream);
  }
  template <class Order>
  std::uint64_t write_rest(cudaStream_t /*stream*/, cudaStream_t /*pack_stream*/, Order&& /*order*/) {
    return 0;
  }
  [[nodiscard]] static constexpr std::uint64_t take_sent() noexcept { return 0; }

  [[nodiscard]] zenflow::stats summed(const zenflow::stats& s, cudaStream_t /*stream*/) const { return s; }

private:
  using whole_rows_side<Backend, Host>::plan_;
  using whole_rows_side<Backend, Host>::params_;
  using whole_rows_side<Backend, Host>::host_;
};

} // namespace detail
ZF_NAMESPACE_END
