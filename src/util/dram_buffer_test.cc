#include "util/dram_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace pmhash {
namespace {

bool AllZero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST(DramBufferTest, ZeroedAlignedAndWritable) {
  for (size_t bytes : {size_t{64}, size_t{4097}, size_t{2} << 20, (size_t{5} << 20) + 64}) {
    SCOPED_TRACE(bytes);
    Result<DramBuffer> r = DramBuffer::Allocate(bytes);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    DramBuffer& b = *r;
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    EXPECT_TRUE(AllZero(b.data(), bytes));
    std::memset(b.data(), 0xab, bytes);  // every byte is ours
    // Huge pages are asked for from 2 MiB on, on a 2 MiB-aligned range.
    EXPECT_EQ(b.huge_pages_requested(), bytes >= (size_t{2} << 20));
    if (b.huge_pages_requested()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u);
    }
  }
}

TEST(DramBufferTest, MovesOwnership) {
  Result<DramBuffer> r = DramBuffer::Allocate(1 << 20);
  ASSERT_TRUE(r.ok());
  void* p = r->data();
  DramBuffer moved = std::move(*r);
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(r->data(), nullptr);
  DramBuffer other;
  other = std::move(moved);
  EXPECT_EQ(other.data(), p);
  EXPECT_EQ(other.size(), size_t{1} << 20);
}

TEST(DramBufferTest, BadSizesAreErrorsNotCrashes) {
  EXPECT_TRUE(DramBuffer::Allocate(0).status().IsInvalidArgument());
  // More than the address space can hold.
  Result<DramBuffer> huge = DramBuffer::Allocate(~size_t{0} >> 1);
  EXPECT_FALSE(huge.ok());
}

// Counts constructions and destructions (the side tables' segments hold locks and atomics
// whose initial values are not all zero).
struct Tracked {
  static inline int live = 0;
  uint64_t word = 7;
  Tracked() { ++live; }
  ~Tracked() { --live; }
};

TEST(DramArrayTest, ConstructsEachElementAndDestroysThemOnce) {
  {
    Result<DramArray<Tracked>> r = DramArray<Tracked>::Allocate(100000);  // huge pages
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Tracked::live, 100000);
    DramArray<Tracked> moved = std::move(*r);
    EXPECT_EQ(Tracked::live, 100000);
    EXPECT_EQ(moved.size(), 100000u);
    EXPECT_EQ(r->size(), 0u);
    for (size_t i = 0; i < moved.size(); ++i) ASSERT_EQ(moved[i].word, 7u);
    moved[99999].word = 9;
    DramArray<Tracked> other;
    other = std::move(moved);  // the empty array it replaces destroys nothing
    EXPECT_EQ(other[99999].word, 9u);
    EXPECT_EQ(Tracked::live, 100000);
  }
  EXPECT_EQ(Tracked::live, 0);
}

TEST(DramArrayTest, BadSizesAreErrors) {
  EXPECT_TRUE(DramArray<Tracked>::Allocate(0).status().IsInvalidArgument());
  EXPECT_TRUE(DramArray<Tracked>::Allocate(~size_t{0} / 4).status().IsInvalidArgument());
  EXPECT_EQ(Tracked::live, 0);
}

}  // namespace
}  // namespace pmhash
