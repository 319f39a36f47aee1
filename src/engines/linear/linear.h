// `linear` and `linear-log`: linear probing in PM, the baselines of Group hashing (paper
// 004, sections 2.3 and 4.1). `linear` persists every store as a plain persistent hash
// table would and makes no multi-word change atomic (NOT crash consistent: a crash in a
// backward shift can leave a key twice or a cell torn between two items). `linear-log` runs every multi-word change
// through the undo log (pm::UndoLog) and is crash consistent. Design notes and figures:
// docs/engines/linear.md.
//
// ---- On-media layout ----------------------------------------------------------------
//
//   root area (Engine::root, one cache line used): the kit's root header alone
//   struct EngineRoot {  // engines/root.h
//     uint64 magic;      // kLinearRootMagic
//     uint32 version;    // kLinearVersion
//     uint32 check;      // of magic and version
//     uint64 table;      // sealed: pool offset of the live LinearTable; a resize switches
//                        // it with one failure-atomic 8-byte store
//     uint64 count;      // sealed: keys stored; persisted after every insert's and
//                        // delete's commit (a crash may leave it one off: recovery recounts)
//   };
//
//   table block (from the allocator; a large run, 4 KiB aligned):
//   struct LinearTable {
//     uint64 magic;       // kLinearTableMagic
//     uint64 num_lines;   // the table holds kCellsPerLine * num_lines cells
//     uint8  pad[40];     // zero
//     uint64 check;       // Engine::MetadataCheck of the 56 bytes above (written once)
//     LinearLine lines[num_lines];
//   };
//   struct LinearLine {   // exactly one 64-byte cache line
//     KvWords cell[3];    // shared slot encoding, src/common/slot.h
//     uint8   form[3];    // SlotForm of each cell: 0 empty, 1 inline, 2 record
//     uint8   pad[13];
//   };
//
// Cell c is lines[c / 3].cell[c % 3]. A cell and its form byte share a line, so a probe
// reads one line per three cells and an insert writes one line. The price is 13 bytes of
// padding per line (64 bytes hold 3 cells, not 4; see docs/engines/linear.md).
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. Linear probing without tombstones: an occupied cell c whose key's home cell is
//     h = Reduce(hash, cells) has every cell of the cyclic range [h, c] occupied. So a
//     lookup from h may stop at the first empty cell.
//  2. No key is stored twice.
//  3. root.count equals the number of occupied cells (after recovery, and whenever no
//     mutation is in flight).
//  4. form is a cell's commit point: the words of an empty cell mean nothing. A record
//     cell owns its record; no other cell of the live table points to it.
//
// ---- Persist order --------------------------------------------------------------------
//
//  linear:     insert: record (if any) flushed, fence; words and form stored (one line,
//              so they persist in program order), persist; count stored, persist.
//              delete: each backward-shift move copies a cell into the hole and persists
//              it; the last hole's form is cleared and persisted; count, persist. A crash
//              between two moves leaves the moved key twice; one inside a move (three
//              stores into an occupied cell) pairs one item's key with another's value:
//              the inconsistency the paper pays logging to avoid.
//  linear-log: Begin; Save the old bytes of every line the operation changes (one range,
//              two when the run wraps); store; flush the changed lines; fence; Commit;
//              then count, persist (as `group` does). After a crash, UndoLog::Recover
//              rolls an uncommitted operation back before the engine attaches, so the
//              interrupted operation is all-or-nothing, and Recover recounts.
//  both:       an update of one 8-byte word (an inline value, a record pointer) is one
//              failure-atomic store, no log (a new record published: fence, store,
//              persist). A resize builds the doubled table, flushes it, publishes
//              root.table (fence, one 8-byte store, persist), then frees the old table: crash consistent in both engines (an unlinked new table is
//              reclaimed by Allocator::Rebuild).
//
// ---- Concurrency ----------------------------------------------------------------------
//
// One reader-writer lock per index (a VersionedRwLock, common/locks.h): Insert, Update,
// Put and Delete hold it exclusively and release it only after their change is durable,
// so a reader never returns a value that is not durable. Get takes no lock: it probes
// with acquire loads and validates with the lock's version (FindOptimistic; a writer
// anywhere in the table makes it retry), and takes the lock shared only after a few
// failed tries or for a record, whose bytes it reads under the lock. ForEach and Stats
// take it shared. Count() reads an atomic.
//
// ---- Scan (Index::Scan; the cursor: engines/scan.h) ------------------------------------
//
// A home is a cell. A page holds the lock shared for its whole length and reads each run
// of its homes from the run's first home to the first empty cell at or after its last
// home (wrapping past the table's end), keeping the keys whose home is one of the run's:
// by invariant 1 those are all of them, however far they are displaced. Between pages a
// backward shift moves keys towards their home, never past it, and a resize rehomes them
// in hash order, so every key present for the whole scan is passed at least once; twice
// only when its hash lies within 2^16 below a page boundary. Keys inserted or deleted
// during the scan may or may not be passed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "common/slot.h"
#include "engines/engine.h"

