/// @file
/// Implementation of <zenflow/engine/checkpoint_file.hpp> (POSIX I/O, xxHash's XXH3-64): the
/// format's constants, its little-endian fields, the streaming hash and the errors that the writer
/// and the reader share, and the free functions. Included by checkpoint_file.hpp after the
/// declarations (checkpoint_file_decl.hpp, beside this file); the reader (checkpoint_reader_impl.hpp)
/// and the writer (checkpoint_writer_impl.hpp) include this header, never the public one.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <string_view>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/xxhash.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_decl.hpp>

ZF_NAMESPACE_BEGIN

namespace detail::checkpoint {

inline constexpr char magic[8] = {'Z', 'F', 'L', 'W', 'C', 'K', 'P', 'T'};
inline constexpr std::uint32_t header_bytes = 64;
inline constexpr std::uint32_t section_magic = 0x54434553u; // "SECT"
inline constexpr std::uint32_t trailer_magic = 0x444e455au; // "ZEND"
inline constexpr std::size_t max_tag = 255;
inline constexpr std::size_t chunk = std::size_t{1} << 20; // streaming buffer

inline void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<std::byte>(v >> (8 * i));
  }
}
inline void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<std::byte>(v >> (8 * i));
  }
}
inline std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  }
  return v;
}
inline std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

/// A streaming XXH3-64 (the state lives on the heap: it wants 64-byte alignment).
class hasher {
public:
  hasher() : state_(XXH3_createState()) {
    if (state_ == nullptr) {
      throw std::bad_alloc();
    }
    XXH3_64bits_reset(state_);
  }
  hasher(const hasher&) = delete;
  hasher& operator=(const hasher&) = delete;
  ~hasher() { XXH3_freeState(state_); }
  void reset() noexcept { XXH3_64bits_reset(state_); }
  void add(const void* p, std::size_t n) noexcept {
    if (n > 0) {
      XXH3_64bits_update(state_, p, n);
    }
  }
  void add_u32(std::uint32_t v) noexcept {
    std::byte b[4];
    put_u32(b, v);
    add(b, 4);
  }
  void add_u64(std::uint64_t v) noexcept {
    std::byte b[8];
    put_u64(b, v);
    add(b, 8);
  }
  [[nodiscard]] std::uint64_t digest() const noexcept { return XXH3_64bits_digest(state_); }

private:
  XXH3_state_t* state_;
};

[[noreturn]] inline void fail(checkpoint_errc kind, const std::string& name, const std::string& why) {
  std::string msg = "zenflow checkpoint '" + name + "': ";
  msg += to_string(kind);
  msg += ": ";
  msg += why;
  throw checkpoint_error(kind, msg);
}
[[noreturn]] inline void fail_errno(const std::string& name, const std::string& what) {
  fail(checkpoint_errc::io, name, what + ": " + std::strerror(errno));
}

inline std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace detail::checkpoint

inline std::string_view to_string(checkpoint_errc e) noexcept {
  switch (e) {
  case checkpoint_errc::io:
    return "io";
  case checkpoint_errc::not_a_checkpoint:
    return "not_a_checkpoint";
  case checkpoint_errc::wrong_version:
    return "wrong_version";
  case checkpoint_errc::truncated:
    return "truncated";
  case checkpoint_errc::corrupted:
    return "corrupted";
  case checkpoint_errc::other_config:
    return "other_config";
  case checkpoint_errc::other_parameters:
    return "other_parameters";
  case checkpoint_errc::other_rank:
    return "other_rank";
  case checkpoint_errc::missing_section:
    return "missing_section";
  case checkpoint_errc::wrong_size:
    return "wrong_size";
  }
  return "?";
}

inline std::string checkpoint_rank_path(const std::string& base, int rank, int world_size) {
  if (world_size < 1) {
    throw invalid_argument("zenflow::checkpoint_rank_path: argument 'world_size' must be >= 1, got " +
                           std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw invalid_argument("zenflow::checkpoint_rank_path: argument 'rank' must be in [0, world_size), got " +
                           std::to_string(rank));
  }
  if (world_size == 1) {
    return base;
  }
  return base + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world_size);
}

inline std::uint64_t checkpoint_hash(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

ZF_NAMESPACE_END
