// `wophi`: WOPHI, a write-optimized persistent hash index (paper 000, Xiao et al.).
// Chained hashing over an addressable array of main buckets (MB), each holding 4 tokens,
// 4 key-value slots and a next pointer; a chain grows with buckets taken from a pool of
// pre-allocated buckets (PAB), so no allocation sits on the insert's critical path.
// Inserts and deletes commit with one failure-atomic store of a slot's token byte, so no
// log is needed (Algorithms 1 and 2). Design notes, mapping of the algorithms to the code,
// deviations and figures: docs/engines/wophi.md.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root, one cache line used): the kit's root header alone
//   struct EngineRoot {  // engines/root.h
//     uint64 magic;      // kWophiRootMagic
//     uint32 version;    // kWophiVersion
//     uint32 check;      // of magic and version
//     uint64 table;      // sealed: pool offset of the live WophiTable. A resize switches
//                        // it with one failure-atomic 8-byte store (its commit point).
//     uint64 count;      // sealed: keys stored, exact after a clean Close (the kit stores
//                        // it), recounted by recovery after a crash
//   };
//
//   table block (allocator, a large run): the MB array and the head of its PAB list.
//   struct WophiTable {
//     uint64 magic;         // kWophiTableMagic
//     uint64 buckets;       // N main buckets (any N >= 1; not a power of two)
//     uint8  pad[32];       // zero
//     uint64 check;         // Engine::MetadataCheck of the 48 bytes above (written once)
//     uint64 pab_head;      // sealed word (Engine::SealFor): pool offset of the newest PAB
//                           // block (0: none). A refill links a block with one
//                           // failure-atomic 8-byte store.
//     WophiBucket mb[N];    // main bucket k holds keys with Reduce(hash, N) == k
//   };
//
//   PAB block (allocator): a run of pre-allocated, unaddressable chain buckets.
//   struct WophiPabBlock {
//     uint64 magic;         // kWophiPabMagic
//     uint64 next_block;    // older PAB block of the same table (0: end)
//     uint64 buckets;       // M buckets in this block
//     uint8  pad[32];       // zero
//     uint64 check;         // Engine::MetadataCheck of the 56 bytes above (written once)
//     WophiBucket b[M];
//   };
//
//   bucket: 128 bytes = two cache lines (the paper's 4 tokens + 4 slots + next is 76 bytes;
//   it is padded so that no slot straddles a line and the tokens, next and slots 0-2 are
//   read with one line):
//   struct WophiBucket {           // line 0
//     uint8   token[4];            // SlotForm per slot: 0 empty, 1 inline, 2 record. The
//                                  //   paper's token and each slot's commit point.
//     uint8   taken;               // PAB buckets: 1 once taken into a chain (clean reopen
//                                  //   rebuilds the free PAB list from it); 0 in MB
//     uint8   pad[3];
//     uint64  next;                // pool offset of the next chain bucket (0: end)
//     KvWords slot[4];             // slots 0-2 in line 0, slot 3 in line 1 (common/slot.h)
//     uint8   pad[48];             // line 1
//   };
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. A key with home bucket k = Reduce(KeyHash(key), N) is in the chain of mb[k]
//     (mb[k] and the PAB buckets linked from it), nowhere else, and at most once.
//  2. The token is a slot's commit point: the words of a slot whose token is 0 mean
//     nothing. A record slot owns its record; no other reachable slot points to it.
//  3. Every chain bucket after mb[k] is a bucket of a PAB block of the live table,
//     linked at most once, with taken = 1; after a clean Close a PAB bucket is linked iff
//     its taken byte is 1. Chains only grow (a delete only clears a token); a resize
//     builds new chains.
//  4. Count() equals the number of reachable slots whose token is not 0.
//
// ---- Persist order (Algorithms 1 and 2; line numbers as printed) -----------------------
//
//  insert into a free slot of the chain (Alg. 1 lines 6-17): record (if any) flushed;
//    slot words stored (lines 10-11), flushed (12-13); token published (Persister::
//    Publish: fence (14), one byte store (15), persist (16-17)): committed.
//  insert with a full chain (Alg. 1 lines 27-33): tmp = a free PAB bucket (no allocation);
//    its first line (tokens = {form,0,0,0}, taken = 1, next = 0, slot 0) written and
//    flushed (line 31); then the tail's next published (fence, one 8-byte store, persist;
//    lines 31-32): committed (tmp is unreachable before). expand_bucket_num += 1 (line 33,
//    DRAM; recovery recounts it).
//  PAB refill (not in the paper; a background thread, woken when an insert leaves the
//    free list at its low-water mark): a new block's header (next_block = the current
//    head) and line 0 of each bucket (taken = 0, tokens 0) are zeroed and flushed;
//    table.pab_head published (fence, one 8-byte store, persist). Unlinked blocks are reclaimed by
//    Allocator::Rebuild after a crash.
//  delete (Alg. 2 lines 6-17): token cleared with one byte store (10), persisted (11-12):
//    committed; the record (if any) freed after that.
//  update (not in the paper): inline value: one 8-byte store of word1, persist. Record:
//    new record flushed, word0 published (fence, one 8-byte store, persist), old record
//    freed. Inline -> record: UndoLog Tx saving the slot's words and token, stores,
//    persist, Commit.
//  resize (not in the paper): a new table of 2N main buckets and its own PAB blocks are
//    zeroed and filled from the old table (which is only read), flushed; then root.table
//    published (fence, one 8-byte store, persist); only then the old table and its PAB blocks are
//    freed. Before the switch the new blocks are unreachable (reclaimed after a crash).
//    Records move by pointer.
//  recovery (after a crash): walk every chain, validate tokens, records, placement and
//    next pointers (a damaged pool is Corruption, never a crash), count keys and chain
//    buckets, clear the taken byte of PAB buckets that were taken but never linked (a
//    crash between Alg. 1 lines 31 and 32), rebuild the free PAB list, persist root.count.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// Lock striping over main buckets (engines/striping.h): the chain of mb[k] is guarded by
// stripe k % kWophiStripes, a reader-writer spin lock with a version (VersionedRwLock,
// src/common/locks.h). Get reads
// the chain with no lock, validated by that version and the main-bucket count
// (FindOptimistic), and takes the stripe shared only after a few failed tries or for a
// record; Insert, Update, Put and Delete take it exclusively and release it only after
// their change is durable, so a search never returns a value that is not durable.
// The free PAB list is a DRAM vector under pab_mu_ (taking a bucket is a pop); refills
// (the background thread's, or an inserter's that found the list empty) are serialized
// by refill_mu_ and take no stripe. The table
// changes only under resize_mu_, every stripe and refill_mu_ (in that order; an inserter
// holding a stripe may take refill_mu_ when the PAB is empty, never the reverse). ForEach
// holds resize_mu_ shared and each stripe briefly; it calls fn with no stripe held.
// Count() sums 64 sharded counters.
//
// ---- Scan (Index::Scan; the cursor: engines/scan.h) ------------------------------------
//
// A home is a main bucket and its chain. A page holds resize_mu_ shared (no resize during
// it) and reads each chain under its stripe shared. A key stays in its home's chain until
// a resize, which waits for the page, so every key present for the whole scan is passed
// at least once; twice only when its hash lies within 2^16 below a page boundary. Keys
// inserted or deleted during the scan may or may not be passed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "engines/striping.h"

