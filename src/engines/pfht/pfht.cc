// PFHT (Debnath et al., INFLOW'15) with (`pfht-log`) and without (`pfht`) logging. Layout,
// invariants, persist order, locking: pfht.h.
#include "engines/pfht/pfht.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/match.h"
#include "engines/scan.h"
#include "engines/striping.h"
#include "pm/undo_log.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr uint64_t kBucketBytes = sizeof(PfhtBucket);
constexpr uint64_t kHeaderBytes = sizeof(PfhtTableHeader);
constexpr size_t kCheckedBytes = offsetof(PfhtTableHeader, check);
constexpr RootLayout kRootLayout{kPfhtRootMagic, kPfhtVersion, sizeof(EngineRoot), 0};
// Below this many buckets a table that finds no place always grows (a tiny table's random
// fill can fail far below min_resize_load).
constexpr uint64_t kAlwaysGrowBelow = 64;

uint64_t StashBuckets(uint64_t n) {
  const double slots = std::ceil(kPfhtStashShare * static_cast<double>(n));
  return std::max<uint64_t>(1, static_cast<uint64_t>(slots));
}
uint64_t TableBytes(uint64_t n, uint64_t s) { return kHeaderBytes + (n + s) * kBucketBytes; }
uint64_t TableBytesOf(uint64_t n) { return TableBytes(n, StashBuckets(n)); }  // with its stash

bool KnownForm(uint8_t t) {
  return t == static_cast<uint8_t>(SlotForm::kInline) ||
         t == static_cast<uint8_t>(SlotForm::kRecord);
}

size_t FreeSlot(const PfhtBucket* b) {
  for (size_t i = 0; i < kPfhtAssoc; ++i) {
    if (b->token[i] == 0) return i;
  }
  return kPfhtAssoc;
}
size_t FreeCount(const PfhtBucket* b) {
  size_t n = 0;
  for (size_t i = 0; i < kPfhtAssoc; ++i) n += b->token[i] == 0;
  return n;
}
bool SameItem(const PfhtBucket* a, size_t i, const PfhtBucket* b, size_t j) {
  return a->token[i] == b->token[j] && a->slot[i].word0 == b->slot[j].word0 &&
         a->slot[i].word1 == b->slot[j].word1;
}

// The first stash slot below `end` whose tag equals `tag`, from `from` on; `end` if none.
size_t NextTag(const std::vector<uint8_t>& tags, size_t from, size_t end, uint8_t tag) {
  const TagMatcher& m = TagMatcher::Best();
  for (size_t k = from & ~size_t{63}; k < end; k += 64) {
    uint64_t mask = m.Match(&tags[k], std::min<size_t>(64, end - k), tag);
    if (k < from) mask &= ~uint64_t{0} << (from - k);
    if (mask != 0) return k + static_cast<size_t>(std::countr_zero(mask));
  }
  return end;
}
// One past the last used stash slot (0: none).
size_t StashEnd(const std::vector<uint8_t>& tags, size_t end) {
  while (end > 0 && tags[end - 1] == 0) --end;
  return end;
}

}  // namespace

uint64_t PfhtHash::StashBucketsFor(uint64_t n) { return StashBuckets(n); }

void PfhtHash::PositionsOf(uint64_t hash, uint64_t n, uint64_t* p1, uint64_t* p2) {
  *p1 = Reduce(hash, n);
  *p2 = Reduce(std::rotl(hash, 32), n);
}

uint64_t PfhtHash::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

// ---- Options and blocks -------------------------------------------------------------

Status PfhtHash::Configure(EngineOptions& options, const Options& /*index_options*/) {
  initial_buckets_ = options.Uint("buckets");
  min_resize_load_ = options.Double("min_resize_load");
  return Status::OK();
}

