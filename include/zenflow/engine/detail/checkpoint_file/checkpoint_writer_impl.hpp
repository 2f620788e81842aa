/// @file
/// checkpoint_writer's definitions (<zenflow/engine/checkpoint_file.hpp>): a temporary file beside
/// the target, streamed in 1 MiB chunks with each section's checksum, then fsync, an atomic rename
/// and the directory's fsync at commit. The format's helpers:
/// detail/checkpoint_file/checkpoint_file_impl.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/xxhash.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_decl.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_impl.hpp>

ZF_NAMESPACE_BEGIN

struct checkpoint_writer::impl {
  std::string temp;
  int fd = -1;
  std::vector<std::byte> buffer;
  detail::checkpoint::hasher section_hash;
  detail::checkpoint::hasher trailer_hash; // over the sections' checksums, in order
  std::set<std::string, std::less<>> tags;
  std::string open_tag;
  std::uint64_t declared = 0;
  std::uint64_t written = 0;
  bool in_section = false;
  bool committed = false;
  std::uint32_t sections = 0;

  void flush(const std::string& name) {
    std::size_t done = 0;
    while (done < buffer.size()) {
      const ssize_t n = ::write(fd, buffer.data() + done, buffer.size() - done);
      if (n < 0) {
        if (errno == EINTR) {
          continue;
        }
        detail::checkpoint::fail_errno(name, "write to " + temp);
      }
      done += static_cast<std::size_t>(n);
    }
    buffer.clear();
  }
  void append(const std::string& name, const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    while (n > 0) {
      const std::size_t room = detail::checkpoint::chunk - buffer.size();
      const std::size_t take = std::min(room, n);
      buffer.insert(buffer.end(), b, b + take);
      b += take;
      n -= take;
      if (buffer.size() == detail::checkpoint::chunk) {
        flush(name);
      }
    }
  }
};