namespace pmhash::engines {

inline constexpr uint64_t kWophiRootMagic = 0x3152494850'4f574dull;   // "MWOPHIR1"
inline constexpr uint64_t kWophiTableMagic = 0x3154494850'4f574dull;  // "MWOPHIT1"
inline constexpr uint64_t kWophiPabMagic = 0x3150494850'4f574dull;    // "MWOPHIP1"
inline constexpr uint64_t kWophiVersion = 2;  // 2: root check, sealed words, header checks
inline constexpr size_t kWophiAssoc = 4;  // the paper's ASSOC_NUM
inline constexpr uint64_t kWophiMinBuckets = 4;
inline constexpr uint64_t kWophiDefaultBuckets = 1024;
inline constexpr size_t kWophiStripes = 1024;  // lock stripes (power of two)
inline constexpr size_t kWophiCountShards = 64;  // key-count shards (power of two)

struct alignas(64) WophiBucket {
  uint8_t token[kWophiAssoc];
  uint8_t taken;
  uint8_t pad0[3];
  uint64_t next;
  KvWords slot[kWophiAssoc];
  uint8_t pad1[48];
};
static_assert(sizeof(WophiBucket) == 2 * pm::kCacheLine,
              "a bucket is two cache lines: tokens, next and slots 0-2 share line 0");
static_assert(offsetof(WophiBucket, next) % 8 == 0,
              "next is linked with one failure-atomic 8-byte store (Alg. 1 line 32)");
static_assert(offsetof(WophiBucket, token) == 0 && offsetof(WophiBucket, taken) == 4 &&
                  offsetof(WophiBucket, next) == 8 &&
                  offsetof(WophiBucket, slot) == 16,
              "the bucket's layout (versions 1 and 2)");
static_assert(offsetof(WophiBucket, slot) + 3 * sizeof(KvWords) == pm::kCacheLine,
              "slots 0-2 fill line 0, so the first slot of a new chain bucket and its "
              "header are persisted with one flush");
static_assert(sizeof(SlotForm) == 1, "a token is stored with one atomic byte store");
static_assert(offsetof(WophiBucket, token) % 4 == 0 && sizeof(WophiBucket::token) == 4,
              "a search reads the four tokens with one 4-byte load (LoadForms)");

struct alignas(64) WophiTableHeader {
  uint64_t magic;
  uint64_t buckets;
  uint8_t pad[32];
  uint64_t check;
  uint64_t pab_head;
};
static_assert(sizeof(WophiTableHeader) == pm::kCacheLine,
              "the header is one line, so the buckets start line aligned");
static_assert(offsetof(WophiTableHeader, pab_head) % 8 == 0,
              "pab_head is switched by one failure-atomic 8-byte store");
static_assert(offsetof(WophiTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(WophiTableHeader, buckets) == offsetof(TableHeader, size) &&
                  offsetof(WophiTableHeader, check) == 48 &&
                  offsetof(WophiTableHeader, pab_head) == 56,
              "the table header's layout (version 2): the check covers what precedes it");

struct alignas(64) WophiPabHeader {
  uint64_t magic;
  uint64_t next_block;
  uint64_t buckets;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(WophiPabHeader) == pm::kCacheLine, "the PAB header is one line");
static_assert(offsetof(WophiPabHeader, magic) == 0 && offsetof(WophiPabHeader, next_block) == 8 &&
                  offsetof(WophiPabHeader, buckets) == 16 &&
                  offsetof(WophiPabHeader, check) == 56,
              "the PAB header's layout (version 2)");

class Wophi : public Engine {
 public:
  Wophi();
  ~Wophi() override;

  // A key's main bucket among N is Reduce(hash, N) (util/hash.h: the high bits pick the
  // bucket, so doubling sends bucket k to 2k or 2k+1).
  uint64_t main_buckets() const { return main_buckets_.load(std::memory_order_acquire); }
  // Chain buckets taken from the PAB since the table was built (the paper's
  // expand_bucket_num) and free PAB buckets left.
  uint64_t expand_bucket_num() const { return expand_bucket_num_.load(std::memory_order_relaxed); }
  uint64_t pab_free() const;
  uint64_t pab_refills() const { return pab_refills_.load(std::memory_order_relaxed); }
  uint64_t resizes() const { return resizes_.load(std::memory_order_relaxed); }
  // Waits for the background PAB refill (if one is due or running).
  void WaitForBackgroundWork() override;

  // The Index contract (include/pmhash/index.h), and: Insert never fails for lack of a
  // PAB bucket while the pool can hold one more; PoolFull only when the pool is full.
  // ForEach copies one chain at a time and calls fn with no stripe held, so fn may call
  // any method of this index (a resize that an Insert from fn would start is deferred).
  // CheckInvariants checks invariants 1-4 by a full walk.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  // The key's main bucket (line 0: tokens, next, slots 0-2).
  void Prefetch(uint64_t hash) const override;
  void StopBackgroundWork() override;

 private:
  using Stripe = VersionedStripe;
  // Inserts minus deletes since open, sharded by stripe: Count() sums 64 lines, cheap
  // enough for the load-factor check on every chain extension.
  struct alignas(64) CountShard {
    std::atomic<int64_t> delta{0};
  };
  CountShard& ShardOf(const Stripe& s) const {
    return counts_[stripes_.IndexOf(s) & (kWophiCountShards - 1)];
  }

  // Where a key is, or where it could go.
  struct Probe {
    WophiBucket* bucket = nullptr;  // the key's bucket (null: not found)
    size_t index = 0;
    WophiBucket* free_bucket = nullptr;  // the first empty slot (Alg. 1 line 8)
    size_t free_index = 0;
    WophiBucket* tail = nullptr;  // the chain's last bucket (Alg. 1 line 24)
  };

  // Pointers into a table of `buckets` main buckets mapped at `table`.
  struct View {
    View() = default;
    View(char* table, uint64_t offset, uint64_t buckets)
        : table(table),
          offset(offset),
          buckets(buckets),
          header(reinterpret_cast<WophiTableHeader*>(table)),
          mb(reinterpret_cast<WophiBucket*>(table + sizeof(WophiTableHeader))) {}
    char* table = nullptr;
    uint64_t offset = 0;
    uint64_t buckets = 0;
    WophiTableHeader* header = nullptr;
    WophiBucket* mb = nullptr;
  };

  // A PAB block of a table, as recovery and resize track it.
  struct PabBlock {
    uint64_t offset;
    uint64_t buckets;
  };

  Stripe& LockHome(uint64_t hash, LockMode mode, uint64_t* home, uint64_t* buckets) const {
    return stripes_.LockHome(main_buckets_, hash, mode, home, buckets);
  }

  // Walks the chain of mb[home] (Alg. 1 lines 6-26 / Alg. 2 lines 6-17).
  Probe Find(std::string_view key, uint64_t hash, uint64_t home) const;
  // The search walk with no lock: kFound (read->value_word holds an inline value) or
  // kAbsent when the stripe's version held still and the table did not grow; kRetry
  // when a writer was in; kLocked when only the shared lock can answer (the key or its
  // value is a record, whose bytes are read under the lock).
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  // DoGet after its first try: the search with no lock (counted, retried), then the lock.
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  // A search under the shared lock (FindOptimistic could not answer).
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);
  // Alg. 1 lines 9-17 or 27-33. *grow is set when the table should grow afterwards.
  Status InsertAt(const Probe& p, std::string_view key, std::string_view value, uint64_t hash,
                  Stripe& stripe, bool* grow);
  Status UpdateAt(const Probe& p, std::string_view key, std::string_view value, uint64_t hash);

  // PAB: pops a free bucket (refilling synchronously only if the list is empty).
  Status TakePabBucket(uint64_t* offset);
  // Links a new PAB block to the live table unless the free list is already above the
  // low-water mark. `locked`: the caller holds refill_mu_ (else it is taken here).
  Status RefillPab(bool locked);
  // Allocates a zeroed, flushed (not fenced) PAB block of up to `buckets` buckets (fewer
  // if the pool is short) whose next_block is `next`.
  Status NewPabBlock(uint64_t buckets, uint64_t next, uint64_t* offset, uint64_t* got);
  // After an insert took a PAB bucket (no stripe held): wakes the refill thread if the
  // free list is at its low-water mark, starting the thread on first use.
  void RequestRefill();
  void RefillWorker();

  Status NewTable(uint64_t buckets, uint64_t* offset);
  Status Grow(uint64_t observed_buckets);
  uint64_t HashOf(SlotForm form, const KvWords& words) const;
  uint64_t BucketsFor(uint64_t keys) const;
  uint64_t PabBlockSize(uint64_t main_buckets) const;
  uint64_t PabLowWater(uint64_t main_buckets) const;

  // Raw-PM validation of the table header at `table` (the root header validated first),
  // no allocator needed (EnumerateBlocks runs before Recover).
  Status ValidateTable(uint64_t table, uint64_t* buckets) const;
  Status ReadPabList(const WophiTableHeader* header, std::vector<PabBlock>* blocks) const;
  // The next bucket of a chain, for the walks that run on a pool nothing has validated
  // (a clean open reads no chain): null at the end, or when `next` cannot be a bucket
  // inside the pool. Such walks also stop after max_chain_ buckets (a damaged pool
  // could hold a cycle).
  WophiBucket* NextBucket(const WophiBucket* b) const;
  // "bucket at pool offset X", for error messages.
  std::string Where(const void* p) const;
  // Calls fn(form, words) for each committed slot of main bucket k's chain (a bounded
  // walk of the live table; the caller holds k's stripe): ForEach and Scan.
  template <typename Fn>
  void VisitChain(uint64_t k, Fn&& fn) const {
    uint64_t depth = 0;
    for (const WophiBucket* b = &view_.mb[k]; b != nullptr && depth < max_chain_;
         b = NextBucket(b), ++depth) {
      for (size_t i = 0; i < kWophiAssoc; ++i) {
        const auto f = static_cast<SlotForm>(b->token[i]);
        if (f != SlotForm::kEmpty) fn(f, b->slot[i]);
      }
    }
  }
  // The index of the PAB bucket at `offset` among all buckets of `blocks` (sorted by
  // offset), or Corruption.
  Status PabIndex(const std::vector<PabBlock>& blocks, const std::vector<uint64_t>& first,
                  uint64_t offset, uint64_t* index) const;
  // Walks every chain of the table: calls on_slot (with the slot's words in PM) for
  // committed slots and marks linked PAB buckets. Bounded on any pool: a chain may only
  // link PAB buckets, each once. Used by EnumerateBlocks, Recover and CheckInvariants.
  struct Walk {
    std::vector<PabBlock> blocks;   // sorted by offset
    std::vector<uint64_t> first;    // index of each block's first bucket
    std::vector<bool> linked;       // per PAB bucket
    uint64_t chain_buckets = 0;
    uint64_t keys = 0;
  };
  Status WalkTable(uint64_t table, uint64_t buckets, bool validate, Walk* walk,
                   const std::function<Status(uint64_t home, SlotForm, const KvWords&)>& on_slot)
      const;
  Status RebuildVolatile(bool clean, uint64_t stored_count);

  // Options (Configure).
  uint64_t initial_buckets_ = 0;
  uint64_t pab_block_opt_ = 0;  // 0: auto
  uint64_t pab_low_opt_ = 0;    // 0: auto
  double max_load_factor_ = 1.0;

  Stripes<Stripe> stripes_;
  std::unique_ptr<CountShard[]> counts_;
  mutable std::shared_mutex resize_mu_;
  mutable std::mutex refill_mu_;
  // The background refill: RequestRefill sets refill_requested_; the worker clears it,
  // refills with refill_busy_ set, and notifies waiters.
  std::mutex refill_signal_mu_;
  std::condition_variable refill_cv_;
  std::thread refill_thread_;
  bool refill_requested_ = false;
  bool refill_busy_ = false;
  bool stop_refill_ = false;
  mutable std::mutex pab_mu_;
  std::vector<uint64_t> pab_free_list_;  // free PAB bucket offsets (back = next taken)
  uint64_t pab_total_ = 0;               // buckets in the live table's PAB blocks
  View view_;
  uint64_t max_chain_ = 0;  // buckets that fit the pool: no chain is longer
  // view_.mb, for searches that take no lock: stored before main_buckets_ (release), so a
  // search that read the new count reads the new array.
  std::atomic<const WophiBucket*> mb_{nullptr};
  std::atomic<uint64_t> main_buckets_{0};
  uint64_t base_count_ = 0;

  // Engine counters.
  std::atomic<uint64_t> expand_bucket_num_{0};
  std::atomic<uint64_t> pab_refills_{0};
  std::atomic<uint64_t> pab_sync_refills_{0};  // refills an inserter had to wait for
  std::atomic<uint64_t> resizes_{0};
  uint64_t recovered_unlinked_ = 0;  // taken-but-unlinked PAB buckets found by recovery
};

}  // namespace pmhash::engines
