#include "pm/undo_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "util/hash.h"
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

// Where lane i's state word and first entry are (undo_log.cc's layout), and its state.
struct LaneAt {
  uint64_t state, entry;
};
LaneAt LaneOf(const Pool& pool, uint32_t lane) {
  const uint64_t log = pool.header().log_offset;
  const uint64_t lane_size = *pool.At<uint64_t>(log + 16);
  const uint64_t at = log + 64 + lane * lane_size;
  return {at, at + 64};
}
uint64_t Sealed(uint32_t lane, uint32_t seq, uint64_t count) {
  return SealWord(uint64_t{seq} << 16 | count, lane);
}

// The lane every test's first transaction takes.
constexpr uint32_t kFirstLane = 0;

// Recovers `image` with 8 bytes at `at` replaced by `value`: a failed recovery must leave
// the pool as it was (the first `n` heap bytes still read `unchanged`).
Status RecoverWith(const std::vector<char>& image, uint64_t at, uint64_t value,
                   const std::string& unchanged, Persister& persister) {
  std::vector<char> bad = image;
  std::memcpy(&bad[at], &value, 8);
  std::unique_ptr<Pool> p;
  EXPECT_TRUE(Pool::FromImage(bad.data(), bad.size(), "test", &p).ok());
  std::unique_ptr<UndoLog> recovered;
  Status s = UndoLog::Recover(*p, persister, &recovered);
  if (!s.ok()) {
    EXPECT_EQ(std::string(p->heap(), unchanged.size()), unchanged) << "a failed recovery wrote";
    EXPECT_EQ(std::memcmp(p->base(), bad.data(), bad.size()), 0) << "a failed recovery wrote";
  }
  return s;
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
  const LaneAt lane = LaneOf(*pool_, kFirstLane);
  const uint64_t entry = lane.entry;
  uint64_t word;
  std::memcpy(&word, &image[lane.state], 8);
  ASSERT_EQ(word, Sealed(kFirstLane, 1, 1)) << "the first transaction of a new log";
  auto expect_corruption = [&](uint64_t at, uint64_t value, const std::string& fragment) {
    Status s = RecoverWith(image, at, value, "KEEP", *persister_);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
  };
  const std::string lane_at = "undo log lane 0: its state word at pool offset " +
                              std::to_string(lane.state);
  expect_corruption(lane.state, 1, lane_at + " fails its check");  // a raw count
  expect_corruption(lane.state, word ^ (uint64_t{0xff} << 40), lane_at + " fails its check");
  expect_corruption(lane.state, Sealed(kFirstLane, 0, 0), "names transaction 0");
  expect_corruption(lane.state, Sealed(kFirstLane + 1, 1, 1), "fails its check");  // lane 1's
  expect_corruption(lane.state, Sealed(kFirstLane, 1, 2),
                    "entry 1 (pool offset " + std::to_string(entry + 40) +
                        ") belongs to transaction 0 (entry 0), not to the lane's open "
                        "transaction 1");
  expect_corruption(lane.state, Sealed(kFirstLane, 1, 0xffff), "entry 1");
  expect_corruption(lane.state, Sealed(kFirstLane, 2, 1), "belongs to transaction 1");
  expect_corruption(entry, 0, "outside the pool's root area and heap");  // the header
  expect_corruption(entry, pool_->size(), "outside");                    // past the pool
  expect_corruption(entry + 8, 1ull << 30, "past the end of the lane");
  expect_corruption(entry + 16, uint64_t{7} << 32 | 1, "belongs to transaction 1 (entry 7)");
  expect_corruption(entry + 24, 12345, "entry 0 (pool offset " + std::to_string(entry) +
                                           ") checksum mismatch");
  uint64_t old_bytes;
  std::memcpy(&old_bytes, &image[entry + 32], 8);
  expect_corruption(entry + 32, old_bytes ^ 0x100, "checksum mismatch");  // the saved bytes
  expect_corruption(pool_->header().log_offset, 0, "bad magic");          // log header
  // The untouched image recovers, and retires the lane as transaction 2's.
  std::unique_ptr<Pool> p = FromImage(image);
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*p, *persister_, &recovered).ok());
  EXPECT_EQ(Read(p->heap(), 4), "keep");
  EXPECT_EQ(*p->At<uint64_t>(lane.state), Sealed(kFirstLane, 2, 0));
}

