// Level hashing (Zuo et al., OSDI'18). Layout, invariants, persist order, locking: level.h.
#include "engines/level/level.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr uint64_t kBucketBytes = sizeof(LevelBucket);
constexpr uint64_t kHeaderBytes = sizeof(LevelTableHeader);
constexpr size_t kCheckedBytes = offsetof(LevelTableHeader, check);
constexpr RootLayout kRootLayout{kLevelRootMagic, kLevelVersion, sizeof(EngineRoot), 0};

uint64_t TableBytes(uint64_t buckets) { return kHeaderBytes + buckets * kBucketBytes; }
LevelBucket* BucketsOf(char* block) { return reinterpret_cast<LevelBucket*>(block + kHeaderBytes); }

bool KnownForm(uint8_t t) {
  return t == static_cast<uint8_t>(SlotForm::kInline) ||
         t == static_cast<uint8_t>(SlotForm::kRecord);
}

// The first free slot of `b`, or kLevelAssoc.
size_t FreeSlot(const LevelBucket* b) {
  for (size_t i = 0; i < kLevelAssoc; ++i) {
    if (__atomic_load_n(&b->token[i], __ATOMIC_RELAXED) == 0) return i;
  }
  return kLevelAssoc;
}
size_t FreeCount(const LevelBucket* b) {
  size_t n = 0;
  for (size_t i = 0; i < kLevelAssoc; ++i) n += b->token[i] == 0;
  return n;
}
bool SameItem(const LevelBucket* a, size_t i, const LevelBucket* b, size_t j) {
  return a->token[i] == b->token[j] && a->slot[i].word0 == b->slot[j].word0 &&
         a->slot[i].word1 == b->slot[j].word1;
}

}  // namespace

LevelHash::LevelHash() : counts_(new CountShard[kLevelCountShards]) {
  // Stripe of top bucket i: (i / 2) mod kLevelStripes; it guards bottom bucket i / 2 too.
  stripes_.Reset(kLevelStripes, /*area_shift=*/1);
}

LevelHash::Candidates LevelHash::CandidatesOf(uint64_t hash, uint64_t n) {
  // Two hash functions from the one 64-bit KeyHash: Reduce reads the high bits, so
  // position 1 comes (mostly) from the high 32-bit half, position 2 from the low half.
  return {Reduce(hash, n), Reduce(std::rotl(hash, 32), n)};
}

// ---- Options and blocks -------------------------------------------------------------

Status LevelHash::Configure(EngineOptions& options, const Options& /*index_options*/) {
  SetQuickGet(true);  // FindOptimistic's first try, from Get
  initial_top_ = options.Uint("top_buckets");
  min_resize_load_ = options.Double("min_resize_load");
  prefetch_buckets_ = options.Bool("prefetch_buckets");
  if (initial_top_ % 2 != 0) {
    return Status::InvalidArgument("level: top_buckets must be even (two top buckets share "
                                   "a bottom bucket)");
  }
  return Status::OK();
}

uint64_t LevelHash::TopFor(uint64_t keys) const {
  if (initial_top_ != 0) return initial_top_;
  if (keys == 0) return kLevelDefaultTop;
  // 6 slots per top bucket (4 of its own, half of a bottom bucket's 8), filled to ~80%.
  const uint64_t n = (keys * 10 + 47) / 48;
  return std::max(kLevelMinTop, (n + 1) & ~uint64_t{1});
}

Status LevelHash::ValidateLevel(uint64_t off, uint64_t* buckets) const {
  PMHASH_RETURN_IF_ERROR(
      ValidateTableBlock(off, kLevelTableMagic, pool().size() / kBucketBytes, TableBytes, buckets));
  const auto* h = pool().At<const LevelTableHeader>(off);
  return VerifyMetadata(h, kCheckedBytes, h->check, "a level header");
}

Status LevelHash::ReadLevels(uint64_t top_off, Levels* v, uint64_t* rehash_from) const {
  uint64_t n = 0, nb = 0;
  PMHASH_RETURN_IF_ERROR(ValidateLevel(top_off, &n));
  if (n < kLevelMinTop || n % 2 != 0) {
    return Status::Corruption("level: the top level has " + std::to_string(n) +
                              " buckets (not even)");
  }
  auto* h = pool().At<LevelTableHeader>(top_off);
  const uint64_t bottom = h->bottom;
  if (bottom == top_off || bottom % pm::kCacheLine != 0 || !pool().Contains(bottom, kHeaderBytes)) {
    return Status::Corruption("level: the top level names a bottom at pool offset " +
                              std::to_string(bottom));
  }
  PMHASH_RETURN_IF_ERROR(ValidateLevel(bottom, &nb));
  if (nb != n / 2) {
    return Status::Corruption("level: the bottom level has " + std::to_string(nb) +
                              " buckets, not half of the top's " + std::to_string(n));
  }
  PMHASH_RETURN_IF_ERROR(LoadSealed(&h->rehash_from, "the top level's rehash_from", rehash_from));
  if (*rehash_from != 0) {
    uint64_t nr = 0;
    if (*rehash_from == top_off || *rehash_from == bottom) {
      return Status::Corruption("level: rehash_from names a live level");
    }
    PMHASH_RETURN_IF_ERROR(ValidateLevel(*rehash_from, &nr));
    if (nr * 4 != n) {
      return Status::Corruption("level: the level being rehashed has " + std::to_string(nr) +
                                " buckets, not a quarter of the top's " + std::to_string(n));
    }
  }
  v->top_off = top_off;
  v->bottom_off = bottom;
  v->n = n;
  v->header = h;
  v->top = BucketsOf(pool().At<char>(top_off));
  v->bottom = BucketsOf(pool().At<char>(bottom));
  return Status::OK();
}

