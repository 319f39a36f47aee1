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

// The root of a pool of layout `version` (kGroupVersion, or kGroupTaggedVersion).
RootLayout RootLayoutOf(uint32_t version) {
  return {kGroupRootMagic, version, sizeof(GroupRoot), sizeof(GroupRoot) - sizeof(EngineRoot)};
}

constexpr size_t kTableCheckedBytes = offsetof(GroupTableHeader, check);

constexpr uint8_t kInlineForm = static_cast<uint8_t>(SlotForm::kInline);
constexpr uint8_t kRecordForm = static_cast<uint8_t>(SlotForm::kRecord);
// Form-byte lines of a level-2 group a probe prefetches up front: all of a default group
// (256 cells); a larger group's later lines come by the hardware's sequential prefetch.
constexpr uint64_t kPrefetchedFormLines = 4;

}  // namespace

std::string GroupHash::CellName(const View& v, int level, uint64_t cell) {
  const KvWords* cells = level == 1 ? v.tab1 : v.tab2;
  return "level-" + std::to_string(level) + " cell " + std::to_string(cell) + " (pool offset " +
         std::to_string(v.offset + (reinterpret_cast<const char*>(&cells[cell]) - v.table)) +
         ")";
}

GroupHash::GroupHash() { stripes_.Reset(kGroupStripes, Log2(kGroupDefaultGroupSize)); }
GroupHash::~GroupHash() = default;

// ---- Options, creation, recovery ----------------------------------------------------

Status GroupHash::Configure(EngineOptions& options, const Options& /*index_options*/) {
  SetQuickGet(true);  // FindOptimistic's first try, from Get
  group_size_ = options.Uint("group_size");
  group_size_given_ = options.Given("group_size");
  tags_ = options.Bool("tags");
  prefetch_ = options.Bool("prefetch");
  tags_given_ = options.Given("tags");
  persist_count_ = options.Bool("persist_count");
  initial_cells_ = options.Uint("cells");
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
  PMHASH_RETURN_IF_ERROR(NewTableBlock(GroupLayout::Bytes(cells),
                                       "a table of " + std::to_string(2 * cells) + " cells",
                                       kGroupTableMagic, cells, offset));
  // Unreachable until a root store links it: the caller flushes it in one pass.
  auto* h = pool().At<GroupTableHeader>(*offset);
  persister().Store(&h->group_size, group_size_);
  persister().Store(&h->check, MetadataCheck(h, kTableCheckedBytes));
  return Status::OK();
}

Status GroupHash::Create() {
  const uint64_t cells = LevelCellsFor(initial_capacity());
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(cells, &offset));
  root_ = root<GroupRoot>();
  persister().Store(&root_->group_size, group_size_);
  CreateRoot(RootLayoutOf(tags_ ? kGroupTaggedVersion : kGroupVersion), offset,
             GroupLayout::Bytes(cells));
  view_ = View(pool().At<char>(offset), offset, cells);
  base_count_ = 0;
  total_.store(0);
  view_table_.store(view_.table, std::memory_order_release);
  level_cells_.store(cells, std::memory_order_release);
  return Status::OK();
}

Status GroupHash::ValidateTable(uint64_t off, uint64_t* cells) const {
  const uint64_t g = root<const GroupRoot>()->group_size;
  if (!IsPowerOfTwo(g) || g < kGroupMinGroupSize || g > kGroupMaxGroupSize) {
    return Status::Corruption("group: root group_size " + std::to_string(g) + " is invalid");
  }
  uint64_t n = 0;
  PMHASH_RETURN_IF_ERROR(
      ValidateTableBlock(off, kGroupTableMagic, pool().size() / 32, GroupLayout::Bytes, &n));
  const auto* h = pool().At<const GroupTableHeader>(off);
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kTableCheckedBytes, h->check, "the table header"));
  if (h->group_size != g || n % g != 0) {
    return Status::Corruption("group: table header (level_cells " + std::to_string(n) +
                              ", group_size " + std::to_string(h->group_size) +
                              ") does not match the root's group size " + std::to_string(g));
  }
  *cells = n;
  return Status::OK();
}

