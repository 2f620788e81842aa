/// @file
/// The checkpoint file: a versioned header, named sections each with its own checksum (XXH3-64 from
/// the xxHash library), and a trailer; written atomically (a temporary file beside the target,
/// fsync, rename, fsync of the directory) and streamed, so that saving needs no second copy of the
/// state and a crash mid-save leaves the previous checkpoint intact.
///
/// Layout (little-endian):
///
///     header   64 B: "ZFLWCKPT", u32 format version, u32 header size (64), u64 config hash,
///                    u64 parameter-list hash, u32 rank, u32 world size, 16 B reserved (0),
///                    u64 XXH3 of the 56 bytes before it
///     section  u32 "SECT", u32 tag length (1..255), tag, u64 payload length, payload,
///              u64 XXH3 of (tag length, tag, payload length, payload)
///     trailer  u32 "ZEND", u32 section count, u64 XXH3 of the sections' checksums in order
///
/// A reader checks the whole file (structure and every checksum, one streaming pass) before it
/// hands out anything, so a caller that loads only from a checked reader never applies half a
/// file. Errors are `checkpoint_error`s that say which: not a checkpoint, wrong version,
/// truncated, corrupted (naming the section), other configuration, other parameter list, other
/// rank, I/O.
///
/// Data parallel: every rank writes its own file, `checkpoint_rank_path(base, rank, world)`:
/// `base` itself for one rank, else `base.rank<r>-of-<n>` (rank and world size in the header too).
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
  void section(std::string_view tag, const void* data, std::size_t bytes) {
    begin_section(tag, bytes);
    write(data, bytes);
    end_section();
  }
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

#include <zenflow/engine/detail/io/checkpoint_file_impl.hpp>
