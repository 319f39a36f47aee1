// HashKey with xxh3 compiled into the caller: for the code that hashes a key on every
// operation (Engine::Get and the other public operations), where the call into Hash64
// and xxh3's length dispatch behind it were 49 of a lookup's instructions (BENCHMARKS.md,
// issue 29). The same function as Hash64 (xxh3 with XXH_INLINE_ALL in both), so the two
// never disagree (hash_test compares them at every length ShortHash64 takes, seeded). Includes
// xxhash.h with XXH_INLINE_ALL: include it from .cc files of the library only, never
// from a header (xxhash is private to the library).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pmhash {

// The longest key ShortHash64 takes: xxh3's short-input path (up to 16 bytes) covers the
// common keys (8-byte keys above all) in a few multiplies.
inline constexpr size_t kShortHashBytes = 16;

// Hash64 of at most kShortHashBytes bytes (len <= kShortHashBytes is the caller's
// contract): only xxh3's short-input path is compiled in, with no call in it, so a caller
// that tests the length first needs no frame for the hash (issue 29).
__attribute__((always_inline, flatten)) inline uint64_t ShortHash64(const void* data, size_t len,
                                                                   uint64_t seed) {
  if (len > kShortHashBytes) __builtin_unreachable();
  return XXH3_64bits_withSeed(data, len, seed);
}

}  // namespace pmhash
