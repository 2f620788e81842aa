/// @file
/// checkpoint_reader's definitions (<zenflow/engine/checkpoint_file.hpp>): a file or a memory
/// span checked whole when opened (header, every section's checksum, the trailer), then sections
/// read by tag, each checked again as it is read. The format's helpers:
/// detail/checkpoint_file/checkpoint_file_impl.hpp.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/xxhash.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_decl.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_impl.hpp>

ZF_NAMESPACE_BEGIN

struct checkpoint_reader::source {
  int fd = -1;
  std::span<const std::byte> memory;
  std::uint64_t size = 0;

  ~source() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
  /// Reads exactly n bytes at `offset` (the caller checked the range against `size`).
  void read_at(const std::string& name, std::uint64_t offset, void* dst, std::size_t n) const {
    if (fd < 0) {
      if (n > 0) {
        std::memcpy(dst, memory.data() + offset, n);
      }
      return;
    }
    auto* out = static_cast<std::byte*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd, out, n, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) {
          continue;
        }
        detail::checkpoint::fail_errno(name, "read");
      }
      if (got == 0) {
        detail::checkpoint::fail(checkpoint_errc::truncated, name, "the file shrank while it was read");
      }
      out += got;
      offset += static_cast<std::uint64_t>(got);
      n -= static_cast<std::size_t>(got);
    }
  }
};

inline checkpoint_reader::checkpoint_reader(const std::string& path)
    : name_(path), source_(std::make_unique<source>()) {
  source_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source_->fd < 0) {
    detail::checkpoint::fail_errno(name_, "cannot open");
  }
  struct stat st {};
  if (::fstat(source_->fd, &st) != 0) {
    detail::checkpoint::fail_errno(name_, "fstat");
  }
  source_->size = static_cast<std::uint64_t>(st.st_size);
  check_whole_file();
}

inline checkpoint_reader::checkpoint_reader(std::span<const std::byte> bytes)
    : name_("<memory>"), source_(std::make_unique<source>()) {
  source_->memory = bytes;
  source_->size = bytes.size();
  check_whole_file();
}

inline checkpoint_reader::~checkpoint_reader() = default;

inline void checkpoint_reader::check_whole_file() {
  namespace ck = detail::checkpoint;
  using ck::fail;
  const std::uint64_t size = source_->size;
  std::byte header[ck::header_bytes];
  const std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(size, ck::header_bytes));
  source_->read_at(name_, 0, header, have);
  const std::size_t magic_have = std::min<std::size_t>(have, 8);
  if (magic_have == 0 || std::memcmp(header, ck::magic, magic_have) != 0) {
    fail(checkpoint_errc::not_a_checkpoint, name_, "no zenflow checkpoint header");
  }
  if (have < 16) {
    fail(checkpoint_errc::truncated, name_,
         "the file ends inside the header (" + std::to_string(size) + " bytes)");
  }
  const std::uint32_t version = ck::get_u32(header + 8);
  if (version != checkpoint_format_version) {
    fail(checkpoint_errc::wrong_version, name_,
         "format version " + std::to_string(version) + ", this build reads version " +
             std::to_string(checkpoint_format_version));
  }
  if (have < ck::header_bytes) {
    fail(checkpoint_errc::truncated, name_,
         "the file ends inside the header (" + std::to_string(size) + " bytes)");
  }
  if (ck::get_u32(header + 12) != ck::header_bytes || ck::get_u64(header + 56) != XXH3_64bits(header, 56)) {
    fail(checkpoint_errc::corrupted, name_, "the header's checksum does not match");
  }
  identity_.config_hash = ck::get_u64(header + 16);
  identity_.params_hash = ck::get_u64(header + 24);
  identity_.rank = ck::get_u32(header + 32);
  identity_.world_size = ck::get_u32(header + 36);

  ck::hasher section_hash;
  ck::hasher trailer_hash;
  std::vector<std::byte> buffer;
  std::uint64_t pos = ck::header_bytes;
  auto need = [&](std::uint64_t n, const std::string& where) {
    if (n > size - pos) {
      fail(checkpoint_errc::truncated, name_,
           "the file ends inside " + where + " (" + std::to_string(size) + " bytes in all)");
    }
  };
  for (;;) {
    need(4, "the section list (no trailer)");
    std::byte word[8];
    source_->read_at(name_, pos, word, 4);
    const std::uint32_t kind = ck::get_u32(word);
    if (kind == ck::trailer_magic) {
      need(16, "the trailer");
      std::byte trailer[16];
      source_->read_at(name_, pos, trailer, 16);
      if (ck::get_u32(trailer + 4) != sections_.size() || ck::get_u64(trailer + 8) != trailer_hash.digest()) {
        fail(checkpoint_errc::corrupted, name_, "the trailer does not match the sections");
      }
      if (pos + 16 != size) {
        fail(checkpoint_errc::corrupted, name_, std::to_string(size - pos - 16) + " bytes after the trailer");
      }
      return;
    }
    const std::string where = "section #" + std::to_string(sections_.size());
    if (kind != ck::section_magic) {
      fail(checkpoint_errc::corrupted, name_, "no section or trailer at offset " + std::to_string(pos));
    }
    need(8, where);
    source_->read_at(name_, pos + 4, word, 4);
    const std::uint32_t tag_len = ck::get_u32(word);
    if (tag_len == 0 || tag_len > ck::max_tag) {
      fail(checkpoint_errc::corrupted, name_,
           where + " has an impossible tag length " + std::to_string(tag_len));
    }
    pos += 8;
    need(tag_len + 8, where);
    std::string tag(tag_len, '\0');
    source_->read_at(name_, pos, tag.data(), tag_len);
    source_->read_at(name_, pos + tag_len, word, 8);
    const std::uint64_t bytes = ck::get_u64(word);
    pos += tag_len + 8;
    const std::string named = where + " '" + tag + "'";
    if (find(tag) != nullptr) {
      fail(checkpoint_errc::corrupted, name_, named + " appears twice");
    }
    if (bytes > size - pos || size - pos - bytes < 8) {
      fail(checkpoint_errc::truncated, name_,
           named + " declares " + std::to_string(bytes) + " bytes but the file ends " +
               std::to_string(size - pos) + " bytes after its start");
    }
    section_hash.reset();
    section_hash.add_u32(tag_len);
    section_hash.add(tag.data(), tag.size());
    section_hash.add_u64(bytes);
    buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, ck::chunk)));
    for (std::uint64_t done = 0; done < bytes;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, ck::chunk));
      source_->read_at(name_, pos + done, buffer.data(), n);
      section_hash.add(buffer.data(), n);
      done += n;
    }
    source_->read_at(name_, pos + bytes, word, 8);
    const std::uint64_t sum = ck::get_u64(word);
    if (sum != section_hash.digest()) {
      fail(checkpoint_errc::corrupted, name_, named + ": checksum mismatch");
    }
    trailer_hash.add_u64(sum);
    sections_.push_back(checkpoint_section{std::move(tag), pos, bytes});
    pos += bytes + 8;
  }
}