uint64_t PfhtHash::BucketsFor(uint64_t keys) const {
  if (initial_buckets_ != 0) return initial_buckets_;
  if (keys == 0) return kPfhtDefaultBuckets;
  // Four slots a bucket, filled to 75% (the load Group hashing and WOPHI measure PFHT at).
  return std::max(kPfhtMinBuckets, (keys + 2) / 3);
}

Status PfhtHash::ReadTable(uint64_t off, Table* t) const {
  uint64_t n = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(off, kPfhtTableMagic, pool().size() / kBucketBytes,
                                            TableBytesOf, &n));
  const auto* h = pool().At<const PfhtTableHeader>(off);
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kCheckedBytes, h->check, "the table header"));
  if (n < kPfhtMinBuckets || h->stash_buckets != StashBucketsFor(n)) {
    return Status::Corruption(name() + ": the table has " + std::to_string(n) + " buckets and " +
                              std::to_string(h->stash_buckets) + " stash buckets");
  }
  t->off = off;
  t->n = n;
  t->s = h->stash_buckets;
  t->b = reinterpret_cast<PfhtBucket*>(pool().At<char>(off) + kHeaderBytes);
  t->stash = t->b + n;
  return Status::OK();
}

void PfhtHash::SetView(const Table& t) { view_ = t; }

void PfhtHash::RebuildStashTags() {
  const Table& t = view_;
  stash_tags_.assign(kPfhtAssoc * t.s, 0);
  stash_used_ = 0;
  for (uint64_t k = 0; k < kPfhtAssoc * t.s; ++k) {
    const PfhtBucket* b = &t.stash[k / kPfhtAssoc];
    const uint8_t tok = b->token[k % kPfhtAssoc];
    if (tok == 0) continue;
    stash_tags_[k] = StashTag(HashOf(static_cast<SlotForm>(tok), b->slot[k % kPfhtAssoc]));
    ++stash_used_;
  }
  stash_end_ = StashEnd(stash_tags_, stash_tags_.size());
}

Status PfhtHash::NewTable(uint64_t n, Table* t) {
  const uint64_t s = StashBucketsFor(n);
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(n, s), std::to_string(n) + " buckets",
                                       kPfhtTableMagic, n, &off));
  auto* h = pool().At<PfhtTableHeader>(off);
  persister().Store(&h->stash_buckets, s);
  persister().Store(&h->check, MetadataCheck(h, kCheckedBytes));
  t->off = off;
  t->n = n;
  t->s = s;
  t->b = reinterpret_cast<PfhtBucket*>(pool().At<char>(off) + kHeaderBytes);
  t->stash = t->b + n;
  return Status::OK();
}

Status PfhtHash::Create() {
  Table t;
  PMHASH_RETURN_IF_ERROR(NewTable(BucketsFor(initial_capacity()), &t));
  CreateRoot(kRootLayout, t.off, TableBytes(t.n, t.s));
  SetView(t);
  RebuildStashTags();
  count_.store(0);
  return Status::OK();
}

Status PfhtHash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &off, &count));
  Table t;
  PMHASH_RETURN_IF_ERROR(ReadTable(off, &t));
  visit(t.off);
  // A record is reached twice while a displacement is in flight (pfht): visited once.
  std::vector<uint64_t> records;
  ForEachSlot(t, [&](const PfhtBucket* b, bool, size_t i) {
    if (b->token[i] == static_cast<uint8_t>(SlotForm::kRecord) &&
        pool().Contains(b->slot[i].word0, 8)) {
      records.push_back(b->slot[i].word0);
    }
  });
  std::sort(records.begin(), records.end());
  records.erase(std::unique(records.begin(), records.end()), records.end());
  for (uint64_t r : records) visit(r);
  return Status::OK();
}

// ---- Recovery -----------------------------------------------------------------------

