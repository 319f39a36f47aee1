#include "pm/crashsim.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

namespace pmhash::pm {
namespace {

using Kind = CrashSim::ImageKind;

// A 64 KiB 64-byte-aligned "pool" observed by a simulator, stored through a Persister.
class CrashSimTest : public ::testing::Test {
 public:
  void Start(PersistMode mode) {
    mem_.assign(kSize + kCacheLine, 0);
    base_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mem_.data()) + kCacheLine - 1) &
                                    ~(kCacheLine - 1));
    sim_ = std::make_unique<CrashSim>(base_, kSize, mode);
    PersistConfig config;
    config.mode = mode;
    config.observer = sim_.get();
    ASSERT_TRUE(Persister::Make(config, &persister_).ok());
  }
  uint64_t* Word(size_t offset) { return reinterpret_cast<uint64_t*>(base_ + offset); }
  static uint64_t At(const std::vector<char>& image, size_t offset) {
    uint64_t v;
    std::memcpy(&v, image.data() + offset, 8);
    return v;
  }
  std::vector<char> Image(Kind kind, uint64_t seed = 1) {
    std::mt19937_64 rng(seed);
    std::vector<char> out;
    sim_->MakeImage(kind, rng, &out);
    return out;
  }

  static constexpr size_t kSize = 64 << 10;
  std::vector<char> mem_;
  char* base_ = nullptr;
  std::unique_ptr<CrashSim> sim_;
  std::unique_ptr<Persister> persister_;
};

TEST_F(CrashSimTest, StoreIsDurableOnlyAfterFlushAndFence) {
  Start(PersistMode::kAdr);
  persister_->Store(Word(128), uint64_t{7});
  EXPECT_EQ(At(Image(Kind::kNone), 128), 0u);
  EXPECT_EQ(At(Image(Kind::kAll), 128), 7u);
  persister_->Flush(Word(128), 8);
  EXPECT_EQ(At(Image(Kind::kNone), 128), 0u) << "flushed but not fenced is not durable";
  persister_->Fence();
  EXPECT_EQ(At(Image(Kind::kNone), 128), 7u);
  EXPECT_EQ(sim_->PendingUnits(), 0u);
}

TEST_F(CrashSimTest, FenceWithoutFlushMakesNothingDurable) {
  Start(PersistMode::kAdr);
  persister_->Store(Word(0), uint64_t{1});
  persister_->Fence();
  EXPECT_EQ(At(Image(Kind::kNone), 0), 0u);
  EXPECT_EQ(sim_->PendingUnits(), 1u);
}

TEST_F(CrashSimTest, StoresAfterFlushStayPending) {
  Start(PersistMode::kAdr);
  persister_->Store(Word(64), uint64_t{1});
  persister_->Flush(Word(64), 8);
  persister_->Store(Word(72), uint64_t{2});  // same line, after the flush
  persister_->Fence();
  auto none = Image(Kind::kNone);
  EXPECT_EQ(At(none, 64), 1u);
  EXPECT_EQ(At(none, 72), 0u);
  EXPECT_EQ(sim_->PendingUnits(), 1u);
}

TEST_F(CrashSimTest, WideCopyTearsOnlyAtEightByteBoundariesInOrder) {
  Start(PersistMode::kAdr);
  uint64_t src[4] = {11, 22, 33, 44};
  persister_->Copy(Word(0), src, sizeof(src));
  EXPECT_EQ(sim_->PendingUnits(), 4u);
  std::set<int> prefixes;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto img = Image(Kind::kRandom, seed);
    int n = 0;
    while (n < 4 && At(img, 8 * n) == src[n]) ++n;
    for (int i = n; i < 4; ++i) EXPECT_EQ(At(img, 8 * i), 0u) << "not a prefix, seed " << seed;
    prefixes.insert(n);
  }
  EXPECT_EQ(prefixes.size(), 5u) << "every prefix 0..4 should occur";
}

TEST_F(CrashSimTest, UnalignedStoreSplitsAtWordBoundaries) {
  Start(PersistMode::kAdr);
  char src[12];
  std::memset(src, 0x5a, sizeof(src));
  persister_->Copy(base_ + 4, src, sizeof(src));  // bytes 4..15: units [4,8) and [8,16)
  EXPECT_EQ(sim_->PendingUnits(), 2u);
}