inline checkpoint_writer::checkpoint_writer(std::string path, const checkpoint_identity& identity)
    : path_(std::move(path)), impl_(std::make_unique<impl>()) {
  namespace ck = detail::checkpoint;
  if (path_.empty()) {
    throw invalid_argument("zenflow::checkpoint_writer: argument 'path' must not be empty");
  }
  // A unique name beside the target (same file system, so the rename is atomic), created with
  // O_EXCL and mode 0666 so the process umask applies as it would to any new file (mkstemp
  // would force 0600 on the checkpoint).
  static std::atomic<std::uint64_t> counter{0};
  for (;;) {
    impl_->temp = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    impl_->fd = ::open(impl_->temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (impl_->fd >= 0) {
      break;
    }
    if (errno != EEXIST) {
      ck::fail_errno(path_, "cannot create a temporary file beside it");
    }
  }
  impl_->buffer.reserve(ck::chunk);
  std::byte header[ck::header_bytes] = {};
  std::memcpy(header, ck::magic, 8);
  ck::put_u32(header + 8, checkpoint_format_version);
  ck::put_u32(header + 12, ck::header_bytes);
  ck::put_u64(header + 16, identity.config_hash);
  ck::put_u64(header + 24, identity.params_hash);
  ck::put_u32(header + 32, identity.rank);
  ck::put_u32(header + 36, identity.world_size);
  ck::put_u64(header + 56, XXH3_64bits(header, 56));
  impl_->append(path_, header, sizeof header);
}

inline checkpoint_writer::~checkpoint_writer() {
  if (impl_ && !impl_->committed) {
    if (impl_->fd >= 0) {
      ::close(impl_->fd);
    }
    ::unlink(impl_->temp.c_str()); // the target keeps its previous content
  }
}

inline void checkpoint_writer::begin_section(std::string_view tag, std::uint64_t bytes) {
  namespace ck = detail::checkpoint;
  constexpr const char* fn = "zenflow::checkpoint_writer::begin_section";
  if (impl_->committed) {
    throw invalid_argument(std::string(fn) + ": argument 'this' is already committed");
  }
  if (impl_->in_section) {
    throw invalid_argument(std::string(fn) + ": argument 'tag' opens a section while '" + impl_->open_tag +
                           "' is still open");
  }
  if (tag.empty() || tag.size() > ck::max_tag) {
    throw invalid_argument(std::string(fn) + ": argument 'tag' must be 1 to 255 bytes");
  }
  if (impl_->tags.find(tag) != impl_->tags.end()) {
    throw invalid_argument(std::string(fn) + ": argument 'tag' '" + std::string(tag) +
                           "' is already written");
  }
  std::byte head[8];
  ck::put_u32(head, ck::section_magic);
  ck::put_u32(head + 4, static_cast<std::uint32_t>(tag.size()));
  impl_->append(path_, head, 8);
  impl_->append(path_, tag.data(), tag.size());
  std::byte len[8];
  ck::put_u64(len, bytes);
  impl_->append(path_, len, 8);
  impl_->section_hash.reset();
  impl_->section_hash.add_u32(static_cast<std::uint32_t>(tag.size()));
  impl_->section_hash.add(tag.data(), tag.size());
  impl_->section_hash.add_u64(bytes);
  impl_->tags.emplace(tag);
  impl_->open_tag = tag;
  impl_->declared = bytes;
  impl_->written = 0;
  impl_->in_section = true;
}

inline void checkpoint_writer::write(const void* data, std::size_t bytes) {
  if (!impl_->in_section) {
    throw invalid_argument("zenflow::checkpoint_writer::write: argument 'this' has no open section");
  }
  if (bytes > impl_->declared - impl_->written) {
    throw invalid_argument("zenflow::checkpoint_writer::write: argument 'bytes' goes past the " +
                           std::to_string(impl_->declared) + " bytes declared for section '" +
                           impl_->open_tag + "'");
  }
  impl_->section_hash.add(data, bytes);
  impl_->append(path_, data, bytes);
  impl_->written += bytes;
}

inline void checkpoint_writer::end_section() {
  namespace ck = detail::checkpoint;
  if (!impl_->in_section) {
    throw invalid_argument("zenflow::checkpoint_writer::end_section: argument 'this' has no open section");
  }
  if (impl_->written != impl_->declared) {
    throw invalid_argument("zenflow::checkpoint_writer::end_section: section '" + impl_->open_tag + "' got " +
                           std::to_string(impl_->written) + " of the " + std::to_string(impl_->declared) +
                           " bytes declared");
  }
  const std::uint64_t sum = impl_->section_hash.digest();
  std::byte b[8];
  ck::put_u64(b, sum);
  impl_->append(path_, b, 8);
  impl_->trailer_hash.add_u64(sum);
  impl_->in_section = false;
  ++impl_->sections;
}

inline void checkpoint_writer::section(std::string_view tag, const void* data, std::size_t bytes) {
  begin_section(tag, bytes);
  write(data, bytes);
  end_section();
}

inline void checkpoint_writer::commit() {
  namespace ck = detail::checkpoint;
  if (impl_->committed) {
    throw invalid_argument("zenflow::checkpoint_writer::commit: argument 'this' is already committed");
  }
  if (impl_->in_section) {
    throw invalid_argument("zenflow::checkpoint_writer::commit: section '" + impl_->open_tag +
                           "' is still open");
  }
  std::byte trailer[16];
  ck::put_u32(trailer, ck::trailer_magic);
  ck::put_u32(trailer + 4, impl_->sections);
  ck::put_u64(trailer + 8, impl_->trailer_hash.digest());
  impl_->append(path_, trailer, sizeof trailer);
  impl_->flush(path_);
  if (::fsync(impl_->fd) != 0) {
    ck::fail_errno(path_, "fsync of " + impl_->temp);
  }
  if (::close(impl_->fd) != 0) {
    impl_->fd = -1;
    ck::fail_errno(path_, "close of " + impl_->temp);
  }
  impl_->fd = -1;
  if (::rename(impl_->temp.c_str(), path_.c_str()) != 0) {
    ck::fail_errno(path_, "rename from " + impl_->temp);
  }
  impl_->committed = true; // from here the target is the new file: nothing to remove
  const std::string dir = ck::directory_of(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) {
    ck::fail_errno(path_, "open of directory " + dir);
  }
  const int synced = ::fsync(dfd); // the rename itself survives a power loss only after this
  ::close(dfd);
  if (synced != 0) {
    ck::fail_errno(path_, "fsync of directory " + dir);
  }
}

ZF_NAMESPACE_END