void LevelHash::SetView(const Levels& v) {
  view_ = v;
  top_.store(v.top, std::memory_order_release);
  bottom_.store(v.bottom, std::memory_order_release);
  top_n_.store(v.n, std::memory_order_release);
}

Status LevelHash::Create() {
  const uint64_t n = TopFor(initial_capacity());
  pm::Persister& ps = persister();
  uint64_t bottom = 0, top = 0;
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(n / 2), std::to_string(n / 2) + " bottom buckets",
                                       kLevelTableMagic, n / 2, &bottom));
  auto* bh = pool().At<LevelTableHeader>(bottom);
  ps.Store(&bh->check, MetadataCheck(bh, kCheckedBytes));
  ps.Store(&bh->rehash_from, SealFor(&bh->rehash_from, 0));
  ps.Flush(bh, TableBytes(n / 2));
  if (Status s = NewTableBlock(TableBytes(n), std::to_string(n) + " top buckets", kLevelTableMagic,
                               n, &top);
      !s.ok()) {
    allocator().Free(bottom);
    return s;
  }
  auto* th = pool().At<LevelTableHeader>(top);
  ps.Store(&th->bottom, bottom);
  ps.Store(&th->check, MetadataCheck(th, kCheckedBytes));
  ps.Store(&th->rehash_from, SealFor(&th->rehash_from, 0));
  CreateRoot(kRootLayout, top, TableBytes(n));  // persists the top, fences the bottom too
  Levels v;
  uint64_t rehash = 0;
  PMHASH_RETURN_IF_ERROR(ReadLevels(top, &v, &rehash));
  SetView(v);
  base_count_ = 0;
  return Status::OK();
}

uint64_t LevelHash::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

Status LevelHash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t top = 0, count = 0, rehash = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &top, &count));
  Levels v;
  PMHASH_RETURN_IF_ERROR(ReadLevels(top, &v, &rehash));
  visit(v.top_off);
  visit(v.bottom_off);
  // A record is reached twice while a move or a rehash is in flight (two slots with the
  // same words): each block is visited once.
  std::vector<uint64_t> records;
  const auto take = [&](const LevelBucket* b) {
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      if (b->token[i] == static_cast<uint8_t>(SlotForm::kRecord) &&
          pool().Contains(b->slot[i].word0, 8)) {
        records.push_back(b->slot[i].word0);
      }
    }
  };
  ForEachBucket(v, [&](bool, uint64_t, const LevelBucket* b) { take(b); });
  if (rehash != 0) {
    visit(rehash);
    const LevelBucket* old = BucketsOf(pool().At<char>(rehash));
    for (uint64_t i = 0; i < v.n / 4; ++i) take(&old[i]);
  }
  std::sort(records.begin(), records.end());
  records.erase(std::unique(records.begin(), records.end()), records.end());
  for (uint64_t r : records) visit(r);
  return Status::OK();
}

// ---- Recovery -----------------------------------------------------------------------

bool LevelHash::PlanRehash(const std::vector<uint64_t>& hashes, uint64_t n2,
                           std::vector<uint8_t> bottom_used, std::vector<uint64_t>* dest,
                           uint64_t* moves) {
  constexpr uint32_t kNone = UINT32_MAX;
  constexpr size_t kMaxVisited = 64;  // buckets a search for a chain of moves may visit
  std::vector<uint8_t> top_used(n2, 0);
  // Which items each top bucket gets: built at the first search for moves (rare; 16 bytes
  // a top bucket), then kept.
  std::vector<uint32_t> top_items;
  dest->assign(hashes.size(), 0);
  *moves = 0;
  const auto put_top = [&](uint64_t t, uint32_t item) {
    if (!top_items.empty()) top_items[t * kLevelAssoc + top_used[t]] = item;
    ++top_used[t];
    (*dest)[item] = t;
  };
  const auto remove_top = [&](uint64_t t, uint32_t item) {
    uint32_t* items = &top_items[t * kLevelAssoc];
    const size_t last = --top_used[t];
    for (size_t i = 0; i <= last; ++i) {
      if (items[i] == item) items[i] = items[last];
    }
    items[last] = kNone;
  };
  // The other top candidate of a planned item in top bucket t.
  const auto other_top = [&](uint32_t item, uint64_t t) {
    const Candidates c = CandidatesOf(hashes[item], n2);
    return c.t1 == t ? c.t2 : c.t1;
  };
  for (uint32_t item = 0; item < hashes.size(); ++item) {
    const Candidates c = CandidatesOf(hashes[item], n2);
    // The paper's rule: the less used of the two new top buckets (ties: position 1).
    const uint64_t t = top_used[c.t2] < top_used[c.t1] ? c.t2 : c.t1;
    if (top_used[t] < kLevelAssoc) {
      put_top(t, item);
      continue;
    }
    // Both full: the less used of the two bottom ones (the old top).
    const uint64_t b = bottom_used[c.b2()] < bottom_used[c.b1()] ? c.b2() : c.b1();
    if (bottom_used[b] < kLevelAssoc) {
      ++bottom_used[b];
      (*dest)[item] = n2 + b;
      continue;
    }
    // All four full: a breadth-first search, from the two top buckets, for a chain of items
    // each moving to its other top bucket and ending in one with room (the paper's
    // movement, here in the plan only: the new top is empty, no move touches the media).
    struct Step {
      uint64_t bucket;
      size_t parent;   // index into visited, or kNoParent for a starting bucket
      uint32_t mover;  // the item of parent's bucket that moves into this one
    };
    constexpr size_t kNoParent = SIZE_MAX;
    if (top_items.empty()) {  // items so far in plan order, as put_top would have kept them
      top_items.assign(n2 * kLevelAssoc, kNone);
      std::vector<uint8_t> filled(n2, 0);
      for (uint32_t j = 0; j < item; ++j) {
        const uint64_t d = (*dest)[j];
        if (d < n2) top_items[d * kLevelAssoc + filled[d]++] = j;
      }
    }
    std::vector<Step> visited = {{c.t1, kNoParent, kNone}, {c.t2, kNoParent, kNone}};
    size_t end = kNoParent;
    for (size_t at = 0; at < visited.size() && end == kNoParent; ++at) {
      for (size_t i = 0; i < kLevelAssoc && end == kNoParent; ++i) {
        const uint32_t mover = top_items[visited[at].bucket * kLevelAssoc + i];
        const uint64_t to = other_top(mover, visited[at].bucket);
        const bool seen = std::any_of(visited.begin(), visited.end(),
                                      [&](const Step& s) { return s.bucket == to; });
        if (seen || visited.size() == kMaxVisited) continue;
        visited.push_back({to, at, mover});
        if (top_used[to] < kLevelAssoc) end = visited.size() - 1;
      }
    }
    if (end == kNoParent) return false;
    // Moves from the chain's end back to its start, each into the room the next one made.
    for (size_t s = end; visited[s].parent != kNoParent; s = visited[s].parent) {
      remove_top(visited[visited[s].parent].bucket, visited[s].mover);
      put_top(visited[s].bucket, visited[s].mover);
      ++*moves;
    }
    uint64_t start = end;
    while (visited[start].parent != kNoParent) start = visited[start].parent;
    put_top(visited[start].bucket, item);
  }
  return true;
}