TEST_F(CrashSimTest, LinesPersistIndependently) {
  Start(PersistMode::kAdr);
  persister_->Store(Word(0), uint64_t{1});
  persister_->Store(Word(4096), uint64_t{2});
  bool only_first = false, only_second = false;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    auto img = Image(Kind::kRandom, seed);
    only_first |= At(img, 0) == 1 && At(img, 4096) == 0;
    only_second |= At(img, 0) == 0 && At(img, 4096) == 2;
  }
  EXPECT_TRUE(only_first);
  EXPECT_TRUE(only_second);
}

TEST_F(CrashSimTest, EadrImagesArePrefixesOfTheStoreSequence) {
  Start(PersistMode::kEadr);
  persister_->Store(Word(0), uint64_t{1});
  persister_->Store(Word(4096), uint64_t{2});
  persister_->Store(Word(8192), uint64_t{3});
  std::set<int> seen;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    auto img = Image(Kind::kRandom, seed);
    int n = (At(img, 0) == 1) + (At(img, 4096) == 2) + (At(img, 8192) == 3);
    // A prefix: the first n stores and none after.
    EXPECT_EQ(At(img, 0) == 1, n >= 1);
    EXPECT_EQ(At(img, 4096) == 2, n >= 2);
    EXPECT_EQ(At(img, 8192) == 3, n >= 3);
    seen.insert(n);
  }
  EXPECT_EQ(seen.size(), 4u);
  persister_->Fence();  // eadr: everything stored before a fence is durable
  EXPECT_EQ(At(Image(Kind::kNone), 8192), 3u);
}

TEST_F(CrashSimTest, DetectsAStoreThatBypassedThePersister) {
  Start(PersistMode::kAdr);
  persister_->Store(Word(64), uint64_t{1});
  EXPECT_TRUE(sim_->FindBypass().ok());
  base_[1000] = 42;  // a plain store
  Status s = sim_->FindBypass();
  ASSERT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("offset 1000"), std::string::npos) << s.ToString();
}

TEST_F(CrashSimTest, CountsRedundantFlushesAndFences) {
  Start(PersistMode::kAdr);
  persister_->Flush(Word(0), 8);  // nothing stored: redundant
  persister_->Fence();            // nothing flushed: redundant
  persister_->Store(Word(0), uint64_t{1});
  persister_->Flush(Word(0), 8);
  persister_->Flush(Word(0), 8);  // same line again, no new store: redundant
  persister_->Fence();
  auto c = sim_->counters();
  EXPECT_EQ(c.flushes, 3u);
  EXPECT_EQ(c.redundant_flushes, 2u);
  EXPECT_EQ(c.fences, 2u);
  EXPECT_EQ(c.redundant_fences, 1u);
}

TEST_F(CrashSimTest, ReportsRedundancyToAPersister) {
  Start(PersistMode::kAdr);
  sim_->ReportTo(persister_.get());
  persister_->Flush(Word(0), 64);
  persister_->Fence();
  auto totals = persister_->Totals();
  EXPECT_EQ(totals.redundant_flushes, 1u);
  EXPECT_EQ(totals.redundant_fences, 1u);
}

TEST_F(CrashSimTest, HookRunsAtFencesBeforeTheyTakeEffectAndAtSampledStores) {
  Start(PersistMode::kAdr);
  std::vector<uint64_t> seen_none;
  int store_events = 0;
  sim_->SetHook(
      [&](CrashSim& sim, CrashSim::Event e) {
        if (e == CrashSim::Event::kStore) ++store_events;
        std::mt19937_64 rng(0);
        std::vector<char> img;
        sim.MakeImage(Kind::kNone, rng, &img);
        if (e == CrashSim::Event::kFence) seen_none.push_back(At(img, 0));
      },
      1.0, 7);
  persister_->Store(Word(0), uint64_t{5});
  persister_->Persist(Word(0), 8);
  persister_->Fence();
  EXPECT_EQ(store_events, 1);
  ASSERT_EQ(seen_none.size(), 2u);
  EXPECT_EQ(seen_none[0], 0u) << "the first fence had not taken effect yet";
  EXPECT_EQ(seen_none[1], 5u);
}

