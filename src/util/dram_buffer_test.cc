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

}  // namespace
}  // namespace pmhash