Status LevelHash::FinishRehash(const Levels& v) {
  pm::Persister& ps = persister();
  uint64_t from = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&v.header->rehash_from, "rehash_from", &from));
  const LevelBucket* old = BucketsOf(pool().At<char>(from));
  // The plan's inputs as the resize saw them: the old bottom's items in order, and the use
  // of the bottom (the old top) before it, which is its use now less the items placed in it.
  struct Item {
    const LevelBucket* bucket;
    size_t slot;
    bool placed;  // before the crash: a slot with the same form and words is a candidate
  };
  std::vector<Item> items;
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> bottom_used(v.n / 2);
  for (uint64_t k = 0; k < v.n / 2; ++k) {
    bottom_used[k] = static_cast<uint8_t>(kLevelAssoc - FreeCount(&v.bottom[k]));
  }
  for (uint64_t k = 0; k < v.n / 4; ++k) {
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      const uint8_t t = old[k].token[i];
      if (t == 0) continue;
      const auto form = static_cast<SlotForm>(t);
      if (!KnownForm(t) || !codec().Plausible(form, old[k].slot[i])) {
        return Status::Corruption("level: a slot of the level being rehashed is damaged");
      }
      const uint64_t h = HashOf(form, old[k].slot[i]);
      const Candidates c = CandidatesOf(h, v.n);
      const auto holds = [&](const LevelBucket* b) {
        for (size_t j = 0; j < kLevelAssoc; ++j) {
          if (SameItem(b, j, &old[k], i)) return true;
        }
        return false;
      };
      bool placed = holds(&v.top[c.t1]) || holds(&v.top[c.t2]);
      for (const uint64_t b : {c.b1(), c.b2()}) {
        if (placed || !holds(&v.bottom[b])) continue;
        if (bottom_used[b] == 0) return Status::Corruption("level: a rehashed item is doubled");
        --bottom_used[b];
        placed = true;
      }
      items.push_back({&old[k], i, placed});
      hashes.push_back(h);
    }
  }
  std::vector<uint64_t> dest;
  uint64_t moves = 0;
  if (!PlanRehash(hashes, v.n, std::move(bottom_used), &dest, &moves)) {
    return Status::Corruption("level: the interrupted resize's plan has no place for an item");
  }
  uint64_t placed = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].placed) continue;
    const LevelBucket* ob = items[k].bucket;
    const size_t i = items[k].slot;
    LevelBucket* to = PlannedBucket(v, dest[k]);
    const size_t j = FreeSlot(to);
    if (j == kLevelAssoc) {
      return Status::Corruption("level: an item of the interrupted resize has no place");
    }
    ps.Store(&to->slot[j].word1, ob->slot[i].word1);
    ps.Store(&to->slot[j].word0, ob->slot[i].word0);
    ps.Flush(&to->slot[j], sizeof(KvWords));
    ps.Fence();
    ps.Store(&to->token[j], ob->token[i]);
    ps.Flush(&to->token[j], 1);
    ++placed;
  }
  ps.Publish(&v.header->rehash_from, SealFor(&v.header->rehash_from, 0));
  allocator().Free(from);
  recovered_rehash_ = placed;
  return Status::OK();
}

Status LevelHash::CheckSlot(const Levels& v, bool is_top, uint64_t idx, const LevelBucket* b,
                            size_t i, uint64_t* hash) const {
  const uint8_t t = b->token[i];
  const auto form = static_cast<SlotForm>(t);
  const auto where = [&] {
    return "level: the slot at pool offset " + std::to_string(pool().ToOffset(&b->slot[i]));
  };
  if (!KnownForm(t) || !codec().Plausible(form, b->slot[i])) {
    return Status::Corruption(where() + " is damaged");
  }
  *hash = HashOf(form, b->slot[i]);
  const Candidates c = CandidatesOf(*hash, v.n);
  if (is_top ? (idx != c.t1 && idx != c.t2) : (idx != c.b1() && idx != c.b2())) {
    return Status::Corruption(where() + " is not one of its key's four buckets");
  }
  return Status::OK();
}

