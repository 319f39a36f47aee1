// Hashing: xxh3 everywhere (keys, checksums), with a seed so engines can derive several
// independent hash functions (Bloom filter probes, two-choice schemes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pmhash {

uint64_t Hash64(const void* data, size_t len, uint64_t seed = 0);
// The hash of a user key under a pool's seed (pm::Pool::hash_seed). No default seed: an
// engine hashes keys through Engine::KeyHash, which knows its pool's.
inline uint64_t HashKey(std::string_view key, uint64_t seed) {
  return Hash64(key.data(), key.size(), seed);
}

// Maps a hash to [0, n) by multiply-shift (Lemire's range reduction): the high bits of the
// hash choose, so no division, and n need not be a power of two. Doubling n sends index i
// to 2i or 2i+1, which is what lets the engines' resizes split a bucket, group or stripe
// in two.
inline uint64_t Reduce(uint64_t hash, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

// Sealed words: persistent metadata that must change with one failure-atomic 8-byte store
// and still check itself (undo-log lane states, allocator chunk-table entries). The word
// is the 48-bit payload above a CRC-16 (polynomial x^16 + x^12 + x^5 + 1, as CRC-16/XMODEM)
// of the payload XOR `salt`, where the salt names the word's place (a lane, a chunk).
// Any damage confined to 16 adjacent bits of the word, so any single damaged byte, is
// always detected (a CRC of degree 16 catches every burst that short); other damage
// passes with probability 2^-16, and a word copied to another place usually fails.
inline constexpr uint64_t kSealedPayloadBits = 48;
// `payload` must be below 2^48.
uint64_t SealWord(uint64_t payload, uint64_t salt);
// False if `word` fails its check (then *payload is untouched).
bool UnsealWord(uint64_t word, uint64_t salt, uint64_t* payload);

}  // namespace pmhash