namespace pmhash::engines {

inline constexpr uint64_t kLinearRootMagic = 0x31524e494c48504dull;   // "MPHLINR1"
inline constexpr uint64_t kLinearTableMagic = 0x31544e494c48504dull;  // "MPHLINT1"
inline constexpr uint64_t kLinearVersion = 2;  // 2: root check, sealed words, table check
inline constexpr uint64_t kCellsPerLine = 3;

struct alignas(64) LinearLine {
  KvWords cell[kCellsPerLine];
  uint8_t form[kCellsPerLine];
  uint8_t pad[13];
};
static_assert(sizeof(LinearLine) == pm::kCacheLine,
              "a line of cells and their forms is exactly one cache line: one read per probe "
              "of 3 cells, one flush per insert");
static_assert(offsetof(LinearLine, cell) == 0 &&
                  offsetof(LinearLine, form) == kCellsPerLine * sizeof(KvWords),
              "forms follow the cells in the same line");
static_assert(offsetof(LinearLine, form) % 4 == 0 &&
                  offsetof(LinearLine, pad) + sizeof(LinearLine::pad) >=
                      offsetof(LinearLine, form) + 4,
              "a search reads the three forms and a padding byte with one 4-byte load "
              "(LoadForms)");

struct alignas(64) LinearTable {
  uint64_t magic;
  uint64_t num_lines;
  uint8_t pad[40];
  uint64_t check;
  // The num_lines lines follow the header.
  LinearLine* lines() { return reinterpret_cast<LinearLine*>(this + 1); }
};
static_assert(sizeof(LinearTable) == pm::kCacheLine,
              "the table header is one cache line, so the lines after it are line aligned");
static_assert(offsetof(LinearTable, magic) == offsetof(TableHeader, magic) &&
                  offsetof(LinearTable, num_lines) == offsetof(TableHeader, size) &&
                  offsetof(LinearTable, check) == 56,
              "the table header's layout (version 2)");

class LinearProbing : public Engine {
 public:
  enum class Logging : uint8_t {
    kNone,  // `linear`: plain persists, not crash consistent
    kUndo,  // `linear-log`: every multi-word change under the undo log
  };

  explicit LinearProbing(Logging logging) : logging_(logging) {}

  // A key's home cell in a table of N cells is Reduce(hash, N) (util/hash.h: no modulo,
  // any table size).
  // Cells of the live table.
  uint64_t cells() const;

  // The Index contract (include/pmhash/index.h), and: Insert returns TableFull when the
  // table is full and resizing is off, PoolFull when the pool cannot hold a bigger table
  // that it needs. Delete returns ResourceExhausted in `linear-log` if its backward shift
  // spans more lines than one undo-log lane holds (nothing changes then). ForEach holds
  // the index's read lock while calling fn: fn must not call mutating methods of the
  // same index (it would deadlock). CheckInvariants checks invariants 1-4 by a full scan.
  PMHASH_ENGINE_KIT_OVERRIDES;
  QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;

 private:
  // Where a probe for a key ended.
  struct Probe {
    bool found = false;  // cell holds the key
    bool full = false;   // no empty cell and no match: the table is full
    uint64_t cell = 0;   // the key's cell, or the first empty cell of the run
  };

