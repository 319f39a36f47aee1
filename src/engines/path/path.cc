// Path hashing (`path`, `path-log`). Layout, invariants, persist order and locking: path.h.
#include "engines/path/path.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
unsigned Log2(uint64_t v) { return static_cast<unsigned>(63 - __builtin_clzll(v)); }

RootLayout RootLayoutOf() {
  return {kPathRootMagic, kPathVersion, sizeof(PathRoot), sizeof(PathRoot) - sizeof(EngineRoot)};
}

constexpr size_t kTableCheckedBytes = offsetof(PathTableHeader, check);
constexpr uint8_t kEmpty = static_cast<uint8_t>(SlotForm::kEmpty);
constexpr uint8_t kRecord = static_cast<uint8_t>(SlotForm::kRecord);
// An insert that still finds its paths full after this many doublings is refused: keys
// whose hashes agree in the bits the doublings look at are not separated by more.
constexpr int kMaxGrowsPerInsert = 4;
// Random keys fill both paths of a key only at a high load (the papers: over 90% with 20
// levels; over a third with 2). Both paths full below 1/32 of the cells means keys that
// share their leaves (colliding or crafted keys): every doubling would add two cells to
// their paths and 2N to the table, so the insert is refused instead. This also bounds the
// table at 64 cells per key held.
constexpr uint64_t kMinGrowLoadInverse = 32;

}  // namespace

// ---- Geometry -----------------------------------------------------------------------

uint64_t PathHash::LinesFor(uint64_t leaves, uint64_t levels) {
  uint64_t lines = 0;
  for (uint64_t i = 0; i < levels; ++i) {
    lines += ((leaves >> i) + kPathCellsPerLine - 1) / kPathCellsPerLine;
  }
  return lines;
}

uint64_t PathHash::View::cells() const {
  uint64_t c = 0;
  for (uint64_t i = 0; i < levels; ++i) c += leaves >> i;
  return c;
}

void PathHash::MakeView(PathTableHeader* header, uint64_t offset, View* v) {
  v->header = header;
  v->lines = reinterpret_cast<PathLine*>(header + 1);
  v->offset = offset;
  v->leaves = header->leaves;
  v->levels = header->levels;
  uint64_t line = 0;
  for (uint64_t i = 0; i < v->levels; ++i) {
    v->level_line[i] = line;
    line += ((v->leaves >> i) + kPathCellsPerLine - 1) / kPathCellsPerLine;
  }
  v->level_line[v->levels] = line;
}

uint64_t PathHash::LevelsFor(uint64_t leaves) const {
  return std::min<uint64_t>(reserved_, Log2(leaves) + 1);
}

void PathHash::Leaves(uint64_t hash, uint64_t n, uint64_t* j1, uint64_t* j2) {
  // Two hash functions from one hash: the high bits for the left half, the high bits of
  // the rotated hash for the right half (so the two paths meet only at the root).
  *j1 = Reduce(hash, n / 2);
  *j2 = n / 2 + Reduce(std::rotl(hash, 32), n / 2);
}

std::string PathHash::CellName(const View& v, uint64_t level, uint64_t c) const {
  const PathLine* line = v.LineOf(level, c);
  return "level-" + std::to_string(level) + " cell " + std::to_string(c) + " (pool offset " +
         std::to_string(pool().ToOffset(&line->cell[c % kPathCellsPerLine])) + ")";
}

uint64_t PathHash::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;  // the record form keeps the hash
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

// ---- Options, creation, recovery ------------------------------------------------------

Status PathHash::Configure(EngineOptions& options, const Options& /*index_options*/) {
  SetQuickGet(true);  // FindOptimistic's first try, from Get
  reserved_ = options.Uint("reserved_levels");
  reserved_given_ = options.Given("reserved_levels");
  prefetch_ = options.Bool("prefetch");
  uint64_t leaves = options.Uint("leaves");
  if (leaves != 0 && !IsPowerOfTwo(leaves)) {
    return Status::InvalidArgument("option leaves=" + std::to_string(leaves) +
                                   " must be a power of two (>= 2)");
  }
  if (leaves == 0) {
    // initial_capacity keys fill the tree (about 2N cells) to about one half, as `group`.
    const uint64_t keys = std::min<uint64_t>(initial_capacity(), uint64_t{1} << 40);
    leaves = keys == 0 ? kPathDefaultLeaves : std::bit_ceil(std::max<uint64_t>(keys, 2));
  }
  initial_leaves_ = leaves;
  return Status::OK();
}

