// CCEH, Cacheline-Conscious Extendible Hashing (Nam et al., FAST '19; described in paper
// 001, Section II-C), as the base of two engines: `cceh` (engines/cceh/cceh.h) and `bht`
// (engines/bht/bht.h), which puts a DRAM write buffer in front of each segment. This
// header is the explicit interface BHT reuses (DESIGN.md: an engine never includes another
// engine's internals otherwise): the on-media layout, the slot encoding, the directory and
// its DRAM side table, segment probes, in-place writes and splits, out-of-place segment
// replacement, recovery, iteration and checks. Design notes, persist orders, deviations
// and figures: docs/engines/cceh.md.
//
// ---- On-media layout ------------------------------------------------------------------
//
//   root area (Engine::root):
//   struct CcehRoot {
//     EngineRoot header;      // engines/root.h: magic, version, check, table = the
//                             // directory block (sealed), count (sealed)
//     uint64 segment_bytes;   // fixed: bytes per segment (256 .. 64 KiB, a power of two)
//     uint64 probe_slots;     // fixed: slots a probe covers (16, the original's 4 lines)
//     ... the engine's own fields (bht: the write-ahead log); zero to 4 KiB
//   };
//
//   directory block (allocator; root.table): 2^G entries
//   struct CcehDirectory {
//     uint64 magic;           // kCcehDirMagic (TableHeader::magic)
//     uint64 entries;         // 2^G (TableHeader::size)
//     uint64 global_depth;    // G
//     uint8  pad[32];         // zero
//     uint64 check;           // Engine::MetadataCheck of the 56 bytes above (written once)
//     uint64 entry[2^G];      // sealed words (util/hash.h, salt = the entry's pool offset):
//                             // payload = segment offset | mark << 7 | local depth L
//                             // (segments are 256-byte aligned, so the low 8 bits are
//                             // free; the mark is bht's "buffered", 0 in cceh); entry i
//                             // serves the keys whose hash has i as its top G bits
//   };
//
//   segment (allocator block of exactly segment_bytes, no header): buckets of 64 bytes
//   struct CcehBucket { KvWords slot[4]; };   // 16 KiB = 256 buckets x 4 slots x 16 B
//
//   A slot is 16 bytes, word0 then word1 (no per-slot metadata: the original's bucket
//   is four pairs). Its form comes from word0 (the shared slot encoding, common/slot.h,
//   with the form folded into word0, since there is no byte to keep it in):
//     word0 == kCcehEmpty (all ones)              empty: never used since the segment
//                                                 was written (a new segment is all ones,
//                                                 as the original's INVALID key); with
//                                                 probe_to_empty, a probe stops here
//     word0 == kCcehFree (0xffff << 48)           free: a deleted entry, or a filler a
//                                                 split writes (a probe goes on past it)
//     word0 >> 48 == 0xffff (otherwise)           record: word0 = kCcehRecordTag | pool
//                                                 offset of the record (never 0), word1 =
//                                                 HashKey
//     anything else                               inline: word0 = the key's 8 bytes,
//                                                 word1 = the value's 8 bytes
//   An 8-byte key whose top two bytes are 0xff 0xff (1 key in 65,536) would read as a
//   record word, so it is stored in record form whatever its value (EscapesInline).
//
// ---- Addressing ------------------------------------------------------------------------
//
//   hash = KeyHash(key) (the pool's seed). Directory entry: the top G bits of the hash. Segment of local
//   depth L and pattern p (the top L bits of every hash it serves: a range of 2^(G-L)
//   entries starting at p << (G-L)). Start bucket: the low bits of the hash (hash mod
//   buckets); a probe covers probe_slots slots from the start bucket's first slot,
//   wrapping within the segment (the original's linear probing over 4 lines).
//   A slot is live when it holds an entry (inline or record) and its key's hash has the
//   segment's pattern; otherwise it is free (empty, free, or left behind by a split:
//   lazy deletion). A write takes the first free slot of the window. Slots only become
//   empty when a segment is written whole, so a probe could stop at the first empty slot
//   (invariant 2). By default it does not: a search that misses reads the whole window,
//   as the original's searches do. Option probe_to_empty (an improvement, per open: the
//   invariant is kept either way) stops searches and the duplicate checks we add there
//   (docs/engines/cceh.md, "Probes that stop at an empty slot").
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. The directory is 2^G entries; the entries of a segment of depth L form one aligned
//     range of 2^(G-L) entries, all equal (after recovery's repair, below).
//  2. A live slot of a segment lies within the probe window of its key's start bucket,
//     and no slot between the window's first slot and it is empty.
//  3. No key is live twice; a key is live only in the segment its hash's top bits pick.
//  4. A live record slot owns its record. A record slot left behind by a split (stale)
//     shares its record with the live copy in the sibling: it is never read, freed or
//     reported (its hash word already tells that it is stale).
//  5. Count() equals the number of live slots (plus, in bht, what its buffers add).
//
// ---- Persist order ---------------------------------------------------------------------
//
//  insert: a record (if any) flushed, fence; into a slot a split left behind, word0 =
//    free first (else its old word0 beside the new word1 could read as live: a stale
//    record's hash word is its liveness); word1 stored, word0 stored (one line: they
//    persist in program order, so word0 never persists without word1), persist: the
//    word0 store is the commit point (the original CASes a SENTINEL into the key first,
//    which a crash can leave behind as a slot no one frees; we have none).
//  delete (not in the original): word0 = free, persist: committed; then the record
//    (if any) is freed.
//  update: inline value: one 8-byte store of word1, persist. Record: new record flushed,
//    word0 published (fence, store, persist), old record freed. Inline -> record: an
//    UndoLog transaction saving the 16 bytes, both words stored, persist, commit.
//  split (in place, the original's): the entries of segment S (depth L) whose next hash
//    bit is 1 are copied into a new segment S1 (same slot positions; the slots between
//    an entry's window start and it that it would leave empty hold a free word instead,
//    invariant 2), flushed while unreachable; [doubling, if L == G]; then the directory
//    range R of S (2^(G-L) entries starting at a): every entry but R's first stored
//    ((S1, L+1) in the right half, (S, L+1) in the left half), flushed, fence; then entry
//    a = (S, L+1) published (fence, store, persist): the split's commit point (the old
//    segment's local depth, stored last). The first fence of the switch is what makes S1
//    durable before any entry that points to it. S keeps the moved entries (lazy deletion).
//    The original persists S's local depth before the directory; a crash then leaves
//    a range whose depth disagrees with its entries, which its recovery cannot repair.
//  doubling: a new directory of 2^(G+1) entries (entry i copied to 2i and 2i+1),
//    persisted while unreachable; root.table published (Engine::PublishRootTable): the
//    commit; then the old directory is freed.
//  replacement (bht's flip, not in the original): new segments flushed out of place;
//    the range's entries stored as for a split (every entry but the first, fence, the
//    first entry published last); then the old segment is freed.
//  recovery: walk the directory range by range, each range's size taken from its first
//    entry's depth: an entry that differs from its range's first entry is the trace of
//    a split or replacement whose commit did not persist, and is set back to the first
//    entry (at most one range can hold one: directory updates are serialized); segments
//    so unlinked were never reached by a write and are reclaimed by Allocator::Rebuild,
//    whose EnumerateBlocks follows the same rule. Idempotent: a crash during recovery
//    repeats it. After a clean shutdown any such difference is Corruption.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// Every operation reads the directory in PM, as the original does (the entry's top 48
// bits are its payload: a shift, no check, on this path; the checks ran at open). The
// DRAM side table, rebuilt at every open (the directory cannot hold DRAM pointers, and
// 2^(G-L) entries share one segment), holds per segment (CcehSeg, found from the
// entry's offset by arithmetic) its lock (VersionedRwLock: the original's per-segment
// reader/writer lock, in DRAM, so a killed process leaves no lock word to hang the
// reopen), depth, pattern, key delta and the derived engine's attachment (bht's
// buffer). Writers lock the segment exclusively, check that it still serves their hash
// (a split may have moved it) and release only after their change is durable. Searches
// take no lock: they validate by the segment's version that it served their hash and no
// writer came in (kit: SearchOptimistically); records are read under the shared lock.
// Splits, doublings and replacements change the directory under dir_mu_ (the directory
// lock), always after the segment lock (lock order: bht's buffer lock, segment lock,
// dir_mu_, a new segment's lock). A new segment's state comes up only after the
// directory change that links it is durable, so no write reaches it before its split or
// replacement committed. A doubling keeps the old directory allocated until Close
// (FreeRetiredDirectories; a crash leaves it unreachable, and the allocator's rebuild at
// recovery frees it): a search or writer may still read an entry of it, which leads to a
// segment that does not serve its hash (it retries) or to the one that does. Freed at
// once, its block could be handed out and rewritten under that read (a race TSan found
// in BhtTest.FourThreadsWithFlipsSplitsAndDoublings). The old directories together are
// smaller than the current one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "engines/striping.h"
#include "util/cpu.h"
#include "util/dram_buffer.h"

