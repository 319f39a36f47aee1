#include "common/locks.h"

#include <immintrin.h>

#include <thread>

namespace pmhash {

void SpinBackoff(int attempt) {
  if (attempt < 64) {
    _mm_pause();
  } else {
    std::this_thread::yield();
  }
}

void RwSpinLock::lock() {
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