Status PathHash::NewTable(uint64_t leaves, uint64_t* offset) {
  const uint64_t levels = LevelsFor(leaves);
  if (leaves > pool().size() / 32) {
    return Status::PoolFull(Prefix() + "a table of " + std::to_string(leaves) +
                            " leaves does not fit the pool");
  }
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(leaves, levels),
                                       "a table of " + std::to_string(leaves) + " leaves",
                                       kPathTableMagic, leaves, offset));
  // Unreachable until a root store links it: the caller flushes it.
  auto* h = pool().At<PathTableHeader>(*offset);
  persister().Store(&h->levels, levels);
  persister().Store(&h->check, MetadataCheck(h, kTableCheckedBytes));
  return Status::OK();
}

void PathHash::PublishView() {
  views_.push_back(std::make_unique<View>(view_));
  live_.store(views_.back().get(), std::memory_order_release);
}

Status PathHash::Create() {
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(initial_leaves_, &offset));
  root_ = root<PathRoot>();
  persister().Store(&root_->reserved_levels, reserved_);
  auto* h = pool().At<PathTableHeader>(offset);
  CreateRoot(RootLayoutOf(), offset, TableBytes(h->leaves, h->levels));
  MakeView(h, offset, &view_);
  PublishView();
  count_.store(0);
  return Status::OK();
}

Status PathHash::ValidateTable(uint64_t off, View* v) const {
  const uint64_t r = root<const PathRoot>()->reserved_levels;
  if (r == 0 || r > kPathMaxReserved) {
    return Status::Corruption(Prefix() + "root reserved_levels " + std::to_string(r) +
                              " is invalid");
  }
  uint64_t leaves = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(
      off, kPathTableMagic, pool().size() / 32,
      [](uint64_t n) { return TableBytes(n, 1); }, &leaves));
  auto* h = pool().At<PathTableHeader>(off);
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kTableCheckedBytes, h->check, "the table header"));
  const uint64_t want_levels = std::min<uint64_t>(r, Log2(std::max<uint64_t>(leaves, 1)) + 1);
  if (!IsPowerOfTwo(leaves) || leaves < 2 || h->levels != want_levels ||
      !pool().Contains(off, TableBytes(leaves, want_levels))) {
    return Status::Corruption(Prefix() + "table header (leaves " + std::to_string(leaves) +
                              ", levels " + std::to_string(h->levels) +
                              ") does not match the root's reserved levels " +
                              std::to_string(r));
  }
  MakeView(h, off, v);
  return Status::OK();
}

Status PathHash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(RootLayoutOf(), sizeof(PathTableHeader), &off, &count));
  View v;
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &v));
  visit(off);
  for (uint64_t l = 0; l < v.level_line[v.levels]; ++l) {
    for (uint64_t s = 0; s < kPathCellsPerLine; ++s) {
      // Only committed record cells own a record; an offset outside the pool is left for
      // Recover to report.
      if (v.lines[l].form[s] == kRecord && pool().Contains(v.lines[l].cell[s].word0, 8)) {
        SlotCodec::VisitBlocks(SlotForm::kRecord, v.lines[l].cell[s], visit);
      }
    }
  }
  return Status::OK();
}