namespace pmhash::engines {

inline constexpr uint64_t kCcehDirMagic = 0x3152494448'4543ull;  // "CEHDIR1"
inline constexpr uint64_t kCcehEmpty = ~uint64_t{0};
inline constexpr uint64_t kCcehRecordTag = uint64_t{0xffff} << 48;
inline constexpr uint64_t kCcehFree = kCcehRecordTag;  // no record lives at pool offset 0
inline constexpr uint64_t kCcehOffsetMask = (uint64_t{1} << 48) - 1;
inline constexpr size_t kCcehBucketSlots = 4;
inline constexpr size_t kCcehBucketBytes = kCcehBucketSlots * sizeof(KvWords);
inline constexpr uint64_t kCcehDefaultSegmentBytes = 16384;  // 256 buckets
inline constexpr uint64_t kCcehMinSegmentBytes = 256;
inline constexpr uint64_t kCcehMaxSegmentBytes = 65536;
inline constexpr uint64_t kCcehProbeSlots = 16;  // the original's 4 pairs x 4 lines
inline constexpr uint32_t kCcehMaxDepth = 40;  // deepest split: 2^40 entries never fit a pool
// The top `depth` bits of a hash (0 when depth is 0), with no branch: a shift by 64 is
// undefined, so the hash is shifted once, then by 63 - depth.
inline uint64_t CcehTopBits(uint64_t hash, uint32_t depth) {
  return (hash >> 1) >> (63 - depth);
}
static_assert(kCcehMaxDepth <= 63, "CcehTopBits shifts by 63 - depth");
inline constexpr uint64_t kCcehDefaultSegments = 64;
static_assert(kCcehBucketBytes == pm::kCacheLine, "a bucket is one cache line of 4 slots");
static_assert(kCcehMaxDepth <= 0x7f, "a local depth sits in the low 7 bits of an entry");
static_assert(pm::kMaxPoolSize <= kCcehOffsetMask + 1,
              "a pool offset fits the 48 bits below the record tag");

struct CcehRoot {
  EngineRoot header;
  uint64_t segment_bytes;
  uint64_t probe_slots;
};
static_assert(offsetof(CcehRoot, segment_bytes) == sizeof(EngineRoot) &&
                  offsetof(CcehRoot, probe_slots) == sizeof(EngineRoot) + 8 &&
                  sizeof(CcehRoot) == sizeof(EngineRoot) + 16,
              "the geometry follows the kit's root header (fixed fields, under its check)");

struct alignas(64) CcehDirHeader {
  uint64_t magic;
  uint64_t entries;
  uint64_t global_depth;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(CcehDirHeader) == pm::kCacheLine &&
                  offsetof(CcehDirHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(CcehDirHeader, entries) == offsetof(TableHeader, size) &&
                  offsetof(CcehDirHeader, check) == 56,
              "the directory header is one line opening with the kit's TableHeader");

// ---- The slot encoding ------------------------------------------------------------------

// The form a slot's word0 says it has (kEmpty for an empty and a free slot alike).
inline SlotForm CcehForm(uint64_t word0) {
  if (word0 == kCcehEmpty || word0 == kCcehFree) return SlotForm::kEmpty;
  return (word0 & kCcehRecordTag) == kCcehRecordTag ? SlotForm::kRecord : SlotForm::kInline;
}
// The words as the slot codec takes them (a record's word0 without its tag).
inline KvWords CcehCodecWords(const KvWords& w) {
  if ((w.word0 & kCcehRecordTag) == kCcehRecordTag) return {w.word0 & kCcehOffsetMask, w.word1};
  return w;
}
// An 8-byte key that would read as a record word (or as empty) if stored inline.
inline bool CcehEscapesInline(uint64_t key_word) {
  return (key_word & kCcehRecordTag) == kCcehRecordTag;
}
// A directory entry's payload: the segment's offset (256-byte aligned), its local depth
// (bits 0..6) and its mark (bit 7: the derived engine's, bht's "buffered").
inline constexpr uint64_t kCcehEntryDepthMask = 0x7f;
inline constexpr uint64_t kCcehEntryMark = 0x80;
inline uint64_t CcehEntry(uint64_t segment, uint32_t depth, bool marked) {
  return segment | depth | (marked ? kCcehEntryMark : 0);
}

// ---- The DRAM side table ----------------------------------------------------------------

inline constexpr uint32_t kCcehNoSegment = ~0u;  // CcehSeg::depth of a slot serving nothing

// One segment's DRAM state, in a table indexed by the segment's pool offset divided by
// the segment size (distinct blocks of that size land in distinct slots), so a search
// finds it by arithmetic on the directory entry and loads it while the segment's bucket
// lines load (perf: a pointer chased first was 40% of a search's time). A slot outlives
// its segment: bht's flips retire one segment and bring up another elsewhere, and a
// freed block's slot is taken again when the allocator hands the block out again; its
// version only ever grows, so a search holding a stale slot always fails to validate.
struct alignas(64) CcehSeg {
  VersionedRwLock mu;
  // Below: changed only with mu held exclusively, read by searches under its version.
  std::atomic<uint32_t> depth{kCcehNoSegment};  // local depth L, or kCcehNoSegment
  std::atomic<uint64_t> pattern{0};             // the top L bits of every hash it serves
  std::atomic<uint64_t> offset{0};              // the segment block
  // Keys this segment gained (inserts) less those it lost (deletes) since it came up, by
  // the holder of its write lock; splits move keys without changing any total.
  std::atomic<int64_t> delta{0};
  std::atomic<void*> attachment{nullptr};  // the derived engine's (bht: the buffer)
  bool marked = false;  // its directory entries' mark (bht: buffered), fixed while it lives
  size_t list_index = 0;                   // in CcehCore's list of live segments

