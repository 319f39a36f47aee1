// `dash`: Dash, extendible-hashing variant (Dash-EH; Lu, Hu, Wang, Lin, Li: "Dash: Scalable
// Hashing on Persistent Memory", VLDB 2020), on the engine kit. A directory of segment
// pointers indexed by the top G hash bits (as cceh's); a segment is 64 normal buckets and
// 2 stash buckets of 256 bytes; a bucket holds 14 slots of 16 bytes with one-byte
// fingerprints matched by the kit's TagMatcher (common/match.h). Insert is balanced over
// the key's home bucket and the next one; when both are full, displacement moves an
// entry of either to its own other bucket; then the stash, with overflow fingerprints in
// the home (or next) bucket. Per-bucket version words in PM give lock-free searches
// (a search validates the versions it began with). Segments split in place; the
// directory doubles. Design notes, deviations and figures: docs/engines/dash.md.
//
// ---- On-media layout ------------------------------------------------------------------
//
//   root area (Engine::root):
//   struct DashRoot {
//     EngineRoot header;      // engines/root.h: table = the directory block (sealed)
//     uint64 buckets;         // fixed: normal buckets per segment (a power of two, 4..256)
//     uint64 stash_buckets;   // fixed: stash buckets per segment (1..4)
//   };
//
//   directory block (allocator; root.table): 2^G entries
//   struct DashDirectory {
//     uint64 magic;           // kDashDirMagic (TableHeader::magic)
//     uint64 entries;         // 2^G (TableHeader::size)
//     uint64 global_depth;    // G
//     uint8  pad[32];
//     uint64 check;           // Engine::MetadataCheck of the 56 bytes above
//     uint64 entry[2^G];      // sealed words, payload = segment offset | local depth L
//   };
//
//   segment (allocator block of (buckets + stash_buckets) x 256 bytes, no header): the
//   normal buckets 0..N-1, then the stash buckets N..N+S-1, each:
//   struct DashBucket {        // 256 bytes, 4 lines
//     uint32 version;          // optimistic version lock: odd while a writer changes the
//                              // bucket; not persisted on purpose (reset after a crash)
//     uint32 bits;             // alloc (bits 0..13: slot i holds an entry) | member << 16
//                              // (bit 16+i: slot i's entry has the previous bucket as home)
//     uint8  fp[14];           // fingerprint of slot i's key: hash bits 8..15
//     uint8  ofp[4];           // overflow fingerprints (normal buckets): stash entries
//     uint8  obits;            // bit k: ofp[k] valid; bit 4+k: its entry's home is the
//                              //   previous bucket (it was recorded in the next bucket)
//     uint8  oidx;             // bits 2k..2k+1: the stash bucket of ofp[k]
//     uint8  ocount;           // stash entries of this home that no ofp records
//     uint8  pad[3];
//     KvWords slot[14];        // word0 then word1
//   };
//
//   A slot's form comes from word0 as in cceh: word0 >> 48 == 0xffff is a record (word0 =
//   kDashRecordTag | record offset, word1 = the key's hash; common/slot.h's codec),
//   anything else is an inline 8-byte key (word0) and 8-byte value (word1). Any other key
//   or value size goes to a record; an 8-byte key whose top two bytes are 0xff 0xff too.
//
// ---- Addressing ------------------------------------------------------------------------
//
//   hash = KeyHash(key). Directory entry: the top G bits. Home bucket: hash mod N (low
//   bits); fingerprint: bits 8..15. The key may sit in its home bucket b (member bit 0),
//   the next bucket b+1 mod N (member bit 1), or a stash bucket (recorded by an ofp in b
//   with bit 4+k clear, in b+1 with it set, or counted by b.ocount).
//
// ---- Invariants (no mutation in flight) -------------------------------------------------
//
//  1. The directory is 2^G entries; a segment of depth L fills one aligned range of
//     2^(G-L) equal entries (after recovery's repair).
//  2. Every allocated slot of a segment of depth L and pattern p holds a key whose hash's
//     top L bits are p, in its home bucket (member 0), the next one (member 1) or a stash
//     bucket; fp is its fingerprint.
//  3. Every stash entry of home b is recorded by exactly one ofp (in b, or in b+1 with the
//     member bit) naming its stash bucket, or counted in b.ocount.
//  4. No key is stored twice; a live record slot owns its record.
//  5. Count() equals the allocated slots; every version word is even.
//
// ---- Persist order ---------------------------------------------------------------------
//
//  insert: record (if any) flushed; slot words stored and flushed; fp stored; bits (alloc
//    and member of the slot set) published (fence, one 4-byte store, persist): the commit.
//    A stash insert then records the entry's ofp (or ocount) in its home or next bucket,
//    persisted: recovery rebuilds overflow metadata after a crash, so the hint may lag.
//  delete: bits stored with the slot's alloc bit clear, persisted: the commit; a stash
//    entry's ofp (or ocount) is then cleared; the record (if any) freed.
//  update: inline -> inline: word1, one store; record -> record: new record published,
//    old freed; inline -> record: an UndoLog transaction over the slot's 16 bytes.
//  displacement: the entry copied into a free slot of its other bucket and committed
//    there (as an insert), then cleared from the first (as a delete, without freeing its
//    record). A crash between leaves the key twice, in bucket j (member 0) and j+1
//    (member 1): recovery keeps one (the record shared, never freed).
//  split (in place, segment S of depth L): the entries whose bit L is 1 are copied into
//    a new segment S1 at the same bucket, slot and member (so they fit), its overflow
//    metadata built, flushed while unreachable; [doubling if L == G: the new directory
//    persisted, root.table published, the old one retired until Close]; then S's
//    directory range: every entry but the first stored, flushed, fence, the first
//    published: the commit; then S is pruned (moved entries' alloc bits cleared, overflow
//    metadata rebuilt) and persisted. A crash before the commit: recovery sets the range
//    back (S1 unreachable: the allocator's rebuild frees it); after it: recovery prunes.
//  recovery after a crash (eager, at open; the original does it lazily per segment on
//    first touch, comparing a segment version with a global clean flag): directory
//    ranges repaired as cceh's; in every segment every version word reset to 0, entries
//    outside the segment's pattern pruned, displacement duplicates removed, overflow
//    metadata rebuilt from the stash, keys recounted. So a reopen never waits on a lock
//    word a killed writer left odd. After a clean shutdown none of this runs.
//
// ---- Concurrency -----------------------------------------------------------------------
//
// Searches take no lock: directory entry -> segment; the versions of the home and next
// bucket begun (even); the segment's DRAM state (depth, pattern) checked to serve the
// hash; fingerprints matched; a stash bucket's version begun when read; all validated
// at the end (kit: OptimisticRead, SearchOptimistically). An 8-byte key's first try
// (FirstTry) reads as the original does instead: the two versions, then the directory
// word and entry again (unchanged: no split redirected the key's range since, and a split
// prunes only after it redirects), with no side table. A record (not 8-byte key) is
// read under the segment's shared lock. Writers take the segment's lock exclusively (a
// simplification: the original locks the two buckets, so writers of one segment run side
// by side) and make every bucket they change odd while they change it. A split takes the
// directory lock (dir_mu_) first, then the segment's lock, and holds every bucket of S odd
// while it changes S's depth and prunes it; S1's DRAM state comes up after that, so no
// write reaches S1 before S stops serving the moved keys. Scans and ForEach hold dir_mu_
// shared (no split runs) and each segment's lock shared. Lock order: dir_mu_, segment.
// Old directories stay allocated until Close (a search may still read one).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/locks.h"
#include "common/match.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "util/dram_buffer.h"