Status PfhtHash::CheckSlot(const Table& t, const PfhtBucket* b, bool in_stash, size_t i,
                           uint64_t* hash) const {
  const uint8_t tok = b->token[i];
  const auto form = static_cast<SlotForm>(tok);
  const auto where = [&] {
    return name() + ": the slot at pool offset " + std::to_string(pool().ToOffset(&b->slot[i]));
  };
  if (!KnownForm(tok) || !codec().Plausible(form, b->slot[i])) {
    return Status::Corruption(where() + " is damaged");
  }
  *hash = HashOf(form, b->slot[i]);
  if (!in_stash) {
    uint64_t p1 = 0, p2 = 0;
    PositionsOf(*hash, t.n, &p1, &p2);
    const auto idx = static_cast<uint64_t>(b - t.b);
    if (idx != p1 && idx != p2) {
      return Status::Corruption(where() + " is not in one of its key's two buckets");
    }
  }
  return Status::OK();
}

Status PfhtHash::Recover(bool clean) {
  uint64_t off = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, kHeaderBytes, &off, &count));
  Table t;
  PMHASH_RETURN_IF_ERROR(ReadTable(off, &t));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(t.off, TableBytes(t.n, t.s)));
  SetView(t);
  if (clean) {
    if (count > kPfhtAssoc * (t.n + t.s)) {
      return Status::Corruption(name() + ": root count " + std::to_string(count) +
                                " exceeds the table's slots");
    }
    count_.store(count);
    RebuildStashTags();
    return Status::OK();
  }
  // After a crash: validate every slot; the second copy of an interrupted displacement
  // (pfht: identical form and words in the key's other bucket, at the higher address) is
  // cleared, its record left to the first; pfht-log never leaves one (the log rolled the
  // displacement back), so there it is Corruption. Then count.
  pm::Persister& ps = persister();
  uint64_t keys = 0, dups = 0;
  Status bad;
  ForEachSlot(t, [&](PfhtBucket* b, bool in_stash, size_t i) {
    if (!bad.ok() || b->token[i] == 0) return;
    uint64_t h = 0;
    bad = CheckSlot(t, b, in_stash, i, &h);
    if (!bad.ok()) return;
    if (!in_stash) {
      uint64_t p1 = 0, p2 = 0;
      PositionsOf(h, t.n, &p1, &p2);
      const PfhtBucket* other = &t.b[p1] == b ? &t.b[p2] : &t.b[p1];
      bool lower_copy = false;
      if (other < b) {
        for (size_t j = 0; j < kPfhtAssoc && !lower_copy; ++j) {
          lower_copy = SameItem(other, j, b, i);
        }
      }
      if (lower_copy) {
        if (logged()) {
          bad = Status::Corruption(name() + ": a key is in both its buckets (the log should "
                                   "have rolled the displacement back)");
          return;
        }
        ps.Store(&b->token[i], uint8_t{0});
        ps.Persist(&b->token[i], 1);
        ++dups;
        return;
      }
    }
    ++keys;
  });
  PMHASH_RETURN_IF_ERROR(bad);
  recovered_duplicates_ = dups;
  count_.store(keys);
  PersistRootCount(keys);
  RebuildStashTags();
  return Status::OK();
}

// ---- Search -------------------------------------------------------------------------

PfhtHash::Slot PfhtHash::Find(std::string_view key, uint64_t hash) const {
  const Table& t = view_;
  uint64_t p1 = 0, p2 = 0;
  PositionsOf(hash, t.n, &p1, &p2);
  const SlotCodec::KeyMatcher match(codec(), key, hash);
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && p2 == p1) break;
    PfhtBucket* b = &t.b[k == 0 ? p1 : p2];
    persister().NoteRead(b, pm::kCacheLine);
    for (size_t i = 0; i < kPfhtAssoc; ++i) {
      const uint8_t tok = b->token[i];
      if (tok == 0) continue;
      if (i == 3) persister().NoteRead(&b->slot[3], sizeof(KvWords));
      if (match(static_cast<SlotForm>(tok), b->slot[i])) return {b, i};
    }
  }
  // The stash, in order up to its last used slot (the original scans it; inserts take
  // the first free slot, so the used slots stay at its front); the DRAM tags skip the
  // slots of other hashes, so only candidates are read in PM.
  const uint8_t tag = StashTag(hash);
  for (size_t k = NextTag(stash_tags_, 0, stash_end_, tag); k < stash_end_;
       k = NextTag(stash_tags_, k + 1, stash_end_, tag)) {
    PfhtBucket* b = &t.stash[k / kPfhtAssoc];
    const size_t i = k % kPfhtAssoc;
    persister().NoteRead(&b->slot[i], sizeof(KvWords));
    const uint8_t tok = b->token[i];
    if (tok != 0 && match(static_cast<SlotForm>(tok), b->slot[i])) return {b, i};
  }
  return {};
}

