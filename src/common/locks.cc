#include "common/locks.h"

#include <immintrin.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace pmhash {

void SpinBackoff(int attempt) {
  if (attempt < 64) {
    _mm_pause();
  } else {
    std::this_thread::yield();
  }
}

bool RegisterMembarrier() {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

void FullFence() {
  thread_local std::atomic<uint64_t> word{0};
  word.fetch_add(0, std::memory_order_seq_cst);
}

void HeavyFence() {
  if (!HaveMembarrier() || syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
    FullFence();
  }
}

void RwSpinLock::LockWaiting() {
  for (int attempt = 0;; ++attempt) {
    uint32_t s = state_.load(std::memory_order_relaxed);
    if ((s & ~kWaiting) == 0) {  // no reader, no writer
      if (state_.compare_exchange_weak(s, kWriter, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return;
      }
      continue;
    }
    if ((s & kWaiting) == 0) state_.fetch_or(kWaiting, std::memory_order_relaxed);
    SpinBackoff(attempt);
  }
}

void RwSpinLock::lock_shared() {
  for (int attempt = 0;; ++attempt) {
    uint32_t s = state_.load(std::memory_order_relaxed);
    if ((s & (kWriter | kWaiting)) == 0 &&
        state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
    SpinBackoff(attempt);
  }
}

}  // namespace pmhash