// Guards issue 13's "an undo lane can replay a stale entry": in an idle pool, setting a
// lane's entry count to 1 made recovery replay an old, committed entry silently.
TEST_F(UndoLogTest, IdleLaneWithACountIsCorruptionNotAReplay) {
  Write(Heap(0), "before");
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 6).ok());
    Write(Heap(0), "after!");
    persister_->Persist(Heap(0), 6);
    tx->Commit();
  }
  const std::vector<char> idle = Image();
  const LaneAt lane = LaneOf(*pool_, kFirstLane);
  // The attack on the old format: a count of 1 written into the lane's word.
  Status s = RecoverWith(idle, lane.state, 1, "after!", *persister_);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("undo log lane 0"), std::string::npos) << s.ToString();
  // Even a well-sealed state that counts the committed entry does not replay it: the
  // entry belongs to transaction 1, and the lane's open transaction is 2.
  s = RecoverWith(idle, lane.state, Sealed(kFirstLane, 2, 1), "after!", *persister_);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("entry 0 (pool offset " + std::to_string(lane.entry) +
                             ") belongs to transaction 1 (entry 0), not to the lane's open "
                             "transaction 2: a stale or damaged entry"),
            std::string::npos)
      << s.ToString();
  // As it was, the idle log recovers to the committed bytes.
  EXPECT_TRUE(RecoverWith(idle, lane.state, Sealed(kFirstLane, 2, 0), "", *persister_).ok());
}

// Entries of an older transaction lie beyond the open one's in the lane: a state that
// counts them is Corruption; the true state replays only the open transaction's.
TEST_F(UndoLogTest, EntriesOfAnOlderTransactionAreNeverReplayed) {
  Write(Heap(0), "aaaa");
  Write(Heap(64), "bbbb");
  std::vector<char> image;
  {
    auto tx = log_->Begin();
    ASSERT_TRUE(tx->Save(Heap(0), 4).ok());
    ASSERT_TRUE(tx->Save(Heap(64), 4).ok());
    Write(Heap(0), "AAAA");
    Write(Heap(64), "BBBB");
    tx->Commit();  // transaction 1: two entries, retired
    ASSERT_TRUE(tx->Save(Heap(0), 4).ok());  // transaction 2: one entry, open at the crash
    Write(Heap(0), "XXXX");
    image = Image();
  }
  const LaneAt lane = LaneOf(*pool_, kFirstLane);
  uint64_t word;
  std::memcpy(&word, &image[lane.state], 8);
  ASSERT_EQ(word, Sealed(kFirstLane, 2, 1));
  Status s = RecoverWith(image, lane.state, Sealed(kFirstLane, 2, 2), "XXXX", *persister_);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("entry 1 (pool offset " + std::to_string(lane.entry + 40) +
                             ") belongs to transaction 1 (entry 1)"),
            std::string::npos)
      << s.ToString();
  std::unique_ptr<Pool> p = FromImage(image);
  std::unique_ptr<UndoLog> recovered;
  ASSERT_TRUE(UndoLog::Recover(*p, *persister_, &recovered).ok());
  EXPECT_EQ(Read(p->heap(), 4), "AAAA");       // transaction 2 rolled back
  EXPECT_EQ(Read(p->heap() + 64, 4), "BBBB");  // transaction 1 kept
  EXPECT_EQ(*p->At<uint64_t>(lane.state), Sealed(kFirstLane, 3, 0));
  // The recovered log's next transaction on that lane is 3.
  auto tx = recovered->Begin();
  ASSERT_TRUE(tx->Save(p->heap(), 4).ok());
  EXPECT_EQ(*p->At<uint64_t>(lane.state), Sealed(kFirstLane, 3, 1));
  tx->Commit();
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
