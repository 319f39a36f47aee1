// Spash's volatile directory (paper 002, Sec. III-A and IV-B): 2^G entries indexed by the
// top G bits of a key's hash, each naming the segment that holds the keys of that hash
// prefix, with the segment's lock and version (the paper keeps the fallback lock in a
// directory entry; we keep the readers' version there too, so segments stay metadata-free).
// Collaborative staged doubling and halving replace a table by one of twice or half the
// size, 8 entries (one cache line) per stage, while operations go on.
//
// ---- An entry (one 8-byte word) -------------------------------------------------------
//
//   bit  63      busy: a writer holds the segment (set on every entry of its range), or
//                the entry is frozen by a stage copy (for good: its table is being
//                replaced)
//   bits 62..43  version (20 bits, wrapping): +1 on every entry of a range when a writer
//                that changed the segment releases it
//   bits 42..37  the segment's local depth d (<= G)
//   bits 36..32  live entries of the segment (0..16), kept in the range's first entry only
//   bits 31..0   the segment: its pool offset / 256
//
// A segment of depth d is named by the 2^(G-d) entries of its range, the aligned run of
// entries that share its d-bit prefix. The range's first entry is its *primary*: a writer
// locks the segment by setting busy on the primary with a CAS, then on every other entry
// of the range (which no other writer can hold, since it would hold the primary first).
// Readers take no lock: they read their own entry (busy: retry), the segment, and their
// entry again; an equal word means no writer changed the segment meanwhile. Writers
// release with one store per entry (version + 1, busy clear); every store to PM that a
// reader may see happens between the busy marks and that release, so the check is
// complete. Entries of a range are almost always in one cache line (a range of at most 8
// aligned entries is), so a lookup reads one directory line and a release writes one.
//
// ---- The negative filter (option `filter` of spash; not in the paper) ---------------
//
// With it, each table keeps one byte per entry beside the entries: a two-probe Bloom
// filter of the hashes of the keys of that entry's prefix (hash bits 4..2 and 7..5 pick
// the probes: part of the fingerprint, which both key forms carry). A search whose probe
// bits are not both set answers NotFound from that byte alone, reading neither the entry
// nor the segment. A set bit may be stale (a delete leaves its key's bits); 0xff is also
// the byte of a prefix whose keys are not known (after an open, until a write rebuilds
// its range). A writer sets its key's bits while it holds the range, before its
// release. A stage copy (below) carries each byte to the next table (doubling: to both
// halves; halving: the OR of the pair) and then sets the old table's bytes to 0xff,
// before it marks the stage done: a reader still on the old table never answers from a
// byte that misses a key written to the next one.
//
// ---- The segment hint (option `hint` of spash; not in the paper) ---------------------
//
// With it, each table keeps one 4-byte word per group of 4 entries beside the entries:
// the segment field of the group's first entry, an eighth of the entries' bytes, so it
// stays in the cache where the entries do not. A search or write reads its group's word
// and prefetches its main bucket in that segment while its own entry is still on its
// way: when the entry names the same segment (every key of a segment of depth <= G-2,
// half of those of depth G-1, a quarter at depth G) the segment's miss no longer waits
// for the entry's. A hint is advice only: nothing is read through it but a prefetch, so
// a stale one costs a wasted prefetch, never a wrong answer. Whoever stores a group's
// first entry stores its word too (a release, a stage copy, a reset), without ordering.
//
// ---- Transitions (staged doubling and halving, Fig. 6) ------------------------------
//
// A transition links a new table `next` (depth G+1 or G-1) to the current one and copies
// the current one in stages of 8 entries (partitions). A stage freezes its 8 entries one
// at a time (CAS busy 0 -> 1, waiting while a writer holds one: writers never wait while
// holding), writes their copies into `next` (doubling: entry i becomes 2i and 2i+1;
// halving: entries 2i and 2i+1, which name the same segment, become i) and marks the
// partition done. Readers and writers whose entry lies in a done partition use `next`;
// the others use the current table, whose changes a later stage copies. So a lock never
// has to survive a copy: the copy waits for it. A writer that finds part of its range
// frozen releases what it holds, copies the stages of its range itself
// (collaboratively), and starts again, in `next`. When every partition is done, the
// thread that started the transition makes `next` current and retires the old table
// (EpochReclaimer: freed once no reader can hold it). One transition at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/epoch.h"
#include "pmhash/status.h"
#include "util/dram_buffer.h"

namespace pmhash::engines::spash {

// The entry word's fields.
struct DirEntry {
  static constexpr uint64_t kBusy = uint64_t{1} << 63;
  static constexpr int kVersionShift = 43;
  static constexpr uint64_t kVersionMask = (uint64_t{1} << 20) - 1;
  static constexpr int kDepthShift = 37;
  static constexpr uint64_t kDepthMask = 63;
  static constexpr int kCountShift = 32;
  static constexpr uint64_t kCountMask = 31;
  static constexpr uint64_t kSegmentMask = 0xffffffffull;

