// Group hashing (paper 004). Layout, invariants, persist order and locking: group.h.
#include "engines/group/group.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

unsigned Log2(uint64_t v) { return static_cast<unsigned>(63 - __builtin_clzll(v)); }

uint64_t RoundUp(uint64_t v, uint64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

constexpr RootLayout kRootLayout{kGroupRootMagic, kGroupVersion, sizeof(GroupRoot),
                                 sizeof(GroupRoot) - sizeof(EngineRoot)};

constexpr size_t kTableCheckedBytes = offsetof(GroupTableHeader, check);

}  // namespace

std::string GroupHash::CellName(const View& v, int level, uint64_t cell) {
  const KvWords* cells = level == 1 ? v.tab1 : v.tab2;
  return "level-" + std::to_string(level) + " cell " + std::to_string(cell) + " (pool offset " +
         std::to_string(v.offset + (reinterpret_cast<const char*>(&cells[cell]) - v.table)) +
         ")";
}

GroupHash::GroupHash() { stripes_.Reset(kGroupStripes, Log2(kGroupDefaultGroupSize)); }
GroupHash::~GroupHash() = default;

GroupHash::View GroupHash::MakeView(char* table, uint64_t offset, uint64_t cells) {
  View v;
  v.table = table;
  v.offset = offset;
  v.cells = cells;
  v.form1 = reinterpret_cast<uint8_t*>(table + GroupLayout::Form1(cells));
  v.form2 = reinterpret_cast<uint8_t*>(table + GroupLayout::Form2(cells));
  v.tab1 = reinterpret_cast<KvWords*>(table + GroupLayout::Tab1(cells));
  v.tab2 = reinterpret_cast<KvWords*>(table + GroupLayout::Tab2(cells));
  return v;
}

// ---- Options, creation, recovery ----------------------------------------------------

Status GroupHash::Configure(EngineOptions& options, const Options& index_options) {
  group_size_ = options.Uint("group_size");
  group_size_given_ = options.Given("group_size");
  resize_ = options.Bool("resize");
  persist_count_ = options.Bool("persist_count");
  initial_cells_ = options.Uint("cells");
  initial_capacity_ = index_options.initial_capacity;
  if (!IsPowerOfTwo(group_size_)) {
    return Status::InvalidArgument(
        "option group_size=" + std::to_string(group_size_) + " must be a power of two in [" +
        std::to_string(kGroupMinGroupSize) + ", " + std::to_string(kGroupMaxGroupSize) + "]");
  }
  group_shift_ = Log2(group_size_);
  stripes_.set_area_shift(group_shift_);
  return Status::OK();
}

uint64_t GroupHash::LevelCellsFor(uint64_t keys) const {
  // `cells` asks for a total over both levels; initial_capacity for a number of keys,
  // which then fill the table to a load factor of 0.5 (groups start to overflow near 0.8).
  uint64_t n = kGroupDefaultLevelCells;
  if (initial_cells_ != 0) {
    n = (initial_cells_ + 1) / 2;
  } else if (keys != 0) {
    n = keys;
  }
  return RoundUp(std::max(n, group_size_), group_size_);
}

Status GroupHash::NewTable(uint64_t cells, uint64_t* offset) {
  const uint64_t bytes = GroupLayout::Bytes(cells);
  PMHASH_RETURN_IF_ERROR(
      AllocateBlock(bytes, "a table of " + std::to_string(2 * cells) + " cells", offset));
  char* table = pool().At<char>(*offset);
  pm::Persister& p = persister();
  // The table is unreachable until a root store links it, so one flush pass and one
  // fence suffice; the header goes in last for clarity, not for safety.
  p.Zero(table + sizeof(GroupTableHeader), bytes - sizeof(GroupTableHeader));
  auto* h = reinterpret_cast<GroupTableHeader*>(table);
  p.Zero(h, sizeof(*h));
  p.Store(&h->level_cells, cells);
  p.Store(&h->group_size, group_size_);
  p.Store(&h->magic, kGroupTableMagic);
  p.Store(&h->check, MetadataCheck(h, kTableCheckedBytes));
  return Status::OK();
}

