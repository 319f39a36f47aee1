#include "common/match.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "util/cpu.h"

namespace pmhash {
namespace {

// The definition every implementation must agree with.
uint64_t Reference(const uint8_t* tags, size_t n, uint8_t byte) {
  uint64_t mask = 0;
  for (size_t i = 0; i < n; ++i) mask |= static_cast<uint64_t>(tags[i] == byte) << i;
  return mask;
}

TEST(TagMatcherTest, EveryImplementationEqualsTheReferenceOnRandomRows) {
  std::mt19937_64 rng(20261125);
  // Rows start at a random offset 0..15 in the buffer, so unaligned loads run too.
  std::vector<uint8_t> buf(64 + 16);
  for (const TagMatcher* m : TagMatcher::Available()) {
    SCOPED_TRACE(std::string(MatchIsaName(m->isa())));
    for (int round = 0; round < 20000; ++round) {
      // Few distinct values, so that matches are common; sometimes the full byte range.
      const unsigned range = round % 3 == 0 ? 256 : 1 + round % 7;
      for (auto& b : buf) b = static_cast<uint8_t>(rng() % range);
      const uint8_t byte = static_cast<uint8_t>(round % 5 == 0 ? rng() : rng() % range);
      const uint8_t* row = buf.data() + rng() % 16;
      ASSERT_EQ(m->Match16(row, byte), Reference(row, 16, byte));
      ASSERT_EQ(m->Match32(row, byte), Reference(row, 32, byte));
      ASSERT_EQ(m->Match64(row, byte), Reference(row, 64, byte));
    }
  }
}

TEST(TagMatcherTest, RowsOfAnyLengthReadOnlyTheirBytes) {
  std::mt19937_64 rng(7);
  // Each row ends at the end of its buffer, so a read past it is a heap overflow under
  // ASan, and the bytes after it in a longer buffer would show in the mask otherwise.
  for (const TagMatcher* m : TagMatcher::Available()) {
    SCOPED_TRACE(std::string(MatchIsaName(m->isa())));
    for (size_t n = 0; n <= 64; ++n) {
      for (int round = 0; round < 200; ++round) {
        std::vector<uint8_t> row(n);
        for (auto& b : row) b = static_cast<uint8_t>(rng() % 3);
        const auto byte = static_cast<uint8_t>(rng() % 3);
        ASSERT_EQ(m->Match(row.data(), n, byte), Reference(row.data(), n, byte)) << n;
      }
    }
  }
}

TEST(TagMatcherTest, EdgeRows) {
  std::vector<uint8_t> row(64);
  for (const TagMatcher* m : TagMatcher::Available()) {
    SCOPED_TRACE(std::string(MatchIsaName(m->isa())));
    for (int v : {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff}) {
      std::memset(row.data(), v, row.size());
      const auto byte = static_cast<uint8_t>(v);
      EXPECT_EQ(m->Match64(row.data(), byte), ~uint64_t{0});
      EXPECT_EQ(m->Match64(row.data(), static_cast<uint8_t>(byte ^ 1)), 0u);
      EXPECT_EQ(m->Match16(row.data(), byte), 0xffff);
      // A single differing tag at every position; neighbours that differ by one bit and
      // bytes around zero are where a SWAR borrow would give a false match.
      for (size_t i = 0; i < 64; ++i) {
        row[i] = static_cast<uint8_t>(byte ^ 0x80);
        if (i > 0) row[i - 1] = static_cast<uint8_t>(byte - 1);
        ASSERT_EQ(m->Match64(row.data(), byte), Reference(row.data(), 64, byte)) << i;
        ASSERT_EQ(m->Match64(row.data(), row[i]), Reference(row.data(), 64, row[i])) << i;
        std::memset(row.data(), v, row.size());
      }
    }
  }
}

TEST(TagMatcherTest, BestIsTheWidestTheCpuRuns) {
  const CpuFeatures& cpu = CpuFeatures::Get();
  const MatchIsa expected = cpu.avx512bw && cpu.avx2 ? MatchIsa::kAvx512
                            : cpu.avx2               ? MatchIsa::kAvx2
                            : cpu.sse2               ? MatchIsa::kSse2
                                                     : MatchIsa::kPortable;
  EXPECT_EQ(TagMatcher::Best().isa(), expected);
  EXPECT_NE(TagMatcher::For(MatchIsa::kPortable), nullptr);
  EXPECT_EQ(TagMatcher::For(MatchIsa::kAvx2) != nullptr, cpu.avx2);
  // The portable twin and at least one SIMD variant run on every x86-64 machine, so the
  // comparison above always compares two implementations.
  EXPECT_GE(TagMatcher::Available().size(), 2u);
}

}  // namespace
}  // namespace pmhash
