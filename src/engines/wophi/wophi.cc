// WOPHI (paper 000). Layout, invariants, persist order and locking: wophi.h.
#include "engines/wophi/wophi.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr uint64_t kBucketBytes = sizeof(WophiBucket);
constexpr uint64_t kHeaderBytes = sizeof(WophiTableHeader);

uint64_t TableBytes(uint64_t buckets) { return kHeaderBytes + buckets * kBucketBytes; }
uint64_t PabBytes(uint64_t buckets) { return sizeof(WophiPabHeader) + buckets * kBucketBytes; }

WophiBucket* PabBucket(char* block, uint64_t i) {
  return reinterpret_cast<WophiBucket*>(block + sizeof(WophiPabHeader) + i * kBucketBytes);
}

// The first 16 bytes of a bucket (tokens, taken, next), written in one go when a PAB
// bucket is taken into a chain.
struct BucketHead {
  uint8_t token[kWophiAssoc];
  uint8_t taken;
  uint8_t pad[3];
  uint64_t next;
};
static_assert(sizeof(BucketHead) == offsetof(WophiBucket, slot) &&
                  offsetof(BucketHead, token) == offsetof(WophiBucket, token) &&
                  offsetof(BucketHead, taken) == offsetof(WophiBucket, taken) &&
                  offsetof(BucketHead, next) == offsetof(WophiBucket, next),
              "BucketHead mirrors the bucket's first 16 bytes");

constexpr RootLayout kRootLayout{kWophiRootMagic, kWophiVersion, sizeof(EngineRoot), 0};
constexpr size_t kTableCheckedBytes = offsetof(WophiTableHeader, check);
constexpr size_t kPabCheckedBytes = offsetof(WophiPabHeader, check);

// Main buckets a Scan page reads per run.
constexpr uint64_t kScanRunBuckets = 64;

bool KnownForm(uint8_t t) {
  return t == static_cast<uint8_t>(SlotForm::kInline) ||
         t == static_cast<uint8_t>(SlotForm::kRecord);
}

}  // namespace

Wophi::Wophi() : counts_(new CountShard[kWophiCountShards]) {
  stripes_.Reset(kWophiStripes, /*area_shift=*/0);
}
Wophi::~Wophi() { StopBackgroundWork(); }

// ---- Options and sizes --------------------------------------------------------------

Status Wophi::Configure(EngineOptions& options, const Options& /*index_options*/) {
  SetQuickGet(true);  // FindOptimistic's first try, from Get
  initial_buckets_ = options.Uint("buckets");
  pab_block_opt_ = options.Uint("pab_buckets");
  pab_low_opt_ = options.Uint("pab_low");
  max_load_factor_ = options.Double("max_load_factor");
  return Status::OK();
}

uint64_t Wophi::BucketsFor(uint64_t keys) const {
  // `buckets` wins; else initial_capacity keys fill the main buckets' slots exactly.
  if (initial_buckets_ != 0) return initial_buckets_;
  if (keys == 0) return kWophiDefaultBuckets;
  return std::max(kWophiMinBuckets, (keys + kWophiAssoc - 1) / kWophiAssoc);
}

uint64_t Wophi::PabBlockSize(uint64_t main_buckets) const {
  if (pab_block_opt_ != 0) return pab_block_opt_;
  return std::clamp<uint64_t>(main_buckets / 8, 8, 65536);
}

uint64_t Wophi::PabLowWater(uint64_t main_buckets) const {
  if (pab_low_opt_ != 0) return pab_low_opt_;
  return std::max<uint64_t>(1, PabBlockSize(main_buckets) / 4);
}

// ---- Blocks -------------------------------------------------------------------------

Status Wophi::NewTable(uint64_t buckets, uint64_t* offset) {
  // Unreachable until the root links it: flushed by the caller with the rest.
  PMHASH_RETURN_IF_ERROR(NewTableBlock(TableBytes(buckets),
                                       std::to_string(buckets) + " main buckets",
                                       kWophiTableMagic, buckets, offset));
  pm::Persister& p = persister();
  auto* h = pool().At<WophiTableHeader>(*offset);
  p.Store(&h->check, MetadataCheck(h, kTableCheckedBytes));
  p.Store(&h->pab_head, SealFor(&h->pab_head, 0));
  return Status::OK();
}

Status Wophi::NewPabBlock(uint64_t buckets, uint64_t next, uint64_t* offset, uint64_t* got) {
  // The pool may be short of a whole block: halve until one fits, so that an insert only
  // fails when not even one more bucket fits.
  Status last;
  for (uint64_t n = buckets; n >= 1; n /= 2) {
    Result<uint64_t> block = allocator().Allocate(PabBytes(n));
    if (!block.ok()) {
      last = block.status();
      continue;
    }
    // With the automatic size, use the whole block the allocator gave (size classes and
    // chunk runs round up); an explicit pab_buckets is honoured exactly.
    if (pab_block_opt_ == 0) {
      n = std::max(n, (allocator().UsableSize(*block) - sizeof(WophiPabHeader)) / kBucketBytes);
    }
    pm::Persister& p = persister();
    char* b = pool().At<char>(*block);
    // Only line 0 of each bucket needs a known value (taken = 0: free; tokens 0). A take
    // rewrites tokens, taken, next and slot 0, and slot 3 (line 1) means nothing while
    // its token is 0, so line 1 is left as the allocator gave it: half the refill flushes.
    auto* h = reinterpret_cast<WophiPabHeader*>(b);
    p.Zero(h, sizeof(*h));
    p.Store(&h->next_block, next);
    p.Store(&h->buckets, n);
    p.Store(&h->magic, kWophiPabMagic);
    p.Store(&h->check, MetadataCheck(h, kPabCheckedBytes));
    p.Flush(h, sizeof(*h));
    for (uint64_t i = 0; i < n; ++i) {
      WophiBucket* bucket = PabBucket(b, i);
      p.Zero(bucket, pm::kCacheLine);
      p.Flush(bucket, pm::kCacheLine);
    }
    *offset = *block;
    *got = n;
    return Status::OK();
  }
  return Status::PoolFull("wophi: no room for another pre-allocated bucket: " +
                          std::string(last.message()));
}

