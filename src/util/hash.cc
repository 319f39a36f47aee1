#include "util/hash.h"

#include "util/hash_inline.h"

namespace pmhash {

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

namespace {

// XXH3_len_4to8_64b (xxhash.h, v0.8) for len = 8, step by step:
//   seed'   = seed ^ (bswap32(low 32 bits of seed) << 32)
//   input64 = LE32(bytes 4..8) + (LE32(bytes 0..4) << 32)       a bijection of the bytes
//   keyed   = input64 ^ ((LE64(secret + 8) ^ LE64(secret + 16)) - seed')
//   rrmxmx:  h ^= rotl(h, 49) ^ rotl(h, 24);  h *= M;  h ^= (h >> 35) + 8;  h *= M;
//            h ^= h >> 28
// Each step is undone below, last first (UnhashTest checks the round trip).
constexpr uint64_t kMixMultiplier = 0x9FB21C651E98DF25ull;
constexpr uint64_t kMixInverse = 0x02AB9C720D1024ADull;  // kMixMultiplier^-1 mod 2^64
static_assert(kMixMultiplier * kMixInverse == 1, "the multiplier's inverse");

uint64_t Rotl(uint64_t v, unsigned r) { return r == 0 ? v : (v << r) | (v >> (64 - r)); }

// The map L(h) = h ^ rotl(h, 49) ^ rotl(h, 24) is multiplication by 1 + x^49 + x^24 in
// GF(2)[x] / (x^64 + 1); that polynomial is 1 plus a nilpotent, so L^64 is the identity
// and L^-1 = L^63 = L^32 L^16 L^8 L^4 L^2 L, where L^(2^k) rotates by 49 * 2^k and
// 24 * 2^k (mod 64).
uint64_t UnmixRotations(uint64_t h) {
  unsigned a = 49, b = 24;
  for (int k = 0; k < 6; ++k) {
    h ^= Rotl(h, a) ^ Rotl(h, b);
    a = (a * 2) % 64;
    b = (b * 2) % 64;
  }
  return h;
}

}  // namespace

void UnhashKey8(uint64_t hash, uint64_t seed, char key[8]) {
  uint64_t h = hash;
  h ^= (h >> 28) ^ (h >> 56);  // undoes h ^= h >> 28
  h *= kMixInverse;
  h ^= (h >> 35) + 8;  // the top 29 bits were not changed by that step
  h *= kMixInverse;
  h = UnmixRotations(h);
  const uint64_t seed2 = seed ^ (uint64_t{XXH_swap32(static_cast<uint32_t>(seed))} << 32);
  const uint64_t bitflip = (XXH_readLE64(XXH3_kSecret + 8) ^ XXH_readLE64(XXH3_kSecret + 16)) -
                           seed2;
  const uint64_t input64 = h ^ bitflip;
  const uint32_t first = static_cast<uint32_t>(input64 >> 32);
  const uint32_t last = static_cast<uint32_t>(input64);
  // LE32 reads: little-endian byte order on every platform.
  for (int i = 0; i < 4; ++i) {
    key[i] = static_cast<char>(first >> (8 * i));
    key[4 + i] = static_cast<char>(last >> (8 * i));
  }
}

namespace {

constexpr uint16_t kCrcPoly = 0x1021;  // x^16 + x^12 + x^5 + 1 (x^16 implied)

// kCrcTable[b] = b(x) * x^16 mod G: the remainder one byte contributes.
struct CrcTable {
  uint16_t t[256]{};
  constexpr CrcTable() {
    for (int b = 0; b < 256; ++b) {
      uint16_t r = static_cast<uint16_t>(b << 8);
      for (int i = 0; i < 8; ++i) r = (r & 0x8000) ? (r << 1) ^ kCrcPoly : r << 1;
      t[b] = r;
    }
  }
};
constexpr CrcTable kCrcTable;

// payload(x) * x^16 mod G, the payload's 48 bits taken most significant first.
uint16_t Crc16Of48(uint64_t payload) {
  uint16_t crc = 0;
  for (int shift = 40; shift >= 0; shift -= 8) {
    const uint8_t byte = static_cast<uint8_t>(payload >> shift);
    crc = static_cast<uint16_t>(crc << 8) ^ kCrcTable.t[(crc >> 8) ^ byte];
  }
  return crc;
}

constexpr uint64_t kPayloadMask = (uint64_t{1} << kSealedPayloadBits) - 1;

}  // namespace

uint64_t SealWord(uint64_t payload, uint64_t salt) {
  payload &= kPayloadMask;
  return (payload << 16) | Crc16Of48(payload ^ (salt & kPayloadMask));
}

bool UnsealWord(uint64_t word, uint64_t salt, uint64_t* payload) {
  const uint64_t p = word >> 16;
  if (Crc16Of48(p ^ (salt & kPayloadMask)) != static_cast<uint16_t>(word)) return false;
  *payload = p;
  return true;
}

}  // namespace pmhash