  bool Serves(uint64_t hash) const {
    const uint32_t d = depth.load(std::memory_order_acquire);
    if (d == kCcehNoSegment) return false;
    return CcehTopBits(hash, d) == pattern.load(std::memory_order_acquire);
  }
};

// The directory's DRAM copy (option dram_directory): each entry's segment offset, divided
// by 256 (segments are 256-byte aligned), in 4 bytes, on huge pages where the kernel
// allows. The directory in PM stays the persistent truth; the copy is rebuilt from it at
// every open and doubling, and SwitchRange changes both.
inline constexpr uint32_t kCcehCopyShift = 8;
static_assert(pm::kMaxPoolSize >> kCcehCopyShift <= (uint64_t{1} << 32),
              "a copied entry holds any segment offset of a pool in 32 bits");
struct CcehDirCopy {
  uint32_t depth = 0;
  DramArray<std::atomic<uint32_t>> entries;  // 2^depth
};

// A segment built in DRAM (a split's new half, bht's merge), then written out whole.
class CcehImage {
 public:
  explicit CcehImage(size_t slots) : slots_(slots, KvWords{kCcehEmpty, kCcehEmpty}) {}
  KvWords& operator[](size_t i) { return slots_[i]; }
  const KvWords* data() const { return slots_.data(); }
  size_t size() const { return slots_.size(); }

