// The `dash` engine: Dash-EH on the kit (layout, invariants and persist orders in dash.h).
#include "engines/dash/dash.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr RootLayout kRootLayout{kDashRootMagic, kDashVersion, sizeof(DashRoot),
                                 sizeof(DashRoot) - sizeof(EngineRoot)};
constexpr size_t kDirCheckedBytes = offsetof(DashDirHeader, check);
constexpr uint64_t kDepthMask = 63;  // segments are 64-byte aligned: depth in the low bits

uint64_t DirBytes(uint64_t entries) { return sizeof(DashDirHeader) + entries * sizeof(uint64_t); }
uint32_t Alloc(uint32_t bits) { return bits & kDashAllocMask; }
uint32_t Member(uint32_t bits) { return (bits >> 16) & kDashAllocMask; }
template <typename T>
T LoadAcq(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
// The seqlock's second read: x86 does not reorder loads with loads (TSO), so a compiler
// barrier keeps the bucket's reads before it (as the kit's VersionedRwLock::ReadValidate).
bool Validate(const DashBucket* b, uint32_t v) {
  std::atomic_signal_fence(std::memory_order_acq_rel);
  return __atomic_load_n(&b->version, __ATOMIC_ACQUIRE) == v;
}

// The overflow metadata of a normal bucket (bytes 22..28), as one unit.
struct OverflowMeta {
  uint8_t ofp[kDashOverflow];
  uint8_t obits, oidx, ocount;
};
static_assert(sizeof(OverflowMeta) == 7, "ofp, obits, oidx, ocount are contiguous");

}  // namespace

// ---- Slots ------------------------------------------------------------------------------

uint64_t Dash::SlotHash(const KvWords& w) const {
  if (IsRecord(w.word0)) return w.word1;
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&w.word0), 8));
}

std::string_view Dash::SlotKey(const KvWords& w) const {
  if (IsRecord(w.word0)) {
    return codec().Key(SlotForm::kRecord, KvWords{w.word0 & kDashOffsetMask, w.word1});
  }
  return codec().Key(SlotForm::kInline, w);
}

std::string_view Dash::SlotValue(const KvWords& w) const {
  if (IsRecord(w.word0)) {
    return codec().Value(SlotForm::kRecord, KvWords{w.word0 & kDashOffsetMask, w.word1});
  }
  return codec().Value(SlotForm::kInline, w);
}

bool Dash::SlotHolds(const KvWords& w, std::string_view key, uint64_t hash) const {
  if (IsRecord(w.word0)) {
    return w.word1 == hash &&
           codec().KeyEquals(SlotForm::kRecord, KvWords{w.word0 & kDashOffsetMask, w.word1},
                             key, hash);
  }
  return key.size() == 8 && std::memcmp(&w.word0, key.data(), 8) == 0;
}

Status Dash::Encode(std::string_view key, std::string_view value, uint64_t hash, KvWords* w) {
  if (key.size() == 8 && value.size() == 8) {
    std::memcpy(&w->word0, key.data(), 8);
    if (!IsRecord(w->word0)) {
      std::memcpy(&w->word1, value.data(), 8);
      return Status::OK();
    }
  }
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &off));  // flushed, no fence
  *w = KvWords{kDashRecordTag | off, hash};
  return Status::OK();
}

// ---- Options, creation ------------------------------------------------------------------

Status Dash::Configure(EngineOptions& options, const Options& /*index_options*/) {
  buckets_ = options.Uint("buckets");
  stash_ = options.Uint("stash_buckets");
  initial_segments_ = options.Uint("segments");
  first_try_ = options.Bool("first_try");
  first_try_prefetch_ = options.Bool("first_try_prefetch");
  SetQuickGet(first_try_ && first_try_hook_ == nullptr);
  if (!std::has_single_bit(buckets_)) {
    return Status::InvalidArgument(name() + ": buckets must be a power of two, not " +
                                   std::to_string(buckets_));
  }
  if (initial_segments_ != 0 && !std::has_single_bit(initial_segments_)) {
    return Status::InvalidArgument(name() + ": segments must be a power of two, not " +
                                   std::to_string(initial_segments_));
  }
  const auto* r = root<const DashRoot>();
  if (!pool().needs_creation() && r->header.magic == kRootLayout.magic) {
    if ((options.Given("buckets") && r->buckets != buckets_) ||
        (options.Given("stash_buckets") && r->stash_buckets != stash_)) {
      return Status::InvalidArgument(name() + ": this pool's segments have " +
                                     std::to_string(r->buckets) + " + " +
                                     std::to_string(r->stash_buckets) +
                                     " buckets (fixed when a pool is created)");
    }
    if (!std::has_single_bit(r->buckets) || r->buckets < 4 || r->buckets > 256 ||
        r->stash_buckets < 1 || r->stash_buckets > 4) {
      return Status::Corruption(name() + ": the root's geometry (" + std::to_string(r->buckets) +
                                " + " + std::to_string(r->stash_buckets) +
                                " buckets) is damaged");
    }
    buckets_ = r->buckets;
    stash_ = r->stash_buckets;
  }
  return Status::OK();
}

Status Dash::NewDirectory(uint32_t depth, uint64_t* offset) {
  const uint64_t entries = uint64_t{1} << depth;
  if (depth > kDashMaxDepth || DirBytes(entries) > pool().size()) {
    return Status::PoolFull(name() + ": a directory of 2^" + std::to_string(depth) +
                            " entries does not fit the pool");
  }
  PMHASH_RETURN_IF_ERROR(NewTableBlock(DirBytes(entries),
                                       "a directory of " + std::to_string(entries) + " entries",
                                       kDashDirMagic, entries, offset));
  auto* h = pool().At<DashDirHeader>(*offset);
  persister().Store(&h->global_depth, uint64_t{depth});
  persister().Store(&h->check, MetadataCheck(h, kDirCheckedBytes));
  return Status::OK();
}

void Dash::BringUp(uint64_t offset, uint32_t depth, uint64_t pattern, int64_t keys) {
  DashSeg* s = SegAt(offset);
  s->offset.store(offset, std::memory_order_relaxed);
  s->pattern.store(pattern, std::memory_order_relaxed);
  s->keys.store(keys, std::memory_order_relaxed);
  s->depth.store(depth, std::memory_order_release);
  live_.push_back(s);
}

Status Dash::MakeSideTable() {
  seg_magic_ = ~uint64_t{0} / (buckets_ + stash_) + 1;
  Result<DramArray<DashSeg>> table = DramArray<DashSeg>::Allocate(pool().size() / SegBytes() + 1);
  if (!table.ok()) return table.status();
  table_ = std::move(*table);
  return Status::OK();
}