TEST_F(CrashSimTest, MakePoolBuildsARecoverablePool) {
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::CreateDram("simtest", 4 << 20, &pool).ok());
  CrashSim sim(pool->base(), pool->size(), PersistMode::kAdr);
  PersistConfig config;
  config.observer = &sim;
  std::unique_ptr<Persister> p;
  ASSERT_TRUE(Persister::Make(config, &p).ok());
  auto* w = pool->At<uint64_t>(pool->heap_offset());
  p->Store(w, uint64_t{99});
  p->Persist(w, 8);
  std::mt19937_64 rng(1);
  std::unique_ptr<Pool> image;
  ASSERT_TRUE(sim.MakePool(Kind::kNone, rng, "simtest", &image).ok());
  EXPECT_EQ(*image->At<uint64_t>(image->heap_offset()), 99u);
}

// MakePool with a tracker restores only the pages written through it (and those the
// persisted image changed in); a plain store into the image is found by the periodic
// check of the other pages.
TEST_F(CrashSimTest, MakePoolRestoresTrackedPagesAndFindsBypasses) {
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::CreateDram("simtest", 4 << 20, &pool).ok());
  CrashSim sim(pool->base(), pool->size(), PersistMode::kAdr);
  PersistConfig config;
  config.observer = &sim;
  std::unique_ptr<Persister> p;
  ASSERT_TRUE(Persister::Make(config, &p).ok());
  const uint64_t heap = pool->heap_offset();
  p->Store(pool->At<uint64_t>(heap), uint64_t{99});
  p->Persist(pool->At<uint64_t>(heap), 8);
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i < 40; ++i) {
    if (i == 20) {  // the persisted image changes between images
      p->Store(pool->At<uint64_t>(heap + 8192), uint64_t{5});
      p->Persist(pool->At<uint64_t>(heap + 8192), 8);
    }
    std::unique_ptr<Pool> image;
    PersistObserver* tracker = nullptr;
    ASSERT_TRUE(sim.MakePool(Kind::kAll, rng, "simtest", &image, &tracker).ok()) << i;
    ASSERT_NE(tracker, nullptr);
    EXPECT_EQ(*image->At<uint64_t>(heap), 99u) << "image " << i;
    EXPECT_EQ(*image->At<uint64_t>(heap + 8192), i < 20 ? 0u : 5u) << "image " << i;
    PersistConfig ic;
    ic.observer = tracker;
    std::unique_ptr<Persister> ip;
    ASSERT_TRUE(Persister::Make(ic, &ip).ok());
    ip->Store(image->At<uint64_t>(heap), 1000 + i);  // tracked: restored next time
    ip->Zero(image->At<char>(heap + 4096 * (1 + i % 8)), 100);
  }
  std::unique_ptr<Pool> image;
  PersistObserver* tracker = nullptr;
  ASSERT_TRUE(sim.MakePool(Kind::kNone, rng, "simtest", &image, &tracker).ok());
  image->At<char>(heap + 300000)[0] = 42;  // a plain store: not tracked
  Status s;
  for (int i = 0; i < 16 && s.ok(); ++i) s = sim.MakePool(Kind::kNone, rng, "simtest", &image, &tracker);
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("offset " + std::to_string(heap + 300000)), std::string::npos)
      << s.ToString();
  ASSERT_TRUE(sim.MakePool(Kind::kNone, rng, "simtest", &image).ok());
  EXPECT_EQ(image->At<char>(heap + 300000)[0], 0);
}

TEST_F(CrashSimTest, ThreadsInterleaveAndEachFenceCoversItsOwnFlushes) {
  Start(PersistMode::kAdr);
  auto work = [&](size_t first_line) {
    for (size_t i = 0; i < 50; ++i) {
      uint64_t* w = Word((first_line + i) * kCacheLine);
      persister_->Store(w, uint64_t{i + 1});
      persister_->Persist(w, 8);
    }
  };
  std::thread a(work, 0), b(work, 100);
  a.join();
  b.join();
  auto none = Image(Kind::kNone);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(At(none, i * kCacheLine), i + 1);
    EXPECT_EQ(At(none, (100 + i) * kCacheLine), i + 1);
  }
  EXPECT_TRUE(sim_->FindBypass().ok());
  EXPECT_EQ(sim_->PendingUnits(), 0u);
}

