// Hashing: xxh3 everywhere (keys, checksums), with a seed so engines can derive several
// independent hash functions (Bloom filter probes, two-choice schemes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pmhash {

uint64_t Hash64(const void* data, size_t len, uint64_t seed = 0);
inline uint64_t HashKey(std::string_view key, uint64_t seed = 0) {
  return Hash64(key.data(), key.size(), seed);
}

// Maps a hash to [0, n) by multiply-shift (Lemire's range reduction): the high bits of the
// hash choose, so no division, and n need not be a power of two. Doubling n sends index i
// to 2i or 2i+1, which is what lets the engines' resizes split a bucket, group or stripe
// in two.
inline uint64_t Reduce(uint64_t hash, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace pmhash
