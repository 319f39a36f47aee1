#include "pm/media.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pmhash::pm {
namespace {

TEST(MediaConfig, DefaultsAreValidAndBadValuesAreInvalidArgument) {
  EXPECT_TRUE(MediaConfig{}.Validate().ok());
  struct Case {
    const char* field;
    MediaConfig config;
  };
  auto with = [](auto set) {
    MediaConfig c;
    set(c);
    return c;
  };
  const Case bad[] = {
      {"dimms", with([](MediaConfig& c) { c.dimms = 0; })},
      {"dimms", with([](MediaConfig& c) { c.dimms = 65; })},
      {"interleave_bytes", with([](MediaConfig& c) { c.interleave_bytes = 3000; })},
      {"interleave_bytes", with([](MediaConfig& c) { c.interleave_bytes = 128; })},
      {"interleave_bytes", with([](MediaConfig& c) { c.interleave_bytes = 0; })},
      {"interleave_bytes", with([](MediaConfig& c) { c.interleave_bytes = 1u << 31; })},
      {"buffer_bytes", with([](MediaConfig& c) { c.buffer_bytes = 0; })},
      {"buffer_bytes", with([](MediaConfig& c) { c.buffer_bytes = 300; })},
      {"buffer_bytes", with([](MediaConfig& c) { c.buffer_bytes = 2u << 20; })},
      {"cache_bytes", with([](MediaConfig& c) { c.cache_bytes = 1000; })},
      {"cache_bytes", with([](MediaConfig& c) { c.cache_bytes = 512ull << 20; })},
      {"cache_bytes", with([](MediaConfig& c) { c.cache_bytes = ~0ull; })},
  };
  for (const Case& c : bad) {
    Status s = c.config.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.ToString();
  }
  const MediaConfig good[] = {
      with([](MediaConfig& c) { c.dimms = 1; }), with([](MediaConfig& c) { c.dimms = 64; }),
      with([](MediaConfig& c) { c.interleave_bytes = 256; }),
      with([](MediaConfig& c) { c.buffer_bytes = 256; }),
      with([](MediaConfig& c) { c.buffer_bytes = 1u << 20; }),
      with([](MediaConfig& c) { c.cache_bytes = 0; }),
      with([](MediaConfig& c) { c.cache_bytes = 42ull << 20; }),
      with([](MediaConfig& c) { c.cache_bytes = 256ull << 20; })};
  for (const MediaConfig& c : good) EXPECT_TRUE(c.Validate().ok()) << c.Validate().ToString();
}

// DimmBuffer::Write without the mask.
MediaCost Write(DimmBuffer& b, uint64_t tag, unsigned line) {
  unsigned mask;
  return b.Write(tag, line, &mask);
}

TEST(DimmBuffer, SameMediaLineMergesDifferentLinesCost) {
  DimmBuffer b(64);
  unsigned mask = 0;
  EXPECT_EQ(b.Write(0x10, 0, &mask).media_writes, 1u);
  EXPECT_EQ(mask, 0b0001u);
  EXPECT_EQ(b.Write(0x10, 1, &mask).media_writes, 0u);  // same 256-byte media line
  EXPECT_EQ(mask, 0b0011u);
  EXPECT_EQ(Write(b, 0x10, 3).media_writes, 0u);
  EXPECT_EQ(Write(b, 0x11, 0).media_writes, 1u);  // next media line
  EXPECT_EQ(Write(b, 0x10, 0).media_writes, 0u);  // still buffered
  EXPECT_EQ(b.Mask(0x10), 0b1011u);
  EXPECT_EQ(b.Mask(0x11), 0b0001u);
  EXPECT_EQ(b.Mask(0x12), 0u);
}

TEST(DimmBuffer, EvictsLeastRecentlyUsedWhenFull) {
  DimmBuffer b(64);
  auto cost = [&](uint64_t tag) { return Write(b, tag, 0).media_writes; };
  for (uint64_t i = 0; i < 64; ++i) EXPECT_EQ(cost(i), 1u);
  EXPECT_EQ(cost(0), 0u);   // refresh line 0: line 1 is now the oldest
  EXPECT_EQ(cost(64), 1u);  // evicts line 1
  EXPECT_EQ(cost(0), 0u);
  EXPECT_EQ(cost(1), 1u);   // line 1 was evicted; this evicts line 2
  EXPECT_EQ(cost(63), 0u);  // still buffered
  EXPECT_EQ(cost(3), 0u);   // still buffered
  EXPECT_EQ(cost(2), 1u);   // evicted by line 1
}

TEST(DimmBuffer, AnEntryLeavingPartlyWrittenCostsAReadModifyWrite) {
  DimmBuffer b(2);
  for (unsigned line = 0; line < 4; ++line) Write(b, 100, line);  // fully written
  Write(b, 200, 2);                                                // one line of four
  EXPECT_EQ(Write(b, 300, 0).rmw_reads, 0u) << "the full entry 100 left: no read needed";
  EXPECT_EQ(Write(b, 400, 0).rmw_reads, 1u) << "entry 200 left with one line of four";
  // Drain: both buffered entries (300, 400) are partial.
  const MediaCost drained = b.Drain();
  EXPECT_EQ(drained.rmw_reads, 2u);
  EXPECT_EQ(drained.media_writes, 0u);
  EXPECT_EQ(b.Mask(300), 0u);
  EXPECT_EQ(Write(b, 300, 0).media_writes, 1u) << "drained: a new entry";
}

TEST(MediaModel, EachDimmOfTheInterleaveHasItsOwnBuffer) {
  MediaConfig c;
  c.dimms = 2;
  c.interleave_bytes = 4096;
  c.buffer_bytes = 256;  // one entry per DIMM
  MediaModel m(c);
  const uintptr_t a = 0x100000, b = a + 4096;  // consecutive chunks: DIMMs 0 and 1
  ASSERT_NE(m.Dimm(a), m.Dimm(b));
  EXPECT_EQ(m.Dimm(a), m.Dimm(a + 8192));
  EXPECT_EQ(m.WriteLine(a).media_writes, 1u);
  EXPECT_EQ(m.WriteLine(b).media_writes, 1u);
  EXPECT_EQ(m.WriteLine(a + 64).media_writes, 0u) << "a's entry is in DIMM 0's buffer";
  EXPECT_EQ(m.Mask(a), 0b11u);
  EXPECT_EQ(m.WriteLine(a + 8192).media_writes, 1u) << "DIMM 0 again: evicts a";
  EXPECT_EQ(m.WriteLine(a).media_writes, 1u);

  c.dimms = 1;
  MediaModel one(c);
  EXPECT_EQ(one.WriteLine(a).media_writes, 1u);
  EXPECT_EQ(one.WriteLine(b).media_writes, 1u);
  EXPECT_EQ(one.WriteLine(a).media_writes, 1u) << "one DIMM, one entry: b evicted a";
}

TEST(MediaModel, InterleaveIsRoundRobinOverTheDimms) {
  for (uint32_t dimms : {1u, 2u, 3u, 6u, 7u, 8u, 64u}) {
    for (uint32_t interleave : {256u, 4096u, 1u << 20}) {
      MediaConfig c;
      c.dimms = dimms;
      c.interleave_bytes = interleave;
      MediaModel m(c);
      for (uint64_t chunk : {uint64_t{0}, uint64_t{1}, uint64_t{5}, uint64_t{12345},
                             uint64_t{0xfffffffe}, uint64_t{0xffffffff}}) {
        for (uint64_t step = 0; step < 3 * dimms; ++step) {
          const uint64_t k = (chunk + step) & 0xffffffff;
          EXPECT_EQ(m.Dimm(k * interleave + interleave / 2), k % dimms)
              << dimms << " DIMMs, chunk " << k;
        }
      }
    }
  }
}

TEST(MediaModel, ARepeatedLineIsFreeAndDrainCountsPartialEntries) {
  MediaConfig c;
  MediaModel m(c);
  const uintptr_t a = 0x200000;
  EXPECT_EQ(m.WriteLine(a).media_writes, 1u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(m.WriteLine(a).media_writes, 0u);  // lock-free check
  EXPECT_EQ(m.WriteLine(a + 256).media_writes, 1u);
  for (uintptr_t l = a + 256; l < a + 512; l += 64) m.WriteLine(l);
  EXPECT_EQ(m.Drain().rmw_reads, 1u) << "a partial, a + 256 fully written";
  EXPECT_EQ(m.WriteLine(a).media_writes, 1u) << "the lock-free check forgot the drained line";
}

// Threads writing disjoint media lines into a buffer that holds them all: exactly one
// media write per media line, whatever the interleaving (and clean under TSan).
TEST(MediaModel, ConcurrentWritersAreCountedExactly) {
  MediaConfig c;
  c.dimms = 4;
  c.buffer_bytes = 1 << 20;
  MediaModel m(c);
  constexpr int kThreads = 4;
  constexpr uintptr_t kMediaLines = 512;
  std::vector<uint64_t> writes(kThreads), rmw(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uintptr_t base = 0x10000000 + t * kMediaLines * kMediaLine;
      for (int pass = 0; pass < 2; ++pass) {
        for (uintptr_t l = base; l < base + kMediaLines * kMediaLine; l += 64) {
          const MediaCost cost = m.WriteLine(l);
          writes[t] += cost.media_writes;
          rmw[t] += cost.rmw_reads;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    total += writes[t];
    EXPECT_EQ(rmw[t], 0u);
  }
  EXPECT_EQ(total, kThreads * kMediaLines);
  EXPECT_EQ(m.Drain().rmw_reads, 0u);
}

// One set of 16 ways: every line lands in it, so the LRU order is visible.
TEST(CacheModel, EvictsTheLeastRecentlyStoredDirtyLine) {
  CacheModel cache(CacheModel::kSetBytes);
  const uintptr_t base = 0x400000;
  auto line = [&](uintptr_t i) { return base + i * 64; };
  for (uintptr_t i = 0; i < CacheModel::kWays; ++i) EXPECT_EQ(cache.Store(line(i)), 0u);
  EXPECT_EQ(cache.DirtyLines(), CacheModel::kWays);
  EXPECT_EQ(cache.Store(line(0)), 0u);      // a hit refreshes line 0
  EXPECT_EQ(cache.Store(line(16)), line(1)) << "line 1 is now the oldest";
  EXPECT_EQ(cache.Store(line(17)), line(2));
  EXPECT_EQ(cache.Store(line(0)), 0u);
  EXPECT_EQ(cache.Store(line(1)), line(3));
  // Drain: oldest first.
  std::vector<uintptr_t> drained;
  cache.Drain([&](uintptr_t l) { drained.push_back(l); });
  std::vector<uintptr_t> expected;
  for (uintptr_t i = 4; i < 16; ++i) expected.push_back(line(i));
  for (uintptr_t i : {16, 17, 0, 1}) expected.push_back(line(i));
  EXPECT_EQ(drained, expected);
  EXPECT_EQ(cache.DirtyLines(), 0u);
}

TEST(CacheModel, AHotLineCostsNothingUntilEvicted) {
  CacheModel cache(CacheModel::kSetBytes);
  const uintptr_t hot = 0x800000;
  for (int i = 0; i < 100000; ++i) EXPECT_EQ(cache.Store(hot), 0u);
  EXPECT_EQ(cache.DirtyLines(), 1u);
  uintptr_t evicted = 0;
  for (uintptr_t i = 1; i <= CacheModel::kWays && evicted == 0; ++i) {
    evicted = cache.Store(hot + i * 64);
  }
  EXPECT_EQ(evicted, hot) << "evicted once, when 16 newer lines displaced it";
}

TEST(CacheModel, WriteBackRemovesADirtyLineOnce) {
  CacheModel cache(CacheModel::kSetBytes);
  const uintptr_t base = 0xc00000;
  for (uintptr_t i = 0; i < 5; ++i) cache.Store(base + i * 64);
  EXPECT_TRUE(cache.WriteBack(base + 2 * 64));
  EXPECT_FALSE(cache.WriteBack(base + 2 * 64)) << "clean now";
  EXPECT_FALSE(cache.WriteBack(base + 99 * 64)) << "never stored";
  EXPECT_TRUE(cache.WriteBack(base + 4 * 64)) << "the most recent one";
  EXPECT_TRUE(cache.WriteBack(base)) << "the oldest one";
  EXPECT_EQ(cache.DirtyLines(), 2u);
  std::vector<uintptr_t> drained;
  cache.Drain([&](uintptr_t l) { drained.push_back(l); });
  EXPECT_EQ(drained, (std::vector<uintptr_t>{base + 64, base + 3 * 64}));
  // A full set after write-backs still evicts in order.
  for (uintptr_t i = 0; i < CacheModel::kWays; ++i) cache.Store(base + i * 64);
  EXPECT_TRUE(cache.WriteBack(base + 5 * 64));
  EXPECT_EQ(cache.Store(base + 100 * 64), 0u) << "the written-back way is free";
  EXPECT_EQ(cache.Store(base + 101 * 64), base) << "then the oldest leaves";
}

TEST(CacheModel, ConcurrentStoresKeepEveryLineOnce) {
  CacheModel cache(64 * CacheModel::kSetBytes);  // 1024 lines
  constexpr int kThreads = 4;
  constexpr uintptr_t kLines = 4096;
  std::vector<uint64_t> evictions(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uintptr_t base = 0x20000000 + t * kLines * 64;
      for (uintptr_t i = 0; i < kLines; ++i) evictions[t] += cache.Store(base + i * 64) != 0;
    });
  }
  for (auto& th : threads) th.join();
  uint64_t evicted = 0;
  for (uint64_t e : evictions) evicted += e;
  // Every line stored is either still dirty or was evicted exactly once.
  EXPECT_EQ(evicted + cache.DirtyLines(), kThreads * kLines);
}

TEST(OpReads, CountsEachMediaLineAndEachOfItsLinesOncePerOperation) {
  OpReads r;
  bool fresh = false;
  EXPECT_EQ(r.Add(7, 0b0001, &fresh), 1u);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(r.Add(7, 0b0011, &fresh), 1u) << "line 0 was read already, line 1 is new";
  EXPECT_FALSE(fresh);
  EXPECT_EQ(r.Add(7, 0b0011, &fresh), 0u);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(r.Add(8, 0b1111, &fresh), 4u);
  EXPECT_TRUE(fresh);
  r.Reset();
  EXPECT_EQ(r.Add(7, 0b0001, &fresh), 1u);
  EXPECT_TRUE(fresh);
  // Past the capacity the oldest is forgotten.
  for (uint64_t t = 100; t < 100 + OpReads::kCapacity; ++t) {
    r.Add(t, 1, &fresh);
    EXPECT_TRUE(fresh);
  }
  r.Add(7, 1, &fresh);
  EXPECT_TRUE(fresh) << "forgotten after kCapacity newer lines";
  r.Add(100 + OpReads::kCapacity - 1, 1, &fresh);
  EXPECT_FALSE(fresh);
}

TEST(OpReads, AddRangeCountsWhatIsNewAcrossMediaLines) {
  OpReads r;
  bool fresh = false;
  uint32_t media = 0;
  r.Add(10, 0b0010, &fresh);  // line 41: media line 10, its line 1
  EXPECT_EQ(r.AddRange(40, 47, &media), 7u) << "media lines 10 and 11, line 41 known";
  EXPECT_EQ(media, 1u);
  EXPECT_EQ(r.AddRange(44, 48, &media), 1u) << "only line 48 (media line 12) is new";
  EXPECT_EQ(media, 1u);
  EXPECT_EQ(r.Add(11, 0b1111, &fresh), 0u);
  EXPECT_FALSE(fresh);
  // A range longer than the capacity: its last kCapacity media lines are remembered.
  r.Reset();
  EXPECT_EQ(r.AddRange(0, 4 * 40 - 1, &media), 160u);
  EXPECT_EQ(media, 40u);
  EXPECT_EQ(r.Add(39, 1, &fresh), 0u);
  EXPECT_FALSE(fresh);
  r.Add(0, 1, &fresh);
  EXPECT_TRUE(fresh) << "the range's first media lines were not kept";
}

}  // namespace
}  // namespace pmhash::pm
