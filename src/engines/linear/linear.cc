// Linear probing in PM, with (`linear-log`) and without (`linear`) undo logging.
// Layout, invariants and persist order: linear.h.
#include "engines/linear/linear.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "util/hash.h"

namespace pmhash::engines {

namespace {

// Is h inside the cyclic range (a, b]?
bool InCyclicRange(uint64_t h, uint64_t a, uint64_t b) {
  return a <= b ? (a < h && h <= b) : (h > a || h <= b);
}

uint64_t TableBytes(uint64_t num_lines) {
  return sizeof(LinearTable) + num_lines * sizeof(LinearLine);
}

constexpr RootLayout kRootLayout{kLinearRootMagic, kLinearVersion, sizeof(EngineRoot), 0};
// Homes a Scan page reads per run (each run walks on to the end of its last probe run).
constexpr uint64_t kScanRunCells = 192;
constexpr size_t kTableCheckedBytes = offsetof(LinearTable, check);

}  // namespace

// ---- Setup --------------------------------------------------------------------------

Status LinearProbing::Configure(EngineOptions& options, const Options& /*index_options*/) {
  SetQuickGet(true);  // FindOptimistic's first try, from Get
  max_load_ = options.Double("max_load");
  // `cells` sizes the first table in cells, as the paper does; else initial_capacity
  // keys fill it to a load factor of 0.5, as they fill `group`'s.
  const uint64_t cells = options.Uint("cells");
  const uint64_t keys = initial_capacity();
  const uint64_t wanted =
      cells != 0 ? cells : keys != 0 ? 2 * std::min(keys, uint64_t{1} << 49) : 3 * 1024;
  // Clamped so the line arithmetic cannot overflow; Create reports a table too big for
  // the pool.
  initial_cells_ = std::clamp<uint64_t>(wanted, kCellsPerLine, uint64_t{1} << 50);
  return Status::OK();
}

Status LinearProbing::NewTable(uint64_t num_lines, uint64_t* offset) {
  pm::Persister& p = persister();
  if (num_lines == 0 || num_lines > (pool().size() / sizeof(LinearLine))) {
    return Status::PoolFull(Prefix() + "a table of " + std::to_string(num_lines) +
                            " lines does not fit the pool");
  }
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(num_lines),
                                       "a table of " + std::to_string(num_lines) + " lines",
                                       kLinearTableMagic, num_lines, offset));
  auto* t = pool().At<LinearTable>(*offset);
  p.Store(&t->check, MetadataCheck(t, kTableCheckedBytes));
  p.Persist(t, TableBytes(num_lines));
  return Status::OK();
}

Status LinearProbing::Create() {
  const uint64_t num_lines = (initial_cells_ + kCellsPerLine - 1) / kCellsPerLine;
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(num_lines, &offset));
  CreateRoot(kRootLayout, offset, /*table_bytes=*/0);
  table_ = pool().At<LinearTable>(offset);
  cells_ = num_lines * kCellsPerLine;
  PublishView();
  count_.store(0, std::memory_order_release);
  return Status::OK();
}

Status LinearProbing::ValidateTable(uint64_t off) const {
  uint64_t lines = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(off, kLinearTableMagic,
                                            pool().size() / sizeof(LinearLine), TableBytes,
                                            &lines));
  const auto* t = pool().At<const LinearTable>(off);
  return VerifyMetadata(t, kTableCheckedBytes, t->check, "the table header");
}

Status LinearProbing::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(LinearTable), &off, &count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off));
  visit(off);
  auto* t = pool().At<LinearTable>(off);
  LinearLine* lines = t->lines();
  for (uint64_t l = 0; l < t->num_lines; ++l) {
    for (uint64_t s = 0; s < kCellsPerLine; ++s) {
      const uint8_t form = lines[l].form[s];
      if (form > static_cast<uint8_t>(SlotForm::kRecord)) {
        return Status::Corruption(Prefix() + "cell " + std::to_string(l * kCellsPerLine + s) +
                                  " has an unknown form " + std::to_string(form));
      }
      if (form == static_cast<uint8_t>(SlotForm::kRecord)) {
        const uint64_t record = lines[l].cell[s].word0;
        if (record == 0 || !pool().Contains(record, 8)) {
          return Status::Corruption(Prefix() + "cell " + std::to_string(l * kCellsPerLine + s) +
                                    " points outside the pool");
        }
        SlotCodec::VisitBlocks(SlotForm::kRecord, lines[l].cell[s], visit);
      }
    }
  }
  return Status::OK();
}

