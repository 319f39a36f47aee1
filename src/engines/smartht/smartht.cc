// SmartHT (paper 003). Layout, invariants, persist order and locking: smartht.h.
#include "engines/smartht/smartht.h"

#include <algorithm>
#include <bit>
#include <chrono>
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

uint64_t FloorPowerOfTwo(uint64_t v) {
  return v == 0 ? 1 : uint64_t{1} << (63 - __builtin_clzll(v));
}

uint64_t CeilPowerOfTwo(uint64_t v) {
  const uint64_t f = FloorPowerOfTwo(v);
  return f == v ? f : f << 1;
}

constexpr uint8_t kInline = static_cast<uint8_t>(SlotForm::kInline);
constexpr uint8_t kRecord = static_cast<uint8_t>(SlotForm::kRecord);

uint64_t TableBytes(uint64_t head_buckets) {
  return sizeof(SmartHtTableHeader) + head_buckets * sizeof(SmartBucket);
}

// Bound on a chain walk over raw PM (a damaged pool could hold a cycle).
uint64_t MaxChain(const pm::Pool& pool) { return pool.size() / sizeof(SmartBucket) + 1; }

constexpr RootLayout kRootLayout{kSmartHtRootMagic, kSmartHtVersion, sizeof(SmartHtRoot), 0};
constexpr size_t kTableCheckedBytes = offsetof(SmartHtTableHeader, check);

}  // namespace

// Announces that this thread holds a filter pointer (see WaitForReaders). In its own
// slot: a plain store making the sequence odd, then LightFence, so the announcement is
// ordered before the pointer load by the rebuild's HeavyFence, not by a locked
// instruction here.
class SmartHt::FilterGuard {
 public:
  explicit FilterGuard(const SmartHt& ht) : slot_(ht.MySlot()), shared_(ht.IsShared(slot_)) {
    if (shared_) {
      slot_.reading.fetch_add(1, std::memory_order_seq_cst);
    } else {
      slot_.reading.store(slot_.reading.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
      LightFence();
    }
  }
  ~FilterGuard() {
    if (shared_) {
      slot_.reading.fetch_sub(1, std::memory_order_release);
    } else {
      slot_.reading.store(slot_.reading.load(std::memory_order_relaxed) + 1,
                          std::memory_order_release);
    }
  }
  FilterGuard(const FilterGuard&) = delete;
  FilterGuard& operator=(const FilterGuard&) = delete;

 private:
  ReaderSlot& slot_;
  const bool shared_;
};

SmartHt::SmartHt() = default;

SmartHt::~SmartHt() {
  StopBackgroundWork();
  delete building_.exchange(nullptr);
  delete filter_.exchange(nullptr);
}

void SmartHt::SetBounds() {
  heap_begin_ = pool().heap_offset();
  heap_end_ = heap_begin_ + pool().heap_size();
  chain_limit_ = MaxChain(pool());
}

// ---- Options, creation, recovery ----------------------------------------------------

Status SmartHt::Configure(EngineOptions& options, const Options& /*index_options*/) {
  head_buckets_opt_ = options.Uint("head_buckets");
  expected_keys_opt_ = options.Uint("expected_keys");
  fp_rate_ = options.Double("fp_rate");
  bloom_hashes_ = static_cast<uint32_t>(options.Uint("bloom_hashes"));
  rebuild_deletes_ = options.Double("rebuild_deletes");
  max_chain_ = options.Double("max_chain");
  bucket_first_ = options.Bool("bucket_first");
  recovery_threads_ = static_cast<uint32_t>(options.Uint("recovery_threads"));
  if (head_buckets_opt_ != 0 && !IsPowerOfTwo(head_buckets_opt_)) {
    return Status::InvalidArgument("option head_buckets=" + std::to_string(head_buckets_opt_) +
                                   " must be a power of two");
  }
  return Status::OK();
}

uint64_t SmartHt::HeadBucketsFor(uint64_t keys) const {
  if (head_buckets_opt_ != 0) return head_buckets_opt_;
  if (keys != 0) {
    // One bucket's worth of keys per head bucket at the expected count.
    return std::clamp<uint64_t>(CeilPowerOfTwo((keys + kSmartHtSlots - 1) / kSmartHtSlots),
                                kSmartHtMinHeadBuckets, kSmartHtMaxHeadBuckets);
  }
  // The paper's 2^24 (1 GiB of head buckets), but never more than a quarter of the heap,
  // so that a small pool still works (docs/engines/smartht.md).
  const uint64_t fit = FloorPowerOfTwo(pool().heap_size() / 4 / sizeof(SmartBucket));
  return std::clamp<uint64_t>(std::min(kSmartHtPaperHeadBuckets, fit), kSmartHtMinHeadBuckets,
                              kSmartHtPaperHeadBuckets);
}

Status SmartHt::MakeFilter(uint64_t expected_keys, std::unique_ptr<BloomFilter>* out) const {
  BloomOptions bo;
  bo.expected_keys = std::max<uint64_t>(expected_keys, 1024);
  bo.false_positive_rate = fp_rate_;
  bo.num_probes = bloom_hashes_;
  Result<BloomFilter> f = BloomFilter::Make(bo);
  if (!f.ok()) return f.status();
  *out = std::make_unique<BloomFilter>(std::move(f.value()));
  return Status::OK();
}

Status SmartHt::NewTable(uint64_t n, uint64_t* offset) {
  // Unreachable until root.table links it: the caller flushes it with one pass.
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(n),
                                       "a head table of " + std::to_string(n) + " buckets",
                                       kSmartHtTableMagic, n, offset));
  auto* h = pool().At<SmartHtTableHeader>(*offset);
  persister().Store(&h->check, MetadataCheck(h, kTableCheckedBytes));
  return Status::OK();
}

Status SmartHt::Create() {
  const uint64_t n = HeadBucketsFor(initial_capacity());
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n, &offset));
  pm::Persister& p = persister();
  root_ = root<SmartHtRoot>();
  p.Store(&root_->filter, SealFor(&root_->filter, 0));
  p.Store(&root_->filter_bytes, SealFor(&root_->filter_bytes, 0));
  p.Store(&root_->filter_valid, SealFor(&root_->filter_valid, 0));
  p.Store(&root_->chain_buckets, SealFor(&root_->chain_buckets, 0));
  CreateRoot(kRootLayout, offset, TableBytes(n));

  table_offset_ = offset;
  heads_.store(reinterpret_cast<SmartBucket*>(pool().At<char>(offset) + sizeof(SmartHtTableHeader)),
               std::memory_order_release);
  SetBounds();
  ResetStripes(n);
  head_count_.store(n, std::memory_order_release);
  base_count_ = 0;
  const uint64_t expected =
      expected_keys_opt_ != 0 ? expected_keys_opt_
                              : (initial_capacity() != 0 ? initial_capacity() : n * kSmartHtSlots);
  std::unique_ptr<BloomFilter> f;
  PMHASH_RETURN_IF_ERROR(MakeFilter(expected, &f));
  filter_expected_.store(f->options().expected_keys);
  filter_.store(f.release());
  filter_origin_ = "new";
  return Status::OK();
}

