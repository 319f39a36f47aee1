// BHT (paper 001). Layout, invariants, persist orders and locking: bht.h.
#include "engines/bht/bht.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr RootLayout kRootLayout{kBhtRootMagic, kBhtVersion, sizeof(BhtRoot),
                                 offsetof(BhtRoot, log_head) - sizeof(EngineRoot)};
constexpr uint16_t kAllSlots = (1u << kBhtBucketSlots) - 1;
constexpr uint64_t kMinLogBytes = 64 * 1024;
// A log whose half holds a record of the largest key and value (with its header).
constexpr uint64_t kLogForLargestRecord = std::bit_ceil(2 * (kMaxKeySize + kMaxValueSize + 4096));

// The record meta word: key length, value length, kind, check.
constexpr int kKeyLenBits = 17, kValueLenBits = 21, kKindShift = 38, kCheckShift = 40;
constexpr uint64_t kKeyLenMask = (uint64_t{1} << kKeyLenBits) - 1;
constexpr uint64_t kValueLenMask = (uint64_t{1} << kValueLenBits) - 1;
static_assert(kMaxKeySize <= kKeyLenMask && kMaxValueSize <= kValueLenMask,
              "the lengths fit their fields");

// The seqlock of a buffer bucket: a writer makes it odd, changes the bucket with release
// stores (each orders the odd store before it), and makes it even again (release).
void BeginWrite(BhtBucket* bk) {
  __atomic_store_n(&bk->seq, bk->seq + 1, __ATOMIC_RELAXED);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
void EndWrite(BhtBucket* bk) { __atomic_store_n(&bk->seq, bk->seq + 1, __ATOMIC_RELEASE); }
template <typename T>
void StoreRelease(T* field, T value) {
  __atomic_store_n(field, value, __ATOMIC_RELEASE);
}
template <typename T>
T LoadAcquire(const T* field) {
  return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}

uint64_t Word(std::string_view s) {
  uint64_t w = 0;
  std::memcpy(&w, s.data(), std::min<size_t>(8, s.size()));
  return w;
}

}  // namespace

// ---- Options, creation, recovery ---------------------------------------------------------

Status Bht::Configure(EngineOptions& options, const Options& /*index_options*/) {
  PMHASH_RETURN_IF_ERROR(ConfigureCore(options, kRootLayout));
  buffer_size_ = options.Uint("buffer_size");
  buffer_ratio_ = options.Double("buffer_ratio");
  log_bytes_opt_ = options.Uint("log_size");
  if (!std::has_single_bit(buffer_size_)) {
    return Status::InvalidArgument("bht: buffer_size must be a power of two, not " +
                                   std::to_string(buffer_size_));
  }
  buckets_ = buffer_size_ / kBhtBucketBytes;
  return Status::OK();
}

Status Bht::Create() {
  uint64_t bytes = log_bytes_opt_ != 0 ? log_bytes_opt_ : std::max(kMinLogBytes, pool().size() / 8);
  // Auto: room for the largest legal record (a record must fit half the log) when the
  // pool can spare a quarter for it.
  if (log_bytes_opt_ == 0 && bytes < kLogForLargestRecord &&
      pool().size() / 4 >= kLogForLargestRecord) {
    bytes = kLogForLargestRecord;
  }
  const uint64_t slots = bytes / kBhtLogSlot;
  uint64_t log = 0;
  PMHASH_RETURN_IF_ERROR(AllocateBlock(slots * kBhtLogSlot, "the write-ahead log", &log));
  auto* r = root<BhtRoot>();
  persister().Store(&r->log_offset, log);
  persister().Store(&r->log_slots, slots);
  persister().Store(&r->log_head, SealFor(&r->log_head, 0));
  if (Status s = CreateCore(kRootLayout); !s.ok()) {
    allocator().Free(log);
    return s;
  }
  log_ = pool().At<char>(log);
  log_offset_ = log;
  log_slots_ = slots;
  head_ = tail_ = 0;
  AssignBuffers();
  return Status::OK();
}

Status Bht::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  PMHASH_RETURN_IF_ERROR(EnumerateCore(kRootLayout, visit));
  const auto* r = root<const BhtRoot>();
  if (r->log_offset < pool().heap_offset() || r->log_slots < 2 ||
      !pool().Contains(r->log_offset, r->log_slots * kBhtLogSlot)) {
    return Status::Corruption("bht: the log the root names (offset " +
                              std::to_string(r->log_offset) + ", " +
                              std::to_string(r->log_slots) + " slots) lies outside the heap");
  }
  visit(r->log_offset);
  return Status::OK();
}

Status Bht::Recover(bool clean) {
  uint64_t count = 0;
  PMHASH_RETURN_IF_ERROR(RecoverCore(kRootLayout, clean, &count));
  const auto* r = root<const BhtRoot>();
  if (r->log_slots < 2 || !allocator().IsAllocated(r->log_offset) ||
      allocator().UsableSize(r->log_offset) < r->log_slots * kBhtLogSlot) {
    return Status::Corruption("bht: the log the root names (offset " +
                              std::to_string(r->log_offset) + ", " +
                              std::to_string(r->log_slots) +
                              " slots) is not an allocated block of its size");
  }
  uint64_t head = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->log_head, "the log head", &head));
  log_ = pool().At<char>(r->log_offset);
  log_offset_ = r->log_offset;
  log_slots_ = r->log_slots;
  head_ = tail_ = head;
  AssignBuffers();
  LogKind kind;
  std::string_view k, v;
  uint64_t slots = 0;
  // Close flipped every buffer, so after a clean one the head is the tail unless a flip
  // kept keys it could not place (bht.md, "Keys of one hash"). The buffers are those of
  // the closed or crashed session (the directory's marks), so the records go back where
  // they were; nothing is flipped unless a bucket fills, and the head stays.
  if (clean && !ReadRecord(head, &kind, &k, &v, &slots)) return Status::OK();
  PMHASH_RETURN_IF_ERROR(Replay(head));
  if (clean) {
    // Close sealed Count(), kept keys included; the replay counted them again.
    int64_t buffered = 0;
    {
      std::lock_guard<std::mutex> g(buffers_mu_);  // not with dir_mu_ (AssignBuffers' order)
      for (const auto& b : buffers_) buffered += b->known_delta;
    }
    ShiftSegmentKeys(-buffered);
  }
  return Status::OK();
}