  static uint64_t Make(uint64_t segment, unsigned depth, unsigned count, uint64_t version) {
    return (version & kVersionMask) << kVersionShift | uint64_t{depth} << kDepthShift |
           uint64_t{count} << kCountShift | segment;
  }
  static bool Busy(uint64_t e) { return (e & kBusy) != 0; }
  static uint64_t Version(uint64_t e) { return (e >> kVersionShift) & kVersionMask; }
  static unsigned Depth(uint64_t e) { return static_cast<unsigned>((e >> kDepthShift) & kDepthMask); }
  static unsigned Count(uint64_t e) { return static_cast<unsigned>((e >> kCountShift) & kCountMask); }
  static uint64_t Segment(uint64_t e) { return e & kSegmentMask; }
  static uint64_t WithCount(uint64_t e, unsigned count) {
    return (e & ~(kCountMask << kCountShift)) | uint64_t{count} << kCountShift;
  }
};

// A filter byte's probes (the filter: above).
struct EntryFilter {
  static constexpr uint8_t kUnknown = 0xff;
  static uint8_t Bits(uint64_t h) {
    return static_cast<uint8_t>(1u << (h >> 2 & 7) | 1u << (h >> 5 & 7));
  }
};

class Directory {
 public:
  static constexpr unsigned kPartition = 8;  // entries per stage: one cache line
  static constexpr unsigned kHintShift = 2;  // a hint word per 2^kHintShift entries
  static constexpr unsigned kMaxDepth = 40;  // 2^40 entries would be 8 TiB of DRAM

  struct Table {
    // A table of 2^depth zero entries, in DRAM backed by huge pages where the kernel
    // allows (util/dram_buffer.h: a lookup then costs a cache miss, not a page walk too);
    // null if the system has no memory for it.
    // With `filter`, the table has a filter byte per entry too, zeroed; with `hint`, a
    // hint word per group of entries (zero: segment 0, no segment's, a harmless prefetch).
    static std::unique_ptr<Table> Make(unsigned depth, bool filter, bool hint);
    unsigned depth;
    uint64_t size;
    DramBuffer memory;
    std::atomic<uint64_t>* entries;
    std::atomic<uint8_t>* filter = nullptr;  // EntryFilter bytes, if the directory has them
    std::atomic<uint32_t>* hint = nullptr;   // segment hints, if the directory has them
    // The transition under way from this table (null: none) and its stages, one per
    // partition of this table: kPending, kCopying, kDone.
    std::atomic<Table*> next{nullptr};
    std::unique_ptr<std::atomic<uint8_t>[]> stage;
    uint64_t Index(uint64_t hash) const { return hash >> (64 - depth); }
  };
  static constexpr uint8_t kPending = 0, kCopying = 1, kDone = 2;

  // What a reader or writer resolves a hash to: a table and the entry index in it.
  struct Place {
    Table* table;
    uint64_t index;
  };
  // A range a writer holds (busy on every entry): entries [first, first + count) of
  // `table`; `word` is the primary's word as it was when locked (busy clear).
  struct Held {
    Table* table = nullptr;
    uint64_t first = 0, count = 0;
    uint64_t word = 0;
  };
  enum class LockResult : uint8_t {
    kLocked,  // *held is set
    kBusy,    // another writer holds it: back off, resolve again
    kMoved,   // part of the range was frozen by a transition, whose stages for the range
              // this call has now copied (unless told not to): resolve again (the range
              // is in `next`)
  };

  Directory() = default;
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  // Whether tables keep EntryFilter bytes (set before the first Reset; spash's option).
  // A doubling's stage copies each byte to both halves, then calls refine(ctx, next,
  // first, count) (if set), which may store exact bytes for entries [first, first +
  // count) of the next table: their segments cannot change while it runs.
  using Refine = void (*)(void* ctx, Table* next, uint64_t first, uint64_t count);
  void SetFilter(bool on, Refine refine = nullptr, void* ctx = nullptr) {
    filter_ = on;
    refine_ = refine;
    refine_ctx_ = ctx;
  }
  bool has_filter() const { return filter_; }
  // Whether tables keep segment hints (set before the first Reset; spash's option).
  void SetHint(bool on) { hint_ = on; }
  bool has_hint() const { return hint_; }

