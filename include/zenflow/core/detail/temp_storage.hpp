/// @file
/// Helpers of the two-phase temporary-storage shape (a call with a null `temp` only writes
/// `temp_bytes`): the smallest size ever reported, and the alignment arithmetic used to carve
/// scratch regions out of the caller's buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// Temporary storage is never reported as 0 bytes, so that a caller who allocates what the size
/// query said never passes a null `temp` again (which would only repeat the query).
inline constexpr std::size_t min_temp_bytes = 256;

/// `v` rounded up to a multiple of `a` (scratch carving).
[[nodiscard]] constexpr std::size_t align_up(std::size_t v, std::size_t a = 256) {
  return (v + a - 1) / a * a;
}

/// `p` rounded up to a multiple of `a` bytes; the size query adds `a` bytes of slack for it.
[[nodiscard]] inline std::byte* align_pointer(void* p, std::size_t a = 256) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + a - 1) / a * a);
}

} // namespace detail

ZF_NAMESPACE_END