 private:
  std::vector<KvWords> slots_;
};

// ---- The base of `cceh` and `bht` -------------------------------------------------------

class CcehCore : public Engine {
 public:
  uint64_t segments() const;
  uint32_t global_depth() const { return DirDepth(dir_word_.load(std::memory_order_acquire)); }
  uint64_t splits() const { return splits_.load(std::memory_order_relaxed); }
  uint64_t doublings() const { return doublings_.load(std::memory_order_relaxed); }
  uint64_t slots_per_segment() const { return slots_; }

  // Live keys in the segments (bht adds what its buffers hold).
  uint64_t SegmentKeys() const;
  // Corrects the count taken at open by `by` keys (bht: a clean open whose sealed count
  // already held the keys its log replay puts back into buffers).
  void ShiftSegmentKeys(int64_t by);

  // The options the core reads (ConfigureCore), for the derived engine's registration.
  static std::vector<OptionSpec> CcehOptions();

  // Tests only (LevelDB's TEST_ convention): called by a search's first try after it
  // read the directory entry and before it reads the segment, inside the window a
  // concurrent split needs, so that a test can run the split there on the searching
  // thread. Unset outside tests (one predicted branch).
  void TEST_SetFirstTryHook(std::function<void()> hook) { first_try_hook_ = std::move(hook); }
  // Matches the window's lines with AVX2 (where the CPU has it) or with SSE2.
  void TEST_SetWindowAvx2(bool on) { window_avx2_ = on && CpuFeatures::Get().avx2; }
  // Whether the directory's DRAM copy (dram_directory) names every entry's segment as the
  // directory in PM does (true without the option).
  bool TEST_DirectoryCopyAgrees() const;

 protected:
  // Frees the directories doublings retired (Close: no operation is in flight).
  void FreeRetiredDirectories();
  CcehCore() = default;

  // Where a key is in a segment, or where it could go.
  struct Probe {
    int found = -1;  // slot index of the key (live), or -1
    int free = -1;   // the key absent: first free slot of the window (empty or stale), or -1
  };
  // A live entry of a segment: its key's hash and its words as stored.
  struct LiveSlot {
    uint64_t hash;
    KvWords words;
  };

  // ---- Configuration and lifecycle (the derived engine's Configure, Create, Recover) ----
  // Reads segment_bytes and segments (the options CcehOptions declares). An existing
  // pool whose root has `layout`'s magic and another segment size than the one given is
  // InvalidArgument here, before the pool is marked in use.
  Status ConfigureCore(EngineOptions& options, const RootLayout& layout);
  // Builds the directory and its segments and stores the geometry into the root (the
  // derived engine stores its own fields after them first), then CreateRoot(layout).
  Status CreateCore(const RootLayout& layout);
  // Opens the root and the directory, repairs an unfinished split or replacement after a
  // crash (clean: refuses one), builds the side table and, after a crash, counts and
  // validates every live slot. *stored_count: the count Count() starts from.
  Status RecoverCore(const RootLayout& layout, bool clean, uint64_t* stored_count);
  // Every block reachable from the root, each once (EnumerateBlocks): the directory, the
  // segments and the live slots' records.
  Status EnumerateCore(const RootLayout& layout, const pm::Allocator::LiveBlockVisitor& visit)
      const;
  // The directory, the segments' slots and the live records (DescribeEngineLayout).
  void DescribeCore(const pm::RegionVisitor& mark) const;
  // Invariants 1-4 by a full scan, the side table against the directory; every live key
  // goes into *keys (Corruption if twice); *live gets their number.
  Status CheckCore(const RootLayout& layout, std::unordered_set<std::string>* keys,
                   uint64_t* live) const;
  void FillCoreStats(IndexStats* stats) const;

  // ---- Segments ---------------------------------------------------------------------
  // The segment serving `hash`, its mu held in `mode`.
  CcehSeg* LockSegment(uint64_t hash, LockMode mode) const;
  // The segment the directory names for `hash` now (no lock: a hint; it may not serve
  // the hash by the time it is used, or be no live segment at all).
  CcehSeg* SegmentOf(uint64_t hash) const;
  KvWords* SlotsOf(const CcehSeg* s) const {
    return pool().At<KvWords>(s->offset.load(std::memory_order_acquire));
  }
  // Starts loading the probe window of `hash` in the segment at `offset` (each of its
  // lines: a negative search reads them all).
  void PrefetchWindow(uint64_t offset, uint64_t hash) const {
    if (!InTable(offset)) return;
    const KvWords* slots = pool().At<const KvWords>(offset);
    const size_t start = StartSlot(hash);
    for (size_t i = 0; i < kCcehProbeSlots; i += kCcehBucketSlots) {
      persister().Prefetch(&slots[SlotAt(start, i)]);
    }
  }
  // The same in the segment the directory names for `hash` (pipelined MultiGet).
  void PrefetchKey(uint64_t hash) const { PrefetchWindow(EntryOffset(hash), hash); }
  // First slot of the probe window of `hash`.
  size_t StartSlot(uint64_t hash) const { return (hash & bucket_mask_) * kCcehBucketSlots; }
  size_t SlotAt(size_t start, size_t i) const { return (start + i) & (slots_ - 1); }
  // The hash of a non-empty slot's key.
  uint64_t SlotHash(const KvWords& w) const;
  // Whether a non-empty slot is live in a segment of depth `depth` and `pattern`.
  static bool LiveIn(uint64_t hash, uint32_t depth, uint64_t pattern) {
    return CcehTopBits(hash, depth) == pattern;
  }

