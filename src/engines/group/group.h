// `group`: Group hashing (paper 004, Zhang et al., ICPP'18). Two levels of 16-byte cells:
// level 1 addressable by the hash, level 2 non-addressable collision cells; both split
// into groups of group_size contiguous cells, and group g of level 1 shares group g of
// level 2. Inserts and deletes commit with one failure-atomic store of the cell's
// metadata byte (the paper's 1-bit bitmap), so no log is needed. Design notes, mapping of
// Algorithms 1-4 to the code, deviations and figures: docs/engines/group.md.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root, one cache line used) — the paper's "global info":
//   struct GroupRoot {
//     EngineRoot header;  // engines/root.h: magic kGroupRootMagic, version kGroupVersion
//                         // (or kGroupTaggedVersion: the form bytes carry tags, below),
//                         // table = pool offset of the live GroupTable (a resize switches
//                         // it with one failure-atomic 8-byte store, its commit point; the
//                         // table size travels with it in the table header), count =
//                         // keys stored (exact after a clean Close, recounted by recovery
//                         // (Alg. 4) after a crash; written after every insert and delete
//                         // only with persist_count=on); both sealed words
//     uint64 group_size;  // cells per group (power of two; do not change): a fixed field,
//                         // covered by header.check
//   };
//
//   table block (from the allocator, a large run, 4 KiB aligned); N = cells per level,
//   a multiple of group_size:
//   struct GroupTable {
//     uint64  magic;              // kGroupTableMagic
//     uint64  level_cells;        // N (the paper's table_size is 2N)
//     uint64  group_size;         // G, equal to root.group_size
//     uint8   pad[32];            // zero
//     uint64  check;              // Engine::MetadataCheck of the 56 bytes above (written
//                                 //   once, with the table)
//     uint8   form1[N];           // level-1 metadata bytes (SlotForm: 0 empty, 1 inline,
//     uint8   form2[N];           //   2 record): the paper's bitmap, and the commit point.
//                                 //   Version 3 (tags=on): bits 0-1 the SlotForm, bits
//                                 //   2-7 the tag, the low 6 bits of the key's hash (0 when
//                                 //   empty): a probe compares only cells whose tag matches
//     uint8   pad[to 64 bytes];
//     KvWords tab1[N];            // level 1: cell k is addressed by Reduce(hash, N)
//     KvWords tab2[N];            // level 2: cells [gG, gG+G) resolve group g's collisions
//   };
//
// The metadata bytes of a group sit in G contiguous bytes (4 cache lines for G = 256), so
// finding an empty level-2 cell reads only those lines; the cells of a group are
// contiguous too (4 per cache line), which is the paper's "group sharing". A probe
// matches a group's form bytes 64 at a time (common/match.h, SIMD by cpuid): empty cells
// by byte 0, and, with tags, candidate cells by the key's tag, so it reads the words of
// about one cell in 64 of those occupied instead of every occupied cell.
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. A key with home cell k = Reduce(KeyHash(key), N) is in tab1[k] or in level-2 group
//     k / G, nowhere else, and at most once.
//  2. form is a cell's commit point: the words of a cell whose form is 0 mean nothing
//     (after creation, a clean delete or recovery they are zero). A record cell owns its
//     record; no other cell of the live table points to it. With tags, the tag bits of
//     an occupied cell's form byte are its key's hash tag.
//  3. Count() equals the number of cells whose form is not 0.
//
// ---- Persist order (the paper's Algorithms; line numbers as printed) -------------------
//
//  insert (Alg. 1): record (if any) flushed; words stored, flushed (lines 4-5 / 16-17);
//    form published (Persister::Publish: fence, one byte store, persist; lines 5-7 /
//    17-19; with tags the byte carries the tag, so the same store commits both):
//    committed; count
//    (lines 8-9 / 20-21) in DRAM, in PM only with persist_count=on. A crash before the
//    form store leaves an empty cell with stray words: recovery zeroes them.
//  delete (Alg. 3): form cleared, persisted (lines 4-5 / 16-17): committed; words zeroed,
//    persisted (lines 6-7 / 18-19); the record (if any) freed; count (lines 8-9 / 20-21).
//  update (not in the paper): inline value: one 8-byte store of word1, persist. Record:
//    new record flushed, word0 published (fence, one 8-byte store, persist), old record
//    freed. Inline -> record (value no longer 8 bytes): UndoLog Tx saving the cell and
//    its form, stores, persist, Commit.
//  resize (not in the paper): a new table of 2N cells per level is zeroed, filled from
//    the old one (the old one is only read) and flushed; then root.table published;
//    only then the old table is freed. A crash before the switch
//    leaves the old table live and the unlinked new one is reclaimed by
//    Allocator::Rebuild; after it the new table is complete. Records move by pointer.
//  recovery (Alg. 4, after a crash): scan both levels, zero the words of every cell whose
//    form is 0, count the others, validate them (known form, plausible record, in its
//    home group, with tags the right tag: a damaged pool is Corruption, never a crash),
//    persist root.count.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// Lock striping per group (engines/striping.h): group g is guarded by stripe
// g % kGroupStripes, a reader-writer spin lock with a version (VersionedRwLock,
// common/locks.h). Insert, Update, Put and Delete take it exclusively and release it
// only after their change is durable, so no reader returns a value that is not durable.
// Get takes no lock (FindOptimistic, issue 29): it reads the level-1 cell and the group
// as Find does, validated by the stripe's version and the table size; it retries when a
// writer came in, and takes the stripe shared after a few tries or for a record cell of
// its hash (a reader never follows a record pointer an update may be freeing). The table pointer changes
// only under every stripe (resize takes a resize mutex, then all stripes in order); an
// operation reads the cell count, locks its stripe and retries if the count changed
// meanwhile. ForEach holds the resize mutex shared (no resize while
// iterating, so no key is seen twice) and each stripe briefly while it copies one group;
// it calls fn with no stripe held. Count() sums per-stripe counters (no shared hot word).
//
// ---- Scan (Index::Scan; the cursor: engines/scan.h) ------------------------------------
//
// A home is a level-1 cell. A page holds the resize mutex shared (no resize during it) and
// reads one group at a time under its stripe shared: the level-1 cells of the page's
// homes and the whole level-2 group, whose keys of other homes are dropped. Every key
// present for the whole scan is passed at least once: a key stays in its home's group
// until a resize, and a resize waits for the page and keeps the key's place in hash order.
// A key is passed twice only when its hash lies within 2^16 below a page boundary (the
// cursor's resolution). Keys inserted or deleted during the scan may or may not be passed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "common/locks.h"
#include "common/match.h"
#include "common/slot.h"
#include "engines/engine.h"
#include "engines/striping.h"

