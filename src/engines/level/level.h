// `level`: Level hashing (Zuo, Hua, Wu, OSDI'18). Two levels of 4-slot buckets: a top
// level of N buckets and a bottom level of N/2, top buckets 2j and 2j+1 sharing bottom
// bucket j. A key has two positions in each level (two hash functions), so a search reads
// four candidate buckets. An insert takes a free slot of the two top candidates, then of
// the two bottom ones, then makes room by one cuckoo move (an item of a candidate bucket
// to its other bucket of the same level), then by a bottom-to-top move; when nothing
// works the table grows in place: a new top of 2N buckets, the old top becomes the bottom,
// the old bottom's items are rehashed into the new levels, the old bottom is freed. Slot
// writes commit with a per-slot token (no log); an update writes the new item into a free
// slot of the same bucket and flips both tokens with one atomic store. Design notes,
// mapping to the paper, deviations and figures: docs/engines/level.md.
//
// ---- Hash functions ---------------------------------------------------------------------
//
// The kit's one 64-bit KeyHash h gives both: position 1 is Reduce(h, N) and position 2 is
// Reduce(rotl(h, 32), N) (util/hash.h: Reduce takes the high bits), i.e. mostly the high
// and the low 32-bit half of h. The bottom candidate of top bucket i is i / 2, which is
// Reduce(., N/2): so when the top doubles to 2N, Reduce(., 2N) / 2 = Reduce(., N) and the
// old top's items are already where the new bottom wants them (the paper's in-place
// resize needs exactly this).
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area: the kit's root header alone (engines/root.h)
//   struct EngineRoot {
//     uint64 magic;      // kLevelRootMagic
//     uint32 version;    // kLevelVersion
//     uint32 check;
//     uint64 table;      // sealed: pool offset of the TOP level. A resize switches it with
//                        // one failure-atomic 8-byte store (PublishRootTable).
//     uint64 count;      // sealed: keys, exact after a clean Close; recounted after a crash
//   };
//
//   level block (allocator): one level, top or bottom.
//   struct LevelTable {
//     uint64 magic;        // kLevelTableMagic
//     uint64 buckets;      // N (top: even, >= 2; the bottom named by a top has N/2)
//     uint64 bottom;       // pool offset of the bottom level (meaningful while this block
//                          //   is the top; written once, before the block is reachable)
//     uint8  pad[24];
//     uint64 check;        // Engine::MetadataCheck of the 48 bytes above
//     uint64 rehash_from;  // sealed: the old bottom whose items a resize is moving into
//                          //   this top and its bottom (0: none). Set before the top is
//                          //   published, cleared once every item is placed.
//     LevelBucket b[N];
//   };
//
//   struct LevelBucket {          // 128 bytes, two lines
//     uint8   token[4];           // SlotForm per slot (0 empty, 1 inline, 2 record): the
//                                 //   slot's commit point (the paper's token)
//     uint8   pad[12];
//     KvWords slot[4];            // slots 0-2 in line 0, slot 3 in line 1 (common/slot.h)
//     uint8   pad[48];
//   };
//
// Keys and values go through the kit's slot codec (common/slot.h) as in wophi and group:
// an 8-byte key with an 8-byte value inline in the slot, anything else a record.
//
// ---- Invariants (no mutation in flight) -------------------------------------------------
//
//  1. A key with hash h is in one of its four candidate buckets (top p1, p2; bottom p1/2,
//     p2/2), and at most once.
//  2. A slot whose token is 0 means nothing. A record slot owns its record, no other slot
//     points to it.
//  3. root.table's top has rehash_from = 0 and a bottom of half its buckets.
//  4. Count() equals the number of slots whose token is not 0.
//
// ---- Persist order ------------------------------------------------------------------
//
//  insert into a free slot: record (if any) flushed; the slot's two words stored and
//    flushed; fence; token stored; persist (Persister::Publish): committed. Never the token
//    before the data (Witcher's report on the original).
//  delete: token cleared, persisted: committed; then the record (if any) freed.
//  cuckoo move / bottom-to-top move (item at S to free slot D): D's words stored and
//    flushed, fence, D's token published (the item is now twice, with identical words);
//    S's token cleared and persisted. A crash in between leaves two slots with identical
//    form and words in candidate buckets of one key: recovery clears the one at the higher
//    address (never frees its record, which the other still owns).
//  update (opportunistic, the paper's log-free update): the new item's words (and record)
//    in a free slot j of the bucket holding the old item at slot i, flushed, fence; then
//    the bucket's four tokens replaced with one 4-byte atomic store (token[i] = 0,
//    token[j] = form), persisted: committed; the old record freed. Fallbacks: an inline
//    value replacing an inline value is one 8-byte store of the value word, persisted (as
//    failure-atomic and cheaper); with no free slot in the bucket, the kit's UpdateSlot
//    (new record then pointer publish; inline -> record under an undo-log transaction).
//  resize (top T of N, bottom B of N/2): the placement of every item of B is planned in
//    DRAM first (PlanRehash: the less loaded of its two buckets in the new top T' of 2N,
//    else the less loaded of its two in T, the new bottom; ties: position 1; with all
//    four full, a chain of earlier planned items each moved to its other top bucket): if
//    an item has no place the resize is refused before anything is written (the insert
//    gets TableFull). T' is allocated, zeroed, its header written (bottom = T,
//    rehash_from = B), flushed; root.table
//    published: the commit point (capacity and levels change only once the buckets exist
//    and are durable). Then each planned item in order: words stored and flushed, fence,
//    token stored and flushed (each item's fence orders the previous token first, so the
//    placed items are always a prefix of the plan); B's tokens are left alone. Then fence,
//    T'.rehash_from = 0 persisted, B freed (a crash before the free leaves B unreachable:
//    the allocator's rebuild reclaims it).
//  recovery (after a crash): if the top's rehash_from is set, the rehash is finished: each
//    item of B still set is skipped if a slot with identical form and words is among its
//    new candidates (already placed), else placed in its bucket of the plan, which
//    PlanRehash computes again from the resize's inputs (B's items; T's use before, that
//    is now less the items placed in it), so a place exists; rehash_from cleared, B
//    freed. Then every
//    slot is validated (form, record, candidate bucket), duplicates of a move cleared,
//    the keys counted, root.count persisted. Recovery only walks the table once (plus the
//    old bottom): it never waits on anything, so a reopen cannot hang.
//
// ---- Concurrency ------------------------------------------------------------------------
//
// Lock striping (engines/striping.h) by top-bucket pair: stripe (i / 2) % kLevelStripes
// guards top buckets i and i ^ 1 and the bottom bucket i / 2 they share, so a key's four
// candidates are guarded by two stripes (one if p1/2 and p2/2 fall in one stripe). Writers
// take both exclusively in stripe order, then check the top size again (a resize between
// the read and the lock retries). A move to a bucket outside them try-locks its stripe
// (no waiting while holding: no deadlock) and skips the move if it is busy; an insert that
// found no place only for that retries (kBusyRetries rounds) rather than grow. Get reads the
// four buckets with no lock, validated by both stripes' versions and the top size
// (OptimisticGet); a record key, or a writer that keeps coming in, sends it to the key's
// two stripes (taken as a writer takes them, LockKey: rare enough not to need a shared
// path). A resize holds resize_mu_ and every stripe. ForEach and Scan pages hold every
// stripe shared while they copy (a move could otherwise carry a key past the copy), and
// call fn with none held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "engines/striping.h"

