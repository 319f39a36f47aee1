#include "pm/alloc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "pm/crashsim.h"

namespace pmhash::pm {
namespace {

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(64 << 20); }

  void Make(uint64_t pool_size) {
    allocator_.reset();
    ASSERT_TRUE(Pool::CreateDram("test", pool_size, &pool_).ok());
    ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister_).ok());
    ASSERT_TRUE(Allocator::Format(*pool_, *persister_, &allocator_).ok());
  }

  uint64_t MustAllocate(size_t size) {
    Result<uint64_t> r = allocator_->Allocate(size);
    EXPECT_TRUE(r.ok()) << r.status().ToString() << " for size " << size;
    return r.ok() ? r.value() : 0;
  }

  // The alignment alloc.h promises for a request of `size` bytes.
  static uint64_t RequiredAlignment(size_t size) {
    if (size > 32768) return 4096;  // a run
    if (size >= 256) return 256;
    if (size >= 64) return 64;
    return 16;
  }

  // Checks a block against the model of live blocks (offset -> usable size) and adds it.
  void CheckAndAdd(std::map<uint64_t, uint64_t>* live, uint64_t off, size_t size) {
    const uint64_t usable = allocator_->UsableSize(off);
    ASSERT_GE(usable, size);
    ASSERT_EQ(off % RequiredAlignment(size), 0u) << "size " << size << " offset " << off;
    ASSERT_GE(off, pool_->heap_offset());
    ASSERT_LE(off + usable, pool_->heap_offset() + pool_->heap_size());
    ASSERT_TRUE(allocator_->IsAllocated(off));
    auto next = live->lower_bound(off);
    if (next != live->end()) {
      ASSERT_LE(off + usable, next->first) << "overlaps the next block";
    }
    if (next != live->begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second, off) << "overlaps the previous block";
    }
    (*live)[off] = usable;
  }

  static uint64_t Sum(const std::map<uint64_t, uint64_t>& live) {
    uint64_t s = 0;
    for (const auto& [off, size] : live) s += size;
    return s;
  }

  // A size distribution: mostly small, some mid, a few runs.
  static size_t RandomSize(std::mt19937_64& rng) {
    const int kind = rng() % 100;
    if (kind < 70) return 1 + rng() % 512;
    if (kind < 95) return 1 + rng() % 32768;
    return 32769 + rng() % (400 << 10);
  }

  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Persister> persister_;
  std::unique_ptr<Allocator> allocator_;
};

TEST_F(AllocatorTest, RejectsZeroAndOversizedRequests) {
  EXPECT_TRUE(allocator_->Allocate(0).status().IsInvalidArgument());
  EXPECT_TRUE(allocator_->Allocate(pool_->heap_size() + 1).status().IsInvalidArgument());
  // Within the heap's size but larger than its chunks: the pool cannot hold it.
  Result<uint64_t> r = allocator_->Allocate(pool_->heap_size());
  EXPECT_TRUE(r.status().IsResourceExhausted()) << r.status().ToString();
  EXPECT_EQ(allocator_->BytesInUse(), 0u);
}

TEST_F(AllocatorTest, SizesAlignmentAndNoOverlapAgainstModel) {
  std::mt19937_64 rng(42);
  std::map<uint64_t, uint64_t> live;
  std::vector<uint64_t> order;
  uint64_t total = 0;  // usable bytes of the live blocks
  for (int i = 0; i < 20000; ++i) {
    if (!order.empty() && rng() % 100 < 45) {
      const size_t k = rng() % order.size();
      const uint64_t off = order[k];
      order[k] = order.back();
      order.pop_back();
      allocator_->Free(off);
      total -= live[off];
      live.erase(off);
      ASSERT_FALSE(allocator_->IsAllocated(off));
      ASSERT_EQ(allocator_->UsableSize(off), 0u);
    } else {
      const size_t size = RandomSize(rng);
      Result<uint64_t> r = allocator_->Allocate(size);
      if (r.status().IsResourceExhausted()) continue;  // big runs may not fit
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_NO_FATAL_FAILURE(CheckAndAdd(&live, r.value(), size));
      total += live[r.value()];
      order.push_back(r.value());
    }
    ASSERT_EQ(allocator_->BytesInUse(), total);
  }
  EXPECT_EQ(total, Sum(live));
  for (uint64_t off : order) allocator_->Free(off);
  EXPECT_EQ(allocator_->BytesInUse(), 0u);
  // Everything came back: the whole heap is one run again.
  Result<uint64_t> all = allocator_->Allocate(allocator_->Capacity());
  EXPECT_TRUE(all.ok()) << all.status().ToString();
}

