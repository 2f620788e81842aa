/// @file
/// The registry's part of an engine checkpoint (engine_checkpoint.hpp): the identity a file must
/// match, the configuration as describe() prints it (every setting) and the parameter list (kind,
/// dtype, shape, layout, name, resolved options, where it lives), with the rank and the ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline checkpoint_identity
registry_identity(const config& cfg, const std::vector<param_info>& params, int rank, int ranks) {
  const std::string described = cfg.describe();
  std::vector<std::byte> list;
  const auto put = [&](const void* x, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(x);
    list.insert(list.end(), b, b + n);
  };
  for (const auto& pi : params) {
    const std::int64_t f[] = {pi.matrix ? 1 : 0,
                              static_cast<std::int64_t>(pi.type),
                              pi.channels,
                              pi.channel_len,
                              pi.ld,
                              static_cast<std::int64_t>(pi.layout),
                              pi.device_rows_most, // a shard's device_capacity grows (crowded)
                              pi.host_side ? 1 : 0,
                              pi.device_dense ? 1 : 0,
                              static_cast<std::int64_t>(pi.name.size())};
    put(f, sizeof f);
    put(pi.name.data(), pi.name.size());
    put(&pi.registered_lr_scale, 4); // the current scale is the caller's, set like lr each step
    put(&pi.weight_decay, 4);
    if (pi.shard_total > 0) { // a sharded engine's: loadable only into the same ranges
      const std::int64_t sh[] = {pi.shard_first, pi.shard_total};
      put(sh, sizeof sh);
    }
  }
  return {checkpoint_hash(std::as_bytes(std::span(described.data(), described.size()))),
          checkpoint_hash(list), static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(ranks)};
}

} // namespace detail
ZF_NAMESPACE_END
