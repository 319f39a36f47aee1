#include "util/hash.h"
#include "util/hash_inline.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace pmhash {
namespace {

TEST(Hash, IsDeterministic) {
  const std::string key = "the same key";
  EXPECT_EQ(HashKey(key, 0), HashKey(std::string("the same key"), 0));
  EXPECT_EQ(HashKey(key, 99), HashKey(key, 99));
  EXPECT_EQ(Hash64(key.data(), key.size(), 7), HashKey(key, 7));
  // Fixed across builds and runs: recorded values are on the media (slot hash words,
  // checksums), so a change of algorithm or seed handling must fail here. These are
  // XXH3_64bits / XXH3_64bits_withSeed outputs.
  EXPECT_EQ(HashKey("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(Hash64("", 0), HashKey("", 0));  // Hash64's default seed is 0
}

TEST(UnhashTest, RecoversEveryEightByteKeyFromItsHash) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> seeds = {0, 1, 0xffffffffffffffffull, 0x123456789abcdef0ull};
  for (int i = 0; i < 4; ++i) seeds.push_back(rng());
  for (uint64_t seed : seeds) {
    for (int i = 0; i < 2000; ++i) {
      char key[8];
      const uint64_t v = i < 4 ? uint64_t{0} - i : rng();
      std::memcpy(key, &v, 8);
      if (i == 4) std::memcpy(key, "12345678", 8);
      char back[8];
      UnhashKey8(HashKey(std::string_view(key, 8), seed), seed, back);
      ASSERT_EQ(std::string_view(back, 8), std::string_view(key, 8)) << "seed " << seed;
    }
  }
}

TEST(Hash, SeedChangesTheOutput) {
  const std::vector<std::string> keys = {"", "a", "12345678", std::string(100, 'x'),
                                         std::string(5000, 'y')};
  for (const auto& k : keys) {
    std::set<uint64_t> seen;
    for (uint64_t seed = 0; seed < 64; ++seed) seen.insert(HashKey(k, seed));
    EXPECT_EQ(seen.size(), 64u) << "key of " << k.size() << " bytes";
  }
}

TEST(Hash, UsesExactlyTheGivenLength) {
  // Binary data with zero bytes: the length, not a terminator, delimits the input.
  const char buf[] = {'a', '\0', 'b', '\0', '\0', 'c', 'd', 'e', 'f', 'g'};
  std::set<uint64_t> prefixes;
  for (size_t len = 0; len <= sizeof(buf); ++len) prefixes.insert(Hash64(buf, len));
  EXPECT_EQ(prefixes.size(), sizeof(buf) + 1);  // every prefix hashes differently
  EXPECT_EQ(HashKey(std::string_view(buf, 3), 5), Hash64(buf, 3, 5));
  EXPECT_NE(HashKey(std::string_view(buf, 2), 5), HashKey(std::string_view(buf, 1), 5));

  // Bytes past the length are ignored.
  std::string a = "prefix-AAAA", b = "prefix-BBBB";
  EXPECT_EQ(Hash64(a.data(), 7), Hash64(b.data(), 7));
  EXPECT_NE(Hash64(a.data(), 8), Hash64(b.data(), 8));
  // A zero-length input does not read its pointer.
  EXPECT_EQ(Hash64(nullptr, 0), HashKey("", 0));
}

// The hot path hashes keys of up to kShortHashBytes inline (hash_inline.h, ShortHash64):
// the same function as Hash64 at each of those lengths, with and without a seed (the
// pool's), so an engine rehashing a stored key with KeyHash finds it where Get looks.
TEST(Hash, ShortHashIsHash64AtEveryShortLength) {
  std::string bytes;
  for (int i = 0; i < 64; ++i) bytes.push_back(static_cast<char>(i * 37 + 11));
  for (size_t len = 0; len <= kShortHashBytes; ++len) {
    for (const uint64_t seed : {uint64_t{0}, uint64_t{0x9e3779b97f4a7c15}}) {
      EXPECT_EQ(ShortHash64(bytes.data(), len, seed), Hash64(bytes.data(), len, seed))
          << len << " " << seed;
    }
  }
}

TEST(Hash, SpreadsSimilarKeys) {
  // Sequential keys must differ in about half their bits (engines take bucket indexes,
  // fingerprints and Bloom probes from different bits of one hash).
  double total_flips = 0;
  constexpr int kKeys = 10000;
  for (int i = 0; i < kKeys; ++i) {
    std::string a = "key", b = "key";
    a += std::to_string(i);
    b += std::to_string(i + 1);
    total_flips += __builtin_popcountll(HashKey(a, 0) ^ HashKey(b, 0));
  }
  EXPECT_NEAR(total_flips / kKeys, 32, 1);
  // Low and high halves are both used.
  std::set<uint64_t> low_bytes, high_bytes;
  for (int i = 0; i < 4096; ++i) {
    const uint64_t h = HashKey(std::to_string(i), 0);
    low_bytes.insert(h & 0xff);
    high_bytes.insert(h >> 56);
  }
  EXPECT_GT(low_bytes.size(), 250u);
  EXPECT_GT(high_bytes.size(), 250u);
}

// Every damage within one byte of a sealed word (at any byte, in any bits) and every burst
// of up to 16 bits is detected; the check bits are CRC-16/XMODEM's.
TEST(SealedWord, RoundTripsAndDetectsEveryDamagedByte) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> payloads = {0, 1, (uint64_t{1} << 48) - 1, 0x123456789abcull};
  for (int i = 0; i < 60; ++i) payloads.push_back(rng() >> 16);
  for (const uint64_t payload : payloads) {
    const uint64_t salt = rng() % 100000;
    const uint64_t word = SealWord(payload, salt);
    uint64_t got = ~uint64_t{0};
    ASSERT_TRUE(UnsealWord(word, salt, &got));
    EXPECT_EQ(got, payload);
    for (int byte = 0; byte < 8; ++byte) {
      for (uint64_t bits = 1; bits < 256; ++bits) {
        uint64_t out = 7;
        ASSERT_FALSE(UnsealWord(word ^ (bits << (8 * byte)), salt, &out))
            << "payload " << payload << " byte " << byte << " xor " << bits;
        EXPECT_EQ(out, 7u);
      }
    }
    // A burst of up to 16 bits straddling two bytes too.
    for (int at = 0; at + 16 <= 64; ++at) {
      ASSERT_FALSE(UnsealWord(word ^ ((uint64_t{0x8001} | (rng() & 0x7ffe)) << at), salt, &got));
    }
  }
  // The salt is part of the check: the word of one place fails at most others.
  int passed_elsewhere = 0;
  for (uint64_t salt = 1; salt < 1000; ++salt) {
    uint64_t got;
    passed_elsewhere += UnsealWord(SealWord(42, 0), salt, &got);
  }
  EXPECT_LT(passed_elsewhere, 3);
  // The check bits are CRC-16/XMODEM's: the 48-bit payload "123456" gives its CRC.
  uint64_t ascii = 0;
  for (char c : std::string("123456")) ascii = ascii << 8 | static_cast<uint8_t>(c);
  EXPECT_EQ(SealWord(ascii, 0) & 0xffff, 0x20e4u);  // crc16/xmodem("123456")
}

}  // namespace
}  // namespace pmhash
