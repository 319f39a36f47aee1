#include "common/locks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace pmhash {

TEST(RwSpinLock, WritersExcludeEachOtherAndReaders) {
  RwSpinLock mu;
  // Guarded by mu; atomic only so that each step is a real store a reader could see.
  std::atomic<int64_t> counter{0};
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        if (t % 2 == 0) {
          mu.lock();
          HeldLock<RwSpinLock> held(mu, LockMode::kExclusive);
          counter.fetch_add(1, std::memory_order_relaxed);  // odd in between: a reader
          counter.fetch_add(1, std::memory_order_relaxed);  // must never see it
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
  EXPECT_EQ(counter, 2 * 20000 * 2);
}

TEST(RwSpinLock, ReadersShare) {
  RwSpinLock mu;
  mu.lock_shared();
  mu.lock_shared();  // a second reader does not wait
  mu.unlock_shared();
  mu.unlock_shared();
  mu.lock();  // and a writer gets in once they are gone
  mu.unlock();
}

}  // namespace pmhash
