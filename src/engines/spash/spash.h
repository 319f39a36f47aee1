// `spash`: Spash (paper 002, Zhang et al., "Exploiting Persistent CPU Cache for Scalable
// Persistent Hash Index"): fine-grained extendible hashing with a DRAM directory over
// metadata-free 256-byte segments (one Optane XPLine each), compound slots with
// fingerprints and overflow hints, two-phase operations, collaborative staged doubling,
// adaptive in-place update and compacted-flush insertion. Built for eADR (the paper's
// platform) and for ADR. Design notes, the mapping of the paper to the code, every choice
// the paper leaves open and every deviation: docs/engines/spash.md.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root):
//   struct SpashRoot {
//     EngineRoot header;      // engines/root.h: magic kSpashRootMagic, version
//                             // kSpashVersion; table = sealed pool offset of the newest
//                             // block of the block list (below); count = keys stored
//     uint64 floor_depth;     // the depth of creation, which merges and halving keep to
//                             // (>= kSpashMinDepth); fixed, covered by header.check
//     uint64 usage_saved;     // sealed: 1 = the chunk blocks' usage maps were written by
//                             // the last clean Close (a clean open loads them); else 0
//   };
//
//   block (an allocator run of 64 KiB), linked newest first from root.table; never
//   unlinked while the pool lives (freed segments and chunks are reused):
//   struct SpashBlock {
//     uint64 magic;           // kSpashBlockMagic
//     uint64 kind;            // kSegmentBlock or kChunkBlock
//     uint64 next;            // pool offset of the next (older) block, 0 at the end
//     uint64 pad[4];          // zero
//     uint64 check;           // Engine::MetadataCheck of the 56 bytes above (written once,
//                             // before the block is linked)
//     // kSegmentBlock:
//     uint64 record[248];     // per segment its persistent depth record: 0 = free, else
//                             // the sealed word (util/hash.h, salt = its pool offset)
//                             // 1 << 47 | depth << 41 | prefix: the segment's local depth
//                             // and hash prefix, changed by one failure-atomic store
//     Segment seg[248];       // at byte 2048, each 256-byte aligned
//     // kChunkBlock:
//     uint64 usage_check;     // Hash64 of usage[] seeded with the block's offset, written
//                             // at clean Close with usage[] (valid iff root.usage_saved)
//     uint8  usage[504];      // a bit per 16-byte unit of chunk[]: in use by a record
//     Chunk  chunk[252];      // at byte 1024: 256-byte chunks of records <= 128 bytes
//   };
//
//   segment (256 bytes, 256-aligned: one XPLine), metadata-free (Fig. 2):
//   struct Segment { Bucket bucket[4]; };      // 64-byte buckets
//   struct Bucket  { Slot slot[4]; };          // 16-byte compound slots
//   struct Slot    { uint64 key; uint64 value; };
//
//   key word (the slot's commit word; every change to it is one 8-byte store):
//     bits 63..62  form: 00 empty, 01 inline, 10 record (11 is never written)
//     bit  61      overflow hint (below), owned by the bucket, not by the entry: kept by
//                  every store to the word, empty or not
//     inline (an 8-byte key with an 8-byte value):
//       bits 60..0  the key's hash h, bits 60..0 (h's top 3 bits are the segment's
//                   prefix: every depth is >= kSpashMinDepth = 3). The pool's seeded
//                   xxh3 of an 8-byte key is a bijection (UnhashKey8 with the seed,
//                   util/hash.h): the hash is the key. Under a test hash (no bijection)
//                   every key is a record
//     record (any other key or value):
//       bits 60..44  h bits 16..0: the key fingerprint (the paper's bits 3-16) and the
//                    main bucket (bits 1..0), compared before the record is read
//       bit  43      1: the record lies in a chunk of a chunk block; 0: it is an allocator
//                    block of its own
//       bits 42..0   the record's pool offset / 16
//   value word: inline, the 8-byte value; record, 0 (unused).
//   record (common/slot.h's record format: header word, key, value): in a chunk if it
//   takes at most 128 bytes (compacted flush), else an allocator block of its own.
//
//   overflow hints (the paper's, kept in the reserved bits: Sec. III-A): for main bucket
//   b, hint bit j (j = 1..3, in the key word of slot j of bucket b) says that an entry
//   whose main bucket is b lies in bucket (b + j) mod 4. Slot 0's bit is always 0.
//
// Hash use: h = KeyHash(key) (the kit's: xxh3 seeded with the pool's seed). The directory indexes h's top bits (the prefix); the main
// bucket is h & 3 (the lowest 2 bits, as the paper); the fingerprint is h & 0x1ffff.
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. The live segments (record != 0) partition the hash space: every G-bit prefix has
//     exactly one live segment whose record's prefix it extends; the directory names it.
//     Every local depth is >= the root's floor depth >= kSpashMinDepth.
//  2. An entry lies in the segment of its prefix, in its main bucket or, if that was full
//     at its insertion, in another bucket of the segment whose hint bit its main bucket
//     carries. Hint bits are exact: set iff such an entry exists.
//  3. A key is stored at most once. A record slot owns its record.
//  4. Count() equals the number of non-empty slots of live segments; a directory
//     primary's count, when known, equals its segment's.
//
// ---- Persist order (adr; eadr: the same stores in the same order, flushes omitted,
//      the same fences) ------------------------------------------------------------------
//
//  insert: [a record written and flushed; fence]; if the slot is not in the main bucket,
//    the main bucket's hint bit first; the value word, then the key word (the commit);
//    the slot's line (and the hint's) flushed; one fence. The hint and the entry are in
//    different lines: a crash may keep the entry without its hint, which recovery
//    repairs (it rebuilds every hint after a crash).
//  update: inline -> inline: the value word (one failure-atomic store), flushed, fence.
//    Anything else is out of place (no HTM here makes a longer in-place write
//    failure-atomic): a new record written and flushed, fence, then the key word (the
//    commit: the new pointer), flushed, fence; the old record freed. record -> inline:
//    the value word first (unused in a record slot), then the key word. In eadr Table I
//    decides whether the new copy is written back after the commit.
//  delete: the key word cleared (its hint bit kept), and, if the entry was the last of
//    its main bucket in an overflow bucket, that hint cleared (a stale hint is harmless);
//    flushed, fence; the record freed.
//  split (Fig. 3, inside the inserting operation): two free segments get the entries of
//    the old one, split by their next prefix bit and placed afresh by circular probing
//    (two 256-byte copies, flushed: "both segments rewritten"); fence; their records
//    (d+1, p1) and (d+1, p0) stored and flushed; fence; the old segment's record cleared
//    (durable with the operation's fence, which comes before the segment is reused). A
//    crash leaves the halves unborn (records 0), one half or both overlapping the old
//    segment (the deeper wins: recovery narrows the old one to the other half and drops
//    its copies, or frees it if both halves are there), or the old one freed.
//  merge (the reverse, after a delete): the buddy's entries copied into the segment of
//    prefix p0, flushed; fence; its record (d-1, p) and the buddy's record 0 stored,
//    flushed; fence. A crash between the two records leaves an overlap (the buddy keeps
//    its half) or a hole (the p0 segment takes it): recovery settles both.
//  new block: header and zeroed records / usage written and flushed; root.table
//    published (fence, store, persist).
//  clean Close: usage maps written and flushed; root.usage_saved = 1 published.
//  group_commit, inside a write batch: an insert, update or delete that changed one
//    segment and split nothing makes the same stores but neither flushes nor fences; its
//    range stays busy and its freed record allocated. The group's end (the batch's end,
//    64 commits, or before the thread would wait) flushes every line of the group, fences
//    once, then releases the ranges and frees. Fences inside an op (a record before its
//    publish, a split's) stay where they are.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// Two-phase operations (Sec. IV-A): the preparation (directory entry, main bucket, slot,
// the record an insert or update will publish) takes no lock; the commit phase locks
// the segment through its directory entry (directory.h: the paper's fallback lock bit,
// the "Spash (w/ write lock)" variant), validates that the segment and its version are
// unchanged (else prepares again, now under the lock), stores, fences and releases with
// the version bumped. Searches take no lock: directory entry, segment, entry again
// (equal: valid). With htm_emulated the commit phase runs in an atomic region of the
// crash simulator (pm::Persister::BeginAtomic), validates inside it, aborts (injected at
// htm_abort_rate, or on a failed validation) and retries; after htm_retries aborts it
// takes the fallback lock; splits always take it. In eadr such a region is
// all-or-nothing in crash images, so an update of a record by one of the same size is
// written in place there, as the paper does with HTM. htm_rtm runs the same commit phase
// in a real RTM transaction (eadr only: a flush aborts one), from the lock of the range
// to its release, so the busy marks are never seen and a conflict aborts it.
// read_lock makes searches lock too (the paper's "w/ write & read lock", Fig. 12c).
// The first tries (option first_try; not in the paper's text, the same two phases in
// less code): a search (FirstGet) and a delete of an inline key in its main bucket
// (FirstDeleteEntered), in one directory line of the current table with no transition
// running. The delete's validates by locking the range only if every entry still holds
// the word it read the bucket under (Directory::LockAsSeen), then makes the delete's
// persist sequence above; anything else (a change since, a busy range, an overflow
// bucket, a record, an absent key: the first try reads no filter byte) takes the
// general path, having changed nothing.
// With `filter` (not in the paper; directory.h) a search reads its entry's filter byte
// after asking for the entry, and answers NotFound if the key's two probe bits are not
// both set. An insert sets them while it holds the range (InsertAt), a split stores its
// range's exact bytes, a doubling stage stores the next table's (RefineFilters), a write
// to a range whose byte is unknown rebuilds the range's; deletes leave their bits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/engine.h"
#include "engines/spash/directory.h"
#include "engines/spash/hot_keys.h"
#include "pm/pool.h"
#include "pm/stats.h"

