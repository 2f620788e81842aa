/// @file
/// The declarations of <zenflow/engine/checkpoint_file.hpp> (the format's identity, sections,
/// writer and reader): read that header's comment. The definitions are beside this file
/// (checkpoint_file_impl.hpp, checkpoint_reader_impl.hpp, checkpoint_writer_impl.hpp), which include
/// this one and never checkpoint_file.hpp, so that the include graph has no circle. The engine's
/// own checkpoint (detail/io/) is a user of the public header, a floor above these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// What was wrong with a checkpoint.
enum class checkpoint_errc : std::uint8_t {
  io,               ///< the file could not be opened, read, written, synced or renamed
  not_a_checkpoint, ///< no zenflow checkpoint header
  wrong_version,    ///< a format version this build does not read
  truncated,        ///< the file ends early
  corrupted,        ///< a checksum does not match, or a length or tag is impossible
  other_config,     ///< written under another configuration
  other_parameters, ///< written for another parameter list
  other_rank,       ///< written by another rank or for another world size
  missing_section,  ///< a section the caller needs is absent
  wrong_size        ///< a section's size is not what the caller needs
};

/// The name of the error kind: "io", "not_a_checkpoint", ...
[[nodiscard]] std::string_view to_string(checkpoint_errc e) noexcept;

/// Thrown by the checkpoint reader and writer; `what()` says which kind, which file and which
/// section.
class checkpoint_error : public std::runtime_error {
public:
  checkpoint_error(checkpoint_errc kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  [[nodiscard]] checkpoint_errc kind() const noexcept { return kind_; }

private:
  checkpoint_errc kind_;
};

/// The format version this build writes and reads.
inline constexpr std::uint32_t checkpoint_format_version = 1;

/// Who wrote a checkpoint: the hashes a loader compares with its own, and the rank.
struct checkpoint_identity {
  std::uint64_t config_hash = 0; ///< hash of the settings the state depends on
  std::uint64_t params_hash = 0; ///< hash of the parameter list (shapes, dtypes, order)
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
};

/// One section of a checked file.
struct checkpoint_section {
  std::string tag;
  std::uint64_t offset = 0; ///< of the payload, in the file
  std::uint64_t bytes = 0;  ///< payload length
};

/// The file of rank `rank` of `world_size` for the checkpoint named `base`.
/// @throws invalid_argument for rank outside [0, world_size) or world_size < 1.
[[nodiscard]] std::string checkpoint_rank_path(const std::string& base, int rank, int world_size);

/// XXH3-64 of `bytes` (the hash the format uses; also for config and parameter-list hashes).
[[nodiscard]] std::uint64_t checkpoint_hash(std::span<const std::byte> bytes) noexcept;

/// Writes a checkpoint atomically: sections go to a temporary file beside `path`; `commit()`
/// writes the trailer, syncs, renames over `path` and syncs the directory. Destroyed without
/// `commit()`, it removes the temporary file and `path` is untouched.
class checkpoint_writer {
public:
  /// @throws checkpoint_error (io) when the temporary file cannot be created.
  checkpoint_writer(std::string path, const checkpoint_identity& identity);
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;
  ~checkpoint_writer();

  /// Starts a section of exactly `bytes` payload bytes, given by `write` calls (streamed).
  /// @throws invalid_argument for an empty, over-long or repeated tag, or a section still open.
  void begin_section(std::string_view tag, std::uint64_t bytes);
  /// Appends payload to the open section. @throws invalid_argument past the declared size.
  void write(const void* data, std::size_t bytes);
  /// Closes the open section. @throws invalid_argument when fewer bytes than declared came.
  void end_section();
  /// A whole section at once.
  void section(std::string_view tag, const void* data, std::size_t bytes);
  /// Finishes the file and puts it in place (see the class comment). Call once.
  void commit();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

private:
  struct impl;
  std::string path_;
  std::unique_ptr<impl> impl_;
};

/// Reads a checkpoint. The constructor checks the whole file; reads re-verify each section's
/// checksum while they stream it into place (the file may change between the two).
class checkpoint_reader {
public:
  /// @throws checkpoint_error naming what is wrong with the file.
  explicit checkpoint_reader(const std::string& path);
  /// Over bytes in memory (tests, fuzzing); the bytes must outlive the reader.
  explicit checkpoint_reader(std::span<const std::byte> bytes);
  checkpoint_reader(const checkpoint_reader&) = delete;
  checkpoint_reader& operator=(const checkpoint_reader&) = delete;
  ~checkpoint_reader();

  [[nodiscard]] const checkpoint_identity& identity() const noexcept { return identity_; }
  /// Throws other_config / other_parameters / other_rank when `mine` differs from the file's.
  void expect(const checkpoint_identity& mine) const;

  [[nodiscard]] const std::vector<checkpoint_section>& sections() const noexcept { return sections_; }
  [[nodiscard]] const checkpoint_section* find(std::string_view tag) const noexcept;
  /// Copies section `tag` into `dst`, which must be exactly its size.
  /// @throws checkpoint_error (missing_section, wrong_size, corrupted, io).
  void read(std::string_view tag, void* dst, std::size_t bytes) const;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }

private:
  struct source;
  void check_whole_file();
  std::string name_;
  std::unique_ptr<source> source_;
  checkpoint_identity identity_;
  std::vector<checkpoint_section> sections_;
};

ZF_NAMESPACE_END