  // Replaces everything by a table of 2^depth entries, entry i = init(i), every filter
  // byte `filter_byte` (0 for empty segments; unknown for recovered ones) (creation and
  // recovery; no other thread may use the directory).
  template <typename Init>
  Status Reset(unsigned depth, Init&& init, uint8_t filter_byte = EntryFilter::kUnknown) {
    std::unique_ptr<Table> t = Table::Make(depth, filter_, hint_);
    if (t == nullptr) return OutOfMemory(depth);
    for (uint64_t i = 0; i < t->size; ++i) t->entries[i].store(init(i), std::memory_order_relaxed);
    FillFilter(t.get(), filter_byte);
    FillHints(t.get());
    Free(current_.exchange(t.release(), std::memory_order_acq_rel));
    return Status::OK();
  }
  // The same, the entries written by fill(entries) into a zeroed table, filter bytes
  // unknown: it returns false to keep the current table (*installed false).
  template <typename Fill>
  Status ResetIf(unsigned depth, Fill&& fill, bool* installed) {
    std::unique_ptr<Table> t = Table::Make(depth, filter_, hint_);
    if (t == nullptr) return OutOfMemory(depth);
    *installed = fill(t->entries);
    FillFilter(t.get(), EntryFilter::kUnknown);
    FillHints(t.get());
    if (*installed) Free(current_.exchange(t.release(), std::memory_order_acq_rel));
    return Status::OK();
  }
  static Status OutOfMemory(unsigned depth);

  // The current table (readers: inside an epoch guard; it stays valid until they leave).
  Table* Current() const { return current_.load(std::memory_order_acquire); }
  // Where `hash` is to be looked up now: the current table, or the next one if the
  // hash's partition has been copied.
  Place Resolve(uint64_t hash) const {
    Table* t = Current();
    uint64_t i = t->Index(hash);
    Table* n = t->next.load(std::memory_order_acquire);
    if (n != nullptr && t->stage[i / kPartition].load(std::memory_order_acquire) == kDone) {
      return {n, n->Index(hash)};
    }
    return {t, i};
  }
  static uint64_t Load(const Place& p) {
    return p.table->entries[p.index].load(std::memory_order_acquire);
  }
  // The filter (has_filter() only): false if no key of `hash` is stored at `p`, Resolve's
  // place for it (inside the caller's epoch guard).
  static bool MayHold(const Place& p, uint64_t hash) {
    const uint8_t bits = EntryFilter::Bits(hash);
    return (p.table->filter[p.index].load(std::memory_order_acquire) & bits) == bits;
  }
  // The hint (has_hint() only): the segment field of the first entry of `p`'s group, as
  // it was when last stored; SegmentAt takes it as it takes an entry.
  static uint64_t Hint(const Place& p) {
    return p.table->hint[p.index >> kHintShift].load(std::memory_order_relaxed);
  }
  // Stores entry `index`'s segment as its group's hint if it is the group's first.
  static void NoteHint(Table* t, uint64_t index, uint64_t entry) {
    if (t->hint != nullptr && (index & ((uint64_t{1} << kHintShift) - 1)) == 0) {
      t->hint[index >> kHintShift].store(static_cast<uint32_t>(DirEntry::Segment(entry)),
                                         std::memory_order_relaxed);
    }
  }
  // The filter byte of entry `index` of `t`, and its store: only by the holder of the
  // entry's range (or a stage copy, which froze it).
  static uint8_t FilterAt(const Table* t, uint64_t index) {
    return t->filter[index].load(std::memory_order_relaxed);
  }
  static void StoreFilter(Table* t, uint64_t index, uint8_t byte) {
    t->filter[index].store(byte, std::memory_order_relaxed);
  }