namespace pmhash::engines {

inline constexpr uint64_t kSpashRootMagic = 0x3152485341505350ull;   // "PSPASHR1"
inline constexpr uint64_t kSpashBlockMagic = 0x3142485341505350ull;  // "PSPASHB1"
inline constexpr uint32_t kSpashVersion = 1;
inline constexpr unsigned kSpashMinDepth = 3;  // h's top 3 bits are not stored inline
inline constexpr uint64_t kSpashBlockBytes = 64 * 1024;
inline constexpr unsigned kSpashSegmentsPerBlock = 248;
inline constexpr uint64_t kSpashSegmentArea = 2048;  // segments start here in a block
inline constexpr unsigned kSpashChunksPerBlock = 252;
inline constexpr uint64_t kSpashChunkArea = 1024;  // chunks start here in a block
inline constexpr uint64_t kSpashChunkBytes = 256;
inline constexpr uint64_t kSpashMaxChunked = 128;   // records up to this go into chunks
inline constexpr unsigned kSpashRecordClasses = 8;  // 16, 32, ..., 128 bytes
// A split that would double the directory past this many entries per live segment (and
// past 2^20 entries) is refused (Spash::Split): 10 M uniform keys had 4.6 (BENCHMARKS.md:
// depth 22, 917,500 segments).
inline constexpr uint64_t kSpashDirectoryPerSegment = 64;

namespace spash {

struct Slot {
  uint64_t key;
  uint64_t value;
};
struct alignas(64) Bucket {
  Slot slot[4];
};
struct alignas(256) Segment {
  Bucket bucket[4];
};
static_assert(sizeof(Slot) == 16 && offsetof(Slot, key) == 0 && offsetof(Slot, value) == 8,
              "a compound slot is a key word and a value word, each stored failure-atomically");
static_assert(sizeof(Bucket) == 64, "a bucket is one cache line: a search reads one line");
static_assert(sizeof(Segment) == 256 && alignof(Segment) == 256,
              "a segment is one 256-byte XPLine, aligned (Fig. 2)");

struct BlockHeader {
  uint64_t magic;
  uint64_t kind;
  uint64_t next;
  uint64_t pad[4];
  uint64_t check;
};
static_assert(sizeof(BlockHeader) == 64 && offsetof(BlockHeader, next) == 16 &&
                  offsetof(BlockHeader, check) == 56,
              "the block header is one cache line, its check last");
inline constexpr uint64_t kSegmentBlock = 1, kChunkBlock = 2;
static_assert(sizeof(BlockHeader) + kSpashSegmentsPerBlock * 8 <= kSpashSegmentArea &&
                  kSpashSegmentArea + kSpashSegmentsPerBlock * sizeof(Segment) <=
                      kSpashBlockBytes,
              "the records fit before the segments, the segments in the block");
inline constexpr unsigned kChunkUnits = kSpashChunksPerBlock * kSpashChunkBytes / 16;
static_assert(sizeof(BlockHeader) + 8 + kChunkUnits / 8 <= kSpashChunkArea &&
                  kSpashChunkArea + kSpashChunksPerBlock * kSpashChunkBytes <= kSpashBlockBytes,
              "the usage map fits before the chunks, the chunks in the block");

// The key word's fields (see the layout above).
struct KeyWord {
  static constexpr uint64_t kFormMask = uint64_t{3} << 62;
  static constexpr uint64_t kInline = uint64_t{1} << 62;
  static constexpr uint64_t kRecord = uint64_t{2} << 62;
  static constexpr uint64_t kHint = uint64_t{1} << 61;
  static constexpr uint64_t kHashMask = (uint64_t{1} << 61) - 1;  // inline: h bits 60..0
  static constexpr int kFingerprintShift = 44;
  static constexpr uint64_t kFingerprintMask = (uint64_t{1} << 17) - 1;
  static constexpr uint64_t kChunked = uint64_t{1} << 43;
  static constexpr uint64_t kOffsetMask = (uint64_t{1} << 43) - 1;