Status SmartHt::ValidateTable(uint64_t off, uint64_t* n) const {
  uint64_t count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(off, kSmartHtTableMagic,
                                            pool().size() / sizeof(SmartBucket), TableBytes,
                                            &count));
  if (!IsPowerOfTwo(count) || count < kSmartHtMinHeadBuckets) {
    return Status::Corruption("smartht: head table at offset " + std::to_string(off) +
                              " has " + std::to_string(count) +
                              " head buckets, not a power of two of at least " +
                              std::to_string(kSmartHtMinHeadBuckets));
  }
  const auto* h = pool().At<const SmartHtTableHeader>(off);
  PMHASH_RETURN_IF_ERROR(
      VerifyMetadata(h, kTableCheckedBytes, h->check, "the head table header"));
  *n = count;
  return Status::OK();
}

Status SmartHt::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t off = 0, n = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(SmartHtTableHeader), &off, &count));
  RootWords words;
  PMHASH_RETURN_IF_ERROR(ReadRootWords(&words));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  visit(off);
  if (words.filter != 0 && pool().Contains(words.filter, 1)) visit(words.filter);
  const auto* heads =
      reinterpret_cast<const SmartBucket*>(pool().At<char>(off) + sizeof(SmartHtTableHeader));
  const uint64_t max_chain = MaxChain(pool());
  for (uint64_t i = 0; i < n; ++i) {
    const SmartBucket* b = &heads[i];
    for (uint64_t depth = 0; b != nullptr && depth < max_chain; ++depth) {
      for (int s = 0; s < kSmartHtSlots; ++s) {
        // Only committed record slots own a record; a wild offset is left for Recover.
        if (b->token[s] == kRecord && pool().Contains(b->slot[s].word0, 8)) {
          SlotCodec::VisitBlocks(SlotForm::kRecord, b->slot[s], visit);
        }
      }
      const uint64_t next = b->next;
      if (next == 0 || next % sizeof(SmartBucket) != 0 ||
          !pool().Contains(next, sizeof(SmartBucket))) {
        break;  // a bad pointer is reported by Recover
      }
      visit(next);
      b = BucketAt(next);
    }
  }
  return Status::OK();
}

uint64_t SmartHt::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;  // the record form keeps the hash
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

Status SmartHt::RecoverScan(uint64_t* count, uint64_t* chain_buckets) {
  // Sec. III-D, after a failure: walk every chain, skip invalid tokens, reinsert valid
  // ones into the filter. Also validates the PDL (a damaged pool is Corruption).
  const uint64_t n = head_count_.load();
  const uint64_t threads = std::min<uint64_t>(recovery_threads_, n / kSmartHtLockArea);
  std::atomic<uint64_t> total{0}, buckets{0};
  std::vector<Status> errors(std::max<uint64_t>(threads, 1));
  BloomFilter* f = filter_.load();
  const uint64_t max_chain = MaxChain(pool());
  auto work = [&](uint64_t first, uint64_t last, Status* err) {
    uint64_t keys = 0, chained = 0;
    for (uint64_t i = first; i < last; ++i) {
      const SmartBucket* b = &Heads()[i];
      for (uint64_t depth = 0;; ++depth) {
        if (depth >= max_chain) {
          *err = Status::Corruption("smartht: the chain of head bucket " + std::to_string(i) +
                                    " does not end (damaged pool)");
          return;
        }
        for (int s = 0; s < kSmartHtSlots; ++s) {
          const uint8_t t = b->token[s];
          if (t == 0) continue;
          const auto form = static_cast<SlotForm>(t);
          if ((t != kInline && t != kRecord) || !codec().Plausible(form, b->slot[s])) {
            *err = Status::Corruption("smartht: a slot in the chain of head bucket " +
                                      std::to_string(i) + " has token " + std::to_string(t) +
                                      " that does not match its contents (damaged pool)");
            return;
          }
          const uint64_t h = HashOf(form, b->slot[s]);
          if (Reduce(h, n) != i) {
            *err = Status::Corruption("smartht: head bucket " + std::to_string(i) +
                                      " chains a key whose head bucket is " +
                                      std::to_string(Reduce(h, n)) + " (damaged pool)");
            return;
          }
          f->AddHash(h);
          ++keys;
        }
        const uint64_t next = b->next;
        if (next == 0) break;
        if (next % sizeof(SmartBucket) != 0 || !allocator().IsAllocated(next)) {
          *err = Status::Corruption("smartht: a chained bucket pointer " + std::to_string(next) +
                                    " is not an allocated block (damaged pool)");
          return;
        }
        ++chained;
        b = BucketAt(next);
      }
    }
    total.fetch_add(keys);
    buckets.fetch_add(chained);
  };
  if (threads <= 1) {
    work(0, n, &errors[0]);
  } else {
    // Our improvement over the paper's single thread: head-bucket ranges in parallel
    // (BloomFilter::AddHash is thread-safe).
    std::vector<std::thread> pool_threads;
    const uint64_t per = n / threads;
    for (uint64_t t = 0; t < threads; ++t) {
      const uint64_t first = t * per, last = t + 1 == threads ? n : first + per;
      pool_threads.emplace_back(work, first, last, &errors[t]);
    }
    for (auto& th : pool_threads) th.join();
  }
  for (const Status& e : errors) PMHASH_RETURN_IF_ERROR(e);
  *count = total.load();
  *chain_buckets = buckets.load();
  return Status::OK();
}

Status SmartHt::ReadRootWords(RootWords* w) const {
  const auto* r = root<const SmartHtRoot>();
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->filter, "root filter offset", &w->filter));
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->filter_bytes, "root filter size", &w->filter_bytes));
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->filter_valid, "root filter_valid flag", &w->filter_valid));
  PMHASH_RETURN_IF_ERROR(
      LoadSealed(&r->chain_buckets, "root chained-bucket count", &w->chain_buckets));
  if (w->filter_valid > 1) {
    return Status::Corruption("smartht: root filter_valid flag is " +
                              std::to_string(w->filter_valid) + " (damaged)");
  }
  return Status::OK();
}