Status PfhtHash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const Slot s = Find(key, hash);
  if (s.bucket == nullptr) return Status::NotFound();
  AssignValue(value, codec().Value(static_cast<SlotForm>(s.bucket->token[s.index]),
                                   s.bucket->slot[s.index]));
  return Status::OK();
}

// ---- Writes -------------------------------------------------------------------------

void PfhtHash::WriteSlot(PfhtBucket* bucket, size_t i, SlotForm form, const KvWords& words,
                         SlotCommit how) {
  pm::Persister& ps = persister();
  ps.Store(&bucket->slot[i].word1, words.word1);
  ps.Store(&bucket->slot[i].word0, words.word0);
  if (how != SlotCommit::kToken) {
    ps.Store(&bucket->token[i], static_cast<uint8_t>(form));
    // pfht-log: the lines from the tokens to the slot (one line for slots 0-2), flushed
    // once; the transaction's fence orders them before its commit.
    if (how == SlotCommit::kFlush) {
      ps.Flush(bucket, offsetof(PfhtBucket, slot) + (i + 1) * sizeof(KvWords));
    }
    return;
  }
  // Data first, durable, then the token: the slot's commit point.
  ps.Flush(&bucket->slot[i], sizeof(KvWords));
  ps.Publish(&bucket->token[i], static_cast<uint8_t>(form));
}