Status Bht::Replay(uint64_t head) {
  // The records are read up to kReplayAhead ahead of the one being replayed, and what
  // each will read is prefetched in three steps, each on lines the step before brought
  // in (the segment's side-table state and probe window; 8 records ahead, the buffer's
  // lock line; 4 ahead, its bucket): a record's misses then overlap those of the records
  // before it, where they came one after another (bht.md, "Recovery"). The hints may go
  // stale (a flip moves a buffer), which costs a wasted prefetch, never a wrong read: the
  // replay finds segment and buffer again, and no buffer is freed while it runs. Nothing
  // appends to the log during replay, so the records read ahead stay as they are.
  constexpr size_t kReplayAhead = 16, kBufferAhead = 8, kBucketAhead = 4;
  struct Ahead {
    uint64_t seq, slots, hash;
    LogKind kind;
    std::string_view key, value;
    const CcehSeg* seg;
  };
  Ahead ring[kReplayAhead];
  size_t first = 0, held = 0;  // ring[first ..] holds the next `held` records
  uint64_t seq = head;         // the record to replay next
  uint64_t read_to = head;     // the record to read next
  bool ended = false;
  for (uint64_t n = 0; n < log_slots_; ++n) {
    while (!ended && held < kReplayAhead && n + held < log_slots_) {
      Ahead& a = ring[(first + held) % kReplayAhead];
      if (!ReadRecord(read_to, &a.kind, &a.key, &a.value, &a.slots)) {
        ended = true;
        break;
      }
      a.seq = read_to;
      a.hash = a.kind != LogKind::kPad ? KeyHash(a.key) : 0;
      a.seg = a.kind != LogKind::kPad ? SegmentOf(a.hash) : nullptr;
      if (a.seg != nullptr) {
        PrefetchKey(a.hash);
        __builtin_prefetch(a.seg);
      }
      read_to += a.slots;
      ++held;
    }
    if (held == 0) break;
    if (held > kBufferAhead) {
      const Ahead& x = ring[(first + kBufferAhead) % kReplayAhead];
      if (const BhtBuffer* b = x.seg != nullptr ? BufferOf(x.seg) : nullptr; b != nullptr) {
        __builtin_prefetch(b);
      }
    }
    if (held > kBucketAhead) {
      const Ahead& x = ring[(first + kBucketAhead) % kReplayAhead];
      if (const BhtBuffer* b = x.seg != nullptr ? BufferOf(x.seg) : nullptr; b != nullptr) {
        __builtin_prefetch(&b->buckets[BucketOf(x.hash)]);
      }
    }
    const Ahead& a = ring[first];
    first = (first + 1) % kReplayAhead;
    --held;
    {
      std::lock_guard<RwSpinLock> g(log_mu_);
      tail_ = seq;  // no flip during replay reclaims this record or any after it
    }
    if (a.kind != LogKind::kPad) {
      const uint64_t hash = a.hash;
      const bool tomb = a.kind == LogKind::kTomb;
      for (;;) {
        CcehSeg* s = SegmentOf(hash);
        BhtBuffer* b = s != nullptr ? BufferOf(s) : nullptr;
        Status st;
        if (b == nullptr) {
          bool diverted = false;
          st = tomb ? DeleteInPlace(a.key, hash, &diverted)
                    : WriteInPlace(a.key, a.value, hash, WriteMode::kPut, &diverted);
          if (diverted) continue;
          if (!st.ok() && !st.IsNotFound()) return st;
          break;
        }
        Next next = Next::kDone;
        {
          b->mu.lock();
          HeldLock g(b->mu, LockMode::kExclusive);
          st = WriteBuffered(b, a.key, a.value, hash, WriteMode::kPut, tomb, seq, &next);
        }
        if (next == Next::kRetry) continue;
        PMHASH_RETURN_IF_ERROR(st);
        break;
      }
      replayed_.fetch_add(1, std::memory_order_relaxed);
    }
    seq += a.slots;
  }
  LogKind kind;
  std::string_view key, value;
  uint64_t slots = 0;
  {
    std::lock_guard<RwSpinLock> g(log_mu_);
    tail_ = seq;
    used_.store(tail_ - head_, std::memory_order_relaxed);
  }
  // Appends persist one at a time, so only the last record can be torn: a valid record
  // past the first invalid one is damage, not a crash.
  for (uint64_t i = 0; i < log_slots_; ++i) {
    const auto* h = reinterpret_cast<const BhtLogHeader*>(log_ + i * kBhtLogSlot);
    const uint64_t s = h->seq;
    if (s > seq && s - seq < log_slots_ && s % log_slots_ == i &&
        ReadRecord(s, &kind, &key, &value, &slots)) {
      return Status::Corruption("bht: the log record at sequence " + std::to_string(seq) +
                                " is damaged, but a valid one follows at " + std::to_string(s));
    }
  }
  return Status::OK();
}

// ---- Buffers --------------------------------------------------------------------------------

BhtBuffer* Bht::NewBuffer(CcehSeg* seg, const std::function<void(BhtBuffer*)>& fill) {
  auto b = std::make_unique<BhtBuffer>();
  b->buckets.reset(new BhtBucket[buckets_]());
  b->seg.store(seg, std::memory_order_relaxed);
  BhtBuffer* raw = b.get();
  if (fill) fill(raw);
  seg->attachment.store(raw, std::memory_order_release);
  std::lock_guard<std::mutex> g(buffers_mu_);
  buffers_.push_back(std::move(b));
  return raw;
}

bool Bht::InitialMark(uint64_t i, uint64_t /*n*/) const {
  // Spread evenly: segment i gets one when floor((i + 1) r) > floor(i r).
  return std::floor(static_cast<double>(i + 1) * buffer_ratio_) >
         std::floor(static_cast<double>(i) * buffer_ratio_);
}

void Bht::AssignBuffers() {
  ForEachSegment([&](CcehSeg* s) {
    if (s->marked) NewBuffer(s);
  });
}

uint64_t Bht::buffers() const {
  std::lock_guard<std::mutex> g(buffers_mu_);
  return buffers_.size();
}

std::pair<std::string_view, std::string_view> Bht::Buffered(const BhtBucket& bk, int i) const {
  if ((bk.logref >> i & 1) == 0) {
    const auto* w = reinterpret_cast<const char*>(&bk.slot[i]);
    return {std::string_view(w, 8), std::string_view(w + 8, 8)};
  }
  LogKind kind;
  std::string_view k, v;
  uint64_t slots = 0;
  if (!ReadRecord(bk.slot[i].word0, &kind, &k, &v, &slots)) return {};
  return {k, v};
}

uint64_t Bht::BufferedHash(const BhtBucket& bk, int i, std::string_view key) const {
  return (bk.logref >> i & 1) != 0 ? bk.slot[i].word1 : KeyHash(key);
}

std::string_view Bht::ValueAt(const CcehSeg* s, int slot) const {
  return SlotValue(SlotsOf(s)[slot]);
}