TEST_F(AllocatorTest, EveryClassBoundaryGetsEnoughRoom) {
  std::map<uint64_t, uint64_t> live;
  for (size_t size : {1, 15, 16, 17, 47, 48, 49, 63, 64, 65, 127, 128, 129, 192, 193, 255,
                      256, 257, 4095, 4096, 4097, 16384, 16385, 32767, 32768, 32769, 65536,
                      65537, 1 << 20}) {
    ASSERT_NO_FATAL_FAILURE(CheckAndAdd(&live, MustAllocate(size), size));
  }
  EXPECT_EQ(allocator_->BytesInUse(), Sum(live));
}

TEST_F(AllocatorTest, FreeOfUnknownOffsetsIsIgnored) {
  const uint64_t a = MustAllocate(100);
  const uint64_t run = MustAllocate(100000);
  const uint64_t before = allocator_->BytesInUse();
  allocator_->Free(0);
  allocator_->Free(a + 64);                  // inside a unit
  allocator_->Free(run + 4096);              // inside a run
  allocator_->Free(pool_->size() + 12345);   // past the pool
  EXPECT_EQ(allocator_->BytesInUse(), before);
  allocator_->Free(a);
  allocator_->Free(a);  // double free
  EXPECT_EQ(allocator_->BytesInUse(), before - 128);
  EXPECT_TRUE(allocator_->IsAllocated(run));
}

// With one arena a block one thread frees is the next another thread gets (the crash
// suite's shared-arena tests rely on it); with 4, two threads are in different arenas
// and the second gets another block.
TEST_F(AllocatorTest, OneArenaHandsAFreedBlockToAnotherThreadAtOnce) {
  for (uint32_t arenas : {1u, 4u}) {
    SCOPED_TRACE("arenas " + std::to_string(arenas));
    allocator_.reset();
    ASSERT_TRUE(Pool::CreateDram("test", 64 << 20, &pool_).ok());
    AllocatorOptions options;
    options.arenas = arenas;
    ASSERT_TRUE(Allocator::Format(*pool_, *persister_, &allocator_, options).ok());
    uint64_t freed = 0, got = 0;
    std::thread([&] {
      freed = MustAllocate(48);
      allocator_->Free(freed);
    }).join();
    std::thread([&] { got = MustAllocate(48); }).join();
    if (arenas == 1) {
      EXPECT_EQ(got, freed);
    } else {
      EXPECT_NE(got, freed);
    }
  }
}

TEST_F(AllocatorTest, ArenasOutOfRangeAreInvalidArgument) {
  std::unique_ptr<Allocator> a;
  for (uint32_t arenas : {0u, kMaxAllocArenas + 1}) {
    AllocatorOptions options;
    options.arenas = arenas;
    Status s = Allocator::Format(*pool_, *persister_, &a, options);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.ToString().find("arenas"), std::string::npos) << s.ToString();
    EXPECT_TRUE(Allocator::Load(*pool_, *persister_, &a, options).IsInvalidArgument());
    EXPECT_TRUE(Allocator::Rebuild(
                    *pool_, *persister_, [](const Allocator::LiveBlockVisitor&) {
                      return Status::OK();
                    }, &a, options)
                    .IsInvalidArgument());
  }
}

TEST_F(AllocatorTest, ManyThreadsAllocateConcurrently) {
  constexpr int kThreads = 4;
  std::vector<std::vector<std::pair<uint64_t, size_t>>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<std::pair<uint64_t, size_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        if (!mine.empty() && rng() % 3 == 0) {
          const size_t k = rng() % mine.size();
          // The block still holds our tag: nobody else was handed it.
          if (*pool_->At<uint64_t>(mine[k].first) != static_cast<uint64_t>(t + 1)) {
            ADD_FAILURE() << "block " << mine[k].first << " was overwritten";
            return;
          }
          allocator_->Free(mine[k].first);
          mine[k] = mine.back();
          mine.pop_back();
          continue;
        }
        const size_t size = 8 + rng() % (rng() % 50 == 0 ? 100000 : 300);
        Result<uint64_t> r = allocator_->Allocate(size);
        if (!r.ok()) {
          ADD_FAILURE() << r.status().ToString();
          return;
        }
        persister_->Store(pool_->At<uint64_t>(r.value()), static_cast<uint64_t>(t + 1));
        mine.emplace_back(r.value(), size);
      }
      kept[t] = std::move(mine);
    });
  }
  for (auto& th : threads) th.join();
  std::map<uint64_t, uint64_t> live;
  for (int t = 0; t < kThreads; ++t) {
    for (auto [off, size] : kept[t]) {
      ASSERT_EQ(*pool_->At<uint64_t>(off), static_cast<uint64_t>(t + 1));
      ASSERT_NO_FATAL_FAILURE(CheckAndAdd(&live, off, size));
    }
  }
  EXPECT_EQ(allocator_->BytesInUse(), Sum(live));
}

