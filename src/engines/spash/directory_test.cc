#include "engines/spash/directory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace pmhash::engines::spash {
namespace {

// A directory of 2^3 entries naming segments 1..8 at depth 3 (segment s + 1 for prefix s).
void Fill(Directory* dir) {
  EXPECT_TRUE(dir->Reset(3, [](uint64_t i) { return DirEntry::Make(i + 1, 3, 0, 0); }).ok());
}

uint64_t SegmentFor(uint64_t hash) { return (hash >> 61) + 1; }

TEST(SpashDirectoryTest, EntryFields) {
  const uint64_t e = DirEntry::Make(0xfedcba98, 17, 16, 0xabcde);
  EXPECT_FALSE(DirEntry::Busy(e));
  EXPECT_EQ(DirEntry::Segment(e), 0xfedcba98u);
  EXPECT_EQ(DirEntry::Depth(e), 17u);
  EXPECT_EQ(DirEntry::Count(e), 16u);
  EXPECT_EQ(DirEntry::Version(e), 0xabcdeu);
  EXPECT_EQ(DirEntry::Count(DirEntry::WithCount(e, 3)), 3u);
  EXPECT_TRUE(DirEntry::Busy(e | DirEntry::kBusy));
}

TEST(SpashDirectoryTest, LockHoldsTheWholeRangeAndReleaseBumpsIt) {
  Directory dir;
  Fill(&dir);
  dir.Double(dir.Current());
  dir.Double(dir.Current());  // depth 5: every segment's range is 4 entries
  ASSERT_EQ(dir.Current()->depth, 5u);
  const uint64_t hash = uint64_t{26} << 59;  // prefix 6 at depth 3, entry 26 at depth 5
  const Directory::Place place = dir.Resolve(hash);
  EXPECT_EQ(place.index, 26u);
  Directory::Held held;
  ASSERT_EQ(dir.Lock(place, &held), Directory::LockResult::kLocked);
  EXPECT_EQ(held.first, 24u);
  EXPECT_EQ(held.count, 4u);
  for (uint64_t i = 24; i < 28; ++i) EXPECT_TRUE(DirEntry::Busy(Directory::Load({place.table, i})));
  Directory::Held other;
  EXPECT_EQ(dir.Lock(dir.Resolve(hash ^ (uint64_t{1} << 58)), &other),
            Directory::LockResult::kBusy);  // the same segment through another entry
  EXPECT_FALSE(dir.TryLockRange(place.table, 24, 4, &other));
  dir.ReleaseAs(held, held.first, held.count,
                DirEntry::Make(7, 3, 5, DirEntry::Version(held.word) + 1));
  for (uint64_t i = 24; i < 28; ++i) {
    const uint64_t e = Directory::Load({place.table, i});
    EXPECT_FALSE(DirEntry::Busy(e));
    EXPECT_EQ(DirEntry::Version(e), 1u);
    EXPECT_EQ(DirEntry::Count(e), i == 24 ? 5u : 0u);  // the count lives in the primary
  }
}

TEST(SpashDirectoryTest, FilterBytesFollowTransitions) {
  Directory dir;
  dir.SetFilter(true);
  EXPECT_TRUE(dir.Reset(3, [](uint64_t i) { return DirEntry::Make(i + 1, 3, 0, 0); }, 0).ok());
  Directory::Table* t3 = dir.Current();
  for (uint64_t i = 0; i < 8; ++i) Directory::StoreFilter(t3, i, static_cast<uint8_t>(1u << i));
  EpochReclaimer::Guard keep(dir.epochs());  // the old tables stay readable
  ASSERT_TRUE(dir.Double(t3));
  Directory::Table* t4 = dir.Current();
  ASSERT_EQ(t4->depth, 4u);
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(Directory::FilterAt(t4, i), 1u << (i / 2)) << i;
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(Directory::FilterAt(t3, i), EntryFilter::kUnknown);
  Directory::StoreFilter(t4, 13, 0x80);  // entries 12 and 13 halve into entry 6
  dir.Halve(t4, 3, [](void*) { return true; }, nullptr);
  Directory::Table* back = dir.Current();
  ASSERT_EQ(back->depth, 3u);
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(Directory::FilterAt(back, i), i == 6 ? 0x40u | 0x80u : 1u << i) << i;
  }
  // Prefix 6 at depth 3, probes (hash bits 4..2, 7..5) 6 and 7, then 1 and 2.
  const uint64_t hash = uint64_t{6} << 61;
  EXPECT_TRUE(Directory::MayHold(dir.Resolve(hash | 6 << 2 | 7 << 5), hash | 6 << 2 | 7 << 5));
  EXPECT_FALSE(Directory::MayHold(dir.Resolve(hash | 1 << 2 | 2 << 5), hash | 1 << 2 | 2 << 5));
}

