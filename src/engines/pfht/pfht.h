// `pfht` and `pfht-log`: PFHT (Debnath, Haghdoost, Kadav, Khatib, Ungureanu, "Revisiting
// hash table design for phase change memory", INFLOW'15), the PCM-friendly cuckoo table
// that Group hashing (paper 004) and WOPHI (paper 000) measure as a baseline. One table of
// N 4-slot buckets; a key has two candidate buckets (two hash functions). An insert takes
// a free slot of either; else it makes room with AT MOST ONE displacement (a resident of a
// full candidate moves to its own other bucket if that has a free slot); else the item
// goes to the stash, a sequential area of 3% of the table's slots. `pfht` persists as the
// original (no log: each slot commits with its token, like level and wophi); `pfht-log`
// runs every insert, delete and displacement through the kit's log (WOPHI's "PFHT-Log"),
// which is what makes its writes cost more flushes. Design notes, mapping to the papers,
// deviations and figures: docs/engines/pfht.md.
//
// ---- Hash functions ---------------------------------------------------------------------
//
// As level: position 1 is Reduce(h, N), position 2 Reduce(rotl(h, 32), N) of the kit's one
// 64-bit KeyHash h.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area: the kit's root header alone (engines/root.h)
//   struct EngineRoot {
//     uint64 magic;      // kPfhtRootMagic
//     uint32 version;    // kPfhtVersion
//     uint32 check;
//     uint64 table;      // sealed: pool offset of the live PfhtTable. A resize switches it
//                        // with one failure-atomic 8-byte store (PublishRootTable).
//     uint64 count;      // sealed: keys, exact after a clean Close; recounted after a crash
//   };
//
//   table block (allocator):
//   struct PfhtTable {
//     uint64 magic;          // kPfhtTableMagic
//     uint64 buckets;        // N >= 2
//     uint64 stash_buckets;  // S = ceil(0.03 N), >= 1: the stash holds 4 S slots, 3% of 4 N
//     uint8  pad[32];
//     uint64 check;          // Engine::MetadataCheck of the 56 bytes above (written once)
//     PfhtBucket b[N];       // the cuckoo table
//     PfhtBucket stash[S];   // the stash, searched in order (slot k = stash[k / 4].slot[k % 4])
//   };
//
//   struct PfhtBucket {           // 128 bytes, two lines (level's bucket shape)
//     uint8   token[4];           // SlotForm per slot (0 empty, 1 inline, 2 record): the
//                                 //   slot's commit point
//     uint8   pad[12];
//     KvWords slot[4];            // slots 0-2 in line 0 with the tokens, slot 3 in line 1
//     uint8   pad[48];
//   };
//
// Keys and values go through the kit's slot codec (common/slot.h): an 8-byte key with an
// 8-byte value inline, anything else a record.
//
// ---- Invariants (no mutation in flight) -------------------------------------------------
//
//  1. A key with hash h is in bucket p1(h) or p2(h), or in the stash; at most once.
//  2. A slot whose token is 0 means nothing. A record slot owns its record.
//  3. Count() equals the number of slots whose token is not 0 (buckets and stash).
//  4. DRAM: stash_tags_[k] is 0 iff stash slot k is empty, else StashTag(h) of its key;
//     stash_end_ is one past the last used stash slot.
//
// ---- Persist order: pfht (no log) -------------------------------------------------------
//
//  insert into a free slot (bucket or stash): record (if any) flushed; the slot's two words
//    stored and flushed; fence; token stored and persisted (Persister::Publish): committed.
//  delete: token cleared, persisted: committed; then the record (if any) freed.
//  displacement (a resident at S moves to a free slot D of its other bucket): D's words,
//    flush, fence, D's token persisted: the item is now in BOTH its buckets with identical
//    words; then S's token cleared and persisted; then the new item is written into S.
//    A crash between the two token writes leaves the key twice (never nowhere: the source
//    is cleared only after the copy is durable). That is all a crash during a displacement
//    can leave. Recovery repairs it: of two set slots with identical form and words among
//    a key's buckets, it clears the one at the higher address (never frees the record, which
//    the other still owns). No acknowledged write is lost: an insert returns after its own
//    token is durable.
//  update: the kit's UpdateSlot (inline value: one 8-byte store; record: new record, pointer
//    published, old freed; inline -> record under an undo-log transaction).
//
// ---- Persist order: pfht-log (every write logged) ---------------------------------------
//
//  insert, delete, displacement: one log transaction (pm::UndoLog, the kit's log) that
//    first saves each bucket the operation changes (128 bytes each: the displaced item's
//    source and destination and the new item's bucket), persisted by the log; then the
//    changes are stored, every changed bucket flushed, fence; Commit retires the log (one
//    8-byte store, persisted): the commit point. A crash before Commit rolls every saved
//    bucket back at open (UndoLog::Recover): the operation never happened; after, it
//    happened whole. So a displacement never leaves a key twice: recovery calls a duplicate
//    Corruption. Deletes free the record after Commit. Updates: UpdateSlot (already
//    failure-atomic). The WOPHI paper's PFHT-Log is a redo log: ours is the kit's undo log
//    (same double write of every changed line; see docs/engines/pfht.md).
//
// ---- Resize (not in the original) ---------------------------------------------------------
//
//  When an insert finds no place (both buckets full, no displacement, stash full), the
//  table doubles, if resizing is on and at least min_resize_load of the slots are used
//  (else TableFull: the key collides with too many keys of its hash). A new block of 2N
//  buckets (stash ceil(0.03 * 2N)) is filled with every item by the insert rule (free slot,
//  one displacement, stash), flushed, fenced, then root.table is published (the commit
//  point), then the old block freed. Items point to the same records (the words are
//  copied), so no record moves. A crash before the publish leaves the new block unreachable
//  (the allocator's rebuild reclaims it); after it, the old one (same). If an item finds no
//  place in the new block, the block is freed and the insert is TableFull.
//
//  recovery (after a crash): every slot validated (form, record, right bucket), duplicates
//  of a displacement cleared (pfht) or refused (pfht-log), keys counted, root.count
//  persisted, the DRAM stash tags rebuilt.
//
// ---- Concurrency ------------------------------------------------------------------------
//
// The original is single-threaded. Here one reader-writer lock guards the table: searches
// share it, writers hold it exclusively (the stash is shared by every key, so a finer lock
// would still meet there). ForEach and Scan copy under it shared and call fn with none
// held; a resize also holds resize_mu_, which ForEach holds shared (IterationScope).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/slot.h"
#include "engines/engine.h"