Status GroupHash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, n = 0, count = 0;
  const uint32_t version = LayoutVersion();
  PMHASH_RETURN_IF_ERROR(
      ValidateRoot(RootLayoutOf(version), sizeof(GroupTableHeader), &off, &count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  visit(off);
  const View v(pool().At<char>(off), off, n);
  // Runs before Recover has read the pool's layout: the form bits by the root's version.
  const uint8_t form_mask = version == kGroupTaggedVersion ? kFormMask : 0xff;
  const auto is_record = [&](uint8_t f) {
    return (f & form_mask) == static_cast<uint8_t>(SlotForm::kRecord);
  };
  for (uint64_t i = 0; i < n; ++i) {
    // Only committed record cells own a record; an offset outside the pool is left for
    // Recover to report (Plausible) rather than handed to the allocator.
    if (is_record(v.form1[i]) && pool().Contains(v.tab1[i].word0, 8)) {
      SlotCodec::VisitBlocks(SlotForm::kRecord, v.tab1[i], visit);
    }
    if (is_record(v.form2[i]) && pool().Contains(v.tab2[i].word0, 8)) {
      SlotCodec::VisitBlocks(SlotForm::kRecord, v.tab2[i], visit);
    }
  }
  return Status::OK();
}

uint64_t GroupHash::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;  // the record form keeps the hash
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

uint32_t GroupHash::LayoutVersion() const {
  // A version this build does not read is reported as such by ValidateRoot.
  const uint32_t v = root<const GroupRoot>()->header.version;
  return v == kGroupVersion || v == kGroupTaggedVersion ? v : kGroupTaggedVersion;
}

bool GroupHash::FormByteFits(uint8_t form_byte, uint64_t hash) const {
  const SlotForm form = FormOf(form_byte);
  return (form == SlotForm::kInline || form == SlotForm::kRecord) &&
         (form_byte & ~kFormMask) == (tags_ ? TagOf(hash) : 0);
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
      const SlotForm form = FormOf(f);
      if ((form != SlotForm::kInline && form != SlotForm::kRecord) ||
          !codec().Plausible(form, c) || !FormByteFits(f, HashOf(form, c))) {
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
  const uint32_t version = LayoutVersion();
  PMHASH_RETURN_IF_ERROR(
      OpenRoot(RootLayoutOf(version), sizeof(GroupTableHeader), &off, &stored_count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  const bool tagged = version == kGroupTaggedVersion;
  if (tags_given_ && tags_ != tagged) {
    return Status::InvalidArgument(std::string("option tags=") + (tags_ ? "on" : "off") +
                                   " does not match the pool's (" + (tagged ? "on" : "off") +
                                   "; it is fixed when the pool is created)");
  }
  tags_ = tagged;
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
  view_ = View(pool().At<char>(off), off, n);
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
  view_table_.store(view_.table, std::memory_order_release);
  level_cells_.store(n, std::memory_order_release);
  return Status::OK();
}

// ---- Operations ---------------------------------------------------------------------

void GroupHash::PrefetchProbe(const View& v, uint64_t home) const {
  pm::Persister& ps = persister();
  const uint8_t* forms = &v.form2[home & ~(group_size_ - 1)];
  ps.Prefetch(&v.form1[home]);
  ps.Prefetch(&v.tab1[home]);
  for (uint64_t i = 0; i < std::min(group_size_, kPrefetchedFormLines * pm::kCacheLine);
       i += pm::kCacheLine) {
    ps.Prefetch(forms + i);
  }
}

GroupHash::Probe GroupHash::Find(std::string_view key, uint64_t hash, uint64_t home) const {
  Probe p;
  const View& v = view_;
  pm::Persister& ps = persister();  // reads reported as they happen (the codec: records)
  const uint8_t tag = TagOf(hash);
  // The cell words a probe compares: a form byte of a key of this hash (with tags), or any
  // occupied one (without, as Alg. 2 reads every occupied cell).
  const auto candidate = [&](uint8_t f) { return f != 0 && (f & ~kFormMask) == tag; };
  const SlotCodec::KeyMatcher matches(codec(), key, hash);
  const auto found = [&](uint8_t* f, KvWords* c) {
    p.form = f;
    p.cell = c;
  };
  const uint64_t first = home & ~(group_size_ - 1);
  uint8_t* forms = &v.form2[first];
  KvWords* cells = &v.tab2[first];
  const uint64_t g = group_size_;
  // prefetch=on: the lines the probe may wait for are asked for before it waits on any
  // (the level-1 form byte and cell, the level-2 group's first kPrefetchedFormLines of
  // form bytes), so their misses overlap instead of following one another. The reads
  // counted stay Alg. 2's; a prefetched line a level-1 hit does not need costs bandwidth.
  uint8_t* f1 = &v.form1[home];
  if (prefetch_) PrefetchProbe(v, home);
  // Alg. 2 line 3: the level-1 cell, bitmap and key.
  ps.NoteRead(f1, 1);
  if (*f1 == 0) {
    p.free_form = f1;  // Alg. 1 line 3: the level-1 cell is empty
    p.free_cell = &v.tab1[home];
  } else if (!tags_ || candidate(*f1)) {
    ps.NoteRead(&v.tab1[home], sizeof(KvWords));
    if (matches(FormOf(*f1), v.tab1[home])) {
      found(f1, &v.tab1[home]);
      return p;
    }
  }
  // Alg. 2 lines 7-12: the level-2 group, j = k - k % G, its form bytes matched a run of
  // up to 64 at a time. Unlike Alg. 2 as printed, the bitmap is checked too: the words
  // of an empty cell never match.
  const uint64_t run = std::min<uint64_t>(g, 64);
  const uint64_t run_mask = run == 64 ? ~uint64_t{0} : (uint64_t{1} << run) - 1;
  ps.NoteRead(forms, g);
  pm::ReadRun compared(ps);  // the compared cells, reported as runs of lines
  for (uint64_t i = 0; i < g; i += run) {
    const uint64_t empty = match_.Match(forms + i, run, 0);
    if (p.free_form == nullptr && empty != 0) {  // Alg. 1 line 15: first empty cell
      const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(empty));
      p.free_form = &forms[j];
      p.free_cell = &cells[j];
    }
    uint64_t compare = tags_ ? match_.Match(forms + i, run, tag | kInlineForm) |
                                   match_.Match(forms + i, run, tag | kRecordForm)
                             : ~empty & run_mask;
    // The run's compared cells are asked for before the first compare waits (a line holds
    // four cells): their misses overlap instead of following one another.
    for (uint64_t m = prefetch_ ? compare : 0, line = ~uint64_t{0}; m != 0; m &= m - 1) {
      const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(m));
      const uint64_t l = reinterpret_cast<uintptr_t>(&cells[j]) / pm::kCacheLine;
      if (l != line) ps.Prefetch(&cells[j]);
      line = l;
    }
    for (; compare != 0; compare &= compare - 1) {
      const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(compare));
      compared.Add(&cells[j], sizeof(KvWords));
      if (matches(FormOf(forms[j]), cells[j])) {
        found(&forms[j], &cells[j]);
        return p;
      }
    }
  }
  return p;
}

// Find's search (Alg. 2) with no lock (issue 29; not in the paper): the level-1 cell and
// the level-2 group read as Find reads them, reporting the same lines, every cell word an
// acquire load (VersionedRwLock's contract). The group's form bytes are matched with the
// vector matcher's plain loads, as under the lock: a byte a writer changes meanwhile only
// changes which cells are compared, and the stripe's version (and the table size, for a
// resize) discards the answer then. A record cell of this hash is read under the lock.
[[gnu::always_inline]] inline Optimistic GroupHash::FindOptimistic(uint64_t hash,
                                                                  OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  const uint64_t n = level_cells_.load(std::memory_order_acquire);
  const uint64_t home = Reduce(hash, n);
  const VersionedRwLock& mu = stripes_.Of(home).mu;
  if (!read->Begin(mu)) return Optimistic::kRetry;
  // The size before the table (they are published the other way round): a stale pair
  // indexes inside the new table, which is larger.
  const View v(view_table_.load(std::memory_order_acquire), 0, n);
  if (prefetch_) PrefetchProbe(v, home);
  const uint8_t tag = TagOf(hash);
  // One cell whose form byte is `f`: kFound, kLocked or kAbsent.
  const auto compare = [&](uint8_t f, const KvWords* c) {
    if (FormOf(f) == SlotForm::kInline) {
      if (read->inline_key &&
          __atomic_load_n(&c->word0, __ATOMIC_ACQUIRE) == read->key_word) {
        read->value_word = __atomic_load_n(&c->word1, __ATOMIC_ACQUIRE);
        return Optimistic::kFound;
      }
    } else if (FormOf(f) == SlotForm::kRecord &&
               __atomic_load_n(&c->word1, __ATOMIC_ACQUIRE) == hash) {
      return Optimistic::kLocked;
    }
    return Optimistic::kAbsent;
  };
  Optimistic answer = Optimistic::kAbsent;
  const uint8_t f1 = __atomic_load_n(&v.form1[home], __ATOMIC_ACQUIRE);
  read->Note(&v.form1[home], 1);
  if (f1 != 0 && (!tags_ || (f1 & ~kFormMask) == tag)) {
    read->Note(&v.tab1[home], sizeof(KvWords));
    answer = compare(f1, &v.tab1[home]);
  }
  if (answer == Optimistic::kAbsent) {
    const uint64_t first = home & ~(group_size_ - 1);
    const uint8_t* forms = &v.form2[first];
    const KvWords* cells = &v.tab2[first];
    const uint64_t g = group_size_;
    const uint64_t run = std::min<uint64_t>(g, 64);
    const uint64_t run_mask = run == 64 ? ~uint64_t{0} : (uint64_t{1} << run) - 1;
    read->Note(forms, g);
    pm::ReadRun compared(read->persister, read->notes);
    for (uint64_t i = 0; i < g && answer == Optimistic::kAbsent; i += run) {
      uint64_t candidates = tags_ ? match_.Match(forms + i, run, tag | kInlineForm) |
                                        match_.Match(forms + i, run, tag | kRecordForm)
                                  : ~match_.Match(forms + i, run, 0) & run_mask;
      for (; candidates != 0 && answer == Optimistic::kAbsent; candidates &= candidates - 1) {
        const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(candidates));
        compared.Add(&cells[j], sizeof(KvWords));
        answer = compare(__atomic_load_n(&forms[j], __ATOMIC_ACQUIRE), &cells[j]);
      }
    }
  }
  if (!read->Valid(mu) || level_cells_.load(std::memory_order_acquire) != n) {
    return Optimistic::kRetry;
  }
  return answer;
}

