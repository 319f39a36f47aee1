// `path` and `path-log`: Path hashing (Zuo & Hua, MSST'17 / TPDS'18), the NVM baseline of
// Group hashing (paper 004) and of WOPHI (paper 000, which runs it with a log as
// "Path-Log"). The cells form an inverted complete binary tree stored level by level in
// one array: level 0 holds the N leaves, level i the N >> i cells above them. A key has
// two leaves (two hash functions: one in the left half of level 0, one in the right half)
// and may sit in any cell of the two paths from them toward the root ("position
// sharing", "double-path hashing"); only the bottom `reserved_levels` levels are kept
// ("path shortening"; the papers use 20). An insert takes the first empty cell on the two
// paths, bottom up: no key ever moves, so there are no extra writes. `path` commits a
// write with the cell's token (form byte), log-free; `path-log` puts every write under
// the kit's undo log (the papers' logging baseline; see docs/engines/path.md for why it
// is an undo and not a redo log). Design notes, deviations and figures:
// docs/engines/path.md.
//
// ---- Hash functions and growth --------------------------------------------------------
//
// From the kit's one 64-bit KeyHash h: leaf 1 = Reduce(h, N/2), leaf 2 = N/2 +
// Reduce(rotl(h, 32), N/2) (util/hash.h: Reduce takes the high bits). The cell of level i
// on the path from leaf j is j >> i. When N doubles, leaf j becomes 2j or 2j+1, so level i
// of the old tree is exactly level i+1 of the new one, cell for cell. The original has no
// resize; ours (not in the papers) doubles the leaves when an insert finds both paths
// full: the new table's level 0 is empty, its levels 1.. are the old levels 0.. copied as
// they are (one contiguous copy), and the keys of the old top level, which the new tree
// no longer keeps, are placed again (first empty cell of their new paths). resize=off
// refuses instead with TableFull, as the original does.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root, one cache line used):
//   struct PathRoot {
//     EngineRoot header;         // engines/root.h: magic kPathRootMagic, version
//                                // kPathVersion; table = pool offset of the live table (a
//                                // resize switches it with one failure-atomic 8-byte
//                                // store); count = keys (exact after a clean Close,
//                                // recounted after a crash)
//     uint64 reserved_levels;    // R, the option (fixed field, covered by header.check)
//   };
//
//   table block (from the allocator):
//   struct PathTable {
//     uint64 magic;        // kPathTableMagic
//     uint64 leaves;       // N: a power of two >= 2
//     uint64 levels;       // levels kept: min(R, log2(N) + 1)
//     uint8  pad[32];      // zero
//     uint64 check;        // Engine::MetadataCheck of the 56 bytes above (written once)
//     PathLine lines[];    // level 0's lines, then level 1's, ...: level i holds N >> i
//                          // cells in ceil((N >> i) / 3) lines (cell c of the level in
//                          // line c / 3, slot c % 3)
//   };
//   struct PathLine {      // one 64-byte cache line
//     KvWords cell[3];     // shared slot encoding (common/slot.h)
//     uint8   form[3];     // each cell's token: SlotForm 0 empty, 1 inline, 2 record
//     uint8   pad[13];
//   };
//
// A cell and its token share a line (the original's node holds its token too), so a probe
// reads one line per cell of a path; a path's cells lie in different lines (one per
// level), which is the cache cost paper 004 measures.
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. A key with leaves j1, j2 is in cell j1 >> i or j2 >> i of some kept level i, and at
//     most once in the table.
//  2. The token is a cell's commit point: the words of a cell whose token is 0 mean
//     nothing (a delete leaves them as they were: no extra write). A record cell owns its
//     record; no other cell points to it.
//  3. Count() equals the number of cells whose token is not 0.
//
// ---- Persist order ----------------------------------------------------------------------
//
//  path:     insert: record (if any) written and flushed by the codec; the cell's two words
//            stored; the token published (Persister::Publish: fence, one byte store,
//            persist of the line): committed. The words need no flush of their own: they
//            share the token's line, stored before it, and a line persists in program
//            order (the fence orders the record). delete: the token cleared and
//            persisted: committed; then the record (if any) freed. update: the kit's
//            UpdateSlot (an inline value: one 8-byte store; a record: new record, pointer
//            published, old freed; inline -> record under an undo-log transaction).
//  path-log: every insert, delete and update: Begin; Save the cell's line (the log
//            entry, persisted); the new words and token stored; the line persisted;
//            Commit; then (delete, update) the old record freed. A crash before Commit is
//            rolled back by UndoLog::Recover before the engine attaches.
//  resize (both): the doubled table is built unreachable (level 0 zeroed, levels 1..
//            copied, the old top level's keys placed), flushed; root.table published;
//            the old table freed. Records move by pointer. A crash before the switch
//            leaves the old table live; the allocator's rebuild reclaims the new one.
//  recovery after a crash: every cell validated (known token, plausible words, on one of
//            its key's paths: a damaged pool is Corruption, never a crash), the keys
//            counted, root.count persisted. Nothing needs repair: a torn insert left an
//            empty token.
//
// ---- Concurrency --------------------------------------------------------------------
//
// One reader-writer lock per index (a VersionedRwLock, as `linear`): a key's two paths
// run through every level, so no small set of stripes guards them. Insert, Update, Put,
// Delete and a resize hold it exclusively and release it only after their change is
// durable. Get takes no lock: it walks the two paths with acquire loads and validates
// with the lock's version (retrying when a writer came in), taking the lock shared after
// a few tries or for a record. ForEach and Scan hold it shared, and ForEach calls fn with
// it held (fn must not mutate this index).
//
// ---- Scan (Index::Scan; the cursor: engines/scan.h) ------------------------------------
//
// A home is a key's first leaf (N/2 homes). A key may sit on its second path, anywhere in
// the right half, so a page reads the whole table and keeps the keys of its homes: a page
// costs a table scan (Scan is not what path hashing is for).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <memory>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"