namespace pmhash::engines {

inline constexpr uint64_t kPfhtRootMagic = 0x3152544846504d4dull;   // "MMPFHTR1"
inline constexpr uint64_t kPfhtTableMagic = 0x3154544846504d4dull;  // "MMPFHTT1"
inline constexpr uint32_t kPfhtVersion = 1;
inline constexpr size_t kPfhtAssoc = 4;  // slots per bucket (the paper's)
inline constexpr uint64_t kPfhtMinBuckets = 2;
inline constexpr uint64_t kPfhtDefaultBuckets = 1024;
inline constexpr double kPfhtStashShare = 0.03;  // of the table's slots (Group hashing, 4.1)

struct alignas(64) PfhtBucket {
  uint8_t token[kPfhtAssoc];
  uint8_t pad0[12];
  KvWords slot[kPfhtAssoc];
  uint8_t pad1[48];
};
static_assert(sizeof(PfhtBucket) == 2 * pm::kCacheLine,
              "a bucket is two lines: tokens and slots 0-2 in line 0, slot 3 in line 1");
static_assert(offsetof(PfhtBucket, token) == 0 && sizeof(PfhtBucket::token) == 4,
              "the four tokens are one aligned 4-byte word, loaded at once");
static_assert(offsetof(PfhtBucket, slot) == 16 &&
                  offsetof(PfhtBucket, slot) + 3 * sizeof(KvWords) == pm::kCacheLine,
              "slots 0-2 share line 0 with the tokens");
static_assert(sizeof(SlotForm) == 1, "a token is one byte");

struct alignas(64) PfhtTableHeader {
  uint64_t magic;
  uint64_t buckets;
  uint64_t stash_buckets;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(PfhtTableHeader) == pm::kCacheLine,
              "the header is one line, so the buckets start line aligned");
static_assert(offsetof(PfhtTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(PfhtTableHeader, buckets) == offsetof(TableHeader, size) &&
                  offsetof(PfhtTableHeader, stash_buckets) == 16 &&
                  offsetof(PfhtTableHeader, check) == 56,
              "the pfht header's layout (version 1): the check covers what precedes it");

class PfhtHash : public Engine {
 public:
  enum class Logging : uint8_t { kNone, kLog };
  explicit PfhtHash(Logging logging) : logging_(logging) {}

  bool logged() const { return logging_ == Logging::kLog; }
  uint64_t buckets() const { return view_.n; }
  uint64_t stash_used() const { return stash_used_; }

  PMHASH_ENGINE_KIT_OVERRIDES;

 private:
  // A table mapped in memory.
  struct Table {
    uint64_t off = 0;
    uint64_t n = 0;  // buckets
    uint64_t s = 0;  // stash buckets
    PfhtBucket* b = nullptr;
    PfhtBucket* stash = nullptr;
  };
  struct Slot {
    PfhtBucket* bucket = nullptr;
    size_t index = 0;
  };
  // The buckets a log transaction saved (and the writer then flushes), at most three.
  struct Touched {
    PfhtBucket* b[3] = {nullptr, nullptr, nullptr};
    int n = 0;
  };

  // Where Place writes: the live table (pfht commits each slot by its token, pfht-log logs
  // the buckets it changes) or a resize's unpublished table (plain stores).
  enum class PlaceInto : uint8_t { kLiveTable, kNewTable };
  // How WriteSlot commits: data, flush, fence, token persisted; stores and a flush of the
  // changed lines (the caller fences); or stores only.
  enum class SlotCommit : uint8_t { kToken, kFlush, kStoreOnly };

  static void PositionsOf(uint64_t hash, uint64_t n, uint64_t* p1, uint64_t* p2);
  static uint8_t StashTag(uint64_t hash) { return static_cast<uint8_t>((hash >> 56) | 1); }
  static uint64_t StashBucketsFor(uint64_t n);
  uint64_t BucketsFor(uint64_t keys) const;
  uint64_t HashOf(SlotForm form, const KvWords& words) const;

  Slot Find(std::string_view key, uint64_t hash) const;
  // The insert rule over table `t` (`into`: the live one, or a resize's new one; `tags`
  // its stash tags): free slot of either bucket, one displacement, the stash. pfht-log,
  // live table: the changed buckets are logged first. *placed false when there is no
  // place; then nothing changed.
  Status Place(const Table& t, std::vector<uint8_t>* tags, uint64_t hash, SlotForm form,
               const KvWords& words, PlaceInto into, bool* placed);
  // kToken (pfht, live): words, flush, fence, token persisted. kFlush: pfht-log (stores,
  // then the lines from the tokens to the slot flushed; Place fences before Commit).
  // kStoreOnly: a resize (the table is flushed whole).
  void WriteSlot(PfhtBucket* bucket, size_t i, SlotForm form, const KvWords& words,
                 SlotCommit how);
  // Doubles the table unless another thread already grew it past observed_n (OK then
  // too); *grew says whether this call did.
  Status Grow(uint64_t observed_n, bool* grew);

  Status CheckSlot(const Table& t, const PfhtBucket* b, bool in_stash, size_t i,
                   uint64_t* hash) const;
  // Allocates and zeroes a table of n buckets and its stash, header stored, unflushed
  // (unreachable until the root links it).
  Status NewTable(uint64_t n, Table* t);
  Status ReadTable(uint64_t off, Table* t) const;
  void SetView(const Table& t);
  void RebuildStashTags();
  template <typename Fn>
  void ForEachSlot(const Table& t, Fn&& fn) const {
    for (uint64_t k = 0; k < t.n + t.s; ++k) {
      PfhtBucket* b = k < t.n ? &t.b[k] : &t.stash[k - t.n];
      for (size_t i = 0; i < kPfhtAssoc; ++i) fn(b, k >= t.n, i);
    }
  }

  const Logging logging_;
  uint64_t initial_buckets_ = 0;
  double min_resize_load_ = 0.5;

  mutable std::shared_mutex mu_;         // the table
  mutable std::shared_mutex resize_mu_;  // ForEach (shared) against a resize
  Table view_;
  std::vector<uint8_t> stash_tags_;  // DRAM, one per stash slot (invariant 4)
  uint64_t stash_used_ = 0;
  size_t stash_end_ = 0;  // one past the last used stash slot: searches stop there
  std::atomic<uint64_t> count_{0};

  std::atomic<uint64_t> resizes_{0};
  std::atomic<uint64_t> displacements_{0};
  std::atomic<uint64_t> stash_inserts_{0};
  std::atomic<uint64_t> log_txs_{0};
  std::atomic<uint64_t> refused_resizes_{0};
  uint64_t recovered_duplicates_ = 0;
};

}  // namespace pmhash::engines
