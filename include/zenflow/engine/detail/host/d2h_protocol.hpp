/// @file
/// The D2H ring's wire protocol: what a slot carries (`slot_tag`), in which order a step pushes
/// its slots, and the Zen-auto masses a step's last record yields (`step_masses`). Values only,
/// no thread: the producer is the training thread (d2h_stream.hpp), the consumer the host side's
/// consumer thread (host/consumer.hpp; the training thread itself on the host backend).
///
/// Every slot's `ring_meta`: `step` the step t it belongs to, `tag` a slot_tag, `user` the window's
/// accumulator (0 or 1) that the step's gradients go into. Gradient slots also carry `matrix`, the
/// parameter's index (its index in the engine's parameters, not its matrix index), and `begin`,
/// `end`: the slot holds positions [begin, end) of the parameter's host set, packed in host-set
/// order, `channel_bytes()` each in the working type. Only this rank's positions travel
/// ([shard.pos, shard.end()), row_shard.hpp; every position with one rank), cut at one rank's slot
/// boundaries (rows_per_slot) so that every rank packs the same slots.
///
/// The slots of step t, in ring order (the consumer reads them in that order):
///
///   gpu_adamw:             record_first_slot
///   offload_sync, warm-up: record_first_slot, grad_slot x (each host-side parameter with a
///                          non-empty host set, in parameter order, its positions ascending)
///   zenflow:               [grad_early_slot x (each matrix whose gradients grad_ready() streamed,
///                          in the order of the announcements, its positions ascending, the first
///                          slot at begin == 0; only once the host sets are known, never with data
///                          parallel; a matrix announced again sends its slots again, which replace
///                          the first ones)], record_first_slot, grad_slot x (the other host-side
///                          parameters with a non-empty host set, in parameter order),
///                          record_last_slot
///
///   accumulate = device:   after warm-up a step pushes its records only (its gradients go into
///                          the device's window sum); the step that closes a window then pushes
///                          window_sum_slot x (each host-side parameter with a non-empty host set,
///                          in parameter order): `begin`, `end` are element offsets into the
///                          parameter's fp32 sum, host-set order, any cut (a row may span slots)
///
/// record_first_slot is the step record's header (step_record_layout::header_bytes(): coef_t and
/// the skip flag); record_last_slot the whole record (step_record_layout::bytes(): the header and
/// every matrix's crit and rest L1 mass, unscaled). The early gradients land before the header
/// that says their coef: the consumer keeps them (the parameter's landing buffer) and adds them
/// when the header comes, as if they followed it. A skipped step's gradients are not added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// What a D2H ring slot carries (`ring_meta::tag`).
enum slot_tag : std::int32_t {
  grad_slot = 0,         ///< packed host-set gradients of the step (rest mass into the record)
  record_first_slot = 1, ///< the step record's header, before the step's gradients
  record_last_slot = 2,  ///< the whole record after them, with the Zen-auto masses
  grad_early_slot = 3,   ///< gradients packed by grad_ready(): landed, added once coef is known
  window_sum_slot = 4,   ///< accumulate = device: a closed window's fp32 sum, elements [begin, end)
};

/// A slot's kind in words (the pipeline trace's consumer spans); "slot" for an unknown tag.
[[nodiscard]] constexpr const char* slot_name(std::int32_t tag) noexcept {
  switch (tag) {
  case grad_slot:
    return "grads";
  case record_first_slot:
    return "record (header)";
  case record_last_slot:
    return "record (masses)";
  case grad_early_slot:
    return "grads (grad_ready)";
  case window_sum_slot:
    return "window sum";
  default:
    return "slot";
  }
}

/// The Zen-auto masses of one step (crit: device channels, rest: host channels, scaled by coef).
struct step_masses {
  std::int64_t step = -1;
  bool valid = false;
  std::vector<float> crit, rest;
};

} // namespace detail
ZF_NAMESPACE_END
