// `smartht`: SmartHT (paper 003, Xiao et al.): a DRAM Bloom filter (the volatile filter
// layer, VFL) in front of a chained hash table in PM (the persistent data layer, PDL), so
// that a negative search touches no PM at all. Design notes, the mapping of Algorithms
// 1-2 and Section III-D to the code, deviations and figures: docs/engines/smartht.md.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root, one cache line):
//   struct SmartHtRoot {
//     EngineRoot header;    // engines/root.h: magic kSmartHtRootMagic, version
//                           // kSmartHtVersion, table = pool offset of the live head table
//                           // (growth switches it with one failure-atomic 8-byte store,
//                           // its commit point), count = keys stored (exact after a clean
//                           // Close, recounted after a crash)
//     // The four words below are sealed (Engine::SealFor), like the header's table and
//     // count: each changes with one failure-atomic store and checks itself.
//     uint64 filter;        // pool offset of the reserved filter area (0: none yet)
//     uint64 filter_bytes;  // bytes of serialized filter in that area
//     uint64 filter_valid;  // the paper's nonCrashed flag: 1 = the area holds the filter
//                           // of the last clean shutdown; cleared once it is reloaded
//     uint64 chain_buckets; // chained buckets (load factor); exact after a clean Close
//   };
//
//   head table block (allocator, a large run, 4 KiB aligned), N = head buckets (power of 2):
//   struct SmartHtTable { uint64 magic; uint64 head_buckets; uint8 pad[40] (zero);
//                         uint64 check (Engine::MetadataCheck of the 56 bytes before it);
//                         SmartBucket heads[N]; };
//
//   bucket (head buckets and chained buckets alike; chained ones are 64-byte blocks):
//   struct SmartBucket {       // 64 bytes = one cache line (Fig. 3)
//     uint8   token[3];        // SlotForm per slot: 0 empty, 1 inline, 2 record. The commit
//                              // point of a slot (the paper's token, "1 = valid")
//     uint8   pad[5];          // the paper's 5-byte padding (tokens and pad: one word)
//     uint64  next;            // pool offset of the next chained bucket, 0 = end (BP)
//     KvWords slot[3];         // 16-byte key-value slots (src/common/slot.h)
//   };
//
//   filter area (allocator block): BloomFilter::Serialize() output (its own header with a
//   checksum), written at clean shutdown only. A clean open whose root says the area is
//   valid reloads it; an image that fails its checks then is Corruption, not a rebuild
//   (the pool is damaged).
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. A key k lives in the chain of head bucket Reduce(KeyHash(k), N), at most once.
//  2. A slot's token is its commit point: the words of a slot whose token is 0 mean
//     nothing (lazy deletion leaves them as they were). A record slot owns its record.
//  3. Every key in the PDL is in the live DRAM filter (the filter may hold more: deleted
//     keys and false positives). So a filter miss proves absence without touching PM.
//  4. Count() equals the number of slots whose token is not 0.
//
// ---- Persist order (Algorithm 1 line numbers as printed) ------------------------------
//
//  insert, free slot in the head or first chained bucket (lines 7-14): [record written,
//    flushed, fence]; words stored, token stored, the bucket's line flushed once, fence.
//    The words and the token share the line, and a line reaches PM in store order, so
//    the token (a failure-atomic byte store) can never be durable without its words: one
//    merged flush. Then the key is added to the filter (line 30).
//  insert, new chained bucket (lines 16-29): the whole bucket (slot 0, token 0, next =
//    head.next) written into a fresh block, flushed (25); then head.next published
//    (Persister::Publish: fence (26), one 8-byte store (27), flush, fence (28-29)). A crash before the link leaves an unreachable
//    block, which Allocator::Rebuild reclaims.
//  delete (lazy, Sec. III-C3): token cleared (byte store), flushed, fence; the record (if
//    any) freed; the filter is not touched.
//  update (not in the paper): inline value: one 8-byte store of word1, persist. Record:
//    new record flushed, word0 published (fence, one 8-byte store, persist), old record
//    freed. Inline -> record: UndoLog Tx saving the slot and its token, stores, persist,
//    Commit.
//  growth (not in the paper): a new head table of 2N buckets and its chained buckets are
//    written and flushed while unreachable; root.table published (fence, one 8-byte
//    store, persist) switches; only then the old table and chains are freed. Records
//    move by pointer.
//  clean shutdown (Sec. III-D): filter serialized into the reserved area, persisted;
//    root.filter / filter_bytes flushed; root.filter_valid = 1 published (the flag is
//    the commit); the kit then persists root.count. Clean open: reload, then filter_valid = 0 persisted.
//  crash recovery (Sec. III-D): the filter is rebuilt by scanning the PDL (every token
//    != 0 is added); root.count is rewritten. Nothing in the PDL needs repair.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// Lock areas of 256 consecutive head buckets (Sec. III-B2, Fig. 4); area a is guarded by
// stripe a % stripes (engines/striping.h; VersionedRwLock, src/common/locks.h). Searches check the filter
// with no lock (Alg. 2 line 1; with bucket_first=on only after the head bucket missed),
// then read the chain with no lock either, validated by the
// stripe's version (FindOptimistic; the shared lock after a few retries or for a record);
// inserts, updates and deletes take it exclusively and release it only after their change
// is durable, so a search never returns a value that is not durable. The filter pointer can
// change (background rebuild, growth of the filter): readers announce themselves in a
// per-thread reader slot while they hold a filter pointer, and the old filter is freed
// only after every slot has been seen empty. The head table changes only under every
// stripe (growth); ForEach holds the growth mutex shared.
//
// Background filter rebuild (not in the paper): lazy deletion leaves deleted keys in the
// filter; past `rebuild_deletes` x expected keys deletions, and whenever the key count
// passes the filter's expected keys (it is then rebuilt twice as large), a background
// thread builds a new filter by scanning the PDL one lock area at a time under the shared
// lock. While it runs, inserters add each key to both the live and the new filter (under
// their exclusive lock), so a key inserted during the scan is in the new filter whether
// the scan saw it or not. Then the new filter is published and the old one retired.
//
// ---- Scan (Index::Scan; the cursor: engines/scan.h) ------------------------------------
//
// A home is a head bucket and its chain. A page holds grow_mu_ shared (no growth during
// it; a growth that finds it taken is skipped, as during ForEach) and reads one lock area
// of 256 head buckets at a time under its stripe shared. A key stays in its head bucket's
// chain until a growth, so every key present for the whole scan is passed at least once;
// twice only when its hash lies within 2^16 below a page boundary. Keys inserted or
// deleted during the scan may or may not be passed; a record that fails its check is left
// out, as ForEach leaves it out.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/bloom.h"
#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "engines/striping.h"
#include "pm/stats.h"

