/// @file
/// Non-owning views over raw pointers: channel matrices.
#pragma once

#include <cstdint>
#include <string_view>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

/// How the elements of one channel lie in memory.
enum class channel_layout : std::uint8_t {
  /// Channel c is one contiguous run: element (c, i) at `c * ld + i`, `ld >= channel_len`.
  /// This is ZenFlow's fast path (an nn.Linear weight [out, in] stored transposed, [in, out]).
  contiguous,
  /// Channel c is column c of a row-major `channel_len x ld` matrix: element (c, i) at
  /// `i * ld + c`, `ld >= channels` (an nn.Linear weight [out, in] as PyTorch stores it).
  strided,
};

/// A matrix parameter seen as `channels` channels of `channel_len` elements.
template <class T>
struct channel_matrix {
  T* data = nullptr;
  std::int64_t channels = 0;
  std::int64_t channel_len = 0;
  std::int64_t ld = 0;
  channel_layout layout = channel_layout::contiguous;

  /// Offset of element `i` of channel `c`.
  [[nodiscard]] ZF_HOST_DEVICE std::int64_t offset(std::int64_t c, std::int64_t i) const {
    return layout == channel_layout::contiguous ? c * ld + i : i * ld + c;
  }
  ZF_HOST_DEVICE T& operator()(std::int64_t c, std::int64_t i) const { return data[offset(c, i)]; }
  [[nodiscard]] ZF_HOST_DEVICE std::int64_t elements() const { return channels * channel_len; }
};

/// A contiguous channel matrix with `ld == channel_len`.
template <class T>
[[nodiscard]] constexpr channel_matrix<T>
make_channel_matrix(T* data, std::int64_t channels, std::int64_t channel_len) {
  return {data, channels, channel_len, channel_len, channel_layout::contiguous};
}

namespace detail {
/// Argument checks shared by every launcher that takes a channel matrix. `name` is the pointer
/// argument's name; the sizes are reported as `channels`, `channel_len` and `ld`.
[[nodiscard]] inline cudaError_t check_channel_matrix(std::string_view function,
                                                      std::string_view name,
                                                      const void* data,
                                                      std::int64_t channels,
                                                      std::int64_t channel_len,
                                                      std::int64_t ld,
                                                      channel_layout layout) {
  ZF_EXPECT_ARG(channels >= 0, function, "channels", "must be >= 0");
  ZF_EXPECT_ARG(channel_len >= 0, function, "channel_len", "must be >= 0");
  if (layout == channel_layout::contiguous) {
    ZF_EXPECT_ARG(ld >= channel_len, function, "ld", "must be >= channel_len for contiguous channels");
  } else {
    ZF_EXPECT_ARG(ld >= channels, function, "ld", "must be >= channels for strided channels");
  }
  ZF_EXPECT_ARG(data != nullptr || channels == 0 || channel_len == 0, function, name, "must not be null");
  return cudaSuccess;
}
} // namespace detail

ZF_NAMESPACE_END