Status Wophi::RefillPab(bool locked) {
  std::unique_lock<std::mutex> lock(refill_mu_, std::defer_lock);
  if (!locked) lock.lock();
  const uint64_t n = view_.buckets;  // stable: the table changes only under refill_mu_
  {
    std::lock_guard<std::mutex> g(pab_mu_);
    // Another thread refilled meanwhile.
    if (pab_free_list_.size() > PabLowWater(n)) return Status::OK();
  }
  uint64_t off = 0, got = 0;
  uint64_t head = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&view_.header->pab_head, "the table's PAB list head", &head));
  PMHASH_RETURN_IF_ERROR(NewPabBlock(PabBlockSize(n), head, &off, &got));
  // The block (flushed by NewPabBlock) is durable before it becomes reachable.
  persister().Publish(&view_.header->pab_head, SealFor(&view_.header->pab_head, off));
  {
    std::lock_guard<std::mutex> g(pab_mu_);
    // The list is a stack (back = taken next): the buckets already listed are taken first,
    // then the new block's from its lowest offset up.
    std::vector<uint64_t> fresh;
    fresh.reserve(got + pab_free_list_.size());
    for (uint64_t i = got; i > 0; --i) {
      fresh.push_back(off + sizeof(WophiPabHeader) + (i - 1) * kBucketBytes);
    }
    fresh.insert(fresh.end(), pab_free_list_.begin(), pab_free_list_.end());
    pab_free_list_.swap(fresh);
    pab_total_ += got;
  }
  pab_refills_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status Wophi::TakePabBucket(uint64_t* offset) {
  for (;;) {
    {
      std::lock_guard<std::mutex> g(pab_mu_);
      if (!pab_free_list_.empty()) {
        *offset = pab_free_list_.back();
        pab_free_list_.pop_back();
        return Status::OK();
      }
    }
    // The pool ran dry before a refill caught up (or the pool was short): refill on the
    // critical path rather than fail. The caller holds a stripe: stripes -> refill_mu_.
    pab_sync_refills_.fetch_add(1, std::memory_order_relaxed);
    PMHASH_RETURN_IF_ERROR(RefillPab(/*locked=*/false));
  }
}

void Wophi::RequestRefill() {
  {
    std::lock_guard<std::mutex> g(pab_mu_);
    if (pab_free_list_.size() > PabLowWater(main_buckets_.load(std::memory_order_acquire))) return;
  }
  // The PAB is at its low-water mark: the refill thread restocks it while inserts go on
  // taking the buckets left, so allocation stays off every insert's critical path.
  std::lock_guard<std::mutex> g(refill_signal_mu_);
  if (stop_refill_) return;
  if (!refill_thread_.joinable()) refill_thread_ = std::thread([this] { RefillWorker(); });
  refill_requested_ = true;
  refill_cv_.notify_all();
}

void Wophi::RefillWorker() {
  std::unique_lock<std::mutex> l(refill_signal_mu_);
  for (;;) {
    refill_cv_.wait(l, [this] { return stop_refill_ || refill_requested_; });
    if (stop_refill_) return;
    refill_requested_ = false;
    refill_busy_ = true;
    l.unlock();
    // A failure (pool short) is no insert's: the next take refills synchronously and
    // reports it if the pool really is full.
    (void)RefillPab(/*locked=*/false);
    l.lock();
    refill_busy_ = false;
    refill_cv_.notify_all();
  }
}

void Wophi::WaitForBackgroundWork() {
  std::unique_lock<std::mutex> l(refill_signal_mu_);
  refill_cv_.wait(l, [this] { return stop_refill_ || (!refill_requested_ && !refill_busy_); });
}

void Wophi::StopBackgroundWork() {
  {
    std::lock_guard<std::mutex> g(refill_signal_mu_);
    stop_refill_ = true;
    refill_cv_.notify_all();
  }
  if (refill_thread_.joinable()) refill_thread_.join();
}

// ---- Creation, validation, recovery -------------------------------------------------

Status Wophi::Create() {
  const uint64_t n = BucketsFor(initial_capacity());
  uint64_t table = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n, &table));
  uint64_t pab = 0, got = 0;
  Status s = NewPabBlock(PabBlockSize(n), 0, &pab, &got);
  if (!s.ok()) {
    allocator().Free(table);
    return s;
  }
  auto* h = pool().At<WophiTableHeader>(table);
  persister().Store(&h->pab_head, SealFor(&h->pab_head, pab));
  CreateRoot(kRootLayout, table, TableBytes(n));
  max_chain_ = pool().size() / kBucketBytes;
  view_ = View(pool().At<char>(table), table, n);
  mb_.store(view_.mb, std::memory_order_release);
  main_buckets_.store(n, std::memory_order_release);
  base_count_ = 0;
  pab_free_list_.clear();
  for (uint64_t i = got; i > 0; --i) {
    pab_free_list_.push_back(pab + sizeof(WophiPabHeader) + (i - 1) * kBucketBytes);
  }
  pab_total_ = got;
  expand_bucket_num_.store(0);
  return Status::OK();
}

Status Wophi::ValidateTable(uint64_t off, uint64_t* buckets) const {
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(off, kWophiTableMagic,
                                            pool().size() / kBucketBytes, TableBytes, buckets));
  const auto* h = pool().At<const WophiTableHeader>(off);
  return VerifyMetadata(h, kTableCheckedBytes, h->check, "the table header");
}

