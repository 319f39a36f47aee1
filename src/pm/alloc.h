// Crash-safe allocator of PM blocks.
//
// Its persistent metadata checks itself (layout in alloc.cc): the header and the state
// written at clean shutdown carry checksums, and every chunk-table entry is a sealed word
// (util/hash.h: 48 bits and a CRC-16 in one 8-byte word), so each update stays one
// failure-atomic store while a damaged byte in any entry is Corruption, naming the chunk
// and the entry's pool offset, at Load and at Rebuild.
//
// A block becomes reachable only when the engine persists an 8-byte pointer (pool
// offset) to it. The allocator keeps its fine-grained state (which small units are in use)
// in DRAM and writes it to PM only at clean shutdown; what must be durable at all times is
// the coarse chunk table (which chunk serves which size class, where a large run
// starts), persisted whenever a chunk changes role. After a crash the fine state is
// rebuilt from what the engine reports reachable (Rebuild): a block that was allocated
// but never linked is therefore free again, and so is one that was unlinked and freed.
//
// Sizes: small blocks come in size classes (16 B .. 32 KiB; out-of-line keys/values,
// chained buckets); larger ones are runs of whole chunks (segments, bucket arrays, up to
// the heap size). Alignment: 16 bytes at least, 64 for sizes >= 64, 256 for sizes >= 256,
// 4096 for large runs. Contents of a new block are unspecified: engines initialise it
// through the Persister.
//
// Threads: Allocate, Free, UsableSize, BytesInUse are safe from many threads. Format,
// Load, Rebuild and PersistState are called by one thread while no other uses it. Small
// blocks come from per-thread arenas (AllocatorOptions::arenas).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "pm/alloc_faults.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/regions.h"
#include "pmhash/status.h"

namespace pmhash::pm {

// Allocator tuning that is not part of the on-media format (it may differ at every open).
inline constexpr uint32_t kMaxAllocArenas = 16;
struct AllocatorOptions {
  // Arenas per size class (1 .. kMaxAllocArenas): threads take small blocks from their own
  // arena (assigned round robin), so they seldom wait for each other's lock; a block one
  // thread frees goes back to the arena its chunk belongs to, so another thread gets it
  // only if they share that arena. 1: every thread reuses what any other frees at once.
  uint32_t arenas = 4;
};

class Allocator {
 public:
  // Visits the pool offset of every block the engine can reach.
  using LiveBlockVisitor = std::function<void(uint64_t offset)>;
  using LiveBlockEnumerator = std::function<Status(const LiveBlockVisitor&)>;

  // Formats the heap of a new pool (every block free).
  static Status Format(Pool& pool, Persister& persister, std::unique_ptr<Allocator>* out,
                       const AllocatorOptions& options = {});
  // Attaches after a clean shutdown: loads the state PersistState wrote. Corruption if
  // the allocator metadata fails validation.
  static Status Load(Pool& pool, Persister& persister, std::unique_ptr<Allocator>* out,
                     const AllocatorOptions& options = {});
  // Attaches after a crash: every block is free except those `enumerate` visits.
  // Corruption if a visited offset is not the start of a block the chunk table knows.
  static Status Rebuild(Pool& pool, Persister& persister, const LiveBlockEnumerator& enumerate,
                        std::unique_ptr<Allocator>* out, const AllocatorOptions& options = {});

  virtual ~Allocator() = default;

  // A block of at least `size` bytes (1 .. heap size): its pool offset. ResourceExhausted
  // ("pool full: ...") when no block of that size is left.
  virtual Result<uint64_t> Allocate(size_t size) = 0;
  // Returns a block. The engine must have durably unlinked it first.
  virtual void Free(uint64_t offset) = 0;
  // The usable size of an allocated block.
  virtual size_t UsableSize(uint64_t offset) const = 0;
  // Whether offset is the start of an allocated block (validating pointers read from PM).
  virtual bool IsAllocated(uint64_t offset) const = 0;
  // Bytes in allocated blocks (usable sizes) and the heap's capacity.
  virtual uint64_t BytesInUse() const = 0;
  virtual uint64_t Capacity() const = 0;

  // Writes the fine-grained state to PM and persists it (clean shutdown).
  virtual Status PersistState() = 0;

  // Checks the allocator against the blocks `enumerate` reports reachable (pmhash pool
  // check): the number of blocks reached, or Corruption naming (the first few of) the
  // blocks reached twice, reached but not allocated, or allocated and never reached
  // (leaked), with their pool offsets, and any chunk-table entry in PM that fails its
  // check or disagrees with the allocator's state. Like PersistState, called while no
  // other thread uses the allocator.
  virtual Result<uint64_t> Verify(const LiveBlockEnumerator& enumerate) const = 0;

  // Marks the allocator's metadata (Region::kAllocator): its header and chunk table,
  // checked at every open; the saved state (its checksum and the bitmaps of small
  // chunks), checked only when this allocator was loaded from it (a clean open).
  virtual void DescribeLayout(const RegionVisitor& mark) const = 0;

  // Tests: from now on every Allocate asks `faults` first (null: none). Not owned; it
  // must outlive its use.
  void SetFaults(AllocationFaults* faults) { faults_.store(faults, std::memory_order_release); }

 protected:
  // Whether the allocation of `size` bytes being made must fail (an injected failure).
  bool InjectedFailure(size_t size) {
    AllocationFaults* f = faults_.load(std::memory_order_acquire);
    return f != nullptr && f->Fail(size);
  }

 private:
  std::atomic<AllocationFaults*> faults_{nullptr};
};

}  // namespace pmhash::pm
