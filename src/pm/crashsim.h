// The power-failure simulator: a PersistObserver that models what a crash may leave in PM.
//
// Model (DESIGN.md "Crash simulator"):
//  * The simulator keeps a shadow *persisted image* of the pool (a snapshot taken at
//    construction: what was there before the simulator attached counts as durable).
//  * Every Store / Copy / Zero is logged per 64-byte cache line as 8-byte-aligned units
//    (a wider store is split at 8-byte boundaries, so a crash can tear it between units;
//    a 1/2/4-byte store is one unit of its own width).
//  * Flush marks the units of each flushed line logged so far as flushed (by the calling
//    thread); that thread's next Fence makes them durable (folds them into the image).
//  * A crash image (adr) is the persisted image plus, for every line independently, any
//    prefix in program order of the line's not-yet-durable units: x86 writes a line back
//    whole, so a line's stores persist in order, and a line may be written back at any
//    time (eviction), flushed or not.
//  * eadr: the caches are persistent, so a crash image is the state after any prefix of
//    the global store sequence. The simulator folds the log at each fence and, for
//    engines that never fence, at quiescent operation ends (Persister::EndOp when no
//    operation is in flight and no atomic region open), so images cover the prefixes
//    since the last fold.
//  * Atomic regions (Persister::BeginAtomic .. EndAtomic, an emulated hardware
//    transaction): a region's stores are held aside until it commits, so no image taken
//    inside it holds any of them (a transaction's stores stay in L1 until it commits; a
//    crash aborts it), and an aborted region's stores never appear. eadr: a committed
//    region joins the sequence as one block that no prefix splits: all or nothing.
//    adr: HTM does not make write-backs atomic, so a committed region's stores are
//    ordinary stores from then on (per line, any prefix; durable after flush + fence).
//    Flushes inside a region are counted (flushes_in_atomic): real RTM may abort on them.
//  * Several threads: the log records the interleaving as it happened. The simulator
//    performs each store itself (PersistObserver::Write) under its mutex, so a store and
//    its log entry are one step and concurrent stores to one line are logged in the
//    order they took effect.
//
// The crash hook: at every fence (before it takes effect), at sampled stores, optionally
// at operation ends (CrashAtOpEnds) and when a test calls CrashNow(), the simulator calls
// the hook with its mutex held, so other
// threads stop at their next store, flush or fence. Inside the hook (and only there, or
// when no thread is storing) a test may build crash images and check them.
//
// It also finds stores that bypassed the Persister (FindBypass: the working pool differs
// from persisted image + log; about a memcmp of the pool, so cheap enough to run after
// every operation of a 4 MiB pool), counts Persister stores outside the pool (an engine
// storing to DRAM or to another pool through this Persister) and redundant flushes (a
// line with no store since it was last flushed) and fences (nothing flushed by the
// thread; eadr: nothing stored).
//
// Memory: per-line bookkeeping is a flat array (32 bytes per 64-byte line), so the
// simulator is meant for small pools (the suites use 4-8 MiB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pm/persist.h"
#include "pm/pool.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::pm {

class CrashSim : public PersistObserver {
 public:
  // Why the hook was called.
  enum class Event : uint8_t { kFence, kStore, kManual, kOpEnd };
  // Which not-yet-durable units a crash image keeps.
  enum class ImageKind : uint8_t {
    kNone,    // the persisted image alone
    kAll,     // every logged store (as if everything was written back)
    kRandom,  // per line (adr) a random prefix; eadr: a random prefix of the sequence
  };
  using Hook = std::function<void(CrashSim& sim, Event event)>;

  struct Counters {
    uint64_t stores = 0;             // Store / Copy / Zero calls inside the pool
    uint64_t units = 0;              // 8-byte (or narrower) units logged
    uint64_t flushes = 0;            // cache lines flushed
    uint64_t fences = 0;
    uint64_t redundant_flushes = 0;  // lines flushed with no store since their last flush
    uint64_t redundant_fences = 0;   // fences with nothing flushed (eadr: nothing stored)
    uint64_t outside_stores = 0;     // stores outside the pool (performed, not logged)
    uint64_t hook_calls = 0;
    uint64_t atomic_commits = 0;     // atomic regions committed
    uint64_t atomic_aborts = 0;      // atomic regions aborted (their stores dropped)
    uint64_t flushes_in_atomic = 0;  // cache lines flushed inside an atomic region
    uint64_t op_folds = 0;           // eadr folds at quiescent operation ends
  };

  // Observes the pool memory [base, base+size) in `mode` (kNone behaves like kEadr:
  // there is nothing to model). The current bytes become the persisted image, so attach
  // before the engine writes (e.g. right after Pool::CreateDram / FromImage).
  CrashSim(const void* base, size_t size, PersistMode mode);
  ~CrashSim() override;
  CrashSim(const CrashSim&) = delete;
  CrashSim& operator=(const CrashSim&) = delete;

  // Installs the hook, called at every fence and, with probability `store_rate`, after a
  // store (seeded, so runs repeat). An empty hook disables crash points. Not while
  // other threads store.
  void SetHook(Hook hook, double store_rate, uint64_t seed);
  // Also calls the hook (Event::kOpEnd) at every Persister::EndOp, before the fold a
  // quiescent operation end makes in eadr. Not while other threads store.
  void CrashAtOpEnds(bool on);
  // Optional: also report redundant flushes/fences to this persister's counters (the
  // engine's, so Stats() shows them). Not owned; may be null.
  void ReportTo(Persister* persister) { report_to_ = persister; }