  static uint64_t Form(uint64_t w) { return w & kFormMask; }
  static bool Empty(uint64_t w) { return Form(w) == 0; }
  static uint64_t Inline(uint64_t h) { return kInline | (h & kHashMask); }
  static uint64_t Record(uint64_t h, uint64_t offset, bool chunked) {
    return kRecord | (h & kFingerprintMask) << kFingerprintShift | (chunked ? kChunked : 0) |
           offset >> 4;
  }
  static bool Chunked(uint64_t w) { return (w & kChunked) != 0; }
  static uint64_t RecordOffset(uint64_t w) { return (w & kOffsetMask) << 4; }
  static uint64_t Fingerprint(uint64_t w) { return (w >> kFingerprintShift) & kFingerprintMask; }
  // The low 17 hash bits either form keeps (main bucket and fingerprint).
  static uint64_t LowHash(uint64_t w) {
    return Form(w) == kInline ? w & kFingerprintMask : Fingerprint(w);
  }
};
static_assert((uint64_t{1} << 47) >= pm::kMaxPoolSize,
              "43 bits of offset / 16 reach every byte of the largest pool");

// One bucket's four key words against a key, as bit masks (bit j: slot j), with four
// loads and no branch: `inline_eq`, the slot holds the key inline; `record`, a record slot
// whose fingerprint matches (the key may be there: its record decides); `empty`; `hints`,
// the hint bits (of a main bucket: bit k names bucket b + k).
struct BucketMatch {
  unsigned inline_eq = 0, record = 0, empty = 0, hints = 0;
};
[[gnu::always_inline]] inline BucketMatch MatchBucket(const Bucket* b, uint64_t inline_word,
                                                      uint64_t fingerprint) {
  const uint64_t record_word =
      KeyWord::kRecord | (fingerprint & KeyWord::kFingerprintMask) << KeyWord::kFingerprintShift;
  constexpr uint64_t kRecordBits =
      KeyWord::kFormMask | KeyWord::kFingerprintMask << KeyWord::kFingerprintShift;
  BucketMatch m;
#pragma GCC unroll 4
  for (unsigned j = 0; j < 4; ++j) {
    const uint64_t w = __atomic_load_n(&b->slot[j].key, __ATOMIC_ACQUIRE);
    m.inline_eq |= static_cast<unsigned>((w & ~KeyWord::kHint) == inline_word) << j;
    m.record |= static_cast<unsigned>((w & kRecordBits) == record_word) << j;
    m.empty |= static_cast<unsigned>(KeyWord::Empty(w)) << j;
    m.hints |= static_cast<unsigned>(w >> 61 & 1) << j;
  }
  return m;
}

// The first try's reads (Spash::DoGet): a bucket's four key words, read once. A search
// that finds its key needs only Matching; a miss goes on to the hint bits and the forms of
// the same words, so that a hit's path stays short (its instructions decide how many
// single-call searches' misses are in flight at once).
struct KeyWords {
  uint64_t w[4];
};

[[gnu::always_inline]] inline KeyWords ReadKeyWords(const Bucket* b) {
  KeyWords k;
#pragma GCC unroll 4
  for (unsigned j = 0; j < 4; ++j) k.w[j] = __atomic_load_n(&b->slot[j].key, __ATOMIC_ACQUIRE);
  return k;
}

// Bit j set if slot j holds `want`, an inline key word (its hint bit aside).
[[gnu::always_inline]] inline unsigned Matching(const KeyWords& k, uint64_t want) {
  unsigned eq = 0;
#pragma GCC unroll 4
  for (unsigned j = 0; j < 4; ++j) {
    eq |= static_cast<unsigned>((k.w[j] & ~KeyWord::kHint) == want) << j;
  }
  return eq;
}

// Bit j set if slot j's hint bit is (bucket b + j holds an entry of this bucket's).
[[gnu::always_inline]] inline unsigned HintBits(const KeyWords& k) {
  unsigned hints = 0;
#pragma GCC unroll 4
  for (unsigned j = 0; j < 4; ++j) hints |= static_cast<unsigned>(k.w[j] >> 61 & 1) << j;
  return hints;
}

// The OR of the key words: a record's form bit is set in it if any slot holds one.
[[gnu::always_inline]] inline uint64_t Forms(const KeyWords& k) {
  return k.w[0] | k.w[1] | k.w[2] | k.w[3];
}

}  // namespace spash

struct SpashRoot {
  EngineRoot header;
  uint64_t floor_depth;
  uint64_t usage_saved;
};
static_assert(offsetof(SpashRoot, floor_depth) == sizeof(EngineRoot) &&
                  offsetof(SpashRoot, usage_saved) == sizeof(EngineRoot) + 8 &&
                  sizeof(SpashRoot) <= pm::kCacheLine,
              "the kit's header, the fixed floor depth, then the mutable flag: one line");

class Spash : public Engine {
 public:
  Spash();
  ~Spash() override;