Status Dash::Create() {
  PMHASH_RETURN_IF_ERROR(MakeSideTable());
  uint64_t n = initial_segments_;
  if (n == 0) {  // auto: initial_capacity at half the slots, else the original's 64
    const uint64_t cap = initial_capacity(), slots = (buckets_ + stash_) * kDashSlots;
    n = cap == 0 ? kDashDefaultSegments : std::bit_ceil((2 * cap + slots - 1) / slots);
  }
  const auto depth = static_cast<uint32_t>(std::bit_width(n) - 1);
  if (depth > kDashMaxDepth || n > pool().size() / SegBytes()) {
    return Status::PoolFull(name() + ": " + std::to_string(n) + " segments of " +
                            std::to_string(SegBytes()) + " bytes do not fit the pool");
  }
  uint64_t dir = 0;
  PMHASH_RETURN_IF_ERROR(NewDirectory(depth, &dir));
  std::vector<uint64_t> made;
  uint64_t* e = DirEntries(dir);
  pm::Persister& ps = persister();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t seg = 0;
    Status st = AllocateBlock(SegBytes(), "a segment of " + std::to_string(SegBytes()) + " bytes",
                              &seg);
    if (st.ok() && seg % pm::kCacheLine != 0) {
      allocator().Free(seg);
      st = Status::Corruption(name() + ": a segment at an unaligned offset");
    }
    if (!st.ok()) {
      for (uint64_t off : made) allocator().Free(off);
      allocator().Free(dir);
      return st;
    }
    made.push_back(seg);
    ps.Zero(pool().At<char>(seg), SegBytes());
    ps.Flush(pool().At<char>(seg), SegBytes());
    ps.Store(&e[i], SealFor(&e[i], seg | depth));
  }
  auto* r = root<DashRoot>();
  ps.Store(&r->buckets, buckets_);
  ps.Store(&r->stash_buckets, stash_);
  CreateRoot(kRootLayout, dir, DirBytes(n));  // its fence makes the segments durable first
  std::unique_lock<std::shared_mutex> g(dir_mu_);
  for (uint64_t i = 0; i < n; ++i) BringUp(made[i], depth, i, 0);
  dir_word_.store(dir | depth, std::memory_order_release);
  return Status::OK();
}

// ---- Directory ----------------------------------------------------------------------------

Status Dash::ValidateDirectory(uint64_t dir, uint32_t* depth) const {
  uint64_t entries = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(dir, kDashDirMagic, pool().size() / sizeof(uint64_t),
                                            DirBytes, &entries));
  const auto* h = pool().At<const DashDirHeader>(dir);
  if (!std::has_single_bit(entries) || h->global_depth != uint64_t(std::bit_width(entries) - 1) ||
      h->global_depth > kDashMaxDepth) {
    return Status::Corruption(name() + ": the directory at pool offset " + std::to_string(dir) +
                              " has " + std::to_string(entries) + " entries and global depth " +
                              std::to_string(h->global_depth) + " (damaged)");
  }
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kDirCheckedBytes, h->check, "the directory header"));
  *depth = static_cast<uint32_t>(h->global_depth);
  return Status::OK();
}

template <typename Fn, typename Mismatch>
Status Dash::WalkDirectory(uint64_t dir, uint32_t depth, Fn&& fn, Mismatch&& mismatch) const {
  const uint64_t* e = DirEntries(dir);
  const uint64_t n = uint64_t{1} << depth;
  for (uint64_t i = 0; i < n;) {
    uint64_t payload = 0;
    PMHASH_RETURN_IF_ERROR(LoadSealed(&e[i], "directory entry", &payload));
    const auto local = static_cast<uint32_t>(payload & kDepthMask);
    const uint64_t seg = payload & ~kDepthMask;
    const std::string at = "directory entry " + std::to_string(i);
    if (local > depth) {
      return Status::Corruption(name() + ": " + at + " has local depth " + std::to_string(local) +
                                " above the global depth " + std::to_string(depth));
    }
    const uint64_t count = uint64_t{1} << (depth - local);
    if (i % count != 0) {
      return Status::Corruption(name() + ": " + at + " starts a range of " +
                                std::to_string(count) + " entries unaligned");
    }
    if (!pool().Contains(seg, SegBytes()) || seg == 0) {
      return Status::Corruption(name() + ": " + at + " names a segment outside the pool");
    }
    for (uint64_t j = i + 1; j < i + count; ++j) {
      uint64_t other = 0;
      PMHASH_RETURN_IF_ERROR(LoadSealed(&e[j], "directory entry", &other));
      if (other != payload) PMHASH_RETURN_IF_ERROR(mismatch(j, payload));
    }
    PMHASH_RETURN_IF_ERROR(fn(i, count, seg, local));
    i += count;
  }
  return Status::OK();
}

uint64_t Dash::EntryPayload(uint64_t hash) const {
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  const auto depth = static_cast<uint32_t>(w & kDepthMask);
  const uint64_t* e = DirEntries(w & ~kDepthMask) + (depth == 0 ? 0 : hash >> (64 - depth));
  return __atomic_load_n(e, __ATOMIC_ACQUIRE) >> (64 - kSealedPayloadBits);
}

Status Dash::DoubleDirectory() {
  const uint64_t w = dir_word_.load(std::memory_order_relaxed);
  const uint64_t old_dir = w & ~kDepthMask;
  const auto depth = static_cast<uint32_t>(w & kDepthMask) + 1;
  uint64_t nd = 0;
  PMHASH_RETURN_IF_ERROR(NewDirectory(depth, &nd));
  const uint64_t* old = DirEntries(old_dir);
  uint64_t* e = DirEntries(nd);
  pm::Persister& ps = persister();
  const uint64_t n = uint64_t{1} << (depth - 1);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t payload = 0;
    if (Status st = LoadSealed(&old[i], "directory entry", &payload); !st.ok()) {
      allocator().Free(nd);
      return st;
    }
    ps.Store(&e[2 * i], SealFor(&e[2 * i], payload));
    ps.Store(&e[2 * i + 1], SealFor(&e[2 * i + 1], payload));
  }
  ps.Flush(pool().At<char>(nd), DirBytes(2 * n));
  PublishRootTable(nd);  // the doubling's commit (fence first)
  dir_word_.store(nd | depth, std::memory_order_release);
  retired_dirs_.push_back(old_dir);  // a search may still read it: freed at Close
  doublings_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status Dash::Shutdown() {
  std::unique_lock<std::shared_mutex> g(dir_mu_);
  // The writers' last (even) version stores were never flushed: none may stay pending in
  // a pool marked clean.
  for (const DashSeg* s : live_) {
    DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
    for (size_t x = 0; x < buckets_ + stash_; ++x) persister().Flush(&bk[x].version, sizeof(uint32_t));
  }
  persister().Fence();
  for (uint64_t d : retired_dirs_) allocator().Free(d);
  retired_dirs_.clear();
  return Status::OK();
}

// ---- Segments and searches -------------------------------------------------------------------

DashSeg* Dash::LockSegmentIn(uint64_t hash, LockMode mode) const {
  for (int attempt = 0;; ++attempt) {
    const uint64_t off = EntryPayload(hash) & ~kDepthMask;
    DashSeg* s = SegAt(off);
    if (mode == LockMode::kExclusive) {
      s->mu.lock();
    } else {
      s->mu.lock_shared();
    }
    const uint32_t d = s->depth.load(std::memory_order_acquire);
    if (d != ~0u && s->offset.load(std::memory_order_relaxed) == off &&
        Serves(hash, d, s->pattern.load(std::memory_order_relaxed))) {
      return s;
    }
    if (mode == LockMode::kExclusive) {
      s->mu.unlock();
    } else {
      s->mu.unlock_shared();
    }
    SpinBackoff(attempt);
  }
}