Status GroupHash::Create() {
  const uint64_t cells = LevelCellsFor(initial_capacity_);
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(cells, &offset));
  persister().Persist(pool().At<char>(offset), GroupLayout::Bytes(cells));
  root_ = root<GroupRoot>();
  persister().Store(&root_->group_size, group_size_);
  CreateRoot(kRootLayout, offset);
  view_ = MakeView(pool().At<char>(offset), offset, cells);
  base_count_ = 0;
  total_.store(0);
  level_cells_.store(cells, std::memory_order_release);
  return Status::OK();
}

Status GroupHash::ValidateTable(uint64_t off, uint64_t* cells) const {
  const uint64_t g = root<const GroupRoot>()->group_size;
  if (!IsPowerOfTwo(g) || g < kGroupMinGroupSize || g > kGroupMaxGroupSize) {
    return Status::Corruption("group: root group_size " + std::to_string(g) + " is invalid");
  }
  const auto* h = pool().At<const GroupTableHeader>(off);
  if (h->magic != kGroupTableMagic) {
    return Status::Corruption("group: table header magic is wrong at offset " +
                              std::to_string(off));
  }
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kTableCheckedBytes, h->check, "the table header"));
  const uint64_t n = h->level_cells;
  if (h->group_size != g || n == 0 || n % g != 0 || n > pool().size() / 32 ||
      !pool().Contains(off, GroupLayout::Bytes(n))) {
    return Status::Corruption("group: table header (level_cells " + std::to_string(n) +
                              ", group_size " + std::to_string(h->group_size) +
                              ") does not fit the root or the pool");
  }
  *cells = n;
  return Status::OK();
}

Status GroupHash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, n = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(GroupTableHeader), &off, &count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  visit(off);
  const View v = MakeView(pool().At<char>(off), off, n);
  for (uint64_t i = 0; i < n; ++i) {
    // Only committed record cells own a record; an offset outside the pool is left for
    // Recover to report (Plausible) rather than handed to the allocator.
    if (v.form1[i] == static_cast<uint8_t>(SlotForm::kRecord) &&
        pool().Contains(v.tab1[i].word0, 8)) {
      SlotCodec::VisitBlocks(SlotForm::kRecord, v.tab1[i], visit);
    }
    if (v.form2[i] == static_cast<uint8_t>(SlotForm::kRecord) &&
        pool().Contains(v.tab2[i].word0, 8)) {
      SlotCodec::VisitBlocks(SlotForm::kRecord, v.tab2[i], visit);
    }
  }
  return Status::OK();
}

uint64_t GroupHash::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;  // the record form keeps the hash
  return HashKey(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

Status GroupHash::RecoverScan(uint64_t* count) {
  // Algorithm 4: scan the whole table; reset the cells whose bitmap is 0 (lines 5-7 and
  // 11-13), count the others (lines 9 and 15). Only cells with stray words are written.
  pm::Persister& p = persister();
  const View& v = view_;
  const uint64_t n = v.cells;
  uint64_t occupied = 0;
  uint64_t resets = 0;
  for (int level = 1; level <= 2; ++level) {
    uint8_t* forms = level == 1 ? v.form1 : v.form2;
    KvWords* cells = level == 1 ? v.tab1 : v.tab2;
    for (uint64_t i = 0; i < n; ++i) {
      const uint8_t f = forms[i];
      KvWords& c = cells[i];
      if (f == static_cast<uint8_t>(SlotForm::kEmpty)) {
        if (c.word0 != 0 || c.word1 != 0) {
          p.Zero(&c, sizeof(c));  // Alg. 4 line 6 / 12: Reset(key, value)
          p.Flush(&c, sizeof(c));  // line 7 / 13 (one fence for all, below)
          ++resets;
        }
        continue;
      }
      const auto form = static_cast<SlotForm>(f);
      if ((form != SlotForm::kInline && form != SlotForm::kRecord) ||
          !codec().Plausible(form, c)) {
        return Status::Corruption("group: " + CellName(v, level, i) + " has metadata byte " +
                                  std::to_string(f) + " that does not match its contents "
                                  "(damaged pool)");
      }
      const uint64_t home = Reduce(HashOf(form, c), n);
      const bool placed = level == 1 ? home == i : (home >> group_shift_) == (i >> group_shift_);
      if (!placed) {
        return Status::Corruption("group: " + CellName(v, level, i) +
                                  " holds a key whose home cell is " + std::to_string(home) +
                                  " (damaged pool)");
      }
      ++occupied;
    }
  }
  if (resets > 0) p.Fence();
  PersistRootCount(occupied);  // Alg. 4 lines 19-20: the correct count
  recovered_resets_ = resets;
  *count = occupied;
  return Status::OK();
}

Status GroupHash::Recover(bool clean) {
  root_ = root<GroupRoot>();
  uint64_t off = 0, n = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, sizeof(GroupTableHeader), &off, &stored_count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  if (group_size_given_ && group_size_ != root_->group_size) {
    return Status::InvalidArgument("option group_size=" + std::to_string(group_size_) +
                                   " does not match the pool's group size " +
                                   std::to_string(root_->group_size) +
                                   " (it is fixed when the pool is created)");
  }
  group_size_ = root_->group_size;
  group_shift_ = Log2(group_size_);
  stripes_.set_area_shift(group_shift_);
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(off, GroupLayout::Bytes(n)));
  view_ = MakeView(pool().At<char>(off), off, n);
  uint64_t count = 0;
  if (clean) {
    count = stored_count;
    if (count > 2 * n) {
      return Status::Corruption("group: root count " + std::to_string(count) +
                                " exceeds the table's " + std::to_string(2 * n) + " cells");
    }
  } else {
    PMHASH_RETURN_IF_ERROR(RecoverScan(&count));
  }
  base_count_ = count;
  total_.store(count);
  level_cells_.store(n, std::memory_order_release);
  return Status::OK();
}