Status PathHash::Recover(bool clean) {
  root_ = root<PathRoot>();
  uint64_t off = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(RootLayoutOf(), sizeof(PathTableHeader), &off, &stored_count));
  if (reserved_given_ && reserved_ != root_->reserved_levels) {
    return Status::InvalidArgument("option reserved_levels=" + std::to_string(reserved_) +
                                   " does not match the pool's " +
                                   std::to_string(root_->reserved_levels) +
                                   " (it is fixed when the pool is created)");
  }
  reserved_ = root_->reserved_levels;
  View v;
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &v));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(off, TableBytes(v.leaves, v.levels)));
  view_ = v;
  uint64_t count = stored_count;
  if (!clean) {
    // An interrupted path-log operation was rolled back by the undo log already; a torn
    // `path` insert left an empty token. Validate every cell and recount.
    count = 0;
    for (uint64_t i = 0; i < v.levels; ++i) {
      for (uint64_t c = 0; c < (v.leaves >> i); ++c) {
        bool occupied = false;
        PMHASH_RETURN_IF_ERROR(CheckCell(v, i, c, &occupied, nullptr));
        count += occupied ? 1 : 0;
      }
    }
    PersistRootCount(count);
  } else if (count > v.cells()) {
    return Status::Corruption(Prefix() + "root count " + std::to_string(count) +
                              " exceeds the table's " + std::to_string(v.cells()) + " cells");
  }
  count_.store(count);
  PublishView();
  return Status::OK();
}

// ---- Searches -------------------------------------------------------------------------

void PathHash::PrefetchPaths(const View& v, uint64_t hash) const {
  // The flat layout lets every cell of both paths be asked for at once (the papers'
  // "read in parallel"): their misses overlap instead of following one another.
  pm::Persister& ps = persister();
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  for (uint64_t i = 0; i < v.levels; ++i) {
    ps.Prefetch(v.LineOf(i, j1 >> i));
    ps.Prefetch(v.LineOf(i, j2 >> i));
  }
}

void PathHash::Prefetch(uint64_t hash) const {
  const View* v = live_.load(std::memory_order_acquire);
  if (v != nullptr) PrefetchPaths(*v, hash);
}

PathHash::Probe PathHash::Find(std::string_view key, uint64_t hash) const {
  Probe p;
  const View& v = view_;
  pm::Persister& ps = persister();
  if (prefetch_) PrefetchPaths(v, hash);
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  const SlotCodec::KeyMatcher matches(codec(), key, hash);
  // Level by level, bottom up, the first path's cell then the second's (the original's
  // order): the first empty cell is where an insert goes. A deleted cell leaves a hole,
  // so a search reads on to the top kept level.
  for (uint64_t i = 0; i < v.levels; ++i) {
    const uint64_t cs[2] = {j1 >> i, j2 >> i};
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && cs[1] == cs[0]) break;  // the root: both paths' cell
      PathLine* line = v.LineOf(i, cs[k]);
      const uint64_t slot = cs[k] % kPathCellsPerLine;
      ps.NoteRead(line, sizeof(PathLine));
      const uint8_t f = line->form[slot];
      if (f == kEmpty) {
        if (p.free.line == nullptr) p.free = {line, slot};
        continue;
      }
      if (matches(static_cast<SlotForm>(f), line->cell[slot])) {
        p.found = {line, slot};
        return p;
      }
    }
  }
  return p;
}

// Find's walk with no lock (validated by mu_'s version), every word an acquire load. The
// three cells of each line on the paths are matched together (MatchSlots): a key is
// stored once, so an inline match anywhere is the answer.
[[gnu::always_inline]] inline Optimistic PathHash::FindOptimistic(uint64_t hash,
                                                                 OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  if (!read->Begin(mu_)) return Optimistic::kRetry;
  const View& v = *live_.load(std::memory_order_acquire);
  if (prefetch_) PrefetchPaths(v, hash);
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  Optimistic answer = Optimistic::kAbsent;
  for (uint64_t i = 0; i < v.levels && answer == Optimistic::kAbsent; ++i) {
    const PathLine* l1 = v.LineOf(i, j1 >> i);
    read->Note(l1, sizeof(PathLine));
    answer = MatchSlots<kPathCellsPerLine>(LoadForms(l1->form), l1->cell, hash, read);
    const PathLine* l2 = v.LineOf(i, j2 >> i);
    if (answer != Optimistic::kAbsent || l2 == l1) continue;
    read->Note(l2, sizeof(PathLine));
    answer = MatchSlots<kPathCellsPerLine>(LoadForms(l2->form), l2->cell, hash, read);
  }
  return read->Valid(mu_) ? answer : Optimistic::kRetry;
}

QuickAnswer PathHash::QuickGet(uint64_t hash, uint64_t key_word) {
  return QuickTry(persister(), key_word,
                  [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
                    return FindOptimistic(hash, read);
                  });
}

Status PathHash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

