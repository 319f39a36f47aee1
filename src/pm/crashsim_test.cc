#include "pm/crashsim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

namespace pmhash::pm {
namespace {

using Kind = CrashSim::ImageKind;

// A 64 KiB 64-byte-aligned "pool" observed by a simulator, stored through a Persister.
class CrashSimTest : public ::testing::Test {
 protected:
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

}  // namespace
}  // namespace pmhash::pm
