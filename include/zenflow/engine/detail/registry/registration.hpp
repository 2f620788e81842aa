/// @file
/// The checks of the engine's registration (add_matrix, add_vector): the ring-slot limit, byte
/// extents and overlaps with what is registered, and the parameter's options resolved against the
/// config's parameter groups. Each throws zenflow::invalid_argument naming the argument, before
/// anything is registered.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A channel (or a host-side vector) travels in one ring slot: the error gives the sizes and
/// the smallest ring_slot_bytes that fits.
inline void require_fits_slot(const config& cfg,
                              std::int64_t elements,
                              std::size_t element_bytes,
                              const char* fn,
                              const char* arg,
                              const char* what) {
  const auto bytes = static_cast<std::int64_t>(static_cast<std::uint64_t>(elements) * element_bytes);
  if (bytes <= cfg.ring_slot_bytes) {
    return;
  }
  const std::int64_t need = std::max<std::int64_t>(4096, (bytes + 255) / 256 * 256);
  std::string msg = std::string(fn) + ": argument '" + arg + "' makes " + what + " " + std::to_string(bytes) +
                    " bytes (" + std::to_string(elements) + " x " + std::to_string(element_bytes) +
                    "), larger than one ring slot (ring_slot_bytes = " + std::to_string(cfg.ring_slot_bytes) +
                    "), and it travels to the host in one slot: ";
  msg += need <= (std::int64_t{1} << 30)
             ? "set zenflow_ext.ring_slot_bytes (config::ring_slot_bytes) to at least " + std::to_string(need)
             : std::string("that is more than the largest slot (2^30 bytes)");
  msg += ", or register it in smaller pieces";
  throw invalid_argument(msg);
}

/// Bytes [begin, end) that a channel matrix of `elem` bytes per element spans.
struct byte_range {
  std::uintptr_t begin = 0, end = 0;
  [[nodiscard]] bool overlaps(const byte_range& o) const noexcept { return begin < o.end && o.begin < end; }
};
inline byte_range extent(const void* base,
                         std::size_t elem,
                         std::int64_t channels,
                         std::int64_t len,
                         std::int64_t ld,
                         channel_layout layout) {
  const std::int64_t outer = layout == channel_layout::contiguous ? channels : len;
  const std::int64_t inner = layout == channel_layout::contiguous ? len : channels;
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  return {b, b + static_cast<std::uintptr_t>(((outer - 1) * ld + inner) * static_cast<std::int64_t>(elem))};
}

