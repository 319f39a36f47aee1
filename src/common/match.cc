#include "common/match.h"

#include <immintrin.h>

#include <cstring>

#include "util/cpu.h"

namespace pmhash {
namespace {

// ---- Portable: eight tags per 64-bit word (SWAR) --------------------------------------

// Bit 7 of each byte of the result is set where the byte of `x` is zero, exactly (the
// carry-free form: no false positive from a borrow out of a lower zero byte).
uint64_t ZeroBytes(uint64_t x) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
  return ~(((x & kLow7) + kLow7) | x | kLow7);
}

// One bit per byte, from bit 7 of each byte (a multiply gathers the eight bits).
uint64_t GatherHighBits(uint64_t v) {
  return ((v >> 7) * 0x0102040810204080ull) >> 56;
}

uint64_t Portable8(const uint8_t* tags, uint8_t byte) {
  uint64_t word;
  std::memcpy(&word, tags, 8);
  return GatherHighBits(ZeroBytes(word ^ (0x0101010101010101ull * byte)));
}

uint16_t Portable16(const uint8_t* tags, uint8_t byte) {
  return static_cast<uint16_t>(Portable8(tags, byte) | Portable8(tags + 8, byte) << 8);
}
uint32_t Portable32(const uint8_t* tags, uint8_t byte) {
  return Portable16(tags, byte) | static_cast<uint32_t>(Portable16(tags + 16, byte)) << 16;
}
uint64_t Portable64(const uint8_t* tags, uint8_t byte) {
  return Portable32(tags, byte) | static_cast<uint64_t>(Portable32(tags + 32, byte)) << 32;
}

// ---- SSE2: part of every x86-64 CPU ---------------------------------------------------

uint16_t Sse2_16(const uint8_t* tags, uint8_t byte) { return MatchSse2x16(tags, byte); }
uint32_t Sse2_32(const uint8_t* tags, uint8_t byte) {
  return Sse2_16(tags, byte) | static_cast<uint32_t>(Sse2_16(tags + 16, byte)) << 16;
}
uint64_t Sse2_64(const uint8_t* tags, uint8_t byte) {
  return Sse2_32(tags, byte) | static_cast<uint64_t>(Sse2_32(tags + 32, byte)) << 32;
}

// ---- AVX2 -------------------------------------------------------------------------------

__attribute__((target("avx2"))) uint32_t Avx2_32(const uint8_t* tags, uint8_t byte) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tags));
  const __m256i eq = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(static_cast<char>(byte)));
  return static_cast<uint32_t>(_mm256_movemask_epi8(eq));
}
__attribute__((target("avx2"))) uint64_t Avx2_64(const uint8_t* tags, uint8_t byte) {
  return Avx2_32(tags, byte) | static_cast<uint64_t>(Avx2_32(tags + 32, byte)) << 32;
}

// ---- AVX-512BW ----------------------------------------------------------------------------

__attribute__((target("avx512f,avx512bw"))) uint64_t Avx512_64(const uint8_t* tags,
                                                               uint8_t byte) {
  const __m512i v = _mm512_loadu_si512(tags);
  return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(byte)));
}

// 16 and 32 tags do not fill a wider register: the narrower units serve them.
constexpr TagMatcher kPortable(MatchIsa::kPortable, Portable16, Portable32, Portable64);
constexpr TagMatcher kSse2(MatchIsa::kSse2, Sse2_16, Sse2_32, Sse2_64);
constexpr TagMatcher kAvx2(MatchIsa::kAvx2, Sse2_16, Avx2_32, Avx2_64);
constexpr TagMatcher kAvx512(MatchIsa::kAvx512, Sse2_16, Avx2_32, Avx512_64);

}  // namespace

std::string_view MatchIsaName(MatchIsa isa) {
  switch (isa) {
    case MatchIsa::kPortable: return "portable";
    case MatchIsa::kSse2: return "sse2";
    case MatchIsa::kAvx2: return "avx2";
    case MatchIsa::kAvx512: return "avx512bw";
  }
  return "?";
}

const TagMatcher* TagMatcher::For(MatchIsa isa) {
  const CpuFeatures& cpu = CpuFeatures::Get();
  switch (isa) {
    case MatchIsa::kPortable: return &kPortable;
    case MatchIsa::kSse2: return cpu.sse2 ? &kSse2 : nullptr;
    case MatchIsa::kAvx2: return cpu.avx2 ? &kAvx2 : nullptr;
    case MatchIsa::kAvx512: return cpu.avx512bw && cpu.avx2 ? &kAvx512 : nullptr;
  }
  return nullptr;
}

std::vector<const TagMatcher*> TagMatcher::Available() {
  std::vector<const TagMatcher*> out;
  for (MatchIsa isa : {MatchIsa::kPortable, MatchIsa::kSse2, MatchIsa::kAvx2, MatchIsa::kAvx512}) {
    if (const TagMatcher* m = For(isa)) out.push_back(m);
  }
  return out;
}

const TagMatcher& TagMatcher::Best() {
  static const TagMatcher* best = Available().back();
  return *best;
}

}  // namespace pmhash