Status LinearProbing::Recover(bool clean) {
  uint64_t off = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, sizeof(LinearTable), &off, &count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off));
  table_ = pool().At<LinearTable>(off);
  cells_ = table_->num_lines * kCellsPerLine;
  PublishView();
  if (!clean) {
    // The undo log already rolled back an interrupted `linear-log` operation; recount
    // (cheap next to Allocator::Rebuild's scan) so that `linear` at least reports what
    // it holds, and reject a damaged pool.
    uint64_t n = 0;
    for (uint64_t c = 0; c < cells_; ++c) {
      const SlotForm form = FormAt(c);
      if (form == SlotForm::kEmpty) continue;
      if (static_cast<uint8_t>(form) > static_cast<uint8_t>(SlotForm::kRecord) ||
          !codec().Plausible(form, WordsAt(c))) {
        return Status::Corruption(Prefix() + CellName(c) + " is malformed");
      }
      ++n;
    }
    if (n != count) PersistRootCount(n);
    count = n;
  }
  if (count > cells_) {
    return Status::Corruption(Prefix() + "the root counts " + std::to_string(count) +
                              " keys in a table of " + std::to_string(cells_) + " cells");
  }
  count_.store(count, std::memory_order_release);
  return Status::OK();
}

void LinearProbing::FillStats(IndexStats* stats) const {
  std::shared_lock lock(mu_);
  stats->count = count_.load(std::memory_order_acquire);
  stats->key_slots = cells_;
  stats->dram_bytes = sizeof(*this) + moves_.capacity() * sizeof(moves_[0]) +
                      run_.capacity() * sizeof(run_[0]);
  stats->engine_counters["cells"] = cells_;
  stats->engine_counters["resizes"] = resizes_;
  stats->engine_counters["shifted_cells"] = shifted_cells_;
  stats->engine_counters["undo_txs"] = undo_txs_;
  stats->engine_counters["fewest_move_deletes"] = fewest_move_deletes_;
}

uint64_t LinearProbing::Count() const { return count_.load(std::memory_order_acquire); }

uint64_t LinearProbing::cells() const {
  std::shared_lock lock(mu_);
  return cells_;
}

// ---- Helpers ------------------------------------------------------------------------

std::string LinearProbing::CellName(uint64_t cell) const {
  const auto* words = &LineOf(cell)->cell[cell % kCellsPerLine];
  return "cell " + std::to_string(cell) + " (pool offset " +
         std::to_string(pool().ToOffset(words)) + ")";
}

uint64_t LinearProbing::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;
  return KeyHash(codec().Key(form, words));
}

LinearProbing::Probe LinearProbing::Find(std::string_view key, uint64_t hash) const {
  Probe probe;
  uint64_t c = Reduce(hash, cells_);
  pm::ReadRun read(persister());  // the lines probed, reported as runs
  for (uint64_t n = 0; n < cells_; ++n) {
    read.Add(LineOf(c), sizeof(LinearLine));
    const SlotForm form = FormAt(c);
    if (form == SlotForm::kEmpty) {
      probe.cell = c;
      return probe;
    }
    if (codec().KeyEquals(form, WordsAt(c), key, hash)) {
      probe.found = true;
      probe.cell = c;
      return probe;
    }
    c = Next(c);
  }
  probe.full = true;
  return probe;
}

void LinearProbing::WriteCell(LinearLine* line, uint64_t slot, SlotForm form,
                              const KvWords& words) {
  pm::Persister& p = persister();
  // Words before form: in one line, stores persist in program order, so the form never
  // reaches PM ahead of the words it commits.
  p.Store(&line->cell[slot].word0, words.word0);
  p.Store(&line->cell[slot].word1, words.word1);
  p.Store(&line->form[slot], static_cast<uint8_t>(form));
}

void LinearProbing::PersistCount(uint64_t count) {
  PersistRootCount(count);
  count_.store(count, std::memory_order_release);
}