namespace pmhash::engines {

inline constexpr uint64_t kSmartHtRootMagic = 0x3152544854534d50ull;   // "PMSTHTR1"
inline constexpr uint64_t kSmartHtTableMagic = 0x3154544854534d50ull;  // "PMSTHTT1"
inline constexpr uint64_t kSmartHtVersion = 2;  // 2: root check, sealed words, table check
inline constexpr uint64_t kSmartHtPaperHeadBuckets = uint64_t{1} << 24;  // Sec. III-B2
inline constexpr uint64_t kSmartHtMinHeadBuckets = 256;                  // one lock area
inline constexpr uint64_t kSmartHtMaxHeadBuckets = uint64_t{1} << 32;
inline constexpr uint64_t kSmartHtLockArea = 256;  // head buckets per lock (Sec. III-B2)
inline constexpr int kSmartHtSlots = 3;
// One reader slot per live thread (pm::CounterTable's recycled dense thread ids), plus
// one shared by threads beyond that.
inline constexpr size_t kSmartHtReaderSlots = pm::CounterTable::kMaxThreads;

struct SmartHtRoot {
  EngineRoot header;
  uint64_t filter;
  uint64_t filter_bytes;
  uint64_t filter_valid;
  uint64_t chain_buckets;
};
static_assert(sizeof(SmartHtRoot) <= pm::kCacheLine, "the root fits one cache line");
static_assert(offsetof(SmartHtRoot, header) == 0 && offsetof(SmartHtRoot, filter) == 32 &&
                  offsetof(SmartHtRoot, filter_bytes) == 40 &&
                  offsetof(SmartHtRoot, filter_valid) == 48 &&
                  offsetof(SmartHtRoot, chain_buckets) == 56,
              "the kit's root header, then the filter area and counts (the layout of "
              "versions 1 and 2); filter_valid is the shutdown's failure-atomic commit word");

struct alignas(64) SmartBucket {
  uint8_t token[kSmartHtSlots];
  uint8_t pad[5];
  uint64_t next;
  KvWords slot[kSmartHtSlots];
};
static_assert(sizeof(SmartBucket) == 64,
              "a bucket is one cache line: key, value and token persist with one flush");
static_assert(offsetof(SmartBucket, token) == 0 && offsetof(SmartBucket, next) == 8 &&
                  offsetof(SmartBucket, slot) == 16,
              "tokens and padding fill the first word; next is an aligned 8-byte word");
static_assert(sizeof(SlotForm) == 1, "a token is stored with one atomic byte store");
static_assert(offsetof(SmartBucket, token) % 4 == 0 && offsetof(SmartBucket, next) >= 4,
              "a search reads the three tokens and a padding byte with one 4-byte load "
              "(LoadForms)");

struct alignas(64) SmartHtTableHeader {
  uint64_t magic;
  uint64_t head_buckets;
  uint8_t pad[40];
  uint64_t check;
};
static_assert(sizeof(SmartHtTableHeader) == 64, "head buckets start on a cache line");
static_assert(offsetof(SmartHtTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(SmartHtTableHeader, head_buckets) == offsetof(TableHeader, size) &&
                  offsetof(SmartHtTableHeader, check) == 56,
              "the table header's layout (version 2)");

class SmartHt : public Engine {
 public:
  SmartHt();
  ~SmartHt() override;

  // A key's head bucket among N is Reduce(hash, N) (util/hash.h: doubling N sends
  // bucket b to 2b or 2b+1).
  uint64_t head_buckets() const { return head_count_.load(std::memory_order_acquire); }
  // How the filter was obtained at open: "new", "reloaded" (clean shutdown) or "rebuilt".
  const std::string& filter_origin() const { return filter_origin_; }
  // Filter rebuilds completed since open (background, growth of the filter).
  uint64_t filter_rebuilds() const { return filter_rebuilds_.load(); }
  // Waits until no background filter rebuild runs (tests, benchmarks).
  void WaitForBackgroundWork() override;

  // The Index contract (include/pmhash/index.h), and: a key the filter rules out is
  // answered (NotFound, or inserted without a chain scan) without reading PM. Insert
  // never fails for lack of table space (chains grow); PoolFull only when the pool is
  // full. ForEach copies one lock area at a time and calls fn with no lock held (fn may
  // call this index; growth is skipped while a ForEach runs). CheckInvariants checks
  // invariants 1-4 by a full scan.
  PMHASH_ENGINE_KIT_OVERRIDES;
  // The key's filter block and head bucket.
  void Prefetch(uint64_t hash) const override;
  Status Shutdown() override;
  void StopBackgroundWork() override;

 private:
  using Stripe = VersionedStripe;
  // A thread's counters and its filter-reader announcement, one cache line, written
  // only by its owner (plain load + store: no locked instruction on the hot path). The
  // last slot is shared by threads beyond kSmartHtReaderSlots and uses atomic RMWs.
  struct alignas(64) ReaderSlot {
    // Own slot: odd while the thread holds a filter pointer (a sequence, so a rebuild
    // waiting for it never starves). Shared slot: the number of holders.
    std::atomic<uint64_t> reading{0};
    std::atomic<int64_t> delta{0};           // inserts minus deletes
    std::atomic<uint64_t> deletes{0};        // deletes (for the rebuild trigger)
    std::atomic<uint64_t> filtered{0};       // searches the filter answered alone
    std::atomic<uint64_t> false_positive{0}; // filter said maybe, the PDL said no
  };
  bool IsShared(const ReaderSlot& slot) const { return &slot == &readers_[kSmartHtReaderSlots]; }
  // counter += n by the slot's owner.
  template <typename T>
  void Bump(ReaderSlot& slot, std::atomic<T>& counter, T n) const {
    if (IsShared(slot)) {
      counter.fetch_add(n, std::memory_order_relaxed);
    } else {
      counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
  }
  class FilterGuard;
  void CountFiltered() {
    ReaderSlot& s = MySlot();
    Bump(s, s.filtered, uint64_t{1});
  }
  void CountFalsePositive() {
    ReaderSlot& s = MySlot();
    Bump(s, s.false_positive, uint64_t{1});
  }

  // Where a key is, or where it could go.
  struct Probe {
    SmartBucket* bucket = nullptr;  // the key's bucket (null: not found)
    int slot = -1;
    SmartBucket* free_bucket = nullptr;  // an empty slot Alg. 1 line 7 may take
    int free_slot = -1;
  };

  // Locks the stripe of the key's head bucket in the live table (retrying across a growth).
  Stripe& LockHome(uint64_t hash, LockMode mode, uint64_t* head) const {
    uint64_t n = 0;
    return stripes_.LockHome(head_count_, hash, mode, head, &n);
  }
  ReaderSlot& MySlot() const {  // inline: every search asks (issue 29)
    return readers_[std::min(pm::CounterTable::ThisThreadId(), kSmartHtReaderSlots)];
  }

  SmartBucket* BucketAt(uint64_t offset) const { return pool().At<SmartBucket>(offset); }
  // The next bucket of a chain, or null at its end. A pointer that cannot be a bucket of
  // the heap (a damaged pool) also ends the chain: reads never go wild.
  SmartBucket* NextOf(const SmartBucket* b) const {
    const uint64_t next = __atomic_load_n(&b->next, __ATOMIC_ACQUIRE);  // optimistic readers too
    if (next == 0 || next % sizeof(SmartBucket) != 0 || next < heap_begin_ ||
        next > heap_end_ - sizeof(SmartBucket)) {
      return nullptr;
    }
    return BucketAt(next);
  }
  // Calls fn(bucket) along the chain of head bucket i until fn returns false; at most
  // chain_limit_ buckets (a damaged pool could hold a cycle).
  template <typename Fn>
  void Walk(uint64_t i, Fn&& fn) const {
    SmartBucket* b = &Heads()[i];
    for (uint64_t depth = 0; b != nullptr && depth < chain_limit_; ++depth, b = NextOf(b)) {
      if (!fn(b)) return;
    }
  }
  // Calls fn(form, words) for each committed slot of head bucket i's chain whose record,
  // if any, passes its check (a damaged one is left out): ForEach and Scan, the caller
  // holding i's stripe.
  template <typename Fn>
  void VisitSlots(uint64_t i, Fn&& fn) const {
    Walk(i, [&](const SmartBucket* b) {
      for (int k = 0; k < kSmartHtSlots; ++k) {
        const SlotForm f = FormOf(b, k);
        if (f == SlotForm::kEmpty) continue;
        if (f == SlotForm::kRecord && !codec().Plausible(f, b->slot[k])) continue;
        fn(f, b->slot[k]);
      }
      return true;
    });
  }
  // A token as readers see it: a value no writer stores (damage) counts as empty.
  static SlotForm FormOf(const SmartBucket* b, int s) {
    const uint8_t t = b->token[s];
    return t <= static_cast<uint8_t>(SlotForm::kRecord) ? static_cast<SlotForm>(t)
                                                         : SlotForm::kEmpty;
  }
  // Alg. 2 lines 3-12 over the chain (full_scan), or only the head and first chained
  // bucket looking for an empty slot (Alg. 1 line 7, when the filter rules the key out).
  Probe Find(std::string_view key, uint64_t hash, uint64_t head, bool full_scan) const;
  // Alg. 2 with no lock: kFound (read->value_word holds an inline value) or kAbsent when
  // the stripe's version held still and the head table did not grow; kRetry when a
  // writer was in; kLocked when only the shared lock can answer (the key or its value is
  // a record, whose bytes are read under the lock). With `filtered` (bucket_first=on):
  // after the head bucket the filter is asked before the chain is read further; a key it
  // rules out is kAbsent with *filtered set.
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read, bool* filtered) const;
  // A search under the shared lock (FindOptimistic could not answer).
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);
  bool FilterMayContain(uint64_t hash) const;
  void FilterAdd(uint64_t hash);
  Status InsertAt(const Probe& p, uint64_t head, std::string_view key, std::string_view value,
                  uint64_t hash);
  Status UpdateAt(const Probe& p, std::string_view key, std::string_view value, uint64_t hash);
  uint64_t HashOf(SlotForm form, const KvWords& words) const;

  // Growth of the head table (try-lock: skipped when a ForEach or another growth runs).
  void MaybeGrow();
  Status Grow(uint64_t observed_n);
  // Filter rebuild triggers and the background worker.
  // The expected keys of a filter rebuild that is due (the key count passed the filter's
  // expected keys, or deletions passed rebuild_deletes x expected keys), or 0.
  uint64_t RebuildDue() const;
  void MaybeStartRebuild();
  // Runs rebuilds until none is due. RebuildFilter is one round: true if it published a
  // new filter.
  void RebuildWorker(uint64_t expected_keys);
  bool RebuildFilter(uint64_t expected_keys);
  // Adds every committed key of head buckets [first, last) (and chains) to `filter`;
  // returns the keys seen. Raw PM reads, caller holds what keeps the table stable.
  uint64_t ScanInto(uint64_t first, uint64_t last, BloomFilter* filter) const;
  // Waits until no reader holds a filter pointer loaded before this call.
  void WaitForReaders() const;

  Status NewTable(uint64_t n, uint64_t* offset);
  // Validates the head table's header at `table` (the root header validated first).
  Status ValidateTable(uint64_t table, uint64_t* n) const;
  Status MakeFilter(uint64_t expected_keys, std::unique_ptr<BloomFilter>* out) const;
  // Crash recovery (Sec. III-D): validate the PDL, count keys, fill the filter.
  Status RecoverScan(uint64_t* count, uint64_t* chain_buckets);
  Status ReloadFilter(uint64_t offset, uint64_t bytes);
  // The root's sealed words (SmartHtRoot), unsealed: Corruption naming the damaged one.
  struct RootWords {
    uint64_t filter = 0, filter_bytes = 0, filter_valid = 0, chain_buckets = 0;
  };
  Status ReadRootWords(RootWords* words) const;
  Status SaveFilter();
  uint64_t HeadBucketsFor(uint64_t keys) const;
  void SetBounds();
  // One stripe per lock area of head buckets (64..65536 stripes).
  void ResetStripes(uint64_t head_buckets);

  // Options (Configure).
  uint64_t head_buckets_opt_ = 0;  // 0: from initial_capacity or the paper's default
  uint64_t expected_keys_opt_ = 0;
  double fp_rate_ = 1e-4;
  uint32_t bloom_hashes_ = 3;
  double rebuild_deletes_ = 0.5;
  double max_chain_ = 1.0;  // chained buckets per head bucket before the head table doubles
  bool bucket_first_ = false;  // Get reads the head bucket before asking the filter
  uint32_t recovery_threads_ = 1;

  // Structure.
  SmartHtRoot* root_ = nullptr;
  uint64_t table_offset_ = 0;
  // The live head table; atomic because optimistic searches read it with no lock.
  std::atomic<SmartBucket*> heads_{nullptr};
  SmartBucket* Heads() const { return heads_.load(std::memory_order_acquire); }
  uint64_t heap_begin_ = 0, heap_end_ = 0, chain_limit_ = 0;
  std::atomic<uint64_t> head_count_{0};
  Stripes<Stripe> stripes_;
  mutable std::shared_mutex grow_mu_;
  std::atomic<uint64_t> chain_buckets_{0};
  uint64_t base_count_ = 0;
  mutable ReaderSlot readers_[kSmartHtReaderSlots + 1];

  // Filters: the live one and, during a rebuild, the one being built.
  std::atomic<BloomFilter*> filter_{nullptr};
  std::atomic<BloomFilter*> building_{nullptr};
  std::atomic<uint64_t> filter_expected_{0};
  std::atomic<uint64_t> deletes_at_rebuild_{0};
  std::mutex rebuild_mu_;  // guards rebuild_thread_
  std::thread rebuild_thread_;
  std::atomic<bool> rebuilding_{false};
  std::atomic<bool> stop_{false};
  std::string filter_origin_ = "new";

  // Engine counters.
  std::atomic<uint64_t> filter_rebuilds_{0};
  std::atomic<uint64_t> grows_{0};
  double filter_load_ms_ = 0;
};

}  // namespace pmhash::engines
