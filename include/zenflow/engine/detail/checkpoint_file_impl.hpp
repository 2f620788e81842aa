/// @file
/// Implementation of <zenflow/engine/checkpoint_file.hpp> (POSIX I/O, xxHash's XXH3-64).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/xxhash.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/checkpoint_file.hpp>

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

// --- writer ------------------------------------------------------------------------------------

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

// --- reader ------------------------------------------------------------------------------------

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
