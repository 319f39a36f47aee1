#include "pm/undo_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pm/crashsim.h"

namespace pmhash::pm {
namespace {

class UndoLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Pool::CreateDram("test", 8 << 20, &pool_).ok());
    ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister_).ok());
    ASSERT_TRUE(UndoLog::Format(*pool_, *persister_, &log_).ok());
  }

  // A scratch range in the heap (undo-log tests need no allocator).
  char* Heap(uint64_t off) const { return pool_->heap() + off; }

  void Write(char* dst, const std::string& s) { persister_->Copy(dst, s.data(), s.size()); }
  static std::string Read(const char* src, size_t n) { return std::string(src, n); }

  // The pool's bytes now, as a crash would leave them (DRAM pools persist everything).
  std::vector<char> Image() const {
    return std::vector<char>(pool_->base(), pool_->base() + pool_->size());
  }
  std::unique_ptr<Pool> FromImage(const std::vector<char>& image) const {
    std::unique_ptr<Pool> p;
    EXPECT_TRUE(Pool::FromImage(image.data(), image.size(), "test", &p).ok());
    return p;
  }

  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Persister> persister_;
  std::unique_ptr<UndoLog> log_;
};

TEST_F(UndoLogTest, CommitKeepsTheNewData) {
  Write(Heap(0), "old-bytes");
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 9).ok());
    Write(Heap(0), "new-bytes");
    persister_->Persist(Heap(0), 9);
    tx->Commit();
  }
  EXPECT_EQ(Read(Heap(0), 9), "new-bytes");
  // Nothing is left to roll back.
  std::unique_ptr<UndoLog> again;
  ASSERT_TRUE(UndoLog::Recover(*pool_, *persister_, &again).ok());
  EXPECT_EQ(Read(Heap(0), 9), "new-bytes");
}

TEST_F(UndoLogTest, DestroyingAnUncommittedTxRollsBack) {
  Write(Heap(100), "aaaa");
  Write(Heap(5000), "bbbbbbbb");
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(100), 4).ok());
    Write(Heap(100), "AAAA");
    ASSERT_TRUE(tx->Save(Heap(5000), 8).ok());
    Write(Heap(5000), "BBBBBBBB");
  }
  EXPECT_EQ(Read(Heap(100), 4), "aaaa");
  EXPECT_EQ(Read(Heap(5000), 8), "bbbbbbbb");
  // The lane was retired: a later crash does not roll back anything again.
  Write(Heap(100), "CCCC");
  std::unique_ptr<Pool> crashed = FromImage(Image());
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*crashed, *persister_, &recovered).ok());
  EXPECT_EQ(Read(crashed->heap() + 100, 4), "CCCC");
}

TEST_F(UndoLogTest, RecoverRestoresOldDataNewestFirstAndIsIdempotent) {
  Write(Heap(0), "0123456789");
  Write(pool_->At<char>(kRootOffset), "root");
  std::vector<char> image;
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 10).ok());
    Write(Heap(0), "xxxxxxxxxx");
    // The same range again, after a change: the newest entry holds "xxx..", the oldest
    // "0123..". Newest-first recovery must end with the oldest bytes.
    ASSERT_TRUE(tx->Save(Heap(2), 4).ok());
    Write(Heap(2), "yyyy");
    ASSERT_TRUE(tx->Save(pool_->root(), 4).ok());
    Write(pool_->At<char>(kRootOffset), "ROOT");
    image = Image();  // crash here: the Tx never commits and never rolls back
  }
  std::unique_ptr<Pool> crashed = FromImage(image);
  EXPECT_EQ(Read(crashed->heap(), 10), "xxyyyyxxxx");
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*crashed, *persister_, &recovered).ok());
  EXPECT_EQ(Read(crashed->heap(), 10), "0123456789");
  EXPECT_EQ(Read(crashed->At<char>(kRootOffset), 4), "root");
  // Idempotent: again, after more changes, nothing is rolled back.
  persister_->Copy(crashed->heap(), "later", 5);
  ASSERT_TRUE(UndoLog::Recover(*crashed, *persister_, &recovered).ok());
  EXPECT_EQ(Read(crashed->heap(), 10), "later56789");
}

