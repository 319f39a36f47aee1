// The persistence handle: flush, fence, persist, write-back hints, the store accessor
// through which every store into PM goes, and the media model's inputs (reads, operation
// boundaries, prefetches, atomic regions).
//
// A Persister is configured once, when a pool is opened (persist mode, flush instruction
// chosen by cpuid or forced, emulated media latency, counting on or off, the media model,
// an optional observer), and engines call it through a reference. Instrumentation and the
// crash simulator are layered on as the counter table, the media models (media.h) and the
// PersistObserver; there are no #ifdefs or globals on this path.
//
// Contract for engines:
//  * Every store into the pool goes through Store / Copy / Zero (the crash simulator
//    rejects a store it did not see). Reads are plain loads (Load for data that other
//    threads store concurrently), reported with NoteRead.
//  * A Store of an aligned 1, 2, 4 or 8-byte scalar is failure-atomic; Copy and Zero are
//    not (a crash may tear them at any 8-byte boundary).
//  * Stores may reach the media before Flush is called (cache eviction): a store is
//    durable no later than after Flush + Fence, possibly earlier.
//  * Each public operation is bracketed by BeginOp / EndOp (per-operation figures, crash
//    points); a split or a doubling an operation triggers belongs to that operation.
//
// Counting rules (the figures of PersistCounters; docs/architecture.md has the model):
//  * flushes: lines written back by Flush (kAdr; WriteBack in kAdr is a Flush too).
//  * write_backs: lines named by WriteBack, in kAdr and kEadr.
//  * lines_written: 64-byte lines that reached the device model: kAdr the flushed lines;
//    kEadr the lines the cache model evicted or a WriteBack found dirty (every stored
//    line if the cache model is off). DrainMedia sends what the cache still holds.
//  * media_writes / media_rmw_reads: the device model's 256-byte writes and the
//    read-modify-writes of media lines that left its buffer partly written.
//  * lines_read / media_reads: the 64-byte lines and the 256-byte media lines NoteRead
//    names, each counted once per operation however often the operation reads it
//    (BeginOp starts a new set; a pipelined batch may pass one OpReads per operation in
//    flight). Without read latency they are counted in batches (stats.h, NotedReads):
//    exact after DrainMedia, or in the calling thread's Totals.
//  * user_bytes / ops: what EndOp reports: the key + value bytes the operation asked to
//    write (Insert / Update / Put: key + value; Delete: key; Get: 0), and one per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>
#include <type_traits>

#include "pm/media.h"
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
  // An atomic region of the calling thread (Persister::BeginAtomic): its stores are seen
  // between Begin and End (commit) or Abort (the Persister has already put the old bytes
  // back, without calling Write).
  virtual void OnAtomicBegin() {}
  virtual void OnAtomicEnd() {}
  virtual void OnAtomicAbort() {}
  // Operation boundaries of the calling thread (Persister::BeginOp / EndOp).
  virtual void OnOpBegin() {}
  virtual void OnOpEnd() {}

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

// The most emulated latency a PersistConfig takes, per media write or read.
inline constexpr uint32_t kMaxLatencyNs = 100000;

struct PersistConfig {
  PersistMode mode = PersistMode::kAdr;
  FlushInstruction flush = FlushInstruction::kAuto;
  // Emulated media latency, a TSC busy-wait, in kAdr and kEadr (0..kMaxLatencyNs ns;
  // kNone, which has no media, takes none): write latency per media write the model
  // emits (a line merging into a buffered media line is free; needs media_model), read
  // latency per media read (NoteRead), less the time since a Prefetch of that media line.
  uint32_t write_latency_ns = 0;
  uint32_t read_latency_ns = 0;
  bool count = true;
  // Run the device model (kAdr, kEadr) and the cache model (kEadr): media writes,
  // read-modify-writes, lines written. Off: those figures stay 0 (report them as unknown).
  bool media_model = true;
  MediaConfig media;
  // kEadr: WriteBack executes the flush instruction (clwb, ...) besides feeding the model;
  // false: the model only.
  bool eadr_write_back_instruction = true;
  // Atomic regions (BeginAtomic): probability that a region aborts (injected; 0..1), and
  // the seed of those draws.
  double atomic_abort_rate = 0;
  uint64_t atomic_seed = 1;
  PersistObserver* observer = nullptr;  // not owned; must outlive the Persister