  // The Index contract (include/pmhash/index.h), and: Insert refuses with TableFull only
  // with resize=off (a full segment cannot split), or when no split within bounds
  // separates the new key from a full segment's 16 (Split). ForEach visits the hash space
  // in order, a segment at a time, copying each one's entries and calling fn with no lock
  // held (fn may call this index): a key present throughout is visited exactly once,
  // across splits, merges and transitions (keys never move in hash order). Scan pages
  // (DoScan) read the same way, lock-free, with the directory's entries at the page's
  // start as homes: a key present throughout is passed exactly once, but for a visitor
  // that stops early (its home is read again). CheckInvariants checks invariants 1-4 by
  // a full scan.
  PMHASH_ENGINE_KIT_OVERRIDES;
  // The paper's pipeline (Fig. 5a) over the kit's MultiGet and Write: the key's
  // directory entry now (step 1), the main bucket of the key prefetched kPrefetchLag
  // calls before (step 2), and the record of the key prefetched depth - 1 calls before
  // (steps 3 and 4: its slot located in the bucket, its out-of-line entry asked for).
  void Prefetch(uint64_t hash) const override {
    PrefetchAhead(hash, filter_, RecordLag(multiget_depth()));
  }
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  void PrefetchWrite(uint64_t hash) const override {
    PrefetchAhead(hash, false, RecordLag(write_depth()));
  }
  // The stages of the keys in flight, with no key entering (a batch's last calls).
  void PrefetchAdvance() const override;
  // With group_commit, the batch's thread groups its commits (Finish) until the end.
  void BeginWriteBatch() override;
  void EndWriteBatch() override;
  Status Shutdown() override;
  // Frees directory tables no reader can hold any more.
  void WaitForBackgroundWork() override;

