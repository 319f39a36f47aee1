#include "pm/stats.h"

#include <gtest/gtest.h>

#include <thread>

namespace pmhash::pm {

TEST(CounterTable, SumsSlotsOfAllThreads) {
  CounterTable t;
  CounterSlot::Add(t.Local()->flushes, 3);
  std::thread([&] { CounterSlot::Add(t.Local()->flushes, 4); }).join();
  EXPECT_EQ(t.Sum().flushes, 7u);
}

TEST(CounterTable, SumsEveryCounter) {
  CounterTable t;
  CounterSlot& s = *t.Local();
  uint64_t n = 1;
  for (std::atomic<uint64_t>* c :
       {&s.flushes, &s.fences, &s.bytes_stored, &s.media_writes, &s.lines_read,
        &s.redundant_flushes, &s.redundant_fences, &s.write_backs, &s.lines_written,
        &s.media_reads, &s.media_rmw_reads, &s.user_bytes, &s.ops, &s.write_waits,
        &s.read_waits, &s.reads_hidden}) {
    CounterSlot::Add(*c, n++);
  }
  const PersistCounters sum = t.Sum();
  const uint64_t expected[] = {sum.flushes, sum.fences, sum.bytes_stored, sum.media_writes,
                               sum.lines_read, sum.redundant_flushes, sum.redundant_fences,
                               sum.write_backs, sum.lines_written, sum.media_reads,
                               sum.media_rmw_reads, sum.user_bytes, sum.ops,
                               sum.emulated_write_waits, sum.emulated_read_waits,
                               sum.emulated_reads_hidden};
  for (uint64_t i = 0; i < std::size(expected); ++i) EXPECT_EQ(expected[i], i + 1) << i;
}

}  // namespace pmhash::pm