  // InvalidArgument naming the field for a value out of range or settings that cannot
  // go together (a latency in kNone, a write latency without the media model; the media
  // settings only when the model runs). The one check of these ranges: Persister::Make,
  // Open and the benchmark's flags all come here.
  Status Validate() const;
};

// What BeginAtomic / EndAtomic report.
enum class AtomicOutcome : uint8_t { kStarted, kCommitted, kAborted };

class Persister {
 public:
  // Validates the config against the CPU: forcing an instruction the CPU lacks is
  // InvalidArgument, as is a config that does not Validate. On success *out is ready to
  // use.
  static Status Make(const PersistConfig& config, std::unique_ptr<Persister>* out);
  // The same, validating against `cpu` instead of CpuFeatures::Get(), so tests can fake a
  // CPU that lacks an instruction. `cpu` must not claim more than the real CPU has.
  static Status Make(const PersistConfig& config, const CpuFeatures& cpu,
                     std::unique_ptr<Persister>* out);
  ~Persister();  // no atomic region may be open

  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  // Writes back every cache line overlapping [addr, addr+len). No-op in eadr/none.
  // Inline when nothing observes it (adr with no counting, device model or observer):
  // the instruction per line and nothing else; else FlushObserved (the hooks).
  [[gnu::always_inline]] void Flush(const void* addr, size_t len) {
    if (plain_ == PlainFlush::kNone) [[unlikely]] {
      FlushObserved(addr, len);
      return;
    }
    ForEachLine(addr, len, [this](uintptr_t line) {
      FlushLinePlain(reinterpret_cast<const char*>(line));
    });
  }
  // Orders (adr: and completes) the flushes before it. No-op in none. Inline as Flush is.
  [[gnu::always_inline]] void Fence() {
    switch (plain_) {
      case PlainFlush::kNone: FenceObserved(); return;
      case PlainFlush::kClflush: __builtin_ia32_mfence(); return;
      default: __builtin_ia32_sfence(); return;
    }
  }
  [[gnu::always_inline]] void Persist(const void* addr, size_t len) {
    Flush(addr, len);
    Fence();
  }
  // A write-back hint, never needed for correctness in eadr: adr, it is Flush (durability
  // still needs a Fence); eadr, it executes the flush instruction (or not, by config) and
  // sends the lines the cache model holds dirty to the device at once (Spash's compacted
  // and asynchronous flushes). No-op in none. Counted as write_backs.
  void WriteBack(const void* addr, size_t len);