TEST_F(UndoLogTest, CrashDuringRecoveryRecoversToo) {
  Write(Heap(64), "original");
  std::vector<char> image;
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(64), 8).ok());
    Write(Heap(64), "modified");
    image = Image();
  }
  // A recovery that restored half of the bytes and crashed before clearing the lane.
  std::unique_ptr<Pool> crashed = FromImage(image);
  persister_->Copy(crashed->heap() + 64, "orig", 4);
  std::vector<char> mid(crashed->base(), crashed->base() + crashed->size());
  std::unique_ptr<Pool> again = FromImage(mid);
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*again, *persister_, &recovered).ok());
  EXPECT_EQ(Read(again->heap() + 64, 8), "original");
}

TEST_F(UndoLogTest, CommittedTxIsNotRolledBackAfterACrash) {
  Write(Heap(0), "before");
  auto tx = log_->Begin();
  ASSERT_TRUE(tx->Save(Heap(0), 6).ok());
  Write(Heap(0), "after!");
  persister_->Persist(Heap(0), 6);
  tx->Commit();
  std::unique_ptr<Pool> crashed = FromImage(Image());
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*crashed, *persister_, &recovered).ok());
  EXPECT_EQ(Read(crashed->heap(), 6), "after!");
}

TEST_F(UndoLogTest, TxCanBeReusedAfterCommit) {
  Write(Heap(0), "one");
  Write(Heap(8), "two");
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 3).ok());
    Write(Heap(0), "ONE");
    tx->Commit();
    ASSERT_TRUE(tx->Save(Heap(8), 3).ok());
    Write(Heap(8), "TWO");
  }  // rolls back only what was saved after the commit
  EXPECT_EQ(Read(Heap(0), 3), "ONE");
  EXPECT_EQ(Read(Heap(8), 3), "two");
}

TEST_F(UndoLogTest, FullLaneIsResourceExhaustedAndLogsNothing) {
  const size_t cap = log_->LaneCapacity();
  ASSERT_GT(cap, 4096u);
  std::vector<char> big(cap + 64, 'o');
  persister_->Copy(Heap(0), big.data(), big.size());
  std::vector<char> image;
  {
    auto tx = log_->Begin();
    Status s = tx->Save(Heap(0), cap + 1);
    EXPECT_TRUE(s.IsResourceExhausted()) << s.ToString();
    ASSERT_TRUE(tx->Save(Heap(0), 100).ok());
    s = tx->Save(Heap(200), cap);  // fits alone, not after the first entry
    EXPECT_TRUE(s.IsResourceExhausted()) << s.ToString();
    persister_->Zero(Heap(0), cap + 64);
    image = Image();
  }
  // Only the 100 bytes were logged: recovery restores exactly those.
  std::unique_ptr<Pool> crashed = FromImage(image);
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*crashed, *persister_, &recovered).ok());
  EXPECT_EQ(Read(crashed->heap(), 100), std::string(100, 'o'));
  EXPECT_EQ(crashed->heap()[100], 0);
  EXPECT_EQ(crashed->heap()[300], 0);
  // A whole-lane save fits a fresh transaction.
  auto tx = log_->Begin();
  EXPECT_TRUE(tx->Save(Heap(0), cap).ok());
  tx->Commit();
}

TEST_F(UndoLogTest, RangesOutsideRootAndHeapAreRejected) {
  auto tx = log_->Begin();
  char local[8] = {};
  EXPECT_TRUE(tx->Save(local, sizeof(local)).IsInvalidArgument());
  EXPECT_TRUE(tx->Save(pool_->base(), 8).IsInvalidArgument());       // pool header
  EXPECT_TRUE(tx->Save(pool_->log_area(), 8).IsInvalidArgument());   // the log itself
  EXPECT_TRUE(tx->Save(pool_->base() + pool_->size() - 4, 8).IsInvalidArgument());
  EXPECT_TRUE(tx->Save(Heap(0), 0).ok());  // nothing to save
}