Status LevelHash::Recover(bool clean) {
  uint64_t top = 0, count = 0, rehash = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, kHeaderBytes, &top, &count));
  Levels v;
  PMHASH_RETURN_IF_ERROR(ReadLevels(top, &v, &rehash));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(v.top_off, TableBytes(v.n)));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(v.bottom_off, TableBytes(v.n / 2)));
  if (rehash != 0) {
    PMHASH_RETURN_IF_ERROR(CheckTableBlock(rehash, TableBytes(v.n / 4)));
    PMHASH_RETURN_IF_ERROR(FinishRehash(v));
    clean = false;
  }
  SetView(v);
  for (size_t i = 0; i < kLevelCountShards; ++i) counts_[i].delta.store(0);
  if (clean) {
    if (count > kLevelAssoc * (v.n + v.n / 2)) {
      return Status::Corruption("level: root count " + std::to_string(count) +
                                " exceeds the table's slots");
    }
    base_count_ = count;
    return Status::OK();
  }
  // After a crash: validate every slot, clear the second copy of an interrupted move (the
  // one at the higher address: both hold the same words, and the record stays owned by the
  // other), count.
  pm::Persister& ps = persister();
  uint64_t keys = 0, dups = 0;
  Status bad;
  ForEachBucket(v, [&](bool is_top, uint64_t idx, LevelBucket* b) {
    for (size_t i = 0; i < kLevelAssoc && bad.ok(); ++i) {
      const uint8_t t = b->token[i];
      if (t == 0) continue;
      uint64_t h = 0;
      bad = CheckSlot(v, is_top, idx, b, i, &h);
      if (!bad.ok()) return;
      const Candidates c = CandidatesOf(h, v.n);
      const LevelBucket* cand[4] = {&v.top[c.t1], &v.top[c.t2], &v.bottom[c.b1()],
                                    &v.bottom[c.b2()]};
      bool lower_copy = false;
      for (const LevelBucket* o : cand) {
        if (o >= b) continue;  // only a copy at a lower address wins
        for (size_t j = 0; j < kLevelAssoc && !lower_copy; ++j) lower_copy = SameItem(o, j, b, i);
      }
      if (lower_copy) {
        ps.Store(&b->token[i], uint8_t{0});
        ps.Persist(&b->token[i], 1);
        ++dups;
        continue;
      }
      ++keys;
    }
  });
  PMHASH_RETURN_IF_ERROR(bad);
  recovered_duplicates_ = dups;
  base_count_ = keys;
  PersistRootCount(keys);
  return Status::OK();
}

// ---- Locks --------------------------------------------------------------------------

void LevelHash::LockKey(uint64_t hash, Levels* v, Stripe** a, Stripe** b) const {
  for (;;) {
    const uint64_t n = top_n_.load(std::memory_order_acquire);
    const Candidates c = CandidatesOf(hash, n);
    if (prefetch_buckets_) {
      // An insert's duplicate check reads all four; a delete, up to the key's.
      PrefetchCandidates(top_.load(std::memory_order_acquire),
                         bottom_.load(std::memory_order_acquire), c);
    }
    Stripe* s1 = &StripeOfTop(c.t1);
    Stripe* s2 = &StripeOfTop(c.t2);
    if (s2 < s1) std::swap(s1, s2);
    s1->mu.lock();
    if (s2 != s1) s2->mu.lock();
    if (top_n_.load(std::memory_order_acquire) == n) {
      *v = view_;
      *a = s1;
      *b = s2;
      return;
    }
    if (s2 != s1) s2->mu.unlock();
    s1->mu.unlock();
  }
}

// Releases LockKey's stripes.
class KeyLocks {
 public:
  template <typename S>
  KeyLocks(S* a, S* b) : a_(&a->mu), b_(a == b ? nullptr : &b->mu) {}
  ~KeyLocks() {
    if (b_ != nullptr) b_->unlock();
    a_->unlock();
  }
  KeyLocks(const KeyLocks&) = delete;
  KeyLocks& operator=(const KeyLocks&) = delete;

 private:
  VersionedRwLock* a_;
  VersionedRwLock* b_;
};

void LevelHash::LockAllShared() const {
  for (size_t i = 0; i < stripes_.size(); ++i) stripes_[i].mu.lock_shared();
}
void LevelHash::UnlockAllShared() const {
  for (size_t i = stripes_.size(); i > 0; --i) stripes_[i - 1].mu.unlock_shared();
}

// ---- Search -------------------------------------------------------------------------

LevelHash::Slot LevelHash::Find(std::string_view key, uint64_t hash, const Levels& v) const {
  const Candidates c = CandidatesOf(hash, v.n);
  LevelBucket* order[4] = {&v.top[c.t1], &v.top[c.t2], &v.bottom[c.b1()], &v.bottom[c.b2()]};
  const SlotCodec::KeyMatcher match(codec(), key, hash);
  for (int k = 0; k < 4; ++k) {
    if ((k == 1 && c.t2 == c.t1) || (k == 3 && c.b2() == c.b1())) continue;
    LevelBucket* b = order[k];
    persister().NoteRead(b, pm::kCacheLine);
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      const uint8_t t = b->token[i];
      if (t == 0) continue;
      if (i == 3) persister().NoteRead(&b->slot[3], sizeof(KvWords));
      if (match(static_cast<SlotForm>(t), b->slot[i])) return {b, i};
    }
  }
  return {};
}

