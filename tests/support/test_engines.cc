#include "support/test_engines.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "util/hash.h"

namespace pmhash::testing {
namespace {

constexpr uint64_t kTinyMagic = 0x594e4954'54534554ull;  // "TESTTINY"
constexpr uint64_t kEmpty = 0, kTombstone = 1;

struct TinyRoot {
  uint64_t magic;
  uint64_t table;       // pool offset of the TinyTable block
  uint64_t undo_slot;   // test-log-after-commit: pool offset of the slot to roll back, or 0
  uint64_t undo_value;  // ... and the value to restore there
};
struct TinyTable {
  uint64_t capacity;  // power of two
  uint64_t pad[7];    // slots start on their own cache line
  uint64_t slots[];   // 0 empty, 1 tombstone, else a record's pool offset
};
struct TinyRecord {
  uint32_t key_len, value_len;
  char bytes[];  // key then value
};

struct Bugs {
  bool commit_early = false;
  bool no_fence = false;
  bool no_enumerate = false;
  bool log_after_commit = false;
};

class TinyIndex : public engines::Engine {
 public:
  explicit TinyIndex(Bugs bugs = {}) : bugs_(bugs) {}

  uint64_t Count() const override { return count_.load(std::memory_order_relaxed); }

  Status ForEach(const Visitor& fn) const override {
    std::shared_lock<std::shared_mutex> l(mu_);
    for (uint64_t i = 0; i < table_->capacity; ++i) {
      const uint64_t s = table_->slots[i];
      if (s == kEmpty || s == kTombstone) continue;
      const TinyRecord* r = Checked(s);
      if (r == nullptr) {
        return Status::Corruption("test-tiny: slot " + std::to_string(i) +
                                  " points to an implausible record");
      }
      if (!fn({r->bytes, r->key_len}, {r->bytes + r->key_len, r->value_len})) break;
    }
    return Status::OK();
  }

  // Every record plausible, no key twice, each reachable from its probe start without an
  // empty slot between, and the live and used counts right.
  Status CheckInvariants() const override {
    std::shared_lock<std::shared_mutex> l(mu_);
    const uint64_t mask = table_->capacity - 1;
    std::set<std::string> keys;
    uint64_t live = 0, used = 0;
    for (uint64_t i = 0; i < table_->capacity; ++i) {
      const uint64_t s = table_->slots[i];
      if (s != kEmpty) ++used;
      if (s == kEmpty || s == kTombstone) continue;
      const TinyRecord* r = Checked(s);
      if (r == nullptr) return Status::Corruption("test-tiny: an implausible record");
      const std::string key(r->bytes, r->key_len);
      if (!keys.insert(key).second) return Status::Corruption("test-tiny: a key twice");
      for (uint64_t j = Reduce(KeyHash(key), table_->capacity); j != i; j = (j + 1) & mask) {
        if (table_->slots[j] == kEmpty) {
          return Status::Corruption("test-tiny: slot " + std::to_string(i) +
                                    " is unreachable from its probe start");
        }
      }
      ++live;
    }
    if (live != Count() || used != used_) {
      return Status::Corruption("test-tiny: " + std::to_string(live) + " live and " +
                                std::to_string(used) + " used slots, but the counts say " +
                                std::to_string(Count()) + " and " + std::to_string(used_));
    }
    return Status::OK();
  }