  // Failure-atomic store of an aligned scalar; a release store for concurrent readers.
  // Inline when nothing observes it (as Flush) and no atomic region is open: the store
  // alone; else StoreObserved (undo, observer, counting, cache model).
  template <typename T>
  [[gnu::always_inline]] void Store(T* dst, T value) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8 &&
                      (sizeof(T) & (sizeof(T) - 1)) == 0,
                  "Store is for 1, 2, 4 and 8-byte scalars; use Copy for the rest");
    if (plain_ != PlainFlush::kNone && !atomic_open_.load(std::memory_order_relaxed))
        [[likely]] {
      __atomic_store_n(dst, value, __ATOMIC_RELEASE);
      return;
    }
    StoreObserved(dst, &value, sizeof(T));
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
    BeforeStore(dst, len);
    if (config_.observer != nullptr) {
      config_.observer->Write(dst, src, len, /*scalar=*/false);
    } else {
      std::memcpy(dst, src, len);
    }
    AfterStore(dst, len);
  }
  void Zero(void* dst, size_t len) {
    BeforeStore(dst, len);
    if (config_.observer != nullptr) {
      config_.observer->Write(dst, nullptr, len, /*scalar=*/false);
    } else {
      std::memset(dst, 0, len);
    }
    AfterStore(dst, len);
  }

  // ---- Operations and reads ------------------------------------------------------------

  // Brackets one public operation of the calling thread (per-operation de-duplication of
  // media reads, user bytes, crash points at operation ends). `user_bytes`: see the
  // counting rules above. Overlapping operations of one thread (a pipelined batch) call
  // BeginOp / EndOp for each and pass their own OpReads to NoteRead.
  void BeginOp() {
    if (!tracks_ops_) return;
    if (CounterSlot* s = counters_.Local()) {
      ++s->noted.op_seq;  // batched reads (counting only)
      if (read_latency_cycles_ != 0) s->op_reads.Reset();  // reads counted at once
    }
    if (config_.observer != nullptr) config_.observer->OnOpBegin();
  }
  // Whether BeginOp / EndOp do anything (counting, read latency or an observer): fixed
  // when the Persister is made, so a caller may skip bracketing when it is false.
  bool tracks_ops() const { return tracks_ops_; }
  void EndOp(uint64_t user_bytes) {
    if (!tracks_ops_) return;
    if (CounterSlot* s = Slot()) {
      CounterSlot::Add(s->ops, 1);
      CounterSlot::Add(s->user_bytes, user_bytes);
    }
    if (config_.observer != nullptr) config_.observer->OnOpEnd();
  }
  // Whether NoteRead does anything (counting or read latency): fixed when the Persister
  // is made, so a search may test it once instead of at every line it reads.
  bool notes_reads() const { return config_.count || read_latency_cycles_ != 0; }
  // Engines report the PM they read: [addr, addr+len) was read by the calling thread's
  // current operation (or by `op`, one operation of a pipelined batch). Counts the cache
  // lines and the media lines new to the operation, and charges the read latency.
  void NoteRead(const void* addr, size_t len, OpReads* op = nullptr) {
    if (len == 0 || !(config_.count || read_latency_cycles_ != 0)) return;
    if (read_latency_cycles_ == 0 && op == nullptr) {  // counting only: batched
      CounterSlot* s = counters_.Local();
      if (s == nullptr) return;
      NotedReads& n = s->noted;
      if (n.size == NotedReads::kSize) CountNotedReads(s);
      n.first[n.size] = reinterpret_cast<uintptr_t>(addr) / kCacheLine;
      n.last[n.size] = (reinterpret_cast<uintptr_t>(addr) + len - 1) / kCacheLine;
      n.op[n.size] = n.op_seq;
      ++n.size;
      return;
    }
    NoteReadRange(addr, len, op);
  }
  // Prefetches the line at addr and, with read latency emulated, notes when its media
  // line was asked for: a NoteRead of it later waits only for the latency still left.
  void Prefetch(const void* addr) {
    __builtin_prefetch(addr, 0, 3);
    if (read_latency_cycles_ != 0) NotePrefetch(addr);
  }

  // Sends every dirty line of the cache model to the device and empties the device
  // buffers, counting what that costs (no latency charged), and counts every thread's
  // batch of noted reads: at a quiet point (the end of a benchmark phase, after the
  // threads that stored have finished or synchronized with the caller), so that the
  // figures include the writes still owed. In eadr each thread's
  // last few stored lines (up to 32) reach the cache model only in batches, at this
  // point at the latest.
  void DrainMedia();

  // ---- Atomic regions (hardware transactions, emulated) --------------------------------

  // An atomic region of the calling thread, emulating an RTM transaction: regions of one
  // Persister run one at a time (a lock), and each aborts with probability
  // atomic_abort_rate (seeded draws), at BeginAtomic or at EndAtomic, so the caller's
  // retry and fallback paths run. BeginAtomic: kStarted (inside the region) or kAborted
  // (not inside). EndAtomic: kCommitted, or kAborted with every store of the region
  // undone. AbortAtomic undoes them at once (the caller's validation failed). A region
  // inside a region aborts the outer one (kAborted). Inside a region, never wait for
  // something another thread holds while it may be waiting to begin a region.
  // Under the crash simulator a region's stores are all-or-nothing in eadr images, and in
  // adr reach images only after the commit (then line by line, as any store).
  AtomicOutcome BeginAtomic();
  AtomicOutcome EndAtomic();
  void AbortAtomic();

  // The crash simulator reports redundant flushes and fences through these.
  void NoteRedundantFlush() {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->redundant_flushes, 1);
  }
  void NoteRedundantFence() {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->redundant_fences, 1);
  }

  // The counters summed over threads. The reads other threads noted since their last
  // batch (up to NotedReads::kSize each) are counted at DrainMedia, at a quiet point;
  // the calling thread's are counted first.
  PersistCounters Totals() {
    if (CounterSlot* s = counters_.Local(); s != nullptr && s->noted.size != 0) {
      CountNotedReads(s);
    }
    return counters_.Sum();
  }
  // The calling thread's media writes so far (0 when not counting). In adr a flush's
  // media writes are counted on the thread that issues it, as it issues it, so an engine
  // can attribute them to its structures (log, segments, directory) by the difference
  // around its flushes; in eadr they happen at evictions, so the difference means little.
  [[gnu::always_inline]] uint64_t ThreadMediaWrites() {
    CounterSlot* s = Slot();
    return s == nullptr ? 0 : s->media_writes.load(std::memory_order_relaxed);
  }
  PersistMode mode() const { return config_.mode; }
  // Whether the counters count (PersistConfig::count).
  bool counting() const { return config_.count; }
  // The instruction actually used (kAuto resolved).
  FlushInstruction flush_instruction() const { return config_.flush; }
  uint32_t write_latency_ns() const { return config_.write_latency_ns; }
  uint32_t read_latency_ns() const { return config_.read_latency_ns; }
  // Whether the device model runs (media figures are measured).
  bool media_model() const { return media_ != nullptr; }
  const MediaConfig& media_config() const { return config_.media; }
  PersistObserver* observer() const { return config_.observer; }

 private:
  explicit Persister(const PersistConfig& config);

  [[gnu::always_inline]] CounterSlot* Slot() { return config_.count ? counters_.Local() : nullptr; }
  void BeforeStore(void* dst, size_t len) {
    if (atomic_open_.load(std::memory_order_relaxed)) SaveUndo(dst, len);
  }
  void AfterStore(const void* dst, size_t len) {
    if (CounterSlot* s = Slot()) CounterSlot::Add(s->bytes_stored, len);
    if (cache_lines_) StoreLines(dst, len);
  }
  void SaveUndo(void* dst, size_t len);
  // Store's hooked path: a scalar of `len` bytes from `src`.
  void StoreObserved(void* dst, const void* src, size_t len);
  // eadr: the lines of a store join the thread's batch for the cache model (stats.h,
  // StoredLines); ApplyStored gives the batch to the model.
  void StoreLines(const void* dst, size_t len);
  void ApplyStored(CounterSlot* local);
  // A line reaches the device model; with `charge`, the write latency of what it costs.
  void DeviceWrite(CounterSlot* slot, uintptr_t line, bool charge);
  // Counts what a line sent to the device cost and, if issued_tsc != 0, waits the write
  // latency of its media writes from then.
  void Charge(CounterSlot* slot, const MediaCost& cost, uint64_t issued_tsc);
  void NoteReadRange(const void* addr, size_t len, OpReads* op);
  // Counts `slot`'s batch of noted reads (its own thread, or any at a quiet point).
  void CountNotedReads(CounterSlot* slot);
  void NotePrefetch(const void* addr);
  void RollBack(CounterSlot* s);
  void LeaveAtomic(CounterSlot* s);

  // fn(line address) for every cache line overlapping [addr, addr+len): both Flush paths
  // walk their lines with it (the counted path's tests check the walk).
  template <typename Fn>
  [[gnu::always_inline]] static void ForEachLine(const void* addr, size_t len, Fn&& fn) {
    const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
    for (uintptr_t line = reinterpret_cast<uintptr_t>(addr) & ~(kCacheLine - 1); line < end;
         line += kCacheLine) {
      fn(line);
    }
  }
  // Flush and Fence with hooks: counters, the device model, the observer.
  void FlushObserved(const void* addr, size_t len);
  void FenceObserved();
  // The un-observed adr flush, by instruction (run-time dispatch: a predictable switch
  // instead of a call through flush_line_, about 40 instructions less per line). The
  // "memory" clobber keeps the stores to the line before it, as the call did.
  enum class PlainFlush : uint8_t { kNone, kClwb, kClflushopt, kClflush };
  [[gnu::always_inline]] void FlushLinePlain(const char* line) const {
    switch (plain_) {
      case PlainFlush::kClwb: asm volatile("clwb %0" : : "m"(*line) : "memory"); return;
      case PlainFlush::kClflushopt:
        asm volatile("clflushopt %0" : : "m"(*line) : "memory");
        return;
      default: asm volatile("clflush %0" : : "m"(*line) : "memory"); return;
    }
  }

  PersistConfig config_;
  // Set when Flush, Fence and Store have no hooks (adr, no counting, no observer, no
  // device model); Store also needs no atomic region open.
  PlainFlush plain_ = PlainFlush::kNone;
  void (*flush_line_)(const void*) = nullptr;       // adr Flush; null in eadr / none
  void (*write_back_line_)(const void*) = nullptr;  // eadr WriteBack's instruction, or null
  uint64_t write_latency_cycles_ = 0;  // TSC cycles per media write
  uint64_t read_latency_cycles_ = 0;   // TSC cycles per media read
  // Whether BeginOp / EndOp have anything to do (counting, read latency or an observer).
  // Without, they return at once: touching the thread's counter slot on every operation
  // had made linear's 10M-key negative search 0.76x as fast (BENCHMARKS.md, issue 12).
  bool tracks_ops_ = false;
  std::unique_ptr<MediaModel> media_;  // null: no device model
  std::unique_ptr<CacheModel> cache_;  // eadr with media_ and cache_bytes > 0
  bool cache_lines_ = false;           // eadr with media_: stores feed the models
  CounterTable counters_;

  // Atomic regions: one at a time, under atomic_mu_, whose holder owns the rest.
  std::atomic<bool> atomic_open_{false};
  std::mutex atomic_mu_;
  std::mt19937_64 atomic_rng_;
  bool abort_at_end_ = false;
  struct Undo {
    void* addr;
    size_t len;
    size_t at;  // offset of the old bytes in undo_bytes_
  };
  std::vector<Undo> undo_;
  std::vector<char> undo_bytes_;
};

