#include "pm/alloc_faults.h"

namespace pmhash::pm {

void AllocationFaults::Arm(uint64_t n, bool sticky, size_t min_size) {
  seen_.store(0, std::memory_order_relaxed);
  failed_.store(0, std::memory_order_relaxed);
  sticky_.store(sticky, std::memory_order_relaxed);
  min_size_.store(min_size, std::memory_order_relaxed);
  fail_at_.store(n, std::memory_order_release);
}

bool AllocationFaults::Fail(size_t size) {
  if (size < min_size_.load(std::memory_order_relaxed)) return false;
  const uint64_t at = fail_at_.load(std::memory_order_acquire);
  const uint64_t i = seen_.fetch_add(1, std::memory_order_acq_rel) + 1;
  const bool fail = at != 0 && (i == at || (i > at && sticky_.load(std::memory_order_relaxed)));
  if (fail) failed_.fetch_add(1, std::memory_order_acq_rel);
  return fail;
}

}  // namespace pmhash::pm