// Two threads store to one line: A counts word X up, B copies what it reads in X to Y.
// Every state the log describes must have Y <= X. With the store and its log entry as
// separate steps (the log reading the bytes back after the store, outside the lock), B's
// store could be logged before A's earlier one: a state (Y ahead of X) that never was.
// The hook runs after every logged store and checks the state after the whole log.
TEST(CrashSimThreads, StoresToOneLineAreLoggedInTheOrderTheyTookEffect) {
  alignas(64) static char mem[4096];
  std::memset(mem, 0, sizeof(mem));
  auto* x = reinterpret_cast<uint64_t*>(mem);
  auto* y = reinterpret_cast<uint64_t*>(mem + 8);
  CrashSim sim(mem, sizeof(mem), PersistMode::kAdr);
  PersistConfig config;
  config.observer = &sim;
  std::unique_ptr<Persister> p;
  ASSERT_TRUE(Persister::Make(config, &p).ok());
  uint64_t checks = 0, violations = 0, first_x = 0, first_y = 0;
  std::vector<char> img;
  sim.SetHook(
      [&](CrashSim& s, CrashSim::Event e) {
        if (e != CrashSim::Event::kStore) return;
        std::mt19937_64 rng(0);
        s.MakeImage(Kind::kAll, rng, &img);
        uint64_t ix, iy;
        std::memcpy(&ix, img.data(), 8);
        std::memcpy(&iy, img.data() + 8, 8);
        ++checks;
        if (iy > ix && violations++ == 0) first_x = ix, first_y = iy;
      },
      1.0, 3);
  // Each thread stores until both have done kStores (so they overlap as long as they
  // can on a busy machine), at most 4 x kStores.
  constexpr uint64_t kStores = 5000;
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  uint64_t stores_a = 0, stores_b = 0;
  auto more = [&](uint64_t i) { return i < kStores || (done.load() < 2 && i < 4 * kStores); };
  std::thread a([&] {
    while (!go.load()) {
    }
    uint64_t i = 0;
    for (; more(i); ++i) {
      p->Store(x, i + 1);
      if (i % 16 == 15) p->Persist(x, 8);  // keeps the line's log (and each check) short
      if (i + 1 == kStores) ++done;
    }
    stores_a = i;
  });
  std::thread b([&] {
    while (!go.load()) {
    }
    uint64_t i = 0;
    for (; more(i); ++i) {
      p->Store(y, Persister::Load(x));
      if (i + 1 == kStores) ++done;
    }
    stores_b = i;
  });
  go = true;
  a.join();
  b.join();
  sim.SetHook({}, 0, 0);
  EXPECT_EQ(checks, stores_a + stores_b);
  EXPECT_EQ(violations, 0u) << "the log held Y=" << first_y << " while X=" << first_x;
  EXPECT_TRUE(sim.FindBypass().ok());
}

TEST_F(CrashSimTest, DetectsABypassInALineWithPendingStores) {
  for (PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    Start(mode);
    persister_->Store(Word(128), uint64_t{1});
    persister_->Store(Word(4096), uint64_t{2});
    persister_->Persist(Word(4096), 8);
    persister_->Store(Word(4096), uint64_t{3});  // pending again, over a durable unit
    EXPECT_TRUE(sim_->FindBypass().ok()) << PersistModeName(mode);
    base_[140] = 9;  // a plain store beside a pending one, same line
    Status s = sim_->FindBypass();
    ASSERT_TRUE(s.IsCorruption()) << PersistModeName(mode);
    EXPECT_NE(s.message().find("offset 140"), std::string::npos) << s.ToString();
  }
}

TEST_F(CrashSimTest, StoresOutsideThePoolArePerformedAndCounted) {
  Start(PersistMode::kAdr);
  uint64_t dram = 0;
  persister_->Store(&dram, uint64_t{5});
  EXPECT_EQ(dram, 5u);
  persister_->Zero(Word(0), 16);
  EXPECT_EQ(sim_->counters().outside_stores, 1u);
  EXPECT_EQ(sim_->first_outside_store(), &dram);
  EXPECT_EQ(sim_->counters().stores, 1u);
  EXPECT_TRUE(sim_->FindBypass().ok());
}

// ---- Atomic regions and operation boundaries ---------------------------------------------