// ---- Operations ---------------------------------------------------------------------

GroupHash::Probe GroupHash::Find(std::string_view key, uint64_t hash, uint64_t home) const {
  Probe p;
  const View& v = view_;
  size_t compared = 0;
  // Alg. 2 line 3: the level-1 cell, bitmap and key.
  uint8_t* f1 = &v.form1[home];
  p.lines = 1;
  if (*f1 != 0) {
    ++compared;
    if (codec().KeyEquals(static_cast<SlotForm>(*f1), v.tab1[home], key, hash)) {
      p.form = f1;
      p.cell = &v.tab1[home];
      p.lines += 1 + (*f1 == static_cast<uint8_t>(SlotForm::kRecord));
      return p;
    }
  } else {
    p.free_form = f1;  // Alg. 1 line 3: the level-1 cell is empty
    p.free_cell = &v.tab1[home];
  }
  // Alg. 2 lines 7-12: the level-2 group, j = k - k % G. Unlike Alg. 2 as printed, the
  // bitmap is checked too: the words of an empty cell never match.
  const uint64_t first = home & ~(group_size_ - 1);
  uint8_t* forms = &v.form2[first];
  KvWords* cells = &v.tab2[first];
  const uint64_t g = group_size_;
  p.lines += (g + pm::kCacheLine - 1) / pm::kCacheLine;
  for (uint64_t i = 0; i < g; i += 8) {
    const uint64_t end = std::min<uint64_t>(i + 8, g);
    if (end - i == 8) {
      // Eight metadata bytes at a time: an all-empty word skips eight cells.
      uint64_t word;
      std::memcpy(&word, forms + i, 8);
      if (word == 0) {
        if (p.free_form == nullptr) {  // Alg. 1 line 15: first empty level-2 cell
          p.free_form = &forms[i];
          p.free_cell = &cells[i];
        }
        continue;
      }
    }
    for (uint64_t j = i; j < end; ++j) {
      const uint8_t f = forms[j];
      if (f == 0) {
        if (p.free_form == nullptr) {
          p.free_form = &forms[j];
          p.free_cell = &cells[j];
        }
        continue;
      }
      ++compared;
      if (codec().KeyEquals(static_cast<SlotForm>(f), cells[j], key, hash)) {
        p.form = &forms[j];
        p.cell = &cells[j];
        p.lines += (compared + 3) / 4 + (f == static_cast<uint8_t>(SlotForm::kRecord));
        return p;
      }
    }
  }
  p.lines += (compared + 3) / 4;
  return p;
}

Status GroupHash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  uint64_t home = 0, cells = 0;
  Stripe& s = LockHome(hash, LockMode::kShared, &home, &cells);
  HeldLock<RwSpinLock> guard(s.mu, LockMode::kShared);
  const Probe p = Find(key, hash, home);
  persister().NoteRead(p.lines);
  if (p.form == nullptr) return Status::NotFound();
  value->assign(codec().Value(static_cast<SlotForm>(*p.form), *p.cell));
  return Status::OK();
}