Status Wophi::ReadPabList(const WophiTableHeader* header, std::vector<PabBlock>* blocks) const {
  blocks->clear();
  const uint64_t max_blocks = pool().size() / PabBytes(1);  // bounds a cycle
  uint64_t head = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&header->pab_head, "the table's PAB list head", &head));
  for (uint64_t off = head; off != 0;) {
    if (off % pm::kCacheLine != 0 || !pool().Contains(off, sizeof(WophiPabHeader))) {
      return Status::Corruption("wophi: PAB block offset " + std::to_string(off) +
                                " is outside the pool");
    }
    const auto* h = pool().At<const WophiPabHeader>(off);
    if (h->magic != kWophiPabMagic || h->buckets == 0 ||
        h->buckets > pool().size() / kBucketBytes || !pool().Contains(off, PabBytes(h->buckets))) {
      return Status::Corruption("wophi: PAB block at offset " + std::to_string(off) +
                                " is damaged");
    }
    PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kPabCheckedBytes, h->check, "a PAB block header"));
    if (blocks->size() >= max_blocks) {
      return Status::Corruption("wophi: the PAB block list has a cycle");
    }
    blocks->push_back({off, h->buckets});
    off = h->next_block;
  }
  std::sort(blocks->begin(), blocks->end(),
            [](const PabBlock& a, const PabBlock& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < blocks->size(); ++i) {
    const PabBlock& prev = (*blocks)[i - 1];
    if (prev.offset + PabBytes(prev.buckets) > (*blocks)[i].offset) {
      return Status::Corruption("wophi: PAB blocks at pool offsets " +
                                std::to_string(prev.offset) + " and " +
                                std::to_string((*blocks)[i].offset) + " overlap (damaged list)");
    }
  }
  return Status::OK();
}

Status Wophi::PabIndex(const std::vector<PabBlock>& blocks, const std::vector<uint64_t>& first,
                       uint64_t offset, uint64_t* index) const {
  auto it = std::upper_bound(blocks.begin(), blocks.end(), offset,
                             [](uint64_t o, const PabBlock& b) { return o < b.offset; });
  if (it != blocks.begin()) {
    --it;
    const uint64_t start = it->offset + sizeof(WophiPabHeader);
    if (offset >= start && (offset - start) % kBucketBytes == 0 &&
        (offset - start) / kBucketBytes < it->buckets) {
      *index = first[it - blocks.begin()] + (offset - start) / kBucketBytes;
      return Status::OK();
    }
  }
  return Status::Corruption("wophi: a chain links offset " + std::to_string(offset) +
                            ", which is not a pre-allocated bucket of the table");
}

Status Wophi::WalkTable(uint64_t table, uint64_t buckets, bool validate, Walk* walk,
                        const std::function<Status(uint64_t, SlotForm, const KvWords&)>& on_slot)
    const {
  auto* h = pool().At<WophiTableHeader>(table);
  PMHASH_RETURN_IF_ERROR(ReadPabList(h, &walk->blocks));
  walk->first.clear();
  uint64_t total = 0;
  for (const PabBlock& b : walk->blocks) {
    walk->first.push_back(total);
    total += b.buckets;
  }
  walk->linked.assign(total, false);
  walk->chain_buckets = 0;
  walk->keys = 0;
  auto* mb = reinterpret_cast<WophiBucket*>(pool().At<char>(table) + kHeaderBytes);
  for (uint64_t k = 0; k < buckets; ++k) {
    const WophiBucket* b = &mb[k];
    for (;;) {
      for (size_t i = 0; i < kWophiAssoc; ++i) {
        const uint8_t t = b->token[i];
        if (t == 0) continue;
        if (validate && !KnownForm(t)) {
          return Status::Corruption("wophi: token " + std::to_string(i) + " of the " +
                                    Where(b) + " in main bucket " + std::to_string(k) +
                                    "'s chain is " + std::to_string(t) + " (damaged pool)");
        }
        ++walk->keys;
        PMHASH_RETURN_IF_ERROR(on_slot(k, static_cast<SlotForm>(t), b->slot[i]));
      }
      const uint64_t next = b->next;
      if (next == 0) break;
      uint64_t idx = 0;
      PMHASH_RETURN_IF_ERROR(PabIndex(walk->blocks, walk->first, next, &idx));
      if (walk->linked[idx]) {
        return Status::Corruption("wophi: the pre-allocated bucket at pool offset " +
                                  std::to_string(next) + " is linked twice (again from the " +
                                  Where(b) + "; damaged pool)");
      }
      walk->linked[idx] = true;
      ++walk->chain_buckets;
      b = pool().At<const WophiBucket>(next);
    }
  }
  return Status::OK();
}

Status Wophi::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t table = 0, n = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &table, &count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(table, &n));
  visit(table);
  Walk walk;
  PMHASH_RETURN_IF_ERROR(WalkTable(table, n, /*validate=*/true, &walk,
                                   [&](uint64_t, SlotForm form, const KvWords& w) {
                                     // A wild offset is left for Recover to report.
                                     if (form == SlotForm::kRecord && pool().Contains(w.word0, 8)) {
                                       SlotCodec::VisitBlocks(form, w, visit);
                                     }
                                     return Status::OK();
                                   }));
  for (const PabBlock& b : walk.blocks) visit(b.offset);
  return Status::OK();
}

uint64_t Wophi::HashOf(SlotForm form, const KvWords& words) const {
  if (form == SlotForm::kRecord) return words.word1;
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&words.word0), 8));
}

Status Wophi::Recover(bool clean) {
  uint64_t table = 0, n = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, kHeaderBytes, &table, &count));
  max_chain_ = pool().size() / kBucketBytes;
  PMHASH_RETURN_IF_ERROR(ValidateTable(table, &n));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(table, TableBytes(n)));
  view_ = View(pool().At<char>(table), table, n);
  mb_.store(view_.mb, std::memory_order_release);
  main_buckets_.store(n, std::memory_order_release);
  PMHASH_RETURN_IF_ERROR(RebuildVolatile(clean, count));
  // Leave the PAB above its low-water mark, as a running index would.
  std::lock_guard<std::mutex> lock(refill_mu_);
  (void)RefillPab(/*locked=*/true);  // a full pool is reported by the insert that needs it
  return Status::OK();
}