  // The probe of `key` in segment s (its lock held, any mode).
  Probe Find(const CcehSeg* s, std::string_view key, uint64_t hash) const {
    return window_avx2_ ? FindAvx2(s, key, hash) : FindSse2(s, key, hash);
  }
  // The lock-free search: kFound / kAbsent when the segment's version held still and it
  // served the hash, kRetry, or kLocked for a record. Made of the two steps below.
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  // Step one: the segment the directory names for `hash`, its version begun in *read,
  // its window's lines prefetched and *slots set; nullptr when it does not serve the
  // hash (retry). The caller validates with read->Valid(seg->mu) after its reads, inside
  // an OptimisticReadScope.
  const CcehSeg* BeginRead(uint64_t hash, OptimisticRead* read, const KvWords** slots) const;
  // Step two: the probe of the window with acquire loads (no validation): kFound (an
  // inline key; read->value_word set), kLocked (a record with the key's hash), kAbsent.
  Optimistic SearchWindow(const KvWords* slots, uint64_t hash, OptimisticRead* read) const {
    return window_avx2_ ? SearchWindowAvx2(slots, hash, read)
                        : SearchWindowSse2(slots, hash, read);
  }
  // Get: FindOptimistic, then the shared lock for records and after failed tries.
  Status GetFromSegments(std::string_view key, uint64_t hash, std::string* value);
  // A search's first try (reads unnoted, an 8-byte key k): GetFromSegments' lock-free try
  // in one function with no call, so consecutive searches overlap their misses (issue
  // 29). kFound (with the value) or kAbsent when it answers; kRetry, having changed
  // nothing, for a record in the window, a writer, a moving segment. With the tests' hook
  // set, FirstTryHooked.
  QuickAnswer FirstTry(uint64_t k, uint64_t hash) const {
    return window_avx2_ ? FirstTryAvx2(k, hash) : FirstTrySse2(k, hash);
  }
  bool first_try_hooked() const { return first_try_hook_ != nullptr; }
  QuickAnswer FirstTryHooked(uint64_t k, uint64_t hash) const;
  // A delete's first try (an 8-byte key k): DeleteInPlace for an inline entry with no call
  // but to the dispatched body (the next call's miss starts sooner after this one's fence:
  // BENCHMARKS.md, "cceh's delete: a first try"). kFound: deleted, durable; kAbsent: the
  // window shows the key absent; kRetry, having changed nothing: the segment busy, no
  // longer serving the hash (a split since the entry's read), bht's buffer attached, or a
  // record in the window with the key's hash. Reads noted as DeleteInPlace notes them.
  // With the tests' hook set (run between the entry's read and the lock), the Hooked form.
  Optimistic FirstDelete(uint64_t k, uint64_t hash) {
    return window_avx2_ ? FirstDeleteAvx2(k, hash) : FirstDeleteSse2(k, hash);
  }
  Optimistic FirstDeleteHooked(uint64_t k, uint64_t hash);
  // The value of a live slot, as a view into PM (the slot itself when inline: never into
  // a copy of its words, which would dangle).
  std::string_view SlotValue(const KvWords& w) const {
    const SlotForm f = CcehForm(w.word0);
    return f == SlotForm::kInline ? codec().Value(f, w) : codec().Value(f, CcehCodecWords(w));
  }
  // The value of `key` in segment s (its lock held, or s immutable), or NotFound.
  Status ReadValue(const CcehSeg* s, std::string_view key, uint64_t hash,
                   std::string* value) const;

  // ---- In-place writes (segment held exclusively) --------------------------------------
  // Stores `words` (encoded, records flushed) into free slot `slot` and persists it;
  // counts the key. `record`: words link a record flushed since the last fence (fenced
  // here first, before the slot links it).
  void StoreNew(CcehSeg* s, size_t slot, const KvWords& words, bool record);
  // Updates the live slot `slot` with a new value (its key is `key`), durable on return.
  Status UpdateAt(CcehSeg* s, size_t slot, std::string_view key, std::string_view value,
                  uint64_t hash);
  // Empties the live slot `slot`, durably, then frees its record (none when the caller
  // knows the entry inline: `inline_entry`); uncounts the key.
  void EraseAt(CcehSeg* s, size_t slot, bool inline_entry);
  // Encodes key and value as a slot's words (a record, allocated and flushed, for
  // anything that is not an inline-able 8-byte key and value). *record: whether it is.
  Status Encode(std::string_view key, std::string_view value, uint64_t hash, KvWords* words,
                bool* record);
  // Frees the record of words Encode made but nobody linked.
  [[gnu::always_inline]] void Discard(const KvWords& words) {
    if (CcehForm(words.word0) == SlotForm::kRecord) {
      codec().ReleaseRecord(words.word0 & kCcehOffsetMask);
    }
  }
  // The write of the `cceh` engine (and of bht's unbuffered segments): lock, probe,
  // insert / update, splitting as needed. As DoWrite's contract. A segment with an
  // attachment (bht's buffered one) is left alone: *diverted, OK, nothing done.
  Status WriteInPlace(std::string_view key, std::string_view value, uint64_t hash,
                      WriteMode mode, bool* diverted);
  Status DeleteInPlace(std::string_view key, uint64_t hash, bool* diverted);