int Bht::FindInBucket(const BhtBucket& bk, std::string_view key, uint64_t hash) const {
  uint32_t m = matcher_.Match16(bk.tag, TagOf(hash)) & bk.valid & kAllSlots;
  const bool inline_key = key.size() == 8;
  const uint64_t key_word = inline_key ? Word(key) : 0;
  for (; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    if ((bk.logref >> i & 1) == 0) {
      if (inline_key && bk.slot[i].word0 == key_word) return i;
    } else if (bk.slot[i].word1 == hash && Buffered(bk, i).first == key) {
      return i;
    }
  }
  return -1;
}

namespace {
// An entry's effect on Count, known: +1 a live entry the segment did not hold, -1 a
// tombstone of one it did, else 0.
int Effect(bool tomb, bool present) { return !tomb && !present ? 1 : tomb && present ? -1 : 0; }
}  // namespace

Status Bht::WriteBuffered(BhtBuffer* b, std::string_view key, std::string_view value,
                          uint64_t hash, WriteMode mode, bool tomb, uint64_t replay_seq,
                          Next* next) {
  CcehSeg* s = b->seg.load(std::memory_order_relaxed);
  if (!s->Serves(hash)) {  // a flip split the range since the caller found this buffer
    *next = Next::kRetry;
    return Status::OK();
  }
  BhtBucket* bk = &b->buckets[BucketOf(hash)];
  int i = FindInBucket(*bk, key, hash);
  const bool was_tomb = i >= 0 && (bk->tomb >> i & 1) != 0;
  bool known = false, present = false;
  if (replay_seq != kBhtNoRecord && i < 0) {
    // Replay: a record whose effect the segment already shows was flipped before the
    // crash (the head had not passed it): leave it out, so recovery rebuilds only what
    // the buffer held. The key's last record decides either way (last writer wins).
    const Probe p = Find(s, key, hash);
    present = p.found >= 0;
    known = true;
    if (tomb ? !present : present && ValueAt(s, p.found) == value) return Status::OK();
  }
  if (replay_seq == kBhtNoRecord && mode != WriteMode::kPut) {
    // What the contract asks beyond the paper: the buffer answers if it holds the key;
    // else the segment is read (an extra lookup, counted).
    bool exists;
    if (i >= 0) {
      exists = !was_tomb;
    } else {
      extra_lookups_.fetch_add(1, std::memory_order_relaxed);
      present = Find(s, key, hash).found >= 0;
      known = true;
      exists = present;
    }
    if (tomb && !exists) return Status::NotFound();
    if (!tomb && mode == WriteMode::kInsert && exists) return Status::AlreadyExists();
    if (!tomb && mode == WriteMode::kUpdate && !exists) return Status::NotFound();
  }
  if (i < 0 && (bk->valid & kAllSlots) == kAllSlots) {
    // The first full bucket: the buffer is full (bht.h). The key was not buffered, so its
    // presence in the merged segment is what it was.
    const FlipReason reason = replay_seq == kBhtNoRecord ? FlipReason::kFull : FlipReason::kRecovery;
    PMHASH_RETURN_IF_ERROR(Flip(b, reason));
    if (!b->seg.load(std::memory_order_relaxed)->Serves(hash)) {
      *next = Next::kRetry;  // the flip split the range: the key's half moved on
      return Status::OK();
    }
    if ((bk->valid & kAllSlots) == kAllSlots) {
      // Still full: of keys the flip could not place (bht.md, "Keys of one hash"). The
      // write goes into the segment by a flip of its own (TableFull if it cannot either).
      const FlipWrite w{key, value, hash, tomb};
      return Flip(b, reason, &w);
    }
  }
  // The log first: a search never sees a value that is not durable.
  uint64_t seq = replay_seq;
  if (seq == kBhtNoRecord &&
      RecordSlots(key.size(), tomb ? 0 : value.size()) > log_slots_ / 2) {
    // Room for it could never be made: a write that finds the log full flips buffers
    // until half of it is free.
    return Status::InvalidArgument(
        "bht: a key and value of " + std::to_string(key.size() + value.size()) +
        " bytes do not fit half the write-ahead log (" +
        std::to_string(log_slots_ * kBhtLogSlot) + " bytes; log_size at creation)");
  }
  if (seq == kBhtNoRecord) {
    if (!Append(b, tomb ? LogKind::kTomb : LogKind::kPut, key, tomb ? "" : value, &seq)) {
      *next = Next::kLogFull;
      return Status::OK();
    }
  } else {
    std::lock_guard<RwSpinLock> g(log_mu_);
    if (b->oldest == kBhtNoRecord) {
      b->oldest = seq;
      live_.insert({seq, b});
    }
  }
  // The DRAM slot, under the bucket's seqlock.
  const bool fresh = i < 0;
  if (fresh) i = std::countr_zero(static_cast<uint32_t>(~bk->valid & kAllSlots));
  const uint16_t bit = static_cast<uint16_t>(1u << i);
  if (!fresh) {  // the old entry's effect goes
    if ((bk->known & bit) != 0) {
      b->known_delta -= Effect(was_tomb, (bk->present & bit) != 0);
    } else {
      --b->unknown;
    }
    known = (bk->known & bit) != 0;
    present = (bk->present & bit) != 0;
  }
  const bool inline_entry = key.size() == 8 && (tomb || value.size() == 8);
  KvWords w;
  if (inline_entry) {
    w = {Word(key), tomb ? 0 : Word(value)};
  } else {
    w = {seq, hash};
  }
  BeginWrite(bk);
  StoreRelease(&bk->tag[i], TagOf(hash));
  StoreRelease(&bk->slot[i].word0, w.word0);
  StoreRelease(&bk->slot[i].word1, w.word1);
  StoreRelease(&bk->tomb, static_cast<uint16_t>(tomb ? bk->tomb | bit : bk->tomb & ~bit));
  StoreRelease(&bk->logref, static_cast<uint16_t>(inline_entry ? bk->logref & ~bit : bk->logref | bit));
  StoreRelease(&bk->known, static_cast<uint16_t>(known ? bk->known | bit : bk->known & ~bit));
  StoreRelease(&bk->present, static_cast<uint16_t>(present ? bk->present | bit : bk->present & ~bit));
  StoreRelease(&bk->valid, static_cast<uint16_t>(bk->valid | bit));
  EndWrite(bk);
  if (fresh) ++b->entries;
  if (known) {
    b->known_delta += Effect(tomb, present);
  } else {
    ++b->unknown;
  }
  b->empty.store(false, std::memory_order_release);
  return Status::OK();
}