TEST_F(AllocatorTest, ConcurrentFillUsesEveryUnit) {
  // Threads allocate from different arenas; once chunks run out they use the room left
  // in the others, so a full pool has no free unit anywhere.
  Make(8 << 20);
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      uint64_t n = 0;
      while (allocator_->Allocate(16).ok()) ++n;
      total += n;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(total.load(), allocator_->Capacity() / 16);
  EXPECT_EQ(allocator_->BytesInUse(), allocator_->Capacity());
}

TEST_F(AllocatorTest, PoolFullThenWorksAgainAfterFrees) {
  Make(8 << 20);
  std::vector<uint64_t> runs;
  for (;;) {
    Result<uint64_t> r = allocator_->Allocate(200000);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsPoolFull()) << r.status().ToString();
      EXPECT_EQ(r.status().message().rfind("pool full: ", 0), 0u) << r.status().message();
      break;
    }
    runs.push_back(r.value());
  }
  ASSERT_GT(runs.size(), 10u);
  std::vector<uint64_t> smalls;
  for (;;) {
    Result<uint64_t> r = allocator_->Allocate(1000);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsPoolFull()) << r.status().ToString();
      break;
    }
    smalls.push_back(r.value());
  }
  // No chunk left for another class either.
  EXPECT_TRUE(allocator_->Allocate(16).status().IsResourceExhausted());
  allocator_->Free(runs.back());
  runs.pop_back();
  EXPECT_TRUE(allocator_->Allocate(16).ok());
  EXPECT_TRUE(allocator_->Allocate(150000).ok());  // the rest of the freed run
  for (uint64_t off : smalls) allocator_->Free(off);
  for (uint64_t off : runs) allocator_->Free(off);
  EXPECT_TRUE(allocator_->Allocate(200000).ok());
}

