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

}  // namespace pmhash