Dash::Loc Dash::Find(const DashBucket* bk, std::string_view key, uint64_t hash) const {
  const size_t b = Home(hash), n = Next(b);
  const uint8_t f = Fp(hash);
  Loc at;
  pm::Persister& ps = persister();
  auto probe = [&](size_t x, uint32_t mask) {
    const DashBucket& X = bk[x];
    ps.NoteRead(&X, pm::kCacheLine);
    for (mask &= matcher_.Match16(X.fp, f); mask != 0; mask &= mask - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(mask));
      ps.NoteRead(&X.slot[i], sizeof(KvWords));
      if (SlotHolds(X.slot[i], key, hash)) {
        at = Loc{x, i, true};
        return true;
      }
    }
    return false;
  };
  const uint32_t bb = bk[b].bits, nb = bk[n].bits;
  if (probe(b, Alloc(bb) & ~Member(bb)) || probe(n, Alloc(nb) & Member(nb))) return at;
  uint32_t stash = bk[b].ocount != 0 ? (1u << stash_) - 1 : 0;
  for (size_t k = 0; k < kDashOverflow; ++k) {
    const uint8_t ob = bk[b].obits, on = bk[n].obits;
    if ((ob >> k & 1) && !(ob >> (4 + k) & 1) && bk[b].ofp[k] == f) {
      stash |= 1u << ((bk[b].oidx >> (2 * k)) & 3);
    }
    if ((on >> k & 1) && (on >> (4 + k) & 1) && bk[n].ofp[k] == f) {
      stash |= 1u << ((bk[n].oidx >> (2 * k)) & 3);
    }
  }
  for (size_t t = 0; t < stash_; ++t) {
    if ((stash >> t & 1) && probe(buckets_ + t, Alloc(bk[buckets_ + t].bits))) return at;
  }
  return at;
}

Optimistic Dash::FindOptimistic(uint64_t hash, OptimisticRead* read) const {
  const uint64_t off = EntryPayload(hash) & ~kDepthMask;
  if (SegIndex(off) >= table_.size()) return Optimistic::kRetry;
  const DashSeg* s = SegAt(off);
  const DashBucket* bk = BucketsOf(off);
  PrefetchBuckets(bk, hash);
  const size_t b = Home(hash), n = Next(b);
  const DashBucket* B = &bk[b];
  const DashBucket* N = &bk[n];
  const uint32_t v1 = LoadAcq(&B->version), v2 = LoadAcq(&N->version);
  if (((v1 | v2) & 1) != 0) return Optimistic::kRetry;
  const uint32_t d = s->depth.load(std::memory_order_acquire);
  if (d == ~0u || s->offset.load(std::memory_order_relaxed) != off ||
      !Serves(hash, d, s->pattern.load(std::memory_order_relaxed))) {
    return Optimistic::kRetry;
  }
  const OptimisticReadScope scope;
  read->Note(B, pm::kCacheLine);
  read->Note(N, pm::kCacheLine);
  const uint8_t f = Fp(hash);
  Optimistic answer = Optimistic::kAbsent;
  auto probe = [&](const DashBucket* X, uint32_t mask) {
    for (mask &= matcher_.Match16(X->fp, f); mask != 0; mask &= mask - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(mask));
      const KvWords* w = &X->slot[i];
      read->Note(w, sizeof(KvWords));
      const uint64_t w0 = LoadAcq(&w->word0);
      if (!IsRecord(w0)) {
        if (read->inline_key && w0 == read->key_word) {
          read->value_word = LoadAcq(&w->word1);
          answer = Optimistic::kFound;
          return true;
        }
      } else if (LoadAcq(&w->word1) == hash) {
        answer = Optimistic::kLocked;
        return true;
      }
    }
    return false;
  };
  const uint32_t bb = LoadAcq(&B->bits), nb = LoadAcq(&N->bits);
  if (!probe(B, Alloc(bb) & ~Member(bb)) && !probe(N, Alloc(nb) & Member(nb))) {
    // The stash, through the overflow metadata of both buckets.
    uint32_t stash = LoadAcq(&B->ocount) != 0 ? (1u << stash_) - 1 : 0;
    const uint8_t ob = LoadAcq(&B->obits), on = LoadAcq(&N->obits);
    if ((ob | on) & 0xf) {
      const uint8_t bi = LoadAcq(&B->oidx), ni = LoadAcq(&N->oidx);
      for (size_t k = 0; k < kDashOverflow; ++k) {
        if ((ob >> k & 1) && !(ob >> (4 + k) & 1) && LoadAcq(&B->ofp[k]) == f) {
          stash |= 1u << ((bi >> (2 * k)) & 3);
        }
        if ((on >> k & 1) && (on >> (4 + k) & 1) && LoadAcq(&N->ofp[k]) == f) {
          stash |= 1u << ((ni >> (2 * k)) & 3);
        }
      }
    }
    for (size_t t = 0; t < stash_ && stash != 0; ++t) {
      if (!(stash >> t & 1)) continue;
      const DashBucket* X = &bk[buckets_ + t];
      const uint32_t vs = LoadAcq(&X->version);
      if (vs & 1) return Optimistic::kRetry;
      read->Note(X, pm::kCacheLine);
      const bool hit = probe(X, Alloc(LoadAcq(&X->bits)));
      if (!Validate(X, vs)) return Optimistic::kRetry;
      if (hit) break;
    }
  }
  if (!Validate(B, v1) || !Validate(N, v2)) return Optimistic::kRetry;
  return answer;
}

// The original's read set (its Get): the directory entry; the home and next buckets'
// version words (two lines, loaded side by side); the entry again, in the current
// directory (it still names the segment, so no split has moved the key out: a split
// redirects the entries before it prunes, with the buckets odd); the home bucket's
// fingerprints and, on a match, the slot, validated by the home version alone; then the
// next bucket. No side table, no prefetch (option first_try_prefetch: both buckets' lines).
// The stash, a record or a writer: kRetry.
template <bool kHooked>
[[gnu::always_inline]] inline QuickAnswer Dash::FirstTry(uint64_t k, uint64_t hash) const {
  constexpr QuickAnswer kRetry{0, Optimistic::kRetry};
  if (IsRecord(k)) return kRetry;
  const OptimisticReadScope unchecked_by_tsan;  // validated by the buckets' versions
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  const auto depth = static_cast<uint32_t>(w & kDepthMask);
  const uint64_t* e = DirEntries(w & ~kDepthMask) + (depth == 0 ? 0 : hash >> (64 - depth));
  const uint64_t entry = __atomic_load_n(e, __ATOMIC_ACQUIRE);
  if constexpr (kHooked) first_try_hook_(FirstTryPoint::kEntryRead);
  const uint64_t off = (entry >> (64 - kSealedPayloadBits)) & ~kDepthMask;
  if (SegIndex(off) >= table_.size()) return kRetry;
  const DashBucket* bk = BucketsOf(off);
  const size_t b = Home(hash);
  const DashBucket* B = &bk[b];
  const DashBucket* N = &bk[Next(b)];
  // Balanced inserts leave about half the keys in N: without the prefetch a positive
  // search waits for a slot line after the fingerprint line.
  if (first_try_prefetch_) PrefetchBuckets(bk, hash);
  const uint32_t v1 = LoadAcq(&B->version), v2 = LoadAcq(&N->version);
  if (((v1 | v2) & 1) != 0) return kRetry;
  if (dir_word_.load(std::memory_order_acquire) != w || LoadAcq(e) != entry) {
    return kRetry;
  }
  const uint8_t f = Fp(hash);
  // The slots of `mask` in X: kFound (with the value) on the key, kRetry on a record that
  // may hold it, else kAbsent.
  auto probe = [&](const DashBucket* X, uint32_t mask) __attribute__((always_inline)) {
    for (mask &= MatchSse2x16(X->fp, f); mask != 0; mask &= mask - 1) {
      const KvWords* s = &X->slot[std::countr_zero(mask)];
      const uint64_t w0 = LoadAcq(&s->word0);
      if (w0 == k) {
        if constexpr (kHooked) first_try_hook_(FirstTryPoint::kKeyMatched);
        const uint64_t v = LoadAcq(&s->word1);
        if (!Validate(X, X == B ? v1 : v2)) return kRetry;
        return QuickAnswer{v, Optimistic::kFound};
      }
      if (IsRecord(w0) && LoadAcq(&s->word1) == hash) return kRetry;
    }
    return QuickAnswer{0, Optimistic::kAbsent};
  };
  const uint32_t bb = LoadAcq(&B->bits);
  if (const QuickAnswer a = probe(B, Alloc(bb) & ~Member(bb)); a.answer != Optimistic::kAbsent) {
    return a;
  }
  const uint32_t nb = LoadAcq(&N->bits);
  if (const QuickAnswer a = probe(N, Alloc(nb) & Member(nb)); a.answer != Optimistic::kAbsent) {
    return a;
  }
  // Absent from both buckets: the stash may hold it when the home has uncounted stash
  // entries or an overflow fingerprint of either bucket matches (the full path reads it).
  if (LoadAcq(&B->ocount) != 0) return kRetry;
  const uint8_t ob = LoadAcq(&B->obits), on = LoadAcq(&N->obits);
  for (uint32_t m = (ob & ~(ob >> 4)) & 0xf; m != 0; m &= m - 1) {
    if (LoadAcq(&B->ofp[std::countr_zero(m)]) == f) return kRetry;
  }
  for (uint32_t m = (on & (on >> 4)) & 0xf; m != 0; m &= m - 1) {
    if (LoadAcq(&N->ofp[std::countr_zero(m)]) == f) return kRetry;
  }
  if (!Validate(B, v1) || !Validate(N, v2)) return kRetry;
  return {0, Optimistic::kAbsent};
}