Status LinearProbing::SaveCells(pm::UndoLog::Tx& tx, uint64_t first, uint64_t last) {
  const uint64_t first_line = first / kCellsPerLine;
  const uint64_t last_line = last / kCellsPerLine;
  LinearLine* lines = table_->lines();
  if (first <= last) {
    return tx.Save(&lines[first_line], (last_line - first_line + 1) * sizeof(LinearLine));
  }
  // The run wraps past the table's end: two ranges. They may share a line in a tiny
  // table; saving it twice is harmless (both copies hold the old bytes).
  const uint64_t num_lines = table_->num_lines;
  PMHASH_RETURN_IF_ERROR(
      tx.Save(&lines[first_line], (num_lines - first_line) * sizeof(LinearLine)));
  return tx.Save(&lines[0], (last_line + 1) * sizeof(LinearLine));
}

// ---- Operations ---------------------------------------------------------------------

void LinearProbing::PublishView() {
  // The lines before the count: a search that read the new count reads the new lines.
  view_lines_.store(table_->lines(), std::memory_order_release);
  view_cells_.store(cells_, std::memory_order_release);
}

// Inlined into DoGet and GetFull (issue 29: no call on the search path).
[[gnu::always_inline]] inline Optimistic LinearProbing::FindOptimistic(uint64_t hash,
                                                                      OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  if (!read->Begin(mu_)) return Optimistic::kRetry;
  // The count before the lines (PublishView stores them the other way round): a stale
  // pair indexes the old table or the new one, both at least that large (tables only
  // grow, and a freed table's memory stays in the pool's mapping).
  const uint64_t cells = view_cells_.load(std::memory_order_acquire);
  const LinearLine* lines = view_lines_.load(std::memory_order_acquire);
  // Find's probe a line at a time, every word an acquire load (VersionedRwLock's
  // contract): a writer may be half-way, so the walk is bounded by the table and only
  // compares. A line's three cells are matched together (MatchSlots): a cell before the
  // probe's start or after an empty cell cannot hold the key (invariant 1, keys stored
  // once), so matching it changes no answer; the probe goes on to the next line only if
  // no cell from its start to the line's end is empty.
  Optimistic answer = Optimistic::kAbsent;
  pm::ReadRun noted(read->persister, read->notes);  // the lines probed, as Find reports them
  const uint64_t num_lines = cells / kCellsPerLine;
  const uint64_t home = Reduce(hash, cells);
  uint64_t l = home / kCellsPerLine;
  uint32_t from = static_cast<uint32_t>(home % kCellsPerLine) * 8;  // first byte probed
  for (uint64_t n = 0; n <= num_lines; ++n) {
    const LinearLine* line = &lines[l];
    noted.Add(line, sizeof(LinearLine));
    const uint32_t forms = LoadForms(line->form);
    answer = MatchSlots<kCellsPerLine>(forms, line->cell, hash, read);
    if (answer != Optimistic::kAbsent || (EmptySlots<kCellsPerLine>(forms) >> from) != 0) break;
    from = 0;
    l = l + 1 == num_lines ? 0 : l + 1;
  }
  noted.Flush();
  return read->Valid(mu_) ? answer : Optimistic::kRetry;
}

QuickAnswer LinearProbing::QuickGet(uint64_t hash, uint64_t key_word) {
  return QuickTry(persister(), key_word,
                  [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
                    return FindOptimistic(hash, read);
                  });
}

Status LinearProbing::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  // The probe with no lock first (not in the paper, which has one thread): no locked
  // instruction, so consecutive searches overlap their misses (issue 29). Its first try,
  // when nothing is counted, has no call on its path (FirstTry); anything else takes
  // GetFull.
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

// A writer anywhere in the table makes the search retry; after a few tries, or for a
// record, the shared lock answers. Out of line (DoGet's frame).
__attribute__((noinline)) Status LinearProbing::GetFull(std::string_view key, uint64_t hash,
                                                        std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

// Out of line: its lock and probe would otherwise give DoGet a large frame.
__attribute__((noinline)) Status LinearProbing::GetLocked(std::string_view key, uint64_t hash,
                                                          std::string* value) {
  std::shared_lock lock(mu_);
  const Probe probe = Find(key, hash);
  if (!probe.found) return Status::NotFound();
  // The codec reports the record it reads.
  AssignValue(value, codec().Value(FormAt(probe.cell), WordsAt(probe.cell)));
  return Status::OK();
}

Status LinearProbing::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                              WriteMode mode) {
  std::unique_lock lock(mu_);
  const Probe probe = Find(key, hash);
  if (probe.found) {
    if (mode == WriteMode::kInsert) return Status::AlreadyExists();
    return UpdateAt(probe.cell, key, value, hash);
  }
  if (mode == WriteMode::kUpdate) return Status::NotFound();
  return InsertNew(key, value, hash, probe);
}