Status SmartHt::ReloadFilter(uint64_t off, uint64_t bytes) {
  // Sec. III-D, normal shutdown: the filter of the last Close is in the reserved area.
  const std::string where = "smartht: the filter saved at clean shutdown (pool offset " +
                            std::to_string(off) + ", " + std::to_string(bytes) + " bytes) ";
  if (off == 0 || bytes == 0 || !pool().Contains(off, bytes) || !allocator().IsAllocated(off) ||
      allocator().UsableSize(off) < bytes) {
    return Status::Corruption(where + "is not an allocated block of its size (damaged pool)");
  }
  Result<BloomFilter> f = BloomFilter::Deserialize(
      std::span<const uint8_t>(pool().At<const uint8_t>(off), bytes));
  if (!f.ok()) {
    return Status::Corruption(where + "is damaged: " + std::string(f.status().message()));
  }
  persister().NoteRead(pool().At<const uint8_t>(off), bytes);
  filter_expected_.store(f.value().options().expected_keys);
  delete filter_.exchange(new BloomFilter(std::move(f.value())));
  return Status::OK();
}

Status SmartHt::Recover(bool clean) {
  root_ = root<SmartHtRoot>();
  uint64_t off = 0, n = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, sizeof(SmartHtTableHeader), &off, &stored_count));
  RootWords words;
  PMHASH_RETURN_IF_ERROR(ReadRootWords(&words));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &n));
  PMHASH_RETURN_IF_ERROR(
      CheckTableBlock(off, TableBytes(n)));
  table_offset_ = off;
  heads_.store(reinterpret_cast<SmartBucket*>(pool().At<char>(off) + sizeof(SmartHtTableHeader)),
               std::memory_order_release);
  SetBounds();
  ResetStripes(n);
  head_count_.store(n, std::memory_order_release);

  const auto t0 = std::chrono::steady_clock::now();
  pm::Persister& p = persister();
  // After a clean shutdown that saved the filter (one with a full pool may not have), the
  // root vouches for the saved filter: one that fails its checks is a damaged pool.
  if (clean && words.filter_valid == 1) {
    PMHASH_RETURN_IF_ERROR(ReloadFilter(words.filter, words.filter_bytes));
    // The paper's "nonCrashed := 0 upon successful recovery": a later crash must rebuild.
    p.Store(&root_->filter_valid, SealFor(&root_->filter_valid, 0));
    p.Persist(&root_->filter_valid, sizeof(uint64_t));
    filter_origin_ = "reloaded";
    base_count_ = stored_count;
    chain_buckets_.store(words.chain_buckets);
    if (words.chain_buckets > pool().heap_size() / sizeof(SmartBucket) ||
        base_count_ > (n + words.chain_buckets) * kSmartHtSlots) {
      return Status::Corruption("smartht: root count " + std::to_string(base_count_) +
                                " or chained buckets " + std::to_string(words.chain_buckets) +
                                " cannot be right for the table (damaged pool)");
    }
  } else {
    if (words.filter_valid != 0) {
      p.Store(&root_->filter_valid, SealFor(&root_->filter_valid, 0));
      p.Persist(&root_->filter_valid, sizeof(uint64_t));
    }
    // Size the new filter for what the pool holds: count the keys first only if the root
    // count is trustworthy (clean); otherwise use the options and grow later.
    uint64_t expected = expected_keys_opt_ != 0 ? expected_keys_opt_
                        : initial_capacity() != 0 ? initial_capacity()
                                                 : n * kSmartHtSlots;
    if (clean) expected = std::max(expected, stored_count);
    std::unique_ptr<BloomFilter> f;
    PMHASH_RETURN_IF_ERROR(MakeFilter(expected, &f));
    filter_expected_.store(f->options().expected_keys);
    delete filter_.exchange(f.release());
    uint64_t count = 0, chained = 0;
    PMHASH_RETURN_IF_ERROR(RecoverScan(&count, &chained));
    chain_buckets_.store(chained);
    base_count_ = count;
    p.Store(&root_->chain_buckets, SealFor(&root_->chain_buckets, chained));
    p.Flush(&root_->chain_buckets, sizeof(uint64_t));
    PersistRootCount(count);  // its fence orders the flush above too
    filter_origin_ = "rebuilt";
  }
  filter_load_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // A filter sized too small for what the pool holds is rebuilt larger in the background.
  MaybeStartRebuild();
  return Status::OK();
}

Status SmartHt::SaveFilter() {
  BloomFilter* f = filter_.load();
  const size_t bytes = f->SerializedSize();
  pm::Persister& p = persister();
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&root_->filter, "root filter offset", &off));
  if (off != 0 && allocator().UsableSize(off) < bytes) {
    // The old area is too small: unlink it durably, then free it.
    p.Store(&root_->filter, SealFor(&root_->filter, 0));
    p.Persist(&root_->filter, sizeof(uint64_t));
    allocator().Free(off);
    off = 0;
  }
  if (off == 0) {
    Result<uint64_t> block = allocator().Allocate(bytes);
    if (!block.ok()) return block.status();
    off = *block;
  }
  std::vector<uint8_t> image = f->Serialize();
  p.Copy(pool().At<char>(off), image.data(), image.size());
  p.Flush(pool().At<char>(off), image.size());
  p.Fence();
  p.Store(&root_->filter, SealFor(&root_->filter, off));
  p.Store(&root_->filter_bytes, SealFor(&root_->filter_bytes, bytes));
  p.Flush(root_, sizeof(*root_));
  // The paper's nonCrashed flag: the commit.
  p.Publish(&root_->filter_valid, SealFor(&root_->filter_valid, 1));
  return Status::OK();
}

void SmartHt::StopBackgroundWork() {
  stop_.store(true);
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(rebuild_mu_);
    t = std::move(rebuild_thread_);
  }
  if (t.joinable()) t.join();
}

Status SmartHt::Shutdown() {
  // The background rebuild was stopped (Engine::Close); the live filter is complete. The
  // kit persists root.count after this.
  pm::Persister& p = persister();
  p.Store(&root_->chain_buckets, SealFor(&root_->chain_buckets, chain_buckets_.load()));
  p.Persist(&root_->chain_buckets, sizeof(uint64_t));
  // A pool too full to hold the filter is not an error: the next open rebuilds it.
  (void)SaveFilter();
  return Status::OK();
}