QuickAnswer GroupHash::QuickGet(uint64_t hash, uint64_t key_word) {
  return QuickTry(persister(), key_word,
                  [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
                    return FindOptimistic(hash, read);
                  });
}

Status GroupHash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  // The search with no lock first: no locked instruction, so consecutive searches
  // overlap their misses (issue 29). Its first try, when nothing is counted, has no call
  // on its path (FirstTry); anything else takes GetFull.
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

// A writer in the group's stripe makes the search retry; after a few tries, or for a
// record, the shared lock answers. Out of line (DoGet's frame).
__attribute__((noinline)) Status GroupHash::GetFull(std::string_view key, uint64_t hash,
                                                    std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

// Out of line: its lock and probe would otherwise give DoGet a large frame.
__attribute__((noinline)) Status GroupHash::GetLocked(std::string_view key, uint64_t hash,
                                                      std::string* value) {
  uint64_t home = 0, cells = 0;
  Stripe& s = LockHome(hash, LockMode::kShared, &home, &cells);
  HeldLock guard(s.mu, LockMode::kShared);
  const Probe p = Find(key, hash, home);
  if (p.form == nullptr) return Status::NotFound();
  AssignValue(value, codec().Value(FormOf(*p.form), *p.cell));
  return Status::OK();
}

Status GroupHash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                          WriteMode mode) {
  for (;;) {
    uint64_t home = 0, cells = 0;
    {
      Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &cells);
      HeldLock guard(s.mu, LockMode::kExclusive);
      const Probe p = Find(key, hash, home);
      if (p.form != nullptr) {
        if (mode == WriteMode::kInsert) return Status::AlreadyExists();
        return UpdateAt(p, key, value, hash);
      }
      if (mode == WriteMode::kUpdate) return Status::NotFound();
      if (p.free_form != nullptr) return InsertAt(p, key, value, hash, s);
      // Alg. 1 line 25: no empty cell in the group.
      if (!resize_enabled()) {
        full_group_refusals_.fetch_add(1, std::memory_order_relaxed);
        return Status::TableFull(
            "group: group " + std::to_string(home >> group_shift_) + " is full (" +
            std::to_string(group_size_) + " level-2 cells in use) and resizing is off "
            "(resize=off)");
      }
      // Not in the paper: keys whose hashes agree in all the bits a doubling looks at stay
      // in one group however often the table doubles. Refuse before a futile doubling
      // rather than double until the pool is full.
      if (!DoublingPlaces(hash, home, cells)) {
        inseparable_refusals_.fetch_add(1, std::memory_order_relaxed);
        return Status::TableFull(
            "group: group " + std::to_string(home >> group_shift_) +
            " is full, and its keys share so many hash bits with this one that no table "
            "the pool can hold would give it a cell (colliding or crafted keys)");
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
  // The DRAM count first (nothing fails from here): a locked add after the commit's fence
  // would wait for the write-back and hold back the next operation's misses.
  stripe.delta.fetch_add(1, std::memory_order_relaxed);
  // Alg. 1 lines 4-5 (16-17): Insert(key, value); Persist(key, value) (its fence is
  // Publish's).
  ps.Copy(p.free_cell, &words, sizeof(words));
  ps.Flush(p.free_cell, sizeof(words));
  // Alg. 1 lines 6-7 (18-19): atomically set the bitmap, persist: the commit point.
  ps.Publish(p.free_form, static_cast<uint8_t>(static_cast<uint8_t>(form) | TagOf(hash)));
  // Alg. 1 lines 8-9 (20-21): count (persisted with persist_count=on).
  if (persist_count_) {
    total_.fetch_add(1, std::memory_order_relaxed);
    NoteCountChange();
  }
  return Status::OK();
}

Status GroupHash::UpdateAt(const Probe& p, std::string_view key, std::string_view value,
                           uint64_t hash) {
  // The slot encoding's update; it keeps the tag bits of the form byte.
  return UpdateSlot(p.form, p.cell, key, value, hash, TagOf(hash));
}

Status GroupHash::DoDelete(std::string_view key, uint64_t hash) {
  uint64_t home = 0, cells = 0;
  Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &cells);
  HeldLock guard(s.mu, LockMode::kExclusive);
  const Probe p = Find(key, hash, home);
  if (p.form == nullptr) return Status::NotFound();
  pm::Persister& ps = persister();
  const SlotForm form = FormOf(*p.form);
  const KvWords old = *p.cell;
  s.delta.fetch_sub(1, std::memory_order_relaxed);  // before the commit, as InsertAt
  // Alg. 3 lines 4-5 (16-17): atomically clear the bitmap (and tag) first, persist:
  // committed.
  ps.Store(p.form, static_cast<uint8_t>(SlotForm::kEmpty));
  ps.Persist(p.form, 1);
  // Alg. 3 lines 6-7 (18-19): Delete(key, value); Persist(key, value).
  ps.Zero(p.cell, sizeof(KvWords));
  ps.Persist(p.cell, sizeof(KvWords));
  codec().Release(form, old);  // durably unreachable since line 5
  // Alg. 3 lines 8-9 (20-21): count (persisted with persist_count=on).
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
            const SlotForm f = FormOf(forms[i]);
            if (f == SlotForm::kEmpty) continue;
            batch->emplace_back(codec().Key(f, cells[i]), codec().Value(f, cells[i]));
          }
        }
      },
      fn);
}