__attribute__((noinline)) Status PathHash::GetFull(std::string_view key, uint64_t hash,
                                                   std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

__attribute__((noinline)) Status PathHash::GetLocked(std::string_view key, uint64_t hash,
                                                     std::string* value) {
  std::shared_lock lock(mu_);
  const Probe p = Find(key, hash);
  if (p.found.line == nullptr) return Status::NotFound();
  AssignValue(value, codec().Value(static_cast<SlotForm>(*p.found.form()), *p.found.words()));
  return Status::OK();
}

// ---- Writes -------------------------------------------------------------------------

Status PathHash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                         WriteMode mode) {
  std::unique_lock lock(mu_);
  for (int grows = 0;; ++grows) {
    const Probe p = Find(key, hash);
    if (p.found.line != nullptr) {
      if (mode == WriteMode::kInsert) return Status::AlreadyExists();
      return UpdateAt(p.found, key, value, hash);
    }
    if (mode == WriteMode::kUpdate) return Status::NotFound();
    if (p.free.line != nullptr) return InsertAt(p.free, key, value, hash);
    // Both paths are full: the original's insertion failure.
    if (!resize_enabled()) {
      ++full_path_refusals_;
      return Status::TableFull(Prefix() + "both paths of the key are full (" +
                               std::to_string(view_.levels) + " levels each) and resizing "
                               "is off (resize=off)");
    }
    if (grows == kMaxGrowsPerInsert || PathsHoldOnlyThisHash(hash) ||
        count_.load(std::memory_order_relaxed) * kMinGrowLoadInverse < view_.cells()) {
      ++full_path_refusals_;
      return Status::TableFull(Prefix() + "both paths of the key are full of keys that share "
                               "its hash bits, which no doubling separates (colliding or "
                               "crafted keys)");
    }
    // Not in the papers: double the leaves, then retry.
    PMHASH_RETURN_IF_ERROR(Grow());
  }
}

bool PathHash::PathsHoldOnlyThisHash(uint64_t hash) const {
  const View& v = view_;
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  for (uint64_t i = 0; i < v.levels; ++i) {
    for (const uint64_t c : {j1 >> i, j2 >> i}) {
      const PathLine* line = v.LineOf(i, c);
      const uint64_t s = c % kPathCellsPerLine;
      if (HashOf(static_cast<SlotForm>(line->form[s]), line->cell[s]) != hash) return false;
    }
  }
  return true;
}