inline void checkpoint_reader::expect(const checkpoint_identity& mine) const {
  using detail::checkpoint::fail;
  if (identity_.config_hash != mine.config_hash) {
    fail(checkpoint_errc::other_config, name_, "written under another configuration (config hash differs)");
  }
  if (identity_.params_hash != mine.params_hash) {
    fail(checkpoint_errc::other_parameters, name_,
         "written for another parameter list (shapes, dtypes or order differ)");
  }
  if (identity_.rank != mine.rank || identity_.world_size != mine.world_size) {
    fail(checkpoint_errc::other_rank, name_,
         "written by rank " + std::to_string(identity_.rank) + " of " + std::to_string(identity_.world_size) +
             ", loaded by rank " + std::to_string(mine.rank) + " of " + std::to_string(mine.world_size));
  }
}

inline const checkpoint_section* checkpoint_reader::find(std::string_view tag) const noexcept {
  for (const checkpoint_section& s : sections_) {
    if (s.tag == tag) {
      return &s;
    }
  }
  return nullptr;
}

inline void checkpoint_reader::read(std::string_view tag, void* dst, std::size_t bytes) const {
  namespace ck = detail::checkpoint;
  const checkpoint_section* s = find(tag);
  if (s == nullptr) {
    ck::fail(checkpoint_errc::missing_section, name_, "no section '" + std::string(tag) + "'");
  }
  if (s->bytes != bytes) {
    ck::fail(checkpoint_errc::wrong_size, name_,
             "section '" + s->tag + "' holds " + std::to_string(s->bytes) + " bytes, the caller needs " +
                 std::to_string(bytes));
  }
  ck::hasher h;
  h.add_u32(static_cast<std::uint32_t>(s->tag.size()));
  h.add(s->tag.data(), s->tag.size());
  h.add_u64(s->bytes);
  auto* out = static_cast<std::byte*>(dst);
  for (std::uint64_t done = 0; done < bytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, ck::chunk));
    source_->read_at(name_, s->offset + done, out + done, n);
    h.add(out + done, n);
    done += n;
  }
  std::byte word[8];
  source_->read_at(name_, s->offset + bytes, word, 8);
  if (ck::get_u64(word) != h.digest()) {
    ck::fail(checkpoint_errc::corrupted, name_,
             "section '" + s->tag + "' changed since the file was checked");
  }
}

ZF_NAMESPACE_END