/// The parameter `fn` registers, checked against the parameters already `registered`: its
/// buffers must not overlap each other nor theirs (byte extents from the layout and `ld`), and
/// its options (explicit, else the first matching param_group, else the defaults) must be in range.
inline param_info checked_param(const config& cfg,
                                const std::vector<param_info>& registered,
                                const char* fn,
                                bool matrix,
                                dtype type,
                                void* w,
                                const void* g,
                                std::int64_t channels,
                                std::int64_t len,
                                std::int64_t ld,
                                channel_layout layout,
                                const param_options& options) {
  const std::size_t elem = dtype_size(type);
  // A GPU faults on an element off its type's boundary (a pointer made by byte arithmetic): refused
  // here, by name, rather than as a sticky device error at the first step.
  const auto aligned = [elem](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % elem == 0; };
  require(aligned(w), fn, "weights",
          "is not aligned to its element size (" + std::to_string(elem) + " bytes): a GPU faults on it");
  require(aligned(g), fn, "grads",
          "is not aligned to its element size (" + std::to_string(elem) + " bytes): a GPU faults on it");
  const byte_range wr = extent(w, elem, channels, len, ld, layout);
  const byte_range gr = extent(g, elem, channels, len, ld, layout);
  require(!wr.overlaps(gr), fn, "grads", "overlaps 'weights' (weights == grads, or the same buffer)");
  for (std::size_t q = 0; q < registered.size(); ++q) {
    const auto& o = registered[q];
    const byte_range ow = extent(o.weights, o.elem_bytes(), o.channels, o.channel_len, o.ld, o.layout);
    const byte_range og = extent(o.grads, o.elem_bytes(), o.channels, o.channel_len, o.ld, o.layout);
    const auto other = [&] {
      return "parameter " + std::to_string(q) + (o.name.empty() ? "" : " ('" + o.name + "')");
    };
    if (wr.overlaps(ow)) {
      fail_argument(fn, "weights", "overlaps the weights of " + other() + " (registered twice?)");
    }
    if (wr.overlaps(og)) {
      fail_argument(fn, "weights", "overlaps the gradients of " + other());
    }
    if (gr.overlaps(og)) {
      fail_argument(fn, "grads", "overlaps the gradients of " + other());
    }
    if (gr.overlaps(ow)) {
      fail_argument(fn, "grads", "overlaps the weights of " + other());
    }
  }
  // Explicit options win, then the first matching param_group, then the defaults.
  const param_group* group = cfg.find_param_group(options.name);
  const float lr_scale = options.lr_scale                      ? *options.lr_scale
                         : group != nullptr && group->lr_scale ? *group->lr_scale
                                                               : 1.0f;
  const float wd = options.weight_decay                      ? *options.weight_decay
                   : group != nullptr && group->weight_decay ? *group->weight_decay
                                                             : cfg.adam.weight_decay;
  require(std::isfinite(lr_scale) && lr_scale >= 0.0f, fn, "options.lr_scale", "must be finite and >= 0");
  require(std::isfinite(wd) && wd >= 0.0f, fn, "options.weight_decay", "must be finite and >= 0");
  if (options.shard) {
    const auto& sh = *options.shard;
    require(matrix, fn, "options.shard", "is for matrices only (a sharded engine replicates its vectors)");
    require(sh.total >= 1 && sh.total < (std::int64_t{1} << 31), fn, "options.shard",
            "has total " + std::to_string(sh.total) + ": must be in [1, 2^31)");
    require(sh.first >= 0 && sh.first <= sh.total - channels, fn, "options.shard",
            "has first " + std::to_string(sh.first) + ": channels [first, first + " +
                std::to_string(channels) + ") must lie in [0, total = " + std::to_string(sh.total) + ")");
  }
  param_info pi;
  pi.matrix = matrix;
  pi.type = type;
  pi.weights = w;
  pi.grads = g;
  pi.step_grads = g;
  pi.channels = channels;
  pi.channel_len = len;
  pi.ld = ld;
  pi.layout = layout;
  pi.name = options.name;
  pi.lr_scale = lr_scale;
  pi.registered_lr_scale = lr_scale;
  pi.weight_decay = wd;
  pi.shard_first = options.shard ? options.shard->first : 0;
  pi.shard_total = options.shard ? options.shard->total : 0;
  return pi;
}

/// add_matrix() (`matrix`; `ld` 0: the packed one) or add_vector() (one channel of
/// `channel_len`) checked in the engine's order, every error naming its argument: the shape, the
/// pointers, the ring-slot limit, then checked_param()'s overlaps and options. `registered`: the
/// parameters so far.
inline param_info registered_param(const config& cfg,
                                   const std::vector<param_info>& registered,
                                   const char* fn,
                                   bool matrix,
                                   dtype type,
                                   void* weights,
                                   const void* grads,
                                   std::int64_t channels,
                                   std::int64_t channel_len,
                                   std::int64_t ld,
                                   channel_layout layout,
                                   const param_options& options) {
  if (matrix) {
    if (ld == 0) {
      ld = layout == channel_layout::contiguous ? channel_len : channels;
    }
    require(channels >= 1 && channels < (std::int64_t{1} << 31), fn, "channels", "must be in [1, 2^31)");
    require(channel_len >= 1, fn, "channel_len", "must be >= 1");
    require(layout == channel_layout::contiguous ? ld >= channel_len : ld >= channels, fn, "ld",
            "is smaller than the channel extent of the layout");
  } else {
    require(channel_len >= 1, fn, "n", "must be >= 1");
  }
  require(weights != nullptr, fn, "weights", "must not be null");
  require(grads != nullptr, fn, "grads", "must not be null");
  if (matrix) {
    require_fits_slot(cfg, channel_len, dtype_size(type), fn, "channel_len", "one channel");
  } else if (cfg.mode == optimizer_mode::offload_sync ||
             (cfg.full_warm_up_rounds > 0 && cfg.mode == optimizer_mode::zenflow)) {
    require_fits_slot(cfg, channel_len, dtype_size(type), fn, "n",
                      "the vector"); // it travels to the host whole
  }
  return checked_param(cfg, registered, fn, matrix, type, weights, grads, channels, channel_len, ld, layout,
                       options);
}

} // namespace detail
ZF_NAMESPACE_END