Status LinearProbing::DoDelete(std::string_view key, uint64_t hash) {
  std::unique_lock lock(mu_);
  for (;;) {
    const Probe probe = Find(key, hash);
    if (!probe.found) return Status::NotFound();
    const Status s = DeleteAt(probe.cell);
    // linear-log refuses, unchanged, a delete whose moves one undo-log lane cannot log,
    // even with the fewest moves (DeleteAt). Such runs hold many keys of distinct homes,
    // each displaced by the ones before (a locally dense table: a 757-cell run at load 0.9
    // in a 4224-cell table, with 16 KiB lanes); doubling spreads their homes apart until
    // they no longer displace each other, so double and delete there, as often as it
    // takes. A run of keys of one home never gets here (one move), so this does not
    // double for colliding keys. Only with resizing off, or no room to double, is the
    // delete refused.
    if (!s.IsResourceExhausted() || !logged() || !resize_enabled()) return s;
    if (!Grow().ok()) return s;
  }
}

Status LinearProbing::InsertNew(std::string_view key, std::string_view value, uint64_t hash,
                                Probe probe) {
  const uint64_t count = count_.load(std::memory_order_relaxed);
  if (resize_enabled() && static_cast<double>(count + 1) > max_load_ * static_cast<double>(cells_)) {
    Status grown = Grow();
    // A pool too small for a bigger table still takes keys while cells are free.
    if (!grown.ok() && (probe.full || !grown.IsResourceExhausted())) return grown;
    if (grown.ok()) probe = Find(key, hash);
  }
  if (probe.full) {
    return Status::TableFull(Prefix() + "table full (" + std::to_string(cells_) +
                             " cells, all occupied) and resizing is off");
  }
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));

  pm::Persister& p = persister();
  LinearLine* line = LineOf(probe.cell);
  const uint64_t slot = probe.cell % kCellsPerLine;
  std::unique_ptr<pm::UndoLog::Tx> tx;
  if (logged()) {
    tx = undo_log().Begin();
    if (Status s = tx->Save(line, sizeof(LinearLine)); !s.ok()) {
      tx.reset();  // rolls back nothing: nothing changed yet
      codec().Release(form, words);
      return s;
    }
    ++undo_txs_;
  } else if (form == SlotForm::kRecord) {
    p.Fence();  // the record (flushed by Encode) is durable before the cell points to it
  }
  WriteCell(line, slot, form, words);
  p.Persist(line, sizeof(LinearLine));
  if (tx != nullptr) tx->Commit();
  PersistCount(count + 1);
  return Status::OK();
}

Status LinearProbing::UpdateAt(uint64_t cell, std::string_view key, std::string_view value,
                               uint64_t hash) {
  pm::Persister& p = persister();
  LinearLine* line = LineOf(cell);
  const uint64_t slot = cell % kCellsPerLine;
  const SlotForm form = FormAt(cell);
  const KvWords old = WordsAt(cell);
  if (form == SlotForm::kInline && value.size() == 8) {
    // One 8-byte word changes: failure-atomic without a log.
    uint64_t v = 0;
    std::memcpy(&v, value.data(), 8);
    p.Store(&line->cell[slot].word1, v);
    p.Persist(&line->cell[slot].word1, sizeof(uint64_t));
    return Status::OK();
  }
  if (form == SlotForm::kRecord) {
    // A record slot stays a record slot: swing word0 to a new record.
    uint64_t record = 0;
    PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &record));
    // The new record is durable before it is linked.
    p.Publish(&line->cell[slot].word0, record);
    codec().ReleaseRecord(old.word0);
    return Status::OK();
  }
  // Inline -> record: word0, word1 and form change together.
  SlotForm new_form = SlotForm::kEmpty;
  KvWords words;
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &new_form, &words));
  std::unique_ptr<pm::UndoLog::Tx> tx;
  if (logged()) {
    tx = undo_log().Begin();
    if (Status s = tx->Save(line, sizeof(LinearLine)); !s.ok()) {
      tx.reset();
      codec().Release(new_form, words);
      return s;
    }
    ++undo_txs_;
  } else {
    p.Fence();
  }
  WriteCell(line, slot, new_form, words);
  p.Persist(line, sizeof(LinearLine));
  if (tx != nullptr) tx->Commit();
  return Status::OK();
}