// The failure-injection seam: the armed allocation fails as a full pool would, changing
// nothing (the same bytes in use); sticky fails every later one too, min_size only the
// blocks that large; disarmed (or detached), allocations work again.
TEST_F(AllocatorTest, InjectedFailuresFailTheArmedAllocationAndChangeNothing) {
  AllocationFaults faults;
  allocator_->SetFaults(&faults);
  faults.Arm(3, /*sticky=*/false);
  const uint64_t a = MustAllocate(100);
  const uint64_t b = MustAllocate(200000);
  const uint64_t in_use = allocator_->BytesInUse();
  for (size_t size : {size_t{100}, size_t{200000}}) {
    faults.Arm(1, /*sticky=*/false);
    Result<uint64_t> r = allocator_->Allocate(size);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsResourceExhausted() && r.status().IsPoolFull())
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("injected"), std::string::npos) << r.status().ToString();
    EXPECT_EQ(allocator_->BytesInUse(), in_use) << "a failed allocation took bytes";
    EXPECT_EQ(faults.seen(), 1u);
    EXPECT_EQ(faults.failed(), 1u);
  }
  // One-shot: the 2nd of four fails; the others get blocks.
  faults.Arm(2, /*sticky=*/false);
  std::vector<bool> ok;
  std::vector<uint64_t> got;
  for (int i = 0; i < 4; ++i) {
    Result<uint64_t> r = allocator_->Allocate(48);
    ok.push_back(r.ok());
    if (r.ok()) got.push_back(*r);
  }
  EXPECT_EQ(ok, (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(faults.seen(), 4u);
  EXPECT_EQ(faults.failed(), 1u);
  // Sticky: the 2nd and every one after it.
  faults.Arm(2, /*sticky=*/true);
  ok.clear();
  for (int i = 0; i < 4; ++i) ok.push_back(allocator_->Allocate(48).ok());
  EXPECT_EQ(ok, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(faults.failed(), 3u);
  // Only blocks of at least min_size count and fail.
  faults.Arm(1, /*sticky=*/true, /*min_size=*/256);
  EXPECT_TRUE(allocator_->Allocate(255).ok());
  EXPECT_FALSE(allocator_->Allocate(256).ok());
  EXPECT_FALSE(allocator_->Allocate(200000).ok());
  EXPECT_TRUE(allocator_->Allocate(16).ok());
  EXPECT_EQ(faults.seen(), 2u);
  EXPECT_EQ(faults.failed(), 2u);
  // Disarmed, and detached: no failure, and a detached one is not asked.
  faults.Arm(0, /*sticky=*/true);
  EXPECT_TRUE(allocator_->Allocate(48).ok());
  allocator_->SetFaults(nullptr);
  faults.Arm(1, /*sticky=*/true);
  EXPECT_TRUE(allocator_->Allocate(48).ok());
  EXPECT_EQ(faults.seen(), 0u);
  EXPECT_TRUE(allocator_->IsAllocated(a) && allocator_->IsAllocated(b));
  for (uint64_t off : got) EXPECT_TRUE(allocator_->IsAllocated(off));
}

TEST_F(AllocatorTest, EmptyChunksKeptByAClassAreReclaimedWhenFull) {
  Make(8 << 20);
  std::vector<uint64_t> blocks;
  for (;;) {  // the whole heap in 16-byte blocks
    Result<uint64_t> r = allocator_->Allocate(16);
    if (!r.ok()) break;
    blocks.push_back(r.value());
  }
  ASSERT_EQ(blocks.size(), allocator_->Capacity() / 16);
  for (uint64_t off : blocks) allocator_->Free(off);
  blocks.clear();
  for (;;) {  // the whole heap again, in another class
    Result<uint64_t> r = allocator_->Allocate(4096);
    if (!r.ok()) break;
    blocks.push_back(r.value());
  }
  EXPECT_EQ(blocks.size(), allocator_->Capacity() / 4096);
  for (uint64_t off : blocks) allocator_->Free(off);
  EXPECT_TRUE(allocator_->Allocate(allocator_->Capacity()).ok());
}

TEST_F(AllocatorTest, PersistStateAndLoadPreserveTheAllocatedSet) {
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> live;
  for (int i = 0; i < 5000; ++i) {
    const size_t size = RandomSize(rng);
    Result<uint64_t> r = allocator_->Allocate(size);
    if (r.ok()) live[r.value()] = allocator_->UsableSize(r.value());
  }
  for (auto it = live.begin(); it != live.end();) {  // free every third
    if (rng() % 3 == 0) {
      allocator_->Free(it->first);
      it = live.erase(it);
    } else {
      ++it;
    }
  }
  ASSERT_TRUE(allocator_->PersistState().ok());
  allocator_.reset();
  ASSERT_TRUE(Allocator::Load(*pool_, *persister_, &allocator_).ok());
  EXPECT_EQ(allocator_->BytesInUse(), Sum(live));
  for (const auto& [off, size] : live) {
    ASSERT_TRUE(allocator_->IsAllocated(off)) << off;
    ASSERT_EQ(allocator_->UsableSize(off), size) << off;
  }
  // New blocks never overlap the loaded ones, and the loaded ones can be freed.
  for (int i = 0; i < 3000; ++i) {
    const size_t size = 1 + rng() % 2048;
    ASSERT_NO_FATAL_FAILURE(CheckAndAdd(&live, MustAllocate(size), size));
  }
  for (const auto& [off, size] : live) allocator_->Free(off);
  EXPECT_EQ(allocator_->BytesInUse(), 0u);
}

TEST_F(AllocatorTest, LoadOfFreshFormatIsEmpty) {
  ASSERT_TRUE(allocator_->PersistState().ok());
  ASSERT_TRUE(Allocator::Load(*pool_, *persister_, &allocator_).ok());
  EXPECT_EQ(allocator_->BytesInUse(), 0u);
  EXPECT_TRUE(allocator_->Allocate(allocator_->Capacity()).ok());
}

TEST_F(AllocatorTest, RebuildKeepsVisitedBlocksAndReusesTheRest) {
  Make(8 << 20);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> all;
  for (int failures = 0; failures < 50;) {  // fill the pool
    const size_t size = rng() % 10 == 0 ? 40000 + rng() % 100000 : 1 + rng() % 3000;
    Result<uint64_t> r = allocator_->Allocate(size);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsResourceExhausted()) << r.status().ToString();
      ++failures;
      continue;
    }
    all.push_back(r.value());
  }
  ASSERT_TRUE(allocator_->Allocate(200000).status().IsResourceExhausted());
  std::map<uint64_t, uint64_t> live;
  std::vector<uint64_t> dropped;
  for (uint64_t off : all) {
    if (rng() % 2 == 0) live[off] = allocator_->UsableSize(off);
    else dropped.push_back(off);
  }
  // A crash: the allocator object is gone without PersistState.
  allocator_.reset();
  int visits = 0;
  Status s = Allocator::Rebuild(
      *pool_, *persister_,
      [&](const Allocator::LiveBlockVisitor& visit) {
        for (const auto& [off, size] : live) {
          visit(off);
          visit(off);  // engines may reach a block twice (a directory): harmless
          visits += 2;
        }
        return Status::OK();
      },
      &allocator_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(visits, static_cast<int>(2 * live.size()));
  EXPECT_EQ(allocator_->BytesInUse(), Sum(live));
  for (const auto& [off, size] : live) {
    ASSERT_TRUE(allocator_->IsAllocated(off));
    ASSERT_EQ(allocator_->UsableSize(off), size);
  }
  for (uint64_t off : dropped) ASSERT_FALSE(allocator_->IsAllocated(off)) << off;
  // The dropped space is reusable: the pool holds new blocks again, never overlapping.
  uint64_t reclaimed = 0;
  for (;;) {
    Result<uint64_t> r = allocator_->Allocate(1000);
    if (!r.ok()) break;
    ASSERT_NO_FATAL_FAILURE(CheckAndAdd(&live, r.value(), 1000));
    reclaimed += 1024;
  }
  EXPECT_GT(reclaimed, allocator_->Capacity() / 4);

  // The rebuilt table is consistent: a clean shutdown and Load see the same set.
  ASSERT_TRUE(allocator_->PersistState().ok());
  ASSERT_TRUE(Allocator::Load(*pool_, *persister_, &allocator_).ok());
  EXPECT_EQ(allocator_->BytesInUse(), Sum(live));
}

TEST_F(AllocatorTest, RebuildFromACopiedImage) {
  Make(8 << 20);
  // Blocks handed out are described by the persisted table, so an image of the pool
  // taken at any moment (here: with no shutdown at all) can be rebuilt.
  const uint64_t a = MustAllocate(24);
  const uint64_t b = MustAllocate(5000);
  const uint64_t c = MustAllocate(300000);
  MustAllocate(700);  // unreachable: leaked by the "crash"
  std::vector<char> image(pool_->base(), pool_->base() + pool_->size());
  std::unique_ptr<Pool> copy;
  ASSERT_TRUE(Pool::FromImage(image.data(), image.size(), "test", &copy).ok());
  std::unique_ptr<Allocator> rebuilt;
  ASSERT_TRUE(Allocator::Rebuild(
                  *copy, *persister_,
                  [&](const Allocator::LiveBlockVisitor& visit) {
                    for (uint64_t off : {a, b, c}) visit(off);
                    return Status::OK();
                  },
                  &rebuilt)
                  .ok());
  EXPECT_EQ(rebuilt->BytesInUse(), 32u + 6144u + 5u * 65536u);
  EXPECT_TRUE(rebuilt->IsAllocated(b));
}

TEST_F(AllocatorTest, RebuildWithBogusOffsetIsCorruption) {
  const uint64_t small = MustAllocate(100);   // a 128-byte unit
  const uint64_t run = MustAllocate(100000);  // a two-chunk run
  for (uint64_t bogus : {small + 64, run + 65536, run + 4096, uint64_t{0}, uint64_t{8},
                         pool_->heap_offset(), pool_->size() + 100,
                         run + 3 * 65536 /* a free chunk */}) {
    std::unique_ptr<Allocator> rebuilt;
    Status s = Allocator::Rebuild(
        *pool_, *persister_,
        [&](const Allocator::LiveBlockVisitor& visit) {
          visit(small);
          visit(bogus);
          visit(run);
          return Status::OK();
        },
        &rebuilt);
    EXPECT_TRUE(s.IsCorruption()) << bogus << ": " << s.ToString();
    EXPECT_NE(s.message().find(std::to_string(bogus)), std::string::npos) << s.message();
  }
}

TEST_F(AllocatorTest, RebuildPassesOnEnumeratorErrors) {
  std::unique_ptr<Allocator> rebuilt;
  Status s = Allocator::Rebuild(
      *pool_, *persister_,
      [](const Allocator::LiveBlockVisitor&) { return Status::Corruption("bad bucket"); },
      &rebuilt);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "bad bucket");
}