namespace pmhash::engines {

inline constexpr uint64_t kLevelRootMagic = 0x31524c4556454c4dull;   // "MLEVELR1"
inline constexpr uint64_t kLevelTableMagic = 0x31544c4556454c4dull;  // "MLEVELT1"
inline constexpr uint32_t kLevelVersion = 1;
inline constexpr size_t kLevelAssoc = 4;  // slots per bucket (the paper's)
inline constexpr uint64_t kLevelMinTop = 2;
inline constexpr uint64_t kLevelDefaultTop = 1024;
inline constexpr size_t kLevelStripes = 1024;    // power of two
// Rounds an insert retries when it found no place only because a move's destination
// stripe was busy, before it treats the table as full (SpinBackoff's pauses, then yields).
inline constexpr int kBusyRetries = 128;
inline constexpr size_t kLevelCountShards = 64;  // power of two

struct alignas(64) LevelBucket {
  uint8_t token[kLevelAssoc];
  uint8_t pad0[12];
  KvWords slot[kLevelAssoc];
  uint8_t pad1[48];
};
static_assert(sizeof(LevelBucket) == 2 * pm::kCacheLine,
              "a bucket is two lines: tokens and slots 0-2 in line 0, slot 3 in line 1");
static_assert(offsetof(LevelBucket, token) == 0 && sizeof(LevelBucket::token) == 4,
              "the four tokens are one aligned 4-byte word: a search loads them at once "
              "(LoadForms) and an update flips two of them with one atomic store");
static_assert(offsetof(LevelBucket, slot) == 16 &&
                  offsetof(LevelBucket, slot) + 3 * sizeof(KvWords) == pm::kCacheLine,
              "slots 0-2 share line 0 with the tokens");
static_assert(sizeof(SlotForm) == 1, "a token is one byte");

struct alignas(64) LevelTableHeader {
  uint64_t magic;
  uint64_t buckets;
  uint64_t bottom;
  uint8_t pad[24];
  uint64_t check;
  uint64_t rehash_from;
};
static_assert(sizeof(LevelTableHeader) == pm::kCacheLine,
              "the header is one line, so the buckets start line aligned");
static_assert(offsetof(LevelTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(LevelTableHeader, buckets) == offsetof(TableHeader, size) &&
                  offsetof(LevelTableHeader, bottom) == 16 &&
                  offsetof(LevelTableHeader, check) == 48 &&
                  offsetof(LevelTableHeader, rehash_from) == 56,
              "the level header's layout (version 1): the check covers what precedes it");
static_assert(offsetof(LevelTableHeader, rehash_from) % 8 == 0,
              "rehash_from is cleared with one failure-atomic 8-byte store");

class LevelHash : public Engine {
 public:
  LevelHash();

  uint64_t top_buckets() const { return top_n_.load(std::memory_order_acquire); }
  uint64_t resizes() const { return resizes_.load(std::memory_order_relaxed); }
  uint64_t cuckoo_moves() const { return cuckoo_moves_.load(std::memory_order_relaxed); }
  uint64_t b2t_moves() const { return b2t_moves_.load(std::memory_order_relaxed); }
  // Tests only: fn runs when an insert found no place, with no lock held, before it decides
  // to retry, grow or refuse (it may grow the table meanwhile, as another thread can).
  void SetAfterFailedPlaceForTesting(std::function<void()> fn) {
    after_failed_place_for_testing_ = std::move(fn);
  }
  // Tests only: the stripe that guards top bucket i (a test holds it as another writer).
  VersionedRwLock& StripeLockForTesting(uint64_t i) const { return StripeOfTop(i).mu; }

  // Index's contract (include/pmhash/index.h). ForEach copies the whole table under every
  // stripe shared, then calls fn with none held. CheckInvariants checks invariants 1-4.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  void Prefetch(uint64_t hash) const override;

 private:
  using Stripe = VersionedStripe;
  struct alignas(64) CountShard {
    std::atomic<int64_t> delta{0};
  };

  // A level mapped in memory.
  struct Levels {
    uint64_t top_off = 0, bottom_off = 0;
    uint64_t n = 0;  // top buckets; the bottom has n / 2
    LevelTableHeader* header = nullptr;
    LevelBucket* top = nullptr;
    LevelBucket* bottom = nullptr;
  };
  // A key's candidate buckets in a table of n top buckets.
  struct Candidates {
    uint64_t t1, t2;  // top positions
    uint64_t b1() const { return t1 / 2; }
    uint64_t b2() const { return t2 / 2; }
  };
  static Candidates CandidatesOf(uint64_t hash, uint64_t n);
  // prefetch_buckets: the four candidates' token lines at once. Their addresses follow
  // from the hash, so the misses overlap instead of following each early exit. A hint:
  // a table a resize retires meanwhile is harmless. Through the persister (a static
  // helper of bare __builtin_prefetch calls was found pure by GCC 12 and dropped).
  [[gnu::always_inline]] void PrefetchCandidates(const LevelBucket* top,
                                                const LevelBucket* bottom,
                                                const Candidates& c) const {
    persister().Prefetch(top + c.t1);
    persister().Prefetch(top + c.t2);
    persister().Prefetch(bottom + c.b1());
    persister().Prefetch(bottom + c.b2());
  }
  // Where a key is.
  struct Slot {
    LevelBucket* bucket = nullptr;
    size_t index = 0;
  };

  Stripe& StripeOfTop(uint64_t i) const { return stripes_.Of(i); }
  // Locks the stripes of hash's candidates exclusively (in order), with the top size held
  // still; *a and *b are the stripes (equal when one guards all four).
  void LockKey(uint64_t hash, Levels* v, Stripe** a, Stripe** b) const;

  Slot Find(std::string_view key, uint64_t hash, const Levels& v) const;
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);

  // Places a new item (its words and form) among the key's candidates: free slot, cuckoo
  // move, bottom-to-top move. False when there is no room; *busy set if a move was
  // skipped because its destination's stripe was busy.
  bool Place(const Levels& v, uint64_t hash, Stripe* a, Stripe* b, SlotForm form,
             const KvWords& words, bool* busy);
  // Moves an item of bucket `from` (top or bottom, `top_level`) to a free slot of another
  // of its buckets (same level; or the top, for a bottom item with `to_top`), making slot
  // *freed of `from` free. False if none has room or its stripe is busy (*busy set then).
  bool MoveOut(const Levels& v, LevelBucket* from, bool from_top, bool to_top, Stripe* a,
               Stripe* b, size_t* freed, bool* busy);
  // Writes `words` with `form` into the free slot i of `bucket`: data, fence, token.
  void WriteSlot(LevelBucket* bucket, size_t i, SlotForm form, const KvWords& words);
  Status UpdateAt(const Slot& s, std::string_view key, std::string_view value, uint64_t hash);

  // Doubles the top (the paper's resize) unless another thread already grew it past
  // observed_n (OK then too); *grew says whether this call did.
  Status Grow(uint64_t observed_n, bool* grew);
  // A resize's plan: for each item of the old bottom (its hash, in bucket and slot order)
  // the bucket it goes to in the doubled table of n2 top buckets, *dest: t < n2 for top
  // bucket t, n2 + b for bottom bucket b; bottom_used: the bottom's (old top's) used
  // slots before. A pure function of its inputs: the resize and a recovery's replay
  // compute the same plan. False if an item has no place; *moves: items the plan moved
  // to their other top bucket to make room.
  static bool PlanRehash(const std::vector<uint64_t>& hashes, uint64_t n2,
                         std::vector<uint8_t> bottom_used, std::vector<uint64_t>* dest,
                         uint64_t* moves);
  static LevelBucket* PlannedBucket(const Levels& v, uint64_t dest) {
    return dest < v.n ? &v.top[dest] : &v.bottom[dest - v.n];
  }
  // Finishes a rehash recorded in v.header->rehash_from (recovery).
  Status FinishRehash(const Levels& v);

  uint64_t HashOf(SlotForm form, const KvWords& words) const;
  // Slot i of bucket idx (top or bottom) of `v`, which is set: Corruption unless its form
  // and record are sound and the bucket is one of its key's candidates; *hash its hash.
  Status CheckSlot(const Levels& v, bool is_top, uint64_t idx, const LevelBucket* b, size_t i,
                   uint64_t* hash) const;
  Status ValidateLevel(uint64_t off, uint64_t* buckets) const;
  // root -> top -> bottom (and the rehash source), validated in raw PM.
  Status ReadLevels(uint64_t top_off, Levels* v, uint64_t* rehash_from) const;
  void SetView(const Levels& v);
  // Calls fn(is_top, bucket index, bucket) for every bucket of both levels.
  template <typename Fn>
  void ForEachBucket(const Levels& v, Fn&& fn) const {
    for (uint64_t i = 0; i < v.n; ++i) fn(true, i, &v.top[i]);
    for (uint64_t i = 0; i < v.n / 2; ++i) fn(false, i, &v.bottom[i]);
  }
  void LockAllShared() const;
  void UnlockAllShared() const;
  uint64_t TopFor(uint64_t keys) const;

  uint64_t initial_top_ = 0;
  double min_resize_load_ = 0.25;
  bool prefetch_buckets_ = false;  // searches and writes prefetch the four token lines first

  Stripes<Stripe> stripes_;
  std::unique_ptr<CountShard[]> counts_;
  mutable std::shared_mutex resize_mu_;
  Levels view_;
  // For searches with no lock: the arrays are stored before top_n_ (release).
  std::atomic<LevelBucket*> top_{nullptr};
  std::atomic<LevelBucket*> bottom_{nullptr};
  std::atomic<uint64_t> top_n_{0};
  uint64_t base_count_ = 0;
  std::function<void()> after_failed_place_for_testing_;

  std::atomic<uint64_t> resizes_{0};
  std::atomic<uint64_t> cuckoo_moves_{0};
  std::atomic<uint64_t> b2t_moves_{0};
  std::atomic<uint64_t> opportunistic_updates_{0};
  std::atomic<uint64_t> refused_resizes_{0};
  std::atomic<uint64_t> resize_plan_moves_{0};
  std::atomic<uint64_t> busy_retries_{0};
  uint64_t recovered_duplicates_ = 0;
  uint64_t recovered_rehash_ = 0;
};

}  // namespace pmhash::engines