uint64_t LinearProbing::PlanShift(uint64_t cell, ShiftPlan plan) {
  // The run after the hole, to its first empty cell, with each key's home.
  run_.clear();
  pm::ReadRun read(persister());  // the run's lines after the hole
  for (uint64_t j = Next(cell); j != cell; j = Next(j)) {
    read.Add(LineOf(j), sizeof(LinearLine));
    const SlotForm form = FormAt(j);
    if (form == SlotForm::kEmpty) break;
    run_.emplace_back(j, Reduce(HashOf(form, WordsAt(j)), cells_));
  }
  read.Flush();
  // A key of the run whose home is not in the cyclic range (hole, j] may move back into
  // the hole, which then moves to j. The backward shift takes the first such key each
  // time; kFewestMoves takes the last one, which leaves every key before it where it is
  // (none of them needs the cell it leaves), so the keys of one home move once, not each.
  moves_.clear();
  uint64_t hole = cell;
  for (size_t i = 0; i < run_.size(); ++i) {
    size_t take = i;
    if (plan == ShiftPlan::kFewestMoves) {
      take = run_.size();
      for (size_t j = run_.size(); j > i; --j) {
        if (!InCyclicRange(run_[j - 1].second, hole, run_[j - 1].first)) {
          take = j - 1;
          break;
        }
      }
      if (take == run_.size()) break;
    } else if (InCyclicRange(run_[i].second, hole, run_[i].first)) {
      continue;
    }
    moves_.emplace_back(run_[take].first, hole);
    hole = run_[take].first;
    i = take;
  }
  return hole;
}

Status LinearProbing::SaveShift(pm::UndoLog::Tx& tx, uint64_t cell, uint64_t hole,
                                ShiftPlan plan) {
  if (plan == ShiftPlan::kBackwardShift) return SaveCells(tx, cell, hole);
  // The changed lines alone: the hole's, and each moved key's (the next hole).
  const LinearLine* saved = LineOf(cell);
  PMHASH_RETURN_IF_ERROR(tx.Save(LineOf(cell), sizeof(LinearLine)));
  for (const auto& [from, to] : moves_) {
    if (LineOf(from) == saved) continue;  // moves go forward: a line's cells are adjacent
    saved = LineOf(from);
    PMHASH_RETURN_IF_ERROR(tx.Save(LineOf(from), sizeof(LinearLine)));
  }
  return Status::OK();
}

Status LinearProbing::DeleteAt(uint64_t cell) {
  pm::Persister& p = persister();
  const SlotForm old_form = FormAt(cell);
  const KvWords old_words = WordsAt(cell);
  ShiftPlan plan = ShiftPlan::kBackwardShift;
  uint64_t hole = PlanShift(cell, plan);
  std::unique_ptr<pm::UndoLog::Tx> tx;
  if (logged()) {
    tx = undo_log().Begin();
    Status s = SaveShift(*tx, cell, hole, plan);
    if (s.IsResourceExhausted()) {
      // Not in the paper: the backward shift is longer than one undo-log lane holds (the
      // run holds many keys of few homes: a locally dense table, or colliding keys). Move
      // the fewest keys instead, logging only the lines they change.
      tx.reset();  // rolls back nothing: nothing changed yet
      tx = undo_log().Begin();
      plan = ShiftPlan::kFewestMoves;
      hole = PlanShift(cell, plan);
      s = SaveShift(*tx, cell, hole, plan);
    }
    if (!s.ok()) {
      tx.reset();
      if (s.IsResourceExhausted()) {
        return Status::ResourceExhausted(
            Prefix() + "deleting moves " + std::to_string(moves_.size()) +
            " keys at least, more than one undo-log lane can log: " + std::string(s.message()));
      }
      return s;
    }
    ++undo_txs_;
    if (plan == ShiftPlan::kFewestMoves) ++fewest_move_deletes_;
  }
  // linear: persist after every move (a plain persistent table). linear-log: flush each
  // changed line once (moves go forward, so equal lines are adjacent), one fence.
  LinearLine* flushed = nullptr;
  for (const auto& [from, to] : moves_) {
    LinearLine* line = LineOf(to);
    WriteCell(line, to % kCellsPerLine, FormAt(from), WordsAt(from));
    if (!logged()) {
      p.Persist(line, sizeof(LinearLine));
    } else if (line != flushed) {
      if (flushed != nullptr) p.Flush(flushed, sizeof(LinearLine));
      flushed = line;
    }
  }
  LinearLine* last = LineOf(hole);
  p.Store(&last->form[hole % kCellsPerLine], static_cast<uint8_t>(SlotForm::kEmpty));
  if (flushed != nullptr && flushed != last) p.Flush(flushed, sizeof(LinearLine));
  p.Persist(last, sizeof(LinearLine));
  if (tx != nullptr) tx->Commit();
  PersistCount(count_.load(std::memory_order_relaxed) - 1);
  shifted_cells_ += moves_.size();
  codec().Release(old_form, old_words);  // durably unreachable now
  return Status::OK();
}

