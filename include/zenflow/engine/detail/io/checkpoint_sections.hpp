/// @file
/// The engine checkpoint's section helpers that every part uses (engine_checkpoint.hpp): section
/// names, the presence-and-size check, an ascending channel set's read, the corrupt-section error.
/// Each names the section and the file in its error (docs/checkpoint.md, "Errors"). They read
/// an `In`: a checkpoint_reader, or a ckpt_image (a sharded engine's state re-sharded in memory
/// from another world's files: reshard_part.hpp), so that one load path checks and restores both.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

static_assert(std::endian::native == std::endian::little, "zenflow: checkpoints are written little-endian");

/// Sections in memory with a checkpoint_reader's find / read / name: the state the engine loads
/// when it is assembled from several files (reshard_part.hpp).
class ckpt_image {
public:
  explicit ckpt_image(std::string name) : name_(std::move(name)) {}
  void put(const std::string& tag, std::vector<std::byte> bytes) {
    auto& [section, data] = sections_[tag];
    section = {tag, 0, bytes.size()};
    data = std::move(bytes);
  }
  template <class T>
  void put(const std::string& tag, const std::vector<T>& v) {
    std::vector<std::byte> bytes(v.size() * sizeof(T));
    if (!v.empty()) {
      std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    put(tag, std::move(bytes));
  }
  [[nodiscard]] const checkpoint_section* find(std::string_view tag) const noexcept {
    const auto it = sections_.find(tag);
    return it == sections_.end() ? nullptr : &it->second.first;
  }
  void read(std::string_view tag, void* dst, std::size_t bytes) const {
    const auto it = sections_.find(tag);
    if (it == sections_.end()) {
      checkpoint::fail(checkpoint_errc::missing_section, name_, "no section '" + std::string(tag) + "'");
    }
    if (it->second.second.size() != bytes) {
      checkpoint::fail(checkpoint_errc::wrong_size, name_,
                       "section '" + std::string(tag) + "' holds " +
                           std::to_string(it->second.second.size()) + " bytes, the caller needs " +
                           std::to_string(bytes));
    }
    if (bytes > 0) {
      std::memcpy(dst, it->second.second.data(), bytes);
    }
  }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

private:
  std::string name_;
  std::map<std::string, std::pair<checkpoint_section, std::vector<std::byte>>, std::less<>> sections_;
};

/// Section `what` of parameter `p` ("p<p>/<what>").
inline std::string ckpt_tag(std::size_t p, const char* what) {
  return "p" + std::to_string(p) + "/" + what;
}

template <class In>
[[noreturn]] void ckpt_corrupt(const In& in, const std::string& section, const std::string& why) {
  checkpoint::fail(checkpoint_errc::corrupted, in.name(), "section '" + section + "' " + why);
}

/// Section `t` is present and holds `bytes`.
template <class In>
void ckpt_need(const In& in, const std::string& t, std::size_t bytes) {
  const checkpoint_section* s = in.find(t);
  if (s == nullptr) {
    checkpoint::fail(checkpoint_errc::missing_section, in.name(), "no section '" + t + "'");
  }
  if (s->bytes != bytes) {
    checkpoint::fail(checkpoint_errc::wrong_size, in.name(),
                     "section '" + t + "' holds " + std::to_string(s->bytes) + " bytes, this engine needs " +
                         std::to_string(bytes));
  }
}

/// An ascending channel set of at most `pi`'s device rows (device_rows_most: a shard's may have
/// grown past its share of k).
template <class In>
std::vector<std::int32_t> ckpt_read_set(const In& in, const std::string& t, const param_info& pi) {
  const checkpoint_section* s = in.find(t);
  if (s == nullptr) {
    checkpoint::fail(checkpoint_errc::missing_section, in.name(), "no section '" + t + "'");
  }
  const std::int64_t most = std::max(pi.device_capacity, pi.device_rows_most);
  if (s->bytes % 4 != 0 || s->bytes / 4 > static_cast<std::uint64_t>(most)) {
    checkpoint::fail(checkpoint_errc::wrong_size, in.name(),
                     "section '" + t + "' holds " + std::to_string(s->bytes) + " bytes, more than " +
                         std::to_string(most) + " channels");
  }
  std::vector<std::int32_t> out(static_cast<std::size_t>(s->bytes / 4));
  in.read(t, out.data(), out.size() * 4);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= pi.channels || (i > 0 && out[i] <= out[i - 1])) {
      ckpt_corrupt(in, t, "is not an ascending set of channels in [0, " + std::to_string(pi.channels) + ")");
    }
  }
  return out;
}

} // namespace detail
ZF_NAMESPACE_END
