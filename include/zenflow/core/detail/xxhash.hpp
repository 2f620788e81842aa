/// @file
/// xxHash (Debian's libxxhash-dev) in its documented header-only mode: static inline functions
/// under private names, so that a consumer's own xxHash (linked or inlined) does not collide with
/// ours. The one place zenflow includes <xxhash.h> (checkpoint checksums, rank-agreement hashes).
#pragma once

#ifndef XXH_INLINE_ALL
#  define XXH_INLINE_ALL
#  define ZF_DEFINED_XXH_INLINE_ALL
#endif
#include <xxhash.h>
#ifdef ZF_DEFINED_XXH_INLINE_ALL
#  undef XXH_INLINE_ALL
#  undef ZF_DEFINED_XXH_INLINE_ALL
#endif