Status LinearProbing::Grow() {
  const uint64_t old_lines = table_->num_lines;
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(old_lines * 2, &offset));
  auto* fresh = pool().At<LinearTable>(offset);
  const uint64_t new_cells = old_lines * 2 * kCellsPerLine;
  LinearLine* new_lines = fresh->lines();
  std::vector<bool> written(old_lines * 2, false);  // the lines a cell was written to
  // Migrate: records move by pointer (both tables share them until the switch).
  for (uint64_t c = 0; c < cells_; ++c) {
    const SlotForm form = FormAt(c);
    if (form == SlotForm::kEmpty) continue;
    const KvWords words = WordsAt(c);
    uint64_t d = Reduce(HashOf(form, words), new_cells);
    while (new_lines[d / kCellsPerLine].form[d % kCellsPerLine] !=
           static_cast<uint8_t>(SlotForm::kEmpty)) {
      d = d + 1 == new_cells ? 0 : d + 1;
    }
    WriteCell(&new_lines[d / kCellsPerLine], d % kCellsPerLine, form, words);
    written[d / kCellsPerLine] = true;
  }
  persister().NoteRead(table_->lines(), old_lines * sizeof(LinearLine));
  pm::Persister& p = persister();
  // The lines written only: NewTable persisted the zeroed table.
  for (uint64_t l = 0; l < written.size(); ++l) {
    if (written[l]) p.Flush(&new_lines[l], sizeof(LinearLine));
  }
  // Commit point: one failure-atomic store of the root's table pointer.
  const uint64_t old_offset = pool().ToOffset(table_);
  PublishRootTable(offset);
  table_ = fresh;
  cells_ = new_cells;
  PublishView();
  allocator().Free(old_offset);
  ++resizes_;
  return Status::OK();
}

Status LinearProbing::ForEach(const Visitor& fn) const {
  std::shared_lock lock(mu_);
  persister().NoteRead(table_->lines(), table_->num_lines * sizeof(LinearLine));
  for (uint64_t c = 0; c < cells_; ++c) {
    const SlotForm form = FormAt(c);
    if (form == SlotForm::kEmpty) continue;
    const KvWords words = WordsAt(c);
    if (!fn(codec().Key(form, words), codec().Value(form, words))) break;
  }
  return Status::OK();
}

Status LinearProbing::DoScan(ScanPage* page) const {
  std::shared_lock lock(mu_);  // the whole page: no shift, no resize meanwhile
  // A home is a cell. A key of home h sits in the run of occupied cells from h on
  // (invariant 1), so the keys of homes [first, last) all lie before the first empty cell
  // at or after last - 1, counting cyclically from first (a run may wrap past the end).
  const auto collect = [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    const uint64_t span = last - 1 - first;
    uint64_t c = first;
    for (uint64_t d = 0; d < cells_; ++d, c = Next(c)) {
      const SlotForm form = FormAt(c);
      if (form == SlotForm::kEmpty) {
        if (d >= span) break;
        continue;
      }
      const KvWords words = WordsAt(c);
      const uint64_t hash = HashOf(form, words);
      const uint64_t home = Reduce(hash, cells_);
      if (home < first || home >= last) continue;  // displaced from elsewhere: not copied
      AddScanEntry(out, hash, codec().Key(form, words), codec().Value(form, words));
    }
  };
  page->CollectHomes(cells_, kScanRunCells, collect);
  return Status::OK();
}