__attribute__((noinline)) QuickAnswer Dash::FirstTryHooked(uint64_t k, uint64_t hash) const {
  return FirstTry<true>(k, hash);
}

QuickAnswer Dash::QuickGet(uint64_t hash, uint64_t key_word) {
  return FirstTry<false>(key_word, hash);
}

Status Dash::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  // The kit's Get runs the first try as QuickGet; here it runs when that is off (a hook
  // set, for the tests).
  if (first_try_ && reads_unnoted() && key.size() == sizeof(uint64_t)) {
    uint64_t k = 0;
    std::memcpy(&k, key.data(), sizeof(k));
    const QuickAnswer a = first_try_hook_ ? FirstTryHooked(k, hash) : FirstTry<false>(k, hash);
    if (a.answer == Optimistic::kFound) {
      AssignWord(value, a.value_word);
      return Status::OK();
    }
    if (a.answer == Optimistic::kAbsent) return Status::NotFound();
    return GetFull(key, hash, value);
  }
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

__attribute__((noinline)) Status Dash::GetFull(std::string_view key, uint64_t hash,
                                               std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

__attribute__((noinline)) Status Dash::GetLocked(std::string_view key, uint64_t hash,
                                                 std::string* value) {
  DashSeg* s = LockSegmentShared(hash);
  const DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
  const Loc at = Find(bk, key, hash);
  Status st = Status::NotFound();
  if (at.found) {
    AssignValue(value, SlotValue(bk[at.bucket].slot[at.slot]));
    st = Status::OK();
  }
  s->mu.unlock_shared();
  return st;
}

void Dash::Prefetch(uint64_t hash) const {
  const uint64_t off = EntryPayload(hash) & ~kDepthMask;
  if (SegIndex(off) >= table_.size()) return;
  PrefetchBuckets(BucketsOf(off), hash);
}

// ---- Writes ---------------------------------------------------------------------------------

void Dash::StoreAt(DashBucket* bk, size_t x, size_t j, const KvWords& w, uint8_t fp,
                   bool member) {
  pm::Persister& ps = persister();
  DashBucket* X = &bk[x];
  WriteLock(X);
  ps.Store(&X->slot[j].word1, w.word1);
  ps.Store(&X->slot[j].word0, w.word0);
  ps.Flush(&X->slot[j], sizeof(KvWords));
  ps.Store(&X->fp[j], fp);
  uint32_t bits = X->bits | (1u << j);
  bits = member ? bits | (1u << (16 + j)) : bits & ~(1u << (16 + j));
  ps.Publish(&X->bits, bits);  // the commit: fence, store, persist
  WriteUnlock(X);
}

void Dash::ClearAt(DashBucket* bk, size_t x, size_t j) {
  pm::Persister& ps = persister();
  DashBucket* X = &bk[x];
  WriteLock(X);
  ps.Store(&X->bits, X->bits & ~((1u << j) | (1u << (16 + j))));
  ps.Persist(&X->bits, sizeof(uint32_t));
  WriteUnlock(X);
}

void Dash::AddOverflow(DashBucket* bk, size_t home, size_t t, uint8_t fp) {
  pm::Persister& ps = persister();
  for (int side = 0; side < 2; ++side) {
    DashBucket* X = &bk[side == 0 ? home : Next(home)];
    for (size_t k = 0; k < kDashOverflow; ++k) {
      if (X->obits >> k & 1) continue;
      WriteLock(X);
      ps.Store(&X->ofp[k], fp);
      ps.Store(&X->oidx, static_cast<uint8_t>((X->oidx & ~(3u << (2 * k))) | (t << (2 * k))));
      const uint8_t member = side == 0 ? 0 : static_cast<uint8_t>(1u << (4 + k));
      ps.Store(&X->obits,
               static_cast<uint8_t>((X->obits & ~(1u << (4 + k))) | (1u << k) | member));
      ps.Persist(&X->ofp[0], sizeof(OverflowMeta));
      WriteUnlock(X);
      return;
    }
  }
  DashBucket* B = &bk[home];
  WriteLock(B);
  ps.Store(&B->ocount, static_cast<uint8_t>(B->ocount + 1));
  ps.Persist(&B->ocount, 1);
  WriteUnlock(B);
}

void Dash::RemoveOverflow(DashBucket* bk, size_t home, size_t t, uint8_t fp) {
  pm::Persister& ps = persister();
  for (int side = 0; side < 2; ++side) {
    DashBucket* X = &bk[side == 0 ? home : Next(home)];
    for (size_t k = 0; k < kDashOverflow; ++k) {
      const bool member = (X->obits >> (4 + k)) & 1;
      if (!(X->obits >> k & 1) || member != (side == 1) || X->ofp[k] != fp ||
          ((X->oidx >> (2 * k)) & 3) != t) {
        continue;
      }
      WriteLock(X);
      ps.Store(&X->obits, static_cast<uint8_t>(X->obits & ~(1u << k)));
      ps.Persist(&X->obits, 1);
      WriteUnlock(X);
      return;
    }
  }
  DashBucket* B = &bk[home];
  if (B->ocount == 0) return;  // a hint recovery would have rebuilt; nothing to drop
  WriteLock(B);
  ps.Store(&B->ocount, static_cast<uint8_t>(B->ocount - 1));
  ps.Persist(&B->ocount, 1);
  WriteUnlock(B);
}

Status Dash::Place(DashSeg* s, const KvWords& w, uint64_t hash, bool* placed) {
  DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
  const size_t b = Home(hash), n = Next(b);
  const uint8_t f = Fp(hash);
  *placed = true;
  auto free_slot = [&](size_t x) { return std::countr_one(Alloc(bk[x].bits)); };
  const int fb = free_slot(b), fn = free_slot(n);
  const int cb = std::popcount(Alloc(bk[b].bits)), cn = std::popcount(Alloc(bk[n].bits));
  // Balanced insert: the less loaded of the two buckets.
  if (cb < int{kDashSlots} || cn < int{kDashSlots}) {
    if (cb <= cn) {
      StoreAt(bk, b, fb, w, f, false);
    } else {
      StoreAt(bk, n, fn, w, f, true);
    }
    return Status::OK();
  }
  // Displacement: an entry of n whose home is n moves to n+1 (as its member) ...
  const size_t nn = Next(n);
  if (free_slot(nn) < int{kDashSlots}) {
    if (const uint32_t cand = Alloc(bk[n].bits) & ~Member(bk[n].bits); cand != 0) {
      const auto i = static_cast<size_t>(std::countr_zero(cand));
      StoreAt(bk, nn, free_slot(nn), bk[n].slot[i], bk[n].fp[i], true);
      ClearAt(bk, n, i);
      StoreAt(bk, n, i, w, f, true);
      displacements_.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  // ... or an entry of b whose home is b-1 moves back to b-1.
  const size_t p = Prev(b);
  if (free_slot(p) < int{kDashSlots}) {
    if (const uint32_t cand = Alloc(bk[b].bits) & Member(bk[b].bits); cand != 0) {
      const auto i = static_cast<size_t>(std::countr_zero(cand));
      StoreAt(bk, p, free_slot(p), bk[b].slot[i], bk[b].fp[i], false);
      ClearAt(bk, b, i);
      StoreAt(bk, b, i, w, f, false);
      displacements_.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  // The stash, recorded in the overflow metadata.
  for (size_t t = 0; t < stash_; ++t) {
    const size_t x = buckets_ + t;
    if (const int j = free_slot(x); j < int{kDashSlots}) {
      StoreAt(bk, x, j, w, f, false);
      AddOverflow(bk, b, t, f);
      stash_inserts_.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  *placed = false;
  return Status::OK();
}

Status Dash::UpdateAt(DashBucket* bk, const Loc& at, std::string_view key,
                      std::string_view value, uint64_t hash) {
  pm::Persister& ps = persister();
  DashBucket* X = &bk[at.bucket];
  KvWords* w = &X->slot[at.slot];
  if (!IsRecord(w->word0)) {
    if (value.size() == 8) {  // one failure-atomic store
      uint64_t v = 0;
      std::memcpy(&v, value.data(), 8);
      WriteLock(X);
      ps.Store(&w->word1, v);
      ps.Persist(&w->word1, sizeof(v));
      WriteUnlock(X);
      return Status::OK();
    }
    // Inline -> record: both words change, under the undo log.
    uint64_t off = 0;
    PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &off));
    std::unique_ptr<pm::UndoLog::Tx> tx = undo_log().Begin();
    if (Status st = tx->Save(w, sizeof(KvWords)); !st.ok()) {
      tx.reset();
      codec().ReleaseRecord(off);
      return st;
    }
    undo_txs_.fetch_add(1, std::memory_order_relaxed);
    WriteLock(X);
    ps.Store(&w->word1, hash);
    ps.Store(&w->word0, kDashRecordTag | off);
    ps.Persist(w, sizeof(KvWords));
    tx->Commit();
    WriteUnlock(X);
    return Status::OK();
  }
  // A record slot stays one: a new record, published, the old one freed.
  const uint64_t old = w->word0 & kDashOffsetMask;
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &off));
  WriteLock(X);
  ps.Publish(&w->word0, kDashRecordTag | off);
  WriteUnlock(X);
  codec().ReleaseRecord(old);
  return Status::OK();
}

Status Dash::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                     WriteMode mode) {
  KvWords w{};
  bool encoded = false;
  auto discard = [&] {
    if (encoded && IsRecord(w.word0)) codec().ReleaseRecord(w.word0 & kDashOffsetMask);
  };
  for (;;) {
    PrefetchBuckets(BucketsOf(EntryPayload(hash) & ~kDepthMask), hash);
    DashSeg* s = LockSegment(hash);
    DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
    const Loc at = Find(bk, key, hash);
    if (at.found || mode == WriteMode::kUpdate) {
      Status st = Status::NotFound();
      if (at.found) {
        st = mode == WriteMode::kInsert ? Status::AlreadyExists()
                                        : UpdateAt(bk, at, key, value, hash);
      }
      s->mu.unlock();
      discard();
      return st;
    }
    if (!encoded) {
      if (Status st = Encode(key, value, hash, &w); !st.ok()) {
        s->mu.unlock();
        return st;
      }
      encoded = true;
    }
    bool placed = false;
    Status st = Place(s, w, hash, &placed);
    if (placed) AddKeys(s, 1);
    s->mu.unlock();
    if (!st.ok() || placed) return st;
    // Full: split the segment (directory lock first, then the segment again).
    {
      std::unique_lock<std::shared_mutex> g(dir_mu_);
      DashSeg* t = LockSegment(hash);
      st = Split(t, hash);
      t->mu.unlock();
    }
    if (!st.ok()) {
      discard();
      return st;
    }
  }
}

Status Dash::DoDelete(std::string_view key, uint64_t hash) {
  PrefetchBuckets(BucketsOf(EntryPayload(hash) & ~kDepthMask), hash);
  DashSeg* s = LockSegment(hash);
  DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
  const Loc at = Find(bk, key, hash);
  if (!at.found) {
    s->mu.unlock();
    return Status::NotFound();
  }
  const KvWords w = bk[at.bucket].slot[at.slot];
  ClearAt(bk, at.bucket, at.slot);  // the commit
  if (at.bucket >= buckets_) RemoveOverflow(bk, Home(hash), at.bucket - buckets_, Fp(hash));
  AddKeys(s, -1);
  s->mu.unlock();
  if (IsRecord(w.word0)) codec().ReleaseRecord(w.word0 & kDashOffsetMask);
  return Status::OK();
}

// ---- Splits ---------------------------------------------------------------------------------

bool Dash::RebuildOverflow(DashBucket* bk, bool persisted) {
  std::vector<OverflowMeta> meta(buckets_, OverflowMeta{});
  for (size_t t = 0; t < stash_; ++t) {
    const DashBucket& X = bk[buckets_ + t];
    for (uint32_t m = Alloc(X.bits); m != 0; m &= m - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(m));
      const size_t home = Home(SlotHash(X.slot[i]));
      bool recorded = false;
      for (int side = 0; side < 2 && !recorded; ++side) {
        OverflowMeta& o = meta[side == 0 ? home : Next(home)];
        for (size_t k = 0; k < kDashOverflow; ++k) {
          if (o.obits >> k & 1) continue;
          o.ofp[k] = X.fp[i];
          o.oidx = static_cast<uint8_t>(o.oidx | (t << (2 * k)));
          o.obits = static_cast<uint8_t>(o.obits | (1u << k) | (side == 1 ? 1u << (4 + k) : 0));
          recorded = true;
          break;
        }
      }
      if (!recorded) ++meta[home].ocount;
    }
  }
  bool changed = false;
  for (size_t x = 0; x < buckets_; ++x) {
    if (std::memcmp(&bk[x].ofp[0], &meta[x], sizeof(OverflowMeta)) == 0) continue;
    changed = true;
    if (persisted) {
      persister().Copy(&bk[x].ofp[0], &meta[x], sizeof(OverflowMeta));
      persister().Flush(&bk[x].ofp[0], sizeof(OverflowMeta));
    } else {
      std::memcpy(&bk[x].ofp[0], &meta[x], sizeof(OverflowMeta));
    }
  }
  return changed;
}

Status Dash::Split(DashSeg* s, uint64_t hash) {
  if (!resize_enabled()) {
    return Status::TableFull(name() + ": the key's buckets and the stash are full (resize off)");
  }
  const uint32_t depth = s->depth.load(std::memory_order_relaxed);
  const uint64_t pattern = s->pattern.load(std::memory_order_relaxed);
  const uint64_t off = s->offset.load(std::memory_order_relaxed);
  DashBucket* bk = BucketsOf(off);
  const size_t nb = buckets_ + stash_;
  // No split separates keys that share kDashMaxDepth + 1 top bits: if every entry of the
  // key's two buckets and the stash does with the key, refuse.
  {
    // The depth at which some entry of the key's buckets or the stash parts from the key;
    // past the depth limit, or past a directory of an eighth of the pool, splitting is
    // futile doubling: refuse (keys colliding in that many top bits).
    uint64_t differ = 0;
    const size_t b = Home(hash);
    for (size_t x : {b, Next(b)}) {
      for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
        differ |= SlotHash(bk[x].slot[std::countr_zero(m)]) ^ hash;
      }
    }
    for (size_t x = buckets_; x < nb; ++x) {
      for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
        differ |= SlotHash(bk[x].slot[std::countr_zero(m)]) ^ hash;
      }
    }
    const auto needed = static_cast<uint32_t>(std::countl_zero(differ)) + 1;
    if (depth >= kDashMaxDepth || needed > kDashMaxDepth ||
        (uint64_t{8} << needed) > pool().size() / 8) {
      return Status::TableFull(name() + ": keys sharing " + std::to_string(needed - 1) +
                               " top hash bits fill a key's buckets and the stash");
    }
  }
  // The new segment's image: the entries whose bit `depth` is 1, at the same places.
  std::vector<DashBucket> img(nb);
  std::memset(static_cast<void*>(img.data()), 0, nb * sizeof(DashBucket));
  std::vector<uint32_t> moved(nb, 0);
  int64_t moved_keys = 0;
  for (size_t x = 0; x < nb; ++x) {
    for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(m));
      if (((SlotHash(bk[x].slot[i]) >> (63 - depth)) & 1) == 0) continue;
      img[x].slot[i] = bk[x].slot[i];
      img[x].fp[i] = bk[x].fp[i];
      img[x].bits |= (1u << i) | (bk[x].bits & (1u << (16 + i)));
      moved[x] |= 1u << i;
      ++moved_keys;
    }
  }
  RebuildOverflow(img.data(), /*persisted=*/false);
  uint64_t s1 = 0;
  PMHASH_RETURN_IF_ERROR(
      AllocateBlock(SegBytes(), "a segment of " + std::to_string(SegBytes()) + " bytes", &s1));
  if (s1 % pm::kCacheLine != 0) {
    allocator().Free(s1);
    return Status::Corruption(name() + ": a segment at an unaligned offset");
  }
  pm::Persister& ps = persister();
  ps.Copy(pool().At<char>(s1), img.data(), SegBytes());
  ps.Flush(pool().At<char>(s1), SegBytes());  // no fence: the switch fences before its commit
  if (depth == (dir_word_.load(std::memory_order_relaxed) & kDepthMask)) {
    if (Status st = DoubleDirectory(); !st.ok()) {
      allocator().Free(s1);
      return st;
    }
  }
  // The directory range of S: the right half to S1, every entry but the first, then the
  // first (S at depth + 1) published: the commit.
  const uint64_t w = dir_word_.load(std::memory_order_relaxed);
  const auto g = static_cast<uint32_t>(w & kDepthMask);
  uint64_t* e = DirEntries(w & ~kDepthMask);
  const uint64_t first = pattern << (g - depth), count = uint64_t{1} << (g - depth);
  for (uint64_t j = 1; j < count; ++j) {
    const uint64_t payload = (j < count / 2 ? off : s1) | (depth + 1);
    ps.Store(&e[first + j], SealFor(&e[first + j], payload));
  }
  ps.Flush(&e[first + 1], (count - 1) * sizeof(uint64_t));
  ps.Publish(&e[first], SealFor(&e[first], off | (depth + 1)));
  // Prune S with every bucket held odd, so no search reads it half-pruned.
  for (size_t x = 0; x < nb; ++x) WriteLock(&bk[x]);
  s->depth.store(depth + 1, std::memory_order_relaxed);
  s->pattern.store(pattern << 1, std::memory_order_relaxed);
  for (size_t x = 0; x < nb; ++x) {
    if (moved[x] == 0) continue;
    ps.Store(&bk[x].bits, bk[x].bits & ~(moved[x] | (moved[x] << 16)));
    ps.Flush(&bk[x].bits, sizeof(uint32_t));
  }
  // A split that moved nothing (keys alike in that bit) has nothing to fence.
  if (RebuildOverflow(bk, /*persisted=*/true) || moved_keys != 0) ps.Fence();
  for (size_t x = 0; x < nb; ++x) WriteUnlock(&bk[x]);
  AddKeys(s, -moved_keys);
  BringUp(s1, depth + 1, (pattern << 1) | 1, moved_keys);
  splits_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

