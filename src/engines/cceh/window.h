// Matching one line of a cceh window: which of its four 16-byte slots may answer a probe
// for a key. A probe that misses reads its whole 16-slot window (the original's search);
// compared slot by slot, with each slot's form decoded, that was 240 of the 390
// instructions of a negative search and most of an insert's duplicate check. Here a line
// is four compares wide, with two implementations of one contract: SSE2 (every x86-64
// CPU) and AVX2, which the engine picks once by cpuid (util/cpu.h; nothing is built with
// -march=native). Tests run both on the same lines and require equal masks.
//
// Contract: Candidates reads the line's 64 bytes (`line` points at four KvWords) with plain
// loads (a lock-free caller validates them by a version afterwards) and returns four bits a
// slot, slot j at bits 4j..4j+2 (kWindow*Bits below), each an exact 64-bit equality. The
// caller takes the candidates lowest first (probe order) and checks a word1 hit's form,
// since an inline value may equal the hash. A slot holding the key is always a candidate:
// its word0 is the key word (an inline key), or its word1 the key's hash (a record's).
// AnyCandidate(a, b, c, ...) is whether lines a, b and c hold any candidate (empty slots
// aside): one branch for the rest of a window that holds none, as a negative search's does.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "common/slot.h"

namespace pmhash::engines {

inline constexpr uint32_t kWindowKeyBits = 0x1111;    // word0 == the key word
inline constexpr uint32_t kWindowEmptyBits = 0x2222;  // word0 all ones (asked for only)
inline constexpr uint32_t kWindowHashBits = 0x4444;   // word1 == the hash
inline constexpr uint32_t kWindowBitsPerSlot = 4;
inline constexpr uint32_t kWindowLineSlots = 4;

struct WindowSse2 {
  // SSE2 has no 64-bit compare: a word is equal when both of its 32-bit halves are, two
  // adjacent bits of movmskps (word0's halves at 4j, 4j+1; word1's at 4j+2, 4j+3).
  static uint32_t Candidates(const KvWords* line, uint64_t key_word, uint64_t hash,
                             bool empties) {
    const __m128i want =
        _mm_set_epi64x(static_cast<int64_t>(hash), static_cast<int64_t>(key_word));
    uint32_t eq = 0, ones = 0;
    for (uint32_t j = 0; j < kWindowLineSlots; ++j) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + j));
      const uint32_t shift = kWindowBitsPerSlot * j;
      eq |= Halves(_mm_cmpeq_epi32(v, want)) << shift;
      if (empties) ones |= Halves(_mm_cmpeq_epi32(v, _mm_set1_epi32(-1))) << shift;
    }
    return (eq & (eq >> 1) & (kWindowKeyBits | kWindowHashBits)) |
           ((ones & (ones >> 1) & kWindowKeyBits) << 1);
  }
  static bool AnyCandidate(const KvWords* a, const KvWords* b, const KvWords* c,
                           uint64_t key_word, uint64_t hash) {
    return (Candidates(a, key_word, hash, false) | Candidates(b, key_word, hash, false) |
            Candidates(c, key_word, hash, false)) != 0;
  }

 private:
  static uint32_t Halves(__m128i eq) {
    return static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(eq)));
  }
};

struct WindowAvx2 {
  // Two slots a 256-bit compare of 64-bit lanes; movmskps over its eight 32-bit halves
  // gives each lane twice: word0 at 4j, 4j+1, word1 at 4j+2, 4j+3, the layout above with
  // bit 4j+1 free for the empty bit.
  __attribute__((target("avx2"))) static uint32_t Candidates(const KvWords* line,
                                                             uint64_t key_word, uint64_t hash,
                                                             bool empties) {
    const auto k = static_cast<int64_t>(key_word);
    const auto h = static_cast<int64_t>(hash);
    const __m256i want = _mm256_set_epi64x(h, k, h, k);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 2));
    uint32_t c = (Equal(lo, want) | (Equal(hi, want) << 8)) & (kWindowKeyBits | kWindowHashBits);
    if (empties) {
      const __m256i all = _mm256_set1_epi64x(-1);
      c |= ((Equal(lo, all) | (Equal(hi, all) << 8)) & kWindowKeyBits) << 1;
    }
    return c;
  }
  // Six compares ORed: a lane equal anywhere leaves a bit set.
  __attribute__((target("avx2"))) static bool AnyCandidate(const KvWords* a, const KvWords* b,
                                                           const KvWords* c, uint64_t key_word,
                                                           uint64_t hash) {
    const auto k = static_cast<int64_t>(key_word);
    const auto h = static_cast<int64_t>(hash);
    const __m256i want = _mm256_set_epi64x(h, k, h, k);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(LineEqual(a, want), LineEqual(b, want)),
                                        LineEqual(c, want));
    return !_mm256_testz_si256(any, any);
  }

 private:
  // A line's four slots against want: its two halves' lane compares, ORed.
  __attribute__((target("avx2"))) static __m256i LineEqual(const KvWords* line, __m256i want) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 2));
    return _mm256_or_si256(_mm256_cmpeq_epi64(lo, want), _mm256_cmpeq_epi64(hi, want));
  }
  // Two bits per equal 64-bit lane.
  __attribute__((target("avx2"))) static uint32_t Equal(__m256i a, __m256i b) {
    return static_cast<uint32_t>(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi64(a, b))));
  }
};

}  // namespace pmhash::engines