TEST_F(UndoLogTest, BeginWaitsForAFreeLane) {
  std::vector<std::unique_ptr<UndoLog::Tx>> held;
  for (int i = 0; i < 16; ++i) held.push_back(log_->Begin());  // every lane
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto tx = log_->Begin();
    got = true;
  });
  held.pop_back();  // frees a lane: the waiter proceeds
  waiter.join();
  EXPECT_TRUE(got);
}

TEST_F(UndoLogTest, ManyThreadsShareTheLanes) {
  constexpr int kThreads = 24;  // more threads than lanes
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char* mine = Heap(t * 64);
      for (int r = 0; r < kRounds; ++r) {
        auto tx = log_->Begin();
        if (!tx->Save(mine, 8).ok()) {
          ADD_FAILURE() << "save failed";
          return;
        }
        const uint64_t v = (uint64_t{static_cast<unsigned>(t)} << 32) | r;
        persister_->Store(reinterpret_cast<uint64_t*>(mine), v);
        if (r % 2 == 0) {
          persister_->Persist(mine, 8);
          tx->Commit();
        }  // odd rounds roll back to the previous (even) round's value
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(*reinterpret_cast<uint64_t*>(Heap(t * 64)),
              (uint64_t{static_cast<unsigned>(t)} << 32) | (kRounds - 2));
  }
}

TEST_F(UndoLogTest, DamagedLogIsCorruptionAndTouchesNothing) {
  Write(Heap(0), "keep");
  std::vector<char> image;
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 4).ok());
    Write(Heap(0), "KEEP");
    image = Image();
  }
  const uint64_t log = pool_->header().log_offset;
  // The lane this Tx used is the first one handed out; find it by its non-zero count.
  uint64_t lane_count_at = 0;
  for (uint64_t off = log + 64; off < log + pool_->log_size(); off += 64) {
    if (*reinterpret_cast<uint64_t*>(&image[off]) == 1) {
      lane_count_at = off;
      break;
    }
  }
  ASSERT_NE(lane_count_at, 0u);
  auto recover_with = [&](uint64_t at, uint64_t value) {
    std::vector<char> bad = image;
    std::memcpy(&bad[at], &value, 8);
    std::unique_ptr<Pool> p = FromImage(bad);
    std::unique_ptr<UndoLog> recovered;
    Status s = UndoLog::Recover(*p, *persister_, &recovered);
    // A failed recovery must not write; a good one restores the old bytes.
    EXPECT_EQ(Read(p->heap(), 4), s.ok() ? "keep" : "KEEP");
    return s;
  };
  const uint64_t entry = lane_count_at + 64;
  EXPECT_TRUE(recover_with(lane_count_at, 1ull << 40).IsCorruption());  // count
  EXPECT_TRUE(recover_with(lane_count_at, 2).IsCorruption());  // a second, empty entry
  EXPECT_TRUE(recover_with(entry, 0).IsCorruption());          // offset into the header
  EXPECT_TRUE(recover_with(entry, pool_->size()).IsCorruption());  // past the pool
  EXPECT_TRUE(recover_with(entry + 8, 1ull << 30).IsCorruption());  // length past the lane
  EXPECT_TRUE(recover_with(entry + 16, 12345).IsCorruption());      // checksum
  EXPECT_TRUE(recover_with(log, 0).IsCorruption());                 // log header magic
  // The untouched image recovers.
  Status ok = recover_with(log + 64 * 1000 + 8, 0);
  EXPECT_TRUE(ok.ok()) << ok.ToString();
}

TEST_F(UndoLogTest, UnformattedLogIsCorruption) {
  std::unique_ptr<Pool> raw;
  ASSERT_TRUE(Pool::CreateDram("test", 8 << 20, &raw).ok());
  std::unique_ptr<UndoLog> log;
  EXPECT_TRUE(UndoLog::Recover(*raw, *persister_, &log).IsCorruption());
}