Status GroupHash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                          WriteMode mode) {
  for (;;) {
    uint64_t home = 0, cells = 0;
    {
      Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &cells);
      HeldLock<RwSpinLock> guard(s.mu, LockMode::kExclusive);
      const Probe p = Find(key, hash, home);
      persister().NoteRead(p.lines);
      if (p.form != nullptr) {
        if (mode == WriteMode::kInsert) return Status::AlreadyExists();
        return UpdateAt(p, key, value, hash);
      }
      if (mode == WriteMode::kUpdate) return Status::NotFound();
      if (p.free_form != nullptr) return InsertAt(p, key, value, hash, s);
      // Alg. 1 line 25: no empty cell in the group.
      if (!resize_) {
        full_group_refusals_.fetch_add(1, std::memory_order_relaxed);
        return Status::TableFull(
            "group: group " + std::to_string(home >> group_shift_) + " is full (" +
            std::to_string(group_size_) + " level-2 cells in use) and resizing is off "
            "(resize=off)");
      }
    }
    // The paper stops at "the capacity needs to be expanded": double, then retry.
    PMHASH_RETURN_IF_ERROR(Grow(cells));
  }
}

void GroupHash::NoteCountChange() {
  // persist_count=on: Alg. 1 lines 8-9 / Alg. 3 lines 8-9 as printed, for cost fidelity.
  // Concurrent writers may store their totals out of order; recovery recounts anyway.
  PersistRootCount(total_.load(std::memory_order_relaxed));
}

Status GroupHash::InsertAt(const Probe& p, std::string_view key, std::string_view value,
                           uint64_t hash, Stripe& stripe) {
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  // A record (if any) is written and flushed here; the fence below orders it too.
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  // Alg. 1 lines 4-5 (16-17): Insert(key, value); Persist(key, value) (its fence is
  // Publish's).
  ps.Copy(p.free_cell, &words, sizeof(words));
  ps.Flush(p.free_cell, sizeof(words));
  // Alg. 1 lines 6-7 (18-19): atomically set the bitmap, persist: the commit point.
  ps.Publish(p.free_form, static_cast<uint8_t>(form));
  // Alg. 1 lines 8-9 (20-21): count.
  stripe.delta.fetch_add(1, std::memory_order_relaxed);
  if (persist_count_) {
    total_.fetch_add(1, std::memory_order_relaxed);
    NoteCountChange();
  }
  return Status::OK();
}

Status GroupHash::UpdateAt(const Probe& p, std::string_view key, std::string_view value,
                           uint64_t hash) {
  return UpdateSlot(p.form, p.cell, key, value, hash);  // the slot encoding's update
}

Status GroupHash::DoDelete(std::string_view key, uint64_t hash) {
  uint64_t home = 0, cells = 0;
  Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &cells);
  HeldLock<RwSpinLock> guard(s.mu, LockMode::kExclusive);
  const Probe p = Find(key, hash, home);
  persister().NoteRead(p.lines);
  if (p.form == nullptr) return Status::NotFound();
  pm::Persister& ps = persister();
  const auto form = static_cast<SlotForm>(*p.form);
  const KvWords old = *p.cell;
  // Alg. 3 lines 4-5 (16-17): atomically clear the bitmap first, persist: committed.
  ps.Store(p.form, static_cast<uint8_t>(SlotForm::kEmpty));
  ps.Persist(p.form, 1);
  // Alg. 3 lines 6-7 (18-19): Delete(key, value); Persist(key, value).
  ps.Zero(p.cell, sizeof(KvWords));
  ps.Persist(p.cell, sizeof(KvWords));
  codec().Release(form, old);  // durably unreachable since line 5
  // Alg. 3 lines 8-9 (20-21): count.
  s.delta.fetch_sub(1, std::memory_order_relaxed);
  if (persist_count_) {
    total_.fetch_sub(1, std::memory_order_relaxed);
    NoteCountChange();
  }
  return Status::OK();
}

uint64_t GroupHash::Count() const {
  int64_t c = static_cast<int64_t>(base_count_);
  for (size_t i = 0; i < stripes_.size(); ++i) {
    c += stripes_[i].delta.load(std::memory_order_relaxed);
  }
  return c < 0 ? 0 : static_cast<uint64_t>(c);  // transiently negative only mid-mutation
}

