#include "util/hash.h"

#include "util/hash_inline.h"

namespace pmhash {

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
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