 public:
  // With hot_oracle=on, hot_keys keys (hot_keys.h: the oracle in place of the list).
  uint64_t HotKeyOracleSize() const override;
  void SetHotKeyOracle(const std::vector<std::string>& keys) override;
  unsigned global_depth() const { return dir_.Current()->depth; }
  uint64_t segments() const { return live_segments_.load(std::memory_order_relaxed); }
  // For tests that forge a damaged pool (LevelDB's TEST_ convention): the depth record of
  // the segment whose directory entry `hash` resolves to (no writer may run).
  uint64_t* TEST_DepthRecordOf(uint64_t hash) const {
    return RecordOf(SegmentAt(Directory::Load(dir_.Resolve(hash))));
  }
  // Tests only: called with the hash by a lock-free read (a search's first try, a Scan's
  // or ForEach's segment snapshot) after it read the directory entry and before it reads
  // the segment, inside the window a concurrent split needs, so that a test can run
  // writers there (on a thread of their own: this one holds its epoch guard); and by a
  // delete's first try between its read of the bucket and its lock. With
  // `filter`, the first try calls it once more before, between its resolve and its read
  // of the filter byte. Unset outside tests (one predicted branch).
  // The hook runs in DoGet's first try (the kit's QuickGet is off while one is set).
  void TEST_SetReadHook(std::function<void(uint64_t)> hook) {
    SetQuickGet(first_try_ && hook == nullptr);
    read_hook_ = std::move(hook);
  }

 private:
  using Segment = spash::Segment;
  using Slot = spash::Slot;
  using KeyWord = spash::KeyWord;
  using Directory = spash::Directory;
  using DirEntry = spash::DirEntry;

  // Table I's choice for an update's new data in eadr (option update_flush).
  enum class UpdateFlush : uint8_t { kAdaptive = 0, kAlways = 1, kNever = 2 };

  // Per thread (pm::CounterTable's dense ids; the last one is shared by threads beyond
  // them, under its lock): inserts minus deletes, the compacted-flush chunk and the free
  // lists of record classes (16 .. 128 bytes).
  struct alignas(64) ThreadState {
    std::atomic<int64_t> delta{0};
    std::mutex mu;           // the shared slot only
    uint64_t chunk = 0;      // the thread's chunk (pool offset), 0: none
    uint32_t chunk_used = 0;  // bytes appended to it
    std::vector<uint64_t> free[kSpashRecordClasses];
    uint64_t rng = 0;        // injected aborts (htm_emulated)
    // Prefetch's pipeline: the hashes of the last kPipelineRing calls, a bit per slot in
    // pipeline_live (0: an advance, no key), and the last Prefetch's kind, which an
    // advance continues (skip_filtered, record_lag).
    uint64_t pipeline[8] = {};
    uint32_t pipeline_pos = 0;
    uint8_t pipeline_live = 0;
    bool pipeline_skip_filtered = false;
    uint8_t pipeline_record_lag = 0;
  };
  static constexpr unsigned kPipelineRing = 8;
  static constexpr unsigned kPrefetchLag = 2;  // step 2: the main bucket
  static_assert(2 * kPrefetchLag < kPipelineRing, "the ring holds step 4's hash");
  static_assert(kPipelineRing <= 8, "pipeline_live has a bit per slot");
  // Step 4's lag in a pipeline of `depth`: two calls after step 2 (as step 2 is two after
  // step 1), or the last call before the key's op runs if that comes sooner; 0 (no step
  // 4) if no call comes after step 2's.
  static unsigned RecordLag(size_t depth) {
    const size_t lag = std::min<size_t>(depth - 1, 2 * kPrefetchLag);
    return lag > kPrefetchLag ? static_cast<unsigned>(lag) : 0;
  }
  class StateUse;
  ThreadState& MyState() const;
  bool IsShared(const ThreadState& t) const;
  void AddDelta(int64_t d);

