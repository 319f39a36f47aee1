// Allocation-failure injection for tests: the seam an Allocator asks before every
// allocation (Allocator::SetFaults, Engine::SetAllocationFaults).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pmhash::pm {

// An Allocator given one (Allocator::SetFaults) asks it before every allocation, and a
// yes fails that allocation as a full pool would (ResourceExhausted, PoolFull: "pool
// full: injected failure ...") before anything changes. Safe from many threads; Arm
// while no allocation is in flight.
class AllocationFaults {
 public:
  // Fails allocation number `n` counted from this call (1: the next one) and, with
  // `sticky`, every one after it too (the pool ran full at that point); 0: none fails.
  // Only allocations of at least `min_size` bytes count and fail (a pool with room left
  // only for smaller blocks). Resets seen() and failed().
  void Arm(uint64_t n, bool sticky, size_t min_size = 0);
  // Allocations counted, and failed, since the last Arm.
  uint64_t seen() const { return seen_.load(std::memory_order_acquire); }
  uint64_t failed() const { return failed_.load(std::memory_order_acquire); }
  // The allocator's question: does this allocation of `size` bytes fail?
  bool Fail(size_t size);

 private:
  std::atomic<uint64_t> fail_at_{0};
  std::atomic<bool> sticky_{false};
  std::atomic<size_t> min_size_{0};
  std::atomic<uint64_t> seen_{0};
  std::atomic<uint64_t> failed_{0};
};

}  // namespace pmhash::pm