Status GroupHash::DoScan(ScanPage* page) const {
  const IterationScope iterating(this, resize_mu_);  // no resize during the page
  const View& v = view_;
  // A home is a level-1 cell; a run is one group, read under its stripe: its level-1
  // cells, and its level-2 cells, which hold keys of any home of the group (the page
  // keeps those of the run's homes).
  const auto collect = [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    Stripe& s = stripes_.Of(first);
    s.mu.lock_shared();
    HeldLock guard(s.mu, LockMode::kShared);
    const auto take = [&](uint8_t form_byte, const KvWords& c) {
      const SlotForm f = FormOf(form_byte);
      AddScanEntry(out, HashOf(f, c), codec().Key(f, c), codec().Value(f, c));
    };
    for (uint64_t i = first; i < last; ++i) {
      if (v.form1[i] != 0) take(v.form1[i], v.tab1[i]);
    }
    const uint64_t group = first & ~(group_size_ - 1);
    for (uint64_t i = group; i < group + group_size_; ++i) {
      if (v.form2[i] != 0) take(v.form2[i], v.tab2[i]);
    }
  };
  page->CollectHomes(v.cells, group_size_, collect);
  return Status::OK();
}

// ---- Resize -------------------------------------------------------------------------

bool GroupHash::DoublingPlaces(uint64_t hash, uint64_t home, uint64_t cells) const {
  // The hashes of the full group's keys: its level-1 cells and its level-2 cells.
  const View& v = view_;
  const uint64_t first = home & ~(group_size_ - 1);
  std::vector<uint64_t> hashes;
  hashes.reserve(2 * group_size_);
  for (uint64_t i = first; i < first + group_size_; ++i) {
    if (v.form1[i] != 0) hashes.push_back(HashOf(FormOf(v.form1[i]), v.tab1[i]));
    if (v.form2[i] != 0) hashes.push_back(HashOf(FormOf(v.form2[i]), v.tab2[i]));
  }
  // Doubling d times sends home k to [k 2^d, (k+1) 2^d), and the group's keys to the
  // groups of their new homes: simulate Place in the key's new group, as Grow would fill
  // it (one key per distinct home in level 1, the others in level 2).
  std::vector<uint64_t> homes;
  for (uint64_t n = cells * 2; n <= pool().size() / 32 && n > cells; n *= 2) {
    const uint64_t key_home = Reduce(hash, n);
    const uint64_t group = key_home >> group_shift_;
    homes.clear();
    for (uint64_t h : hashes) {
      const uint64_t k = Reduce(h, n);
      if ((k >> group_shift_) == group) homes.push_back(k);
    }
    std::sort(homes.begin(), homes.end());
    const uint64_t distinct =
        static_cast<uint64_t>(std::unique(homes.begin(), homes.end()) - homes.begin());
    const bool home_taken = std::binary_search(homes.begin(), homes.begin() + distinct, key_home);
    if (!home_taken || homes.size() - distinct < group_size_) return true;
  }
  return false;
}