// ---- Recovery -------------------------------------------------------------------------------

int64_t Dash::RepairSegment(uint64_t offset, uint32_t depth, uint64_t pattern) {
  pm::Persister& ps = persister();
  DashBucket* bk = BucketsOf(offset);
  const size_t nb = buckets_ + stash_;
  int64_t keys = 0;
  for (size_t x = 0; x < nb; ++x) {
    // A killed writer's odd version would make every search retry: reset to 0 (an even
    // version is harmless; a crash during recovery resets it again).
    if (bk[x].version & 1) {
      ps.Store(&bk[x].version, 0u);
      ps.Flush(&bk[x].version, sizeof(uint32_t));
    }
    uint32_t drop = 0;
    for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(m));
      if (!Serves(SlotHash(bk[x].slot[i]), depth, pattern)) drop |= 1u << i;  // split's
    }
    if (x < buckets_) {
      // A displacement's duplicate: the key in x (home x) and in x+1 (member): keep x's.
      const size_t n = Next(x);
      for (uint32_t m = Alloc(bk[x].bits) & ~Member(bk[x].bits) & ~drop; m != 0; m &= m - 1) {
        const uint64_t w0 = bk[x].slot[std::countr_zero(m)].word0;
        for (uint32_t q = Alloc(bk[n].bits) & Member(bk[n].bits); q != 0; q &= q - 1) {
          const auto j = static_cast<size_t>(std::countr_zero(q));
          if (bk[n].slot[j].word0 != w0) continue;
          ps.Store(&bk[n].bits, bk[n].bits & ~((1u << j) | (1u << (16 + j))));
          ps.Flush(&bk[n].bits, sizeof(uint32_t));
          ++repaired_slots_;
        }
      }
    }
    if (drop != 0) {
      ps.Store(&bk[x].bits, bk[x].bits & ~(drop | (drop << 16)));
      ps.Flush(&bk[x].bits, sizeof(uint32_t));
      repaired_slots_ += std::popcount(drop);
    }
  }
  for (size_t x = 0; x < nb; ++x) keys += std::popcount(Alloc(bk[x].bits));
  RebuildOverflow(bk, /*persisted=*/true);  // Recover fences once after every segment
  return keys;
}