Status PathHash::InsertAt(const Cell& c, std::string_view key, std::string_view value,
                          uint64_t hash) {
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  // A record (if any) is written and flushed here; the fence below orders it.
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  std::unique_ptr<pm::UndoLog::Tx> tx;
  if (logged()) {
    // Path-Log: the line's old bytes logged and persisted before it changes.
    tx = undo_log().Begin();
    if (Status s = tx->Save(c.line, sizeof(PathLine)); !s.ok()) {
      tx.reset();  // rolls back nothing: nothing changed yet
      codec().Release(form, words);
      return s;
    }
    ++undo_txs_;
    ps.Copy(c.words(), &words, sizeof(words));
    ps.Store(c.form(), static_cast<uint8_t>(form));
    ps.Persist(c.line, sizeof(PathLine));
    tx->Commit();
  } else {
    // The words, then the token, in one line (its stores persist in order); a record the
    // codec wrote is fenced first (an inline cell has nothing to order before its line).
    ps.Copy(c.words(), &words, sizeof(words));
    if (form == SlotForm::kRecord) ps.Fence();
    ps.Store(c.form(), static_cast<uint8_t>(form));
    ps.Persist(c.line, sizeof(PathLine));
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status PathHash::UpdateAt(const Cell& c, std::string_view key, std::string_view value,
                          uint64_t hash) {
  if (!logged()) return UpdateSlot(c.form(), c.words(), key, value, hash);
  // Path-Log: the new words (a new record, if any, written and flushed first) and token
  // replace the old under one transaction; the old record is freed after the commit.
  const auto old_form = static_cast<SlotForm>(*c.form());
  const KvWords old = *c.words();
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  auto tx = undo_log().Begin();
  if (Status s = tx->Save(c.line, sizeof(PathLine)); !s.ok()) {
    tx.reset();
    codec().Release(form, words);
    return s;
  }
  ++undo_txs_;
  ps.Copy(c.words(), &words, sizeof(words));
  ps.Store(c.form(), static_cast<uint8_t>(form));
  ps.Persist(c.line, sizeof(PathLine));
  tx->Commit();
  codec().Release(old_form, old);  // durably unreachable since the commit
  return Status::OK();
}

Status PathHash::DeleteAt(const Cell& c) {
  const auto form = static_cast<SlotForm>(*c.form());
  const KvWords old = *c.words();
  pm::Persister& ps = persister();
  if (logged()) {
    auto tx = undo_log().Begin();
    PMHASH_RETURN_IF_ERROR(tx->Save(c.line, sizeof(PathLine)));
    ++undo_txs_;
    ps.Store(c.form(), kEmpty);
    ps.Persist(c.line, sizeof(PathLine));
    tx->Commit();
  } else {
    // The token cleared and persisted: committed. The words stay (no extra write).
    ps.Store(c.form(), kEmpty);
    ps.Persist(c.form(), 1);
  }
  codec().Release(form, old);  // durably unreachable now
  count_.fetch_sub(1, std::memory_order_relaxed);
  return Status::OK();
}

Status PathHash::DoDelete(std::string_view key, uint64_t hash) {
  std::unique_lock lock(mu_);
  const Probe p = Find(key, hash);
  if (p.found.line == nullptr) return Status::NotFound();
  return DeleteAt(p.found);
}

uint64_t PathHash::Count() const { return count_.load(std::memory_order_acquire); }

// ---- Resize -------------------------------------------------------------------------

bool PathHash::Place(const View& v, uint8_t form, const KvWords& words, uint64_t hash) const {
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  for (uint64_t i = 0; i < v.levels; ++i) {
    for (const uint64_t c : {j1 >> i, j2 >> i}) {
      PathLine* line = v.LineOf(i, c);
      const uint64_t s = c % kPathCellsPerLine;
      if (line->form[s] != kEmpty) continue;
      persister().Copy(&line->cell[s], &words, sizeof(words));
      persister().Store(&line->form[s], form);
      return true;
    }
  }
  return false;
}

Status PathHash::Grow() {
  const View old = view_;
  const uint64_t n2 = old.leaves * 2;
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n2, &offset));
  View nv;
  MakeView(pool().At<PathTableHeader>(offset), offset, &nv);
  pm::Persister& ps = persister();
  // Old level i is new level i + 1, cell for cell and line for line: the old levels the
  // new tree keeps are one contiguous copy. (NoteRead: the migration reads them.)
  const uint64_t copied = nv.levels - 1;  // old levels 0 .. copied-1
  const uint64_t copy_lines = old.level_line[copied];
  ps.NoteRead(old.lines, copy_lines * sizeof(PathLine));
  ps.Copy(&nv.lines[nv.level_line[1]], old.lines, copy_lines * sizeof(PathLine));
  // The old levels the new tree no longer keeps (its top, when it already kept R
  // levels): their keys are placed again, first empty cell of their new paths.
  uint64_t placed = 0;
  for (uint64_t i = copied; i < old.levels; ++i) {
    ps.NoteRead(old.LineOf(i, 0), (old.level_line[i + 1] - old.level_line[i]) * sizeof(PathLine));
    for (uint64_t c = 0; c < (old.leaves >> i); ++c) {
      const PathLine* line = old.LineOf(i, c);
      const uint8_t f = line->form[c % kPathCellsPerLine];
      if (f == kEmpty) continue;
      const KvWords& w = line->cell[c % kPathCellsPerLine];
      if (!Place(nv, f, w, HashOf(static_cast<SlotForm>(f), w))) {
        allocator().Free(offset);  // unreachable: nothing links it
        ++full_path_refusals_;
        return Status::TableFull(Prefix() + "doubling the table found no cell for a key of " +
                                 CellName(old, i, c) + " (its new paths are full)");
      }
      ++placed;
    }
  }
  ps.Flush(nv.header, TableBytes(n2, nv.levels));
  // The resize's commit point: one failure-atomic 8-byte store of root.table.
  PublishRootTable(offset);
  allocator().Free(old.offset);  // only after the switch is durable
  view_ = nv;
  PublishView();
  ++resizes_;
  replaced_top_keys_ += placed;
  return Status::OK();
}