bool GroupHash::Place(const View& v, uint8_t form, const KvWords& words, uint64_t hash) const {
  const uint64_t k = Reduce(hash, v.cells);
  uint8_t* f = &v.form1[k];
  KvWords* c = &v.tab1[k];
  if (*f != 0) {
    f = nullptr;
    const uint64_t first = k & ~(group_size_ - 1);
    const uint64_t run = std::min<uint64_t>(group_size_, 64);
    for (uint64_t i = first; i < first + group_size_; i += run) {
      if (const uint64_t empty = match_.Match(&v.form2[i], run, 0); empty != 0) {
        const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(empty));
        f = &v.form2[j];
        c = &v.tab2[j];
        break;
      }
    }
    if (f == nullptr) return false;
  }
  pm::Persister& ps = persister();
  ps.Copy(c, &words, sizeof(words));
  ps.Store(f, form);  // the form byte as it was: its tag depends on the hash only
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
  const View nv(pool().At<char>(offset), offset, n2);
  // Migration reads the old table only, so it stays intact until the switch. Doubling
  // sends home cell k to 2k or 2k+1 (Reduce), so old group g's keys land in new groups
  // 2g and 2g+1, and at most G of them collide: Place cannot fail.
  for (int level = 1; level <= 2; ++level) {
    const uint8_t* forms = level == 1 ? old.form1 : old.form2;
    const KvWords* cells = level == 1 ? old.tab1 : old.tab2;
    for (uint64_t i = 0; i < old.cells; ++i) {
      const uint8_t f = forms[i];
      if (f == 0) continue;
      const uint64_t hash = HashOf(FormOf(f), cells[i]);
      if (!Place(nv, f, cells[i], hash)) {
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
  view_table_.store(nv.table, std::memory_order_release);  // before the size
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
  c["inseparable_refusals"] = inseparable_refusals_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs();
  c["recovery_cells_reset"] = recovered_resets_;
  c["persist_count"] = persist_count_ ? 1 : 0;
  c["tags"] = tags_ ? 1 : 0;
}

Status GroupHash::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  const View& v = view_;
  const uint64_t n = v.cells;
  // The metadata as Recover validated it (a damaged pool may be checked right after open).
  uint64_t off = 0, table_cells = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(RootLayoutOf(tags_ ? kGroupTaggedVersion : kGroupVersion),
                                      sizeof(GroupTableHeader), &off, &stored_count));
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
      const SlotForm f = FormOf(forms[i]);
      if (forms[i] == 0) {
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
      const uint64_t hash = KeyHash(key);
      if (f == SlotForm::kRecord && cells[i].word1 != hash) {
        return Status::Corruption("group: " + CellName(v, level, i) + " has a wrong hash word");
      }
      if (!FormByteFits(forms[i], hash)) {
        return Status::Corruption("group: " + CellName(v, level, i) + " has a wrong tag");
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
      codec().DescribeRecord(FormOf(forms[i]), cells[i], mark);
    }
  }
}