namespace pmhash::engines {

inline constexpr uint64_t kPathRootMagic = 0x3152485441504d50ull;   // "PMPATHR1"
inline constexpr uint64_t kPathTableMagic = 0x3154485441504d50ull;  // "PMPATHT1"
inline constexpr uint32_t kPathVersion = 1;
inline constexpr uint64_t kPathCellsPerLine = 3;
inline constexpr uint64_t kPathDefaultReserved = 20;  // the papers' reserved levels
inline constexpr uint64_t kPathMaxReserved = 40;
inline constexpr uint64_t kPathDefaultLeaves = 1024;

struct PathRoot {
  EngineRoot header;
  uint64_t reserved_levels;
};
static_assert(sizeof(PathRoot) <= pm::kCacheLine, "the root fits one cache line");
static_assert(offsetof(PathRoot, header) == 0 && offsetof(PathRoot, reserved_levels) == 32,
              "the kit's root header, then the one fixed field");

struct alignas(64) PathLine {
  KvWords cell[kPathCellsPerLine];
  uint8_t form[kPathCellsPerLine];
  uint8_t pad[13];
};
static_assert(sizeof(PathLine) == pm::kCacheLine,
              "a line of three cells and their tokens is one cache line: a cell and its "
              "token are read with one miss and persisted with one flush");
static_assert(offsetof(PathLine, form) == kPathCellsPerLine * sizeof(KvWords) &&
                  offsetof(PathLine, form) % 4 == 0,
              "the tokens follow the cells, 4-byte aligned: a search loads the three tokens "
              "and a padding byte with one load (LoadForms)");
static_assert(sizeof(SlotForm) == 1, "a token is one byte, stored failure-atomically");

struct alignas(64) PathTableHeader {
  uint64_t magic;
  uint64_t leaves;
  uint64_t levels;
  uint8_t pad[32];
  uint64_t check;
};
static_assert(sizeof(PathTableHeader) == pm::kCacheLine,
              "the header is one line, so the cell lines after it are line aligned");
static_assert(offsetof(PathTableHeader, magic) == offsetof(TableHeader, magic) &&
                  offsetof(PathTableHeader, leaves) == offsetof(TableHeader, size) &&
                  offsetof(PathTableHeader, levels) == 16 &&
                  offsetof(PathTableHeader, check) == 56,
              "the table header's layout (version 1): the check covers what precedes it");

class PathHash : public Engine {
 public:
  enum class Logging : uint8_t {
    kNone,  // `path`: token commits, no log
    kUndo,  // `path-log`: every write under the undo log
  };

  explicit PathHash(Logging logging) : logging_(logging) {}

  // The Index contract (include/pmhash/index.h), and: an Insert whose two paths are full
  // doubles the table, or returns TableFull with resize=off, when every key on its paths
  // has its 64-bit hash, when fewer than 1/32 of the cells are in use (keys that share
  // their leaves: a doubling would add two cells to their paths and 2N to the table),
  // after 4 doublings for one insert, or when a doubling's re-placement of the old top
  // level fails (nothing changed then); PoolFull when the pool cannot hold the doubled
  // table. ForEach holds the index's read lock while calling fn: fn must not
  // call mutating methods of the same index. CheckInvariants checks invariants 1-3.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;
  void Prefetch(uint64_t hash) const override;