// ---- Locking and the filter ---------------------------------------------------------

void SmartHt::ResetStripes(uint64_t head_buckets) {
  stripes_.Reset(std::clamp<uint64_t>(head_buckets / kSmartHtLockArea, 64, 65536),
                 static_cast<unsigned>(std::countr_zero(kSmartHtLockArea)));
}

bool SmartHt::FilterMayContain(uint64_t hash) const {
  FilterGuard guard(*this);
  return filter_.load(std::memory_order_acquire)->MayContainHash(hash);
}

void SmartHt::FilterAdd(uint64_t hash) {
  // Alg. 1 line 30; during a rebuild also into the filter being built (caller holds the
  // key's stripe exclusively, which is what makes the rebuild miss no key).
  FilterGuard guard(*this);
  filter_.load(std::memory_order_acquire)->AddHash(hash);
  if (BloomFilter* b = building_.load(std::memory_order_seq_cst)) b->AddHash(hash);
}

void SmartHt::WaitForReaders() const {
  // Pairs with each reader's LightFence: from here on a reader that has not announced
  // itself loads the new pointer.
  HeavyFence();
  for (size_t i = 0; i < kSmartHtReaderSlots; ++i) {
    const uint64_t seq = readers_[i].reading.load(std::memory_order_acquire);
    if (seq % 2 == 0) continue;
    // Odd: that thread holds a pointer loaded before the fence; any change means it let go.
    for (int attempt = 0; readers_[i].reading.load(std::memory_order_acquire) == seq; ++attempt) {
      SpinBackoff(attempt);
    }
  }
  const ReaderSlot& shared = readers_[kSmartHtReaderSlots];
  for (int attempt = 0; shared.reading.load(std::memory_order_acquire) != 0; ++attempt) {
    SpinBackoff(attempt);
  }
}

// ---- Operations ---------------------------------------------------------------------

SmartHt::Probe SmartHt::Find(std::string_view key, uint64_t hash, uint64_t head,
                             bool full_scan) const {
  Probe p;
  SmartBucket* b = &Heads()[head];
  for (uint64_t depth = 0; b != nullptr && depth < chain_limit_; ++depth) {
    persister().NoteRead(b, sizeof(SmartBucket));  // one bucket, one line
    for (int s = 0; s < kSmartHtSlots; ++s) {
      const uint8_t t = b->token[s];
      if (t > kRecord) continue;  // damaged: neither a key nor free
      if (t == 0) {
        // Alg. 1 line 7 takes a slot of the head or first chained bucket; a full scan
        // may also reuse a lazily deleted slot further down.
        if (p.free_bucket == nullptr) {
          p.free_bucket = b;
          p.free_slot = s;
        }
        continue;
      }
      if (!full_scan) continue;
      // Alg. 2 line 7.
      if (codec().KeyEquals(static_cast<SlotForm>(t), b->slot[s], key, hash)) {
        p.bucket = b;
        p.slot = s;
        return p;
      }
    }
    if (!full_scan && depth >= 1) break;
    b = NextOf(b);  // Alg. 2 line 11
  }
  return p;
}

// Inlined into DoGet, its one caller (issue 29: no frame on the search path).
[[gnu::always_inline]] inline Optimistic SmartHt::FindOptimistic(uint64_t hash,
                                                                OptimisticRead* read,
                                                                bool* filtered) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  const uint64_t n = head_count_.load(std::memory_order_acquire);
  const uint64_t head = Reduce(hash, n);
  const VersionedRwLock& mu = stripes_.Of(head).mu;
  if (!read->Begin(mu)) return Optimistic::kRetry;
  Optimistic answer = Optimistic::kAbsent;
  const SmartBucket* b = &Heads()[head];
  // Alg. 2 lines 4-12, every word an acquire load (VersionedRwLock's contract): a writer
  // may be half-way through.
  if (filtered != nullptr) *filtered = false;
  for (uint64_t depth = 0; b != nullptr && depth < chain_limit_ && answer == Optimistic::kAbsent;
       ++depth, b = NextOf(b)) {
    read->Note(b, sizeof(SmartBucket));
    // kLocked for a record slot of this hash: its bytes are read under the lock.
    answer = MatchSlots<kSmartHtSlots>(LoadForms(b->token), b->slot, hash, read);
    if (depth == 0 && filtered != nullptr && answer == Optimistic::kAbsent &&
        !FilterMayContain(hash)) {
      *filtered = true;  // bucket_first: not in the head bucket, and the filter rules it out
      break;
    }
  }
  if (!read->Valid(mu) || head_count_.load(std::memory_order_relaxed) != n) {
    return Optimistic::kRetry;
  }
  return answer;
}

void SmartHt::Prefetch(uint64_t hash) const {
  {
    FilterGuard guard(*this);  // the filter's words may be freed by a rebuild otherwise
    filter_.load(std::memory_order_acquire)->PrefetchHash(hash);
  }
  // heads_ is stored before head_count_ (release): a stale pair still points into the
  // old or the new table, either a harmless prefetch.
  const uint64_t n = head_count_.load(std::memory_order_acquire);
  persister().Prefetch(Heads() + Reduce(hash, n));
}

Status SmartHt::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  // Alg. 2 line 1: the filter rules the key out with no lock and no PM access.
  // bucket_first=on (not in the paper): the head bucket first, the filter only if the key
  // is not there (FindOptimistic), so a positive search in its head bucket skips it.
  if (!bucket_first_ && !FilterMayContain(hash)) {
    CountFiltered();
    return Status::NotFound();
  }
  // Lines 3-12 with no lock first (the paper takes the shared lock, line 5): no locked
  // instruction, so consecutive searches overlap their PM misses. A writer in the area
  // makes it retry; after a few tries (or for a record) the shared lock answers.
  bool filtered = false;
  const Optimistic answer =
      SearchOptimistically(persister(), key, value,
                           [this, hash, &filtered](OptimisticRead* read)
                               __attribute__((always_inline)) {
        return FindOptimistic(hash, read, bucket_first_ ? &filtered : nullptr);
      });
  if (answer == Optimistic::kFound) return Status::OK();  // line 8
  if (answer == Optimistic::kAbsent) {
    if (filtered) {
      CountFiltered();
    } else {
      CountFalsePositive();
    }
    return Status::NotFound();  // line 14
  }
  return GetLocked(key, hash, value);
}

