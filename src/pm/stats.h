// Per-thread persistence counters and per-thread model state (src/pm/media.h holds the
// shared media and cache models).
//
// Every Persister owns a CounterTable: one cache-line-aligned slot per live thread, so
// counting never shares a line between threads. A slot is written only by its thread
// (relaxed load + store, no locked instruction) and read by anyone summing the table.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "pm/media.h"
#include "pmhash/index.h"

namespace pmhash::pm {

// a - b, field by field (the counters of a span from the totals at its ends).
PersistCounters CountersMinus(const PersistCounters& a, const PersistCounters& b);

// Requests of PM lines by Persister::Prefetch, so that a later read of the same media
// line waits only for the emulated read latency still left (read latency emulation).
struct PrefetchLog {
  static constexpr size_t kSize = 16;
  uint64_t tag[kSize] = {};       // media line (address / 256) + 1; 0 = empty
  uint64_t requested[kSize] = {};  // TSC when it was asked for
  uint32_t next = 0;
};

// Lines a thread stored (eadr) that the cache model has not taken yet. It takes them in
// batches: its locks are locked instructions, which wait until the thread's earlier stores
// have drained (a store to a line not in the CPU cache waits for that line), so a lock
// after every store would make every store synchronous; one batch pays that once.
struct StoredLines {
  static constexpr size_t kSize = 32;
  uintptr_t line[kSize];
  uint32_t size = 0;
};

// Reads a thread noted (Persister::NoteRead) that its counters have not taken yet. They
// are counted in batches: counting each one as it is noted (de-duplicating it within its
// operation) puts dozens of instructions between one lookup's PM load and the next's, so
// that the CPU no longer overlaps them (measured: lookups of a table in DRAM up to 2x
// slower); appending costs a few stores. Counted when the batch is full, at
// Persister::DrainMedia (every thread's: a quiet point), and by Persister::Totals (the
// calling thread's).
struct NotedReads {
  static constexpr size_t kSize = 64;
  uint64_t first[kSize], last[kSize];  // 64-byte line numbers (address / 64)
  uint32_t op[kSize];                  // the operation each belongs to (op_seq then)
  uint32_t size = 0;
  uint32_t op_seq = 0;         // operations begun (BeginOp)
  uint32_t counted_op = ~0u;   // the operation CounterSlot::op_reads holds
};

// One thread's counters, and its state in the Persister's models. Relaxed atomics so that
// summing from another thread is not a data race; only the owning thread writes.
struct alignas(64) CounterSlot {
  std::atomic<uint64_t> flushes{0}, fences{0}, bytes_stored{0}, media_writes{0},
      lines_read{0}, redundant_flushes{0}, redundant_fences{0}, write_backs{0},
      lines_written{0}, media_reads{0}, media_rmw_reads{0}, user_bytes{0}, ops{0},
      write_waits{0}, read_waits{0}, reads_hidden{0};
  OpReads op_reads;      // lines the thread's current (or last counted) operation read
  NotedReads noted;      // reads noted, not yet counted
  PrefetchLog prefetch;  // its recent Prefetch requests
  StoredLines stored;    // eadr: stored, not yet in the cache model
  bool in_atomic = false;  // inside Persister::BeginAtomic .. EndAtomic

  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

class CounterTable {
 public:
  static constexpr size_t kMaxThreads = 256;

  CounterTable();
  // This thread's slot; nullptr if more than kMaxThreads threads are alive (then the
  // thread is not counted and its reads are not charged emulated latency; documented in
  // docs/architecture.md).
  CounterSlot* Local() {
    size_t id = ThisThreadId();
    return id < kMaxThreads ? &slots_[id] : nullptr;
  }
  PersistCounters Sum() const;
  // Every slot, live thread or not (for a quiet point: no thread may use its slot).
  CounterSlot* begin() { return &slots_[0]; }
  CounterSlot* end() { return &slots_[kMaxThreads]; }

  // A small dense id for the calling thread, recycled when the thread exits. Inline and
  // constant-initialized, so that a hot path pays one thread-local load and a compare
  // (a dynamically initialized thread_local checks its guard on every access).
  static size_t ThisThreadId() {
    const size_t id = this_thread_id_;
    return id != kNoThreadId ? id : AcquireThreadId();
  }
  // The same without the call: kNoThreadId before the thread's first ThisThreadId.
  static size_t KnownThreadId() { return this_thread_id_; }
  static constexpr size_t kNoThreadId = ~size_t{0};

 private:
  __attribute__((noinline)) static size_t AcquireThreadId();  // first call on a thread
  static inline thread_local size_t this_thread_id_ = kNoThreadId;
  std::unique_ptr<CounterSlot[]> slots_;
};

}  // namespace pmhash::pm