  // Splits s (held exclusively) in place because the window of `hash` is full: the
  // original's split, doubling first if its depth is G. TableFull (resizing off, or the
  // window's keys and `hash` share kCcehMaxDepth + 1 top bits, so no split separates
  // them), PoolFull. On success s serves the left half (still held); the right half's
  // new segment is up, unlocked.
  Status SplitInPlace(CcehSeg* s, uint64_t hash);

  // ---- Out-of-place replacement (bht's flip) ------------------------------------------
  // A segment image and the depth and pattern it serves.
  struct Replacement {
    CcehImage image;
    uint32_t depth;
    uint64_t pattern;
    bool marked = false;  // the new segment's mark (BuildImages: the replaced one's)
  };
  // Builds the images that replace a segment of `depth` and `pattern` holding `entries`:
  // one if every entry finds a free slot in its window, else the range split
  // (recursively) by the next hash bit, as CCEH splits. TableFull with resizing off, or
  // when keys that do not fit share kCcehMaxDepth + 1 top bits; with `unplaced` given,
  // such keys go there instead (placed in order: an entry whose window is full when its
  // turn comes, and which no split would separate from that window's keys) and the
  // images hold the rest.
  Status BuildImages(uint32_t depth, uint64_t pattern, bool marked,
                     const std::vector<LiveSlot>& entries, std::vector<Replacement>* out,
                     std::vector<LiveSlot>* unplaced = nullptr) const;
  // Replaces segment s by `images` (BuildImages of s's range): each written to a new
  // block and persisted, the directory range switched (persist order above), then the
  // old block freed. The caller excludes s's other writers by its own lock; s->mu is
  // taken here only around the switch, so searches go on meanwhile. Each new segment's
  // state comes up with `attach(k, seg)` called first (under its lock, before anyone can
  // reach it); image 0 takes over the range's first entry. s is retired (serves nothing).
  // *up gets the new segments. PoolFull (or TableFull) with nothing changed.
  Status ReplaceSegment(CcehSeg* s, std::vector<Replacement>* images,
                        const std::function<void(size_t k, CcehSeg* seg)>& attach,
                        std::vector<CcehSeg*>* up);

  // The live slots of s (its lock held, or s immutable).
  void CollectLive(const CcehSeg* s, std::vector<LiveSlot>* out) const;
  // Every live segment (stats, checks, bht's Close): fn(seg) with dir_mu_ held, so no
  // split or replacement runs meanwhile.
  template <typename Fn>
  void ForEachSegment(Fn&& fn) const {
    std::lock_guard<std::mutex> g(dir_mu_);
    for (CcehSeg* s : live_) fn(s);
  }
  // The mark of each of the n segments a new directory starts with (bht: which get a
  // buffer); a split's halves keep their segment's mark, a replacement's images carry
  // their own. Default: none marked.
  virtual bool InitialMark(uint64_t /*i*/, uint64_t /*n*/) const { return false; }

  // ---- Iteration ----------------------------------------------------------------------
  // A pass in hash order is a series of steps: each collects into *batch the entries of
  // the segment serving *cursor whose hash is >= *cursor (with their hashes) and moves
  // *cursor to the end of that segment's range (*done past the last). Each key is
  // collected once per pass however the table splits or doubles meanwhile, since ranges
  // only split; a step holds one segment's lock, never the table still.
  using Step = std::function<void(uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch)>;
  // The `cceh` step: the segment's live entries, under its shared lock.
  void CollectStep(uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) const;
  // ForEach: steps from hash 0 to the end, calling fn for each entry with no lock held.
  static Status Iterate(const Index::Visitor& fn, const Step& step);
  // DoScan: the page's homes are the hash space in 2^(G + s) equal ranges (G: the
  // directory's depth at the page's start; 2^s about a segment's slots), so a home is a
  // slice of one directory entry's range; a run of homes [first, last) is the hash range
  // from first's start to last's, read by steps (whole segments, filtered by hash). Splits
  // and doublings may run between steps: a position is a point of the hash space and the
  // steps follow the ranges as they are then, so the page need not hold the table still
  // as ScanPage asks; what that contract protects, one table's homes per page, holds
  // since the homes are fixed at the page's start and only hash ranges are read.
  Status ScanSteps(ScanPage* page, const Step& step) const;
  // The live entries of `live` (a segment's, CollectLive) whose hash is >= from.
  void AddEntries(const std::vector<LiveSlot>& live, uint64_t from,
                  std::vector<ScanEntry>* batch) const;
  // The first hash past the range of a segment of `depth` and `pattern` (0: the range
  // ends the hash space).
  static uint64_t RangeEnd(uint32_t depth, uint64_t pattern);