  // Calls the hook now (Event::kManual), from any thread; no-op without a hook.
  void CrashNow();

  // ---- Inside the hook, or while no thread stores -------------------------------------

  // Writes a crash image of the whole pool into *out (resized to the pool size).
  // kRandom draws from `rng`.
  void MakeImage(ImageKind kind, std::mt19937_64& rng, std::vector<char>* out) const;
  // The same, as a DRAM pool ready for OpenEngine(fresh=false). The pool lives in a
  // buffer the simulator reuses: it is valid until the next MakePool and must be
  // destroyed before the simulator.
  //
  // With `tracker`, *tracker is an observer the caller must give every Persister that
  // stores into this image (the index opened on it, a reopen after Close): it marks the
  // pages written, so the next MakePool copies only those (and the pages of the
  // persisted image that changed) instead of the whole pool. Every 16th such restore
  // checks the unmarked pages against the persisted image: a store that bypassed the
  // Persister while the image was in use (recovery, the checks after it) makes that
  // MakePool return Corruption naming the pool offset. Without `tracker` the next
  // MakePool copies the whole pool.
  Status MakePool(ImageKind kind, std::mt19937_64& rng, std::string_view engine,
                  std::unique_ptr<Pool>* pool, PersistObserver** tracker = nullptr) const;
  // Not-yet-durable units and the lines holding them.
  size_t PendingUnits() const { return pending_units_; }
  size_t PendingLines() const;
  // The pool offsets of (up to `max` of) those lines, lowest first: for messages.
  std::vector<uint64_t> PendingLineOffsets(size_t max) const;
  // The working pool must equal persisted image + log; otherwise some store bypassed the
  // Persister. Returns OK or Corruption naming the first differing pool offset. Reads
  // the working pool, so it must still be mapped.
  Status FindBypass() const;

  // ---- Any time ------------------------------------------------------------------------

  Counters counters() const;
  // The address of the first store outside the pool (null if none): for messages.
  const void* first_outside_store() const;
  PersistMode mode() const { return mode_; }
  size_t size() const { return size_; }

  // PersistObserver.
  void Write(void* dst, const void* src, size_t len, bool scalar) override;
  void OnStore(const void* addr, size_t len) override;
  void OnFlush(const void* addr, size_t len) override;
  void OnFence() override;
  void OnAtomicBegin() override;
  void OnAtomicEnd() override;
  void OnAtomicAbort() override;
  void OnOpBegin() override;
  void OnOpEnd() override;

 private:
  struct Unit {
    uint64_t offset;  // pool offset; the unit lies within one aligned 8-byte word
    uint8_t len;      // 1..8
    bool glued;       // eadr: part of an atomic region with the unit before it
    uint8_t bytes[8];
  };
  struct Line {
    std::vector<Unit> pending;  // not yet durable, program order
    uint64_t durable_seq = 0;   // units of this line folded so far (sequence base)
    uint64_t flushed_seq = 0;   // sequence end of the last flush of this line
    bool dirty = false;         // listed in dirty_
  };
  struct FlushMark {
    uint32_t line;
    uint64_t seq_end;  // units [.., seq_end) of the line are flushed by this thread
  };

  bool Adr() const { return mode_ == PersistMode::kAdr; }
  void LogUnit(const Unit& u);
  void FoldAllIfQuiescent();
  void FoldLine(uint32_t line, uint64_t seq_end);
  void ApplyPending(ImageKind kind, std::mt19937_64& rng, char* image) const;
  void FoldAllEadr();
  void ApplyUnit(const Unit& u, char* image) const { std::memcpy(image + u.offset, u.bytes, u.len); }
  void CallHook(Event event);
  void CompactDirty();

  class ImageTracker;  // MakePool's page marker (crashsim.cc)
  void MarkPersistedChanged(uint64_t offset) { persisted_changed_[offset / kPage] = 1; }
  static constexpr size_t kPage = 4096;

  const char* base_;
  size_t size_;
  PersistMode mode_;
  Persister* report_to_ = nullptr;

  mutable std::recursive_mutex mu_;  // recursive: a hook may call CrashNow-free helpers
  std::vector<char> persisted_;
  std::vector<Line> lines_;
  std::vector<uint32_t> dirty_;       // lines that may hold pending units (adr)
  std::vector<Unit> sequence_;        // eadr: pending units in global order
  size_t pending_units_ = 0;
  std::unordered_map<std::thread::id, std::vector<FlushMark>> flush_marks_;
  // Open atomic regions: each thread's stores since its BeginAtomic, held aside.
  std::unordered_map<std::thread::id, std::vector<Unit>> regions_;
  int64_t ops_in_flight_ = 0;
  bool crash_at_op_ends_ = false;
  bool stored_since_fence_ = false;

  mutable char* buffer_ = nullptr;  // MakePool's reused image buffer (mmap)
  mutable std::unique_ptr<ImageTracker> tracker_;   // pages of buffer_ written since
  mutable std::vector<uint8_t> persisted_changed_;  // pages of persisted_ folded into since
  mutable bool restore_all_ = true;                 // the last MakePool; else copy all
  mutable uint64_t restores_ = 0;
  Hook hook_;
  double store_rate_ = 0;
  std::mt19937_64 sample_rng_;
  bool in_hook_ = false;
  const void* first_outside_ = nullptr;
  Counters counters_;
};

const char* CrashImageKindName(CrashSim::ImageKind kind);

}  // namespace pmhash::pm
