/// @file
/// The fp32 master weights alone, out of an engine into a file and back: what a user takes away
/// from a fine-tune (to evaluate, convert or ship), without the optimizer state.
///
/// The file is a checkpoint file (<zenflow/engine/checkpoint_file.hpp>: atomic, checksummed,
/// streamed): a `masters/manifest` section (per parameter: u64 channels, u64 channel_len, u32 name
/// length, name) and one `masters/<i>` section per parameter with its `channels x channel_len`
/// floats, channel-major (channel j is elements [j * channel_len, (j + 1) * channel_len)), little-
/// endian IEEE binary32. The identity's parameter-list hash is the manifest's hash; its config
/// hash is 0 (masters do not depend on the configuration).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN

static_assert(std::endian::native == std::endian::little,
              "zenflow: the masters file is written little-endian");

/// One parameter's masters as read back from a masters file.
struct exported_master {
  std::string name;          ///< the name given at registration ("" when none)
  std::int64_t channels = 0; ///< 1 for a vector parameter
  std::int64_t channel_len = 0;
  std::vector<float> values; ///< channels x channel_len, channel-major
};

namespace detail::masters {
inline void append_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
}
inline void append_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
}
inline std::uint64_t read_u64(std::span<const std::byte> in, std::size_t& at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<std::uint64_t>(in[at + static_cast<std::size_t>(i)]) << (8 * i);
  }
  at += 8;
  return v;
}
inline std::uint32_t read_u32(std::span<const std::byte> in, std::size_t& at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<std::uint32_t>(in[at + static_cast<std::size_t>(i)]) << (8 * i);
  }
  at += 4;
  return v;
}
inline std::string section_of(std::size_t i) {
  return "masters/" + std::to_string(i);
}
} // namespace detail::masters

/// Writes the current fp32 masters of every parameter of `eng` to `path` (atomically). The
/// masters are the optimizer's: a host window still running is waited for and counted, as in
/// `engine::state` (so the file may be ahead of the working weights by the window not yet applied
/// on an overlapped engine). Blocking; does not change what the engine computes next.
/// @throws invalid_argument for an empty path or an engine that is not initialized;
///         checkpoint_error (io) when the file cannot be written (the previous one stays).
template <class Engine>
void export_masters(Engine& eng, const std::string& path, cudaStream_t stream = nullptr) {
  namespace m = detail::masters;
  if (path.empty()) {
    throw invalid_argument("zenflow::export_masters: argument 'path' must not be empty");
  }
  if (!eng.initialized()) {
    throw invalid_argument(
        "zenflow::export_masters: argument 'eng' is not initialized (call initialize() first)");
  }
  std::vector<std::byte> manifest;
  std::vector<std::vector<float>> masters;
  masters.reserve(eng.param_count());
  for (std::size_t i = 0; i < eng.param_count(); ++i) {
    const param_id id{static_cast<std::int32_t>(i)};
    auto st = eng.state(id, stream);
    const auto channels = static_cast<std::uint64_t>(st.counts.size());
    const std::string name = eng.settings(id).name;
    m::append_u64(manifest, channels);
    m::append_u64(manifest, channels == 0 ? 0 : st.master.size() / channels);
    m::append_u32(manifest, static_cast<std::uint32_t>(name.size()));
    for (char c : name) {
      manifest.push_back(static_cast<std::byte>(c));
    }
    masters.push_back(std::move(st.master));
  }
  checkpoint_writer out(path, checkpoint_identity{0, checkpoint_hash(manifest), 0, 1});
  out.section("masters/manifest", manifest.data(), manifest.size());
  for (std::size_t i = 0; i < masters.size(); ++i) {
    out.section(m::section_of(i), masters[i].data(), masters[i].size() * sizeof(float));
  }
  out.commit();
}

/// Reads a file written by `export_masters`.
/// @throws checkpoint_error naming what is wrong (not a checkpoint, truncated, corrupted, a
///         checkpoint that holds no masters: missing_section).
[[nodiscard]] inline std::vector<exported_master> read_masters(const std::string& path) {
  namespace m = detail::masters;
  checkpoint_reader in(path);
  const checkpoint_section* s = in.find("masters/manifest");
  if (s == nullptr) {
    throw checkpoint_error(checkpoint_errc::missing_section,
                           "zenflow masters file '" + path +
                               "': no 'masters/manifest' section (not a masters file)");
  }
  std::vector<std::byte> manifest(static_cast<std::size_t>(s->bytes));
  in.read("masters/manifest", manifest.data(), manifest.size());
  auto bad = [&](const std::string& why) {
    throw checkpoint_error(checkpoint_errc::corrupted, "zenflow masters file '" + path + "': " + why);
  };
  if (checkpoint_hash(manifest) != in.identity().params_hash) {
    bad("the manifest does not match the header's parameter-list hash");
  }
  std::vector<exported_master> out;
  std::size_t at = 0;
  while (at < manifest.size()) {
    if (manifest.size() - at < 20) {
      bad("the manifest ends inside an entry");
    }
    exported_master e;
    const std::uint64_t channels = m::read_u64(manifest, at);
    const std::uint64_t channel_len = m::read_u64(manifest, at);
    const std::uint32_t name_len = m::read_u32(manifest, at);
    if (name_len > manifest.size() - at) {
      bad("a name runs past the manifest");
    }
    e.name.assign(reinterpret_cast<const char*>(manifest.data() + at), name_len);
    at += name_len;
    const std::string tag = m::section_of(out.size());
    const checkpoint_section* data = in.find(tag);
    if (data == nullptr || channels == 0 || channel_len == 0 ||
        channel_len > data->bytes / sizeof(float) / channels ||
        data->bytes != channels * channel_len * sizeof(float)) {
      bad("section '" + tag + "' is missing or does not hold " + std::to_string(channels) + " x " +
          std::to_string(channel_len) + " floats");
    }
    e.channels = static_cast<std::int64_t>(channels);
    e.channel_len = static_cast<std::int64_t>(channel_len);
    e.values.resize(static_cast<std::size_t>(channels * channel_len));
    in.read(tag, e.values.data(), e.values.size() * sizeof(float));
    out.push_back(std::move(e));
  }
  return out;
}

ZF_NAMESPACE_END