Status PfhtHash::Place(const Table& t, std::vector<uint8_t>* tags, uint64_t hash, SlotForm form,
                       const KvWords& words, PlaceInto into, bool* placed) {
  *placed = false;
  pm::Persister& ps = persister();
  const bool live = into == PlaceInto::kLiveTable;
  const bool log = live && logged();
  const SlotCommit commit =
      !live ? SlotCommit::kStoreOnly : logged() ? SlotCommit::kFlush : SlotCommit::kToken;
  std::unique_ptr<pm::UndoLog::Tx> tx;
  // pfht-log: the buckets the operation changes are saved before it changes them; the
  // lines it changed (WriteSlot, kFlush) fenced and the log retired after.
  const auto begin = [&](std::initializer_list<PfhtBucket*> bs) -> Status {
    if (!log) return Status::OK();
    tx = undo_log().Begin();
    for (PfhtBucket* b : bs) {
      if (Status s = tx->Save(b, sizeof(PfhtBucket)); !s.ok()) {
        tx.reset();  // nothing changed yet
        return s;
      }
    }
    return Status::OK();
  };
  const auto finish = [&] {
    if (!log) return;
    ps.Fence();
    tx->Commit();  // the commit point
    log_txs_.fetch_add(1, std::memory_order_relaxed);
  };

  uint64_t p1 = 0, p2 = 0;
  PositionsOf(hash, t.n, &p1, &p2);
  PfhtBucket* b1 = &t.b[p1];
  PfhtBucket* b2 = &t.b[p2];
  // 1. A free slot of either bucket, the emptier first (ties: position 1).
  const size_t f1 = FreeCount(b1), f2 = p2 != p1 ? FreeCount(b2) : 0;
  if (f1 + f2 > 0) {
    PfhtBucket* dst = f2 > f1 ? b2 : b1;
    PMHASH_RETURN_IF_ERROR(begin({dst}));
    WriteSlot(dst, FreeSlot(dst), form, words, commit);
    finish();
    *placed = true;
    return Status::OK();
  }
  // 2. At most one displacement: a resident of a candidate bucket moves to its own other
  // bucket if that has a free slot; the new item takes the slot it left.
  for (int side = 0; side < 2; ++side) {
    if (side == 1 && p2 == p1) break;
    PfhtBucket* x = side == 0 ? b1 : b2;
    const uint64_t xi = side == 0 ? p1 : p2;
    for (size_t i = 0; i < kPfhtAssoc; ++i) {
      const uint8_t tok = x->token[i];
      if (tok == 0) continue;
      const auto rform = static_cast<SlotForm>(tok);
      const KvWords rwords = x->slot[i];
      uint64_t q1 = 0, q2 = 0;
      PositionsOf(HashOf(rform, rwords), t.n, &q1, &q2);
      const uint64_t alt = q1 == xi ? q2 : q1;
      if (alt == xi) continue;
      PfhtBucket* dst = &t.b[alt];
      const size_t j = FreeSlot(dst);
      if (j == kPfhtAssoc) continue;
      PMHASH_RETURN_IF_ERROR(begin({dst, x}));
      // pfht: the copy committed, then the original cleared: between them the item is
      // twice (recovery keeps one), never nowhere.
      WriteSlot(dst, j, rform, rwords, commit);
      ps.Store(&x->token[i], uint8_t{0});
      if (commit == SlotCommit::kToken) ps.Persist(&x->token[i], 1);
      WriteSlot(x, i, form, words, commit);
      finish();
      if (live) displacements_.fetch_add(1, std::memory_order_relaxed);
      *placed = true;
      return Status::OK();
    }
  }
  // 3. The stash: its first free slot.
  const size_t k = NextTag(*tags, 0, tags->size(), 0);
  if (k == tags->size()) return Status::OK();
  PfhtBucket* sb = &t.stash[k / kPfhtAssoc];
  PMHASH_RETURN_IF_ERROR(begin({sb}));
  WriteSlot(sb, k % kPfhtAssoc, form, words, commit);
  finish();
  (*tags)[k] = StashTag(hash);
  if (live) {
    ++stash_used_;
    stash_end_ = std::max(stash_end_, k + 1);
    stash_inserts_.fetch_add(1, std::memory_order_relaxed);
  }
  *placed = true;
  return Status::OK();
}

Status PfhtHash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                         WriteMode mode) {
  int own_grows = 0;  // resizes this insert ran itself: others' are no reason to refuse
  for (;;) {
    uint64_t n = 0, slots = 0;
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      n = view_.n;
      slots = kPfhtAssoc * (view_.n + view_.s);
      const Slot s = Find(key, hash);
      if (s.bucket != nullptr) {
        if (mode == WriteMode::kInsert) return Status::AlreadyExists();
        return UpdateSlot(&s.bucket->token[s.index], &s.bucket->slot[s.index], key, value, hash);
      }
      if (mode == WriteMode::kUpdate) return Status::NotFound();
      SlotForm form = SlotForm::kEmpty;
      KvWords words;
      PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
      bool placed = false;
      const Status st =
          Place(view_, &stash_tags_, hash, form, words, PlaceInto::kLiveTable, &placed);
      if (!st.ok()) {
        codec().Release(form, words);
        return st;
      }
      if (placed) {
        count_.fetch_add(1, std::memory_order_relaxed);
        return Status::OK();
      }
      codec().Release(form, words);  // never linked
    }
    // No place in either bucket, after one displacement, nor in the stash: the table
    // doubles, unless it is still mostly empty (the key collides with too many keys of
    // its hash: growing would not help).
    if (!resize_enabled() || own_grows >= 3 ||
        (n >= kAlwaysGrowBelow &&
         static_cast<double>(Count()) < min_resize_load_ * static_cast<double>(slots))) {
      return Status::TableFull(name() + ": both buckets of the key and the stash are full" +
                               std::string(resize_enabled() ? " and growing does not help" : ""));
    }
    bool grew = false;
    PMHASH_RETURN_IF_ERROR(Grow(n, &grew));
    own_grows += grew ? 1 : 0;
  }
}