// ---- Iteration ----------------------------------------------------------------------

Status PathHash::ForEach(const Visitor& fn) const {
  std::shared_lock lock(mu_);
  const View& v = view_;
  persister().NoteRead(v.lines, v.level_line[v.levels] * sizeof(PathLine));
  for (uint64_t l = 0; l < v.level_line[v.levels]; ++l) {
    for (uint64_t s = 0; s < kPathCellsPerLine; ++s) {
      const auto form = static_cast<SlotForm>(v.lines[l].form[s]);
      if (form == SlotForm::kEmpty) continue;
      const KvWords w = v.lines[l].cell[s];
      if (!fn(codec().Key(form, w), codec().Value(form, w))) return Status::OK();
    }
  }
  return Status::OK();
}

Status PathHash::DoScan(ScanPage* page) const {
  std::shared_lock lock(mu_);  // the whole page: no resize meanwhile
  const View& v = view_;
  const uint64_t homes = v.leaves / 2;
  // A home is a first leaf; a key of it may be on its second path, anywhere in the right
  // half, so each run reads the whole table and keeps its homes' keys.
  const auto collect = [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    for (uint64_t l = 0; l < v.level_line[v.levels]; ++l) {
      for (uint64_t s = 0; s < kPathCellsPerLine; ++s) {
        const auto form = static_cast<SlotForm>(v.lines[l].form[s]);
        if (form == SlotForm::kEmpty) continue;
        const KvWords& w = v.lines[l].cell[s];
        const uint64_t hash = HashOf(form, w);
        const uint64_t home = Reduce(hash, homes);
        if (home < first || home >= last) continue;
        AddScanEntry(out, hash, codec().Key(form, w), codec().Value(form, w));
      }
    }
  };
  page->CollectHomes(homes, homes, collect);
  return Status::OK();
}

// ---- Stats and checks ---------------------------------------------------------------

void PathHash::FillStats(IndexStats* stats) const {
  std::shared_lock lock(mu_);
  stats->count = Count();
  stats->key_slots = view_.cells();
  stats->dram_bytes = sizeof(*this) + views_.size() * sizeof(View);
  auto& c = stats->engine_counters;
  c["leaves"] = view_.leaves;
  c["levels"] = view_.levels;
  c["reserved_levels"] = reserved_;
  c["cells"] = view_.cells();
  c["resizes"] = resizes_;
  c["replaced_top_keys"] = replaced_top_keys_;
  c["full_path_refusals"] = full_path_refusals_;
  c["undo_txs"] = logged() ? undo_txs_ : undo_txs();
}

Status PathHash::CheckCell(const View& v, uint64_t i, uint64_t c, bool* occupied,
                           std::string* key) const {
  const PathLine* line = v.LineOf(i, c);
  const uint8_t f = line->form[c % kPathCellsPerLine];
  *occupied = f != kEmpty;
  if (f == kEmpty) return Status::OK();
  const KvWords& w = line->cell[c % kPathCellsPerLine];
  const auto form = static_cast<SlotForm>(f);
  if (f > kRecord || !codec().Plausible(form, w)) {
    return Status::Corruption(Prefix() + CellName(v, i, c) + " has token " +
                              std::to_string(f) + " that does not match its contents");
  }
  uint64_t hash = HashOf(form, w);
  if (key != nullptr) {
    // The full check: the key's own bytes hashed (a record's hash word must agree).
    *key = codec().Key(form, w);
    hash = KeyHash(*key);
    if (form == SlotForm::kRecord && w.word1 != hash) {
      return Status::Corruption(Prefix() + CellName(v, i, c) + " has a wrong hash word");
    }
  }
  uint64_t j1 = 0, j2 = 0;
  Leaves(hash, v.leaves, &j1, &j2);
  if ((j1 >> i) != c && (j2 >> i) != c) {
    return Status::Corruption(Prefix() + CellName(v, i, c) +
                              " holds a key whose paths do not pass through it");
  }
  return Status::OK();
}