TEST_F(AllocatorTest, LoadOfDamagedMetadataIsCorruption) {
  Make(8 << 20);
  MustAllocate(100);
  MustAllocate(300000);
  ASSERT_TRUE(allocator_->PersistState().ok());
  allocator_.reset();
  std::vector<char> good(pool_->base(), pool_->base() + pool_->size());
  auto load_after = [&](uint64_t offset, uint8_t xor_mask) {
    std::memcpy(pool_->base(), good.data(), good.size());
    pool_->base()[offset] ^= xor_mask;
    std::unique_ptr<Allocator> a;
    return Allocator::Load(*pool_, *persister_, &a);
  };
  const uint64_t h = pool_->heap_offset();
  EXPECT_TRUE(load_after(h, 1).IsCorruption());           // magic
  EXPECT_TRUE(load_after(h + 8, 1).IsCorruption());       // version
  EXPECT_TRUE(load_after(h + 16, 1).IsCorruption());      // chunk count (checksum)
  EXPECT_TRUE(load_after(h + 56, 1).IsCorruption());      // the checksum itself
  EXPECT_TRUE(load_after(h + 64, 1).IsCorruption());      // state checksum
  EXPECT_TRUE(load_after(h + 4096, 1).IsCorruption());    // first table entry
  EXPECT_TRUE(load_after(h + 4096 + 7, 0x10).IsCorruption());
  EXPECT_TRUE(load_after(h + 4096 * 2, 1).IsCorruption());  // a saved bitmap (state checksum)
  // Without a damage, the same bytes load.
  Status ok = load_after(h + 4096 + 8 * 100, 0);
  EXPECT_TRUE(ok.ok()) << ok.ToString();
  // Rebuild checks the header too.
  std::memcpy(pool_->base(), good.data(), good.size());
  pool_->base()[h + 20] ^= 4;
  std::unique_ptr<Allocator> a;
  EXPECT_TRUE(Allocator::Rebuild(
                  *pool_, *persister_,
                  [](const Allocator::LiveBlockVisitor&) { return Status::OK(); }, &a)
                  .IsCorruption());
}