// Reports a probe's reads that run through consecutive lines (a table's cells in address
// order) as one Persister::NoteRead per maximal run, instead of one call per cell or
// line: the same lines are counted, at a fraction of the calls. Add in address order;
// whatever is pending is reported by Flush or at destruction.
class ReadRun {
 public:
  explicit ReadRun(Persister& persister) : ReadRun(persister, persister.notes_reads()) {}
  // `on` false: nothing is reported (a caller that knows the persister notes nothing).
  ReadRun(Persister& persister, bool on) : persister_(persister), on_(on) {}
  ~ReadRun() { Flush(); }
  ReadRun(const ReadRun&) = delete;
  ReadRun& operator=(const ReadRun&) = delete;

  // [addr, addr+len) was read (len > 0).
  void Add(const void* addr, size_t len) {
    if (!on_) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(addr) / kCacheLine;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + len - 1) / kCacheLine;
    if (end_ != 0 && first >= begin_ && first <= end_ + 1) {
      if (last > end_) end_ = last;
      return;
    }
    Flush();
    begin_ = first;
    end_ = last;
  }
  void Flush() {
    if (end_ != 0) Report();
  }

 private:
  // Reports the pending run: out of line, so that a run that is off (on_ false, known to
  // the compiler) leaves nothing in its caller (issue 29: a search's first try).
  void Report();

  Persister& persister_;
  const bool on_;  // notes_reads(): nothing to report otherwise
  uintptr_t begin_ = 0, end_ = 0;  // lines [begin_, end_]; end_ 0: nothing pending
};

// TSC cycles per nanosecond, measured once per process.
double TscCyclesPerNs();

}  // namespace pmhash::pm
