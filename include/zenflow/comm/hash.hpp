/// @file
/// `stable_hash`: a 64-bit fingerprint of a configuration or parameter list that is the same in
/// every process, on every machine, for the same values (what `verify_same` compares at
/// initialize()). Values are encoded explicitly (fixed-width little-endian integers, IEEE bits for
/// doubles, strings with their length in front, so that ("ab", "c") and ("a", "bc") differ), then
/// hashed once with XXH3-64, seed 0. No pointer, padding or platform-dependent width enters it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/xxhash.hpp>

ZF_NAMESPACE_BEGIN

/// Accumulates values, then `value()` hashes their encoding.
class stable_hash {
public:
  /// 8 bytes, little-endian.
  stable_hash& add_u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      bytes_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
    }
    return *this;
  }
  /// Two's complement, 8 bytes little-endian.
  stable_hash& add_i64(std::int64_t v) { return add_u64(static_cast<std::uint64_t>(v)); }
  /// The IEEE-754 bits (so 0.0 and -0.0 differ, and a NaN hashes as its payload).
  stable_hash& add_f64(double v) { return add_u64(std::bit_cast<std::uint64_t>(v)); }
  /// The length (8 bytes), then the characters.
  stable_hash& add_string(std::string_view s) {
    add_u64(s.size());
    for (const char c : s) {
      bytes_.push_back(static_cast<std::byte>(c));
    }
    return *this;
  }
  /// The count, then (channels, channel_bytes) of every matrix.
  stable_hash& add_matrices(std::span<const partition_matrix> matrices) {
    add_u64(matrices.size());
    for (const partition_matrix& m : matrices) {
      add_i64(m.channels);
      add_u64(m.channel_bytes);
    }
    return *this;
  }
  /// XXH3-64 (seed 0) of everything added so far.
  [[nodiscard]] std::uint64_t value() const noexcept { return XXH3_64bits(bytes_.data(), bytes_.size()); }
  /// The encoded bytes (for tests and for debugging a mismatch).
  [[nodiscard]] std::span<const std::byte> encoded() const noexcept { return bytes_; }

private:
  std::vector<std::byte> bytes_;
};

ZF_NAMESPACE_END