Status Wophi::RebuildVolatile(bool clean, uint64_t stored_count) {
  pm::Persister& p = persister();
  std::vector<PabBlock> blocks;
  std::vector<bool> linked;
  uint64_t count = 0, chain_buckets = 0;
  if (clean) {
    // After a clean Close a PAB bucket is in a chain iff its taken byte is 1 (invariant 3):
    // only the PAB is read, not the chains.
    PMHASH_RETURN_IF_ERROR(ReadPabList(view_.header, &blocks));
    for (const PabBlock& b : blocks) {
      for (uint64_t i = 0; i < b.buckets; ++i) {
        const WophiBucket* bucket = PabBucket(pool().At<char>(b.offset), i);
        const uint8_t taken = bucket->taken;
        if (taken > 1) {
          return Status::Corruption("wophi: the taken byte of the pre-allocated " +
                                    Where(bucket) + " is " + std::to_string(taken) +
                                    " (damaged pool)");
        }
        linked.push_back(taken == 1);
        chain_buckets += taken;
      }
    }
    count = stored_count;
    if (count > kWophiAssoc * (view_.buckets + linked.size())) {
      return Status::Corruption("wophi: root count " + std::to_string(count) +
                                " exceeds the table's slots");
    }
  } else {
    // After a crash: walk every chain (validating it), count, and find the linked buckets.
    Walk walk;
    const uint64_t n = view_.buckets;
    PMHASH_RETURN_IF_ERROR(WalkTable(
        view_.offset, n, /*validate=*/true, &walk,
        [&](uint64_t home, SlotForm form, const KvWords& w) {
          if (!codec().Plausible(form, w)) {
            return Status::Corruption("wophi: the slot at pool offset " +
                                      std::to_string(pool().ToOffset(&w)) + " in main bucket " +
                                      std::to_string(home) +
                                      "'s chain points to no valid record (damaged pool)");
          }
          if (Reduce(HashOf(form, w), n) != home) {
            return Status::Corruption("wophi: main bucket " + std::to_string(home) +
                                      "'s chain holds a key of another bucket in the slot at "
                                      "pool offset " + std::to_string(pool().ToOffset(&w)) +
                                      " (damaged pool)");
          }
          return Status::OK();
        }));
    blocks = std::move(walk.blocks);
    linked = std::move(walk.linked);
    count = walk.keys;
    chain_buckets = walk.chain_buckets;
    // Repair the taken bytes: a bucket taken but never linked (crash between Alg. 1 lines
    // 31 and 32) is free again. Idempotent, so a crash here is harmless.
    bool flushed = false;
    uint64_t unlinked = 0;
    size_t idx = 0;
    for (const PabBlock& b : blocks) {
      for (uint64_t i = 0; i < b.buckets; ++i, ++idx) {
        WophiBucket* bucket = PabBucket(pool().At<char>(b.offset), i);
        const uint8_t want = linked[idx] ? 1 : 0;
        if (bucket->taken != want) {
          if (!linked[idx]) ++unlinked;
          p.Store(&bucket->taken, want);
          p.Flush(&bucket->taken, 1);
          flushed = true;
        }
      }
    }
    if (flushed) p.Fence();
    recovered_unlinked_ = unlinked;
    PersistRootCount(count);
  }
  // The free PAB list: unlinked buckets, lowest offset taken first.
  pab_free_list_.clear();
  pab_total_ = linked.size();
  size_t idx = linked.size();
  for (size_t bi = blocks.size(); bi > 0; --bi) {
    const PabBlock& b = blocks[bi - 1];
    for (uint64_t i = b.buckets; i > 0; --i) {
      --idx;
      if (!linked[idx]) {
        pab_free_list_.push_back(b.offset + sizeof(WophiPabHeader) + (i - 1) * kBucketBytes);
      }
    }
  }
  base_count_ = count;
  for (size_t i = 0; i < kWophiCountShards; ++i) counts_[i].delta.store(0);
  expand_bucket_num_.store(chain_buckets);
  return Status::OK();
}


// ---- Operations ---------------------------------------------------------------------

Wophi::Probe Wophi::Find(std::string_view key, uint64_t hash, uint64_t home) const {
  Probe p;
  // Alg. 1 / Alg. 2 lines 2-5: hash, index, tb = &buckets[index].
  WophiBucket* b = &view_.mb[home];
  // Alg. 1 / Alg. 2 line 6: while tb != NULL.
  for (uint64_t depth = 1;; ++depth) {
    persister().NoteRead(b, pm::kCacheLine);  // line 0: tokens, next, slots 0-2
    for (size_t i = 0; i < kWophiAssoc; ++i) {
      const uint8_t t = b->token[i];
      if (t == 0) {
        if (p.free_bucket == nullptr) {  // Alg. 1 line 8: token == 0
          p.free_bucket = b;
          p.free_index = i;
        }
        continue;
      }
      // Alg. 2 line 8: only slots whose token is set are compared.
      if (i == 3) persister().NoteRead(&b->slot[i], sizeof(KvWords));  // slot 3: line 1
      if (codec().KeyEquals(static_cast<SlotForm>(t), b->slot[i], key, hash)) {
        p.bucket = b;
        p.index = i;
        return p;
      }
    }
    p.tail = b;
    // Alg. 1 lines 21-25 / Alg. 2 line 16: tb = tb->next.
    WophiBucket* next = NextBucket(b);
    if (next == nullptr || depth >= max_chain_) return p;
    b = next;
  }
}

WophiBucket* Wophi::NextBucket(const WophiBucket* b) const {
  const uint64_t next = b->next;
  if (next == 0 || next % pm::kCacheLine != 0 || !pool().Contains(next, kBucketBytes)) {
    return nullptr;
  }
  return pool().At<WophiBucket>(next);
}

std::string Wophi::Where(const void* p) const {
  return "bucket at pool offset " + std::to_string(pool().ToOffset(p));
}

