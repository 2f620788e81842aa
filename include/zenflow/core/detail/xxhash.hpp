/// @file
/// xxHash (Debian's libxxhash-dev) in its documented header-only mode: static inline functions
/// under private names, so that a consumer's own xxHash (linked or inlined) does not collide with
/// ours. The one place zenflow includes <xxhash.h> (checkpoint checksums, rank-agreement hashes).
///
/// Without inline hints: xxHash marks its internals always_inline, and GCC at -Og refuses to
/// inline the ones it calls through a function pointer (a hard error in any translation unit
/// that includes a checkpoint header). Plain `static` functions build at every level and hash as
/// fast at -O2 and -O3 (18.7 and 20.3 GB/s with the hints, 19.3 and 21.3 without, one core).
#pragma once

#ifndef XXH_INLINE_ALL
#  define XXH_INLINE_ALL
#  define ZF_DEFINED_XXH_INLINE_ALL
#endif
#ifndef XXH_NO_INLINE_HINTS
#  define XXH_NO_INLINE_HINTS 1
#  define ZF_DEFINED_XXH_NO_INLINE_HINTS
#endif
#include <xxhash.h>
#ifdef ZF_DEFINED_XXH_INLINE_ALL
#  undef XXH_INLINE_ALL
#  undef ZF_DEFINED_XXH_INLINE_ALL
#endif
#ifdef ZF_DEFINED_XXH_NO_INLINE_HINTS
#  undef XXH_NO_INLINE_HINTS
#  undef ZF_DEFINED_XXH_NO_INLINE_HINTS
#endif