Status Dash::Recover(bool clean) {
  uint64_t dir = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, sizeof(DashDirHeader), &dir, &stored));
  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(dir, DirBytes(uint64_t{1} << depth)));
  PMHASH_RETURN_IF_ERROR(MakeSideTable());
  std::unique_lock<std::shared_mutex> g(dir_mu_);
  live_.clear();
  repaired_entries_ = 0;
  repaired_slots_ = 0;
  uint64_t* e = DirEntries(dir);
  std::unordered_set<uint64_t> seen;
  PMHASH_RETURN_IF_ERROR(WalkDirectory(
      dir, depth,
      [&](uint64_t first, uint64_t count, uint64_t seg, uint32_t local) -> Status {
        if (!seen.insert(seg).second || !allocator().IsAllocated(seg)) {
          return Status::Corruption(name() + ": directory entry " + std::to_string(first) +
                                    " names a segment twice or one not allocated");
        }
        (void)count;
        const uint64_t pattern = local == 0 ? 0 : first >> (depth - local);
        int64_t keys = 0;
        if (clean) {
          // Odd versions too (Shutdown flushes every version word, so only a damaged pool
          // holds one after a clean Close; cheap to repair, and no reopen waits on it).
          DashBucket* bk = BucketsOf(seg);
          for (size_t x = 0; x < buckets_ + stash_; ++x) {
            if (bk[x].version & 1) {
              persister().Store(&bk[x].version, 0u);
              persister().Flush(&bk[x].version, sizeof(uint32_t));
            }
            keys += std::popcount(Alloc(bk[x].bits));
          }
        } else {
          keys = RepairSegment(seg, local, pattern);
        }
        BringUp(seg, local, pattern, keys);
        return Status::OK();
      },
      [&](uint64_t j, uint64_t payload) -> Status {
        if (clean) {
          return Status::Corruption(name() + ": directory entry " + std::to_string(j) +
                                    " differs from its range after a clean shutdown");
        }
        // An unfinished split: set back to the range's first entry.
        persister().Store(&e[j], SealFor(&e[j], payload));
        persister().Persist(&e[j], sizeof(uint64_t));
        ++repaired_entries_;
        return Status::OK();
      }));
  persister().Fence();  // the versions reset
  dir_word_.store(dir | depth, std::memory_order_release);
  return Status::OK();
}