  bool logged() const { return logging_ == Logging::kUndo; }
  // "linear: " or "linear-log: ", for error messages.
  std::string Prefix() const { return name() + ": "; }
  LinearLine* LineOf(uint64_t cell) const { return &table_->lines()[cell / kCellsPerLine]; }
  SlotForm FormAt(uint64_t cell) const {
    return static_cast<SlotForm>(LineOf(cell)->form[cell % kCellsPerLine]);
  }
  KvWords WordsAt(uint64_t cell) const { return LineOf(cell)->cell[cell % kCellsPerLine]; }
  uint64_t Next(uint64_t cell) const { return cell + 1 == cells_ ? 0 : cell + 1; }
  // The key hash of an occupied cell (inline: hashes the key word; record: stored).
  uint64_t HashOf(SlotForm form, const KvWords& words) const;

  // Validates the table header at `table` in raw PM (the root header validated first).
  Status ValidateTable(uint64_t table) const;
  Probe Find(std::string_view key, uint64_t hash) const;
  // The search with no lock (validated by mu_'s version): kFound (read->value_word holds
  // an inline value) or kAbsent when no writer came in; kRetry when one did; kLocked when
  // only the shared lock can answer (a record cell whose hash matches).
  Optimistic FindOptimistic(uint64_t hash, OptimisticRead* read) const;
  // DoGet after its first try: the search with no lock (counted, retried), then the lock.
  Status GetFull(std::string_view key, uint64_t hash, std::string* value);
  // A search under the shared lock (FindOptimistic could not answer).
  Status GetLocked(std::string_view key, uint64_t hash, std::string* value);
  // Publishes table_ and cells_ to the searches that take no lock (after each change).
  void PublishView();
  Status InsertNew(std::string_view key, std::string_view value, uint64_t hash, Probe probe);
  Status UpdateAt(uint64_t cell, std::string_view key, std::string_view value, uint64_t hash);
  Status DeleteAt(uint64_t cell);
  // How a delete refills its hole: kBackwardShift, the classic (the paper's baseline), and
  // linear-log's fallback when that is too long to log, kFewestMoves.
  enum class ShiftPlan : uint8_t { kBackwardShift, kFewestMoves };
  // Plans the moves of deleting `cell` into moves_ (from, to), in order; returns the last
  // hole, which the delete empties.
  uint64_t PlanShift(uint64_t cell, ShiftPlan plan);
  // Saves what the planned moves change: the lines from `cell` to `hole` (one range, two
  // when the run wraps) for a backward shift, the changed lines alone for kFewestMoves.
  Status SaveShift(pm::UndoLog::Tx& tx, uint64_t cell, uint64_t hole, ShiftPlan plan);
  // Doubles the table (crash consistent in both engines).
  Status Grow();
  // Allocates and zeroes a table of num_lines lines (persisted), *offset its pool offset.
  Status NewTable(uint64_t num_lines, uint64_t* offset);
  void WriteCell(LinearLine* line, uint64_t slot, SlotForm form, const KvWords& words);
  // Stores and persists root.count (after the cells' change is durable) and its mirror.
  void PersistCount(uint64_t count);
  // "cell 7 (pool offset X)", for error messages.
  std::string CellName(uint64_t cell) const;
  // Saves the cache lines of cells [first, last] (cyclic) into tx.
  Status SaveCells(pm::UndoLog::Tx& tx, uint64_t first, uint64_t last);

  const Logging logging_;
  // Options (Configure).
  uint64_t initial_cells_ = 3 * 1024;
  double max_load_ = 0.9;

  mutable VersionedRwLock mu_;
  LinearTable* table_ = nullptr;
  uint64_t cells_ = 0;
  // table_'s lines and cells_ for FindOptimistic, which reads them with no lock.
  std::atomic<const LinearLine*> view_lines_{nullptr};
  std::atomic<uint64_t> view_cells_{0};
  std::atomic<uint64_t> count_{0};
  // Engine counters, written under the exclusive lock.
  uint64_t resizes_ = 0;
  uint64_t shifted_cells_ = 0;
  uint64_t undo_txs_ = 0;
  uint64_t fewest_move_deletes_ = 0;  // linear-log deletes that took kFewestMoves
  std::vector<std::pair<uint64_t, uint64_t>> moves_;  // Delete's plan, reused
  std::vector<std::pair<uint64_t, uint64_t>> run_;    // the run after a hole: cell, home
};

}  // namespace pmhash::engines