namespace pmhash::engines {

inline constexpr uint64_t kGroupRootMagic = 0x31525052474850'4dull;   // "MPHGRPR1"
inline constexpr uint64_t kGroupTableMagic = 0x31545052474850'4dull;  // "MPHGRPT1"
// 1: before the metadata checks (refused). 2: root check, sealed words, table check; form
// bytes hold the SlotForm alone. 3: as 2, and the form bytes carry a hash tag (tags=on).
inline constexpr uint64_t kGroupVersion = 2;
inline constexpr uint64_t kGroupTaggedVersion = 3;
inline constexpr uint64_t kGroupDefaultGroupSize = 256;  // the paper's default (Sec. 4.5)
inline constexpr uint64_t kGroupMinGroupSize = 4;
inline constexpr uint64_t kGroupMaxGroupSize = 65536;
inline constexpr uint64_t kGroupDefaultLevelCells = 4096;
inline constexpr size_t kGroupStripes = 1024;  // lock stripes (power of two)

struct GroupRoot {
  EngineRoot header;
  uint64_t group_size;
};
static_assert(sizeof(GroupRoot) <= pm::kCacheLine, "the root fits one cache line");
static_assert(offsetof(GroupRoot, header) == 0 && offsetof(GroupRoot, group_size) == 32,
              "the kit's root header, then the group size (its one fixed field)");

struct alignas(64) GroupTableHeader {
  uint64_t magic;
  uint64_t level_cells;
  uint64_t group_size;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(GroupTableHeader) == pm::kCacheLine,
              "the table header is one cache line, so the metadata bytes start line aligned");
static_assert(offsetof(GroupTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(GroupTableHeader, level_cells) == offsetof(TableHeader, size) &&
                  offsetof(GroupTableHeader, group_size) == 16 &&
                  offsetof(GroupTableHeader, check) == 56,
              "the table header's layout (versions 2 and 3)");
static_assert(sizeof(KvWords) == 16 && pm::kCacheLine % sizeof(KvWords) == 0,
              "four 16-byte cells per cache line: a group's cells never straddle lines");
static_assert(sizeof(SlotForm) == 1, "the metadata byte is stored with one atomic byte store");
static_assert(kGroupMinGroupSize * sizeof(KvWords) % pm::kCacheLine == 0,
              "a group's cells start on a cache line");

// Where the parts of a table of N cells per level lie, relative to the table block.
struct GroupLayout {
  static uint64_t Form1(uint64_t /*n*/) { return sizeof(GroupTableHeader); }
  static uint64_t Form2(uint64_t n) { return sizeof(GroupTableHeader) + n; }
  static uint64_t Tab1(uint64_t n) {
    return sizeof(GroupTableHeader) + (2 * n + pm::kCacheLine - 1) / pm::kCacheLine * pm::kCacheLine;
  }
  static uint64_t Tab2(uint64_t n) { return Tab1(n) + n * sizeof(KvWords); }
  static uint64_t Bytes(uint64_t n) { return Tab2(n) + n * sizeof(KvWords); }
};

class GroupHash : public Engine {
 public:
  GroupHash();
  ~GroupHash() override;

  // A key's level-1 cell in a level of N cells is Reduce(hash, N) (util/hash.h): doubling
  // the table sends cell k to 2k or 2k+1, so group g splits into groups 2g and 2g+1,
  // which is why a resize can always place every key (docs/engines/group.md).
  // Cells per level of the live table, and the group size.
  uint64_t level_cells() const { return level_cells_.load(std::memory_order_acquire); }
  uint64_t group_size() const { return group_size_; }
  // Whether the form bytes carry hash tags (the pool's layout version 3).
  bool tags() const { return tags_; }

  // The Index contract (include/pmhash/index.h), and: Insert (and Put of a new key)
  // returns TableFull when the key's group is full and resizing is off, PoolFull when
  // the pool cannot hold the doubled table (nothing changes then). ForEach copies one
  // group at a time and calls fn with no lock held, so fn may call any method of this
  // index; an Insert from fn that needs the table to grow is TableFull (no resize while
  // iterating); other threads' resizes wait until ForEach returns. CheckInvariants
  // checks invariants 1-3 by a full scan.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;

 private:
  struct alignas(64) Stripe {
    VersionedRwLock mu;
    std::atomic<int64_t> delta{0};  // inserts minus deletes in this stripe since open
  };

  // Where a key is, or where it could go.
  struct Probe {
    uint8_t* form = nullptr;  // the key's cell (null: not found)
    KvWords* cell = nullptr;
    uint8_t* free_form = nullptr;  // the empty cell Alg. 1 would take (null: group full)
    KvWords* free_cell = nullptr;
  };

  // Pointers into a table of N = `cells` cells per level mapped at `table` (the live
  // table's changes only under every stripe).
  struct View {
    View() = default;
    View(char* table, uint64_t offset, uint64_t cells)
        : table(table),
          offset(offset),
          cells(cells),
          form1(reinterpret_cast<uint8_t*>(table + GroupLayout::Form1(cells))),
          form2(reinterpret_cast<uint8_t*>(table + GroupLayout::Form2(cells))),
          tab1(reinterpret_cast<KvWords*>(table + GroupLayout::Tab1(cells))),
          tab2(reinterpret_cast<KvWords*>(table + GroupLayout::Tab2(cells))) {}
    char* table = nullptr;
    uint64_t offset = 0;
    uint64_t cells = 0;  // N
    uint8_t* form1 = nullptr;
    uint8_t* form2 = nullptr;
    KvWords* tab1 = nullptr;
    KvWords* tab2 = nullptr;
  };
  // "level-1 cell 5 (pool offset X)", for error messages.
  static std::string CellName(const View& v, int level, uint64_t cell);

  // Locks the stripe of the key's group in the live table (retrying across a resize);
  // *home gets the key's level-1 cell, *cells the table size it belongs to.
  Stripe& LockHome(uint64_t hash, LockMode mode, uint64_t* home, uint64_t* cells) const {
    return stripes_.LockHome(level_cells_, hash, mode, home, cells);
  }

  // Alg. 2 (query) over level 1 and the group's level 2; also finds the first empty cell.
  Probe Find(std::string_view key, uint64_t hash, uint64_t home) const;
  // prefetch=on: asks for the lines a probe of `home` may wait for (the level-1 form byte
  // and cell, the group's first form-byte lines) before it waits on any.
  void PrefetchProbe(const View& v, uint64_t home) const;
  // The search with no lock (validated by the stripe's version and the table size):
  // kFound (read->value_word holds an inline value), kAbsent, kRetry (a writer came in)
  // or kLocked (a record cell of this hash: read under the lock).
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  // DoGet after its first try: the search with no lock (counted, retried), then the lock.
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  // A search under the shared lock (FindOptimistic could not answer).
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);
  Status InsertAt(const Probe& p, std::string_view key, std::string_view value, uint64_t hash,
                  Stripe& stripe);
  Status UpdateAt(const Probe& p, std::string_view key, std::string_view value, uint64_t hash);
  // Doubles the table unless another thread already grew it past `observed_cells`.
  Status Grow(uint64_t observed_cells);
  // Whether some table the pool can hold (`cells` cells per level doubled, as often as
  // Grow's limit allows) gives a cell to a key of `hash` whose group, in the live table of
  // `cells` cells, is full. False for keys that share their hash, all 64 bits, with a
  // group's worth of others, or so many bits that the table would outgrow the pool. The
  // caller holds the group's stripe exclusively.
  bool DoublingPlaces(uint64_t hash, uint64_t home, uint64_t cells) const;
  // Places an occupied cell into a table that is not yet reachable (resize).
  bool Place(const View& v, uint8_t form, const KvWords& words, uint64_t hash) const;
  // Allocates and zeroes (persisted) a table of `cells` cells per level.
  Status NewTable(uint64_t cells, uint64_t* offset);
  uint64_t HashOf(SlotForm form, const KvWords& words) const;
  // The root's layout version if this build reads it (2 or 3), else kGroupTaggedVersion,
  // so that ValidateRoot reports the version it found. Raw PM, before Recover.
  uint32_t LayoutVersion() const;
  // The tag bits of a key's form byte (0 with tags off) and the SlotForm of a form byte.
  uint8_t TagOf(uint64_t hash) const {
    return tags_ ? static_cast<uint8_t>((hash & kTagMask) << kFormBits) : 0;
  }
  SlotForm FormOf(uint8_t form_byte) const {
    return static_cast<SlotForm>(tags_ ? form_byte & kFormMask : form_byte);
  }
  // Whether an occupied cell's form byte is well-formed for a key of `hash`: a known form
  // and, with tags, the key's tag (recovery, CheckInvariants).
  bool FormByteFits(uint8_t form_byte, uint64_t hash) const;
  uint64_t LevelCellsFor(uint64_t keys) const;
  // Validates the live table's header (and the root's group size) in raw PM, the root
  // header validated first (no allocator needed).
  Status ValidateTable(uint64_t table, uint64_t* cells) const;
  // Alg. 4: the recovery scan after a crash; *count gets the occupied cells.
  Status RecoverScan(uint64_t* count);
  void NoteCountChange();

  static constexpr unsigned kFormBits = 2;
  static constexpr uint8_t kFormMask = 3;
  static constexpr uint64_t kTagMask = 63;

  // Options (Configure).
  uint64_t group_size_ = kGroupDefaultGroupSize;
  unsigned group_shift_ = 8;
  bool group_size_given_ = false;
  bool tags_ = false;  // the pool's, once created or opened
  bool tags_given_ = false;
  bool prefetch_ = true;  // option prefetch
  bool persist_count_ = false;
  uint64_t initial_cells_ = 0;  // total cells asked for with `cells` (0: from capacity)

  const TagMatcher& match_ = TagMatcher::Best();
  Stripes<Stripe> stripes_;
  mutable std::shared_mutex resize_mu_;
  GroupRoot* root_ = nullptr;
  View view_;
  // view_.table for FindOptimistic, which reads it with no lock: stored before
  // level_cells_ (release), so a search that read the new size reads the new table.
  std::atomic<char*> view_table_{nullptr};
  std::atomic<uint64_t> level_cells_{0};
  uint64_t base_count_ = 0;  // keys at open; Count() = base + sum of stripe deltas
  std::atomic<uint64_t> total_{0};  // persist_count=on only: the value stored in PM

  // Engine counters.
  std::atomic<uint64_t> resizes_{0};
  std::atomic<uint64_t> full_group_refusals_{0};
  std::atomic<uint64_t> inseparable_refusals_{0};  // DoublingPlaces said no
  uint64_t recovered_resets_ = 0;
};

}  // namespace pmhash::engines