 protected:
  Status DoWrite(std::string_view key, std::string_view value, uint64_t h,
                 engines::WriteMode mode) override {
    std::unique_lock<std::shared_mutex> l(mu_);
    if (uint64_t* slot = Find(key, h); slot != nullptr) {
      if (mode == engines::WriteMode::kInsert) return Status::AlreadyExists();
      return UpdateAt(slot, key, value);
    }
    if (mode == engines::WriteMode::kUpdate) return Status::NotFound();
    if ((used_ + 1) * 2 > table_->capacity) PMHASH_RETURN_IF_ERROR(Grow());
    uint64_t rec = 0;
    PMHASH_RETURN_IF_ERROR(WriteRecord(key, value, &rec));
    uint64_t* slot = FreeSlot(h);
    if (*slot == kEmpty) ++used_;
    Commit(slot, rec);
    count_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

  Status UpdateAt(uint64_t* slot, std::string_view key, std::string_view value) {
    uint64_t rec = 0;
    PMHASH_RETURN_IF_ERROR(WriteRecord(key, value, &rec));
    const uint64_t old = *slot;
    Commit(slot, rec);
    if (bugs_.log_after_commit) {
      // The bug: the undo record goes out after the commit is durable; a crash before it
      // is cleared rolls back an update that durable state already showed.
      TinyRoot* r = root<TinyRoot>();
      persister().Store(&r->undo_value, old);
      persister().Store(&r->undo_slot, pool().ToOffset(slot));
      persister().Persist(&r->undo_slot, 16);
      persister().Store(&r->undo_slot, uint64_t{0});
      persister().Persist(&r->undo_slot, 8);
    }
    allocator().Free(old);
    return Status::OK();
  }

  Status DoGet(std::string_view key, uint64_t h, std::string* value) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    const uint64_t* slot = Find(key, h);
    if (slot == nullptr) return Status::NotFound();
    const TinyRecord* r = Checked(*slot);
    if (r == nullptr) return Status::Corruption("test-tiny: a slot points to an implausible record");
    value->assign(r->bytes + r->key_len, r->value_len);
    return Status::OK();
  }

  // A home is a slot; as in linear probing, the keys of homes [first, last) lie before the
  // first empty slot at or after last - 1 (tombstones do not end a probe).
  Status DoScan(engines::ScanPage* page) const override {
    std::shared_lock<std::shared_mutex> l(mu_);
    const uint64_t cap = table_->capacity;
    Status status;
    const auto collect = [&](uint64_t first, uint64_t last,
                             std::vector<engines::ScanEntry>* out) {
      for (uint64_t d = 0, i = first; d < cap; ++d, i = (i + 1) & (cap - 1)) {
        const uint64_t s = table_->slots[i];
        if (s == kEmpty && d >= last - 1 - first) break;
        if (s == kEmpty || s == kTombstone) continue;
        const TinyRecord* r = Checked(s);
        if (r == nullptr) {
          status = Status::Corruption("test-tiny: slot " + std::to_string(i) +
                                      " points to an implausible record");
          return;
        }
        const std::string_view key(r->bytes, r->key_len);
        engines::AddScanEntry(out, KeyHash(key), key, {r->bytes + r->key_len, r->value_len});
      }
    };
    page->CollectHomes(cap, 64, collect);
    return status;
  }