// Out of line: its locks and probe would otherwise give DoGet a large frame.
__attribute__((noinline)) Status SmartHt::GetLocked(std::string_view key, uint64_t hash,
                                                    std::string* value) {
  uint64_t head = 0;
  Stripe& s = LockHome(hash, LockMode::kShared, &head);  // line 5
  HeldLock guard(s.mu, LockMode::kShared);
  const Probe p = Find(key, hash, head, /*full_scan=*/true);
  if (p.bucket == nullptr) {
    CountFalsePositive();
    return Status::NotFound();  // line 14
  }
  const auto form = static_cast<SlotForm>(p.bucket->token[p.slot]);
  if (form == SlotForm::kRecord && !codec().Plausible(form, p.bucket->slot[p.slot])) {
    return Status::Corruption("smartht: the record of a slot is damaged");
  }
  AssignValue(value, codec().Value(form, p.bucket->slot[p.slot]));  // line 8
  return Status::OK();
}

Status SmartHt::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                        WriteMode mode) {
  // Alg. 1 line 1, the hash, is the kit's (Engine::Insert).
  if (mode == WriteMode::kUpdate && !FilterMayContain(hash)) {
    CountFiltered();
    return Status::NotFound();
  }
  bool new_bucket = false;
  {
    uint64_t head = 0;
    Stripe& s = LockHome(hash, LockMode::kExclusive, &head);  // line 8 (taken before line 3
    HeldLock guard(s.mu, LockMode::kExclusive);  // so the check cannot race)
    // Line 3: Is_Existed_in_SmartHT: the filter first; the chain only if it may be there.
    const bool maybe = FilterMayContain(hash);
    const Probe p = Find(key, hash, head, /*full_scan=*/maybe);
    if (p.bucket != nullptr) {
      if (mode == WriteMode::kInsert) return Status::AlreadyExists();  // line 4
      return UpdateAt(p, key, value, hash);
    }
    if (maybe) CountFalsePositive();
    if (mode == WriteMode::kUpdate) return Status::NotFound();
    new_bucket = p.free_bucket == nullptr;
    // Counted under the stripe lock: a growth (which holds every stripe) recounts the
    // chained buckets, and one counted after it would be counted twice. Before the insert
    // (taken back if it fails), as InsertAt adds to the filter: no locked instruction
    // after its persist.
    if (new_bucket) chain_buckets_.fetch_add(1, std::memory_order_relaxed);
    if (Status st = InsertAt(p, head, key, value, hash); !st.ok()) {
      if (new_bucket) chain_buckets_.fetch_sub(1, std::memory_order_relaxed);
      return st;
    }
  }
  ReaderSlot& mine = MySlot();
  Bump(mine, mine.delta, int64_t{1});
  if (new_bucket) {
    // Growth checks ride on bucket allocations (a third of inserts at most), so the hot
    // path reads no shared counter.
    if (Count() > filter_expected_.load(std::memory_order_relaxed)) {
      MaybeStartRebuild();
    }
    MaybeGrow();
  }
  return Status::OK();
}

Status SmartHt::InsertAt(const Probe& p, uint64_t head, std::string_view key,
                         std::string_view value, uint64_t hash) {
  // Line 30 first (the paper adds to the filter after the commit): the filter's locked
  // OR after a persist would wait for the write-back and hold back the next operation's
  // misses. Before any PM write it waits for none; a key the insert then fails to store
  // leaves a false positive, which the filter allows.
  FilterAdd(hash);
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  // A record (if any) is written and flushed here, ordered by the fence below.
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  if (p.free_bucket != nullptr) {
    SmartBucket* b = p.free_bucket;
    const int s = p.free_slot;
    if (form == SlotForm::kRecord) ps.Fence();  // the record is durable before its slot
    // Lines 10-12: value, key and token into one line; line 13: one merged flush. The
    // token byte is stored last, and a line reaches PM in store order. Word stores, not a
    // copy, because optimistic searches read the words with atomic loads.
    ps.Store(&b->slot[s].word1, words.word1);
    ps.Store(&b->slot[s].word0, words.word0);
    ps.Store(&b->token[s], static_cast<uint8_t>(form));
    ps.Persist(b, sizeof(SmartBucket));
    return Status::OK();
  }
  // Lines 16-29: a new chained bucket behind the head (head insertion).
  SmartBucket* h = &Heads()[head];
  uint64_t block = 0;
  if (Status s = AllocateBlock(sizeof(SmartBucket), "a chained bucket", &block);  // line 17
      !s.ok()) {
    codec().Release(form, words);
    return s;  // lines 18-19
  }
  SmartBucket image{};  // every byte zero: tokens, padding, words
  image.slot[0] = words;                       // lines 21-22
  image.token[0] = static_cast<uint8_t>(form);  // line 23
  image.next = h->next;                        // line 24
  SmartBucket* nb = BucketAt(block);
  ps.Copy(nb, &image, sizeof(image));
  ps.Flush(nb, sizeof(SmartBucket));  // line 25
  // Lines 26-29: fence (also ordering the record's flush), head.next = the new bucket
  // (the commit, one 8-byte store), flush, fence.
  ps.Publish(&h->next, block);
  return Status::OK();
}

Status SmartHt::UpdateAt(const Probe& p, std::string_view key, std::string_view value,
                         uint64_t hash) {
  // The slot encoding's update (not in the paper); word stores only, as searches that
  // take no lock need.
  return UpdateSlot(&p.bucket->token[p.slot], &p.bucket->slot[p.slot], key, value, hash);
}

Status SmartHt::DoDelete(std::string_view key, uint64_t hash) {
  // Sec. III-C3: the filter answers deletes of absent keys without PM.
  if (!FilterMayContain(hash)) {
    CountFiltered();
    return Status::NotFound();
  }
  uint64_t deletes = 0;
  {
    uint64_t head = 0;
    Stripe& s = LockHome(hash, LockMode::kExclusive, &head);
    HeldLock guard(s.mu, LockMode::kExclusive);
    const Probe p = Find(key, hash, head, /*full_scan=*/true);
    if (p.bucket == nullptr) {
      CountFalsePositive();
      return Status::NotFound();
    }
    pm::Persister& ps = persister();
    const auto form = static_cast<SlotForm>(p.bucket->token[p.slot]);
    const KvWords old = p.bucket->slot[p.slot];
    // Lazy deletion: clear the token and persist it; the words stay, the filter too.
    ps.Store(&p.bucket->token[p.slot], static_cast<uint8_t>(SlotForm::kEmpty));
    ps.Persist(&p.bucket->token[p.slot], 1);
    codec().Release(form, old);  // durably unreachable now
    ReaderSlot& mine = MySlot();
    Bump(mine, mine.delta, int64_t{-1});
    Bump(mine, mine.deletes, uint64_t{1});
    deletes = mine.deletes.load(std::memory_order_relaxed);
  }
  if (rebuild_deletes_ > 0 && deletes % 64 == 0) MaybeStartRebuild();
  return Status::OK();
}