namespace pmhash::engines {

inline constexpr uint64_t kDashRootMagic = 0x31544f4f52'4844ull;  // "DHROOT1"
inline constexpr uint32_t kDashVersion = 1;
inline constexpr uint64_t kDashDirMagic = 0x3152494448'4844ull;   // "DHDIR1"
inline constexpr size_t kDashSlots = 14;                           // slots per bucket
inline constexpr size_t kDashOverflow = 4;                         // ofp per bucket
inline constexpr uint64_t kDashRecordTag = uint64_t{0xffff} << 48;
inline constexpr uint64_t kDashOffsetMask = (uint64_t{1} << 48) - 1;
inline constexpr uint32_t kDashMaxDepth = 40;
inline constexpr uint64_t kDashDefaultBuckets = 64;   // the original's kNumBucket
inline constexpr uint64_t kDashDefaultStash = 2;      // the original's stashBucket
inline constexpr uint64_t kDashDefaultSegments = 64;  // the original's measurement
inline constexpr uint32_t kDashAllocMask = (1u << kDashSlots) - 1;

struct DashBucket {
  uint32_t version;
  uint32_t bits;
  uint8_t fp[kDashSlots];
  uint8_t ofp[kDashOverflow];
  uint8_t obits;
  uint8_t oidx;
  uint8_t ocount;
  uint8_t pad[3];
  KvWords slot[kDashSlots];
};
static_assert(sizeof(DashBucket) == 256, "a bucket is 256 bytes (the original's), 4 lines");
static_assert(offsetof(DashBucket, bits) == 4 && offsetof(DashBucket, fp) == 8 &&
                  offsetof(DashBucket, ofp) == 22 && offsetof(DashBucket, obits) == 26 &&
                  offsetof(DashBucket, slot) == 32,
              "the metadata is the bucket's first 32 bytes, in its first line");
static_assert(offsetof(DashBucket, fp) + 16 <= offsetof(DashBucket, slot),
              "Match16 reads 16 bytes from fp, all inside the metadata");
static_assert(kDashSlots <= 16, "alloc and member bits share one 32-bit word");
static_assert(kDashOverflow * 2 <= 8, "oidx holds 2 bits per overflow fingerprint");

struct DashRoot {
  EngineRoot header;
  uint64_t buckets;
  uint64_t stash_buckets;
};
static_assert(offsetof(DashRoot, buckets) == sizeof(EngineRoot) &&
                  sizeof(DashRoot) == sizeof(EngineRoot) + 16,
              "the geometry follows the kit's root header (fixed, under its check)");

struct alignas(64) DashDirHeader {
  uint64_t magic;
  uint64_t entries;
  uint64_t global_depth;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(DashDirHeader) == pm::kCacheLine && offsetof(DashDirHeader, check) == 56 &&
                  offsetof(DashDirHeader, entries) == offsetof(TableHeader, size),
              "the directory header is one line opening with the kit's TableHeader");

// One segment's DRAM state, found by arithmetic from its pool offset.
struct DashSeg {
  RwSpinLock mu;                      // writers exclusive, record reads shared
  std::atomic<uint32_t> depth{~0u};   // ~0u: serves nothing (not up yet)
  std::atomic<uint64_t> pattern{0};
  std::atomic<uint64_t> offset{0};
  std::atomic<int64_t> keys{0};       // allocated slots (changed under mu)
};

class Dash : public Engine {
 public:
  Dash() = default;