// Inlined into DoGet and GetFull (issue 29: no call on the search path).
[[gnu::always_inline]] inline Optimistic Wophi::FindOptimistic(uint64_t hash,
                                                              OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated below instead
  const uint64_t n = main_buckets_.load(std::memory_order_acquire);
  const uint64_t home = Reduce(hash, n);
  const WophiBucket* b = mb_.load(std::memory_order_acquire) + home;
  const VersionedRwLock& mu = stripes_.Of(home).mu;
  if (!read->Begin(mu)) return Optimistic::kRetry;
  // Find's walk, every word an acquire load (VersionedRwLock's contract): a writer may be
  // half-way, so a next pointer is followed only to a bucket inside the pool, and the
  // walk is bounded (a garbage pointer could close a cycle). Slots 0-2 (line 0) are
  // matched together; slot 3 (line 1) only when its token is set.
  Optimistic answer = Optimistic::kAbsent;
  for (uint64_t depth = 0; depth < max_chain_; ++depth) {
    read->Note(b, pm::kCacheLine);
    const uint32_t tokens = LoadForms(b->token);
    answer = MatchSlots<3>(tokens & 0xffffff, b->slot, hash, read);
    if (answer != Optimistic::kAbsent) break;
    if ((tokens >> 24) != 0) {
      read->Note(&b->slot[3], sizeof(KvWords));
      answer = MatchSlots<1>(tokens >> 24, &b->slot[3], hash, read);
      if (answer != Optimistic::kAbsent) break;
    }
    const uint64_t next = __atomic_load_n(&b->next, __ATOMIC_ACQUIRE);
    if (next == 0 || next % pm::kCacheLine != 0 || !pool().Contains(next, kBucketBytes)) break;
    b = pool().At<const WophiBucket>(next);
  }
  if (!read->Valid(mu) || main_buckets_.load(std::memory_order_acquire) != n) {
    return Optimistic::kRetry;
  }
  return answer;
}

void Wophi::Prefetch(uint64_t hash) const {
  // With no lock, as FindOptimistic reads them: mb_ is stored before main_buckets_, so a
  // stale pair points into the old or the new array, either a harmless prefetch.
  const uint64_t n = main_buckets_.load(std::memory_order_acquire);
  persister().Prefetch(mb_.load(std::memory_order_acquire) + Reduce(hash, n));
}

QuickAnswer Wophi::QuickGet(uint64_t hash, uint64_t key_word) {
  return QuickTry(persister(), key_word,
                  [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
                    return FindOptimistic(hash, read);
                  });
}

Status Wophi::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  // Alg. 2's walk with no lock first (not in the paper): no locked instruction, so
  // consecutive searches overlap their PM misses. Its first try, when nothing is counted,
  // has no call on its path (FirstTry); anything else takes GetFull.
  return OptimisticGet(
      persister(), reads_unnoted(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetFull(key, hash, value); });
}

// A writer in the area makes the search retry; after a few tries, or for a record, the
// shared lock answers. Out of line (DoGet's frame).
__attribute__((noinline)) Status Wophi::GetFull(std::string_view key, uint64_t hash,
                                                std::string* value) {
  return OptimisticGetFull(
      persister(), key, value,
      [this, hash](OptimisticRead* read) __attribute__((always_inline)) {
        return FindOptimistic(hash, read);
      },
      [&] { return GetLocked(key, hash, value); });
}

// Out of line: its locks and probe would otherwise give DoGet a large frame.
__attribute__((noinline)) Status Wophi::GetLocked(std::string_view key, uint64_t hash,
                                                  std::string* value) {
  uint64_t home = 0, n = 0;
  Stripe& s = LockHome(hash, LockMode::kShared, &home, &n);
  HeldLock guard(s.mu, LockMode::kShared);
  const Probe p = Find(key, hash, home);
  if (p.bucket == nullptr) return Status::NotFound();
  AssignValue(value, codec().Value(static_cast<SlotForm>(p.bucket->token[p.index]),
                                   p.bucket->slot[p.index]));
  return Status::OK();
}

Status Wophi::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                      WriteMode mode) {
  bool took_pab = false, grow = false;
  uint64_t n = 0;
  {
    uint64_t home = 0;
    Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &n);
    HeldLock guard(s.mu, LockMode::kExclusive);
    const Probe p = Find(key, hash, home);
    if (p.bucket != nullptr) {
      if (mode == WriteMode::kInsert) return Status::AlreadyExists();
      return UpdateAt(p, key, value, hash);
    }
    if (mode == WriteMode::kUpdate) return Status::NotFound();
    took_pab = p.free_bucket == nullptr;
    PMHASH_RETURN_IF_ERROR(InsertAt(p, key, value, hash, s, &grow));
  }
  // After the commit, with no stripe held: keep the PAB stocked, grow if due.
  if (took_pab) RequestRefill();
  if (grow) (void)Grow(n);  // the insert is done; a resize that cannot happen now waits
  return Status::OK();
}