// Guards issue 13's "checksums on the allocator's metadata": a damaged byte in any chunk
// table entry (of a small chunk, a run, a free chunk) is Corruption naming the chunk and
// the entry's offset, after a clean shutdown (Load) and after a crash (Rebuild, which
// used to rewrite a damaged free entry silently and could take a damaged size class).
TEST_F(AllocatorTest, EveryDamagedChunkTableByteIsCorruption) {
  Make(8 << 20);
  const uint64_t small = MustAllocate(100);
  const uint64_t run = MustAllocate(300000);
  const uint64_t h = pool_->heap_offset();
  const uint64_t table = h + 4096;                             // alloc.cc's layout
  const uint64_t data = *pool_->At<uint64_t>(h + 40);          // AllocHeader::data_offset
  auto chunk_of = [&](uint64_t off) { return (off - data) >> 16; };
  const uint64_t free_chunk = chunk_of(run) + 5;               // past the 5-chunk run
  ASSERT_TRUE(allocator_->PersistState().ok());
  allocator_.reset();
  const std::vector<char> good(pool_->base(), pool_->base() + pool_->size());
  auto enumerate = [&](const Allocator::LiveBlockVisitor& visit) {
    visit(small);
    visit(run);
    return Status::OK();
  };
  for (const uint64_t c : {chunk_of(small), chunk_of(run), free_chunk}) {
    const std::string where = "allocator chunk " + std::to_string(c) +
                              " (table entry at pool offset " + std::to_string(table + 8 * c) +
                              ") fails its check";
    for (int byte = 0; byte < 8; ++byte) {
      for (const uint8_t mask : {0x01, 0x02, 0x80, 0xff}) {
        SCOPED_TRACE("chunk " + std::to_string(c) + " byte " + std::to_string(byte) + " ^ " +
                     std::to_string(mask));
        std::memcpy(pool_->base(), good.data(), good.size());
        pool_->base()[table + 8 * c + byte] ^= mask;
        std::unique_ptr<Allocator> a;
        Status s = Allocator::Load(*pool_, *persister_, &a);
        EXPECT_TRUE(s.IsCorruption()) << s.ToString();
        EXPECT_NE(s.message().find(where), std::string::npos) << s.ToString();
        s = Allocator::Rebuild(*pool_, *persister_, enumerate, &a);
        EXPECT_TRUE(s.IsCorruption()) << s.ToString();
        EXPECT_NE(s.message().find(where), std::string::npos) << s.ToString();
      }
    }
  }
  std::memcpy(pool_->base(), good.data(), good.size());
  Status ok = Allocator::Rebuild(*pool_, *persister_, enumerate, &allocator_);
  EXPECT_TRUE(ok.ok()) << ok.ToString();
}

