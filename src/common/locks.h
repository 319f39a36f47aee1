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
  // The free lock's CAS inline (every writer of every engine takes one), the wait out of
  // line.
  void lock() {
    if (try_lock()) [[likely]] return;
    LockWaiting();
  }
  // Takes the lock exclusively if no one holds it; never waits (a holder of other locks
  // may try one out of order without risking a deadlock).
  bool try_lock() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    return (s & ~kWaiting) == 0 &&
           state_.compare_exchange_strong(s, kWriter, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  // A plain release store, not a locked RMW: after a writer's persist, a locked
  // instruction would wait for the write-back and hold back the next operation's misses.
  // Only waiting writers change the word while it is held (setting kWaiting); a bit lost
  // to this load-store pair costs fairness only (the waiter sets it again if it must).
  void unlock() {
    state_.store(state_.load(std::memory_order_relaxed) & ~kWriter, std::memory_order_release);
  }
  void lock_shared();
  void unlock_shared() { state_.fetch_sub(1, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  static constexpr uint32_t kWaiting = 1u << 30;  // a writer waits: no new readers
  void LockWaiting();
  std::atomic<uint32_t> state_{0};
};

// RwSpinLock plus a version for optimistic readers (a seqlock beside the lock): a writer
// makes the version odd when it takes the lock exclusively and even again just before it
// lets go, so a reader that saw the same even version before and after its reads read a
// state no writer touched meanwhile.
// The contract that makes this hold without fences (which ThreadSanitizer cannot model):
// writers store what optimistic readers read with release stores (Persister::Store),
// which order the odd version before them; readers load it with acquire loads, which
// order the final version load after them. On x86 both are plain moves. Readers must
// expect anything, since a writer may be half-way: bounds-check every pointer followed.
class VersionedRwLock {
 public:
  void lock() {
    mu_.lock();
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return true;
  }
  void unlock() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    mu_.unlock();
  }
  void lock_shared() { mu_.lock_shared(); }
  void unlock_shared() { mu_.unlock_shared(); }

  // The version to validate against; odd means a writer is in (read under the lock then).
  uint64_t ReadBegin() const { return version_.load(std::memory_order_acquire); }
  bool ReadValidate(uint64_t begin) const {
    return version_.load(std::memory_order_acquire) == begin;
  }

 private:
  RwSpinLock mu_;
  std::atomic<uint64_t> version_{0};
};

// Marks an optimistic read for ThreadSanitizer, whose model has no seqlocks: the reads in
// scope may touch memory a writer is changing or has freed and reused (a stale pointer
// followed before the validation fails), which is harmless because the version check
// discards them, but which TSan would report as a race with that writer's plain copy.
// Synchronization (the acquire loads) is still seen. Nothing in other builds.
#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
class OptimisticReadScope {
 public:
  OptimisticReadScope() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~OptimisticReadScope() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
  OptimisticReadScope(const OptimisticReadScope&) = delete;
  OptimisticReadScope& operator=(const OptimisticReadScope&) = delete;
};
#else
class OptimisticReadScope {
 public:
  OptimisticReadScope() {}  // user-provided: a scope object, not an unused variable
};
#endif

// Asymmetric fences (Linux membarrier): a frequent reader orders its store before a later
// load with LightFence, a compiler barrier only; a rare writer calls HeavyFence, which
// makes every running thread of the process execute a full fence. Together they order
// like a pair of seq_cst fences, and the reader's hot path has no locked instruction.
// Where membarrier is unavailable both are full fences.
// Registers the process for membarrier once, inline after that: LightFence runs on every
// smartht search, where a call to ask was most of its cost.
bool RegisterMembarrier();
inline bool HaveMembarrier() {
  static const bool have = RegisterMembarrier();
  return have;
}
// A full fence as a locked RMW of a thread-private word (what seq_cst fences compile to
// on x86 anyway), so that ThreadSanitizer sees an atomic operation, not a fence it
// cannot model.
void FullFence();
inline void LightFence() {
  if (HaveMembarrier()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    FullFence();
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