  Status DoDelete(std::string_view key, uint64_t h) override {
    std::unique_lock<std::shared_mutex> l(mu_);
    uint64_t* slot = Find(key, h);
    if (slot == nullptr) return Status::NotFound();
    const uint64_t old = *slot;
    persister().Store(slot, kTombstone);
    persister().Persist(slot, 8);
    allocator().Free(old);
    count_.fetch_sub(1, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Configure(engines::EngineOptions&, const Options& options) override {
    initial_capacity_ = options.initial_capacity;
    return Status::OK();
  }

  Status Create() override {
    uint64_t cap = 16;
    while (cap < initial_capacity_ * 2) cap *= 2;
    uint64_t table = 0;
    PMHASH_RETURN_IF_ERROR(NewTable(cap, &table));
    TinyRoot* r = root<TinyRoot>();
    persister().Store(&r->table, table);
    persister().Persist(&r->table, 8);
    persister().Store(&r->magic, kTinyMagic);
    persister().Persist(&r->magic, 8);
    table_ = pool().At<TinyTable>(table);
    return Status::OK();
  }

  Status Recover(bool) override {
    PMHASH_RETURN_IF_ERROR(ValidateTable());
    table_ = pool().At<TinyTable>(root<TinyRoot>()->table);
    TinyRoot* root_area = root<TinyRoot>();
    if (root_area->undo_slot != 0) {  // test-log-after-commit's rollback
      const uint64_t slot = root_area->undo_slot;
      const uint64_t first = pool().ToOffset(table_->slots);
      if (slot < first || slot >= first + table_->capacity * 8 || slot % 8 != 0) {
        return Status::Corruption("test-tiny: undo record names no slot");
      }
      persister().Store(pool().At<uint64_t>(slot), root_area->undo_value);
      persister().Persist(pool().At<uint64_t>(slot), 8);
      persister().Store(&root_area->undo_slot, uint64_t{0});
      persister().Persist(&root_area->undo_slot, 8);
    }
    uint64_t live = 0;
    used_ = 0;
    for (uint64_t i = 0; i < table_->capacity; ++i) {
      const uint64_t s = table_->slots[i];
      if (s != kEmpty) ++used_;
      if (s == kEmpty || s == kTombstone) continue;
      // test-no-enumerate trusts its records (checking them against the allocator would
      // catch its own bug at once): only pool bounds.
      const bool implausible =
          bugs_.no_enumerate
              ? Checked(s) == nullptr
              : !allocator().IsAllocated(s) || allocator().UsableSize(s) < sizeof(TinyRecord) ||
                    sizeof(TinyRecord) + uint64_t{Rec(s)->key_len} + Rec(s)->value_len >
                        allocator().UsableSize(s);
      if (implausible) {
        return Status::Corruption("test-tiny: slot " + std::to_string(i) +
                                  " points to an implausible record");
      }
      ++live;
    }
    count_ = live;
    return Status::OK();
  }

  Status EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const override {
    PMHASH_RETURN_IF_ERROR(ValidateTable());
    const uint64_t table = root<TinyRoot>()->table;
    visit(table);
    if (bugs_.no_enumerate) return Status::OK();  // the bug: records forgotten
    const uint64_t undo = root<TinyRoot>()->undo_slot != 0 ? root<TinyRoot>()->undo_value : 0;
    if (undo > kTombstone) {
      if (!pool().Contains(undo, sizeof(TinyRecord)) || undo < pool().heap_offset()) {
        return Status::Corruption("test-tiny: undo record out of the heap");
      }
      visit(undo);
    }
    const TinyTable* t = pool().At<TinyTable>(table);
    for (uint64_t i = 0; i < t->capacity; ++i) {
      const uint64_t s = t->slots[i];
      if (s == kEmpty || s == kTombstone) continue;
      if (!pool().Contains(s, sizeof(TinyRecord)) || s < pool().heap_offset()) {
        return Status::Corruption("test-tiny: record offset out of the heap");
      }
      visit(s);
    }
    return Status::OK();
  }

  void FillStats(IndexStats* stats) const override {
    stats->count = Count();
    stats->key_slots = table_ == nullptr ? 0 : table_->capacity;
    stats->engine_counters["resizes"] = resizes_.load(std::memory_order_relaxed);
  }

  // Nothing here checks itself: the table and records are marked unchecked.
  void DescribeEngineLayout(const pm::RegionVisitor& mark) const override {
    std::shared_lock<std::shared_mutex> l(mu_);
    mark(pool().ToOffset(table_), sizeof(TinyTable) + table_->capacity * 8, pm::Region::kSlots,
         false);
    for (uint64_t i = 0; i < table_->capacity; ++i) {
      const uint64_t s = table_->slots[i];
      if (s == kEmpty || s == kTombstone) continue;
      if (const TinyRecord* r = Checked(s)) {
        mark(s, sizeof(TinyRecord) + r->key_len + r->value_len, pm::Region::kRecords, false);
      }
    }
  }

 private:
  Status ValidateTable() const {
    const TinyRoot* r = root<TinyRoot>();
    if (r->magic != kTinyMagic) return Status::Corruption("test-tiny: bad root magic");
    const uint64_t t = r->table;
    if (t < pool().heap_offset() || !pool().Contains(t, sizeof(TinyTable))) {
      return Status::Corruption("test-tiny: table offset out of the heap");
    }
    const uint64_t cap = pool().At<TinyTable>(t)->capacity;
    if (cap < 16 || !std::has_single_bit(cap) || cap > pool().size() / 8 ||
        !pool().Contains(t, sizeof(TinyTable) + cap * 8)) {
      return Status::Corruption("test-tiny: implausible table capacity");
    }
    return Status::OK();
  }

  const TinyRecord* Rec(uint64_t off) const { return pool().At<TinyRecord>(off); }
  // The record at `off` if it lies inside the heap, else null: a damaged or reused block
  // (test-no-enumerate) gives an error, not a wild read.
  const TinyRecord* Checked(uint64_t off) const {
    if (off < pool().heap_offset() || !pool().Contains(off, sizeof(TinyRecord))) return nullptr;
    const TinyRecord* r = Rec(off);
    if (!pool().Contains(off, sizeof(TinyRecord) + uint64_t{r->key_len} + r->value_len)) {
      return nullptr;
    }
    return r;
  }

  uint64_t* Find(std::string_view key, uint64_t h) const {
    const uint64_t mask = table_->capacity - 1;
    for (uint64_t i = Reduce(h, table_->capacity), n = 0; n < table_->capacity;
         i = (i + 1) & mask, ++n) {
      uint64_t& s = table_->slots[i];
      if (s == kEmpty) return nullptr;
      if (s == kTombstone) continue;
      const TinyRecord* r = Checked(s);
      if (r == nullptr) continue;  // reported by Get / ForEach
      if (r->key_len == key.size() && std::memcmp(r->bytes, key.data(), key.size()) == 0) {
        return &s;
      }
    }
    return nullptr;
  }

  uint64_t* FreeSlot(uint64_t h) const {
    const uint64_t mask = table_->capacity - 1;
    for (uint64_t i = Reduce(h, table_->capacity);; i = (i + 1) & mask) {
      uint64_t& s = table_->slots[i];
      if (s == kEmpty || s == kTombstone) return &s;
    }
  }

  Status WriteRecord(std::string_view key, std::string_view value, uint64_t* out) {
    Result<uint64_t> off = allocator().Allocate(sizeof(TinyRecord) + key.size() + value.size());
    if (!off.ok()) return off.status();
    auto* r = pool().At<TinyRecord>(*off);
    const uint32_t lens[2] = {static_cast<uint32_t>(key.size()),
                              static_cast<uint32_t>(value.size())};
    persister().Copy(r, lens, sizeof(lens));
    if (!key.empty()) persister().Copy(r->bytes, key.data(), key.size());
    if (!value.empty()) persister().Copy(r->bytes + key.size(), value.data(), value.size());
    persister().Flush(r, sizeof(TinyRecord) + key.size() + value.size());
    if (!bugs_.commit_early) persister().Fence();
    *out = *off;
    return Status::OK();
  }

  // The commit store (the record is already durable, except in test-commit-early).
  void Commit(uint64_t* slot, uint64_t value) {
    persister().Store(slot, value);
    persister().Flush(slot, 8);
    if (!bugs_.no_fence) persister().Fence();
  }

  Status NewTable(uint64_t cap, uint64_t* out) {
    Result<uint64_t> off = allocator().Allocate(sizeof(TinyTable) + cap * 8);
    if (!off.ok()) return off.status();
    auto* t = pool().At<TinyTable>(*off);
    persister().Zero(t, sizeof(TinyTable) + cap * 8);
    persister().Store(&t->capacity, cap);
    persister().Flush(t, sizeof(TinyTable) + cap * 8);
    persister().Fence();
    *out = *off;
    return Status::OK();
  }

  Status Grow() {
    const uint64_t live = count_.load(std::memory_order_relaxed);
    uint64_t cap = table_->capacity;
    if ((live + 1) * 4 > cap) cap *= 2;  // else the same size, dropping tombstones
    uint64_t off = 0;
    PMHASH_RETURN_IF_ERROR(NewTable(cap, &off));
    TinyTable* t = pool().At<TinyTable>(off);
    for (uint64_t i = 0; i < table_->capacity; ++i) {
      const uint64_t s = table_->slots[i];
      if (s == kEmpty || s == kTombstone) continue;
      const TinyRecord* r = Checked(s);
      if (r == nullptr) {
        allocator().Free(off);
        return Status::Corruption("test-tiny: a slot points to an implausible record");
      }
      const uint64_t h = KeyHash({r->bytes, r->key_len});
      for (uint64_t j = Reduce(h, cap);; j = (j + 1) & (cap - 1)) {
        if (t->slots[j] == kEmpty) {
          persister().Store(&t->slots[j], s);
          break;
        }
      }
    }
    persister().Flush(t->slots, cap * 8);
    persister().Fence();
    TinyRoot* r = root<TinyRoot>();
    const uint64_t old = r->table;
    persister().Store(&r->table, off);
    persister().Persist(&r->table, 8);
    allocator().Free(old);
    table_ = t;
    used_ = live;
    resizes_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

  const Bugs bugs_;
  uint64_t initial_capacity_ = 0;
  mutable std::shared_mutex mu_;
  TinyTable* table_ = nullptr;
  uint64_t used_ = 0;  // slots not empty (live + tombstones)
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> resizes_{0};
};

// A test-only engine's spec: `name`, made as a TinyIndex with `bugs`. Its registry data
// lives as long as the process (engines keep a reference to it).
EngineSpec TinySpec(const std::string& name, Bugs bugs) {
  auto* info = new engines::EngineInfo;
  info->description = {name, "test-only: linear probing of record pointers", "none",
                       /*crash_consistent=*/true};
  info->test.growth_counters = {"resizes"};
  return {name, [info, bugs] { return engines::MakeEngine<TinyIndex>(*info, bugs); }, true, true,
          info->test, info};
}

}  // namespace

EngineSpec TinyEngine() {
  static const EngineSpec spec = TinySpec("test-tiny", {});
  return spec;
}
EngineSpec CommitEarlyEngine() {
  static const EngineSpec spec = TinySpec("test-commit-early", {.commit_early = true});
  return spec;
}
EngineSpec NoFenceEngine() {
  static const EngineSpec spec = TinySpec("test-no-fence", {.no_fence = true});
  return spec;
}
EngineSpec NoEnumerateEngine() {
  static const EngineSpec spec = TinySpec("test-no-enumerate", {.no_enumerate = true});
  return spec;
}
EngineSpec LogAfterCommitEngine() {
  static const EngineSpec spec = TinySpec("test-log-after-commit", {.log_after_commit = true});
  return spec;
}

std::vector<EngineSpec> ConformanceEngines() {
  std::vector<EngineSpec> out;
  for (const auto& [name, reg] : engines::Registrations()) {
    out.push_back(
        {name, reg.make, reg.info.description.crash_consistent, false, reg.info.test, &reg.info});
  }
  out.push_back(TinyEngine());
  return out;
}

std::vector<EngineSpec> CrashConsistentEngines() {
  std::vector<EngineSpec> out;
  for (EngineSpec& s : ConformanceEngines()) {
    if (s.crash_consistent) out.push_back(std::move(s));
  }
  return out;
}

uint64_t DegenerateHash(std::string_view key) {
  return kDegenerateHashes[HashKey(key, 0) & 3];
}

std::vector<std::string> KeysOfDegenerateHash(size_t n, int which) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; keys.size() < n; ++i) {
    std::string k = "one hash " + std::to_string(i);
    if (DegenerateHash(k) == kDegenerateHashes[which]) keys.push_back(std::move(k));
  }
  return keys;
}

EngineSpec WithDegenerateHash(EngineSpec spec) {
  if (!spec.make) return spec;
  spec.test_hash = &DegenerateHash;
  spec.make = [make = spec.make] {
    std::unique_ptr<engines::Engine> e = make();
    e->SetKeyHashForTesting(&DegenerateHash);
    return e;
  };
  return spec;
}

EngineSpec FindSpec(const std::string& name) {
  const size_t suffix = name.size() - std::min(name.size(), sizeof(kDegenerateSuffix) - 1);
  if (name.compare(suffix, std::string::npos, kDegenerateSuffix) == 0) {
    return WithDegenerateHash(FindSpec(name.substr(0, suffix)));
  }
  for (EngineSpec& s : ConformanceEngines()) {
    if (s.name == name) return s;
  }
  for (EngineSpec s : {CommitEarlyEngine(), NoFenceEngine(), NoEnumerateEngine(),
                       LogAfterCommitEngine()}) {
    if (s.name == name) return s;
  }
  return {};
}

std::vector<std::string> Names(const std::vector<EngineSpec>& specs) {
  std::vector<std::string> out;
  for (const EngineSpec& s : specs) out.push_back(s.name);
  return out;
}

std::string GtestName(const std::string& engine) {
  std::string s = engine;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

}  // namespace pmhash::testing