  // A key's slot in a segment: where it is, and the first free slot by circular probing
  // from its main bucket (-1: none).
  struct Probe {
    int found = -1;
    int free = -1;
  };
  // A block of the list, and a live segment as its record says (recovery).
  struct BlockRef {
    uint64_t offset, kind;
  };
  struct SegmentRef {
    uint64_t offset;
    unsigned depth;
    uint64_t prefix;
  };
  struct Commit;
  // kAbortedForGood: an RTM transaction the commit itself aborted to take the fallback
  // lock (a split, a new record), so no retry in a transaction.
  enum class Acquired : uint8_t { kHeld, kRetry, kAborted, kAbortedForGood };
  enum class Outcome : uint8_t { kDone, kNeedsDoubling, kBlocked, kNeedsFallback };

  // ---- Segments and slots ----
  Segment* SegmentAt(uint64_t entry) const {
    return pool().At<Segment>(DirEntry::Segment(entry) << 8);
  }
  // The key's main bucket in the segment its group's hint names, asked for while its
  // entry is on its way (directory.h, the segment hint).
  void PrefetchHinted(const Directory::Place& place, uint64_t h) const;
  uint64_t SegmentIndex(const Segment* s) const { return pool().ToOffset(s) >> 8; }
  static uint64_t& KeyWordOf(Segment* s, int i) { return s->bucket[i / 4].slot[i % 4].key; }
  static const uint64_t& KeyWordOf(const Segment* s, int i) {
    return s->bucket[i / 4].slot[i % 4].key;
  }
  // An acquire load: optimistic readers read words writers store concurrently.
  static uint64_t Load(const uint64_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  // Whether key and value are stored in the slot's two words (else as a record): both
  // 8 bytes, and the key hash a bijection (the key word keeps the hash, not the key).
  bool Inlinable(std::string_view key, std::string_view value) const {
    return inline_keys_ && key.size() == 8 && value.size() == 8;
  }
  // The inline key word `key` would have (one no word matches if it cannot be inline).
  uint64_t InlineWordFor(std::string_view key, uint64_t h) const;
  // Whether record-form word `w` holds `key`: its fingerprint, then its record's key.
  bool RecordMatches(uint64_t w, std::string_view key, uint64_t h) const;
  // The slot of bucket `c` (index c * 4 + j) holding `key` among the candidates `m`
  // (spash::MatchBucket: an inline match, else a record whose fingerprint matches
  // and whose key is the key), or -1.
  int MatchIn(const spash::Bucket* bucket, int c, const spash::BucketMatch& m,
              std::string_view key, uint64_t h) const;
  // Whether two entry words of one segment's range carry the same segment and version
  // (the range's count lives in its first entry only).
  static bool SameVersion(uint64_t a, uint64_t b) {
    return DirEntry::Segment(a) == DirEntry::Segment(b) &&
           DirEntry::Version(a) == DirEntry::Version(b) && DirEntry::Depth(a) == DirEntry::Depth(b);
  }
  // The main bucket, the buckets its hints name and, with want_free and no free slot in
  // the main bucket, the others; the lines read are noted.
  Probe Find(const Segment* s, std::string_view key, uint64_t h, bool want_free) const;
  // The full hash of the entry with key word `w` in a segment of `prefix` at `depth`.
  uint64_t HashOfEntry(uint64_t w, uint64_t prefix, unsigned depth) const;
  void EntryKeyValue(uint64_t w, uint64_t v, uint64_t h, std::string* key,
                     std::string* value) const;

  // ---- Blocks, segments and their records ----
  unsigned InitialDepth() const;
  Status NewBlock(uint64_t kind, bool link, uint64_t* offset);
  void NoteBlock(uint64_t block);
  uint64_t BlockOf(uint64_t offset) const;
  Status NewSegment(Segment** out);
  void FreeSegment(Segment* s);
  uint64_t* RecordOf(const Segment* s) const;
  // Stores (and flushes, no fence) the segment's depth record; depth 0: free.
  void StoreRecord(Segment* s, unsigned depth, uint64_t prefix);

  // ---- Records (compacted flush) ----
  Status NewRecord(std::string_view key, std::string_view value, uint64_t h, uint64_t* word);
  Status NewChunk(uint64_t* offset);
  bool TakeOrphan(unsigned cls, uint64_t* offset);
  void FreeRecord(uint64_t w);

  // ---- Operations ----
  Acquired Acquire(const Directory::Place& place, uint64_t seen, bool try_region, Commit* c,
                   int attempt);
  // Releases entries [first, first + count) of `held` as `word` says (segment, depth,
  // count), the version one past the held one: the segment changed.
  void ReleaseChanged(const Directory::Held& held, uint64_t first, uint64_t count,
                      uint64_t word);
  // Fences and releases; false if the region aborted (nothing happened: retry). In a
  // group (below) a commit that changed one range only is flushed and left held.
  bool Finish(Commit& c);

  // ---- Group commit (option group_commit; not in the paper) ----
  // Inside a write batch, the calling thread's commits that changed one range and split
  // nothing stay held (busy), their lines unflushed and their records' frees waiting:
  // FlushGroup flushes every line, fences once, then releases them (version + 1) and
  // frees. So no reader
  // validates, and no writer builds on, what is not durable; two ops of one segment
  // meet its busy range, which flushes the group first (each key's ops stay in order).
  // The thread never waits while it holds a group: before a backoff, a stage copy (Lock
  // with copy off), a doubling, a transition's end or a merge, it flushes.
  static constexpr int kMaxGroup = 64;
  static constexpr int kMaxGroupLines = 256;
  struct Deferred {
    Directory::Held held;
    uint64_t word;  // the range's new word but for its version
    uint64_t to_free[2];
    int nfree;
  };
  struct Group {
    const Spash* owner = nullptr;  // the engine whose batch this thread runs
    int n = 0;
    Deferred held[kMaxGroup];
    int nlines = 0;
    const void* lines[kMaxGroupLines];  // to flush before the fence
  };
  static thread_local Group group_;
  // The calling thread's group if it runs a batch of this engine with group_commit and c
  // can join it; else null.
  Group* GroupFor(const Commit& c);
  // Inside an epoch guard (an op's, or EndWriteBatch's): a release may let a transition
  // retire the table of the ranges released after it.
  void FlushGroup(Group& g);
  // Flushes the calling thread's group if it holds one of this engine: true if it did.
  bool FlushBeforeWaiting();
  // The first try (QuickGet's, DoGet's), with no call on its path: kFound (with the
  // value word) and kAbsent stand; kRetry sends DoGet to GetFull. kHooked: with the
  // test's read hook (FirstGetHooked, out of line).
  template <bool kHooked>
  QuickAnswer FirstGet(uint64_t h);
  template <bool kHooked>
  QuickAnswer FirstGetEntered(uint64_t h);
  QuickAnswer FirstGetHooked(uint64_t h);
  Status GetFull(std::string_view key, uint64_t h, std::string* value);
  Status GetLocked(std::string_view key, uint64_t h, std::string* value);
  Outcome InsertLocked(Commit& c, int free_slot, std::string_view key, std::string_view value,
                       uint64_t h, uint64_t* record, Status* result);
  void InsertAt(Commit& c, int k, int slot, std::string_view value, uint64_t h,
                uint64_t* record);
  Status UpdateLocked(Commit& c, int slot, std::string_view key, std::string_view value,
                      uint64_t h, uint64_t* record, Outcome* outcome);
  // Whether slot `slot` holds a record of the size key and value would take (an update
  // that may be written in place).
  bool SameSizeRecord(const Segment* s, int slot, std::string_view key,
                      std::string_view value) const;
  void TableOneWriteBack(Commit& c, const void* at, uint64_t bytes, bool hot);
  void SetHint(Commit& c, Segment* s, int b, int j, bool on);
  // Prefetch's pipeline; with `skip_filtered`, a key the filter answers is not followed
  // to its bucket (searches; writes follow every key). record_lag: step 4's (RecordLag).
  void PrefetchAhead(uint64_t hash, bool skip_filtered, unsigned record_lag) const;
  // One call of the pipeline on the thread's ring: `hash` enters it (live) or an advance
  // does (not live); steps 2 and 3-4 run for the keys kPrefetchLag and the record lag back.
  void PipelineStages(ThreadState& ts, uint64_t hash, bool live) const;
  // Step 4 for the key of hash h: the records its main bucket's fingerprints point to,
  // prefetched (the bucket read: step 2 asked for it).
  void PrefetchRecords(uint64_t h) const;
  // The filter (option `filter`): the held range's bytes after a key of hash h went into
  // part k (its bits added, or the part's bytes rebuilt if the key's was unknown), and
  // the exact bytes of entries [first, first + count) of t for the n keys of `hashes`.
  void NoteInFilter(Commit& c, int k, uint64_t h);
  void StoreFilters(spash::Directory::Table* t, uint64_t first, uint64_t count,
                    const uint64_t* hashes, int n);
  // The exact bytes of entries [first, first + count) of t, within the range from
  // range_first that names `entry`'s segment (whose writers are held off).
  void StoreSegmentFilters(spash::Directory::Table* t, uint64_t entry, uint64_t range_first,
                           uint64_t first, uint64_t count);
  // Directory::Refine: a doubling stage's exact bytes.
  static void RefineFilters(void* ctx, spash::Directory::Table* next, uint64_t first,
                            uint64_t count);
  // Splits part k's full segment, which the key of hash h found full.
  Status Split(Commit& c, int k, uint64_t h, Outcome* outcome);
  // A delete's first try (DoDelete's, inside its epoch): true if it deleted the key;
  // false if nothing changed (DeleteFull decides).
  bool FirstDeleteEntered(uint64_t h);
  Status DeleteFull(std::string_view key, uint64_t h);
  unsigned DeleteLocked(Commit& c, int slot, uint64_t h);
  void MaybeMerge(uint64_t h);
  void Merge(const Directory::Held& low, const Directory::Held& high);
  static bool HalvingAllowed(void* ctx);
  bool ShallowEnough(unsigned g) const;
  void MaybeHalve();
  // Appends to *out the entries whose hash is >= pos of the segment that holds `pos`
  // (with their hashes), as one validated lock-free snapshot of it; *end is the first
  // hash past the segment, *last whether it ends the hash space.
  Status CollectSegment(uint64_t pos, std::vector<ScanEntry>* out, uint64_t* end,
                        bool* last) const;

  // ---- Recovery ----
  Status ReadBlocks(std::vector<BlockRef>* blocks) const;
  // The directory from the live segments' depth records, settling what an interrupted
  // split or merge left (spash.h, persist order); a segment that deeper ones cover whole
  // goes to *shadowed (and out of *live).
  Status RebuildDirectory(std::vector<SegmentRef>* live, bool crashed,
                          std::vector<SegmentRef>* shadowed);
  Status CheckEntry(const Segment* s, int i, uint64_t prefix, unsigned depth,
                    uint64_t* hash) const;
  Status ScanSegments(const std::vector<SegmentRef>& live, bool repair, uint64_t* count);
  // Whether the segment the directory names for `hash` holds key word `w` (hint aside):
  // then `w` elsewhere is a copy an interrupted split or merge left behind.
  bool HeldElsewhere(uint64_t w, uint64_t hash) const;
  // Marks the 16-byte units of key word w's record if it lies in a chunk (usage[i]: the
  // bits of chunk_blocks_[i]).
  void MarkUsage(uint64_t w, std::vector<std::vector<uint64_t>>* usage) const;
  void AdoptUsage(uint64_t block, const uint64_t* bits);
  Status LoadUsage();

  // Options (Configure).
  unsigned initial_depth_opt_ = 0;
  double merge_fill_ = 0.5;
  UpdateFlush update_flush_ = UpdateFlush::kAdaptive;
  bool compacted_flush_ = true;
  bool chunk_write_back_ = true;
  bool htm_ = false;  // commit phases in transactions: emulated regions, or RTM (rtm_)
  bool rtm_ = false;
  unsigned htm_retries_ = 4;
  double htm_abort_rate_ = 0;
  bool read_lock_ = false;
  bool nta_reads_ = false;
  bool filter_ = false;  // the directory's negative filter (directory.h; not in the paper)
  bool hint_ = false;    // the directory's segment hints (directory.h; not in the paper)
  bool group_commit_ = false;  // a write batch's commits fenced once (above; not in the paper)
  bool prefetch_records_ = true;  // the pipeline's step 4 (PrefetchRecords)
  bool inline_keys_ = true;  // false under a test hash (Engine::key_hash_invertible)
  bool first_try_ = true;    // DoGet and DoDelete may take their short paths (first_try)
  std::function<void(uint64_t)> read_hook_;
  spash::HotKeys hot_;

  // Structure.
  SpashRoot* root_ = nullptr;
  unsigned floor_depth_ = kSpashMinDepth;
  mutable Directory dir_;
  std::atomic<uint64_t> depth_count_[64] = {};  // live segments per local depth
  std::atomic<uint64_t> live_segments_{0};
  uint64_t base_count_ = 0;
  std::unique_ptr<ThreadState[]> threads_;
  // Blocks (alloc_mu_ guards what follows it, except block_start_, which is written
  // before a block's segments are handed out).
  std::unique_ptr<std::atomic<uint64_t>[]> block_start_;  // per 64 KiB heap window
  mutable std::mutex alloc_mu_;
  uint64_t head_block_ = 0;
  std::vector<uint64_t> blocks_;        // every block
  std::vector<uint64_t> chunk_blocks_;  // the chunk blocks, sorted by offset at open
  std::vector<uint64_t> free_segments_;
  std::vector<uint64_t> free_chunks_;
  std::vector<uint64_t> free_units_[kSpashRecordClasses];  // found free at open
  std::atomic<uint64_t> orphans_{0};                       // their number
  bool usage_loaded_ = false;
  // Whether a record was written or met by a search since the open: the pipeline's step 4
  // runs only then (a table of inline entries has no record to prefetch).
  mutable std::atomic<bool> records_seen_{false};

  // Counters.
  std::atomic<uint64_t> splits_{0}, merges_{0}, overflow_inserts_{0}, hot_updates_{0},
      cold_updates_{0}, in_place_updates_{0}, htm_commits_{0}, htm_aborts_{0},
      htm_fallbacks_{0};
};

}  // namespace pmhash::engines