// Four words on four lines, stored inside an atomic region (or not), then two more stores
// outside. Returns how many of the four each of many random eadr images holds.
std::set<int> RegionWordsSeen(CrashSimTest& t, Persister& p, bool region) {
  if (region) {
    EXPECT_EQ(p.BeginAtomic(), AtomicOutcome::kStarted);
  }
  for (int i = 0; i < 4; ++i) p.Store(t.Word(i * 64), uint64_t(10 + i));
  if (region) {
    EXPECT_EQ(p.EndAtomic(), AtomicOutcome::kCommitted);
  }
  p.Store(t.Word(1024), uint64_t{1});
  p.Store(t.Word(2048), uint64_t{2});
  std::set<int> seen;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    auto img = t.Image(Kind::kRandom, seed);
    int n = 0;
    for (int i = 0; i < 4; ++i) n += CrashSimTest::At(img, i * 64) == uint64_t(10 + i);
    seen.insert(n);
  }
  return seen;
}

TEST_F(CrashSimTest, EadrAtomicRegionIsNeverHalfInAnImage) {
  Start(PersistMode::kEadr);
  const std::set<int> seen = RegionWordsSeen(*this, *persister_, /*region=*/true);
  EXPECT_EQ(seen, (std::set<int>{0, 4})) << "a region's stores are all or nothing";
  EXPECT_EQ(sim_->counters().atomic_commits, 1u);
  EXPECT_TRUE(sim_->FindBypass().ok());
}

TEST_F(CrashSimTest, EadrSameStoresOutsideARegionAppearHalf) {
  Start(PersistMode::kEadr);
  const std::set<int> seen = RegionWordsSeen(*this, *persister_, /*region=*/false);
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3, 4}));
}

// adr: a region's stores reach no image before the commit; after it they are ordinary
// pending stores (HTM does not make write-backs atomic): any line may persist alone.
TEST_F(CrashSimTest, AdrAtomicRegionIsInvisibleUntilCommitThenPlainStores) {
  Start(PersistMode::kAdr);
  ASSERT_EQ(persister_->BeginAtomic(), AtomicOutcome::kStarted);
  for (int i = 0; i < 4; ++i) persister_->Store(Word(i * 64), uint64_t(10 + i));
  EXPECT_EQ(At(Image(Kind::kAll), 0), 0u) << "not committed: not in any image";
  EXPECT_EQ(sim_->PendingUnits(), 0u);
  EXPECT_TRUE(sim_->FindBypass().ok()) << "the held-aside stores explain the pool";
  ASSERT_EQ(persister_->EndAtomic(), AtomicOutcome::kCommitted);
  EXPECT_EQ(sim_->PendingUnits(), 4u);
  std::set<int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto img = Image(Kind::kRandom, seed);
    int n = 0;
    for (int i = 0; i < 4; ++i) n += At(img, i * 64) == uint64_t(10 + i);
    seen.insert(n);
  }
  EXPECT_GT(seen.size(), 2u) << "lines persist independently after the commit";
  persister_->Persist(Word(0), 256);
  EXPECT_EQ(At(Image(Kind::kNone), 192), 13u);
}

TEST_F(CrashSimTest, AbortedRegionLeavesNoStoreInThePoolOrAnyImage) {
  for (PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    SCOPED_TRACE(PersistModeName(mode));
    Start(mode);
    persister_->Store(Word(0), uint64_t{1});
    ASSERT_EQ(persister_->BeginAtomic(), AtomicOutcome::kStarted);
    persister_->Store(Word(0), uint64_t{2});
    persister_->Copy(Word(512), "abcdefghijklmnop", 16);
    persister_->AbortAtomic();
    EXPECT_EQ(*Word(0), 1u);
    EXPECT_EQ(*Word(512), 0u);
    EXPECT_TRUE(sim_->FindBypass().ok());
    EXPECT_EQ(sim_->counters().atomic_aborts, 1u);
    for (uint64_t seed = 0; seed < 50; ++seed) {
      auto img = Image(Kind::kRandom, seed);
      EXPECT_NE(At(img, 0), 2u);
      EXPECT_EQ(At(img, 512), 0u);
    }
    EXPECT_EQ(At(Image(Kind::kAll), 0), 1u);
  }
}