Status Bht::Write(std::string_view key, std::string_view value, uint64_t hash, WriteMode mode,
                  bool tomb) {
  for (;;) {
    CcehSeg* s = SegmentOf(hash);
    BhtBuffer* b = s != nullptr ? BufferOf(s) : nullptr;
    if (b == nullptr) {
      bool diverted = false;
      Status st = tomb ? DeleteInPlace(key, hash, &diverted)
                       : WriteInPlace(key, value, hash, mode, &diverted);
      if (!diverted) return st;
      continue;
    }
    Next next = Next::kDone;
    Status st;
    {
      b->mu.lock();
      HeldLock g(b->mu, LockMode::kExclusive);
      st = WriteBuffered(b, key, value, hash, mode, tomb, kBhtNoRecord, &next);
    }
    if (next == Next::kRetry) continue;
    if (next == Next::kLogFull) {
      // No room in the log: flip the oldest buffers (this one's lock is free now).
      PMHASH_RETURN_IF_ERROR(RelieveLog(log_slots_ / 2));
      continue;
    }
    // Past three quarters of the log, the oldest buffer is flipped by force, so an idle
    // buffer never pins the log. The write is done whatever that costs.
    if (st.ok() && used_.load(std::memory_order_relaxed) > log_slots_ / 4 * 3) {
      (void)RelieveLog(log_slots_ / 4 * 3);
    }
    return st;
  }
}

Status Bht::DoWrite(std::string_view key, std::string_view value, uint64_t hash,
                    WriteMode mode) {
  return Write(key, value, hash, mode, /*tomb=*/false);
}

Status Bht::DoDelete(std::string_view key, uint64_t hash) {
  return Write(key, "", hash, WriteMode::kUpdate, /*tomb=*/true);
}

// ---- Flips ------------------------------------------------------------------------------------