[[gnu::always_inline]] inline Optimistic LevelHash::FindOptimistic(uint64_t hash,
                                                                  OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  const uint64_t n = top_n_.load(std::memory_order_acquire);
  const LevelBucket* top = top_.load(std::memory_order_acquire);
  const LevelBucket* bottom = bottom_.load(std::memory_order_acquire);
  const Candidates c = CandidatesOf(hash, n);
  const VersionedRwLock& mu1 = StripeOfTop(c.t1).mu;
  const VersionedRwLock& mu2 = StripeOfTop(c.t2).mu;
  if (!read->Begin(mu1)) return Optimistic::kRetry;
  const uint64_t v2 = mu2.ReadBegin();
  if (v2 % 2 != 0) return Optimistic::kRetry;
  const LevelBucket* order[4] = {top + c.t1, top + c.t2, bottom + c.b1(), bottom + c.b2()};
  if (prefetch_buckets_) PrefetchCandidates(top, bottom, c);
  Optimistic answer = Optimistic::kAbsent;
  for (const LevelBucket* b : order) {
    // Line 0 (tokens, slots 0-2) always; line 1 (slot 3) only when its token is set.
    read->Note(b, pm::kCacheLine);
    const uint32_t tokens = LoadForms(b->token);
    answer = MatchSlots<3>(tokens & 0xffffff, b->slot, hash, read);
    if (answer != Optimistic::kAbsent) break;
    if ((tokens >> 24) != 0) {
      read->Note(&b->slot[3], sizeof(KvWords));
      answer = MatchSlots<1>(tokens >> 24, &b->slot[3], hash, read);
      if (answer != Optimistic::kAbsent) break;
    }
  }
  if (!read->Valid(mu1) || !mu2.ReadValidate(v2) ||
      top_n_.load(std::memory_order_acquire) != n) {
    return Optimistic::kRetry;
  }
  return answer;
}

void LevelHash::Prefetch(uint64_t hash) const {
  const uint64_t n = top_n_.load(std::memory_order_acquire);
  const Candidates c = CandidatesOf(hash, n);
  const LevelBucket* top = top_.load(std::memory_order_acquire);
  persister().Prefetch(top + c.t1);
  persister().Prefetch(top + c.t2);
}

QuickAnswer LevelHash::QuickGet(uint64_t hash, uint64_t key_word) {
  return QuickTry(persister(), key_word,
                  [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
                    return FindOptimistic(hash, read);
                  });
}

Status LevelHash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

__attribute__((noinline)) Status LevelHash::GetFull(std::string_view key, uint64_t hash,
                                                    std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

__attribute__((noinline)) Status LevelHash::GetLocked(std::string_view key, uint64_t hash,
                                                      std::string* value) {
  Levels v;
  Stripe *a = nullptr, *b = nullptr;
  LockKey(hash, &v, &a, &b);  // exclusive: rare (records, busy stripes)
  const KeyLocks held(a, b);
  const Slot s = Find(key, hash, v);
  if (s.bucket == nullptr) return Status::NotFound();
  AssignValue(value, codec().Value(static_cast<SlotForm>(s.bucket->token[s.index]),
                                   s.bucket->slot[s.index]));
  return Status::OK();
}

// ---- Writes -------------------------------------------------------------------------

void LevelHash::WriteSlot(LevelBucket* bucket, size_t i, SlotForm form, const KvWords& words) {
  pm::Persister& ps = persister();
  // Data first, durable, then the token: the slot's commit point.
  ps.Store(&bucket->slot[i].word1, words.word1);
  ps.Store(&bucket->slot[i].word0, words.word0);
  ps.Flush(&bucket->slot[i], sizeof(KvWords));
  ps.Publish(&bucket->token[i], static_cast<uint8_t>(form));
}

bool LevelHash::MoveOut(const Levels& v, LevelBucket* from, bool from_top, bool to_top,
                        Stripe* a, Stripe* b, size_t* freed, bool* busy) {
  const uint64_t fi = static_cast<uint64_t>(from - (from_top ? v.top : v.bottom));
  for (size_t i = 0; i < kLevelAssoc; ++i) {
    const uint8_t t = from->token[i];
    if (t == 0) continue;
    const auto form = static_cast<SlotForm>(t);
    const KvWords words = from->slot[i];
    const Candidates c = CandidatesOf(HashOf(form, words), v.n);
    uint64_t dests[2];
    int nd = 0;
    if (to_top && !from_top) {  // bottom-to-top: either top position
      dests[nd++] = c.t1;
      if (c.t2 != c.t1) dests[nd++] = c.t2;
    } else if (from_top) {  // cuckoo move within the top
      const uint64_t alt = c.t1 == fi ? c.t2 : c.t1;
      if (alt != fi) dests[nd++] = alt;
    } else {  // cuckoo move within the bottom
      const uint64_t alt = c.b1() == fi ? c.b2() : c.b1();
      if (alt != fi) dests[nd++] = alt;
    }
    for (int d = 0; d < nd; ++d) {
      const bool dest_top = to_top;
      LevelBucket* dst = dest_top ? &v.top[dests[d]] : &v.bottom[dests[d]];
      Stripe& s = StripeOfTop(dest_top ? dests[d] : 2 * dests[d]);
      const bool mine = &s == a || &s == b;
      if (!mine && !s.mu.try_lock()) {  // busy: never wait while holding
        *busy = true;
        continue;
      }
      const size_t j = FreeSlot(dst);
      if (j < kLevelAssoc) {
        // The copy committed, then the original cleared: between them the item is twice
        // (recovery keeps one), never nowhere.
        WriteSlot(dst, j, form, words);
        persister().Store(&from->token[i], uint8_t{0});
        persister().Persist(&from->token[i], 1);
      }
      if (!mine) s.mu.unlock();
      if (j < kLevelAssoc) {
        *freed = i;
        return true;
      }
    }
  }
  return false;
}

bool LevelHash::Place(const Levels& v, uint64_t hash, Stripe* a, Stripe* b, SlotForm form,
                      const KvWords& words, bool* busy) {
  const Candidates c = CandidatesOf(hash, v.n);
  // 1. A free slot of the top candidates, the emptier first; then of the bottom ones.
  const auto pick = [&](LevelBucket* x, LevelBucket* y) -> bool {
    const size_t fx = FreeCount(x), fy = FreeCount(y);
    LevelBucket* dst = fy > fx ? y : x;
    if (FreeCount(dst) == 0) return false;
    WriteSlot(dst, FreeSlot(dst), form, words);
    return true;
  };
  LevelBucket* t1 = &v.top[c.t1];
  LevelBucket* t2 = &v.top[c.t2];
  LevelBucket* b1 = &v.bottom[c.b1()];
  LevelBucket* b2 = &v.bottom[c.b2()];
  if (pick(t1, t2) || pick(b1, b2)) return true;
  size_t freed = 0;
  // 2. One cuckoo move in the top, then in the bottom.
  for (LevelBucket* x : {t1, t2}) {
    if (MoveOut(v, x, true, true, a, b, &freed, busy)) {
      cuckoo_moves_.fetch_add(1, std::memory_order_relaxed);
      WriteSlot(x, freed, form, words);
      return true;
    }
  }
  for (LevelBucket* x : {b1, b2}) {
    if (MoveOut(v, x, false, false, a, b, &freed, busy)) {
      cuckoo_moves_.fetch_add(1, std::memory_order_relaxed);
      WriteSlot(x, freed, form, words);
      return true;
    }
  }
  // 3. Bottom-to-top: an item of a bottom candidate moves up to one of its top buckets.
  for (LevelBucket* x : {b1, b2}) {
    if (MoveOut(v, x, false, true, a, b, &freed, busy)) {
      b2t_moves_.fetch_add(1, std::memory_order_relaxed);
      WriteSlot(x, freed, form, words);
      return true;
    }
  }
  return false;
}

Status LevelHash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                          WriteMode mode) {
  uint64_t grown_to = 0;  // the top size this insert's own Grow doubled the table to
  int busy_rounds = 0;    // rounds that found no place only for a move's busy stripe
  for (;;) {
    uint64_t n = 0;
    bool busy = false;
    {
      Levels v;
      Stripe *a = nullptr, *b = nullptr;
      LockKey(hash, &v, &a, &b);
      const KeyLocks held(a, b);
      n = v.n;
      const Slot s = Find(key, hash, v);
      if (s.bucket != nullptr) {
        if (mode == WriteMode::kInsert) return Status::AlreadyExists();
        return UpdateAt(s, key, value, hash);
      }
      if (mode == WriteMode::kUpdate) return Status::NotFound();
      SlotForm form = SlotForm::kEmpty;
      KvWords words;
      PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
      // Counted before Place's commit and taken back if it finds no place (rare): a locked
      // add after the commit's fence would wait for the write-back, as in DoDelete.
      std::atomic<int64_t>& count = counts_[stripes_.IndexOf(*a) & (kLevelCountShards - 1)].delta;
      count.fetch_add(1, std::memory_order_relaxed);
      if (Place(v, hash, a, b, form, words, &busy)) return Status::OK();
      count.fetch_sub(1, std::memory_order_relaxed);
      codec().Release(form, words);  // never linked
    }
    if (after_failed_place_for_testing_) after_failed_place_for_testing_();
    // A move skipped because another writer held its destination's stripe: that writer
    // ends soon, and the move may then make room; a resize now would be premature. Retried
    // a bounded number of times (two writers may each hold what the other's move needs).
    if (busy && busy_rounds < kBusyRetries) {
      busy_retries_.fetch_add(1, std::memory_order_relaxed);
      SpinBackoff(busy_rounds++);
      continue;
    }
    // No place among the four buckets, even after a move: the paper's "insertion failure",
    // and the table grows. Refused instead: a key that finds no place in a table mostly
    // empty (under min_resize_load of the slots of the size the failure was seen at), and
    // one that finds none in the table its own Grow just doubled, unless other inserts
    // filled that past half meanwhile (right after a doubling it is at most half full).
    // Both collide with too many keys of their hash (the degenerate-hash run). A table
    // another insert grew in between is no reason to refuse (a retry in it may fail too,
    // if others filled it: it grows again).
    const double slots = static_cast<double>(kLevelAssoc * (n + n / 2));
    const double needed = n == grown_to ? std::max(0.5, min_resize_load_) : min_resize_load_;
    if (!resize_enabled() || static_cast<double>(Count()) < needed * slots) {
      return Status::TableFull("level: the four candidate buckets of the key are full" +
                               std::string(resize_enabled() ? " and growing does not help" : ""));
    }
    bool grew = false;
    PMHASH_RETURN_IF_ERROR(Grow(n, &grew));
    if (grew) grown_to = 2 * n;
  }
}