Status Wophi::InsertAt(const Probe& p, std::string_view key, std::string_view value,
                       uint64_t hash, Stripe& stripe, bool* grow) {
  SlotForm form = SlotForm::kEmpty;
  KvWords words;
  // A record (if any) is written and flushed here; the fence below orders it too.
  PMHASH_RETURN_IF_ERROR(codec().Encode(key, value, hash, &form, &words));
  pm::Persister& ps = persister();
  if (p.free_bucket != nullptr) {
    WophiBucket* tb = p.free_bucket;
    const size_t i = p.free_index;
    // Counted first (nothing fails from here): a locked add after a flush waits for its
    // write-back, and one after the commit's fence holds back the next operation's misses.
    ShardOf(stripe).delta.fetch_add(1, std::memory_order_relaxed);
    // Alg. 1 lines 10-11: memcpy key and value (as two word stores: lock-free searches
    // read them with atomic loads); 12-13: pflush.
    ps.Store(&tb->slot[i].word1, words.word1);
    ps.Store(&tb->slot[i].word0, words.word0);
    ps.Flush(&tb->slot[i], sizeof(words));
    // Alg. 1 lines 14-17: fence; token = 1 (its form), pflush, fence: committed.
    ps.Publish(&tb->token[i], static_cast<uint8_t>(form));
    return Status::OK();
  }
  // Alg. 1 lines 27-30: no free slot in the chain; tmp comes from the PAB.
  uint64_t tmp_off = 0;
  if (Status s = TakePabBucket(&tmp_off); !s.ok()) {
    codec().Release(form, words);  // never linked
    return s;
  }
  auto* tmp = pool().At<WophiBucket>(tmp_off);
  // Alg. 1 line 31: the first slot of tmp and its token, written and persisted while tmp
  // is unreachable (one line: header and slot 0), so one flush and fence.
  BucketHead head{};
  head.token[0] = static_cast<uint8_t>(form);
  head.taken = 1;
  head.next = 0;
  ps.Copy(tmp, &head, sizeof(head));
  ps.Copy(&tmp->slot[0], &words, sizeof(words));
  ps.Flush(tmp, pm::kCacheLine);
  // Alg. 1 lines 31-32: fence, then link tmp to the chain with one 8-byte store,
  // persisted: committed.
  ps.Publish(&p.tail->next, tmp_off);
  // Alg. 1 line 33: expand_bucket_num += 1 (DRAM; recovery recounts chain buckets).
  expand_bucket_num_.fetch_add(1, std::memory_order_relaxed);
  ShardOf(stripe).delta.fetch_add(1, std::memory_order_relaxed);
  // A chain grew: check the load factor of the main buckets (not checked on every insert,
  // to keep a shared counter off the fast path).
  if (resize_enabled()) {
    const uint64_t n = view_.buckets;
    *grow = static_cast<double>(Count()) > max_load_factor_ * static_cast<double>(kWophiAssoc * n);
  }
  return Status::OK();
}

Status Wophi::UpdateAt(const Probe& p, std::string_view key, std::string_view value,
                       uint64_t hash) {
  // The slot encoding's update (not in the paper); word stores only, as searches that
  // take no lock need.
  return UpdateSlot(&p.bucket->token[p.index], &p.bucket->slot[p.index], key, value, hash);
}

Status Wophi::DoDelete(std::string_view key, uint64_t hash) {
  uint64_t home = 0, n = 0;
  Stripe& s = LockHome(hash, LockMode::kExclusive, &home, &n);
  HeldLock guard(s.mu, LockMode::kExclusive);
  const Probe p = Find(key, hash, home);
  // Alg. 2 line 18: not found.
  if (p.bucket == nullptr) return Status::NotFound();
  pm::Persister& ps = persister();
  uint8_t* token = &p.bucket->token[p.index];
  const auto form = static_cast<SlotForm>(*token);
  const KvWords old = p.bucket->slot[p.index];
  ShardOf(s).delta.fetch_sub(1, std::memory_order_relaxed);  // before the commit, as InsertAt
  // Alg. 2 lines 10-12: token = 0, pflush, fence: committed.
  ps.Store(token, static_cast<uint8_t>(SlotForm::kEmpty));
  ps.Persist(token, 1);
  codec().Release(form, old);  // durably unreachable since the token store
  return Status::OK();
}