Status GroupHash::ForEach(const Visitor& fn) const {
  const IterationScope iterating(this, resize_mu_);
  // One group (its level-1 cells and its level-2 group) at a time.
  const View& v = view_;
  return VisitAreas(
      stripes_, v.cells, group_size_,
      [&](uint64_t first, uint64_t last, Entries* batch) {
        for (int level = 1; level <= 2; ++level) {
          const uint8_t* forms = level == 1 ? v.form1 : v.form2;
          const KvWords* cells = level == 1 ? v.tab1 : v.tab2;
          for (uint64_t i = first; i < last; ++i) {
            const auto f = static_cast<SlotForm>(forms[i]);
            if (f == SlotForm::kEmpty) continue;
            batch->emplace_back(codec().Key(f, cells[i]), codec().Value(f, cells[i]));
          }
        }
      },
      fn);
}

// ---- Resize -------------------------------------------------------------------------

bool GroupHash::Place(const View& v, uint64_t group_size, uint8_t form, const KvWords& words,
                      uint64_t hash, pm::Persister& persister) {
  const uint64_t k = Reduce(hash, v.cells);
  uint8_t* f = &v.form1[k];
  KvWords* c = &v.tab1[k];
  if (*f != 0) {
    f = nullptr;
    const uint64_t first = k & ~(group_size - 1);
    for (uint64_t i = first; i < first + group_size; ++i) {
      if (v.form2[i] == 0) {
        f = &v.form2[i];
        c = &v.tab2[i];
        break;
      }
    }
    if (f == nullptr) return false;
  }
  persister.Copy(c, &words, sizeof(words));
  persister.Store(f, form);
  return true;
}

Status GroupHash::Grow(uint64_t observed_cells) {
  if (IterationScope::Active(this)) {
    return Status::TableFull(
        "group: a group is full and the table cannot grow while ForEach runs on this thread");
  }
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  // Every stripe: no operation runs on the table while it is replaced.
  const Stripes<Stripe>::AllHeld all(stripes_);
  if (level_cells_.load(std::memory_order_relaxed) != observed_cells) {
    return Status::OK();  // another thread grew the table meanwhile
  }
  const View old = view_;
  const uint64_t n2 = old.cells * 2;
  if (n2 > pool().size() / 32) {
    return Status::PoolFull("group: the table cannot double beyond the pool");
  }
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n2, &offset));
  const View nv = MakeView(pool().At<char>(offset), offset, n2);
  // Migration reads the old table only, so it stays intact until the switch. Doubling
  // sends home cell k to 2k or 2k+1 (Reduce), so old group g's keys land in new groups
  // 2g and 2g+1, and at most G of them collide: Place cannot fail.
  for (int level = 1; level <= 2; ++level) {
    const uint8_t* forms = level == 1 ? old.form1 : old.form2;
    const KvWords* cells = level == 1 ? old.tab1 : old.tab2;
    for (uint64_t i = 0; i < old.cells; ++i) {
      const uint8_t f = forms[i];
      if (f == 0) continue;
      const uint64_t hash = HashOf(static_cast<SlotForm>(f), cells[i]);
      if (!Place(nv, group_size_, f, cells[i], hash, persister())) {
        allocator().Free(offset);  // unreachable: nothing links it
        return Status::Corruption("group: resize could not place a key of " +
                                  CellName(old, level, i) +
                                  " (the table violates its invariants)");
      }
    }
  }
  pm::Persister& ps = persister();
  ps.Flush(nv.table, GroupLayout::Bytes(n2));
  // The resize's commit point: one failure-atomic 8-byte store of root.table.
  PublishRootTable(offset);
  allocator().Free(old.offset);  // only after the switch is durable
  view_ = nv;
  level_cells_.store(n2, std::memory_order_release);
  resizes_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

// ---- Stats and checks ---------------------------------------------------------------

void GroupHash::FillStats(IndexStats* stats) const {
  const uint64_t n = level_cells_.load(std::memory_order_acquire);
  stats->count = Count();
  stats->key_slots = 2 * n;
  stats->dram_bytes = sizeof(*this) + stripes_.size() * sizeof(Stripe);
  auto& c = stats->engine_counters;
  c["group_size"] = group_size_;
  c["level_cells"] = n;
  c["resizes"] = resizes_.load(std::memory_order_relaxed);
  c["full_group_refusals"] = full_group_refusals_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs();
  c["recovery_cells_reset"] = recovered_resets_;
  c["persist_count"] = persist_count_ ? 1 : 0;
}