Status PathHash::CheckInvariants() const {
  std::shared_lock lock(mu_);
  const View& v = view_;
  uint64_t off = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(RootLayoutOf(), sizeof(PathTableHeader), &off, &stored_count));
  View checked;
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &checked));
  if (off != v.offset || checked.leaves != v.leaves || checked.levels != v.levels) {
    return Status::Corruption(Prefix() + "the root names the table at pool offset " +
                              std::to_string(off) + ", not the live one at " +
                              std::to_string(v.offset));
  }
  std::set<std::string> keys;
  std::string key;
  uint64_t n = 0;
  for (uint64_t i = 0; i < v.levels; ++i) {
    for (uint64_t c = 0; c < (v.leaves >> i); ++c) {
      bool occupied = false;
      PMHASH_RETURN_IF_ERROR(CheckCell(v, i, c, &occupied, &key));
      if (!occupied) continue;
      if (!keys.insert(key).second) {
        return Status::Corruption(Prefix() + "a key is stored twice (again in " +
                                  CellName(v, i, c) + ")");
      }
      ++n;
    }
  }
  if (n != Count()) {
    return Status::Corruption(Prefix() + "Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(n) + " cells are occupied");
  }
  return Status::OK();
}

void PathHash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  std::shared_lock lock(mu_);
  const View& v = view_;
  mark(v.offset, sizeof(PathTableHeader), pm::Region::kEngineMetadata, true);
  for (uint64_t i = 0; i < v.levels; ++i) {
    const uint64_t cells = v.leaves >> i;
    for (uint64_t l = 0; l * kPathCellsPerLine < cells; ++l) {
      const PathLine& line = v.lines[v.level_line[i] + l];
      const uint64_t used = std::min(kPathCellsPerLine, cells - l * kPathCellsPerLine);
      // The cells and tokens in use; the unused slots of a level's last line and the
      // padding are never read.
      mark(pool().ToOffset(&line), used * sizeof(KvWords), pm::Region::kSlots, false);
      mark(pool().ToOffset(&line.form[0]), used, pm::Region::kSlots, false);
      for (uint64_t s = 0; s < used; ++s) {
        codec().DescribeRecord(static_cast<SlotForm>(line.form[s]), line.cell[s], mark);
      }
    }
  }
}

// ---- Registration -------------------------------------------------------------------

void RegisterEngines_path(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {
      OptionSpec::Uint("reserved_levels", kPathDefaultReserved, 1, kPathMaxReserved,
                       "levels of the tree kept, bottom up (path shortening; the papers' 20); "
                       "a key's two paths hold this many cells each; fixed when the pool is "
                       "created"),
      OptionSpec::Uint("leaves", std::nullopt, 2, uint64_t{1} << 40,
                       "leaves of the first table, a power of two (auto: initial_capacity "
                       "rounded up to a power of two, else 1024)"),
      OptionSpec::Bool("prefetch", true,
                       "a probe asks for every line of both paths before it reads the first "
                       "(the flat layout's parallel reads; a CPU hint, same reads and "
                       "persists)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "the leaves double when an insert finds both paths full",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true};
  // 4 leaves and 3 kept levels (7 cells): the first doublings within a few keys, and the
  // top level's re-placement from the third on.
  info.test = {.crash_options = {{"leaves", "4"}, {"reserved_levels", "3"}},
               .growth_counters = {"resizes"},
               .crash_script_scale = 0.75};  // 18,303 crash images at 1 (make test's budget)
  info.description = {"path",
                      "inverted binary tree of cells, two hash paths, position sharing, "
                      "path shortening; token commits, no log",
                      "Path hashing (MSST'17, TPDS'18; baseline of 000 and 004)",
                      /*crash_consistent=*/true};
  registry.Add<PathHash>(info, PathHash::Logging::kNone);
  info.test.crash_script_scale = 0.35;  // four fences per logged write: 20,270 images at 0.5
  info.description = {"path-log",
                      "path hashing with every write under the undo log (the papers' "
                      "Path-Log / Path-L logging baseline)",
                      "Path hashing (MSST'17, TPDS'18; baseline of 000 and 004)",
                      /*crash_consistent=*/true};
  registry.Add<PathHash>(std::move(info), PathHash::Logging::kUndo);
}

}  // namespace pmhash::engines