uint64_t Wophi::Count() const {
  int64_t c = static_cast<int64_t>(base_count_);
  for (size_t i = 0; i < kWophiCountShards; ++i) {
    c += counts_[i].delta.load(std::memory_order_relaxed);
  }
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

uint64_t Wophi::pab_free() const {
  std::lock_guard<std::mutex> g(pab_mu_);
  return pab_free_list_.size();
}

Status Wophi::ForEach(const Visitor& fn) const {
  const IterationScope iterating(this, resize_mu_);
  // One chain at a time (consecutive main buckets lie in different stripes).
  return VisitAreas(
      stripes_, view_.buckets, 1,
      [&](uint64_t k, uint64_t, Entries* batch) {
        VisitChain(k, [&](SlotForm f, const KvWords& w) {
          batch->emplace_back(codec().Key(f, w), codec().Value(f, w));
        });
      },
      fn);
}

Status Wophi::DoScan(ScanPage* page) const {
  const IterationScope iterating(this, resize_mu_);  // no resize during the page
  // A home is a main bucket and its chain, read under its stripe (consecutive main
  // buckets lie in different stripes).
  const auto collect = [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    for (uint64_t k = first; k < last; ++k) {
      Stripe& s = stripes_.Of(k);
      s.mu.lock_shared();
      HeldLock guard(s.mu, LockMode::kShared);
      VisitChain(k, [&](SlotForm f, const KvWords& w) {
        AddScanEntry(out, HashOf(f, w), codec().Key(f, w), codec().Value(f, w));
      });
    }
  };
  page->CollectHomes(view_.buckets, kScanRunBuckets, collect);
  return Status::OK();
}

// ---- Resize -------------------------------------------------------------------------

Status Wophi::Grow(uint64_t observed_buckets) {
  if (IterationScope::Active(this)) return Status::OK();  // deferred: ForEach blocks it
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  const Stripes<Stripe>::AllHeld all(stripes_);
  std::lock_guard<std::mutex> refill_lock(refill_mu_);
  if (main_buckets_.load(std::memory_order_relaxed) != observed_buckets) return Status::OK();
  const View old = view_;
  const uint64_t n2 = old.buckets * 2;
  if (n2 > pool().size() / kBucketBytes) {
    return Status::PoolFull("wophi: the main bucket array cannot double beyond the pool");
  }
  uint64_t table = 0;
  PMHASH_RETURN_IF_ERROR(NewTable(n2, &table));
  const View nv(pool().At<char>(table), table, n2);
  pm::Persister& ps = persister();

  // The new table's own PAB blocks (unreachable until the switch, like the table).
  std::vector<PabBlock> new_blocks;  // oldest first
  std::vector<uint64_t> used;        // buckets taken from each
  auto release_new = [&] {
    for (const PabBlock& b : new_blocks) allocator().Free(b.offset);
    allocator().Free(table);
  };
  auto add_block = [&]() -> Status {
    uint64_t off = 0, got = 0;
    const uint64_t older = new_blocks.empty() ? 0 : new_blocks.back().offset;
    PMHASH_RETURN_IF_ERROR(NewPabBlock(PabBlockSize(n2), older, &off, &got));
    ps.Store(&nv.header->pab_head, SealFor(&nv.header->pab_head, off));
    new_blocks.push_back({off, got});
    used.push_back(0);
    return Status::OK();
  };
  uint64_t chain_buckets = 0;
  // Migration reads the old table only; records move by pointer.
  for (uint64_t k = 0; k < old.buckets; ++k) {
    uint64_t depth = 0;
    for (const WophiBucket* b = &old.mb[k]; b != nullptr && depth < max_chain_;
         b = NextBucket(b), ++depth) {
      for (size_t i = 0; i < kWophiAssoc; ++i) {
        const uint8_t t = b->token[i];
        if (t == 0) continue;
        const uint64_t nk = Reduce(HashOf(static_cast<SlotForm>(t), b->slot[i]), n2);
        WophiBucket* dst = &nv.mb[nk];
        size_t slot = kWophiAssoc;
        for (;;) {
          for (size_t j = 0; j < kWophiAssoc && slot == kWophiAssoc; ++j) {
            if (dst->token[j] == 0) slot = j;
          }
          if (slot != kWophiAssoc || dst->next == 0) break;
          dst = pool().At<WophiBucket>(dst->next);
        }
        if (slot == kWophiAssoc) {  // chain full: a PAB bucket of the new table
          if (new_blocks.empty() || used.back() == new_blocks.back().buckets) {
            if (Status s = add_block(); !s.ok()) {
              release_new();
              return s;
            }
          }
          const uint64_t off =
              new_blocks.back().offset + sizeof(WophiPabHeader) + used.back() * kBucketBytes;
          ++used.back();
          ++chain_buckets;
          auto* tmp = pool().At<WophiBucket>(off);
          ps.Store(&tmp->taken, uint8_t{1});
          ps.Store(&dst->next, off);
          dst = tmp;
          slot = 0;
        }
        ps.Copy(&dst->slot[slot], &b->slot[i], sizeof(KvWords));
        ps.Store(&dst->token[slot], t);
      }
    }
  }
  // A stocked PAB for the inserts to come; without room for it the table still grows.
  const uint64_t left = new_blocks.empty() ? 0 : new_blocks.back().buckets - used.back();
  if (left <= PabLowWater(n2)) (void)add_block();
  ps.Flush(nv.table, TableBytes(n2));
  // The PAB buckets migrated into: line 0 always, line 1 only where slot 3 was written
  // (NewPabBlock flushed the headers and every line 0 already; flushing a line with
  // nothing stored in it would be a redundant flush).
  for (size_t bi = 0; bi < new_blocks.size(); ++bi) {
    char* block = pool().At<char>(new_blocks[bi].offset);
    for (uint64_t i = 0; i < used[bi]; ++i) {
      const WophiBucket* b = PabBucket(block, i);
      ps.Flush(b, b->token[kWophiAssoc - 1] != 0 ? sizeof(WophiBucket) : pm::kCacheLine);
    }
  }
  // The resize's commit point: one failure-atomic 8-byte store of root.table.
  PublishRootTable(table);
  // Only now is the old table durably unreachable.
  std::vector<PabBlock> old_blocks;
  if (ReadPabList(old.header, &old_blocks).ok()) {
    for (const PabBlock& b : old_blocks) allocator().Free(b.offset);
  }
  allocator().Free(old.offset);
  view_ = nv;
  mb_.store(nv.mb, std::memory_order_release);
  {
    std::lock_guard<std::mutex> g(pab_mu_);
    pab_free_list_.clear();
    pab_total_ = 0;
    // The newest block at the bottom of the stack, so the partly used one is drained first.
    for (size_t bi = new_blocks.size(); bi > 0; --bi) {
      const PabBlock& b = new_blocks[bi - 1];
      pab_total_ += b.buckets;
      for (uint64_t i = b.buckets; i > used[bi - 1]; --i) {
        pab_free_list_.push_back(b.offset + sizeof(WophiPabHeader) + (i - 1) * kBucketBytes);
      }
    }
  }
  expand_bucket_num_.store(chain_buckets, std::memory_order_relaxed);
  main_buckets_.store(n2, std::memory_order_release);
  resizes_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

// ---- Stats and checks ---------------------------------------------------------------

void Wophi::FillStats(IndexStats* stats) const {
  const uint64_t n = main_buckets_.load(std::memory_order_acquire);
  uint64_t pab_total = 0, pab_free_now = 0, free_cap = 0;
  {
    std::lock_guard<std::mutex> g(pab_mu_);
    pab_total = pab_total_;
    pab_free_now = pab_free_list_.size();
    free_cap = pab_free_list_.capacity();
  }
  stats->count = Count();
  // Every slot allocated in PM: main buckets and all pre-allocated buckets (taken or not).
  stats->key_slots = kWophiAssoc * (n + pab_total);
  stats->dram_bytes = sizeof(*this) + kWophiStripes * sizeof(Stripe) +
                      kWophiCountShards * sizeof(CountShard) + free_cap * sizeof(uint64_t);
  auto& c = stats->engine_counters;
  c["main_buckets"] = n;
  c["expand_bucket_num"] = expand_bucket_num_.load(std::memory_order_relaxed);
  c["pab_buckets"] = pab_total;
  c["pab_free"] = pab_free_now;
  c["pab_refills"] = pab_refills_.load(std::memory_order_relaxed);
  c["pab_sync_refills"] = pab_sync_refills_.load(std::memory_order_relaxed);
  c["resizes"] = resizes_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs();
  c["recovery_unlinked_pab"] = recovered_unlinked_;
}

Status Wophi::CheckInvariants() const {
  std::unique_lock<std::shared_mutex> resize_lock(resize_mu_);
  std::lock_guard<std::mutex> refill_lock(refill_mu_);  // the refill thread mutates too
  // The metadata as Recover validated it (a damaged pool may be checked right after open).
  uint64_t table = 0, n = 0, stored_count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &table, &stored_count));
  PMHASH_RETURN_IF_ERROR(ValidateTable(table, &n));
  if (table != view_.offset || n != view_.buckets) {
    return Status::Corruption("wophi: the root names the table at pool offset " +
                              std::to_string(table) + ", not the live one at " +
                              std::to_string(view_.offset));
  }
  std::unordered_set<std::string> keys;
  Walk walk;
  PMHASH_RETURN_IF_ERROR(WalkTable(
      view_.offset, n, /*validate=*/true, &walk,
      [&](uint64_t home, SlotForm form, const KvWords& w) {
        const std::string at = "the slot at pool offset " + std::to_string(pool().ToOffset(&w));
        if (!codec().Plausible(form, w)) {
          return Status::Corruption("wophi: " + at + " is malformed");
        }
        const std::string key(codec().Key(form, w));
        const uint64_t hash = KeyHash(key);
        if (form == SlotForm::kRecord && w.word1 != hash) {
          return Status::Corruption("wophi: " + at + " has a wrong hash word");
        }
        if (Reduce(hash, n) != home) {
          return Status::Corruption("wophi: " + at + " in main bucket " + std::to_string(home) +
                                    "'s chain holds a key of main bucket " +
                                    std::to_string(Reduce(hash, n)));
        }
        if (!keys.insert(key).second) {
          return Status::Corruption("wophi: a key is stored twice (again in " + at + ")");
        }
        return Status::OK();
      }));
  if (walk.keys != Count()) {
    return Status::Corruption("wophi: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(walk.keys) + " slots are occupied");
  }
  size_t idx = 0;
  for (const PabBlock& b : walk.blocks) {
    for (uint64_t i = 0; i < b.buckets; ++i, ++idx) {
      const WophiBucket* bucket = PabBucket(pool().At<char>(b.offset), i);
      if (bucket->taken != (walk.linked[idx] ? 1 : 0)) {
        return Status::Corruption("wophi: the taken byte of the pre-allocated " + Where(bucket) +
                                  " is " + std::to_string(bucket->taken) + " but the bucket is " +
                                  (walk.linked[idx] ? "" : "not ") + "in a chain");
      }
    }
  }
  if (walk.chain_buckets != expand_bucket_num()) {
    return Status::Corruption("wophi: expand_bucket_num is " +
                              std::to_string(expand_bucket_num()) + " but chains hold " +
                              std::to_string(walk.chain_buckets) + " PAB buckets");
  }
  std::lock_guard<std::mutex> g(pab_mu_);
  if (pab_total_ != walk.linked.size() ||
      pab_free_list_.size() != walk.linked.size() - walk.chain_buckets) {
    return Status::Corruption("wophi: the free PAB list (" + std::to_string(pab_free_list_.size()) +
                              " of " + std::to_string(pab_total_) +
                              ") disagrees with the PAB blocks");
  }
  return Status::OK();
}

void Wophi::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  // The parts of a bucket that mean something: tokens, taken, next and the slots (its
  // padding is never read).
  const auto bucket = [&](const WophiBucket* b) {
    const uint64_t off = pool().ToOffset(b);
    mark(off, offsetof(WophiBucket, pad0), pm::Region::kSlots, false);
    const size_t next = offsetof(WophiBucket, next);
    mark(off + next, offsetof(WophiBucket, pad1) - next, pm::Region::kSlots, false);
    for (size_t i = 0; i < kWophiAssoc; ++i) {
      codec().DescribeRecord(static_cast<SlotForm>(b->token[i]), b->slot[i], mark);
    }
  };
  mark(view_.offset, kHeaderBytes, pm::Region::kEngineMetadata, true);
  for (uint64_t k = 0; k < view_.buckets; ++k) bucket(&view_.mb[k]);
  std::vector<PabBlock> blocks;
  if (!ReadPabList(view_.header, &blocks).ok()) return;
  for (const PabBlock& b : blocks) {
    mark(b.offset, sizeof(WophiPabHeader), pm::Region::kEngineMetadata, true);
    for (uint64_t i = 0; i < b.buckets; ++i) bucket(PabBucket(pool().At<char>(b.offset), i));
  }
}

