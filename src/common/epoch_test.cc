#include "common/epoch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "pm/stats.h"

namespace pmhash {
namespace {

// Retires one structure; `freed` is set when the reclaimer frees it.
void RetireFlag(EpochReclaimer& r, std::atomic<bool>* freed) {
  r.Retire([freed] { freed->store(true); });
}

TEST(EpochReclaimerTest, AGuardHoldsWhatWasRetiredWhileItWasInside) {
  EpochReclaimer r;
  std::atomic<bool> freed{false};
  {
    EpochReclaimer::Guard guard(r);
    RetireFlag(r, &freed);
    r.Collect();
    EXPECT_FALSE(freed.load()) << "freed under a reader that entered before the retire";
  }
  r.Collect();
  EXPECT_TRUE(freed.load());
  EXPECT_FALSE(r.HasRetired());
}

TEST(EpochReclaimerTest, AQuickStayEntersOnlyOnceTheThreadHasItsId) {
  EpochReclaimer r;
  std::atomic<bool> freed{false};
  std::thread([&] {
    // A new thread: no id yet, so EnterQuickly enters nothing (its caller takes the full
    // way, a Guard) and holds nothing back.
    EXPECT_EQ(r.EnterQuickly(), nullptr);
    RetireFlag(r, &freed);
    r.Collect();
    EXPECT_TRUE(freed.load());
    freed.store(false);
    (void)pm::CounterTable::ThisThreadId();
    EpochReclaimer::Slot* stay = r.EnterQuickly();
    ASSERT_NE(stay, nullptr);
    RetireFlag(r, &freed);
    r.Collect();
    EXPECT_FALSE(freed.load()) << "freed under a quick stay";
    EpochReclaimer::Leave(stay);
    r.Collect();
    EXPECT_TRUE(freed.load());
  }).join();
}

TEST(EpochReclaimerTest, ThreadsBeyondTheSlotsShareOneThatHoldsEverything) {
  // Threads are started and parked until one is given an id beyond the own slots.
  EpochReclaimer r;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> beyond_seen{false};
  std::vector<std::thread> parked;
  for (size_t i = 0; i <= pm::CounterTable::kMaxThreads && !beyond_seen.load(); ++i) {
    std::atomic<bool> started{false};
    parked.emplace_back([&] {
      const bool beyond = pm::CounterTable::ThisThreadId() >= pm::CounterTable::kMaxThreads;
      if (beyond) {
        std::atomic<bool> freed{false};
        {
          EXPECT_EQ(r.EnterQuickly(), nullptr) << "no own slot: nothing to enter quickly";
          EpochReclaimer::Guard guard(r);  // the shared slot
          RetireFlag(r, &freed);
          r.Collect();
          EXPECT_FALSE(freed.load()) << "freed while a shared-slot reader was inside";
        }
        r.Collect();
        EXPECT_TRUE(freed.load());
        beyond_seen.store(true);
      }
      started.store(true);
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
    });
    while (!started.load()) std::this_thread::yield();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (std::thread& t : parked) t.join();
  EXPECT_TRUE(beyond_seen.load());
}

}  // namespace
}  // namespace pmhash