Status Bht::Flip(BhtBuffer* b, FlipReason reason, const FlipWrite* write) {
  if (b->entries == 0 && write == nullptr) return Status::OK();
  CcehSeg* s = b->seg.load(std::memory_order_relaxed);
  // The segment, immutable while its buffer's lock is held (a buffered segment changes
  // only by its flip), merged with the buffer in DRAM.
  std::vector<LiveSlot> live;
  CollectLive(s, &live);
  std::sort(live.begin(), live.end(),
            [](const LiveSlot& a, const LiveSlot& c) { return a.hash < c.hash; });
  const size_t from_segment = live.size();
  std::vector<bool> dropped(from_segment, false);
  std::vector<uint64_t> replaced;  // records of the segment's entries the buffer overrides
  std::vector<KvWords> made;       // records made for buffered entries
  auto discard_made = [&] {
    for (const KvWords& w : made) Discard(w);
  };
  // Where each entry the merge adds came from: a buffer slot, or the write (kWrite).
  constexpr size_t kWrite = ~size_t{0};
  struct Source {
    size_t bucket;
    int slot;
    uint64_t hash;
    KvWords words;
  };
  std::vector<Source> sources;
  sources.reserve(b->entries + 1);
  int64_t net = 0;
  auto merge = [&](std::string_view key, std::string_view value, uint64_t hash, bool tomb,
                   size_t bucket, int slot) {
    // The segment's entry for the key, if any.
    int64_t j = -1;
    auto it = std::lower_bound(live.begin(), live.begin() + from_segment, hash,
                               [](const LiveSlot& l, uint64_t h) { return l.hash < h; });
    for (; it != live.begin() + from_segment && it->hash == hash; ++it) {
      const size_t k = static_cast<size_t>(it - live.begin());
      const SlotForm f = CcehForm(it->words.word0);
      const bool same = f == SlotForm::kInline
                            ? key.size() == 8 && it->words.word0 == Word(key)
                            : codec().KeyEquals(f, CcehCodecWords(it->words), key, hash);
      if (same && !dropped[k]) {
        j = static_cast<int64_t>(k);
        break;
      }
    }
    const bool had_record = j >= 0 && CcehForm(live[j].words.word0) == SlotForm::kRecord;
    if (tomb) {
      if (j >= 0) {
        dropped[j] = true;
        if (had_record) replaced.push_back(live[j].words.word0 & kCcehOffsetMask);
        --net;
      }
      return Status::OK();
    }
    KvWords w;
    bool record = false;
    PMHASH_RETURN_IF_ERROR(Encode(key, value, hash, &w, &record));
    if (record) made.push_back(w);
    if (j >= 0) {
      if (had_record) replaced.push_back(live[j].words.word0 & kCcehOffsetMask);
      live[j].words = w;
    } else {
      live.push_back({hash, w});
      ++net;
    }
    sources.push_back({bucket, slot, hash, w});
    return Status::OK();
  };
  const uint32_t entries = b->entries;
  for (size_t bi = 0; bi < buckets_; ++bi) {
    const BhtBucket& bk = b->buckets[bi];
    for (uint32_t m = bk.valid & kAllSlots; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      const auto [key, value] = Buffered(bk, i);
      if (Status st = merge(key, value, BufferedHash(bk, i, key), (bk.tomb >> i & 1) != 0, bi, i);
          !st.ok()) {
        discard_made();
        return st;
      }
    }
  }
  if (write != nullptr) {
    if (Status st = merge(write->key, write->value, write->hash, write->tomb, kWrite, -1);
        !st.ok()) {
      discard_made();
      return st;
    }
  }
  std::vector<LiveSlot> merged;
  merged.reserve(live.size());
  for (size_t k = 0; k < live.size(); ++k) {
    if (k >= from_segment || !dropped[k]) merged.push_back(live[k]);
  }
  std::vector<Replacement> images;
  std::vector<LiveSlot> unplaced;
  if (Status st = BuildImages(s->depth.load(std::memory_order_relaxed),
                              s->pattern.load(std::memory_order_relaxed), /*marked=*/true,
                              merged, &images, &unplaced);
      !st.ok()) {
    discard_made();
    return st;
  }
  // Keys no split places stay buffered (bht.md, "Keys of one hash"); a key the segment
  // held, or the write, must be placed.
  std::vector<const Source*> kept;
  for (const LiveSlot& u : unplaced) {
    const auto it = std::find_if(sources.begin(), sources.end(), [&](const Source& src) {
      return src.words.word0 == u.words.word0 && src.words.word1 == u.words.word1;
    });
    if (it == sources.end() || it->bucket == kWrite) {
      discard_made();
      return Status::TableFull(name() + ": more keys than a probe window holds share a hash "
                               "prefix of " + std::to_string(kCcehMaxDepth + 1) + " bits");
    }
    kept.push_back(&*it);
  }
  net -= static_cast<int64_t>(kept.size());
  // Their records: logged anew before the head can pass the old ones (in recovery the
  // log is being replayed, so they keep theirs and the buffer its oldest mark).
  const bool relog = reason != FlipReason::kRecovery;
  std::vector<uint64_t> kept_seq(kept.size(), kBhtNoRecord);
  if (relog) {
    for (size_t k = 0; k < kept.size(); ++k) {
      const auto [key, value] = Buffered(b->buckets[kept[k]->bucket], kept[k]->slot);
      if (!Append(b, LogKind::kPut, key, value, &kept_seq[k])) {
        discard_made();
        return Status::TableFull(name() + ": no room in the write-ahead log to log anew the "
                                 "keys a flip cannot place");
      }
    }
  }
  const uint64_t old_oldest = b->oldest;
  // The kept entries a new segment serves, into its new buffer (not yet reachable).
  auto fill = [&](CcehSeg* seg, BhtBuffer* nb) {
    uint64_t oldest = kBhtNoRecord;
    for (size_t k = 0; k < kept.size(); ++k) {
      if (!seg->Serves(kept[k]->hash)) continue;
      const BhtBucket& from = b->buckets[kept[k]->bucket];
      const int i = kept[k]->slot;
      BhtBucket& to = nb->buckets[kept[k]->bucket];
      const int t = std::countr_zero(static_cast<uint32_t>(~to.valid & kAllSlots));
      const uint16_t bit = static_cast<uint16_t>(1u << t);
      const bool logref = (from.logref >> i & 1) != 0;
      to.tag[t] = from.tag[i];
      to.slot[t] = from.slot[i];
      if (logref && relog) to.slot[t].word0 = kept_seq[k];
      if (logref) to.logref |= bit;
      to.known |= bit;  // the new segment does not hold it
      to.valid |= bit;
      ++nb->entries;
      ++nb->known_delta;
      oldest = std::min(oldest, relog ? kept_seq[k] : old_oldest);
    }
    if (nb->entries == 0) return;
    nb->empty.store(false, std::memory_order_relaxed);
    std::lock_guard<RwSpinLock> g(log_mu_);
    nb->oldest = oldest;
    live_.insert({oldest, nb});
  };
  std::vector<CcehSeg*> up;
  const Status st = ReplaceSegment(
      s, &images,
      [&](size_t k, CcehSeg* seg) {
        if (k == 0) {  // this buffer fronts the range's first part from now on
          seg->attachment.store(b, std::memory_order_release);
          seg->delta.store(net, std::memory_order_relaxed);
          b->seg.store(seg, std::memory_order_release);
        } else {  // both halves of a buffered segment are buffered (bht.h, invariant 2)
          NewBuffer(seg, [&](BhtBuffer* nb) { fill(seg, nb); });
        }
      },
      &up);
  if (!st.ok()) {
    discard_made();
    return st;
  }
  // Committed: the overridden records are durably unreachable, the buffer is in PM
  // (but for the kept entries, whose records the segment never linked).
  for (uint64_t r : replaced) codec().ReleaseRecord(r);
  CcehSeg* first = b->seg.load(std::memory_order_relaxed);
  std::vector<uint16_t> stay(buckets_, 0);  // kept slots that stay in this buffer
  uint64_t oldest = kBhtNoRecord;
  for (size_t k = 0; k < kept.size(); ++k) {
    Discard(kept[k]->words);
    if (!first->Serves(kept[k]->hash)) continue;
    stay[kept[k]->bucket] |= static_cast<uint16_t>(1u << kept[k]->slot);
    oldest = std::min(oldest, relog ? kept_seq[k] : old_oldest);
  }
  uint32_t staying = 0;
  for (size_t bi = 0; bi < buckets_; ++bi) {
    BhtBucket* bk = &b->buckets[bi];
    if (bk->valid == 0) continue;
    const uint16_t keep = stay[bi];
    BeginWrite(bk);
    if (relog) {
      for (size_t k = 0; k < kept.size(); ++k) {
        const int i = kept[k]->slot;
        if (kept[k]->bucket == bi && (keep >> i & 1) != 0 && (bk->logref >> i & 1) != 0) {
          StoreRelease(&bk->slot[i].word0, kept_seq[k]);
        }
      }
    }
    StoreRelease(&bk->valid, keep);
    StoreRelease(&bk->tomb, uint16_t{0});
    StoreRelease(&bk->logref, static_cast<uint16_t>(bk->logref & keep));
    StoreRelease(&bk->known, keep);
    StoreRelease(&bk->present, uint16_t{0});
    EndWrite(bk);
    staying += static_cast<uint32_t>(std::popcount(keep));
  }
  b->entries = staying;
  b->known_delta = staying;
  b->unknown = 0;
  b->empty.store(staying == 0, std::memory_order_release);
  b->read_misses.store(0, std::memory_order_relaxed);
  // Only now: the log held these entries until they were in PM. A kept entry's record
  // (in recovery: the oldest mark it had) holds the log for it.
  ReleaseLog(b, oldest);
  flips_.fetch_add(1, std::memory_order_relaxed);
  flip_entries_.fetch_add(entries - kept.size(), std::memory_order_relaxed);
  flips_by_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  flip_kept_.fetch_add(kept.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status Bht::RelieveLog(uint64_t limit) {
  while (used_.load(std::memory_order_relaxed) > limit) {
    BhtBuffer* oldest = nullptr;
    {
      std::lock_guard<RwSpinLock> g(log_mu_);
      if (live_.empty()) return Status::OK();
      oldest = live_.begin()->second;
    }
    oldest->mu.lock();
    HeldLock g(oldest->mu, LockMode::kExclusive);
    PMHASH_RETURN_IF_ERROR(Flip(oldest, FlipReason::kLog));
  }
  return Status::OK();
}

Status Bht::ForEachBuffer(const std::function<Status(BhtBuffer*)>& fn) const {
  std::vector<BhtBuffer*> all;
  {
    std::lock_guard<std::mutex> g(buffers_mu_);
    for (const auto& b : buffers_) all.push_back(b.get());
  }
  for (BhtBuffer* b : all) {
    b->mu.lock();
    HeldLock g(b->mu, LockMode::kExclusive);
    PMHASH_RETURN_IF_ERROR(fn(b));
  }
  return Status::OK();
}

void Bht::ForEachBuffered(BhtBuffer* b,
                          const std::function<void(size_t, BhtBucket&, int)>& fn) const {
  for (size_t bi = 0; bi < buckets_; ++bi) {
    BhtBucket& bk = b->buckets[bi];
    for (uint32_t m = bk.valid & kAllSlots; m != 0; m &= m - 1) fn(bi, bk, std::countr_zero(m));
  }
}

Status Bht::FlipAll(FlipReason reason) {
  PMHASH_RETURN_IF_ERROR(ForEachBuffer([&](BhtBuffer* b) { return Flip(b, reason); }));
  std::lock_guard<RwSpinLock> g(log_mu_);
  if (live_.empty() && head_ != tail_) {
    PersistHead(tail_);
    head_ = tail_;
    used_.store(0, std::memory_order_relaxed);
  }
  return Status::OK();
}

Status Bht::Shutdown() {
  PMHASH_RETURN_IF_ERROR(FlipAll(FlipReason::kClose));
  FreeRetiredDirectories();  // after the flips: they may double the directory
  return Status::OK();
}

// ---- The log ------------------------------------------------------------------------------------

uint64_t Bht::Meta(uint64_t seq, LogKind kind, std::string_view key,
                   std::string_view value) const {
  const uint64_t fields = key.size() | uint64_t{value.size()} << kKeyLenBits |
                          uint64_t{static_cast<uint8_t>(kind)} << kKindShift;
  const uint64_t check = Hash64(value.data(), value.size(),
                                Hash64(key.data(), key.size(), log_offset_ ^ seq ^ fields));
  return fields | (check >> kCheckShift) << kCheckShift;
}

bool Bht::Append(BhtBuffer* b, LogKind kind, std::string_view key, std::string_view value,
                 uint64_t* seq) {
  pm::Persister& ps = persister();
  const uint64_t slots = RecordSlots(key.size(), value.size());
  std::lock_guard<RwSpinLock> g(log_mu_);
  const uint64_t pos = tail_ % log_slots_;
  const uint64_t pad = pos + slots > log_slots_ ? log_slots_ - pos : 0;
  if (tail_ + pad + slots - head_ > log_slots_) return false;
  const MediaTally tally(*this, kMediaLog);
  if (pad != 0) {  // to the ring's end, persisted alone: only the last record may be torn
    BhtLogHeader* h = LogSlot(tail_);
    ps.Store(&h->meta, Meta(tail_, LogKind::kPad, "", ""));
    ps.Store(&h->seq, tail_);
    ps.Persist(h, sizeof(*h));
    tail_ += pad;
  }
  BhtLogHeader* h = LogSlot(tail_);
  char* body = reinterpret_cast<char*>(h + 1);
  if (!key.empty()) ps.Copy(body, key.data(), key.size());
  if (!value.empty()) ps.Copy(body + key.size(), value.data(), value.size());
  ps.Store(&h->meta, Meta(tail_, kind, key, value));
  ps.Store(&h->seq, tail_);  // last: a line's stores persist in order
  ps.Persist(h, sizeof(*h) + key.size() + value.size());
  *seq = tail_;
  tail_ += slots;
  used_.store(tail_ - head_, std::memory_order_relaxed);
  if (b->oldest == kBhtNoRecord) {
    b->oldest = *seq;
    live_.insert({*seq, b});
  }
  log_records_.fetch_add(1, std::memory_order_relaxed);
  log_slots_used_.fetch_add(slots + pad, std::memory_order_relaxed);
  return true;
}

bool Bht::ReadRecord(uint64_t seq, LogKind* kind, std::string_view* key, std::string_view* value,
                     uint64_t* slots) const {
  const BhtLogHeader* h = LogSlot(seq);
  if (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) != seq) return false;
  const uint64_t meta = __atomic_load_n(&h->meta, __ATOMIC_ACQUIRE);
  const auto k = static_cast<LogKind>((meta >> kKindShift) & 3);
  const uint64_t klen = meta & kKeyLenMask, vlen = (meta >> kKeyLenBits) & kValueLenMask;
  const uint64_t pos = seq % log_slots_;
  if (k == LogKind::kPad) {
    if (klen != 0 || vlen != 0 || Meta(seq, k, "", "") != meta) return false;
    *kind = k;
    *slots = log_slots_ - pos;
    return true;
  }
  if (k != LogKind::kPut && k != LogKind::kTomb) return false;
  const uint64_t n = RecordSlots(klen, vlen);
  if (pos + n > log_slots_) return false;
  const char* body = reinterpret_cast<const char*>(h + 1);
  const std::string_view kv(body, klen), vv(body + klen, vlen);
  persister().NoteRead(h, sizeof(*h) + klen + vlen);
  if (Meta(seq, k, kv, vv) != meta) return false;
  *kind = k;
  *key = kv;
  *value = vv;
  *slots = n;
  return true;
}

void Bht::PersistHead(uint64_t head) {
  auto* r = root<BhtRoot>();
  persister().Store(&r->log_head, SealFor(&r->log_head, head));
  persister().Persist(&r->log_head, sizeof(r->log_head));
  head_persists_.fetch_add(1, std::memory_order_relaxed);
}

void Bht::ReleaseLog(BhtBuffer* b, uint64_t oldest) {
  std::lock_guard<RwSpinLock> g(log_mu_);
  if (b->oldest != kBhtNoRecord) {
    live_.erase({b->oldest, b});
    b->oldest = kBhtNoRecord;
  }
  if (oldest != kBhtNoRecord) {
    b->oldest = oldest;
    live_.insert({oldest, b});
  }
  // Reclamation: everything before the oldest record of any buffer is garbage.
  const uint64_t head = live_.empty() ? tail_ : live_.begin()->first;
  if (head > head_) {
    PersistHead(head);
    head_ = head;
    used_.store(tail_ - head_, std::memory_order_relaxed);
  }
}

// ---- Searches -----------------------------------------------------------------------------------

Status Bht::DoGet(std::string_view key, uint64_t hash, std::string* value) {
  BhtBuffer* missed = nullptr;
  const Optimistic answer = SearchOptimistically(
      persister(), key, value, [&](OptimisticRead* read) {
        const OptimisticReadScope unchecked_by_tsan;  // validated by versions instead
        missed = nullptr;
        const KvWords* slots = nullptr;
        const CcehSeg* s = BeginRead(hash, read, &slots);
        if (s == nullptr) return Optimistic::kRetry;
        BhtBuffer* b = BufferOf(s);
        if (b != nullptr && !b->empty.load(std::memory_order_acquire)) {
          // The buffer first, under its bucket's seqlock.
          const BhtBucket* bk = &b->buckets[BucketOf(hash)];
          const uint32_t q = LoadAcquire(&bk->seq);
          if ((q & 1) != 0) return Optimistic::kRetry;
          uint32_t m = matcher_.Match16(bk->tag, TagOf(hash)) & LoadAcquire(&bk->valid) & kAllSlots;
          const uint16_t logref = LoadAcquire(&bk->logref), tomb = LoadAcquire(&bk->tomb);
          Optimistic found = Optimistic::kRetry;  // not decided
          for (; m != 0; m &= m - 1) {
            const int i = std::countr_zero(m);
            if ((logref >> i & 1) != 0) {
              if (LoadAcquire(&bk->slot[i].word1) == hash) {
                found = Optimistic::kLocked;  // its key is in the log: read under the lock
                break;
              }
            } else if (read->inline_key && LoadAcquire(&bk->slot[i].word0) == read->key_word) {
              // A tombstone answers NotFound without reading the segment.
              found = (tomb >> i & 1) != 0 ? Optimistic::kAbsent : Optimistic::kFound;
              read->value_word = LoadAcquire(&bk->slot[i].word1);
              break;
            }
          }
          if (LoadAcquire(&bk->seq) != q) return Optimistic::kRetry;
          if (found != Optimistic::kRetry) {
            return read->Valid(s->mu) ? found : Optimistic::kRetry;
          }
          missed = b;
        }
        const Optimistic a = SearchWindow(slots, hash, read);
        return read->Valid(s->mu) ? a : Optimistic::kRetry;
      });
  if (missed != nullptr) {
    // A search that searched a non-empty buffer and missed (the paper's read-miss
    // counter); the one whose increment wraps the counter flips the buffer.
    read_misses_.fetch_add(1, std::memory_order_relaxed);
    const uint8_t m = static_cast<uint8_t>(missed->read_misses.load(std::memory_order_relaxed) + 1);
    missed->read_misses.store(m, std::memory_order_relaxed);
    if (m == 0) {
      missed->mu.lock();
      HeldLock g(missed->mu, LockMode::kExclusive);
      (void)Flip(missed, FlipReason::kReadMisses);  // a failure leaves the buffer as it was
    }
  }
  if (answer == Optimistic::kFound) return Status::OK();
  if (answer == Optimistic::kAbsent) return Status::NotFound();
  // Under the lock: the buffer's (a buffered segment), else the segment's shared lock.
  for (;;) {
    CcehSeg* s = SegmentOf(hash);
    BhtBuffer* b = s != nullptr ? BufferOf(s) : nullptr;
    if (b == nullptr) {
      CcehSeg* t = LockSegment(hash, LockMode::kShared);
      HeldLock g(t->mu, LockMode::kShared);
      if (BufferOf(t) != nullptr) continue;
      return ReadValue(t, key, hash, value);
    }
    b->mu.lock();
    HeldLock g(b->mu, LockMode::kExclusive);
    CcehSeg* t = b->seg.load(std::memory_order_relaxed);
    if (!t->Serves(hash)) continue;
    const BhtBucket& bk = b->buckets[BucketOf(hash)];
    const int i = FindInBucket(bk, key, hash);
    if (i >= 0) {
      if ((bk.tomb >> i & 1) != 0) return Status::NotFound();
      const std::string_view v = Buffered(bk, i).second;
      value->assign(v.data(), v.size());
      return Status::OK();
    }
    return ReadValue(t, key, hash, value);
  }
}

void Bht::Prefetch(uint64_t hash) const { PrefetchKey(hash); }

// ---- Count, iteration, checks ---------------------------------------------------------------

uint64_t Bht::Count() const {
  int64_t c = static_cast<int64_t>(SegmentKeys());
  (void)ForEachBuffer([&](BhtBuffer* b) {
    if (b->unknown != 0) {
      // Blind puts: whether the segment holds their keys is learnt once, here.
      CcehSeg* s = b->seg.load(std::memory_order_relaxed);
      ForEachBuffered(b, [&](size_t, BhtBucket& bk, int i) {
        const uint16_t bit = static_cast<uint16_t>(1u << i);
        if ((bk.known & bit) != 0) return;
        const std::string_view key = Buffered(bk, i).first;
        const uint64_t hash = BufferedHash(bk, i, key);
        const bool present = Find(s, key, hash).found >= 0;
        bk.known |= bit;  // searches never read known / present
        if (present) bk.present |= bit;
        b->known_delta += Effect((bk.tomb & bit) != 0, present);
      });
      b->unknown = 0;
    }
    c += b->known_delta;
    return Status::OK();
  });
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

void Bht::BufferedStep(uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) const {
  for (;;) {
    const CcehSeg* hint = SegmentOf(*cursor);
    BhtBuffer* b = hint != nullptr ? BufferOf(hint) : nullptr;
    if (b == nullptr) {
      CcehSeg* t = LockSegment(*cursor, LockMode::kShared);
      HeldLock g(t->mu, LockMode::kShared);
      if (BufferOf(t) != nullptr) continue;
      std::vector<LiveSlot> live;
      CollectLive(t, &live);
      AddEntries(live, *cursor, batch);
      *cursor = RangeEnd(t->depth.load(), t->pattern.load());
      *done = *cursor == 0;
      return;
    }
    b->mu.lock();
    HeldLock g(b->mu, LockMode::kExclusive);
    const CcehSeg* t = b->seg.load(std::memory_order_relaxed);
    if (!t->Serves(*cursor)) continue;
    // The buffer's entries (tombstones too) override the segment's.
    std::unordered_set<std::string> shadow;
    std::vector<ScanEntry> buffered;
    ForEachBuffered(b, [&](size_t, BhtBucket& bk, int i) {
      const auto [key, value] = Buffered(bk, i);
      const uint64_t hash = BufferedHash(bk, i, key);
      shadow.emplace(key);
      if ((bk.tomb >> i & 1) == 0 && hash >= *cursor) AddScanEntry(&buffered, hash, key, value);
    });
    std::vector<LiveSlot> live;
    CollectLive(t, &live);
    std::vector<ScanEntry> from_segment;
    AddEntries(live, *cursor, &from_segment);
    for (ScanEntry& e : from_segment) {
      if (shadow.count(e.key) == 0) batch->push_back(std::move(e));
    }
    for (ScanEntry& e : buffered) batch->push_back(std::move(e));
    *cursor = RangeEnd(t->depth.load(), t->pattern.load());
    *done = *cursor == 0;
    return;
  }
}

Status Bht::ForEach(const Visitor& fn) const {
  return Iterate(fn, [this](uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) {
    BufferedStep(cursor, done, batch);
  });
}

Status Bht::DoScan(ScanPage* page) const {
  return ScanSteps(page, [this](uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) {
    BufferedStep(cursor, done, batch);
  });
}

Status Bht::CheckInvariants() const {
  std::unordered_set<std::string> keys;
  uint64_t live = 0;
  PMHASH_RETURN_IF_ERROR(CheckCore(kRootLayout, &keys, &live));
  int64_t count = static_cast<int64_t>(live);
  uint64_t oldest = kBhtNoRecord;
  PMHASH_RETURN_IF_ERROR(ForEachBuffer([&](BhtBuffer* b) {
    const CcehSeg* s = b->seg.load(std::memory_order_relaxed);
    if (BufferOf(s) != b) {
      return Status::Corruption("bht: a buffer's segment does not name it as its buffer");
    }
    uint32_t entries = 0;
    std::unordered_set<std::string> in_buffer;
    Status st;  // the first error found
    auto fail = [&st](const char* why) {
      if (st.ok()) st = Status::Corruption(why);
    };
    ForEachBuffered(b, [&](size_t bi, BhtBucket& bk, int i) {
      ++entries;
      const std::string key(Buffered(bk, i).first);
      const uint64_t hash = KeyHash(key);
      if (BucketOf(hash) != bi || TagOf(hash) != bk.tag[i] || !s->Serves(hash)) {
        fail("bht: a buffered key sits in the wrong bucket, tag or segment");
      }
      if (!in_buffer.insert(key).second) {
        fail("bht: a key is buffered twice");
      }
      const bool present = Find(s, key, hash).found >= 0;
      const uint16_t bit = static_cast<uint16_t>(1u << i);
      if ((bk.known & bit) != 0 && ((bk.present & bit) != 0) != present) {
        fail("bht: a buffered entry's segment presence is wrong");
      }
      count += Effect((bk.tomb & bit) != 0, present);
    });
    PMHASH_RETURN_IF_ERROR(st);
    if (entries != b->entries || (entries == 0) != b->empty.load()) {
      return Status::Corruption("bht: a buffer's entry count or empty bit is wrong");
    }
    if ((entries == 0) != (b->oldest == kBhtNoRecord)) {
      return Status::Corruption("bht: a buffer's oldest log record disagrees with its entries");
    }
    oldest = std::min(oldest, b->oldest);
    return Status::OK();
  }));
  if (static_cast<uint64_t>(count) != Count()) {
    return Status::Corruption("bht: Count() is " + std::to_string(Count()) + " but the segments "
                              "and buffers hold " + std::to_string(count) + " keys");
  }
  std::lock_guard<RwSpinLock> g(log_mu_);
  if (oldest != kBhtNoRecord && oldest < head_) {
    return Status::Corruption("bht: a buffer's oldest record lies before the log head");
  }
  uint64_t head = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&root<const BhtRoot>()->log_head, "the log head", &head));
  if (head != head_) {
    return Status::Corruption("bht: the persisted log head " + std::to_string(head) +
                              " is not the live one " + std::to_string(head_));
  }
  LogKind kind;
  std::string_view k, v;
  uint64_t slots = 0;
  for (uint64_t seq = head_; seq < tail_; seq += slots) {
    if (!ReadRecord(seq, &kind, &k, &v, &slots)) {
      return Status::Corruption("bht: the live log record at sequence " + std::to_string(seq) +
                                " is not valid");
    }
  }
  return Status::OK();
}

