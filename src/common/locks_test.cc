#include "common/locks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace pmhash {

// `writers` threads add 2 to a counter in two steps (a load, then two plain stores: two
// writers inside at once lose an update), `readers` threads check that they never see it
// odd. Run with several writers, so that writers queue behind a holder and set kWaiting
// while it holds the lock, which unlock's plain store may drop (fairness only).
void ExpectWritersExcludeEachOtherAndReaders(int writers, int readers) {
  RwSpinLock mu;
  // Guarded by mu; atomic only so that each step is a real store a reader could see.
  std::atomic<int64_t> counter{0};
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < writers + readers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        if (t < writers) {
          mu.lock();
          HeldLock<RwSpinLock> held(mu, LockMode::kExclusive);
          const int64_t c = counter.load(std::memory_order_relaxed);
          counter.store(c + 1, std::memory_order_relaxed);  // odd in between: a reader
          counter.store(c + 2, std::memory_order_relaxed);  // must never see it
        } else {
          mu.lock_shared();
          HeldLock<RwSpinLock> held(mu, LockMode::kShared);
          if (counter.load(std::memory_order_relaxed) % 2 != 0) torn = true;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(torn.load());
  EXPECT_EQ(counter, 2 * 20000 * writers);
}

TEST(RwSpinLock, WritersExcludeEachOtherAndReaders) {
  ExpectWritersExcludeEachOtherAndReaders(2, 2);
}

TEST(RwSpinLock, ContendedWritersReleasedByAPlainStore) {
  ExpectWritersExcludeEachOtherAndReaders(3, 1);
}

// Waits, boundedly, for done(): false after kSpinBound polls instead of hanging, so a
// lock that wrongly excludes a reader fails the test rather than stalling the suite.
// (Each poll yields; on a correct lock the wait is microseconds.)
constexpr int kSpinBound = 1'000'000;
template <typename Done>
bool SpinUntil(Done done) {
  for (int i = 0; i < kSpinBound; ++i) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

// Two readers hold the lock at the same time: each, while holding it, waits for the other
// to be inside too (`inside` reaches 2). With a lock that let readers in one at a time,
// each would give up after kSpinBound polls and the test fails. A writer started while
// they hold it stays out until both have left.
TEST(RwSpinLock, ReadersShare) {
  RwSpinLock mu;
  std::atomic<int> inside{0};
  std::atomic<bool> writer_in{false};
  std::atomic<bool> writer_started{false};
  std::atomic<int> readers_saw_both{0};
  std::atomic<int> readers_saw_writer{0};
  std::atomic<int> readers_done{0};
  auto reader = [&] {
    mu.lock_shared();
    inside.fetch_add(1);
    if (SpinUntil([&] { return inside.load() == 2; })) readers_saw_both.fetch_add(1);
    // Both readers hold the lock now (or the test already failed): a writer must wait.
    if (SpinUntil([&] { return writer_started.load(); })) {
      for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // give it a chance
    }
    if (writer_in.load()) readers_saw_writer.fetch_add(1);
    // Leave only when the other reader has looked too, so neither sees a half-empty lock.
    readers_done.fetch_add(1);
    (void)SpinUntil([&] { return readers_done.load() == 2; });
    inside.fetch_sub(1);
    mu.unlock_shared();
  };
  std::thread r1(reader), r2(reader);
  // Start the writer once both readers are in (the readers' own checks are the test).
  (void)SpinUntil([&] { return inside.load() == 2; });
  int inside_when_writer_entered = -1;
  std::thread writer([&] {
    writer_started = true;
    mu.lock();
    writer_in = true;
    inside_when_writer_entered = inside.load();
    mu.unlock();
  });
  r1.join();
  r2.join();
  writer.join();
  EXPECT_EQ(readers_saw_both.load(), 2) << "the readers never held the lock at once";
  EXPECT_EQ(readers_saw_writer.load(), 0) << "a writer got in while readers held the lock";
  EXPECT_TRUE(writer_in.load());
  EXPECT_EQ(inside_when_writer_entered, 0) << "the writer got in beside readers";
}

TEST(VersionedRwLock, AReadOverlappingAWriterFailsValidation) {
  VersionedRwLock mu;
  const uint64_t quiet = mu.ReadBegin();
  EXPECT_EQ(quiet % 2, 0u);
  EXPECT_TRUE(mu.ReadValidate(quiet)) << "nothing happened: the read stands";
  mu.lock_shared();  // readers under the lock do not move the version
  mu.unlock_shared();
  EXPECT_TRUE(mu.ReadValidate(quiet));
  mu.lock();
  const uint64_t during = mu.ReadBegin();
  EXPECT_EQ(during % 2, 1u) << "a writer inside shows as an odd version";
  EXPECT_FALSE(mu.ReadValidate(quiet)) << "a read that began before the writer must fail";
  mu.unlock();
  EXPECT_FALSE(mu.ReadValidate(quiet)) << "...and after it left";
  EXPECT_FALSE(mu.ReadValidate(during));
  const uint64_t after = mu.ReadBegin();
  EXPECT_EQ(after % 2, 0u);
  EXPECT_TRUE(mu.ReadValidate(after));
}

// The store-buffer litmus test: each side stores its flag, then reads the other's. With
// LightFence on one side and HeavyFence on the other, at least one side must see the
// other's store; with compiler barriers alone x86 lets both read 0 (stores wait in the
// store buffer while the later load goes ahead: about 4% of rounds here when HeavyFence
// was replaced by a compiler barrier). SmartHT's filter readers rely on it never
// happening.
TEST(AsymmetricFences, StoreThenLoadIsOrderedOnBothSides) {
  constexpr int kRounds = 5000;  // compiler barriers alone fail about 4% of rounds
  struct alignas(64) Flag {
    std::atomic<int> v{0};
  };
  Flag x, y, barrier;
  int reader_saw[kRounds], writer_saw[kRounds];
  // Both sides leave the barrier of round r together, so their store-load pairs race.
  auto meet = [&](int r) {
    barrier.v.fetch_add(1, std::memory_order_acq_rel);
    while (barrier.v.load(std::memory_order_acquire) < 2 * (r + 1)) {
    }
  };
  std::thread reader([&] {
    for (int r = 0; r < kRounds; ++r) {
      meet(2 * r);
      x.v.store(1, std::memory_order_relaxed);
      LightFence();
      reader_saw[r] = y.v.load(std::memory_order_relaxed);
      meet(2 * r + 1);
    }
  });
  int both_zero = 0;
  for (int r = 0; r < kRounds; ++r) {
    meet(2 * r);
    y.v.store(1, std::memory_order_relaxed);
    HeavyFence();
    writer_saw[r] = x.v.load(std::memory_order_relaxed);
    meet(2 * r + 1);  // the reader's result of round r is in; reset for the next round
    if (reader_saw[r] == 0 && writer_saw[r] == 0) ++both_zero;
    x.v.store(0, std::memory_order_relaxed);
    y.v.store(0, std::memory_order_relaxed);
  }
  reader.join();
  EXPECT_EQ(both_zero, 0) << "membarrier available: " << HaveMembarrier();
}

}  // namespace pmhash
