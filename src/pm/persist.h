// The persistence handle: flush, fence, persist, and the store accessor through which
// every store into PM goes.
//
// A Persister is configured once, when a pool is opened (persist mode, flush instruction
// chosen by cpuid or forced, emulated write latency, counting on or off, an optional
// observer), and engines call it through a reference. Instrumentation and the crash
// simulator are layered on as the counter table and the PersistObserver; there are no
// #ifdefs or globals on this path.
//
// Contract for engines:
//  * Every store into the pool goes through Store / Copy / Zero (the crash simulator
//    rejects a store it did not see). Reads are plain loads (Load for data that other
//    threads store concurrently).
//  * A Store of an aligned 1, 2, 4 or 8-byte scalar is failure-atomic; Copy and Zero are
//    not (a crash may tear them at any 8-byte boundary).
//  * Stores may reach the media before Flush is called (cache eviction): a store is
//    durable no later than after Flush + Fence, possibly earlier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pm/stats.h"
#include "util/cpu.h"
#include "pmhash/index.h"
#include "pmhash/options.h"

namespace pmhash::pm {

inline constexpr size_t kCacheLine = 64;

// Sees every store, flush and fence of a Persister (the crash simulator implements it).
class PersistObserver {
 public:
  virtual ~PersistObserver() = default;
  // Performs a store and observes it, as one step: with an observer set, the Persister's
  // Store / Copy / Zero call this instead of writing themselves, so an observer can take
  // its lock around the write and its record of it (the crash simulator must log
  // concurrent stores to one line in the order they took effect). `src` null means zero
  // `len` bytes; `scalar` means an aligned 1, 2, 4 or 8-byte store with release order.
  // The default writes, then calls OnStore.
  virtual void Write(void* dst, const void* src, size_t len, bool scalar) {
    WriteBytes(dst, src, len, scalar);
    OnStore(dst, len);
  }
  virtual void OnStore(const void* addr, size_t len) = 0;  // after the bytes are written
  virtual void OnFlush(const void* addr, size_t len) = 0;
  virtual void OnFence() = 0;

  // The write itself, for implementations of Write.
  static void WriteBytes(void* dst, const void* src, size_t len, bool scalar) {
    if (src == nullptr) {
      std::memset(dst, 0, len);
    } else if (!scalar) {
      std::memcpy(dst, src, len);
    } else {
      switch (len) {
        case 1: StoreScalar<uint8_t>(dst, src); break;
        case 2: StoreScalar<uint16_t>(dst, src); break;
        case 4: StoreScalar<uint32_t>(dst, src); break;
        default: StoreScalar<uint64_t>(dst, src); break;
      }
    }
  }

 private:
  template <typename U>
  static void StoreScalar(void* dst, const void* src) {
    U v;
    std::memcpy(&v, src, sizeof(U));
    __atomic_store_n(static_cast<U*>(dst), v, __ATOMIC_RELEASE);
  }
};

struct PersistConfig {
  PersistMode mode = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;
  uint32_t write_latency_ns = 0;
  bool count = true;
  PersistObserver* observer = nullptr;  // not owned; must outlive the Persister
};

class Persister {
 public:
  // Validates the config against the CPU: forcing an instruction the CPU lacks is
  // InvalidArgument. On success *out is ready to use.
  static Status Make(const PersistConfig& config, std::unique_ptr<Persister>* out);
  // The same, validating against `cpu` instead of CpuFeatures::Get(), so tests can fake a
  // CPU that lacks an instruction. `cpu` must not claim more than the real CPU has.
  static Status Make(const PersistConfig& config, const CpuFeatures& cpu,
                     std::unique_ptr<Persister>* out);

  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  // Writes back every cache line overlapping [addr, addr+len). No-op in eadr/none.
  void Flush(const void* addr, size_t len);
  // Orders (adr: and completes) the flushes before it. No-op in none.
  void Fence();
  void Persist(const void* addr, size_t len) {
    Flush(addr, len);
    Fence();
  }

  // Failure-atomic store of an aligned scalar; a release store for concurrent readers.
  template <typename T>
  void Store(T* dst, T value) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8 &&
                      (sizeof(T) & (sizeof(T) - 1)) == 0,
                  "Store is for 1, 2, 4 and 8-byte scalars; use Copy for the rest");
    if (config_.observer != nullptr) {
      config_.observer->Write(dst, &value, sizeof(T), /*scalar=*/true);
    } else {
      __atomic_store_n(dst, value, __ATOMIC_RELEASE);
    }
    Count(sizeof(T));
  }
  // The commit of a persist sequence: a fence, so that everything stored and flushed
  // before it is durable (adr) or ordered (eadr) ahead of the commit word; one
  // failure-atomic store of the word; and its persist, so it is durable on return.
  template <typename T>
  void Publish(T* word, T value) {
    Fence();
    Store(word, value);
    Persist(word, sizeof(T));
  }

  // Acquire load of a scalar that another thread may Store concurrently.
  template <typename T>
  static T Load(const T* src) {
    return __atomic_load_n(src, __ATOMIC_ACQUIRE);
  }
  // Not failure-atomic (see above).
  void Copy(void* dst, const void* src, size_t len) {
    if (config_.observer != nullptr) {
      config_.observer->Write(dst, src, len, /*scalar=*/false);
    } else {
      std::memcpy(dst, src, len);
    }
    Count(len);
  }
  void Zero(void* dst, size_t len) {
    if (config_.observer != nullptr) {
      config_.observer->Write(dst, nullptr, len, /*scalar=*/false);
    } else {
      std::memset(dst, 0, len);
    }
    Count(len);
  }

  // Engines report the PM cache lines a read touched (for pm_lines_read_per_op).
  void NoteRead(size_t lines) {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->lines_read, lines);
  }
  // The crash simulator reports redundant flushes and fences through these.
  void NoteRedundantFlush() {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->redundant_flushes, 1);
  }
  void NoteRedundantFence() {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->redundant_fences, 1);
  }

  PersistCounters Totals() const { return counters_.Sum(); }
  PersistMode mode() const { return config_.mode; }
  // The instruction actually used (kAuto resolved).
  FlushInstruction flush_instruction() const { return config_.flush; }
  uint32_t write_latency_ns() const { return config_.write_latency_ns; }
  PersistObserver* observer() const { return config_.observer; }

 private:
  explicit Persister(const PersistConfig& config);

  CounterSlot* Slot() { return config_.count ? counters_.Local() : nullptr; }
  void Count(size_t len) {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->bytes_stored, len);
  }

  PersistConfig config_;
  void (*flush_line_)(const void*) = nullptr;  // null in eadr / none
  uint64_t latency_cycles_ = 0;                // TSC cycles to spin per flushed line
  CounterTable counters_;
};

// TSC cycles per nanosecond, measured once per process.
double TscCyclesPerNs();

}  // namespace pmhash::pm