// Verify (pmhash pool check) against what an engine reaches: exact, leaked, reached twice,
// reached but free, and a table entry damaged while the allocator was loaded.
TEST_F(AllocatorTest, VerifyNamesLeakedTwiceReachedAndUnallocatedBlocks) {
  Make(8 << 20);
  const uint64_t a = MustAllocate(24), b = MustAllocate(5000), c = MustAllocate(300000);
  const uint64_t leaked = MustAllocate(700);
  const uint64_t freed = MustAllocate(700);
  allocator_->Free(freed);
  auto verify = [&](std::vector<uint64_t> reached) {
    return allocator_->Verify([&](const Allocator::LiveBlockVisitor& visit) {
      for (uint64_t off : reached) visit(off);
      return Status::OK();
    });
  };
  Result<uint64_t> r = verify({a, b, c, leaked});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value(), 4u);
  auto expect = [&](std::vector<uint64_t> reached, const std::string& fragment) {
    Result<uint64_t> v = verify(reached);
    EXPECT_TRUE(v.status().IsCorruption()) << v.status().ToString();
    EXPECT_NE(v.status().message().find(fragment), std::string::npos) << v.status().ToString();
  };
  const auto at = [](uint64_t off) { return "block at pool offset " + std::to_string(off); };
  expect({a, b, c}, "allocator: 1 problem: " + at(leaked) +
                        " (768 bytes) is allocated but unreachable (leaked)");
  expect({a}, at(c) + " (327680 bytes) is allocated but unreachable (leaked)");
  expect({a, b, c, leaked, b}, at(b) + " is reached twice");
  expect({a, b, c, c, leaked}, at(c) + " is reached twice");
  expect({a, b, c, leaked, freed}, at(freed) + " is reached but is not an allocated block");
  expect({a, b, c, leaked, c + 65536}, at(c + 65536) + " is reached but is not an allocated");
  expect({a, b, c, leaked, a + 16}, at(a + 16) + " is reached but is not an allocated block");
  expect({a, b, c, leaked, 8}, at(8) + " is outside the allocator's chunks");
  expect({}, "allocator: 4 problems: ");
  // A table entry damaged under a loaded allocator.
  const uint64_t table = pool_->heap_offset() + 4096;
  pool_->base()[table] ^= 1;
  expect({a, b, c, leaked}, "allocator chunk 0 (table entry at pool offset " +
                                std::to_string(table) + ") fails its check");
  pool_->base()[table] ^= 1;
  // The enumerator's own error comes back as it is.
  EXPECT_EQ(allocator_
                ->Verify([](const Allocator::LiveBlockVisitor&) {
                  return Status::Corruption("bad bucket");
                })
                .status()
                .message(),
            "bad bucket");
}

TEST_F(AllocatorTest, LoadWithoutPersistStateIsCorruption) {
  // Allocations after the last PersistState change the table: the saved state no
  // longer vouches for it.
  ASSERT_TRUE(allocator_->PersistState().ok());
  MustAllocate(100);
  std::unique_ptr<Allocator> a;
  EXPECT_TRUE(Allocator::Load(*pool_, *persister_, &a).IsCorruption());
}

TEST_F(AllocatorTest, UnformattedHeapIsCorruption) {
  std::unique_ptr<Pool> raw;
  ASSERT_TRUE(Pool::CreateDram("test", 8 << 20, &raw).ok());
  std::unique_ptr<Allocator> a;
  EXPECT_TRUE(Allocator::Load(*raw, *persister_, &a).IsCorruption());
}

// A 4 MiB DRAM pool and a formatted allocator whose persister reports to a crash
// simulator: the setup of the tests that crash the allocator.
class AllocatorCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Pool::CreateDram("test", 4 << 20, &pool).ok());
    sim_ = std::make_unique<CrashSim>(pool->base(), pool->size(), PersistMode::kAdr);
    PersistConfig config;
    config.observer = sim_.get();
    ASSERT_TRUE(Persister::Make(config, &p).ok());
    ASSERT_TRUE(Allocator::Format(*pool, *p, &allocator).ok());
  }

  std::unique_ptr<Pool> pool;
  std::unique_ptr<CrashSim> sim_;  // before the persister that reports to it
  std::unique_ptr<Persister> p;
  std::unique_ptr<Allocator> allocator;
};