  // Tests only (LevelDB's TEST_ convention): called by a search's first try at `point`,
  // inside the window a concurrent writer needs to break it (after the directory entry is
  // read; after a slot's key word matched), so that a test can run that write there, on
  // the searching thread. Unset outside tests (one predicted branch).
  enum class FirstTryPoint { kEntryRead, kKeyMatched };
  // With a hook set the first try runs in DoGet (the kit's QuickGet is off).
  void TEST_SetFirstTryHook(std::function<void(FirstTryPoint)> hook) {
    SetQuickGet(first_try_ && hook == nullptr);
    first_try_hook_ = std::move(hook);
  }

  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  Status Shutdown() override;  // flushes the version words, frees the retired directories
  void Prefetch(uint64_t hash) const override;

 private:
  // A slot of a segment: bucket index (normal or stash) and slot.
  struct Loc {
    size_t bucket = 0;
    size_t slot = 0;
    bool found = false;
  };

  DashBucket* BucketsOf(uint64_t offset) const { return pool().At<DashBucket>(offset); }
  size_t Home(uint64_t hash) const { return hash & (buckets_ - 1); }
  size_t Next(size_t b) const { return (b + 1) & (buckets_ - 1); }
  size_t Prev(size_t b) const { return (b + buckets_ - 1) & (buckets_ - 1); }
  static uint8_t Fp(uint64_t hash) { return static_cast<uint8_t>(hash >> 8); }
  uint64_t SegBytes() const { return (buckets_ + stash_) * sizeof(DashBucket); }
  // The side-table slot of the segment at `offset` (segments are 256-byte aligned):
  // offset / SegBytes() as a multiply-high by a reciprocal (a divide was on every search's
  // path). Exact: (offset >> 8) < 2^40 and the reciprocal's error is below N + S <= 260.
  uint64_t SegIndex(uint64_t offset) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(offset >> 8) * seg_magic_) >> 64);
  }
  DashSeg* SegAt(uint64_t offset) const { return &table_[SegIndex(offset)]; }
  // The side table for the pool's size and the geometry (Create, Recover).
  Status MakeSideTable();
  // Starts loading the key's two buckets (8 lines): the metadata lines and the slot line
  // a search or write reads next then arrive together.
  void PrefetchBuckets(const DashBucket* bk, uint64_t hash) const {
    const char* b = reinterpret_cast<const char*>(&bk[Home(hash)]);
    const char* n = reinterpret_cast<const char*>(&bk[Next(Home(hash))]);
    for (size_t l = 0; l < sizeof(DashBucket); l += pm::kCacheLine) {
      persister().Prefetch(b + l);
      persister().Prefetch(n + l);
    }
  }
  static bool Serves(uint64_t hash, uint32_t depth, uint64_t pattern) {
    return depth == 0 || (hash >> (64 - depth)) == pattern;
  }
  uint64_t SlotHash(const KvWords& w) const;
  static bool IsRecord(uint64_t word0) { return (word0 & kDashRecordTag) == kDashRecordTag; }
  std::string_view SlotKey(const KvWords& w) const;
  std::string_view SlotValue(const KvWords& w) const;
  bool SlotHolds(const KvWords& w, std::string_view key, uint64_t hash) const;

  // Directory.
  uint64_t* DirEntries(uint64_t dir) const {
    return reinterpret_cast<uint64_t*>(pool().At<char>(dir) + sizeof(DashDirHeader));
  }
  uint64_t EntryPayload(uint64_t hash) const;  // no lock: a hint the caller validates
  Status NewDirectory(uint32_t depth, uint64_t* offset);
  Status ValidateDirectory(uint64_t dir, uint32_t* depth) const;
  // Walks the ranges: fn(first, count, segment offset, local depth); mismatched entries
  // are reported to `mismatch(j)`.
  template <typename Fn, typename Mismatch>
  Status WalkDirectory(uint64_t dir, uint32_t depth, Fn&& fn, Mismatch&& mismatch) const;
  Status DoubleDirectory();

  // Segments.
  // The segment serving `hash`, its lock held in `mode` (retries while a split moves it).
  DashSeg* LockSegmentIn(uint64_t hash, LockMode mode) const;
  DashSeg* LockSegment(uint64_t hash) const { return LockSegmentIn(hash, LockMode::kExclusive); }
  DashSeg* LockSegmentShared(uint64_t hash) const {
    return LockSegmentIn(hash, LockMode::kShared);
  }
  void BringUp(uint64_t offset, uint32_t depth, uint64_t pattern, int64_t keys);
  // The segment's key count, changed under its lock: a plain load and store (Count reads
  // it with no lock), no locked instruction on the write path.
  static void AddKeys(DashSeg* s, int64_t n) {
    s->keys.store(s->keys.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  Status Split(DashSeg* s, uint64_t hash);

  // Search in a segment (its lock held) for key.
  Loc Find(const DashBucket* bk, std::string_view key, uint64_t hash) const;
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  // A search's first try (an 8-byte key k, reads unnoted), with no call on its path: kFound
  // (with the value), kAbsent, or kRetry for the full path. kHooked: with the test's hook
  // (FirstTryHooked, out of line).
  template <bool kHooked>
  QuickAnswer FirstTry(uint64_t k, uint64_t hash) const;
  QuickAnswer FirstTryHooked(uint64_t k, uint64_t hash) const;
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);

  // Writes in a segment (held exclusively).
  Status Place(DashSeg* s, const KvWords& w, uint64_t hash, bool* placed);
  void StoreAt(DashBucket* bk, size_t b, size_t slot, const KvWords& w, uint8_t fp, bool member);
  void ClearAt(DashBucket* bk, size_t b, size_t slot);
  void AddOverflow(DashBucket* bk, size_t home, size_t stash_index, uint8_t fp);
  void RemoveOverflow(DashBucket* bk, size_t home, size_t stash_index, uint8_t fp);
  Status UpdateAt(DashBucket* bk, const Loc& at, std::string_view key, std::string_view value,
                  uint64_t hash);
  Status Encode(std::string_view key, std::string_view value, uint64_t hash, KvWords* w);
  // Rebuilds the overflow metadata of every normal bucket from the stash (flushed, no
  // fence, when `persisted`); whether any bucket's changed.
  bool RebuildOverflow(DashBucket* bk, bool persisted);

  // A bucket's version made odd (a writer in) and even again, through the Persister (a
  // plain store to PM would bypass the crash simulator), never flushed on their own: a
  // writer's persists carry the odd word with them (recovery resets it), and Shutdown
  // flushes every version word so that none is pending in a pool Close marks clean.
  void WriteLock(DashBucket* b) const {
    persister().Store(&b->version, __atomic_load_n(&b->version, __ATOMIC_RELAXED) + 1);
    // Before the changes it covers: x86 keeps stores in order (TSO), so a compiler barrier
    // is the fence (a thread fence is also what ThreadSanitizer cannot model).
    std::atomic_signal_fence(std::memory_order_release);
  }
  void WriteUnlock(DashBucket* b) const {
    persister().Store(&b->version, __atomic_load_n(&b->version, __ATOMIC_RELAXED) + 1);
  }

  // Recovery of one segment after a crash; returns its keys.
  int64_t RepairSegment(uint64_t offset, uint32_t depth, uint64_t pattern);
  void CollectSegment(const DashSeg* s, uint64_t from, std::vector<ScanEntry>* out) const;
  uint64_t RangeEnd(uint32_t depth, uint64_t pattern) const;

  const TagMatcher& matcher_ = TagMatcher::Best();
  uint64_t buckets_ = kDashDefaultBuckets;
  uint64_t stash_ = kDashDefaultStash;
  uint64_t initial_segments_ = 0;  // 0: auto
  bool first_try_ = true;          // Get tries FirstTry first
  bool first_try_prefetch_ = false;  // FirstTry prefetches both buckets' lines
  std::function<void(FirstTryPoint)> first_try_hook_;

  std::atomic<uint64_t> dir_word_{0};  // directory offset | G
  mutable std::shared_mutex dir_mu_;
  std::vector<uint64_t> retired_dirs_;
  // The side table, on huge pages where the kernel allows (a random segment's state costs
  // a cache miss, not also a page walk).
  DramArray<DashSeg> table_;
  uint64_t seg_magic_ = 0;  // ceil(2^64 / (buckets_ + stash_)): SegIndex
  std::vector<DashSeg*> live_;  // dir_mu_

  std::atomic<uint64_t> splits_{0}, doublings_{0}, displacements_{0}, stash_inserts_{0},
      undo_txs_{0};
  uint64_t repaired_entries_ = 0, repaired_slots_ = 0;
};

}  // namespace pmhash::engines