void RegisterEngines_wophi(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {OptionSpec::Uint("buckets", std::nullopt, 1, uint64_t{1} << 36,
                                   "main buckets of the first table (auto: initial_capacity "
                                   "/ 4, else 1024)"),
                  OptionSpec::Uint("pab_buckets", std::nullopt, 1, uint64_t{1} << 24,
                                   "buckets per pre-allocated block (auto: main buckets / 8, "
                                   "in 8..65536, rounded up to the block the allocator "
                                   "gives)"),
                  OptionSpec::Uint("pab_low", std::nullopt, 1, uint64_t{1} << 24,
                                   "free pre-allocated buckets at which the background refill "
                                   "starts (auto: a quarter of a block)"),
                  OptionSpec::Double("max_load_factor", 1.0, 0.05, 64.0,
                                     "keys per main-bucket slot past which the main buckets "
                                     "double")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "the main buckets double past max_load_factor",
                       .background_work = true,
                       .pipelined_multiget = true};
  // Few main buckets, small PAB blocks refilled early: resizes and refills.
  info.test = {.crash_options = {{"buckets", "8"}, {"pab_buckets", "8"}, {"pab_low", "4"}},
               .growth_counters = {"resizes", "pab_refills"}};
  info.description = {"wophi",
                      "chained buckets (4 tokens, 4 slots, next); pre-allocated chain "
                      "buckets; log-free token commit",
                      "000 WOPHI", /*crash_consistent=*/true};
  registry.Add<Wophi>(std::move(info));
}

}  // namespace pmhash::engines