Status PfhtHash::DoDelete(std::string_view key, uint64_t hash) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  const Slot s = Find(key, hash);
  if (s.bucket == nullptr) return Status::NotFound();
  pm::Persister& ps = persister();
  uint8_t* token = &s.bucket->token[s.index];
  const auto form = static_cast<SlotForm>(*token);
  const KvWords old = s.bucket->slot[s.index];
  if (logged()) {
    std::unique_ptr<pm::UndoLog::Tx> tx = undo_log().Begin();
    PMHASH_RETURN_IF_ERROR(tx->Save(s.bucket, sizeof(PfhtBucket)));
    ps.Store(token, uint8_t{0});
    ps.Persist(token, 1);
    tx->Commit();
    log_txs_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ps.Store(token, uint8_t{0});
    ps.Persist(token, 1);
  }
  if (s.bucket >= view_.stash) {
    stash_tags_[static_cast<size_t>(s.bucket - view_.stash) * kPfhtAssoc + s.index] = 0;
    --stash_used_;
    stash_end_ = StashEnd(stash_tags_, stash_end_);
  }
  codec().Release(form, old);  // durably unreachable
  count_.fetch_sub(1, std::memory_order_relaxed);
  return Status::OK();
}

uint64_t PfhtHash::Count() const { return count_.load(std::memory_order_relaxed); }

// ---- Resize -------------------------------------------------------------------------

Status PfhtHash::Grow(uint64_t observed_n, bool* grew) {
  *grew = false;
  if (IterationScope::Active(this)) {
    return Status::TableFull(name() + ": full, and a resize cannot run inside ForEach");
  }
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (view_.n != observed_n) return Status::OK();
  const Table old = view_;
  const uint64_t n2 = old.n * 2;
  const uint64_t s2 = StashBucketsFor(n2);
  if (TableBytes(n2, s2) > pool().size()) {
    return Status::PoolFull(name() + ": the table cannot double beyond the pool");
  }
  Table nt;
  PMHASH_RETURN_IF_ERROR(NewTable(n2, &nt));
  const uint64_t off = nt.off;
  std::vector<uint8_t> tags(kPfhtAssoc * s2, 0);
  uint64_t stashed = 0;
  bool fits = true;
  // Every item by the insert rule into the unreachable new block (plain stores: it is
  // flushed whole before it is published). Records are shared, not copied.
  ForEachSlot(old, [&](const PfhtBucket* b, bool, size_t i) {
    if (!fits || b->token[i] == 0) return;
    const auto form = static_cast<SlotForm>(b->token[i]);
    bool placed = false;
    const Status s = Place(nt, &tags, HashOf(form, b->slot[i]), form, b->slot[i],
                           PlaceInto::kNewTable, &placed);
    fits = s.ok() && placed;
  });
  if (!fits) {
    allocator().Free(off);
    refused_resizes_.fetch_add(1, std::memory_order_relaxed);
    return Status::TableFull(name() + ": an item would find no place in the doubled table (too "
                             "many keys of one hash)");
  }
  for (uint8_t tag : tags) stashed += tag != 0;
  persister().Flush(pool().At<char>(off), TableBytes(n2, s2));
  // The commit point: the new table exists and is durable (PublishRootTable fences first).
  PublishRootTable(off);
  allocator().Free(old.off);  // durably unreachable
  SetView(nt);
  stash_tags_ = std::move(tags);
  stash_used_ = stashed;
  stash_end_ = StashEnd(stash_tags_, stash_tags_.size());
  resizes_.fetch_add(1, std::memory_order_relaxed);
  *grew = true;
  return Status::OK();
}