uint64_t SmartHt::Count() const {
  int64_t c = static_cast<int64_t>(base_count_);
  for (const ReaderSlot& r : readers_) c += r.delta.load(std::memory_order_relaxed);
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

Status SmartHt::ForEach(const Visitor& fn) const {
  const IterationScope iterating(this, grow_mu_);  // no growth: no key twice
  // One lock area of head buckets and their chains at a time.
  return VisitAreas(
      stripes_, head_count_.load(std::memory_order_acquire), kSmartHtLockArea,
      [&](uint64_t first, uint64_t last, Entries* batch) {
        for (uint64_t i = first; i < last; ++i) {
          VisitSlots(i, [&](SlotForm f, const KvWords& w) {
            batch->emplace_back(codec().Key(f, w), codec().Value(f, w));
          });
        }
      },
      fn);
}

Status SmartHt::DoScan(ScanPage* page) const {
  const IterationScope iterating(this, grow_mu_);  // no growth during the page
  // A home is a head bucket and its chain; a run is one lock area, read under its stripe.
  const auto collect = [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    Stripe& s = stripes_.Of(first);
    s.mu.lock_shared();
    HeldLock guard(s.mu, LockMode::kShared);
    for (uint64_t i = first; i < last; ++i) {
      VisitSlots(i, [&](SlotForm f, const KvWords& w) {
        AddScanEntry(out, HashOf(f, w), codec().Key(f, w), codec().Value(f, w));
      });
    }
  };
  page->CollectHomes(head_count_.load(std::memory_order_acquire), kSmartHtLockArea, collect);
  return Status::OK();
}

// ---- Growth of the head table -------------------------------------------------------

void SmartHt::MaybeGrow() {
  if (!resize_enabled()) return;
  const uint64_t n = head_count_.load(std::memory_order_acquire);
  if (static_cast<double>(chain_buckets_.load(std::memory_order_relaxed)) <= max_chain_ * n) {
    return;
  }
  (void)Grow(n);  // a full pool just leaves the chains longer
}

Status SmartHt::Grow(uint64_t observed_n) {
  // try_lock: a ForEach (maybe our own caller's) or another growth is running; chained
  // hashing never needs growth for correctness, so skip it this time.
  std::unique_lock<std::shared_mutex> grow_lock(grow_mu_, std::try_to_lock);
  if (!grow_lock.owns_lock()) return Status::OK();
  if (head_count_.load() != observed_n) return Status::OK();
  const Stripes<Stripe>::AllHeld all(stripes_);

  const uint64_t n2 = observed_n * 2;
  if (n2 > kSmartHtMaxHeadBuckets) return Status::OK();
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n2, &offset));
  auto* nheads =
      reinterpret_cast<SmartBucket*>(pool().At<char>(offset) + sizeof(SmartHtTableHeader));
  pm::Persister& ps = persister();
  std::vector<uint64_t> new_chain;  // blocks of the new structure (freed if we give up)
  auto give_up = [&](const Status& s) {
    for (uint64_t b : new_chain) allocator().Free(b);
    allocator().Free(offset);  // nothing links any of it
    return s;
  };
  // The old structure is only read until the switch. Each key goes into the first free
  // slot of its new chain: the head bucket, then a new bucket pushed behind it.
  Status failed;
  for (uint64_t i = 0; i < observed_n && failed.ok(); ++i) {
    Walk(i, [&](const SmartBucket* b) {
      for (int k = 0; k < kSmartHtSlots; ++k) {
        const uint8_t t = static_cast<uint8_t>(FormOf(b, k));
        if (t == 0) continue;
        SmartBucket* h = &nheads[Reduce(HashOf(static_cast<SlotForm>(t), b->slot[k]), n2)];
        SmartBucket* dst = h;
        if (h->next != 0) dst = BucketAt(h->next);  // the newest chained bucket
        int free = -1;
        for (int j = 0; j < kSmartHtSlots && free < 0; ++j) {
          if (dst->token[j] == 0) free = j;
        }
        if (free < 0) {
          Result<uint64_t> block = allocator().Allocate(sizeof(SmartBucket));
          if (!block.ok()) {
            failed = block.status();
            return false;
          }
          new_chain.push_back(*block);
          SmartBucket* nb = BucketAt(*block);
          ps.Zero(nb, sizeof(SmartBucket));
          ps.Store(&nb->next, h->next);
          ps.Store(&h->next, *block);
          dst = nb;
          free = 0;
        }
        ps.Copy(&dst->slot[free], &b->slot[k], sizeof(KvWords));
        ps.Store(&dst->token[free], t);
      }
      return true;
    });
  }
  if (!failed.ok()) return give_up(failed);
  // One pass of flushes over the new structure, one fence, then the switch.
  ps.Flush(pool().At<char>(offset), TableBytes(n2));
  for (uint64_t b : new_chain) ps.Flush(BucketAt(b), sizeof(SmartBucket));
  PublishRootTable(offset);  // growth's commit point
  // Only now is the old structure durably unreachable.
  std::vector<uint64_t> old_chain;
  for (uint64_t i = 0; i < observed_n; ++i) {
    Walk(i, [&](const SmartBucket* b) {
      if (b != &Heads()[i]) old_chain.push_back(pool().ToOffset(b));
      return true;
    });
  }
  for (uint64_t b : old_chain) allocator().Free(b);
  allocator().Free(table_offset_);
  table_offset_ = offset;
  heads_.store(nheads, std::memory_order_release);
  chain_buckets_.store(new_chain.size(), std::memory_order_relaxed);
  head_count_.store(n2, std::memory_order_release);
  grows_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

// ---- Background filter rebuild ------------------------------------------------------

uint64_t SmartHt::RebuildDue() const {
  const uint64_t expected = filter_expected_.load();
  const uint64_t count = Count();
  // Past the filter's expected keys: twice as large (the false-positive rate is kept).
  if (count > expected) return std::max(expected * 2, count * 2);
  if (rebuild_deletes_ <= 0) return 0;
  uint64_t deletes = 0;
  for (const ReaderSlot& r : readers_) deletes += r.deletes.load(std::memory_order_relaxed);
  const double threshold = std::max(1.0, rebuild_deletes_ * static_cast<double>(expected));
  // Deleted keys since the last rebuild: the same size, without them.
  return static_cast<double>(deletes - deletes_at_rebuild_.load()) >= threshold ? expected : 0;
}