// Power failures at every fence of an engine-like workload: blocks are linked from the
// root (pointer persisted after Allocate) and unlinked durably before Free. Every crash
// image must rebuild to exactly the linked blocks, and stay usable.
TEST_F(AllocatorCrashTest, RebuildFindsExactlyTheLinkedBlocksAtEveryCrashPoint) {
  CrashSim& sim = *sim_;

  constexpr int kSlots = 48;
  auto* slots = static_cast<uint64_t*>(pool->root());
  std::mt19937_64 rng(99);
  int images = 0, hooks = 0;
  sim.SetHook(
      [&](CrashSim& s, CrashSim::Event) {
        if (++hooks % 3 != 0) return;  // every third crash point keeps the test fast
        for (auto kind : {CrashSim::ImageKind::kAll, CrashSim::ImageKind::kRandom}) {
          std::unique_ptr<Pool> img;
          ASSERT_TRUE(s.MakePool(kind, rng, "test", &img).ok());
          const auto* linked = static_cast<const uint64_t*>(img->root());
          std::set<uint64_t> live;
          for (int i = 0; i < kSlots; ++i) {
            if (linked[i] != 0) live.insert(linked[i]);
          }
          // The image's own simulator: Rebuild's repairs of the chunk table must be durable
          // when it returns (a clean Close later hashes the table as memory holds it).
          CrashSim after(img->base(), img->size(), PersistMode::kAdr);
          PersistConfig watched;
          watched.observer = &after;
          std::unique_ptr<Persister> rp;
          ASSERT_TRUE(Persister::Make(watched, &rp).ok());
          std::unique_ptr<Allocator> rebuilt;
          Status st = Allocator::Rebuild(
              *img, *rp,
              [&](const Allocator::LiveBlockVisitor& visit) {
                for (uint64_t off : live) visit(off);
                return Status::OK();
              },
              &rebuilt);
          ASSERT_TRUE(st.ok()) << st.ToString();
          ASSERT_EQ(after.PendingUnits(), 0u) << "Rebuild left chunk table repairs not durable";
          uint64_t bytes = 0;
          for (uint64_t off : live) {
            ASSERT_TRUE(rebuilt->IsAllocated(off));
            bytes += rebuilt->UsableSize(off);
          }
          ASSERT_EQ(rebuilt->BytesInUse(), bytes);
          // Usable after recovery: new blocks avoid the live ones.
          Result<uint64_t> fresh = rebuilt->Allocate(200);
          ASSERT_TRUE(fresh.ok());
          ASSERT_EQ(live.count(fresh.value()), 0u);
          ++images;
        }
      },
      0, 0);
  for (int op = 0; op < 150; ++op) {
    const int i = rng() % kSlots;
    if (slots[i] == 0) {
      const size_t size = rng() % 8 == 0 ? 70000 + rng() % 100000 : 1 + rng() % 3000;
      Result<uint64_t> r = allocator->Allocate(size);
      if (!r.ok()) continue;
      p->Store(&slots[i], r.value());  // link
      p->Persist(&slots[i], 8);
    } else {
      const uint64_t off = slots[i];
      p->Store(&slots[i], uint64_t{0});  // unlink durably, then free
      p->Persist(&slots[i], 8);
      allocator->Free(off);
    }
  }
  sim.SetHook(nullptr, 0, 0);
  EXPECT_GT(images, 50);
  EXPECT_TRUE(sim.FindBypass().ok());
}

// Close is PersistState then the clean state word: every chunk table change before it
// (chunks taken and given back, runs, frees) must be durable by then, since the state
// checksum covers the table as memory holds it and a clean open trusts it. Churn, then
// every block freed (chunks given back to the heap while their class has other room,
// runs freed), then PersistState: nothing may be pending.
TEST_F(AllocatorCrashTest, NothingIsPendingAfterPersistState) {
  CrashSim& sim = *sim_;
  std::mt19937_64 rng(5);
  std::vector<uint64_t> live;
  for (int op = 0; op < 2000; ++op) {
    if (live.empty() || rng() % 5 < 3) {
      const size_t size = rng() % 50 == 0 ? 70000 + rng() % 60000 : 2048 + rng() % 2048;
      Result<uint64_t> r = allocator->Allocate(size);
      if (r.ok()) live.push_back(r.value());
    } else {
      const size_t i = rng() % live.size();
      allocator->Free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (uint64_t off : live) allocator->Free(off);  // the last changes: chunks given back
  ASSERT_TRUE(allocator->PersistState().ok());
  EXPECT_EQ(sim.PendingUnits(), 0u) << "chunk table changes not durable at Close, first line "
                                    << (sim.PendingLines() == 0 ? 0 : sim.PendingLineOffsets(1)[0]);
}

}  // namespace
}  // namespace pmhash::pm