// A crash point inside a region (a sampled store) sees none of the region's stores.
TEST_F(CrashSimTest, CrashInsideARegionSeesNoneOfIt) {
  Start(PersistMode::kEadr);
  int hooks = 0;
  sim_->SetHook(
      [&](CrashSim& sim, CrashSim::Event e) {
        if (e != CrashSim::Event::kStore) return;
        ++hooks;
        std::mt19937_64 rng(0);
        std::vector<char> img;
        sim.MakeImage(Kind::kAll, rng, &img);
        EXPECT_EQ(At(img, 64), 0u);
        EXPECT_EQ(At(img, 128), 0u);
      },
      1.0, 1);
  ASSERT_EQ(persister_->BeginAtomic(), AtomicOutcome::kStarted);
  persister_->Store(Word(64), uint64_t{1});
  persister_->Store(Word(128), uint64_t{2});
  ASSERT_EQ(persister_->EndAtomic(), AtomicOutcome::kCommitted);
  sim_->SetHook({}, 0, 0);
  EXPECT_EQ(hooks, 2);
  EXPECT_EQ(At(Image(Kind::kAll), 128), 2u);
}

TEST_F(CrashSimTest, FlushesInsideARegionAreCounted) {
  Start(PersistMode::kAdr);
  ASSERT_EQ(persister_->BeginAtomic(), AtomicOutcome::kStarted);
  persister_->Store(Word(0), uint64_t{1});
  persister_->Flush(Word(0), 128);
  ASSERT_EQ(persister_->EndAtomic(), AtomicOutcome::kCommitted);
  persister_->Flush(Word(0), 8);
  EXPECT_EQ(sim_->counters().flushes_in_atomic, 2u);
}

// Engines that never fence (eadr): crash points at operation ends, and the log folded
// where no operation is in flight.
TEST_F(CrashSimTest, EadrOperationEndsAreCrashPointsAndFoldWhenQuiescent) {
  Start(PersistMode::kEadr);
  sim_->CrashAtOpEnds(true);
  std::vector<size_t> pending_at_hook;
  sim_->SetHook(
      [&](CrashSim& sim, CrashSim::Event e) {
        EXPECT_EQ(e, CrashSim::Event::kOpEnd);
        pending_at_hook.push_back(sim.PendingUnits());
      },
      0, 1);
  persister_->BeginOp();
  persister_->Store(Word(0), uint64_t{1});
  persister_->BeginOp();  // a second operation in flight (a pipelined batch)
  persister_->Store(Word(64), uint64_t{2});
  persister_->EndOp(16);
  EXPECT_EQ(sim_->PendingUnits(), 2u) << "one operation still in flight: no fold";
  persister_->EndOp(16);
  EXPECT_EQ(sim_->PendingUnits(), 0u) << "quiescent: folded";
  EXPECT_EQ(At(Image(Kind::kNone), 64), 2u);
  EXPECT_EQ(pending_at_hook, (std::vector<size_t>{2, 2}));
  EXPECT_EQ(sim_->counters().op_folds, 1u);
  EXPECT_EQ(sim_->counters().fences, 0u);
  sim_->SetHook({}, 0, 0);
}

// With crash points elsewhere only (fences, sampled stores), an operation end folds
// nothing: the stores after its last fence are offered at the next crash point.
TEST_F(CrashSimTest, EadrOperationEndsFoldOnlyWhenOfferedAsCrashPoints) {
  Start(PersistMode::kEadr);
  std::vector<size_t> pending_at_hook;
  sim_->SetHook([&](CrashSim& sim, CrashSim::Event) { pending_at_hook.push_back(sim.PendingUnits()); },
                0, 1);
  persister_->BeginOp();
  persister_->Store(Word(0), uint64_t{1});
  persister_->EndOp(8);
  EXPECT_EQ(sim_->PendingUnits(), 1u) << "not offered at any crash point yet: kept";
  persister_->Fence();
  EXPECT_EQ(pending_at_hook, (std::vector<size_t>{1}));
  EXPECT_EQ(sim_->counters().op_folds, 0u);
  sim_->SetHook({}, 0, 0);
  persister_->BeginOp();
  persister_->Store(Word(0), uint64_t{2});
  persister_->EndOp(8);
  EXPECT_EQ(sim_->PendingUnits(), 0u) << "no crash points at all: folded";
}

TEST_F(CrashSimTest, AdrOperationEndsDoNotMakeAnythingDurable) {
  Start(PersistMode::kAdr);
  persister_->BeginOp();
  persister_->Store(Word(0), uint64_t{1});
  persister_->EndOp(8);
  EXPECT_EQ(sim_->PendingUnits(), 1u);
  EXPECT_EQ(At(Image(Kind::kNone), 0), 0u);
  EXPECT_EQ(sim_->counters().op_folds, 0u);
}

}  // namespace
}  // namespace pmhash::pm