void SmartHt::MaybeStartRebuild() {
  if (stop_.load() || rebuilding_.load(std::memory_order_relaxed)) return;
  const uint64_t expected = RebuildDue();
  if (expected == 0) return;
  if (rebuilding_.exchange(true)) return;  // one rebuild at a time
  std::lock_guard<std::mutex> lock(rebuild_mu_);
  if (stop_.load()) {
    rebuilding_.store(false);
    return;
  }
  if (rebuild_thread_.joinable()) rebuild_thread_.join();  // the previous one has finished
  rebuild_thread_ = std::thread([this, expected] { RebuildWorker(expected); });
}

uint64_t SmartHt::ScanInto(uint64_t first, uint64_t last, BloomFilter* filter) const {
  uint64_t keys = 0;
  for (uint64_t i = first; i < last; ++i) {
    Walk(i, [&](const SmartBucket* b) {
      for (int k = 0; k < kSmartHtSlots; ++k) {
        const SlotForm f = FormOf(b, k);
        if (f == SlotForm::kEmpty) continue;
        filter->AddHash(HashOf(f, b->slot[k]));
        ++keys;
      }
      return true;
    });
  }
  return keys;
}

void SmartHt::RebuildWorker(uint64_t expected_keys) {
  for (;;) {
    const bool published = RebuildFilter(expected_keys);
    rebuilding_.store(false);
    // Triggers that came while this round ran were dropped (one rebuild at a time): look
    // again, so a filter outgrown or aged meanwhile is rebuilt without waiting for the
    // next trigger, which may never come. A round that failed (no memory) is not retried.
    if (!published || stop_.load()) return;
    expected_keys = RebuildDue();
    if (expected_keys == 0 || rebuilding_.exchange(true)) return;
  }
}

bool SmartHt::RebuildFilter(uint64_t expected_keys) {
  uint64_t deletes = 0;
  for (const ReaderSlot& r : readers_) deletes += r.deletes.load(std::memory_order_relaxed);
  std::unique_ptr<BloomFilter> fresh;
  if (!MakeFilter(expected_keys, &fresh).ok()) {  // no memory: keep the old filter
    deletes_at_rebuild_.store(deletes);
    return false;
  }
  BloomFilter* nf = fresh.release();
  // From here on every insert also adds its key to nf (FilterAdd, under its lock).
  building_.store(nf, std::memory_order_seq_cst);
  bool complete = false;
  while (!stop_.load()) {
    const uint64_t n = head_count_.load(std::memory_order_acquire);
    bool restarted = false;
    for (uint64_t first = 0; first < n && !stop_.load(); first += kSmartHtLockArea) {
      Stripe& s = stripes_.Of(first);
      s.mu.lock_shared();
      HeldLock guard(s.mu, LockMode::kShared);
      if (head_count_.load(std::memory_order_acquire) != n) {  // the head table grew
        restarted = true;
        break;
      }
      ScanInto(first, std::min(n, first + kSmartHtLockArea), nf);
    }
    if (!restarted) {
      complete = !stop_.load();
      break;
    }
  }
  BloomFilter* retired = nf;
  if (complete) {
    // Publish; once no reader holds the old pointer, no insert can add only to it.
    retired = filter_.exchange(nf, std::memory_order_seq_cst);
    filter_expected_.store(nf->options().expected_keys);
    deletes_at_rebuild_.store(deletes);
    filter_rebuilds_.fetch_add(1);
  }
  WaitForReaders();
  building_.store(nullptr, std::memory_order_seq_cst);
  WaitForReaders();
  delete retired;
  return complete;
}

void SmartHt::WaitForBackgroundWork() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(rebuild_mu_);
    t = std::move(rebuild_thread_);
  }
  if (t.joinable()) t.join();
}

// ---- Stats and checks ---------------------------------------------------------------

void SmartHt::FillStats(IndexStats* stats) const {
  const uint64_t n = head_count_.load(std::memory_order_acquire);
  const uint64_t chained = chain_buckets_.load(std::memory_order_relaxed);
  stats->count = Count();
  stats->key_slots = (n + chained) * kSmartHtSlots;
  uint64_t filtered = 0, fp = 0, deletes = 0;
  for (const ReaderSlot& r : readers_) {
    filtered += r.filtered.load(std::memory_order_relaxed);
    fp += r.false_positive.load(std::memory_order_relaxed);
    deletes += r.deletes.load(std::memory_order_relaxed);
  }
  uint64_t filter_bytes = 0;
  {
    FilterGuard guard(*this);
    if (const BloomFilter* f = filter_.load()) filter_bytes = f->MemoryBytes();
  }
  stats->dram_bytes = sizeof(*this) + stripes_.size() * sizeof(Stripe) + filter_bytes;
  auto& c = stats->engine_counters;
  c["head_buckets"] = n;
  c["chain_buckets"] = chained;
  c["lock_stripes"] = stripes_.size();
  c["filter_bytes"] = filter_bytes;
  c["filter_expected_keys"] = filter_expected_.load();
  c["filter_negatives"] = filtered;  // answered by the filter alone (no PM read)
  c["filter_false_positives"] = fp;  // the filter said maybe, the PDL said no
  c["filter_rebuilds"] = filter_rebuilds_.load();
  c["filter_reloaded"] = filter_origin_ == "reloaded" ? 1 : 0;
  c["filter_load_us"] = static_cast<uint64_t>(filter_load_ms_ * 1000);
  c["deletes_since_rebuild"] = deletes - deletes_at_rebuild_.load();
  c["grows"] = grows_.load();
  c["undo_txs"] = undo_txs();
}