Status LevelHash::UpdateAt(const Slot& s, std::string_view key, std::string_view value,
                           uint64_t hash) {
  LevelBucket* b = s.bucket;
  const size_t i = s.index;
  const auto old_form = static_cast<SlotForm>(b->token[i]);
  // An inline value replacing an inline value: one 8-byte store is already failure-atomic.
  if (old_form == SlotForm::kInline && SlotCodec::FitsInline(key, value)) {
    return UpdateSlot(&b->token[i], &b->slot[i], key, value, hash);
  }
  const size_t j = FreeSlot(b);
  if (j == kLevelAssoc) return UpdateSlot(&b->token[i], &b->slot[i], key, value, hash);
  // The paper's opportunistic log-free update: the new item in a free slot of the same
  // bucket, then both tokens flipped with one atomic store.
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  ps.Store(&b->slot[j].word1, words.word1);
  ps.Store(&b->slot[j].word0, words.word0);
  ps.Flush(&b->slot[j], sizeof(KvWords));
  uint8_t tokens[kLevelAssoc];
  std::memcpy(tokens, b->token, sizeof(tokens));
  const KvWords old = b->slot[i];
  tokens[i] = 0;
  tokens[j] = static_cast<uint8_t>(form);
  uint32_t word = 0;
  std::memcpy(&word, tokens, sizeof(word));
  ps.Publish(reinterpret_cast<uint32_t*>(b->token), word);
  codec().Release(old_form, old);  // durably unreachable since the flip
  opportunistic_updates_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status LevelHash::DoDelete(std::string_view key, uint64_t hash) {
  Levels v;
  Stripe *a = nullptr, *b = nullptr;
  LockKey(hash, &v, &a, &b);
  const KeyLocks held(a, b);
  const Slot s = Find(key, hash, v);
  if (s.bucket == nullptr) return Status::NotFound();
  uint8_t* token = &s.bucket->token[s.index];
  const auto form = static_cast<SlotForm>(*token);
  const KvWords old = s.bucket->slot[s.index];
  // Counted before the commit (nothing fails from here): a locked subtract after the
  // fence would wait for the write-back and hold back the next operation's misses.
  counts_[stripes_.IndexOf(*a) & (kLevelCountShards - 1)].delta.fetch_sub(
      1, std::memory_order_relaxed);
  persister().Store(token, uint8_t{0});
  persister().Persist(token, 1);
  codec().Release(form, old);
  return Status::OK();
}

uint64_t LevelHash::Count() const {
  int64_t c = static_cast<int64_t>(base_count_);
  for (size_t i = 0; i < kLevelCountShards; ++i) {
    c += counts_[i].delta.load(std::memory_order_relaxed);
  }
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

// ---- Resize -------------------------------------------------------------------------

Status LevelHash::Grow(uint64_t observed_n, bool* grew) {
  *grew = false;
  if (IterationScope::Active(this)) {
    return Status::TableFull("level: full, and a resize cannot run inside ForEach");
  }
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  const Stripes<Stripe>::AllHeld all(stripes_);
  if (top_n_.load(std::memory_order_relaxed) != observed_n) return Status::OK();
  const Levels v = view_;
  const uint64_t n2 = v.n * 2;
  if (TableBytes(n2) > pool().size()) {
    return Status::PoolFull("level: the top level cannot double beyond the pool");
  }
  // The plan, in DRAM: where each item of the old bottom goes (PlanRehash, which a
  // recovery's replay computes again). Refused before anything is written if an item has
  // no place.
  std::vector<uint8_t> bottom_used(v.n, 0);
  for (uint64_t k = 0; k < v.n; ++k) {
    bottom_used[k] = static_cast<uint8_t>(kLevelAssoc - FreeCount(&v.top[k]));
  }
  std::vector<uint64_t> hashes;
  for (uint64_t k = 0; k < v.n / 2; ++k) {
    const LevelBucket* ob = &v.bottom[k];
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      if (ob->token[i] == 0) continue;
      hashes.push_back(HashOf(static_cast<SlotForm>(ob->token[i]), ob->slot[i]));
    }
  }
  std::vector<uint64_t> dest;
  uint64_t moves = 0;
  if (!PlanRehash(hashes, n2, std::move(bottom_used), &dest, &moves)) {
    refused_resizes_.fetch_add(1, std::memory_order_relaxed);
    return Status::TableFull("level: the doubled table would have no place for an item of "
                             "the bottom level (its buckets, and those a chain of moves "
                             "could free, are full)");
  }
  pm::Persister& ps = persister();
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(n2), std::to_string(n2) + " top buckets",
                                       kLevelTableMagic, n2, &off));
  auto* h = pool().At<LevelTableHeader>(off);
  ps.Store(&h->bottom, v.top_off);
  ps.Store(&h->check, MetadataCheck(h, kCheckedBytes));
  ps.Store(&h->rehash_from, SealFor(&h->rehash_from, v.bottom_off));
  ps.Flush(h, TableBytes(n2));
  // The commit point: the new top (and the old top as the bottom) exists and is durable.
  PublishRootTable(off);
  Levels nv;
  nv.top_off = off;
  nv.bottom_off = v.top_off;
  nv.n = n2;
  nv.header = h;
  nv.top = BucketsOf(pool().At<char>(off));
  nv.bottom = v.top;
  size_t item = 0;
  for (uint64_t k = 0; k < v.n / 2; ++k) {
    const LevelBucket* ob = &v.bottom[k];
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      if (ob->token[i] == 0) continue;
      LevelBucket* to = PlannedBucket(nv, dest[item++]);
      const size_t j = FreeSlot(to);  // < kLevelAssoc: the plan counted every slot
      ps.Store(&to->slot[j].word1, ob->slot[i].word1);
      ps.Store(&to->slot[j].word0, ob->slot[i].word0);
      ps.Flush(&to->slot[j], sizeof(KvWords));
      ps.Fence();  // also orders the previous item's token: placed items are a prefix
      ps.Store(&to->token[j], ob->token[i]);
      ps.Flush(&to->token[j], 1);
    }
  }
  ps.Publish(&h->rehash_from, SealFor(&h->rehash_from, 0));
  allocator().Free(v.bottom_off);  // durably unreachable since rehash_from = 0
  SetView(nv);
  resizes_.fetch_add(1, std::memory_order_relaxed);
  resize_plan_moves_.fetch_add(moves, std::memory_order_relaxed);
  *grew = true;
  return Status::OK();
}