 private:
  static constexpr size_t kMaxLevels = 64;

  // A table mapped in memory: its lines and where each level's lines start.
  struct View {
    PathTableHeader* header = nullptr;
    PathLine* lines = nullptr;
    uint64_t offset = 0;
    uint64_t leaves = 0;
    uint64_t levels = 0;
    uint64_t level_line[kMaxLevels + 1] = {};  // level i's first line; [levels]: total

    // Line and slot of cell `c` of level `i`.
    PathLine* LineOf(uint64_t i, uint64_t c) const {
      return &lines[level_line[i] + c / kPathCellsPerLine];
    }
    uint64_t cells() const;
  };
  static void MakeView(PathTableHeader* header, uint64_t offset, View* v);
  static uint64_t LinesFor(uint64_t leaves, uint64_t levels);
  static uint64_t TableBytes(uint64_t leaves, uint64_t levels) {
    return sizeof(PathTableHeader) + LinesFor(leaves, levels) * sizeof(PathLine);
  }
  // Levels a table of `leaves` leaves keeps: min(R, log2(leaves) + 1).
  uint64_t LevelsFor(uint64_t leaves) const;
  static void Leaves(uint64_t hash, uint64_t n, uint64_t* j1, uint64_t* j2);

  // A cell: its line and slot.
  struct Cell {
    PathLine* line = nullptr;
    uint64_t slot = 0;
    uint8_t* form() const { return &line->form[slot]; }
    KvWords* words() const { return &line->cell[slot]; }
  };
  // Where a key is, or where it could go.
  struct Probe {
    Cell found;  // line null: absent
    Cell free;   // the first empty cell of the two paths, bottom up (line null: none)
  };

  bool logged() const { return logging_ == Logging::kUndo; }
  std::string Prefix() const { return name() + ": "; }
  uint64_t HashOf(SlotForm form, const KvWords& words) const;
  std::string CellName(const View& v, uint64_t level, uint64_t c) const;

  Probe Find(std::string_view key, uint64_t hash) const;
  void PrefetchPaths(const View& v, uint64_t hash) const;
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);
  Status InsertAt(const Cell& c, std::string_view key, std::string_view value, uint64_t hash);
  Status UpdateAt(const Cell& c, std::string_view key, std::string_view value, uint64_t hash);
  Status DeleteAt(const Cell& c);
  // Whether every key on the two (full) paths of `hash` has that hash: no doubling gives
  // the new key a cell that those keys would not also want.
  bool PathsHoldOnlyThisHash(uint64_t hash) const;
  // Doubles the leaves (under the exclusive lock). TableFull if a key of the old top level
  // finds no cell in the new table (nothing changes then).
  Status Grow();
  // Places an occupied cell in the first empty cell of its paths in `v` (unreachable).
  bool Place(const View& v, uint8_t form, const KvWords& words, uint64_t hash) const;
  Status NewTable(uint64_t leaves, uint64_t* offset);
  Status ValidateTable(uint64_t off, View* v) const;
  // Cell c of level i of `v`: *occupied whether its token is set; if so, Corruption unless
  // the token and words are sound and the key's paths pass through the cell. With `key`
  // (CheckInvariants) the key's bytes are read into *key and hashed, and a record's hash
  // word checked; without (recovery), the stored hash is used.
  Status CheckCell(const View& v, uint64_t i, uint64_t c, bool* occupied,
                   std::string* key) const;
  void PublishView();

  const Logging logging_;
  // Options (Configure).
  uint64_t reserved_ = kPathDefaultReserved;
  bool reserved_given_ = false;
  uint64_t initial_leaves_ = kPathDefaultLeaves;
  bool prefetch_ = true;

  mutable VersionedRwLock mu_;
  PathRoot* root_ = nullptr;
  View view_;
  // The live view for searches with no lock (FindOptimistic): each table's View is made
  // once and kept until the index closes (one per resize: a few dozen at most), so a
  // reader holding a stale pointer reads a whole view of a table that was live; a freed
  // table's memory stays in the pool's mapping, so it only reads stale cells, and the
  // lock's version makes it retry.
  std::vector<std::unique_ptr<View>> views_;
  std::atomic<const View*> live_{nullptr};
  std::atomic<uint64_t> count_{0};

  // Engine counters (written under the exclusive lock).
  uint64_t resizes_ = 0;
  uint64_t replaced_top_keys_ = 0;
  uint64_t full_path_refusals_ = 0;
  uint64_t undo_txs_ = 0;
};

}  // namespace pmhash::engines
