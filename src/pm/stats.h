// Per-thread persistence counters and the media-line model.
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

#include "pmhash/index.h"

namespace pmhash::pm {

// Write-combining buffer of an Optane-like device: 64 entries of 256-byte media lines,
// least recently used evicted first. A flushed cache line that falls in a buffered media
// line merges; one that does not takes an entry, which later costs one 256-byte media
// write. We count a media write when an entry is taken (so the figure is exact without
// draining the buffer). Each thread has its own model: the device's buffer is shared, so
// with several threads the figure is a lower bound of the contention the device sees.
class MediaLineModel {
 public:
  static constexpr size_t kEntries = 64;
  static constexpr size_t kLineShift = 8;  // 256-byte media lines

  MediaLineModel();

  // Feeds one flushed cache line; returns true when it costs a new media write.
  bool Touch(uintptr_t address);

 private:
  static constexpr size_t kBuckets = 128;
  static constexpr uint8_t kNil = 0xff;

  size_t Bucket(uint64_t tag) const { return (tag * 0x9E3779B97F4A7C15ull) >> 57; }
  void Unlink(uint8_t e);
  void PushFront(uint8_t e);
  void RemoveFromBucket(uint8_t e);

  uint64_t last_tag_ = ~0ull;  // fast path: the same media line twice in a row
  std::array<uint64_t, kEntries> tag_;
  std::array<uint8_t, kEntries> prev_, next_, chain_;
  std::array<uint8_t, kBuckets> bucket_;
  uint8_t head_ = kNil, tail_ = kNil, used_ = 0;
};

// One thread's counters. Relaxed atomics so that summing from another thread is not a
// data race; only the owning thread writes.
struct alignas(64) CounterSlot {
  std::atomic<uint64_t> flushes{0}, fences{0}, bytes_stored{0}, media_writes{0},
      lines_read{0}, redundant_flushes{0}, redundant_fences{0};
  MediaLineModel media;

  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

class CounterTable {
 public:
  static constexpr size_t kMaxThreads = 256;

  CounterTable();
  // This thread's slot; nullptr if more than kMaxThreads threads are alive (then the
  // thread is not counted; documented in docs/architecture.md).
  CounterSlot* Local() {
    size_t id = ThisThreadId();
    return id < kMaxThreads ? &slots_[id] : nullptr;
  }
  PersistCounters Sum() const;

  // A small dense id for the calling thread, recycled when the thread exits.
  static size_t ThisThreadId() {
    thread_local size_t id = AcquireThreadId();
    return id;
  }

 private:
  static size_t AcquireThreadId();
  std::unique_ptr<CounterSlot[]> slots_;
};

}  // namespace pmhash::pm