// ---- Iteration ----------------------------------------------------------------------

Status PfhtHash::ForEach(const Visitor& fn) const {
  const IterationScope iterating(this, resize_mu_);
  Entries batch;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    ForEachSlot(view_, [&](const PfhtBucket* b, bool, size_t i) {
      const auto f = static_cast<SlotForm>(b->token[i]);
      if (f != SlotForm::kEmpty) {
        batch.emplace_back(codec().Key(f, b->slot[i]), codec().Value(f, b->slot[i]));
      }
    });
  }
  for (const auto& [key, value] : batch) {
    if (!fn(key, value)) break;
  }
  return Status::OK();
}

Status PfhtHash::DoScan(ScanPage* page) const {
  const IterationScope iterating(this, resize_mu_);
  const Table& t = view_;
  // A home is position 1; a key may sit in either bucket or the stash, so a page reads the
  // whole table (one run) and keeps its homes.
  const auto collect = [&](uint64_t, uint64_t, std::vector<ScanEntry>* out) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    ForEachSlot(t, [&](const PfhtBucket* b, bool, size_t i) {
      const auto f = static_cast<SlotForm>(b->token[i]);
      if (f == SlotForm::kEmpty) return;
      AddScanEntry(out, HashOf(f, b->slot[i]), codec().Key(f, b->slot[i]),
                   codec().Value(f, b->slot[i]));
    });
  };
  page->CollectHomes(t.n, t.n, collect);
  return Status::OK();
}

// ---- Stats and checks ---------------------------------------------------------------

void PfhtHash::FillStats(IndexStats* stats) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  stats->count = Count();
  stats->key_slots = kPfhtAssoc * (view_.n + view_.s);
  stats->dram_bytes = sizeof(*this) + stash_tags_.capacity();
  auto& c = stats->engine_counters;
  c["buckets"] = view_.n;
  c["stash_slots"] = kPfhtAssoc * view_.s;
  c["stash_used"] = stash_used_;
  c["resizes"] = resizes_.load(std::memory_order_relaxed);
  c["displacements"] = displacements_.load(std::memory_order_relaxed);
  c["stash_inserts"] = stash_inserts_.load(std::memory_order_relaxed);
  c["log_txs"] = log_txs_.load(std::memory_order_relaxed);
  c["refused_resizes"] = refused_resizes_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs();
  c["recovery_duplicates"] = recovered_duplicates_;
}

Status PfhtHash::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  std::shared_lock<std::shared_mutex> lock(mu_);
  uint64_t off = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &off, &stored));
  Table t;
  PMHASH_RETURN_IF_ERROR(ReadTable(off, &t));
  if (t.off != view_.off || t.n != view_.n) {
    return Status::Corruption(name() + ": the root names another table than the live one");
  }
  std::unordered_set<std::string> keys;
  uint64_t count = 0, in_stash = 0;
  Status bad;
  ForEachSlot(t, [&](const PfhtBucket* b, bool stash, size_t i) {
    if (!bad.ok()) return;
    const size_t k = stash ? static_cast<size_t>(b - t.stash) * kPfhtAssoc + i : 0;
    if (b->token[i] == 0) {
      if (stash && stash_tags_[k] != 0) {
        bad = Status::Corruption(name() + ": a free stash slot has a tag");
      }
      return;
    }
    const auto form = static_cast<SlotForm>(b->token[i]);
    uint64_t h = 0;
    bad = CheckSlot(t, b, stash, i, &h);
    if (!bad.ok()) return;
    const std::string at =
        "the slot at pool offset " + std::to_string(pool().ToOffset(&b->slot[i]));
    const std::string key(codec().Key(form, b->slot[i]));
    if (h != KeyHash(key)) {
      bad = Status::Corruption(name() + ": " + at + " has a wrong hash word");
      return;
    }
    if (stash && stash_tags_[k] != StashTag(h)) {
      bad = Status::Corruption(name() + ": " + at + " (stash) has a wrong DRAM tag");
      return;
    }
    if (!keys.insert(key).second) {
      bad = Status::Corruption(name() + ": a key is stored twice (again in " + at + ")");
      return;
    }
    in_stash += stash;
    ++count;
  });
  PMHASH_RETURN_IF_ERROR(bad);
  if (stash_end_ != StashEnd(stash_tags_, stash_tags_.size())) {
    return Status::Corruption(name() + ": the stash's end is " + std::to_string(stash_end_) +
                              ", not one past its last used slot");
  }
  if (count != Count() || in_stash != stash_used_) {
    return Status::Corruption(name() + ": Count() is " + std::to_string(Count()) + " and " +
                              std::to_string(stash_used_) + " stash slots are counted, but " +
                              std::to_string(count) + " slots (" + std::to_string(in_stash) +
                              " in the stash) are occupied");
  }
  return Status::OK();
}