void Bht::FillStats(IndexStats* stats) const {
  FillCoreStats(stats);
  stats->count = Count();
  const uint64_t n = buffers();
  stats->dram_bytes += n * (sizeof(BhtBuffer) + buckets_ * sizeof(BhtBucket));
  auto& c = stats->engine_counters;
  c["buffers"] = n;
  c["flips"] = flips();
  c["flip_entries"] = flip_entries_.load(std::memory_order_relaxed);
  c["flip_kept"] = flip_kept_.load(std::memory_order_relaxed);
  c["flips_full"] = flips_by_[static_cast<int>(FlipReason::kFull)].load();
  c["flips_read_misses"] = flips_by_[static_cast<int>(FlipReason::kReadMisses)].load();
  c["flips_log"] = flips_by_[static_cast<int>(FlipReason::kLog)].load();
  c["flips_close"] = flips_by_[static_cast<int>(FlipReason::kClose)].load();
  c["flips_recovery"] = flips_by_[static_cast<int>(FlipReason::kRecovery)].load();
  c["buffer_slots"] = buckets_ * kBhtBucketSlots;
  c["extra_lookups"] = extra_lookups_.load(std::memory_order_relaxed);
  c["read_misses"] = read_misses_.load(std::memory_order_relaxed);
  c["log_records"] = log_records_.load(std::memory_order_relaxed);
  c["log_slots_written"] = log_slots_used_.load(std::memory_order_relaxed);
  c["log_head_persists"] = head_persists_.load(std::memory_order_relaxed);
  c["log_capacity_slots"] = log_slots_;
  c["recovery_replayed"] = replayed_.load(std::memory_order_relaxed);
  c["media_writes_log"] = media_writes(kMediaLog);
}