  // Locks the range of the segment named by entry `at` of `place.table` (the entry as
  // read before: `seen`, not busy). kLocked only if the entry still holds `seen`'s
  // segment and depth (its version may have moved: the caller validates). With `copy`
  // false, kMoved copies nothing: a caller that holds other ranges must not copy a stage,
  // which waits for every writer of its partition (it then releases them and retries).
  LockResult Lock(const Place& place, Held* held, bool copy = true);
  // Lock's common case, inline (a write's first try): the range of `seen`, the entry at
  // `place` as read before (not busy, depth <= the table's), locked only if it lies in
  // one cache line (at most kPartition entries) and every entry of it still carries
  // seen's segment, depth and version; else false, holding nothing (the caller takes
  // Lock's way). `place` must have been resolved in the current table while no
  // transition ran from it: a transition since froze the entries (busy), so the lock
  // fails then, and no entry of a next table is ever locked this way.
  bool LockAsSeen(const Place& place, uint64_t seen, Held* held) {
    Table* t = place.table;
    const uint64_t count = uint64_t{1} << (t->depth - DirEntry::Depth(seen));
    if (count > kPartition) return false;
    const uint64_t first = place.index & ~(count - 1);
    const uint64_t range = DirEntry::WithCount(seen, 0);  // the count is the primary's only
    if (!LockEntries(t, first, count,
                     [range](uint64_t w) { return DirEntry::WithCount(w, 0) == range; })) {
      return false;
    }
    held->table = t;
    held->first = first;
    held->count = count;
    held->word = t->entries[first].load(std::memory_order_relaxed) & ~DirEntry::kBusy;
    return true;
  }
  // Inside a hardware transaction, in place of Lock: the range Lock would hold, with no
  // store: every entry of it read (a writer that then locks one, or a stage that freezes
  // one, aborts the transaction) and none busy. False (take the lock) if one is, or if
  // the place is in a transition's next table. The transaction's commit releases it as
  // Lock's holder would (ReleaseAs, version + 1) if it changed the segment.
  bool Subscribe(const Place& place, Held* held) const;
  // Locks the aligned range [first, first + count) of `table` (a merge's buddy): false,
  // holding nothing, if any entry is busy or frozen.
  bool TryLockRange(Table* table, uint64_t first, uint64_t count, Held* held);
  // Releases `held`, storing into each entry of its range the word `word` (busy clear;
  // its count only in the first entry). `word`'s version should be the held one + 1 if
  // the segment changed (ReleaseChanged), the held one otherwise (Release).
  // Inline: every write's last step.
  void ReleaseAs(const Held& held, uint64_t first, uint64_t count, uint64_t word) {
    word &= ~DirEntry::kBusy;
    const uint64_t rest = DirEntry::WithCount(word, 0);
    for (uint64_t i = first; i < first + count; ++i) {
      held.table->entries[i].store(i == first ? word : rest, std::memory_order_release);
      NoteHint(held.table, i, word);
    }
  }
  void Release(const Held& held) { ReleaseAs(held, held.first, held.count, held.word); }

  // Transitions. Each returns when the table it was called about is no longer current
  // (someone completed a transition from it) or the transition could not start (the
  // depth limit, or `allow` said no once the lock was held); they may run the
  // transition themselves. Call with no range held.
  // False if the new table could not be allocated (no DRAM).
  bool Double(const Table* from);
  // Halving to depth - 1 (not below min_depth): `allow` (called with the transition
  // published, see directory.cc) says whether no segment is as deep as G - 1.
  void Halve(const Table* from, unsigned min_depth, bool (*allow)(void* ctx), void* ctx);
  // Copies every pending stage of [first, first + count) of `table` (a writer whose range
  // spans partitions; a helper), waiting for stages others copy.
  void CopyStages(Table* table, uint64_t first, uint64_t count);
  // Waits until no transition runs (one may start right after).
  void WaitForTransition() { std::lock_guard<std::mutex> lock(transition_mu_); }

  EpochReclaimer& epochs() { return epochs_; }
  // DRAM held by the tables (current and next).
  uint64_t MemoryBytes() const;
  uint64_t doublings() const { return doublings_.load(std::memory_order_relaxed); }
  uint64_t halvings() const { return halvings_.load(std::memory_order_relaxed); }

 private:
  Table* BeginTransition(Table* from, unsigned to_depth);
  void RunTransition(Table* from, Table* to);
  void CopyStage(Table* from, uint64_t partition);
  static void Free(Table* t);
  // Sets busy on entries [first, first + count) of t in order, each by a CAS from a word
  // that is not busy and that `accept` takes; false, holding nothing, at the first that
  // fails.
  template <typename Accept>
  static bool LockEntries(Table* t, uint64_t first, uint64_t count, Accept&& accept) {
    uint64_t locked = 0;
    for (; locked < count; ++locked) {
      uint64_t w = t->entries[first + locked].load(std::memory_order_acquire);
      if (DirEntry::Busy(w) || !accept(w) ||
          !t->entries[first + locked].compare_exchange_strong(w, w | DirEntry::kBusy,
                                                              std::memory_order_acq_rel)) {
        break;
      }
    }
    if (locked != count) [[unlikely]] {
      for (uint64_t i = first; i < first + locked; ++i) {
        t->entries[i].fetch_and(~DirEntry::kBusy, std::memory_order_release);
      }
      return false;
    }
    return true;
  }
  static void FillFilter(Table* t, uint8_t byte);
  static void FillHints(Table* t);

  bool filter_ = false;
  bool hint_ = false;
  Refine refine_ = nullptr;
  void* refine_ctx_ = nullptr;
  std::atomic<Table*> current_{nullptr};
  std::mutex transition_mu_;  // one transition at a time
  EpochReclaimer epochs_;
  std::atomic<uint64_t> doublings_{0}, halvings_{0};
};

}  // namespace pmhash::engines::spash