Status Dash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t dir = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(DashDirHeader), &dir, &stored));
  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  visit(dir);
  {
    std::shared_lock<std::shared_mutex> g(dir_mu_);
    for (const uint64_t old : retired_dirs_) visit(old);  // freed at Close (VerifyBlocks)
  }
  // A record may be named twice (a displacement's or a split's copy before recovery
  // repairs it): each once.
  std::unordered_set<uint64_t> records;
  PMHASH_RETURN_IF_ERROR(WalkDirectory(
      dir, depth,
      [&](uint64_t, uint64_t, uint64_t seg, uint32_t) -> Status {
        visit(seg);
        const DashBucket* bk = BucketsOf(seg);
        for (size_t x = 0; x < buckets_ + stash_; ++x) {
          for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
            const uint64_t w0 = bk[x].slot[std::countr_zero(m)].word0;
            if (IsRecord(w0)) records.insert(w0 & kDashOffsetMask);
          }
        }
        return Status::OK();
      },
      [](uint64_t, uint64_t) { return Status::OK(); }));
  for (uint64_t r : records) visit(r);
  return Status::OK();
}

// ---- Iteration, checks, stats ------------------------------------------------------------------

uint64_t Dash::RangeEnd(uint32_t depth, uint64_t pattern) const {
  if (depth == 0 || pattern + 1 == (uint64_t{1} << depth)) return 0;
  return (pattern + 1) << (64 - depth);
}

void Dash::CollectSegment(const DashSeg* s, uint64_t from, std::vector<ScanEntry>* out) const {
  const DashBucket* bk = BucketsOf(s->offset.load(std::memory_order_relaxed));
  for (size_t x = 0; x < buckets_ + stash_; ++x) {
    for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
      const KvWords& w = bk[x].slot[std::countr_zero(m)];
      const uint64_t h = SlotHash(w);
      if (h >= from) AddScanEntry(out, h, SlotKey(w), SlotValue(w));
    }
  }
}

uint64_t Dash::Count() const {
  std::shared_lock<std::shared_mutex> g(dir_mu_);
  int64_t n = 0;
  for (const DashSeg* s : live_) n += s->keys.load(std::memory_order_relaxed);
  return static_cast<uint64_t>(n);
}

Status Dash::ForEach(const Visitor& fn) const {
  uint64_t cursor = 0;
  std::vector<ScanEntry> batch;
  for (;;) {
    batch.clear();
    uint64_t end = 0;
    {
      std::shared_lock<std::shared_mutex> g(dir_mu_);
      DashSeg* s = LockSegmentShared(cursor);
      CollectSegment(s, cursor, &batch);
      end = RangeEnd(s->depth.load(std::memory_order_relaxed),
                     s->pattern.load(std::memory_order_relaxed));
      s->mu.unlock_shared();
    }
    for (const ScanEntry& e : batch) {
      if (!fn(e.key, e.value)) return Status::OK();
    }
    if (end == 0) return Status::OK();
    cursor = end;
  }
}

Status Dash::DoScan(ScanPage* page) const {
  // No split runs while dir_mu_ is held shared. Homes: the hash space in 2^(G + s) equal
  // ranges, 2^s about a segment's slots (at most 2^40 homes: scan.h's resolution), so a
  // page ends near max_keys keys; a run of homes is read segment by segment (each whole,
  // from the run's first hash; CollectHomes drops what lies past the run).
  std::shared_lock<std::shared_mutex> g(dir_mu_);
  const auto depth = static_cast<uint32_t>(dir_word_.load(std::memory_order_acquire) & kDepthMask);
  const uint64_t slots = (buckets_ + stash_) * kDashSlots;
  const uint32_t bits = depth + std::min<uint32_t>(std::bit_width(slots) - 1, 40 - std::min<uint32_t>(depth, 40));
  const uint64_t homes = uint64_t{1} << bits;
  const uint64_t area = std::bit_floor(std::max<uint64_t>(1, homes / live_.size()));
  const auto start_of = [bits](uint64_t home) { return bits == 0 ? 0 : home << (64 - bits); };
  page->CollectHomes(homes, area, [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    uint64_t cursor = start_of(first);
    const uint64_t end = last == homes ? 0 : start_of(last);  // 0: the end of the hash space
    for (;;) {
      DashSeg* s = LockSegmentShared(cursor);
      CollectSegment(s, cursor, out);
      const uint64_t next = RangeEnd(s->depth.load(std::memory_order_relaxed),
                                     s->pattern.load(std::memory_order_relaxed));
      s->mu.unlock_shared();
      if (next == 0 || (end != 0 && next >= end)) break;
      cursor = next;
    }
  });
  return Status::OK();
}

