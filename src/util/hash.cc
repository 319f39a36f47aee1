#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pmhash {

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

}  // namespace pmhash