Status GroupHash::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  const View& v = view_;
  const uint64_t n = v.cells;
  // The metadata as Recover validated it (a damaged pool may be checked right after open).
  uint64_t off = 0, table_cells = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(GroupTableHeader), &off, &stored_count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &table_cells));
  if (off != v.offset || table_cells != n) {
    return Status::Corruption("group: the root names the table at pool offset " +
                              std::to_string(off) + ", not the live one at " +
                              std::to_string(v.offset));
  }
  uint64_t occupied = 0;
  std::unordered_set<std::string> keys;
  for (int level = 1; level <= 2; ++level) {
    const uint8_t* forms = level == 1 ? v.form1 : v.form2;
    const KvWords* cells = level == 1 ? v.tab1 : v.tab2;
    for (uint64_t i = 0; i < n; ++i) {
      const auto f = static_cast<SlotForm>(forms[i]);
      if (f == SlotForm::kEmpty) {
        if (cells[i].word0 != 0 || cells[i].word1 != 0) {
          return Status::Corruption("group: empty " + CellName(v, level, i) +
                                    " has stray words");
        }
        continue;
      }
      if ((f != SlotForm::kInline && f != SlotForm::kRecord) || !codec().Plausible(f, cells[i])) {
        return Status::Corruption("group: " + CellName(v, level, i) + " with metadata byte " +
                                  std::to_string(forms[i]) + " is malformed");
      }
      const std::string key(codec().Key(f, cells[i]));
      const uint64_t hash = HashKey(key);
      if (f == SlotForm::kRecord && cells[i].word1 != hash) {
        return Status::Corruption("group: " + CellName(v, level, i) + " has a wrong hash word");
      }
      const uint64_t home = Reduce(hash, n);
      if (level == 1 ? home != i : (home >> group_shift_) != (i >> group_shift_)) {
        return Status::Corruption("group: " + CellName(v, level, i) +
                                  " holds a key whose home cell is " + std::to_string(home) +
                                  ", outside its group");
      }
      if (!keys.insert(key).second) {
        return Status::Corruption("group: a key is stored twice (again in " +
                                  CellName(v, level, i) + ")");
      }
      ++occupied;
    }
  }
  if (occupied != Count()) {
    return Status::Corruption("group: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(occupied) + " cells are occupied");
  }
  return Status::OK();
}

void GroupHash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  const View& v = view_;
  const uint64_t n = v.cells;
  mark(v.offset, sizeof(GroupTableHeader), pm::Region::kEngineMetadata, true);
  mark(v.offset + GroupLayout::Form1(n), 2 * n, pm::Region::kSlots, false);
  mark(v.offset + GroupLayout::Tab1(n), 2 * n * sizeof(KvWords), pm::Region::kSlots, false);
  for (int level = 1; level <= 2; ++level) {
    const uint8_t* forms = level == 1 ? v.form1 : v.form2;
    const KvWords* cells = level == 1 ? v.tab1 : v.tab2;
    for (uint64_t i = 0; i < n; ++i) {
      codec().DescribeRecord(static_cast<SlotForm>(forms[i]), cells[i], mark);
    }
  }
}

void RegisterEngines_group(EngineRegistry& registry) {
  EngineInfo info;
  info.description = {"group",
                      "two-level table; collision cells shared per group; bitmap commit; "
                      "recovery scan",
                      "004 Group hashing (ICPP'18)", /*crash_consistent=*/true};
  info.options = {OptionSpec::Uint("group_size", kGroupDefaultGroupSize, kGroupMinGroupSize,
                                   kGroupMaxGroupSize,
                                   "cells per group, a power of two (the paper's 256); fixed "
                                   "when the pool is created"),
                  OptionSpec::Bool("persist_count", false,
                                   "persist the key count after every insert and delete "
                                   "(Alg. 1 lines 8-9 as printed); off: at close, recounted "
                                   "after a crash"),
                  OptionSpec::Uint("cells", std::nullopt, 2 * kGroupMinGroupSize,
                                   uint64_t{1} << 40,
                                   "cells of the first table over both levels (auto: 2 x "
                                   "initial_capacity, else 8192)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "the table doubles when a group is full",
                       .refuses_when_full = true};
  // Groups of 8 cells (paper: 256) fill after a few dozen keys: many resizes.
  info.test = {.crash_options = {{"group_size", "8"}}, .growth_counters = {"resizes"}};
  registry.Add<GroupHash>(std::move(info));
}

}  // namespace pmhash::engines
