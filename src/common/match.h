// Tag matching: compares a row of one-byte tags (fingerprints, form bytes, tokens) with one
// byte and returns a bit mask, bit i set when tags[i] equals the byte. Engines scan a
// bucket's or a group's tags this way instead of byte by byte: `group` matches a level-2
// group's form bytes (empty cells, and with tags=on the key's tag). wophi's and smartht's
// buckets hold 3 or 4 tokens, which their lock-free searches read one acquire load each
// (VersionedRwLock's contract): a vector compare of so few bytes saves nothing there.
//
// One small type with four implementations of the same contract: portable (8 bytes at a
// time in a 64-bit word, for any CPU), SSE2 (16 bytes per compare, every x86-64 CPU),
// AVX2 (32) and AVX-512BW (64). `TagMatcher::Best()` picks the widest the CPU and the OS
// support, once, by cpuid (util/cpu.h): nothing is built with -march=native. Tests run
// every implementation the machine has on the same inputs and require equal masks.
//
// Contract: MatchN reads exactly N bytes at `tags` (no alignment needed); a caller with
// fewer live tags masks the result (e.g. `mask & ((1 << live) - 1)`), or calls
// Match(tags, n, byte), which reads exactly n bytes for any n up to 64.
#pragma once

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace pmhash {

enum class MatchIsa : uint8_t { kPortable, kSse2, kAvx2, kAvx512 };
std::string_view MatchIsaName(MatchIsa isa);

// Sixteen tags with SSE2, inline: SSE2 is part of every x86-64 CPU, so this needs no
// dispatch and no call (a search's first try uses it: a call through TagMatcher's pointer
// would put the search's state in a frame). TagMatcher's 16-byte unit is this function.
inline uint16_t MatchSse2x16(const uint8_t* tags, uint8_t byte) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags));
  const __m128i eq = _mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(byte)));
  return static_cast<uint16_t>(_mm_movemask_epi8(eq));
}

class TagMatcher {
 public:
  using Fn16 = uint16_t (*)(const uint8_t* tags, uint8_t byte);
  using Fn32 = uint32_t (*)(const uint8_t* tags, uint8_t byte);
  using Fn64 = uint64_t (*)(const uint8_t* tags, uint8_t byte);

  // The widest implementation this machine runs (chosen once).
  static const TagMatcher& Best();
  // A given implementation, or nullptr when this CPU (or OS) cannot run it.
  static const TagMatcher* For(MatchIsa isa);
  // Every implementation this machine runs, portable first.
  static std::vector<const TagMatcher*> Available();

  uint16_t Match16(const uint8_t* tags, uint8_t byte) const { return match16_(tags, byte); }
  uint32_t Match32(const uint8_t* tags, uint8_t byte) const { return match32_(tags, byte); }
  uint64_t Match64(const uint8_t* tags, uint8_t byte) const { return match64_(tags, byte); }
  // Tags [0, n), n in [0, 64]: the widest units that fit (a run of 64, 32 or 16 is one
  // call), the last n % 16 tags one at a time. Reads exactly n bytes, so a row may end
  // where the caller's memory (or its lock) ends.
  uint64_t Match(const uint8_t* tags, size_t n, uint8_t byte) const {
    if (n == 64) return Match64(tags, byte);
    uint64_t mask = 0;
    size_t i = 0;
    if (n >= 32) {
      mask = Match32(tags, byte);
      i = 32;
    }
    if (n - i >= 16) {
      mask |= static_cast<uint64_t>(Match16(tags + i, byte)) << i;
      i += 16;
    }
    for (; i < n; ++i) mask |= static_cast<uint64_t>(tags[i] == byte) << i;
    return mask;
  }
  MatchIsa isa() const { return isa_; }

  constexpr TagMatcher(MatchIsa isa, Fn16 m16, Fn32 m32, Fn64 m64)
      : isa_(isa), match16_(m16), match32_(m32), match64_(m64) {}

 private:
  MatchIsa isa_;
  Fn16 match16_;
  Fn32 match32_;
  Fn64 match64_;
};

}  // namespace pmhash