// ---- Iteration ----------------------------------------------------------------------

Status LevelHash::ForEach(const Visitor& fn) const {
  const IterationScope iterating(this, resize_mu_);
  Entries batch;
  LockAllShared();
  ForEachBucket(view_, [&](bool, uint64_t, const LevelBucket* b) {
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      const auto f = static_cast<SlotForm>(b->token[i]);
      if (f != SlotForm::kEmpty) batch.emplace_back(codec().Key(f, b->slot[i]), codec().Value(f, b->slot[i]));
    }
  });
  UnlockAllShared();
  for (const auto& [key, value] : batch) {
    if (!fn(key, value)) break;
  }
  return Status::OK();
}

Status LevelHash::DoScan(ScanPage* page) const {
  const IterationScope iterating(this, resize_mu_);
  const Levels& v = view_;
  // A home is position 1 of the top; a key may sit in any of four buckets, so a page reads
  // the whole table (one run) under every stripe shared, and keeps its homes.
  const auto collect = [&](uint64_t, uint64_t, std::vector<ScanEntry>* out) {
    LockAllShared();
    ForEachBucket(v, [&](bool, uint64_t, const LevelBucket* b) {
      for (size_t i = 0; i < kLevelAssoc; ++i) {
        const auto f = static_cast<SlotForm>(b->token[i]);
        if (f == SlotForm::kEmpty) continue;
        AddScanEntry(out, HashOf(f, b->slot[i]), codec().Key(f, b->slot[i]),
                     codec().Value(f, b->slot[i]));
      }
    });
    UnlockAllShared();
  };
  page->CollectHomes(v.n, v.n, collect);
  return Status::OK();
}