// Power failures at every fence (and sampled stores) of a transaction: whatever image a
// crash leaves, Recover yields all old bytes or all new ones, and the new ones only once
// Commit has returned.
class UndoLogCrashTest : public ::testing::TestWithParam<bool> {};

TEST_P(UndoLogCrashTest, TransactionIsAllOrNothingAtEveryCrashPoint) {
  const bool commit = GetParam();
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::CreateDram("test", 4 << 20, &pool).ok());
  CrashSim sim(pool->base(), pool->size(), PersistMode::kAdr);
  PersistConfig config;
  config.observer = &sim;
  std::unique_ptr<Persister> p, plain;
  ASSERT_TRUE(Persister::Make(config, &p).ok());
  ASSERT_TRUE(Persister::Make(PersistConfig{}, &plain).ok());
  std::unique_ptr<UndoLog> log;
  ASSERT_TRUE(UndoLog::Format(*pool, *p, &log).ok());

  struct Range {
    uint64_t offset;
    size_t len;
  };
  const std::vector<Range> ranges = {{pool->heap_offset(), 100},
                                     {pool->heap_offset() + 4096 + 8, 24},
                                     {kRootOffset + 64, 8}};
  auto fill = [&](char c) {
    for (const Range& r : ranges) p->Zero(pool->At<char>(r.offset), r.len);
    for (const Range& r : ranges) {
      std::string bytes(r.len, c);
      p->Copy(pool->At<char>(r.offset), bytes.data(), r.len);
      p->Flush(pool->At<char>(r.offset), r.len);
    }
    p->Fence();
  };
  fill('o');
  // 0: all old, 1: all new, -1: mixed.
  auto classify = [&](const Pool& img) {
    bool all_old = true, all_new = true;
    for (const Range& r : ranges) {
      const std::string got(img.At<char>(r.offset), r.len);
      all_old &= got == std::string(r.len, 'o');
      all_new &= got == std::string(r.len, 'n');
    }
    return all_old ? 0 : all_new ? 1 : -1;
  };

  enum Phase { kWorking, kCommitting, kCommitted } phase = kWorking;
  std::mt19937_64 rng(commit ? 11 : 12);
  int images = 0;
  sim.SetHook(
      [&](CrashSim& s, CrashSim::Event) {
        for (auto kind : {CrashSim::ImageKind::kNone, CrashSim::ImageKind::kAll,
                          CrashSim::ImageKind::kRandom, CrashSim::ImageKind::kRandom}) {
          std::unique_ptr<Pool> img;
          ASSERT_TRUE(s.MakePool(kind, rng, "test", &img).ok());
          std::unique_ptr<UndoLog> recovered;
          Status st = UndoLog::Recover(*img, *plain, &recovered);
          ASSERT_TRUE(st.ok()) << st.ToString();
          const int state = classify(*img);
          ASSERT_NE(state, -1) << "torn transaction after recovery";
          if (phase == kWorking || !commit) {
            ASSERT_EQ(state, 0);
          }
          if (phase == kCommitted) {
            ASSERT_EQ(state, 1);
          }
          // Idempotent: recovering the recovered image changes nothing.
          ASSERT_TRUE(UndoLog::Recover(*img, *plain, &recovered).ok());
          ASSERT_EQ(classify(*img), state);
          ++images;
        }
      },
      0.2, 5);
  {
    auto tx = log->Begin();
    for (const Range& r : ranges) ASSERT_TRUE(tx->Save(pool->At<char>(r.offset), r.len).ok());
    fill('n');
    if (commit) {
      phase = kCommitting;
      tx->Commit();
      phase = kCommitted;
    }
  }  // without Commit: the destructor rolls back, crash points included
  sim.CrashNow();
  sim.SetHook(nullptr, 0, 0);
  EXPECT_EQ(classify(*pool), commit ? 1 : 0);
  EXPECT_GT(images, 20);
  EXPECT_TRUE(sim.FindBypass().ok());
}

INSTANTIATE_TEST_SUITE_P(CommitOrRollBack, UndoLogCrashTest, ::testing::Bool());

}  // namespace
}  // namespace pmhash::pm