  // ---- Media writes by structure (engine counters) -------------------------------------
  // The media writes the calling thread's persists caused while it lives (adr: counted
  // where the flush is issued), added to the kind's counter.
  enum MediaKind : int { kMediaSlots, kMediaSegments, kMediaDirectory, kMediaLog, kMediaKinds };
  class MediaTally {
   public:
    // Inline: on every write's path, where (not counting) it reads two zeros.
    [[gnu::always_inline]] MediaTally(const CcehCore& core, MediaKind kind)
        : core_(core), kind_(kind), start_(core.persister().ThreadMediaWrites()) {}
    [[gnu::always_inline]] ~MediaTally() {
      const uint64_t n = core_.persister().ThreadMediaWrites() - start_;
      if (n != 0) core_.media_[kind_].fetch_add(n, std::memory_order_relaxed);
    }
    MediaTally(const MediaTally&) = delete;
    MediaTally& operator=(const MediaTally&) = delete;

   private:
    const CcehCore& core_;
    MediaKind kind_;
    uint64_t start_;
  };
  uint64_t media_writes(MediaKind kind) const {
    return media_[kind].load(std::memory_order_relaxed);
  }

 private:
  static uint32_t DirDepth(uint64_t word) { return static_cast<uint32_t>(word & 63); }
  static uint64_t DirOffset(uint64_t word) { return word & ~uint64_t{63}; }
  static uint64_t* DirEntriesAt(char* dir) {
    return reinterpret_cast<uint64_t*>(dir + sizeof(CcehDirHeader));
  }
  uint64_t* DirEntries(uint64_t dir) const { return DirEntriesAt(pool().At<char>(dir)); }
  // The segment offset the live directory names for `hash` (read with no lock: garbage
  // while a doubling frees the directory it read, so callers check it: InTable).
  uint64_t EntryOffset(uint64_t hash) const {
    if (dram_directory_) return CopiedEntryOffset(hash);
    const uint64_t w = dir_word_.load(std::memory_order_acquire);
    const uint32_t depth = DirDepth(w);
    const uint64_t* e = DirEntries(DirOffset(w)) + CcehTopBits(hash, depth);
    persister().NoteRead(e, sizeof(uint64_t));
    return EntrySegment(__atomic_load_n(e, __ATOMIC_ACQUIRE));
  }
  // The segment offset a directory entry's sealed word names. The payload is the word's
  // top 48 bits (util/hash.h); its check ran at open.
  static uint64_t EntrySegment(uint64_t sealed) {
    return (sealed >> 16) & ~(kCcehEntryDepthMask | kCcehEntryMark);
  }
  // The same from the DRAM copy (dram_directory): no page walk into the pool, and a
  // quarter of the cache lines of the directory's 8-byte sealed entries in PM.
  uint64_t CopiedEntryOffset(uint64_t hash) const {
    const CcehDirCopy* c = dir_copy_.load(std::memory_order_acquire);
    return uint64_t{c->entries[CcehTopBits(hash, c->depth)].load(std::memory_order_acquire)}
           << kCcehCopyShift;
  }
  // A copy of the directory at `dir` (2^depth entries); ResourceExhausted if refused.
  Status CopyDirectory(uint64_t dir, uint32_t depth, std::unique_ptr<CcehDirCopy>* out) const;
  // Makes `copy` the live one (dir_mu_ held); the one before it is kept until Close, as
  // retired_dirs_, since a search may still read it.
  void PublishDirectoryCopy(std::unique_ptr<CcehDirCopy> copy);
  // A shift, not a divide: both are on every operation's path.
  bool InTable(uint64_t offset) const { return (offset >> segment_shift_) < table_.size(); }
  CcehSeg* SegAt(uint64_t offset) const { return &table_[offset >> segment_shift_]; }
  // The side table for the pool's size and segment_bytes_ (Create, Recover).
  Status MakeSideTable();

  Status ValidateDirectory(uint64_t dir, uint32_t* depth) const;
  // Walks the directory at `dir` (depth G) range by range: fn(first index, entries,
  // segment offset, local depth, mark) for each; `mismatch(j)` for an entry j that
  // differs from its range's first. Corruption for an entry that fails its seal, a depth
  // above G or a range that does not start aligned.
  Status WalkDirectory(
      uint64_t dir, uint32_t depth,
      const std::function<Status(uint64_t, uint64_t, uint64_t, uint32_t, bool)>& fn,
      const std::function<Status(uint64_t)>& mismatch) const;
  Status NewDirectory(uint32_t depth, uint64_t* offset);
  Status NewSegment(const CcehImage& image, uint64_t* offset);
  // Brings up the state of a segment at `offset` (under its lock, or before anyone can
  // reach it) and lists it (dir_mu_ held).
  CcehSeg* BringUp(uint64_t offset, uint32_t depth, uint64_t pattern, bool marked);
  // Retires s (its lock held, dir_mu_ held): it serves nothing; its delta moves to the
  // base count.
  void Retire(CcehSeg* s);
  // Under dir_mu_: doubles the directory.
  Status DoubleDirectory();
  // Under dir_mu_: stores the entries of the range starting at `first` (payloads, in
  // order), the first entry last (persist order above).
  void SwitchRange(uint64_t first, const std::vector<uint64_t>& entries);
  // Whether a split below `depth` could separate e from the keys of `entries` that share
  // its probe window (their hashes differ from e's within kCcehMaxDepth + 1 top bits).
  bool SplitSeparates(uint32_t depth, const std::vector<LiveSlot>& entries,
                      const LiveSlot& e) const;
  // Places `w` (hash `hash`) into the first empty slot of its window in `image`.
  bool Place(CcehImage* image, const KvWords& w, uint64_t hash) const;
  std::string Where(const void* p) const;