Status LinearProbing::CheckInvariants() const {
  std::shared_lock lock(mu_);
  // The metadata as Recover validated it (a damaged pool may be checked right after open).
  uint64_t off = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(LinearTable), &off, &stored_count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off));
  if (pool().At<LinearTable>(off) != table_ || table_->num_lines * kCellsPerLine != cells_) {
    return Status::Corruption(Prefix() + "the root names the table at pool offset " +
                              std::to_string(off) + ", not the live one at " +
                              std::to_string(pool().ToOffset(table_)));
  }
  std::set<std::string> keys;
  uint64_t n = 0;
  for (uint64_t c = 0; c < cells_; ++c) {
    const SlotForm form = FormAt(c);
    if (form == SlotForm::kEmpty) continue;
    ++n;
    const KvWords words = WordsAt(c);
    if (static_cast<uint8_t>(form) > static_cast<uint8_t>(SlotForm::kRecord) ||
        !codec().Plausible(form, words)) {
      return Status::Corruption(Prefix() + CellName(c) + " with form " +
                                std::to_string(static_cast<uint8_t>(form)) + " is malformed");
    }
    const std::string key(codec().Key(form, words));
    if (!keys.insert(key).second) {
      return Status::Corruption(Prefix() + "a key is stored twice (again in " + CellName(c) +
                                ")");
    }
    if (form == SlotForm::kRecord && words.word1 != KeyHash(key)) {
      return Status::Corruption(Prefix() + CellName(c) + " has a wrong key hash");
    }
    // Invariant 1; at most cells_ steps, whatever the cells hold.
    for (uint64_t h = Reduce(HashOf(form, words), cells_); h != c; h = Next(h)) {
      if (FormAt(h) == SlotForm::kEmpty) {
        return Status::Corruption(Prefix() + CellName(c) + " is unreachable: empty " +
                                  CellName(h) + " lies between it and its home");
      }
    }
  }
  if (n != count_.load() || n != stored_count) {
    return Status::Corruption(Prefix() + std::to_string(n) + " occupied cells but count " +
                              std::to_string(count_.load()) + " (PM: " +
                              std::to_string(stored_count) + ")");
  }
  return Status::OK();
}

void LinearProbing::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  std::shared_lock lock(mu_);
  const uint64_t off = pool().ToOffset(table_);
  mark(off, sizeof(LinearTable), pm::Region::kEngineMetadata, true);
  const LinearLine* lines = table_->lines();
  for (uint64_t l = 0; l < table_->num_lines; ++l) {
    // The cells and their forms; the line's padding is never read.
    mark(pool().ToOffset(&lines[l]), offsetof(LinearLine, pad), pm::Region::kSlots, false);
    for (uint64_t s = 0; s < kCellsPerLine; ++s) {
      codec().DescribeRecord(static_cast<SlotForm>(lines[l].form[s]), lines[l].cell[s], mark);
    }
  }
}

// ---- Registration -------------------------------------------------------------------

void RegisterEngines_linear(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {OptionSpec::Double("max_load", 0.9, 0.05, 1.0,
                                     "load factor past which an insert doubles the table "
                                     "first"),
                  OptionSpec::Uint("cells", std::nullopt, kCellsPerLine, uint64_t{1} << 50,
                                   "cells of the first table (auto: 2 x initial_capacity, "
                                   "else 3072)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "the table doubles past max_load",
                       .refuses_when_full = true};
  info.test = {.growth_counters = {"resizes"}};  // initial_capacity 16 sizes 32 cells
  info.description = {"linear",
                      "linear probing in PM, backward-shift deletion, no logging "
                      "(NOT crash consistent)",
                      "baseline (004)", /*crash_consistent=*/false};
  registry.Add<LinearProbing>(info, LinearProbing::Logging::kNone);
  info.test.crash_script_scale = 0.35;  // an undo log's fences per op: 22,124 images at 0.5
  info.description = {"linear-log",
                      "linear probing in PM, backward-shift deletion, undo log for every "
                      "multi-word change",
                      "baseline (004)", /*crash_consistent=*/true};
  registry.Add<LinearProbing>(std::move(info), LinearProbing::Logging::kUndo);
}

}  // namespace pmhash::engines