TEST(SpashDirectoryTest, HintsFollowReleasesAndTransitions) {
  Directory dir;
  dir.SetHint(true);
  Fill(&dir);  // depth 3: groups of 4 entries start at segments 1 and 5
  Directory::Table* t3 = dir.Current();
  EXPECT_EQ(Directory::Hint({t3, 0}), 1u);
  EXPECT_EQ(Directory::Hint({t3, 7}), 5u);
  EpochReclaimer::Guard keep(dir.epochs());
  ASSERT_TRUE(dir.Double(t3));
  ASSERT_TRUE(dir.Double(dir.Current()));  // depth 5: one group per segment
  Directory::Table* t5 = dir.Current();
  for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(Directory::Hint({t5, i}), i / 4 + 1) << i;
  // A release that names a new segment for the range's first entry moves its group's hint.
  const Directory::Place place = dir.Resolve(uint64_t{26} << 59);
  Directory::Held held;
  ASSERT_EQ(dir.Lock(place, &held), Directory::LockResult::kLocked);
  dir.ReleaseAs(held, held.first, held.count, DirEntry::Make(42, 3, 0, 1));
  EXPECT_EQ(Directory::Hint(place), 42u);
  dir.Halve(t5, 3, [](void*) { return true; }, nullptr);  // back to depth 4
  Directory::Table* t4 = dir.Current();
  ASSERT_EQ(t4->depth, 4u);
  for (uint64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(Directory::Hint({t4, i}), DirEntry::Segment(Directory::Load({t4, i & ~3ull}))) << i;
  }
  EXPECT_EQ(Directory::Hint({t4, 13}), 42u);
}

TEST(SpashDirectoryTest, HalvingIsWithdrawnWhenNotAllowed) {
  Directory dir;
  Fill(&dir);
  dir.Double(dir.Current());
  Directory::Table* t = dir.Current();
  dir.Halve(t, 3, [](void*) { return false; }, nullptr);
  EXPECT_EQ(dir.Current(), t);
  EXPECT_EQ(t->next.load(), nullptr);
  dir.Halve(t, 3, [](void*) { return true; }, nullptr);
  EXPECT_EQ(dir.Current()->depth, 3u);
  dir.Halve(dir.Current(), 3, [](void*) { return true; }, nullptr);  // not below the floor
  EXPECT_EQ(dir.Current()->depth, 3u);
}

TEST(SpashDirectoryTest, StagedTransitionsRaceLockersAndReaders) {
  // Doublings and halvings run while writers lock and release ranges (bumping versions)
  // and readers resolve hashes: a reader always finds the segment of its hash, a writer
  // always holds exactly the range of its segment, and nothing is left busy.
  Directory dir;
  Fill(&dir);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, locked{0}, read{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {  // writers
      std::mt19937_64 rng(t);
      while (!stop.load()) {
        EpochReclaimer::Guard guard(dir.epochs());
        const uint64_t hash = rng();
        Directory::Held held;
        if (dir.Lock(dir.Resolve(hash), &held) != Directory::LockResult::kLocked) continue;
        const unsigned g = held.table->depth;
        if (DirEntry::Segment(held.word) != SegmentFor(hash) || held.count != (1u << (g - 3)) ||
            held.first != (hash >> 61) << (g - 3)) {
          bad.fetch_add(1);
        }
        dir.ReleaseAs(held, held.first, held.count,
                      DirEntry::Make(DirEntry::Segment(held.word), 3, 0,
                                     DirEntry::Version(held.word) + 1));
        locked.fetch_add(1);
      }
    });
  }
  threads.emplace_back([&] {  // a reader
    std::mt19937_64 rng(9);
    while (!stop.load()) {
      EpochReclaimer::Guard guard(dir.epochs());
      const uint64_t hash = rng();
      const uint64_t e = Directory::Load(dir.Resolve(hash));
      if (DirEntry::Busy(e)) continue;
      if (DirEntry::Segment(e) != SegmentFor(hash) || DirEntry::Depth(e) != 3) bad.fetch_add(1);
      read.fetch_add(1);
    }
  });
  for (int round = 0; round < 200; ++round) {
    // Each cycle of four doublings and four halvings once the lockers' and the reader's
    // counts have moved since the last (or 100 ms passed): on a loaded machine the
    // transitions alone could otherwise finish before the racers were ever scheduled.
    const uint64_t locked_before = locked.load(), read_before = read.load();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (round % 8 == 0 && (locked.load() == locked_before || read.load() == read_before) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    {
      EpochReclaimer::Guard guard(dir.epochs());
      if (round % 8 < 4) {
        dir.Double(dir.Current());
      } else {
        dir.Halve(dir.Current(), 3, [](void*) { return true; }, nullptr);
      }
    }
    dir.epochs().Collect();
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(locked.load(), 0u);
  EXPECT_GT(read.load(), 0u);
  EXPECT_GE(dir.doublings(), 100u);
  const Directory::Table* t = dir.Current();
  for (uint64_t i = 0; i < t->size; ++i) {
    const uint64_t e = t->entries[i].load();
    EXPECT_FALSE(DirEntry::Busy(e)) << i;
    EXPECT_EQ(DirEntry::Segment(e), (i >> (t->depth - 3)) + 1) << i;
  }
}

}  // namespace
}  // namespace pmhash::engines::spash