  // Find, SearchWindow and FirstTry: one body each, compiled for each way of matching
  // a window's lines (window.h), SSE2 and AVX2; window_avx2_ (cpuid, at Configure) picks.
  template <class Window>
  Optimistic SearchWindowWith(const KvWords* slots, uint64_t hash, OptimisticRead* read) const;
  Optimistic SearchWindowSse2(const KvWords* slots, uint64_t hash, OptimisticRead* read) const;
  Optimistic SearchWindowAvx2(const KvWords* slots, uint64_t hash, OptimisticRead* read) const;
  template <class Window>
  Probe FindWith(const CcehSeg* s, std::string_view key, uint64_t hash) const;
  Probe FindSse2(const CcehSeg* s, std::string_view key, uint64_t hash) const;
  Probe FindAvx2(const CcehSeg* s, std::string_view key, uint64_t hash) const;
  // An inline key's probe of its window (FirstTry and FirstDelete): the slot holding it
  // (hit, or nullptr), the slots examined (past the hit, or past the empty slot that ends the
  // window with probe_to_empty), or `record` when a record's word1 equals the hash (maybe
  // the key's: the caller takes the general path).
  struct InlineProbe {
    const KvWords* hit = nullptr;
    size_t examined = kCcehProbeSlots;
    bool record = false;
  };
  void NoteWindowRead(const KvWords* slots, size_t start, size_t examined) const;
  template <class Window>
  InlineProbe ProbeInline(const KvWords* slots, size_t start, uint64_t k, uint64_t hash) const;
  // ProbeInline out of line, for the first try's uncommon cases.
  __attribute__((noinline)) InlineProbe ProbeSse2(const KvWords* slots, size_t start,
                                                  uint64_t k, uint64_t hash) const;
  __attribute__((noinline)) InlineProbe ProbeAvx2(const KvWords* slots, size_t start,
                                                  uint64_t k, uint64_t hash) const;
  template <class Window>
  InlineProbe ProbeOutOfLine(const KvWords* slots, size_t start, uint64_t k,
                             uint64_t hash) const;
  template <class Window, bool kHooked>
  QuickAnswer FirstTryWith(uint64_t k, uint64_t hash) const;
  template <class Window, bool kHooked>
  Optimistic FirstDeleteWith(uint64_t k, uint64_t hash);
  Optimistic FirstDeleteSse2(uint64_t k, uint64_t hash);
  Optimistic FirstDeleteAvx2(uint64_t k, uint64_t hash);
  QuickAnswer FirstTrySse2(uint64_t k, uint64_t hash) const;
  QuickAnswer FirstTryAvx2(uint64_t k, uint64_t hash) const;

  // Geometry.
  uint64_t segment_bytes_ = kCcehDefaultSegmentBytes;
  uint32_t segment_shift_ = 0;  // log2(segment_bytes_), set with the side table
  uint64_t slots_ = 0;
  uint64_t bucket_mask_ = 0;
  bool probe_to_empty_ = false;    // option: probes stop at the first empty slot
  bool free_slots_first_ = false;  // option: inserts prefer empty and deleted slots
  bool dram_directory_ = false;    // option: the directory read from a DRAM copy
  bool window_avx2_ = false;       // cpuid: the window's lines matched with AVX2
  std::function<void()> first_try_hook_;
  uint64_t initial_segments_ = 0;  // 0: auto
  bool segment_bytes_given_ = false;

  // The live directory: its pool offset | G (directories are 64-byte aligned), stored
  // after the root links it.
  std::atomic<uint64_t> dir_word_{0};
  mutable std::mutex dir_mu_;        // the directory lock; guards live_, base_count_
  std::vector<uint64_t> retired_dirs_;  // old directories, freed at Close (dir_mu_)
  // dram_directory: the live copy, and every copy made since open (the live one last),
  // freed at Close (dir_mu_).
  std::atomic<const CcehDirCopy*> dir_copy_{nullptr};
  std::vector<std::unique_ptr<CcehDirCopy>> dir_copies_;
  // The side table: pool size / segment size slots, on huge pages where the kernel allows
  // (a random segment's state costs a cache miss, not also a page walk).
  DramArray<CcehSeg> table_;
  std::vector<CcehSeg*> live_;  // every live segment's state
  int64_t base_count_ = 0;      // keys at open, plus the deltas of retired segments

  std::atomic<uint64_t> splits_{0}, doublings_{0}, replacements_{0}, undo_txs_{0};
  uint64_t repaired_entries_ = 0;  // by the last recovery
  mutable std::atomic<uint64_t> media_[kMediaKinds] = {};
};

}  // namespace pmhash::engines