void Bht::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  DescribeCore(mark);
  // The live records: each checks itself, but a damaged last one reads as torn.
  std::lock_guard<RwSpinLock> g(log_mu_);
  for (uint64_t seq = head_; seq < tail_;) {
    LogKind kind;
    std::string_view k, v;
    uint64_t slots = 0;
    if (!ReadRecord(seq, &kind, &k, &v, &slots)) break;
    mark(log_offset_ + (seq % log_slots_) * kBhtLogSlot,
         kind == LogKind::kPad ? sizeof(BhtLogHeader) : sizeof(BhtLogHeader) + k.size() + v.size(),
         pm::Region::kRecords, false);
    seq += slots;
  }
}

void RegisterEngines_bht(EngineRegistry& registry) {
  EngineInfo info;
  info.options = CcehCore::CcehOptions();
  info.options.push_back(OptionSpec::Uint(
      "buffer_size", 8192, 256, 65536,
      "bytes of each segment's DRAM write buffer, a power of two: buckets of 256 bytes, 13 "
      "slots each (the paper's default 8 KiB)"));
  info.options.push_back(OptionSpec::Double(
      "buffer_ratio", 1.0, 0.0, 1.0,
      "share of the segments given a buffer at open, spread evenly; a buffered segment's "
      "halves keep one each, so the share holds as the table grows (the paper's buffers / "
      "segments at the end of the load)"));
  info.options.push_back(OptionSpec::Uint(
      "log_size", std::nullopt, kMinLogBytes, uint64_t{1} << 40,
      "bytes of the PM write-ahead log ring, at creation (auto: an eighth of the pool, at "
      "least 64 KiB, and 4 MiB, room for the largest record, if the pool is 16 MiB or "
      "more); past three quarters full the oldest buffer is flipped"));
  // No resize=off: a buffer takes writes blind (it never reads the segment), so a table
  // that may not grow could not refuse an insert at the call, only at a later flip, and
  // the flip at Close would then fail. cceh has the switch.
  info.capabilities = {.resize_switch = false,
                       .resize_when = "a segment splits (in place, or when a flip's merge "
                                      "does not fit) and the directory doubles",
                       .refuses_when_full = false,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true};
  // 1 KiB segments, one-bucket buffers (13 slots) and a 64 KiB log: flips, splits inside
  // flips and forced flips within a few hundred keys.
  info.test = {.crash_options = {{"segment_bytes", "1024"},
                                 {"buffer_size", "256"},
                                 {"log_size", "65536"}},
               .thread_crash_options = {{"segments", "16"}},
               .growth_counters = {"flips", "splits"},
               .get_upkeep_counter = "flips_read_misses"};
  info.description = {"bht",
                      "BHT: CCEH with per-segment DRAM write buffers (256-B buckets of 13 "
                      "slots, SIMD tags), a PM write-ahead log and out-of-place flips",
                      "001 BHT", /*crash_consistent=*/true};
  registry.Add<Bht>(std::move(info));
}

}  // namespace pmhash::engines