void PfhtHash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  const Table& t = view_;
  mark(t.off, kHeaderBytes, pm::Region::kEngineMetadata, true);
  for (uint64_t k = 0; k < t.n + t.s; ++k) {
    const PfhtBucket* b = &t.b[k];
    const uint64_t o = pool().ToOffset(b);
    mark(o, sizeof(b->token), pm::Region::kSlots, false);
    mark(o + offsetof(PfhtBucket, slot), sizeof(b->slot), pm::Region::kSlots, false);
    for (size_t i = 0; i < kPfhtAssoc; ++i) {
      codec().DescribeRecord(static_cast<SlotForm>(b->token[i]), b->slot[i], mark);
    }
  }
}

void RegisterEngines_pfht(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {
      OptionSpec::Uint("buckets", std::nullopt, kPfhtMinBuckets, uint64_t{1} << 34,
                       "4-slot buckets of the first table (auto: initial_capacity / 3, a "
                       "75% load, else 1024); the stash adds 3% of the slots"),
      OptionSpec::Double("min_resize_load", 0.25, 0.0, 1.0,
                         "an insert that finds no place (both buckets, one displacement, the "
                         "stash) doubles the table only when at least this fraction of the "
                         "slots is used, or the table has fewer than 64 buckets (else: "
                         "TableFull, the key collides with too many keys of its hash)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "an insert finds both buckets and the stash full after "
                                      "one displacement (not in the original)",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true};
  // Two buckets and a 4-slot stash: displacements, stash inserts and resizes come within
  // a few dozen keys.
  info.test = {.crash_options = {{"buckets", "2"}},
               .thread_crash_options = {{"buckets", "64"}},
               .growth_counters = {"resizes"},
               .crash_script_scale = 0.65};  // 20,031 crash images at 1 (make test's budget)
  info.description = {"pfht",
                      "PFHT: 4-slot cuckoo buckets, at most one displacement, a 3% stash; "
                      "token commit, no log (a crash mid-displacement leaves a duplicate "
                      "that recovery clears)",
                      "PFHT (Debnath et al., INFLOW'15; baseline of 000 and 004)",
                      /*crash_consistent=*/true};
  registry.Add<PfhtHash>(info, PfhtHash::Logging::kNone);
  info.test.crash_script_scale = 0.35;  // a logged write's fences: 20,248 images at 0.5
  info.description = {"pfht-log",
                      "PFHT with every insert, delete and displacement logged (WOPHI's "
                      "PFHT-Log; the kit's undo log)",
                      "PFHT-Log (baseline of 000)", /*crash_consistent=*/true};
  registry.Add<PfhtHash>(std::move(info), PfhtHash::Logging::kLog);
}

}  // namespace pmhash::engines