void RegisterEngines_group(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {OptionSpec::Uint("group_size", kGroupDefaultGroupSize, kGroupMinGroupSize,
                                   kGroupMaxGroupSize,
                                   "cells per group, a power of two (the paper's 256); fixed "
                                   "when the pool is created"),
                  OptionSpec::Bool("tags", false,
                                   "a 6-bit tag of the key's hash in each cell's form byte "
                                   "(layout version 3, not in the paper): probes compare "
                                   "only cells whose tag matches; fixed when the pool is "
                                   "created"),
                  OptionSpec::Bool("prefetch", true,
                                   "a probe prefetches the level-1 cell, the group's form "
                                   "bytes and then the cells it will compare, so their misses "
                                   "overlap (a CPU hint: the same lines are read as in Alg. "
                                   "2, the same persists made)"),
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
                       .refuses_when_full = true,
                       .refuses_full_collisions = true};
  // Groups of 8 cells (paper: 256) fill after a few dozen keys: many resizes.
  info.test = {.crash_options = {{"group_size", "8"}}, .growth_counters = {"resizes"}};
  info.description = {"group",
                      "two-level table; collision cells shared per group; bitmap commit; "
                      "recovery scan",
                      "004 Group hashing (ICPP'18)", /*crash_consistent=*/true};
  registry.Add<GroupHash>(std::move(info));
}

}  // namespace pmhash::engines
