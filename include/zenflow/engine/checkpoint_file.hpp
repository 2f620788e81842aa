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

// The declarations, then the definitions (the format's helpers, the reader, the writer); each
// part includes what it needs and none includes this header.
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_decl.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_file_impl.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_reader_impl.hpp>
#include <zenflow/engine/detail/checkpoint_file/checkpoint_writer_impl.hpp>