Status Dash::CheckInvariants() const {
  uint64_t dir = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(DashDirHeader), &dir, &stored));
  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  std::shared_lock<std::shared_mutex> g(dir_mu_);
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  if (dir != (w & ~kDepthMask) || depth != (w & kDepthMask)) {
    return Status::Corruption(name() + ": the root names another directory than the live one");
  }
  std::unordered_set<std::string> keys;
  uint64_t live = 0;
  uint64_t segments = 0;
  const size_t nb = buckets_ + stash_;
  PMHASH_RETURN_IF_ERROR(WalkDirectory(
      dir, depth,
      [&](uint64_t first, uint64_t, uint64_t seg, uint32_t local) -> Status {
        ++segments;
        const uint64_t pattern = local == 0 ? 0 : first >> (depth - local);
        const DashSeg* s = SegAt(seg);
        const std::string where = name() + ": segment at pool offset " + std::to_string(seg);
        if (s->offset.load() != seg || s->depth.load() != local || s->pattern.load() != pattern) {
          return Status::Corruption(where + ": its DRAM state disagrees with the directory");
        }
        const DashBucket* bk = BucketsOf(seg);
        int64_t n = 0;
        std::vector<int> stash_of(buckets_, 0);
        for (size_t x = 0; x < nb; ++x) {
          if (bk[x].version & 1) return Status::Corruption(where + ": a bucket is locked");
          for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
            const auto i = static_cast<size_t>(std::countr_zero(m));
            const KvWords& kv = bk[x].slot[i];
            const std::string at = where + ", bucket " + std::to_string(x) + " slot " +
                                   std::to_string(i);
            if (IsRecord(kv.word0) &&
                !codec().Plausible(SlotForm::kRecord, KvWords{kv.word0 & kDashOffsetMask, kv.word1})) {
              return Status::Corruption(at + ": a damaged record");
            }
            const uint64_t h = SlotHash(kv);
            const std::string key(SlotKey(kv));
            if (!Serves(h, local, pattern)) return Status::Corruption(at + ": a foreign key");
            if (bk[x].fp[i] != Fp(h)) return Status::Corruption(at + ": a wrong fingerprint");
            const bool member = (bk[x].bits >> (16 + i)) & 1;
            if (x < buckets_ && (member ? Prev(x) : x) != Home(h)) {
              return Status::Corruption(at + ": the key's home is bucket " +
                                        std::to_string(Home(h)));
            }
            if (x >= buckets_) ++stash_of[Home(h)];
            if (!keys.insert(key).second) return Status::Corruption(at + ": a key stored twice");
            const Loc found = Find(bk, key, h);
            if (!found.found || found.bucket != x || found.slot != i) {
              return Status::Corruption(at + ": a search does not find it");
            }
            ++n;
          }
        }
        for (size_t b = 0; b < buckets_; ++b) {
          int hints = bk[b].ocount;
          for (size_t k = 0; k < kDashOverflow; ++k) {
            hints += (bk[b].obits >> k & 1) && !(bk[b].obits >> (4 + k) & 1);
            hints += (bk[Next(b)].obits >> k & 1) && (bk[Next(b)].obits >> (4 + k) & 1);
          }
          if (hints != stash_of[b]) {
            return Status::Corruption(where + ": bucket " + std::to_string(b) + " has " +
                                      std::to_string(stash_of[b]) + " stash entries but " +
                                      std::to_string(hints) + " overflow records");
          }
        }
        if (n != s->keys.load()) {
          return Status::Corruption(where + ": counts " + std::to_string(s->keys.load()) +
                                    " keys but holds " + std::to_string(n));
        }
        live += static_cast<uint64_t>(n);
        return Status::OK();
      },
      [&](uint64_t j, uint64_t) -> Status {
        return Status::Corruption(name() + ": directory entry " + std::to_string(j) +
                                  " differs from its range");
      }));
  if (segments != live_.size()) {
    return Status::Corruption(name() + ": " + std::to_string(live_.size()) +
                              " segments are up but the directory names " +
                              std::to_string(segments));
  }
  int64_t counted = 0;
  for (const DashSeg* s : live_) counted += s->keys.load(std::memory_order_relaxed);
  if (static_cast<uint64_t>(counted) != live) {
    return Status::Corruption(name() + ": Count() is " + std::to_string(counted) + " but " +
                              std::to_string(live) + " slots are live");
  }
  return Status::OK();
}

void Dash::FillStats(IndexStats* stats) const {
  std::shared_lock<std::shared_mutex> g(dir_mu_);
  const uint64_t n = live_.size();
  int64_t count = 0;
  for (const DashSeg* s : live_) count += s->keys.load(std::memory_order_relaxed);
  stats->count = static_cast<uint64_t>(count);
  stats->key_slots = n * (buckets_ + stash_) * kDashSlots;
  stats->dram_bytes = sizeof(*this) + table_.size() * sizeof(DashSeg) + n * sizeof(DashSeg*);
  auto& c = stats->engine_counters;
  c["segments"] = n;
  c["global_depth"] = dir_word_.load(std::memory_order_relaxed) & kDepthMask;
  c["splits"] = splits_.load(std::memory_order_relaxed);
  c["doublings"] = doublings_.load(std::memory_order_relaxed);
  c["displacements"] = displacements_.load(std::memory_order_relaxed);
  c["stash_inserts"] = stash_inserts_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs_.load(std::memory_order_relaxed);
  c["recovery_repaired_entries"] = repaired_entries_;
  c["recovery_repaired_slots"] = repaired_slots_;
}

void Dash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  std::shared_lock<std::shared_mutex> g(dir_mu_);
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  const uint64_t dir = w & ~kDepthMask;
  mark(dir, sizeof(DashDirHeader), pm::Region::kEngineMetadata, true);
  mark(dir + sizeof(DashDirHeader), (uint64_t{1} << (w & kDepthMask)) * sizeof(uint64_t),
       pm::Region::kEngineMetadata, true);
  for (const DashSeg* s : live_) {
    const uint64_t off = s->offset.load(std::memory_order_relaxed);
    mark(off, SegBytes(), pm::Region::kSlots, false);
    const DashBucket* bk = BucketsOf(off);
    for (size_t x = 0; x < buckets_ + stash_; ++x) {
      for (uint32_t m = Alloc(bk[x].bits); m != 0; m &= m - 1) {
        const KvWords& kv = bk[x].slot[std::countr_zero(m)];
        if (IsRecord(kv.word0)) {
          codec().DescribeRecord(SlotForm::kRecord, KvWords{kv.word0 & kDashOffsetMask, kv.word1},
                                 mark);
        }
      }
    }
  }
}

void RegisterEngines_dash(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {
      OptionSpec::Uint("buckets", kDashDefaultBuckets, 4, 256,
                       "normal buckets per segment, a power of two (the original's 64); fixed "
                       "when the pool is created"),
      OptionSpec::Uint("stash_buckets", kDashDefaultStash, 1, 4,
                       "stash buckets per segment (the original's 2); fixed when the pool is "
                       "created"),
      OptionSpec::Uint("segments", std::nullopt, 1, uint64_t{1} << 30,
                       "segments of the first directory, a power of two (auto: enough for "
                       "initial_capacity keys at half their slots, else 64, where the "
                       "original's measurement starts)"),
      OptionSpec::Bool("first_try", true,
                       "searches of 8-byte keys try the original's read set first, inline (the "
                       "two buckets' first lines, no side table, no prefetch); off: the general "
                       "path only (prefetching both buckets), to compare within a run"),
      OptionSpec::Bool("first_try_prefetch", false,
                       "the first try prefetches both buckets' eight lines before it reads "
                       "them (the original prefetches none): a slot's line then arrives with "
                       "the fingerprints' instead of after them")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "a segment splits (and the directory doubles) when a "
                                      "key's two buckets, displacement and the stash are full",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true};
  // 4 + 1 buckets per segment, one segment: splits, doublings, displacements and stash
  // inserts within a few dozen keys.
  info.test = {.crash_options = {{"buckets", "4"}, {"stash_buckets", "1"}, {"segments", "1"}},
               .thread_crash_options = {{"segments", "16"}},
               .growth_counters = {"splits", "doublings"},
               // 26,902 crash images at full length, the most of any engine: half
               // length makes 13,000 and still splits and doubles (make test's budget).
               .crash_script_scale = 0.5};
  info.description = {"dash",
                      "Dash-EH: directory by MSB, segments of 64 + 2 stash 256-byte buckets "
                      "with 14 fingerprinted slots, balanced insert, displacement, stash, "
                      "lock-free versioned searches, in-place splits",
                      "Dash (Lu et al., VLDB'20), extendible variant", /*crash_consistent=*/true};
  registry.Add<Dash>(std::move(info));
}

}  // namespace pmhash::engines
