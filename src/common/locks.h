// Locks shared by the engines.
#pragma once

#include <atomic>
#include <cstdint>

namespace pmhash {

// Spins politely, then gives the core away (writers may hold a lock across flushes and
// fences, hundreds of nanoseconds each).
void SpinBackoff(int attempt);

// A reader-writer spin lock of one word that lets a waiting writer in before new readers.
// Not std::shared_mutex: a resize holds every stripe of a table at once, and pthread
// locks held by the thousand (and ThreadSanitizer's 64-lock limit) are not meant for
// that. Satisfies Lockable and SharedLockable.
class RwSpinLock {
 public:
  void lock();
  void unlock() { state_.fetch_and(~kWriter, std::memory_order_release); }
  void lock_shared();
  void unlock_shared() { state_.fetch_sub(1, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  static constexpr uint32_t kWaiting = 1u << 30;  // a writer waits: no new readers
  std::atomic<uint32_t> state_{0};
};

// Asymmetric fences (Linux membarrier): a frequent reader orders its store before a later
// load with LightFence, a compiler barrier only; a rare writer calls HeavyFence, which
// makes every running thread of the process execute a full fence. Together they order
// like a pair of seq_cst fences, and the reader's hot path has no locked instruction.
// Where membarrier is unavailable both are full fences.
bool HaveMembarrier();
inline void LightFence() {
  if (HaveMembarrier()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}
void HeavyFence();

enum class LockMode : uint8_t { kShared, kExclusive };

// Releases, on scope exit, a lock the caller already took in `mode`.
template <typename Lock>
class HeldLock {
 public:
  HeldLock(Lock& mu, LockMode mode) : mu_(mu), mode_(mode) {}
  ~HeldLock() {
    if (mode_ == LockMode::kExclusive) {
      mu_.unlock();
    } else {
      mu_.unlock_shared();
    }
  }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;

 private:
  Lock& mu_;
  LockMode mode_;
};

}  // namespace pmhash