// ---- Stats and checks ---------------------------------------------------------------

void LevelHash::FillStats(IndexStats* stats) const {
  const uint64_t n = top_n_.load(std::memory_order_acquire);
  stats->count = Count();
  stats->key_slots = kLevelAssoc * (n + n / 2);
  stats->dram_bytes = sizeof(*this) + kLevelStripes * sizeof(Stripe) +
                      kLevelCountShards * sizeof(CountShard);
  auto& c = stats->engine_counters;
  c["top_buckets"] = n;
  c["resizes"] = resizes_.load(std::memory_order_relaxed);
  c["cuckoo_moves"] = cuckoo_moves_.load(std::memory_order_relaxed);
  c["b2t_moves"] = b2t_moves_.load(std::memory_order_relaxed);
  c["opportunistic_updates"] = opportunistic_updates_.load(std::memory_order_relaxed);
  c["refused_resizes"] = refused_resizes_.load(std::memory_order_relaxed);
  c["resize_plan_moves"] = resize_plan_moves_.load(std::memory_order_relaxed);
  c["busy_retries"] = busy_retries_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs();
  c["recovery_duplicates"] = recovered_duplicates_;
  c["recovery_rehashed"] = recovered_rehash_;
}

Status LevelHash::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  uint64_t top = 0, stored = 0, rehash = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &top, &stored));
  Levels v;
  PMHASH_RETURN_IF_ERROR(ReadLevels(top, &v, &rehash));
  if (v.top_off != view_.top_off || v.bottom_off != view_.bottom_off || v.n != view_.n) {
    return Status::Corruption("level: the root names other levels than the live ones");
  }
  if (rehash != 0) return Status::Corruption("level: a rehash is recorded as in flight");
  std::unordered_set<std::string> keys;
  uint64_t count = 0;
  Status bad;
  ForEachBucket(v, [&](bool is_top, uint64_t idx, const LevelBucket* b) {
    for (size_t i = 0; i < kLevelAssoc && bad.ok(); ++i) {
      const uint8_t t = b->token[i];
      if (t == 0) continue;
      const auto form = static_cast<SlotForm>(t);
      uint64_t h = 0;
      bad = CheckSlot(v, is_top, idx, b, i, &h);
      if (!bad.ok()) return;
      const std::string at = "the slot at pool offset " + std::to_string(pool().ToOffset(&b->slot[i]));
      const std::string key(codec().Key(form, b->slot[i]));
      if (h != KeyHash(key)) {
        bad = Status::Corruption("level: " + at + " has a wrong hash word");
        return;
      }
      if (!keys.insert(key).second) {
        bad = Status::Corruption("level: a key is stored twice (again in " + at + ")");
        return;
      }
      ++count;
    }
  });
  PMHASH_RETURN_IF_ERROR(bad);
  if (count != Count()) {
    return Status::Corruption("level: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(count) + " slots are occupied");
  }
  return Status::OK();
}

void LevelHash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  const Levels& v = view_;
  mark(v.top_off, kHeaderBytes, pm::Region::kEngineMetadata, true);
  // The bottom's header: what ValidateLevel checks (its rehash_from is not read).
  mark(v.bottom_off, offsetof(LevelTableHeader, rehash_from), pm::Region::kEngineMetadata, true);
  ForEachBucket(v, [&](bool, uint64_t, const LevelBucket* b) {
    const uint64_t off = pool().ToOffset(b);
    mark(off, sizeof(b->token), pm::Region::kSlots, false);
    mark(off + offsetof(LevelBucket, slot), sizeof(b->slot), pm::Region::kSlots, false);
    for (size_t i = 0; i < kLevelAssoc; ++i) {
      codec().DescribeRecord(static_cast<SlotForm>(b->token[i]), b->slot[i], mark);
    }
  });
}

void RegisterEngines_level(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {
      OptionSpec::Uint("top_buckets", std::nullopt, kLevelMinTop, uint64_t{1} << 34,
                       "top-level buckets of the first table, even (auto: initial_capacity "
                       "/ 4.8, else 1024); the bottom level has half"),
      OptionSpec::Double("min_resize_load", 0.25, 0.0, 1.0,
                         "an insert that finds no place grows the table only when at least "
                         "this fraction of the slots is used (else: TableFull, the key "
                         "collides with too many keys of its hash)"),
      OptionSpec::Bool("prefetch_buckets", false,
                       "searches, inserts and deletes prefetch the key's four buckets' token "
                       "lines before they read the first (not in the paper, whose search reads "
                       "them one after another, stopping at the key: off, the default)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "an insert finds its four buckets full after one move",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true};
  // Two top buckets: a few keys fill the table, so moves and resizes come early.
  info.test = {.crash_options = {{"top_buckets", "2"}},
               .thread_crash_options = {{"top_buckets", "64"}},
               .growth_counters = {"resizes"},
               .crash_script_scale = 0.6};  // 21,955 crash images at 1 (make test's budget)
  info.description = {"level",
                      "two levels of 4-slot buckets, two hash positions, one-move cuckoo "
                      "displacement, in-place resize; log-free token commit",
                      "Level hashing (Zuo et al., OSDI'18)", /*crash_consistent=*/true};
  registry.Add<LevelHash>(std::move(info));
}

}  // namespace pmhash::engines