Status SmartHt::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> grow_lock(grow_mu_);
  const uint64_t n = head_count_.load();
  // The metadata as Recover validated it (a damaged pool may be checked right after open).
  uint64_t off = 0, table_n = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(
      ValidateRoot(kRootLayout, sizeof(SmartHtTableHeader), &off, &stored_count));
  RootWords words;
  PMHASH_RETURN_IF_ERROR(ReadRootWords(&words));
  PMHASH_RETURN_IF_ERROR(ValidateTable(off, &table_n));
  if (off != table_offset_ || table_n != n) {
    return Status::Corruption("smartht: the root names the head table at pool offset " +
                              std::to_string(off) + ", not the live one at " +
                              std::to_string(table_offset_));
  }
  uint64_t occupied = 0;
  std::unordered_set<std::string> keys;
  std::unordered_set<uint64_t> chained;  // each chained bucket once: bounds any cycle
  FilterGuard fguard(*this);
  const BloomFilter* f = filter_.load();
  const auto at = [&](const SmartBucket* b) {
    return "the bucket at pool offset " + std::to_string(pool().ToOffset(b)) +
           " (chain of head bucket ";
  };
  for (uint64_t i = 0; i < n; ++i) {
    for (const SmartBucket* b = &Heads()[i]; b != nullptr; b = NextOf(b)) {
      if (b->next != 0 && NextOf(b) == nullptr) {
        return Status::Corruption("smartht: " + at(b) + std::to_string(i) +
                                  ") links " + std::to_string(b->next) +
                                  ", which is not a bucket of the heap");
      }
      if (b != &Heads()[i] && !chained.insert(pool().ToOffset(b)).second) {
        return Status::Corruption("smartht: " + at(b) + std::to_string(i) +
                                  ") is reached twice (a cycle, or two chains share it)");
      }
      for (int k = 0; k < kSmartHtSlots; ++k) {
        const uint8_t t = b->token[k];
        if (t == 0) continue;
        const auto form = static_cast<SlotForm>(t);
        const std::string slot = "slot " + std::to_string(k) + " of " + at(b) +
                                 std::to_string(i) + ")";
        if ((t != kInline && t != kRecord) || !codec().Plausible(form, b->slot[k])) {
          return Status::Corruption("smartht: " + slot + " with token " + std::to_string(t) +
                                    " is malformed");
        }
        const std::string key(codec().Key(form, b->slot[k]));
        const uint64_t hash = KeyHash(key);
        if (form == SlotForm::kRecord && b->slot[k].word1 != hash) {
          return Status::Corruption("smartht: " + slot + " has a wrong hash word");
        }
        if (Reduce(hash, n) != i) {
          return Status::Corruption("smartht: " + slot + " holds a key of head bucket " +
                                    std::to_string(Reduce(hash, n)));
        }
        if (!f->MayContainHash(hash)) {
          return Status::Corruption("smartht: the key in " + slot + " is missing from the filter");
        }
        if (!keys.insert(key).second) {
          return Status::Corruption("smartht: a key is stored twice (again in " + slot + ")");
        }
        ++occupied;
      }
    }
  }
  if (occupied != Count()) {
    return Status::Corruption("smartht: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(occupied) + " slots are occupied");
  }
  if (chained.size() != chain_buckets_.load()) {
    return Status::Corruption("smartht: " + std::to_string(chained.size()) +
                              " chained buckets, but the counter says " +
                              std::to_string(chain_buckets_.load()));
  }
  return Status::OK();
}

void SmartHt::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  mark(table_offset_, sizeof(SmartHtTableHeader), pm::Region::kEngineMetadata, true);
  const uint64_t n = head_count_.load();
  for (uint64_t i = 0; i < n; ++i) {
    Walk(i, [&](const SmartBucket* b) {
      // Tokens, next and slots; the 5 padding bytes are never read.
      const uint64_t off = pool().ToOffset(b);
      mark(off, kSmartHtSlots, pm::Region::kSlots, false);
      mark(off + offsetof(SmartBucket, next), sizeof(SmartBucket) - offsetof(SmartBucket, next),
           pm::Region::kSlots, false);
      for (int k = 0; k < kSmartHtSlots; ++k) {
        codec().DescribeRecord(FormOf(b, k), b->slot[k], mark);
      }
      return true;
    });
  }
  // The saved filter is read (and checked) only by a clean open that reloads it.
  RootWords words;
  if (ReadRootWords(&words).ok() && words.filter != 0 && words.filter_bytes != 0) {
    mark(words.filter, words.filter_bytes, pm::Region::kEngineMetadata,
         filter_origin_ == "reloaded");
  }
}

void RegisterEngines_smartht(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {OptionSpec::Uint("head_buckets", std::nullopt, kSmartHtMinHeadBuckets,
                                   kSmartHtMaxHeadBuckets,
                                   "head buckets of the first table, a power of two (auto: "
                                   "initial_capacity / 3, else the paper's 2^24 capped at a "
                                   "quarter of the pool)"),
                  OptionSpec::Uint("expected_keys", std::nullopt, 1, uint64_t{1} << 40,
                                   "keys the DRAM filter is sized for (auto: "
                                   "initial_capacity, else 3 per head bucket; at least "
                                   "1024); rebuilt twice as large when outgrown"),
                  OptionSpec::Double("fp_rate", 1e-4, 1e-9, 0.5,
                                     "the filter's false-positive rate at its expected keys"),
                  OptionSpec::Uint("bloom_hashes", 3, 1, BloomFilter::kMaxProbes,
                                   "probe bits per key in the filter (the paper's 3)"),
                  OptionSpec::Double("rebuild_deletes", 0.5, 0, 1e6,
                                     "rebuild the filter in the background after this many "
                                     "deletes per expected key (0: never for deletes)"),
                  OptionSpec::Double("max_chain", 1.0, 0.01, 1e6,
                                     "chained buckets per head bucket past which the head "
                                     "table doubles"),
                  OptionSpec::Bool("bucket_first", false,
                                   "searches read the key's head bucket before the DRAM "
                                   "filter, and ask the filter only if the key is not "
                                   "there (the paper: the filter first)"),
                  OptionSpec::Uint("recovery_threads", 1, 1, 256,
                                   "threads scanning the table to rebuild the filter after a "
                                   "crash")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "the head table doubles past max_chain",
                       .background_work = true,
                       .pipelined_multiget = true};
  // The fewest head buckets, grown once a few buckets are chained; the DRAM filter
  // (at least 1,024 keys, so it never outgrows itself here) rebuilt after 51 deletes.
  // Threads get 4 lock areas (256 head buckets are one).
  info.test = {.crash_options = {{"head_buckets", "256"},
                                 {"expected_keys", "16"},
                                 {"max_chain", "0.01"},
                                 {"rebuild_deletes", "0.05"}},
               .thread_crash_options = {{"head_buckets", "1024"}},
               .growth_counters = {"grows", "filter_rebuilds"}};
  info.description = {"smartht",
                      "DRAM Bloom filter over a PM chained hash; 64-B buckets (3 tokens, 3 "
                      "slots, next); 256-bucket lock stripes; head insertion; lazy deletion",
                      "003 SmartHT", /*crash_consistent=*/true};
  registry.Add<SmartHt>(std::move(info));
}

}  // namespace pmhash::engines
