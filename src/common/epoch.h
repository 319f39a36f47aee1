// Epoch-based reclamation of DRAM structures that readers traverse without a lock (spash's
// directory tables): a reader enters an epoch for the length of one operation; a writer
// that has unlinked a structure retires it, and it is freed once every reader that could
// still hold a pointer to it has left.
//
//   global epoch E (starts at 1); per thread a slot: 0 idle, else the epoch it entered at.
//   Guard:   slot = E (plain store by the owner), LightFence; ... ; slot = 0 (release)
//   Retire:  (after the unlink is visible) tag = E, E = E + 1
//   Collect: HeavyFence, then free every structure whose tag is below every busy slot
//
// Why it holds: a reader that read E after the increment reads the unlinked state (the
// unlink is stored before the increment, and its load of E is an acquire); one that read
// E before it has a slot <= tag, which Collect sees because HeavyFence (membarrier: every
// running thread executes a full fence) makes its slot store visible, or else orders its
// later pointer loads after the unlink. The reader's path has no locked instruction
// (common/locks.h, LightFence / HeavyFence). Collect never waits: it frees what it can and
// keeps the rest for a later call; Drain waits (a quiet point, e.g. Close).
//
// Threads beyond pm::CounterTable::kMaxThreads share one slot that counts its holders
// (atomic RMWs); while any is inside, nothing is freed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/locks.h"
#include "pm/stats.h"

namespace pmhash {

class EpochReclaimer {
 public:
  EpochReclaimer();
  ~EpochReclaimer();  // frees whatever is still retired: no reader may be inside
  EpochReclaimer(const EpochReclaimer&) = delete;
  EpochReclaimer& operator=(const EpochReclaimer&) = delete;

  struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};  // own slot: entered epoch or 0; shared: holders
  };

  // One reader's stay. A thread may nest guards of one reclaimer only through Nested
  // (the inner guard leaves the slot alone).
  class Guard {
   public:
    // Inline, the common case with no call: a thread with its own slot, membarrier
    // available (a search's instructions decide how many searches' misses overlap).
    explicit Guard(EpochReclaimer& r) : slot_(r.TryEnter(pm::CounterTable::ThisThreadId())) {
      if (slot_ == nullptr) [[unlikely]] EnterSlowly(r, pm::CounterTable::ThisThreadId());
    }
    ~Guard() {
      if (shared_) [[unlikely]] {
        slot_->value.fetch_sub(1, std::memory_order_release);
      } else {
        Leave(slot_);
      }
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    // The shared slot (a thread beyond kMaxThreads), or a full fence (no membarrier).
    __attribute__((noinline)) void EnterSlowly(EpochReclaimer& r, size_t id);

    Slot* slot_;
    bool shared_ = false;
  };

  // Guard's common case as a pair of calls, for a path that must keep nothing in memory
  // (a search's first try, where GCC keeps an object with a destructor in the frame): the
  // thread's slot, entered; or nullptr, nothing entered, where Guard would take its slow
  // way (the thread has no id yet or no slot of its own, or no membarrier).
  Slot* EnterQuickly() { return TryEnter(pm::CounterTable::KnownThreadId()); }
  static void Leave(Slot* slot) { slot->value.store(0, std::memory_order_release); }

  // Takes `free` (to run once no reader can reach what it frees): the caller has already
  // made the structure unreachable for readers that enter from now on.
  void Retire(std::function<void()> free);
  // Runs the frees no reader can prevent any more; never waits.
  void Collect();
  // Whether something waits to be freed (a cheap check before Collect).
  bool HasRetired() const { return retired_count_.load(std::memory_order_relaxed) != 0; }
  // Collects until nothing is retired, waiting for readers (no guard of this thread may
  // be open).
  void Drain();

 private:
  // The own slot of thread `id`, entered; nullptr if it has none or membarrier is missing.
  Slot* TryEnter(size_t id) {
    if (id >= pm::CounterTable::kMaxThreads || !light_fence_) return nullptr;
    Slot* slot = &slots_[id];
    slot->value.store(epoch_.load(std::memory_order_acquire), std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // LightFence, membarrier's
    return slot;
  }

  std::atomic<uint64_t> epoch_{1};
  const bool light_fence_ = HaveMembarrier();  // Guard's LightFence is a compiler barrier
  std::unique_ptr<Slot[]> slots_;  // kMaxThreads own slots, then the shared one
  std::mutex mu_;                  // guards retired_
  struct Retired {
    uint64_t tag;
    std::function<void()> free;
  };
  std::vector<Retired> retired_;
  std::atomic<uint64_t> retired_count_{0};
};

}  // namespace pmhash
