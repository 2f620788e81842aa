/// @file
/// The engine checkpoint's section helpers that every part uses (engine_checkpoint.hpp): section
/// names, the presence-and-size check, an ascending channel set's read, the corrupt-section error.
/// Each names the section and the file in its error (docs/checkpoint.md, "Errors").
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

static_assert(std::endian::native == std::endian::little, "zenflow: checkpoints are written little-endian");

/// Section `what` of parameter `p` ("p<p>/<what>").
inline std::string ckpt_tag(std::size_t p, const char* what) {
  return "p" + std::to_string(p) + "/" + what;
}

[[noreturn]] inline void
ckpt_corrupt(const checkpoint_reader& in, const std::string& section, const std::string& why) {
  checkpoint::fail(checkpoint_errc::corrupted, in.name(), "section '" + section + "' " + why);
}

/// Section `t` is present and holds `bytes`.
inline void ckpt_need(const checkpoint_reader& in, const std::string& t, std::size_t bytes) {
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

/// An ascending channel set of at most `pi`'s device capacity.
inline std::vector<std::int32_t>
ckpt_read_set(const checkpoint_reader& in, const std::string& t, const param_info& pi) {
  const checkpoint_section* s = in.find(t);
  if (s == nullptr) {
    checkpoint::fail(checkpoint_errc::missing_section, in.name(), "no section '" + t + "'");
  }
  if (s->bytes % 4 != 0 || s->bytes / 4 > static_cast<std::uint64_t>(pi.device_capacity)) {
    checkpoint::fail(checkpoint_errc::wrong_size, in.name(),
                     "section '" + t + "' holds " + std::to_string(s->bytes) + " bytes, more than " +
                         std::to_string(pi.device_capacity) + " channels");
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
