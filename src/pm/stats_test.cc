#include "pm/stats.h"

#include <gtest/gtest.h>

#include <thread>

namespace pmhash::pm {

TEST(MediaLineModel, SameMediaLineMergesDifferentLinesCost) {
  MediaLineModel m;
  EXPECT_TRUE(m.Touch(0x1000));
  EXPECT_FALSE(m.Touch(0x1040));  // same 256-byte media line
  EXPECT_FALSE(m.Touch(0x10c0));
  EXPECT_TRUE(m.Touch(0x1100));   // next media line
  EXPECT_FALSE(m.Touch(0x1000));  // still buffered
}

TEST(MediaLineModel, EvictsLeastRecentlyUsedAfter64Lines) {
  MediaLineModel m;
  for (uintptr_t i = 0; i < 64; ++i) EXPECT_TRUE(m.Touch(i * 256));
  EXPECT_FALSE(m.Touch(0));          // refresh line 0: line 1 is now the oldest
  EXPECT_TRUE(m.Touch(64 * 256));    // evicts line 1
  EXPECT_FALSE(m.Touch(0));
  EXPECT_TRUE(m.Touch(1 * 256));     // line 1 was evicted; this evicts line 2
  EXPECT_FALSE(m.Touch(63 * 256));   // still buffered
  EXPECT_FALSE(m.Touch(3 * 256));    // still buffered
  EXPECT_TRUE(m.Touch(2 * 256));     // evicted by line 1
}

TEST(CounterTable, SumsSlotsOfAllThreads) {
  CounterTable t;
  CounterSlot::Add(t.Local()->flushes, 3);
  std::thread([&] { CounterSlot::Add(t.Local()->flushes, 4); }).join();
  EXPECT_EQ(t.Sum().flushes, 7u);
}

}  // namespace pmhash::pm
