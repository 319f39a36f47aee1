// Spash (paper 002). Layout, invariants, persist order and concurrency: spash.h; the
// directory and its staged transitions: directory.h.
#include "engines/spash/spash.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <xmmintrin.h>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "util/hash.h"
#include "util/htm.h"

namespace pmhash::engines {
namespace {

using spash::Bucket;
using spash::BucketMatch;
using spash::MatchBucket;
using spash::Forms;
using spash::HintBits;
using spash::KeyWords;
using spash::Matching;
using spash::ReadKeyWords;
using spash::DirEntry;
using spash::EntryFilter;
using spash::Directory;
using spash::KeyWord;
using spash::Segment;
using spash::Slot;

constexpr RootLayout kRootLayout{kSpashRootMagic, kSpashVersion, sizeof(SpashRoot),
                                 sizeof(uint64_t)};
constexpr int kSlots = 16;
constexpr unsigned kUnknownCount = 31;  // a primary's count, not known since a clean open
constexpr uint64_t kRecordLive = uint64_t{1} << 47;
constexpr int kRecordDepthShift = 41;
constexpr uint64_t kPrefixMask = (uint64_t{1} << kRecordDepthShift) - 1;

uint64_t RecordPayload(unsigned depth, uint64_t prefix) {
  return kRecordLive | uint64_t{depth} << kRecordDepthShift | prefix;
}

int MainBucket(uint64_t h) { return static_cast<int>(h & 3); }

// The 16-byte units a record takes, and its free-list class (0 .. 7).
uint64_t RecordUnits(uint64_t bytes) { return (bytes + 15) / 16; }
unsigned ClassOfUnits(uint64_t units) { return static_cast<unsigned>(units - 1); }

// Places an entry whose main bucket is `b` into the first empty slot of `words` by
// circular probing (Sec. III-A), setting its main bucket's hint bit if it lands in
// another bucket. Returns the slot, or -1 if the 16 slots are full.
int PlaceInImage(uint64_t words[kSlots], int b) {
  for (int k = 0; k < 4; ++k) {
    const int c = (b + k) & 3;
    for (int j = 0; j < 4; ++j) {
      if (KeyWord::Empty(words[c * 4 + j])) {
        if (k != 0) words[b * 4 + k] |= KeyWord::kHint;
        return c * 4 + j;
      }
    }
  }
  return -1;
}

// Sets exactly the hint bits the entries of 16 key words need (invariant 2).
void SetExactHints(uint64_t words[kSlots]) {
  for (int i = 0; i < kSlots; ++i) words[i] &= ~KeyWord::kHint;
  for (int i = 0; i < kSlots; ++i) {
    if (KeyWord::Empty(words[i])) continue;
    const int b = MainBucket(KeyWord::LowHash(words[i]));
    const int j = ((i / 4) - b) & 3;
    if (j != 0) words[b * 4 + j] |= KeyWord::kHint;
  }
}

uint64_t ValueWord(std::string_view value) {
  uint64_t v;
  std::memcpy(&v, value.data(), 8);
  return v;
}

// xorshift64: the per-thread draws of injected aborts (seeded by the state's address).
bool Draw(uint64_t* state, double rate) {
  if (rate <= 0) return false;
  uint64_t x = *state == 0 ? reinterpret_cast<uintptr_t>(state) * 0x9E3779B97F4A7C15ull | 1
                           : *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return static_cast<double>(x >> 11) * 0x1.0p-53 < rate;
}

}  // namespace

// ---- Per-thread state ------------------------------------------------------------------

Spash::Spash() : threads_(new ThreadState[pm::CounterTable::kMaxThreads + 1]) {}

Spash::~Spash() = default;

Spash::ThreadState& Spash::MyState() const {
  const size_t id = pm::CounterTable::ThisThreadId();
  return threads_[std::min<size_t>(id, pm::CounterTable::kMaxThreads)];
}

bool Spash::IsShared(const ThreadState& t) const {
  return &t == &threads_[pm::CounterTable::kMaxThreads];
}

// The calling thread's state, held: threads beyond the table share the last slot, under
// its lock; an own slot needs none.
class Spash::StateUse {
 public:
  explicit StateUse(const Spash& s) : state_(s.MyState()), shared_(s.IsShared(state_)) {
    if (shared_) state_.mu.lock();
  }
  ~StateUse() {
    if (shared_) state_.mu.unlock();
  }
  StateUse(const StateUse&) = delete;
  StateUse& operator=(const StateUse&) = delete;
  ThreadState* operator->() const { return &state_; }

 private:
  ThreadState& state_;
  const bool shared_;
};

void Spash::AddDelta(int64_t d) {
  ThreadState& t = MyState();
  if (IsShared(t)) {
    t.delta.fetch_add(d, std::memory_order_relaxed);
  } else {
    t.delta.store(t.delta.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
}

uint64_t Spash::Count() const {
  int64_t c = static_cast<int64_t>(base_count_);
  for (size_t i = 0; i <= pm::CounterTable::kMaxThreads; ++i) {
    c += threads_[i].delta.load(std::memory_order_relaxed);
  }
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

// ---- Options, blocks, creation -----------------------------------------------------------

Status Spash::Configure(EngineOptions& options, const Options& index_options) {
  initial_depth_opt_ = static_cast<unsigned>(options.Uint("initial_depth"));
  merge_fill_ = options.Double("merge_fill");
  const uint64_t hot = options.Uint("hot_keys");
  const unsigned per = static_cast<unsigned>(options.Uint("hot_per_partition"));
  const bool hot_oracle = options.Bool("hot_oracle");
  update_flush_ = static_cast<UpdateFlush>(options.Uint("update_flush"));
  compacted_flush_ = options.Bool("compacted_flush");
  chunk_write_back_ = options.Bool("chunk_write_back");
  htm_ = options.Bool("htm_emulated");
  rtm_ = options.Bool("htm_rtm");
  htm_retries_ = static_cast<unsigned>(options.Uint("htm_retries"));
  htm_abort_rate_ = options.Double("htm_abort_rate");
  read_lock_ = options.Bool("read_lock");
  nta_reads_ = options.Bool("nta_reads");
  filter_ = options.Bool("filter");
  dir_.SetFilter(filter_, &Spash::RefineFilters, this);
  hint_ = options.Bool("hint");
  dir_.SetHint(hint_);
  group_commit_ = options.Bool("group_commit");
  prefetch_records_ = options.Bool("prefetch_records");
  // A test hash (the degenerate-hash run) is no bijection: every key is then a record.
  inline_keys_ = key_hash_invertible();
  first_try_ = options.Bool("first_try") && inline_keys_ && !read_lock_ && !nta_reads_;
  SetQuickGet(first_try_);
  if (hot != 0 && (hot % per != 0 || !std::has_single_bit(hot / per))) {
    return Status::InvalidArgument("option hot_keys=" + std::to_string(hot) +
                                   " must be hot_per_partition (" + std::to_string(per) +
                                   ") times a power of two");
  }
  if (group_commit_ && (htm_ || rtm_)) {
    return Status::InvalidArgument(
        "option group_commit=on holds ranges across a batch's commits, which a transaction "
        "(htm_emulated, htm_rtm) cannot: turn one of them off");
  }
  if (rtm_) {
    if (htm_) return Status::InvalidArgument("options htm_emulated and htm_rtm exclude each other");
    if (index_options.persist != PersistMode::kEadr) {
      return Status::InvalidArgument(
          "option htm_rtm=on needs persist=eadr (the paper's platform): a flush inside an RTM "
          "transaction aborts it");
    }
    if (!htm::Usable()) {
      return Status::InvalidArgument(
          "option htm_rtm=on: this CPU runs no RTM transaction (cpuid has no rtm, or TSX is "
          "disabled); htm_emulated=on runs the same code in the crash simulator's regions");
    }
    htm_ = true;
  }
  hot_.Reset(hot, per, hot_oracle);
  return Status::OK();
}

unsigned Spash::InitialDepth() const {
  unsigned d = kSpashMinDepth;
  if (initial_depth_opt_ != 0) {
    d = initial_depth_opt_;
  } else if (initial_capacity() != 0) {
    // Segments for the expected keys at a full load, rounded down: the load grows the
    // rest by splits, which keeps the load factor where extendible hashing has it.
    const uint64_t segs = initial_capacity() / kSlots;
    if (segs > 1) d = std::max<unsigned>(d, 63 - std::countl_zero(segs));
  }
  // Never more than a quarter of the heap in segments.
  while (d > kSpashMinDepth && ((uint64_t{1} << d) / kSpashSegmentsPerBlock + 1) *
                                       kSpashBlockBytes > pool().heap_size() / 4) {
    --d;
  }
  return d;
}

void Spash::NoteBlock(uint64_t block) {
  const uint64_t w = (block - pool().heap_offset()) / kSpashBlockBytes;
  block_start_[w].store(block, std::memory_order_release);
}

uint64_t Spash::BlockOf(uint64_t offset) const {
  // At most one block starts in each 64 KiB window of the heap (a block is 64 KiB long):
  // the block holding `offset` starts in its window, at or before it, or in the one before.
  const uint64_t w = (offset - pool().heap_offset()) / kSpashBlockBytes;
  const uint64_t b = block_start_[w].load(std::memory_order_acquire);
  if (b != 0 && b <= offset) return b;
  return w == 0 ? 0 : block_start_[w - 1].load(std::memory_order_acquire);
}

Status Spash::NewBlock(uint64_t kind, bool link, uint64_t* offset) {
  const bool segments = kind == spash::kSegmentBlock;
  PMHASH_RETURN_IF_ERROR(AllocateBlock(
      kSpashBlockBytes, segments ? "a segment block" : "a record chunk block", offset));
  pm::Persister& p = persister();
  auto* h = pool().At<spash::BlockHeader>(*offset);
  // The header and the records (all free) or the usage map; segments and chunks are
  // written when they are taken.
  const uint64_t meta = segments ? kSpashSegmentArea : kSpashChunkArea;
  p.Zero(h, meta);
  p.Store(&h->kind, kind);
  p.Store(&h->next, head_block_);
  p.Store(&h->magic, kSpashBlockMagic);
  p.Store(&h->check, MetadataCheck(h, offsetof(spash::BlockHeader, check)));
  p.Flush(h, meta);
  if (link) PublishRootTable(*offset);  // fence, the list's new head, persist
  head_block_ = *offset;
  NoteBlock(*offset);
  if (!segments) {  // kept sorted: CheckEntry and the usage maps search it
    chunk_blocks_.insert(std::upper_bound(chunk_blocks_.begin(), chunk_blocks_.end(), *offset),
                         *offset);
  }
  blocks_.push_back(*offset);
  return Status::OK();
}

Status Spash::NewSegment(Segment** out) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  if (free_segments_.empty()) {
    uint64_t block = 0;
    PMHASH_RETURN_IF_ERROR(NewBlock(spash::kSegmentBlock, /*link=*/true, &block));
    for (unsigned i = kSpashSegmentsPerBlock; i > 0; --i) {
      free_segments_.push_back(block + kSpashSegmentArea + (i - 1) * sizeof(Segment));
    }
  }
  *out = pool().At<Segment>(free_segments_.back());
  free_segments_.pop_back();
  return Status::OK();
}

void Spash::FreeSegment(Segment* s) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  free_segments_.push_back(pool().ToOffset(s));
}

uint64_t* Spash::RecordOf(const Segment* s) const {
  const uint64_t off = pool().ToOffset(s);
  const uint64_t block = BlockOf(off);
  const uint64_t k = (off - block - kSpashSegmentArea) / sizeof(Segment);
  return pool().At<uint64_t>(block + sizeof(spash::BlockHeader)) + k;
}

void Spash::StoreRecord(Segment* s, unsigned depth, uint64_t prefix) {
  uint64_t* r = RecordOf(s);
  persister().Store(r, depth == 0 ? uint64_t{0} : SealFor(r, RecordPayload(depth, prefix)));
  persister().Flush(r, sizeof(*r));
}

Status Spash::Create() {
  root_ = root<SpashRoot>();
  block_start_.reset(new std::atomic<uint64_t>[pool().heap_size() / kSpashBlockBytes + 1]());
  const unsigned depth = InitialDepth();
  floor_depth_ = depth;
  pm::Persister& p = persister();
  // 2^depth empty segments at depth `depth`, in blocks linked as one list; the root
  // links the list last (CreateRoot).
  const uint64_t n = uint64_t{1} << depth;
  std::vector<uint64_t> segs;
  segs.reserve(n);
  while (segs.size() < n) {
    uint64_t block = 0;
    PMHASH_RETURN_IF_ERROR(NewBlock(spash::kSegmentBlock, /*link=*/false, &block));
    for (unsigned k = 0; k < kSpashSegmentsPerBlock; ++k) {
      const uint64_t off = block + kSpashSegmentArea + k * sizeof(Segment);
      if (segs.size() < n) {
        segs.push_back(off);
      } else {
        free_segments_.push_back(off);
      }
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    auto* s = pool().At<Segment>(segs[i]);
    p.Zero(s, sizeof(Segment));
    p.Flush(s, sizeof(Segment));
    StoreRecord(s, depth, i);
  }
  std::reverse(free_segments_.begin(), free_segments_.end());
  p.Store(&root_->floor_depth, uint64_t{depth});
  p.Store(&root_->usage_saved, SealFor(&root_->usage_saved, 0));
  CreateRoot(kRootLayout, head_block_, 0);  // its fence orders every flush above first
  PMHASH_RETURN_IF_ERROR(
      dir_.Reset(depth, [&](uint64_t i) { return DirEntry::Make(segs[i] >> 8, depth, 0, 0); },
                 /*filter_byte=*/0));
  for (auto& c : depth_count_) c.store(0);
  depth_count_[depth].store(n);
  live_segments_.store(n);
  base_count_ = 0;
  return Status::OK();
}

// ---- Keys and slots -------------------------------------------------------------------

uint64_t Spash::InlineWordFor(std::string_view key, uint64_t h) const {
  // No key word has the form 11, so kFormMask matches nothing.
  return key.size() == 8 && inline_keys_ ? KeyWord::Inline(h) : KeyWord::kFormMask;
}

bool Spash::RecordMatches(uint64_t w, std::string_view key, uint64_t h) const {
  if (KeyWord::Form(w) != KeyWord::kRecord ||
      KeyWord::Fingerprint(w) != (h & KeyWord::kFingerprintMask)) {
    return false;
  }
  if (!records_seen_.load(std::memory_order_relaxed)) {
    records_seen_.store(true, std::memory_order_relaxed);  // a reopened pool's records
  }
  // The fingerprint matched: the record is read (bounded by the codec, reported read).
  return codec().KeyEquals(SlotForm::kRecord, KvWords{KeyWord::RecordOffset(w), h}, key, h);
}

int Spash::MatchIn(const Bucket* bucket, int c, const BucketMatch& m, std::string_view key,
                   uint64_t h) const {
  if (m.inline_eq != 0) return c * 4 + std::countr_zero(m.inline_eq);
  for (unsigned r = m.record; r != 0; r &= r - 1) {
    const int j = std::countr_zero(r);
    if (RecordMatches(Load(&bucket->slot[j].key), key, h)) return c * 4 + j;
  }
  return -1;
}

Spash::Probe Spash::Find(const Segment* s, std::string_view key, uint64_t h,
                         bool want_free) const {
  Probe p;
  const int b = MainBucket(h);
  const uint64_t inline_word = InlineWordFor(key, h);
  persister().NoteRead(&s->bucket[b], sizeof(Bucket));
  const BucketMatch m = MatchBucket(&s->bucket[b], inline_word, h);
  if (m.empty != 0) p.free = b * 4 + std::countr_zero(m.empty);
  if ((p.found = MatchIn(&s->bucket[b], b, m, key, h)) >= 0) return p;
  // The buckets the hints name (the key may be there) and, when a free slot is wanted
  // and the main bucket has none, the others in circular order.
  for (int k = 1; k < 4; ++k) {
    const bool hinted = (m.hints >> k & 1) != 0;
    if (!hinted && !(want_free && p.free < 0)) continue;
    const int c = (b + k) & 3;
    persister().NoteRead(&s->bucket[c], sizeof(Bucket));
    const BucketMatch o = MatchBucket(&s->bucket[c], inline_word, h);
    if (want_free && p.free < 0 && o.empty != 0) p.free = c * 4 + std::countr_zero(o.empty);
    if (hinted && (p.found = MatchIn(&s->bucket[c], c, o, key, h)) >= 0) return p;
  }
  return p;
}

uint64_t Spash::HashOfEntry(uint64_t w, uint64_t prefix, unsigned depth) const {
  if (KeyWord::Form(w) == KeyWord::kInline) {
    return (prefix >> (depth - kSpashMinDepth)) << 61 | (w & KeyWord::kHashMask);
  }
  return KeyHash(codec().Key(SlotForm::kRecord, KvWords{KeyWord::RecordOffset(w), 0}));
}

void Spash::EntryKeyValue(uint64_t w, uint64_t v, uint64_t h, std::string* key,
                          std::string* value) const {
  if (KeyWord::Form(w) == KeyWord::kInline) {
    char k[8];
    UnhashKey8(h, hash_seed(), k);
    key->assign(k, 8);
    value->assign(reinterpret_cast<const char*>(&v), 8);
    return;
  }
  const KvWords words{KeyWord::RecordOffset(w), 0};
  key->assign(codec().Key(SlotForm::kRecord, words));
  value->assign(codec().Value(SlotForm::kRecord, words));
}

// ---- Records: compacted flush (Sec. III-C) ----------------------------------------------

Status Spash::NewChunk(uint64_t* offset) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  if (free_chunks_.empty()) {
    uint64_t block = 0;
    PMHASH_RETURN_IF_ERROR(NewBlock(spash::kChunkBlock, /*link=*/true, &block));
    for (unsigned i = kSpashChunksPerBlock; i > 0; --i) {
      free_chunks_.push_back(block + kSpashChunkArea + (i - 1) * kSpashChunkBytes);
    }
  }
  *offset = free_chunks_.back();
  free_chunks_.pop_back();
  return Status::OK();
}

bool Spash::TakeOrphan(unsigned cls, uint64_t* offset) {
  if (orphans_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(alloc_mu_);
  if (free_units_[cls].empty()) return false;
  *offset = free_units_[cls].back();
  free_units_[cls].pop_back();
  orphans_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

Status Spash::NewRecord(std::string_view key, std::string_view value, uint64_t h,
                        uint64_t* word) {
  PMHASH_RETURN_IF_ERROR(SlotCodec::CheckSizes(key, value));
  const uint64_t bytes = SlotCodec::RecordBytes(key.size(), value.size());
  pm::Persister& p = persister();
  if (!records_seen_.load(std::memory_order_relaxed)) {
    records_seen_.store(true, std::memory_order_relaxed);
  }
  if (bytes > kSpashMaxChunked) {
    uint64_t off = 0;
    PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &off));  // written, flushed
    *word = KeyWord::Record(h, off, /*chunked=*/false);
    return Status::OK();
  }
  const uint64_t units = RecordUnits(bytes);
  const unsigned cls = ClassOfUnits(units);
  uint64_t off = 0;
  {
    StateUse ts(*this);
    if (!ts->free[cls].empty()) {
      off = ts->free[cls].back();  // a freed record's room (per-thread free lists)
      ts->free[cls].pop_back();
    } else if (TakeOrphan(cls, &off)) {
      // Room that the last open found free in a partly used chunk.
    } else if (compacted_flush_) {
      // Appended to the thread's 256-byte chunk; a full chunk is written back at once,
      // as one XPLine (the compacted flush), and its unused tail freed.
      if (ts->chunk == 0 || ts->chunk_used + units * 16 > kSpashChunkBytes) {
        if (ts->chunk != 0) {
          const uint64_t rest = (kSpashChunkBytes - ts->chunk_used) / 16;
          if (rest != 0) ts->free[ClassOfUnits(rest)].push_back(ts->chunk + ts->chunk_used);
          if (chunk_write_back_ && p.mode() == PersistMode::kEadr) {
            p.WriteBack(pool().At<char>(ts->chunk), kSpashChunkBytes);
          }
        }
        PMHASH_RETURN_IF_ERROR(NewChunk(&ts->chunk));
        ts->chunk_used = 0;
      }
      off = ts->chunk + ts->chunk_used;
      ts->chunk_used += static_cast<uint32_t>(units * 16);
    } else {
      // Without compaction each record takes a chunk of its own, written back alone: the
      // layout of one block per small record.
      PMHASH_RETURN_IF_ERROR(NewChunk(&off));
    }
  }
  codec().WriteRecord(off, key, value);
  // adr: durable before it is published (the caller fences); eadr without compaction:
  // written back on its own (Table I's write-f for a new, cold entry).
  if (p.mode() == PersistMode::kAdr) {
    p.Flush(pool().At<char>(off), bytes);
  } else if (!compacted_flush_ && chunk_write_back_ && p.mode() == PersistMode::kEadr) {
    p.WriteBack(pool().At<char>(off), bytes);
  }
  *word = KeyWord::Record(h, off, /*chunked=*/true);
  return Status::OK();
}

void Spash::FreeRecord(uint64_t w) {
  const uint64_t off = KeyWord::RecordOffset(w);
  if (!KeyWord::Chunked(w)) {
    codec().ReleaseRecord(off);
    return;
  }
  const uint64_t units = RecordUnits(codec().RecordBytesAt(off));
  if (units == 0 || units > kSpashRecordClasses) return;  // damaged: leaked, not reused
  StateUse ts(*this);
  if (compacted_flush_) {
    ts->free[ClassOfUnits(units)].push_back(off);
  } else {
    // A chunk of its own: the whole chunk is free again.
    std::lock_guard<std::mutex> lock(alloc_mu_);
    free_chunks_.push_back(off);
  }
}

// ---- The commit phase ---------------------------------------------------------------------

// A segment's range held by a writer, and what its commit changes.
struct Spash::Commit {
  struct Part {
    uint64_t first, count, word;  // entries [first, first + count) get `word` on release
  };
  static constexpr int kMaxParts = 48;  // one part per split of one operation, and one
  static constexpr int kMaxDirty = 12;

  Directory::Held held;
  Part parts[kMaxParts];
  int nparts = 0;
  bool changed = false;    // PM and directory words change: versions bumped on release
  bool in_region = false;  // the commit runs in an atomic region (htm_emulated)
  const void* dirty[kMaxDirty];  // lines to flush before the fence (adr)
  int ndirty = 0;
  uint64_t to_free[2];  // record words freed once the commit is durable
  int nfree = 0;
  Segment* retired[kMaxParts];  // segments split away, reused once the commit is durable
  int nretired = 0;
  const void* write_back = nullptr;  // eadr, Table I: a new copy written back after
  uint64_t write_back_bytes = 0;

  void Init(const Directory::Held& h) {
    held = h;
    parts[0] = {h.first, h.count, h.word};
    nparts = 1;
  }
  int PartOf(uint64_t index) const {
    for (int k = 0; k < nparts; ++k) {
      if (index >= parts[k].first && index < parts[k].first + parts[k].count) return k;
    }
    return 0;
  }
  void Dirty(const void* p) {
    const auto line = reinterpret_cast<uintptr_t>(p) / pm::kCacheLine;
    for (int i = 0; i < ndirty; ++i) {
      if (reinterpret_cast<uintptr_t>(dirty[i]) / pm::kCacheLine == line) return;
    }
    if (ndirty < kMaxDirty) dirty[ndirty++] = p;
  }
};

Spash::Acquired Spash::Acquire(const Directory::Place& place, uint64_t seen, bool try_region,
                               Commit* c, int attempt) {
  if (try_region && rtm_) {
    // From here to Finish's release one RTM transaction: an abort (a conflict, or the
    // AbortRetry / AbortFallback below and in the commit) comes back here with every
    // store undone.
    // The injected abort is drawn outside: an abort would undo the draw's state too.
    const bool inject = Draw(&MyState().rng, htm_abort_rate_);
    const unsigned status = htm::Begin();
    if (status != htm::kStarted) {
      return htm::ExplicitCode(status) == htm::kFallbackCode ? Acquired::kAbortedForGood
                                                              : Acquired::kAborted;
    }
    Directory::Held held;
    if (inject || Directory::Load(place) != seen || !dir_.Subscribe(place, &held)) {
      htm::AbortRetry();
      return Acquired::kAborted;  // not reached: the abort resumes at Begin
    }
    c->Init(held);
    c->in_region = true;
    return Acquired::kHeld;
  }
  if (try_region) {
    pm::Persister& p = persister();
    if (p.BeginAtomic() != pm::AtomicOutcome::kStarted) return Acquired::kAborted;
    // Inside: the entry must be as prepared and not held (the fallback lock, subscribed
    // to), and the draw may abort it as a conflict would.
    Directory::Held held;
    if (Directory::Load(place) != seen || Draw(&MyState().rng, htm_abort_rate_) ||
        dir_.Lock(place, &held) != Directory::LockResult::kLocked) {
      p.AbortAtomic();
      return Acquired::kAborted;
    }
    c->Init(held);
    c->in_region = true;
    return Acquired::kHeld;
  }
  Directory::Held held;
  const bool holding = group_.owner == this && group_.n != 0;
  switch (dir_.Lock(place, &held, /*copy=*/!holding)) {
    case Directory::LockResult::kLocked:
      break;
    case Directory::LockResult::kBusy:
      if (!FlushBeforeWaiting()) SpinBackoff(attempt);  // perhaps a range this batch holds
      return Acquired::kRetry;
    case Directory::LockResult::kMoved:
      FlushBeforeWaiting();  // a stage copy waits for every range its partition holds
      return Acquired::kRetry;
  }
  c->Init(held);
  if (DirEntry::Count(held.word) == kUnknownCount) {
    // Not known since a clean open: counted now, under the lock.
    const Segment* s = SegmentAt(held.word);
    unsigned n = 0;
    for (int i = 0; i < kSlots; ++i) n += !KeyWord::Empty(Load(&KeyWordOf(s, i)));
    c->parts[0].word = DirEntry::WithCount(held.word, n);
    c->changed = true;
  }
  return Acquired::kHeld;
}

void Spash::ReleaseChanged(const Directory::Held& held, uint64_t first, uint64_t count,
                           uint64_t word) {
  dir_.ReleaseAs(held, first, count,
                 DirEntry::Make(DirEntry::Segment(word), DirEntry::Depth(word),
                                DirEntry::Count(word), DirEntry::Version(held.word) + 1));
}

bool Spash::Finish(Commit& c) {
  pm::Persister& p = persister();
  const bool in_rtm = c.in_region && rtm_;  // ends after the release below
  if (c.in_region && !rtm_) {
    // An abort injected at the end undoes every store of the region, as a conflict
    // detected at commit would.
    if (Draw(&MyState().rng, htm_abort_rate_)) {
      p.AbortAtomic();
    } else if (p.EndAtomic() == pm::AtomicOutcome::kCommitted) {
      c.in_region = false;
    }
    if (c.in_region) {
      dir_.Release(c.held);
      htm_aborts_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    htm_commits_.fetch_add(1, std::memory_order_relaxed);
  }
  if (c.changed) {
    if (Group* g = GroupFor(c)) {
      // Held until the group's fence: no reader validates it, no writer builds on it,
      // and its records stay allocated, before it is durable. Its lines are flushed
      // then too: a flush still under way would hold up the next commit's lock (a
      // locked instruction waits for it as a fence does).
      if (g->n == kMaxGroup || g->nlines + c.ndirty > kMaxGroupLines) FlushGroup(*g);
      g->held[g->n++] = {c.held, c.parts[0].word, {c.to_free[0], c.to_free[1]}, c.nfree};
      for (int i = 0; i < c.ndirty; ++i) g->lines[g->nlines++] = c.dirty[i];
      return true;
    }
    for (int i = 0; i < c.ndirty; ++i) p.Flush(c.dirty[i], 1);
    p.Fence();  // durable (adr) or ordered (eadr) before any reader can validate it
    for (int k = 0; k < c.nparts; ++k) {
      ReleaseChanged(c.held, c.parts[k].first, c.parts[k].count, c.parts[k].word);
    }
  } else if (!in_rtm) {  // a transaction subscribed to the range: nothing to give back
    dir_.Release(c.held);
  }
  if (in_rtm) {
    htm::End();
    c.in_region = false;
    htm_commits_.fetch_add(1, std::memory_order_relaxed);
  }
  if (c.write_back != nullptr) p.WriteBack(c.write_back, c.write_back_bytes);
  for (int i = 0; i < c.nfree; ++i) FreeRecord(c.to_free[i]);
  for (int i = 0; i < c.nretired; ++i) FreeSegment(c.retired[i]);  // their free records durable
  return true;
}

// ---- Group commit (option group_commit) ---------------------------------------------------

thread_local Spash::Group Spash::group_;

Spash::Group* Spash::GroupFor(const Commit& c) {
  if (group_.owner != this || c.nparts != 1 || c.nretired != 0 || c.write_back != nullptr) {
    return nullptr;
  }
  return &group_;
}

void Spash::FlushGroup(Group& g) {
  if (g.n == 0) return;
  pm::Persister& p = persister();
  for (int i = 0; i < g.nlines; ++i) p.Flush(g.lines[i], 1);
  g.nlines = 0;
  p.Fence();  // every grouped commit durable (adr) or ordered (eadr) at once
  for (int i = 0; i < g.n; ++i) {
    const Deferred& d = g.held[i];
    ReleaseChanged(d.held, d.held.first, d.held.count, d.word);
    for (int k = 0; k < d.nfree; ++k) FreeRecord(d.to_free[k]);
  }
  g.n = 0;
}

bool Spash::FlushBeforeWaiting() {
  if (group_.owner != this || group_.n == 0) return false;
  FlushGroup(group_);
  return true;
}

void Spash::BeginWriteBatch() {
  if (group_commit_) group_.owner = this;
}

void Spash::EndWriteBatch() {
  if (group_.owner != this) return;
  if (group_.n != 0) {
    // The first release lets a stage copy finish and retire the table the others are
    // released in: stay in an epoch until the last (inside an op, the op's guard does).
    EpochReclaimer::Guard guard(dir_.epochs());
    FlushGroup(group_);
  }
  group_.owner = nullptr;
}

// ---- Search ---------------------------------------------------------------------------------

[[gnu::always_inline]] inline void Spash::PrefetchHinted(const Directory::Place& place,
                                                         uint64_t h) const {
  if (hint_) persister().Prefetch(&SegmentAt(Directory::Hint(place))->bucket[MainBucket(h)]);
}

template <bool kHooked>
[[gnu::always_inline]] inline QuickAnswer Spash::FirstGet(uint64_t h) {
  EpochReclaimer::Slot* const stay = dir_.epochs().EnterQuickly();
  if (stay == nullptr) [[unlikely]] return {0, Optimistic::kRetry};
  const QuickAnswer a = FirstGetEntered<kHooked>(h);
  EpochReclaimer::Leave(stay);
  return a;
}

// FirstGet's search, inside the epoch it entered.
template <bool kHooked>
[[gnu::always_inline]] inline QuickAnswer Spash::FirstGetEntered(uint64_t h) {
  const OptimisticReadScope unchecked_by_tsan;  // validated by the directory entry
  const Directory::Place place = dir_.Resolve(h);
  if (filter_) {
    // The entry asked for now, its load later: a miss the byte answers does not wait for
    // the entry (a load would hold its retirement), a key it lets through does not wait
    // for the byte before asking.
    __builtin_prefetch(&place.table->entries[place.index], 0, 3);
    if constexpr (kHooked) read_hook_(h);
    if (!Directory::MayHold(place, h)) return {0, Optimistic::kAbsent};
  }
  PrefetchHinted(place, h);
  const uint64_t e = Directory::Load(place);
  if constexpr (kHooked) read_hook_(h);
  if (DirEntry::Busy(e)) return {0, Optimistic::kRetry};
  const Segment* s = SegmentAt(e);
  const int b = MainBucket(h);
  const uint64_t want = KeyWord::Inline(h);
  const Bucket* bucket = &s->bucket[b];
  const KeyWords words = ReadKeyWords(bucket);
  unsigned eq = Matching(words, want);
  if (eq == 0) {
    // Overflow buckets only where the main bucket's hints point; none may hold a record.
    uint64_t forms = Forms(words);
    for (unsigned rest = HintBits(words) & 0xe; eq == 0 && rest != 0; rest &= rest - 1) {
      bucket = &s->bucket[(b + std::countr_zero(rest)) & 3];
      const KeyWords more = ReadKeyWords(bucket);
      eq = Matching(more, want);
      forms |= Forms(more);
    }
    if (eq == 0) {
      const bool stands = (forms & KeyWord::kRecord) == 0 && Directory::Load(place) == e;
      return {0, stands ? Optimistic::kAbsent : Optimistic::kRetry};
    }
  }
  const uint64_t v = Load(&bucket->slot[std::countr_zero(eq)].value);
  if (Directory::Load(place) != e) return {0, Optimistic::kRetry};
  return {v, Optimistic::kFound};
}

__attribute__((noinline)) QuickAnswer Spash::FirstGetHooked(uint64_t h) {
  return FirstGet<true>(h);
}

QuickAnswer Spash::QuickGet(uint64_t hash, uint64_t key_word) {
  (void)key_word;  // an 8-byte key's inline word is made of its hash
  return FirstGet<false>(hash);
}

Status Spash::DoGet(std::string_view key, uint64_t h, std::string* value) {
  // The common search first (issue 29's first try: the fewer instructions a lookup takes,
  // the more lookups' misses are in flight at once): an 8-byte key inline in its main
  // bucket or in an overflow bucket its hints name, or absent from them, none holding a
  // record. The kit's Get calls it as QuickGet before it comes here; here it runs when
  // that is off (a read hook set, for the tests). Anything else (counted reads, a writer
  // in the segment, a record, options that change the search) is GetFull, out of line.
  if (reads_unnoted() && first_try_ && key.size() == sizeof(uint64_t)) [[likely]] {
    const QuickAnswer a = read_hook_ ? FirstGetHooked(h) : FirstGet<false>(h);
    if (a.answer == Optimistic::kFound) {
      AssignWord(value, a.value_word);
      return Status::OK();
    }
    if (a.answer == Optimistic::kAbsent) return Status::NotFound();
  }
  return GetFull(key, h, value);
}

// Every search DoGet's first try does not answer. Out of line: its frame and calls stay
// off the common path.
__attribute__((noinline)) Status Spash::GetFull(std::string_view key, uint64_t h,
                                                std::string* value) {
  EpochReclaimer::Guard guard(dir_.epochs());
  if (read_lock_) return GetLocked(key, h, value);
  const OptimisticReadScope unchecked_by_tsan;  // validated by the directory entry
  const uint64_t inline_word = InlineWordFor(key, h);
  const int b = MainBucket(h);
  for (int attempt = 0;; ++attempt) {
    const Directory::Place place = dir_.Resolve(h);
    if (filter_) {
      __builtin_prefetch(&place.table->entries[place.index], 0, 3);  // as DoGet
      if (!Directory::MayHold(place, h)) return Status::NotFound();
    }
    const uint64_t e = Directory::Load(place);
    if (DirEntry::Busy(e)) {
      SpinBackoff(attempt);
      continue;
    }
    const Segment* s = SegmentAt(e);
    const Bucket* mb = &s->bucket[b];
    // nta_reads (not in the paper): the bucket is asked for as non-temporal, so that the
    // stream of buckets, each read once in a long while, does not evict the directory
    // from the last-level cache.
    if (nta_reads_) _mm_prefetch(reinterpret_cast<const char*>(mb), _MM_HINT_NTA);
    persister().NoteRead(mb, sizeof(Bucket));
    const BucketMatch m = MatchBucket(mb, inline_word, h);
    int found = MatchIn(mb, b, m, key, h);
    // Overflow buckets only where the main bucket's hints point (slot 0's bit is 0):
    // otherwise a miss stops at the main bucket.
    for (unsigned rest = m.hints & 0xe; found < 0 && rest != 0; rest &= rest - 1) {
      const int c = (b + std::countr_zero(rest)) & 3;
      persister().NoteRead(&s->bucket[c], sizeof(Bucket));
      found = MatchIn(&s->bucket[c], c, MatchBucket(&s->bucket[c], inline_word, h), key, h);
    }
    if (found < 0) {
      if (Directory::Load(place) == e) return Status::NotFound();
      continue;
    }
    const Slot* hit = &s->bucket[found / 4].slot[found % 4];
    const uint64_t w = Load(&hit->key);
    if (KeyWord::Form(w) == KeyWord::kInline) {
      const uint64_t v = Load(&hit->value);
      if (Directory::Load(place) != e) continue;
      value->assign(reinterpret_cast<const char*>(&v), sizeof(v));
      return Status::OK();
    }
    std::string copy(codec().Value(SlotForm::kRecord, KvWords{KeyWord::RecordOffset(w), 0}));
    if (Directory::Load(place) != e) continue;
    *value = std::move(copy);
    return Status::OK();
  }
}

Status Spash::GetLocked(std::string_view key, uint64_t h, std::string* value) {
  // Spash "w/ write & read lock" (Fig. 12c): the reader takes the segment's lock too.
  for (int attempt = 0;; ++attempt) {
    const Directory::Place place = dir_.Resolve(h);
    Directory::Held held;
    const Directory::LockResult r = dir_.Lock(place, &held);
    if (r != Directory::LockResult::kLocked) {
      if (r == Directory::LockResult::kBusy) SpinBackoff(attempt);
      continue;
    }
    const Segment* s = SegmentAt(held.word);
    const Probe p = Find(s, key, h, /*want_free=*/false);
    Status st = Status::NotFound();
    if (p.found >= 0) {
      const Slot& sl = s->bucket[p.found / 4].slot[p.found % 4];
      const uint64_t w = sl.key;
      if (KeyWord::Form(w) == KeyWord::kInline) {
        value->assign(reinterpret_cast<const char*>(&sl.value), 8);
      } else {
        value->assign(codec().Value(SlotForm::kRecord, KvWords{KeyWord::RecordOffset(w), 0}));
      }
      st = Status::OK();
    }
    dir_.Release(held);
    return st;
  }
}

void Spash::PrefetchAhead(uint64_t hash, bool skip_filtered, unsigned record_lag) const {
  // The paper's pipeline (Fig. 5a) in stages, one call each: step 1 (the directory) for
  // this key now; step 2 (its main bucket) for the key kPrefetchLag calls ago, whose
  // entry has had that long to arrive; steps 3-4 (its slot, its out-of-line record) for
  // the key record_lag calls ago, whose bucket has had the calls between. A batch's keys
  // come one call each, `depth` calls before their operation runs.
  EpochReclaimer::Guard guard(dir_.epochs());
  const Directory::Place place = dir_.Resolve(hash);
  if (filter_) __builtin_prefetch(&place.table->filter[place.index], 0, 3);
  __builtin_prefetch(&place.table->entries[place.index], 0, 3);
  ThreadState& ts = MyState();
  if (IsShared(ts)) return;  // threads beyond the table keep no pipeline
  ts.pipeline_skip_filtered = skip_filtered;
  ts.pipeline_record_lag = static_cast<uint8_t>(record_lag);
  PipelineStages(ts, hash, /*live=*/true);
}

void Spash::PrefetchAdvance() const {
  ThreadState& ts = MyState();
  if (IsShared(ts)) return;
  EpochReclaimer::Guard guard(dir_.epochs());
  PipelineStages(ts, 0, /*live=*/false);
}

void Spash::PipelineStages(ThreadState& ts, uint64_t hash, bool live) const {
  const uint32_t pos = ts.pipeline_pos++;
  const unsigned slot = pos % kPipelineRing;
  ts.pipeline[slot] = hash;
  ts.pipeline_live = static_cast<uint8_t>(live ? ts.pipeline_live | 1u << slot
                                               : ts.pipeline_live & ~(1u << slot));
  const bool skip_filtered = ts.pipeline_skip_filtered;
  const unsigned bucket_slot = (pos - kPrefetchLag) % kPipelineRing;
  if ((ts.pipeline_live >> bucket_slot & 1) != 0) {
    const uint64_t earlier = ts.pipeline[bucket_slot];
    const Directory::Place at = dir_.Resolve(earlier);
    // A search its byte (asked for then) answers needs neither its entry nor its bucket.
    if (!skip_filtered || Directory::MayHold(at, earlier)) {
      const uint64_t e = Directory::Load(at);
      if (!DirEntry::Busy(e)) persister().Prefetch(&SegmentAt(e)->bucket[MainBucket(earlier)]);
    }
  }
  const unsigned record_lag = ts.pipeline_record_lag;
  if (record_lag == 0 || !prefetch_records_ || !records_seen_.load(std::memory_order_relaxed)) {
    return;
  }
  const unsigned record_slot = (pos - record_lag) % kPipelineRing;
  if ((ts.pipeline_live >> record_slot & 1) == 0) return;
  const uint64_t oldest = ts.pipeline[record_slot];
  if (skip_filtered && !Directory::MayHold(dir_.Resolve(oldest), oldest)) return;
  PrefetchRecords(oldest);
}

void Spash::PrefetchRecords(uint64_t h) const {
  const OptimisticReadScope unchecked_by_tsan;  // prefetches only: nothing is used
  const uint64_t e = Directory::Load(dir_.Resolve(h));
  if (DirEntry::Busy(e)) return;
  const Bucket* b = &SegmentAt(e)->bucket[MainBucket(h)];
  const BucketMatch m = MatchBucket(b, KeyWord::kFormMask, h);
  for (unsigned r = m.record; r != 0; r &= r - 1) {
    const uint64_t w = Load(&b->slot[std::countr_zero(r)].key);
    if (KeyWord::Form(w) != KeyWord::kRecord) continue;  // changed since
    // The record's first two lines: a chunked record (<= 128 bytes) starting in the
    // first half of a line fits them, and the key the search compares comes first.
    const char* at = pool().At<char>(KeyWord::RecordOffset(w));
    persister().Prefetch(at);
    persister().Prefetch(at + pm::kCacheLine);
  }
}

// ---- Insert, update, put ----------------------------------------------------------------------

Status Spash::DoWrite(std::string_view key, std::string_view value, uint64_t h, WriteMode mode) {
  EpochReclaimer::Guard guard(dir_.epochs());
  const bool as_inline = Inlinable(key, value);
  const bool in_place = htm_ && persister().mode() == PersistMode::kEadr;
  uint64_t record = 0;  // the key word of a record this write publishes (0: none yet)
  unsigned aborts = 0;
  Status result;
  for (int attempt = 0;; ++attempt) {
    // ---- Preparation, no lock (Sec. IV-A steps 1-4): segment, main bucket, slot, record.
    const Directory::Place place = dir_.Resolve(h);
    // An update of a key the byte says is absent needs nothing else (as a search; first
    // time round only, before anything is allocated).
    if (filter_ && mode == WriteMode::kUpdate && attempt == 0 && !Directory::MayHold(place, h)) {
      return Status::NotFound();
    }
    PrefetchHinted(place, h);
    const uint64_t e = Directory::Load(place);
    // The commit sets the key's filter bits: its byte asked for now, beside the entry.
    if (filter_) __builtin_prefetch(&place.table->filter[place.index], 1, 3);
    if (DirEntry::Busy(e)) {  // a writer, or a stage copy: both end soon (this batch's too)
      if (!FlushBeforeWaiting()) SpinBackoff(attempt);
      continue;
    }
    Probe p;
    {
      const OptimisticReadScope unchecked_by_tsan;  // validated in the commit phase
      p = Find(SegmentAt(e), key, h, mode != WriteMode::kUpdate);
    }
    const bool writes = p.found >= 0 ? mode != WriteMode::kInsert : mode != WriteMode::kUpdate;
    if (writes && !as_inline && record == 0 &&
        !(in_place && p.found >= 0 && SameSizeRecord(SegmentAt(e), p.found, key, value))) {
      PMHASH_RETURN_IF_ERROR(NewRecord(key, value, h, &record));
      persister().Fence();  // adr: the record durable before any commit store
    }
    // ---- Commit phase: a region (htm_emulated) until it failed htm_retries times, then
    // the fallback lock.
    Commit c;
    const bool try_region = htm_ && aborts < htm_retries_;
    const Acquired a = Acquire(place, e, try_region, &c, attempt);
    if (a == Acquired::kAborted || a == Acquired::kAbortedForGood) {
      aborts = a == Acquired::kAborted ? aborts + 1 : htm_retries_;
      htm_aborts_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (a == Acquired::kRetry) continue;
    if (!try_region && htm_) htm_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    if (!SameVersion(c.held.word, e)) {
      // A writer committed between the preparation and the lock: prepare again, now
      // under the lock (in a region the validation above has already refused this).
      p = Find(SegmentAt(c.held.word), key, h, mode != WriteMode::kUpdate);
    }
    Outcome o = Outcome::kDone;
    if (p.found >= 0) {
      if (mode == WriteMode::kInsert) {
        result = Status::AlreadyExists();
      } else {
        result = UpdateLocked(c, p.found, key, value, h, &record, &o);
      }
    } else if (mode == WriteMode::kUpdate) {
      result = Status::NotFound();
    } else {
      o = InsertLocked(c, p.free, key, value, h, &record, &result);
    }
    if (o == Outcome::kNeedsFallback) {
      if (rtm_) htm::AbortFallback();  // resumes in Acquire: kAbortedForGood
      persister().AbortAtomic();
      dir_.Release(c.held);
      aborts = htm_retries_;
      continue;
    }
    if (!Finish(c)) {
      ++aborts;
      continue;
    }
    if (o == Outcome::kNeedsDoubling || o == Outcome::kBlocked) FlushBeforeWaiting();
    if (o == Outcome::kNeedsDoubling) {
      if (!dir_.Double(c.held.table)) {
        if (record != 0) FreeRecord(record);
        return Directory::OutOfMemory(c.held.table->depth + 1);
      }
      continue;
    }
    if (o == Outcome::kBlocked) {
      dir_.WaitForTransition();
      continue;
    }
    if (record != 0) FreeRecord(record);  // prepared, not published
    if (result.ok() && p.found < 0) AddDelta(1);
    if (c.nparts > 1 && dir_.epochs().HasRetired()) dir_.epochs().Collect();
    return result;
  }
}

Spash::Outcome Spash::InsertLocked(Commit& c, int free_slot, std::string_view key,
                                   std::string_view value, uint64_t h, uint64_t* record,
                                   Status* result) {
  const uint64_t index = c.held.table->Index(h);
  for (int splits = 0;; ++splits) {
    const int k = c.PartOf(index);
    Segment* s = SegmentAt(c.parts[k].word);
    if (splits > 0) free_slot = Find(s, key, h, /*want_free=*/true).free;
    if (free_slot >= 0) {
      InsertAt(c, k, free_slot, value, h, record);
      *result = Status::OK();
      return Outcome::kDone;
    }
    if (c.in_region) return Outcome::kNeedsFallback;  // a split runs under the lock
    if (!resize_enabled()) {
      *result = Status::TableFull("spash: the key's segment is full and resize is off");
      return Outcome::kDone;
    }
    Outcome o = Outcome::kDone;
    *result = Split(c, k, h, &o);
    if (!result->ok() || o != Outcome::kDone) return o;
  }
}

void Spash::InsertAt(Commit& c, int k, int slot, std::string_view value, uint64_t h,
                     uint64_t* record) {
  pm::Persister& p = persister();
  Segment* s = SegmentAt(c.parts[k].word);
  const int b = MainBucket(h), cb = slot / 4;
  if (cb != b) {
    // The hint first: a crash between keeps it without its entry (harmless), and recovery
    // would rebuild it anyway.
    SetHint(c, s, b, (cb - b) & 3, true);
    overflow_inserts_.fetch_add(1, std::memory_order_relaxed);
  }
  Slot& sl = s->bucket[cb].slot[slot % 4];
  const bool as_inline = *record == 0;
  p.Store(&sl.value, as_inline ? ValueWord(value) : uint64_t{0});
  // The commit: one 8-byte store, keeping the bucket's hint bit.
  p.Store(&sl.key, (as_inline ? KeyWord::Inline(h) : *record) | (sl.key & KeyWord::kHint));
  c.Dirty(&sl);
  *record = 0;
  c.parts[k].word = DirEntry::WithCount(c.parts[k].word, DirEntry::Count(c.parts[k].word) + 1);
  c.changed = true;
  if (filter_) NoteInFilter(c, k, h);
}

void Spash::NoteInFilter(Commit& c, int k, uint64_t h) {
  Directory::Table* t = c.held.table;
  const uint64_t index = t->Index(h);
  const uint8_t f = Directory::FilterAt(t, index);
  if (f != EntryFilter::kUnknown) {
    Directory::StoreFilter(t, index, static_cast<uint8_t>(f | EntryFilter::Bits(h)));
    return;
  }
  // Not known since an open (or saturated): rebuilt from the part's segment, which holds
  // the new key already (a region's stores are in memory while it runs).
  const Commit::Part& part = c.parts[k];
  StoreSegmentFilters(t, part.word, part.first, part.first, part.count);
}

void Spash::StoreSegmentFilters(Directory::Table* t, uint64_t entry, uint64_t range_first,
                                uint64_t first, uint64_t count) {
  const unsigned d = DirEntry::Depth(entry);
  const Segment* s = SegmentAt(entry);
  const uint64_t prefix = range_first >> (t->depth - d);
  uint64_t hashes[kSlots];
  int n = 0;
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t w = Load(&KeyWordOf(s, i)) & ~KeyWord::kHint;
    if (!KeyWord::Empty(w)) hashes[n++] = HashOfEntry(w, prefix, d);
  }
  StoreFilters(t, first, count, hashes, n);
}

void Spash::RefineFilters(void* ctx, Directory::Table* next, uint64_t first, uint64_t count) {
  // A doubling's stage: the bytes both halves inherited hold the bits of twice their keys.
  auto* self = static_cast<Spash*>(ctx);
  for (uint64_t i = first; i < first + count;) {
    const uint64_t e = next->entries[i].load(std::memory_order_relaxed);
    const uint64_t range = uint64_t{1} << (next->depth - DirEntry::Depth(e));
    const uint64_t end = std::min((i & ~(range - 1)) + range, first + count);
    self->StoreSegmentFilters(next, e, i & ~(range - 1), i, end - i);
    i = end;
  }
}

void Spash::StoreFilters(Directory::Table* t, uint64_t first, uint64_t count,
                         const uint64_t* hashes, int n) {
  // Each byte computed whole before its one store: a reader sees the old byte or the
  // new, both with the bits of every key the range holds. 64 entries at a time.
  uint64_t index[kSlots];
  for (int j = 0; j < n; ++j) index[j] = t->Index(hashes[j]);
  for (uint64_t base = first; base < first + count; base += 64) {
    const uint64_t m = std::min<uint64_t>(64, first + count - base);
    uint8_t bytes[64] = {};
    for (int j = 0; j < n; ++j) {
      const uint64_t i = index[j] - base;  // outside the window: wraps past m
      if (i < m) bytes[i] |= EntryFilter::Bits(hashes[j]);
    }
    for (uint64_t i = 0; i < m; ++i) Directory::StoreFilter(t, base + i, bytes[i]);
  }
}

void Spash::SetHint(Commit& c, Segment* s, int b, int j, bool on) {
  uint64_t* w = &s->bucket[b].slot[j].key;
  const uint64_t want = on ? (*w | KeyWord::kHint) : (*w & ~KeyWord::kHint);
  if (want == *w) return;
  persister().Store(w, want);
  c.Dirty(w);
}

bool Spash::SameSizeRecord(const Segment* s, int slot, std::string_view key,
                           std::string_view value) const {
  const OptimisticReadScope unchecked_by_tsan;  // a hint; the commit phase checks again
  const uint64_t w = Load(&KeyWordOf(s, slot));
  return KeyWord::Form(w) == KeyWord::kRecord &&
         codec().RecordBytesAt(KeyWord::RecordOffset(w)) ==
             SlotCodec::RecordBytes(key.size(), value.size());
}

Status Spash::UpdateLocked(Commit& c, int slot, std::string_view key, std::string_view value,
                           uint64_t h, uint64_t* record, Outcome* outcome) {
  pm::Persister& p = persister();
  const int k = c.PartOf(c.held.table->Index(h));
  Segment* s = SegmentAt(c.parts[k].word);
  Slot& sl = s->bucket[slot / 4].slot[slot % 4];
  const uint64_t old = sl.key;
  const uint64_t hint = old & KeyWord::kHint;
  const bool as_inline = Inlinable(key, value);
  const bool eadr = p.mode() == PersistMode::kEadr;
  // Table I: the detector is asked in eadr only (in adr every write is flushed anyway).
  const bool hot = eadr && update_flush_ == UpdateFlush::kAdaptive && hot_.Access(h);
  if (eadr) (hot ? hot_updates_ : cold_updates_).fetch_add(1, std::memory_order_relaxed);
  c.changed = true;
  if (as_inline && KeyWord::Form(old) == KeyWord::kInline) {
    // In place: one failure-atomic 8-byte store. Table I: an 8-byte value is <= 64
    // bytes, so it is never written back, hot or cold (unless update_flush=always).
    p.Store(&sl.value, ValueWord(value));
    c.Dirty(&sl);
    if (eadr && update_flush_ == UpdateFlush::kAlways) {
      c.write_back = &sl;
      c.write_back_bytes = sizeof(Slot);
    }
    return Status::OK();
  }
  if (!as_inline && *record == 0) {
    // In place inside an atomic region (htm_emulated, eadr): the region makes the
    // multi-word write all-or-nothing, as the paper's HTM does. Only a record of the
    // same size; the rest is out of place.
    if (c.in_region && eadr && SameSizeRecord(s, slot, key, value)) {
      const uint64_t off = KeyWord::RecordOffset(old);
      codec().WriteRecord(off, key, value);
      in_place_updates_.fetch_add(1, std::memory_order_relaxed);
      TableOneWriteBack(c, pool().At<char>(off), codec().RecordBytesAt(off), hot);
      return Status::OK();
    }
    if (c.in_region) {
      // A new record is written outside regions (an abort would undo its bytes): the
      // fallback path prepares it.
      *outcome = Outcome::kNeedsFallback;
      return Status::OK();
    }
    PMHASH_RETURN_IF_ERROR(NewRecord(key, value, h, record));
    p.Fence();
  }
  // Out of place: without HTM a write longer than 8 bytes is not failure-atomic.
  if (as_inline) {
    // record -> inline: the value word first (unused in a record slot), then the commit.
    p.Store(&sl.value, ValueWord(value));
    p.Store(&sl.key, KeyWord::Inline(h) | hint);
  } else {
    p.Store(&sl.key, *record | hint);  // the commit: the new record's pointer
    if (KeyWord::Form(old) == KeyWord::kInline) p.Store(&sl.value, uint64_t{0});
    const uint64_t off = KeyWord::RecordOffset(*record);
    TableOneWriteBack(c, pool().At<char>(off), codec().RecordBytesAt(off), hot);
    *record = 0;
  }
  c.Dirty(&sl);
  if (KeyWord::Form(old) == KeyWord::kRecord) c.to_free[c.nfree++] = old;
  return Status::OK();
}

void Spash::TableOneWriteBack(Commit& c, const void* at, uint64_t bytes, bool hot) {
  // Table I (eadr): hot entries and cold ones of <= 64 bytes stay in the persistent cache;
  // cold ones over 64 bytes are written back after the commit (never a non-temporal store).
  if (persister().mode() != PersistMode::kEadr || update_flush_ == UpdateFlush::kNever) return;
  if (update_flush_ == UpdateFlush::kAlways || (!hot && bytes > 64)) {
    c.write_back = at;
    c.write_back_bytes = bytes;
  }
}

// ---- Split (Fig. 3) --------------------------------------------------------------------------

Status Spash::Split(Commit& c, int k, uint64_t h, Outcome* outcome) {
  Directory::Table* t = c.held.table;
  Commit::Part& part = c.parts[k];
  const unsigned d = DirEntry::Depth(part.word), g = t->depth;
  Segment* s = SegmentAt(part.word);
  const uint64_t prefix = part.first >> (g - d);
  uint64_t hashes[kSlots] = {};
  uint64_t differ = 0;  // the bits in which some entry's hash differs from the key's
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t w = KeyWordOf(s, i) & ~KeyWord::kHint;
    if (KeyWord::Empty(w)) continue;
    hashes[i] = HashOfEntry(w, prefix, d);
    differ |= hashes[i] ^ h;
  }
  // Splits separate keys by their next prefix bit only: the key finds room no sooner than
  // at depth `need`, one past the top bits it shares with all 16 entries. A refusal
  // comes before any futile split or doubling: keys of one full hash (need 65), a
  // prefix deeper than kMaxDepth, or a doubling to a directory of more than
  // kSpashDirectoryPerSegment entries per segment (and over 2^20): keys crowded into a
  // sliver of the hash space, which only crafted keys or a test hash make.
  const unsigned need = static_cast<unsigned>(std::countl_zero(differ)) + 1;
  if (need > Directory::kMaxDepth ||
      (need > g && (uint64_t{1} << need) > std::max<uint64_t>(
                                               uint64_t{1} << 20,
                                               kSpashDirectoryPerSegment * segments()))) {
    return Status::TableFull("spash: a full segment at depth " + std::to_string(d) +
                             " whose 16 keys and the new one share their top " +
                             std::to_string(need - 1) + " hash bits: no split within the "
                             "directory's bounds separates them");
  }
  if (d + 1 > g || c.nparts == Commit::kMaxParts) {
    *outcome = Outcome::kNeedsDoubling;
    return Status::OK();
  }
  // Counted before `next` is read (both seq_cst): a halving that published `next` sees
  // this segment, or this split sees the halving (directory.cc, Halve).
  depth_count_[d + 1].fetch_add(2, std::memory_order_seq_cst);
  if (const Directory::Table* n = t->next.load(std::memory_order_seq_cst);
      n != nullptr && n->depth < g && d + 1 > n->depth) {
    depth_count_[d + 1].fetch_sub(2, std::memory_order_seq_cst);
    *outcome = Outcome::kBlocked;
    return Status::OK();
  }
  Segment* half[2] = {nullptr, nullptr};  // prefix p0, p1 at depth d + 1
  for (Segment*& n : half) {
    if (Status st = NewSegment(&n); !st.ok()) {
      if (half[0] != nullptr) FreeSegment(half[0]);
      depth_count_[d + 1].fetch_sub(2, std::memory_order_seq_cst);
      return st;
    }
  }
  depth_count_[d].fetch_sub(1, std::memory_order_seq_cst);
  pm::Persister& p = persister();
  // Both halves written afresh (Fig. 3: "both segments rewritten"): each entry goes to
  // the half of its next prefix bit, placed by circular probing from its main bucket, so
  // an entry that overflowed while the segment was full returns to its main bucket
  // where the half has room. The old segment is not changed: a reader that still reads
  // it sees what it held, and a crash keeps it whole.
  Segment image[2] = {};
  uint64_t words[2][kSlots] = {};
  unsigned count[2] = {0, 0};
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t w = KeyWordOf(s, i) & ~KeyWord::kHint;
    if (KeyWord::Empty(w)) continue;
    const uint64_t hash = hashes[i];
    const int side = static_cast<int>(hash >> (63 - d) & 1);
    const int j = PlaceInImage(words[side], MainBucket(hash));
    words[side][j] = w | (words[side][j] & KeyWord::kHint);
    image[side].bucket[j / 4].slot[j % 4].value = s->bucket[i / 4].slot[i % 4].value;
    ++count[side];
  }
  for (int side = 0; side < 2; ++side) {
    for (int i = 0; i < kSlots; ++i) image[side].bucket[i / 4].slot[i % 4].key = words[side][i];
    p.Copy(half[side], &image[side], sizeof(Segment));
    p.Flush(half[side], sizeof(Segment));
  }
  // The halves durable before their records make them live; their records durable
  // before the old segment's is cleared (a crash between leaves the old one shadowed by
  // deeper ones, which recovery drops).
  p.Fence();
  StoreRecord(half[1], d + 1, prefix * 2 + 1);
  StoreRecord(half[0], d + 1, prefix * 2);
  p.Fence();
  StoreRecord(s, 0, 0);  // durable with the operation's fence (Finish), then reused
  c.retired[c.nretired++] = s;
  if (filter_) {
    // Both halves hold exactly the old segment's keys: the range's bytes lose the bits
    // of keys deleted since they were set.
    uint64_t live[kSlots];
    int n = 0;
    for (int i = 0; i < kSlots; ++i) {
      if (!KeyWord::Empty(KeyWordOf(s, i) & ~KeyWord::kHint)) live[n++] = hashes[i];
    }
    StoreFilters(t, part.first, part.count, live, n);
  }
  const uint64_t span = part.count / 2;
  const uint64_t version = DirEntry::Version(part.word);
  c.parts[c.nparts++] = {part.first + span, span,
                         DirEntry::Make(SegmentIndex(half[1]), d + 1, count[1], version)};
  part = {part.first, span, DirEntry::Make(SegmentIndex(half[0]), d + 1, count[0], version)};
  c.changed = true;
  live_segments_.fetch_add(1, std::memory_order_relaxed);
  splits_.fetch_add(1, std::memory_order_relaxed);
  *outcome = Outcome::kDone;
  return Status::OK();
}

// ---- Delete, merge, halving --------------------------------------------------------------------

Status Spash::DoDelete(std::string_view key, uint64_t h) {
  // The common delete first (as DoGet's first try, for the same reason: its instructions
  // decide how many single-call deletes' misses are in flight at once). Not inside a
  // write batch's group or an emulated or real transaction.
  if (first_try_ && key.size() == sizeof(uint64_t) && !htm_ && group_.owner != this) [[likely]] {
    EpochReclaimer::Slot* const stay = dir_.epochs().EnterQuickly();
    if (stay != nullptr) [[likely]] {
      const bool done = FirstDeleteEntered(h);
      EpochReclaimer::Leave(stay);
      if (done) return Status::OK();
    }
  }
  return DeleteFull(key, h);
}

// DoDelete's first try, inside the epoch it entered: an 8-byte key inline in its main
// bucket, its segment's range in one directory line of the current table, no transition
// running. The same two phases as DeleteFull: the bucket read with no lock, the range
// locked as it was seen (any change since: nothing done), then DeleteLocked's
// stores for a main-bucket slot: the key word cleared (its hint bit kept: the bucket's),
// flushed, one fence, the range released with version + 1. False: nothing changed,
// DeleteFull decides.
[[gnu::always_inline]] inline bool Spash::FirstDeleteEntered(uint64_t h) {
  Directory::Table* const t = dir_.Current();
  if (t->next.load(std::memory_order_acquire) != nullptr) return false;
  const Directory::Place place{t, t->Index(h)};
  // No filter byte here: a present key's delete has no use for it (its bits stay set
  // after the delete anyway); an absent key's finds no match, and DeleteFull asks it.
  PrefetchHinted(place, h);
  const uint64_t e = Directory::Load(place);
  if (DirEntry::Busy(e) || DirEntry::Depth(e) > t->depth) return false;
  Segment* const s = SegmentAt(e);
  spash::Bucket* const bucket = &s->bucket[MainBucket(h)];
  persister().NoteRead(bucket, sizeof(spash::Bucket));
  unsigned eq;
  {
    const OptimisticReadScope unchecked_by_tsan;  // validated by the lock below
    eq = Matching(ReadKeyWords(bucket), KeyWord::Inline(h));
  }
  if (eq == 0) return false;  // in an overflow bucket, or absent
  if (read_hook_) [[unlikely]] read_hook_(h);
  Directory::Held held;
  if (!dir_.LockAsSeen(place, e, &held)) return false;
  // Held as seen: no writer changed the segment since its bucket was read.
  const unsigned count = DirEntry::Count(held.word);
  if (count == kUnknownCount) [[unlikely]] {
    dir_.Release(held);
    return false;
  }
  pm::Persister& p = persister();
  uint64_t* const kw = &bucket->slot[std::countr_zero(eq)].key;
  p.Store(kw, Load(kw) & KeyWord::kHint);  // the commit: empty, the bucket's hint bit kept
  p.Flush(kw, 1);                          // the first try's one line
  p.Fence();  // the first try's delete durable (adr) or ordered (eadr) before its release
  const unsigned left = count - 1;
  ReleaseChanged(held, held.first, held.count, DirEntry::WithCount(held.word, left));
  AddDelta(-1);
  if (merge_fill_ > 0 && left * 2 <= static_cast<unsigned>(merge_fill_ * kSlots)) {
    MaybeMerge(h);
  }
  return true;
}

// Every delete DoDelete's first try does not settle. Out of line, as GetFull.
__attribute__((noinline)) Status Spash::DeleteFull(std::string_view key, uint64_t h) {
  EpochReclaimer::Guard guard(dir_.epochs());
  unsigned aborts = 0;
  for (int attempt = 0;; ++attempt) {
    const Directory::Place place = dir_.Resolve(h);
    // A key the byte says is absent: NotFound, as a search answers it.
    if (filter_ && !Directory::MayHold(place, h)) return Status::NotFound();
    PrefetchHinted(place, h);
    const uint64_t e = Directory::Load(place);
    if (DirEntry::Busy(e)) {  // a writer, or a stage copy: both end soon (this batch's too)
      if (!FlushBeforeWaiting()) SpinBackoff(attempt);
      continue;
    }
    Probe p;
    {
      const OptimisticReadScope unchecked_by_tsan;
      p = Find(SegmentAt(e), key, h, /*want_free=*/false);
    }
    if (p.found < 0 && Directory::Load(place) == e) return Status::NotFound();
    Commit c;
    const bool try_region = htm_ && aborts < htm_retries_;
    const Acquired a = Acquire(place, e, try_region, &c, attempt);
    if (a == Acquired::kAborted || a == Acquired::kAbortedForGood) {
      aborts = a == Acquired::kAborted ? aborts + 1 : htm_retries_;
      htm_aborts_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (a == Acquired::kRetry) continue;
    if (!SameVersion(c.held.word, e)) p = Find(SegmentAt(c.held.word), key, h, false);
    Status result = Status::NotFound();
    unsigned left = 0;
    if (p.found >= 0) {
      left = DeleteLocked(c, p.found, h);
      result = Status::OK();
    }
    if (!Finish(c)) {
      ++aborts;
      continue;
    }
    if (!result.ok()) return result;
    AddDelta(-1);
    if (merge_fill_ > 0 && left * 2 <= static_cast<unsigned>(merge_fill_ * kSlots)) {
      FlushBeforeWaiting();  // the segment is one the group holds: released, it may merge
      MaybeMerge(h);
    }
    return result;
  }
}

unsigned Spash::DeleteLocked(Commit& c, int slot, uint64_t h) {
  pm::Persister& p = persister();
  const int k = c.PartOf(c.held.table->Index(h));
  Segment* s = SegmentAt(c.parts[k].word);
  uint64_t* kw = &KeyWordOf(s, slot);
  const uint64_t old = *kw;
  p.Store(kw, old & KeyWord::kHint);  // the commit: empty, the bucket's hint bit kept
  c.Dirty(kw);
  const int cb = slot / 4, b = MainBucket(KeyWord::LowHash(old));
  if (cb != b) {
    // The last entry of main bucket b in bucket cb takes b's hint for cb with it.
    bool more = false;
    for (int j = 0; j < 4 && !more; ++j) {
      const uint64_t w = s->bucket[cb].slot[j].key;
      more = !KeyWord::Empty(w) && MainBucket(KeyWord::LowHash(w)) == b;
    }
    if (!more) SetHint(c, s, b, (cb - b) & 3, false);
  }
  if (KeyWord::Form(old) == KeyWord::kRecord) c.to_free[c.nfree++] = old;
  const unsigned left = DirEntry::Count(c.parts[k].word) - 1;
  c.parts[k].word = DirEntry::WithCount(c.parts[k].word, left);
  c.changed = true;
  return left;
}

void Spash::MaybeMerge(uint64_t h) {
  if (!resize_enabled() || merge_fill_ <= 0) return;
  Directory::Table* t = dir_.Current();
  const uint64_t i = t->Index(h);
  const uint64_t e = t->entries[i].load(std::memory_order_acquire);
  const unsigned d = DirEntry::Depth(e), g = t->depth;
  if (DirEntry::Busy(e) || d <= floor_depth_ || d > g) return;
  const uint64_t range = uint64_t{1} << (g - d);
  const uint64_t first = i & ~(range - 1), buddy = first ^ range;
  const uint64_t limit = static_cast<uint64_t>(merge_fill_ * kSlots);
  const uint64_t pe = t->entries[first].load(std::memory_order_acquire);
  const uint64_t be = t->entries[buddy].load(std::memory_order_acquire);
  if (DirEntry::Busy(pe) || DirEntry::Busy(be) || DirEntry::Depth(be) != d ||
      DirEntry::Count(pe) == kUnknownCount || DirEntry::Count(be) == kUnknownCount ||
      DirEntry::Count(pe) + DirEntry::Count(be) > limit) {
    return;
  }
  // Low range first, neither waited for: merging is optional, so a busy range ends it.
  Directory::Held low, high;
  if (!dir_.TryLockRange(t, std::min(first, buddy), range, &low)) return;
  if (!dir_.TryLockRange(t, std::max(first, buddy), range, &high)) {
    dir_.Release(low);
    return;
  }
  if (DirEntry::Depth(low.word) != d || DirEntry::Depth(high.word) != d ||
      DirEntry::Count(low.word) + DirEntry::Count(high.word) > limit ||
      DirEntry::Count(low.word) == kUnknownCount || DirEntry::Count(high.word) == kUnknownCount) {
    dir_.Release(high);
    dir_.Release(low);
    return;
  }
  Merge(low, high);
  MaybeHalve();
}

void Spash::Merge(const Directory::Held& low, const Directory::Held& high) {
  pm::Persister& p = persister();
  Segment* s0 = SegmentAt(low.word);
  Segment* s1 = SegmentAt(high.word);
  const unsigned d = DirEntry::Depth(low.word), g = low.table->depth;
  uint64_t words[kSlots];
  for (int i = 0; i < kSlots; ++i) words[i] = KeyWordOf(s0, i);
  unsigned stored = 0;  // the low segment's buckets (one line each) stored to
  // The buddy's entries into the free slots of the low segment (circular probing from
  // each one's main bucket); the low segment's own entries stay.
  for (int i = 0; i < kSlots; ++i) {
    const uint64_t w = KeyWordOf(s1, i) & ~KeyWord::kHint;
    if (KeyWord::Empty(w)) continue;
    const int j = PlaceInImage(words, MainBucket(KeyWord::LowHash(w)));
    words[j] = w | (words[j] & KeyWord::kHint);
    p.Store(&s0->bucket[j / 4].slot[j % 4].value, s1->bucket[i / 4].slot[i % 4].value);
    stored |= 1u << (j / 4);
  }
  for (int i = 0; i < kSlots; ++i) {
    if (KeyWordOf(s0, i) != words[i]) {
      p.Store(&KeyWordOf(s0, i), words[i]);
      stored |= 1u << (i / 4);
    }
  }
  // Only the lines stored to (an empty buddy: none, and nothing to fence).
  for (int b = 0; b < 4; ++b) {
    if ((stored >> b & 1) != 0) p.Flush(&s0->bucket[b], sizeof(Bucket));
  }
  if (stored != 0) p.Fence();
  StoreRecord(s0, d - 1, low.first >> (g - d + 1));
  StoreRecord(s1, 0, 0);
  p.Fence();
  const uint64_t version =
      std::max(DirEntry::Version(low.word), DirEntry::Version(high.word)) + 1;
  const uint64_t word = DirEntry::Make(SegmentIndex(s0), d - 1,
                                       DirEntry::Count(low.word) + DirEntry::Count(high.word),
                                       version);
  dir_.ReleaseAs(low, low.first, low.count, word);
  dir_.ReleaseAs(high, high.first, high.count, DirEntry::WithCount(word, 0));
  depth_count_[d - 1].fetch_add(1, std::memory_order_seq_cst);
  depth_count_[d].fetch_sub(2, std::memory_order_seq_cst);
  live_segments_.fetch_sub(1, std::memory_order_relaxed);
  merges_.fetch_add(1, std::memory_order_relaxed);
  FreeSegment(s1);
}

bool Spash::HalvingAllowed(void* ctx) {
  auto* self = static_cast<Spash*>(ctx);
  const unsigned g = self->dir_.Current()->depth;
  return self->depth_count_[g].load(std::memory_order_seq_cst) == 0 &&
         self->ShallowEnough(g);
}

bool Spash::ShallowEnough(unsigned g) const {
  // The hysteresis: no segment as deep as G - 1 either (unless G - 1 is the floor), so
  // the halved table has a level of room before a split doubles it again.
  return g - 1 == floor_depth_ || depth_count_[g - 1].load(std::memory_order_seq_cst) == 0;
}

void Spash::MaybeHalve() {
  // As often as the hysteresis allows (one merge can leave room for two halvings).
  for (;;) {
    Directory::Table* t = dir_.Current();
    const unsigned g = t->depth;
    if (g <= floor_depth_ || t->next.load(std::memory_order_acquire) != nullptr ||
        depth_count_[g].load(std::memory_order_relaxed) != 0 || !ShallowEnough(g)) {
      return;
    }
    FlushBeforeWaiting();  // a transition waits for every range held
    dir_.Halve(t, floor_depth_, &Spash::HalvingAllowed, this);
    if (dir_.Current() == t) return;  // not halved: a split came first
  }
}

// ---- Iteration --------------------------------------------------------------------------------

Status Spash::CollectSegment(uint64_t pos, std::vector<ScanEntry>* out, uint64_t* end,
                             bool* last) const {
  EpochReclaimer::Guard guard(dir_.epochs());
  const OptimisticReadScope unchecked_by_tsan;  // validated by the directory entry
  const size_t kept = out->size();
  for (int attempt = 0;; ++attempt) {
    out->resize(kept);
    const Directory::Place place = dir_.Resolve(pos);
    const uint64_t e = Directory::Load(place);
    if (DirEntry::Busy(e)) {
      SpinBackoff(attempt);
      continue;
    }
    if (read_hook_) [[unlikely]] read_hook_(pos);
    const unsigned d = DirEntry::Depth(e);
    const uint64_t span = ~uint64_t{0} >> d;  // hashes past the prefix
    const uint64_t lo = pos & ~span, hi = lo | span;
    const uint64_t prefix = lo >> (64 - d);
    const Segment* s = SegmentAt(e);
    for (int i = 0; i < kSlots; ++i) {
      const uint64_t w = Load(&KeyWordOf(s, i)) & ~KeyWord::kHint;
      if (KeyWord::Empty(w)) continue;
      const uint64_t v = Load(&s->bucket[i / 4].slot[i % 4].value);
      const uint64_t hash = HashOfEntry(w, prefix, d);
      if (hash < pos || hash > hi) continue;  // before the position (seen), or damaged
      std::string key, value;
      EntryKeyValue(w, v, hash, &key, &value);
      AddScanEntry(out, hash, key, value);
    }
    if (Directory::Load(place) != e) continue;
    *end = hi + 1;
    *last = hi == ~uint64_t{0};
    return Status::OK();
  }
}

Status Spash::ForEach(const Visitor& fn) const {
  // In hash order, a segment at a time: keys never move in hash order, so splits, merges
  // and doublings between two segments cannot show a key twice or hide one.
  std::vector<ScanEntry> batch;
  uint64_t pos = 0;
  for (;;) {
    uint64_t end = 0;
    bool last = false;
    batch.clear();
    PMHASH_RETURN_IF_ERROR(CollectSegment(pos, &batch, &end, &last));
    for (const ScanEntry& entry : batch) {
      if (!fn(entry.key, entry.value)) return Status::OK();
    }
    if (last) return Status::OK();
    pos = end;
  }
}

Status Spash::DoScan(ScanPage* page) const {
  // The homes are the directory's entries when the page starts (home k: the hashes whose
  // top g bits are k). The page does not hold the directory still: it reads its runs of
  // homes a segment at a time in hash order, as ForEach does, each segment a validated
  // snapshot, and keys never move in hash order. So a split, merge, doubling or halving
  // during the page only makes a segment narrower or wider than a home: every key that is
  // there throughout is read once, in the segment that holds its hash when it is read.
  unsigned g = 0;
  {
    EpochReclaimer::Guard guard(dir_.epochs());
    g = dir_.Current()->depth;
  }
  const unsigned shift = 64 - g;  // g >= kSpashMinDepth
  Status status;
  page->CollectHomes(uint64_t{1} << g, Directory::kPartition,
                     [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
                       // The run's hashes: [first << shift, (last << shift) - 1] (the
                       // last run's end wraps to 2^64 - 1).
                       const uint64_t run_end = (last << shift) - 1;
                       uint64_t pos = std::max(first << shift, page->from());
                       while (status.ok()) {
                         uint64_t end = 0;
                         bool at_end = false;
                         status = CollectSegment(pos, out, &end, &at_end);
                         if (at_end || end - 1 >= run_end) return;
                         pos = end;
                       }
                     });
  return status;
}

// ---- Recovery ----------------------------------------------------------------------------------

Status Spash::ReadBlocks(std::vector<BlockRef>* blocks) const {
  uint64_t head = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, sizeof(spash::BlockHeader), &head, &stored));
  const auto* r = root<const SpashRoot>();
  if (r->floor_depth < kSpashMinDepth || r->floor_depth > Directory::kMaxDepth) {
    return Status::Corruption("spash: root floor depth " + std::to_string(r->floor_depth) +
                              " is out of range (damaged)");
  }
  const uint64_t limit = pool().heap_size() / kSpashBlockBytes + 1;
  for (uint64_t off = head, n = 0; off != 0; ++n) {
    if (n >= limit) return Status::Corruption("spash: the block list does not end (damaged)");
    if (off < pool().heap_offset() || off % 4096 != 0 || !pool().Contains(off, kSpashBlockBytes)) {
      return Status::Corruption("spash: a block offset " + std::to_string(off) +
                                " is outside the heap (damaged)");
    }
    const auto* h = pool().At<const spash::BlockHeader>(off);
    if (h->magic != kSpashBlockMagic) {
      return Status::Corruption("spash: the block at pool offset " + std::to_string(off) +
                                " has a wrong magic number (damaged)");
    }
    PMHASH_RETURN_IF_ERROR(
        VerifyMetadata(h, offsetof(spash::BlockHeader, check), h->check, "a block header"));
    if (h->kind != spash::kSegmentBlock && h->kind != spash::kChunkBlock) {
      return Status::Corruption("spash: the block at pool offset " + std::to_string(off) +
                                " has an unknown kind (damaged)");
    }
    blocks->push_back({off, h->kind});
    off = h->next;
  }
  return Status::OK();
}

Status Spash::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  std::vector<BlockRef> blocks;
  PMHASH_RETURN_IF_ERROR(ReadBlocks(&blocks));
  for (const BlockRef& b : blocks) {
    visit(b.offset);
    if (b.kind != spash::kSegmentBlock) continue;  // chunked records live inside it
    const auto* records = pool().At<const uint64_t>(b.offset + sizeof(spash::BlockHeader));
    for (unsigned k = 0; k < kSpashSegmentsPerBlock; ++k) {
      if (records[k] == 0) continue;
      const auto* s =
          pool().At<const Segment>(b.offset + kSpashSegmentArea + k * sizeof(Segment));
      for (int i = 0; i < kSlots; ++i) {
        const uint64_t w = KeyWordOf(s, i);
        if (KeyWord::Form(w) != KeyWord::kRecord || KeyWord::Chunked(w)) continue;
        // A wild offset is left for Recover to report.
        if (pool().Contains(KeyWord::RecordOffset(w), 8)) visit(KeyWord::RecordOffset(w));
      }
    }
  }
  return Status::OK();
}

Status Spash::Recover(bool clean) {
  root_ = root<SpashRoot>();
  uint64_t head = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, sizeof(spash::BlockHeader), &head, &stored));
  std::vector<BlockRef> blocks;
  PMHASH_RETURN_IF_ERROR(ReadBlocks(&blocks));
  uint64_t saved = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&root_->usage_saved, "root usage_saved flag", &saved));
  if (saved > 1) return Status::Corruption("spash: root usage_saved flag is damaged");
  floor_depth_ = static_cast<unsigned>(root_->floor_depth);
  block_start_.reset(new std::atomic<uint64_t>[pool().heap_size() / kSpashBlockBytes + 1]());
  head_block_ = head;
  std::vector<SegmentRef> live;
  live.reserve(blocks.size() * kSpashSegmentsPerBlock);
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {  // oldest first
    const BlockRef& b = *it;
    if (!allocator().IsAllocated(b.offset) || allocator().UsableSize(b.offset) < kSpashBlockBytes) {
      return Status::Corruption("spash: the block at pool offset " + std::to_string(b.offset) +
                                " is not an allocated block of 64 KiB (damaged)");
    }
    NoteBlock(b.offset);
    blocks_.push_back(b.offset);
    if (b.kind == spash::kChunkBlock) {
      chunk_blocks_.push_back(b.offset);
      continue;
    }
    auto* records = pool().At<uint64_t>(b.offset + sizeof(spash::BlockHeader));
    for (unsigned k = kSpashSegmentsPerBlock; k > 0; --k) {
      const uint64_t seg = b.offset + kSpashSegmentArea + (k - 1) * sizeof(Segment);
      if (records[k - 1] == 0) {
        free_segments_.push_back(seg);
        continue;
      }
      uint64_t payload = 0;
      PMHASH_RETURN_IF_ERROR(LoadSealed(&records[k - 1], "a segment's depth record", &payload));
      const unsigned d = static_cast<unsigned>(payload >> kRecordDepthShift & 63);
      const uint64_t prefix = payload & kPrefixMask;
      if ((payload & kRecordLive) == 0 || d < kSpashMinDepth || d > Directory::kMaxDepth ||
          (prefix >> d) != 0) {
        return Status::Corruption("spash: the depth record of the segment at pool offset " +
                                  std::to_string(seg) + " is malformed (damaged)");
      }
      live.push_back({seg, d, prefix});
    }
  }
  std::sort(chunk_blocks_.begin(), chunk_blocks_.end());
  std::vector<SegmentRef> shadowed;
  PMHASH_RETURN_IF_ERROR(RebuildDirectory(&live, !clean, &shadowed));
  for (const SegmentRef& x : shadowed) {
    // Every entry of a shadowed segment must be a copy the halves of its split hold.
    Segment* s = pool().At<Segment>(x.offset);
    for (int i = 0; i < kSlots; ++i) {
      const uint64_t w = KeyWordOf(s, i) & ~KeyWord::kHint;
      if (KeyWord::Empty(w)) continue;
      uint64_t hash = 0;
      PMHASH_RETURN_IF_ERROR(CheckEntry(s, i, x.prefix, x.depth, &hash));
      if (!HeldElsewhere(w, hash)) {
        return Status::Corruption("spash: the segment at pool offset " +
                                  std::to_string(x.offset) +
                                  " is covered by deeper segments that lack its slot " +
                                  std::to_string(i) + " (damaged)");
      }
    }
    StoreRecord(s, 0, 0);  // persisted with the recovery's last fence
    free_segments_.push_back(x.offset);
  }
  uint64_t count = stored;
  if (!clean) {
    PMHASH_RETURN_IF_ERROR(ScanSegments(live, /*repair=*/true, &count));
    PersistRootCount(count);  // its fence also makes the repairs durable
  } else if (!chunk_blocks_.empty()) {
    if (saved == 1) {
      PMHASH_RETURN_IF_ERROR(LoadUsage());
    } else {
      uint64_t ignored = 0;
      PMHASH_RETURN_IF_ERROR(ScanSegments(live, /*repair=*/false, &ignored));
    }
  }
  if (saved != 0) {
    // From now on chunks change: the saved maps are stale until the next clean Close.
    persister().Store(&root_->usage_saved, SealFor(&root_->usage_saved, 0));
    persister().Persist(&root_->usage_saved, sizeof(uint64_t));
  }
  for (auto& c : depth_count_) c.store(0);
  for (const SegmentRef& x : live) depth_count_[x.depth].fetch_add(1);
  live_segments_.store(live.size());
  base_count_ = count;
  return Status::OK();
}

Status Spash::RebuildDirectory(std::vector<SegmentRef>* live, bool crashed,
                               std::vector<SegmentRef>* shadowed) {
  unsigned g = floor_depth_;
  for (const SegmentRef& x : *live) g = std::max(g, x.depth);
  const uint64_t n = uint64_t{1} << g;
  // The common case first, in one pass: the ranges tile the directory (no overlap, no
  // gap), as after any clean Close and most crashes; each segment writes its range. The
  // general path below gives the same directory then, at three passes over it and a
  // sort; it also settles what an interrupted split or merge left.
  bool tiled = false;
  PMHASH_RETURN_IF_ERROR(dir_.ResetIf(g, [&](std::atomic<uint64_t>* entries) {
    uint64_t covered = 0;
    for (const SegmentRef& x : *live) {
      const uint64_t first = x.prefix << (g - x.depth), range = uint64_t{1} << (g - x.depth);
      for (uint64_t i = first; i < first + range; ++i) {
        // 0 is no entry: pool offset 0 is the pool's header, never a segment.
        if (entries[i].load(std::memory_order_relaxed) != 0) return false;
        entries[i].store(DirEntry::Make(x.offset >> 8, x.depth, i == first ? kUnknownCount : 0, 0),
                         std::memory_order_relaxed);
      }
      covered += range;
    }
    return covered == n;
  }, &tiled));
  if (tiled) return Status::OK();
  constexpr uint32_t kNone = ~uint32_t{0};
  std::vector<uint32_t> owner(n, kNone);
  std::vector<uint32_t> order(live->size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return (*live)[a].depth < (*live)[b].depth; });
  // Shallow first, so a deeper segment takes its part of an overlapping range.
  for (uint32_t xi : order) {
    const SegmentRef& x = (*live)[xi];
    const uint64_t first = x.prefix << (g - x.depth), range = uint64_t{1} << (g - x.depth);
    std::fill(owner.begin() + first, owner.begin() + first + range, xi);
  }
  std::vector<uint64_t> owned(live->size(), 0);
  for (uint32_t o : owner) {
    if (o != kNone) ++owned[o];
  }
  const auto where = [&](const SegmentRef& x) {
    return "the segment at pool offset " + std::to_string(x.offset) + " (depth " +
           std::to_string(x.depth) + ", prefix " + std::to_string(x.prefix) + ")";
  };
  for (uint32_t xi = 0; xi < live->size(); ++xi) {
    SegmentRef& x = (*live)[xi];
    const uint64_t first = x.prefix << (g - x.depth), range = uint64_t{1} << (g - x.depth);
    if (owned[xi] == range) continue;
    if (owned[xi] == 0 && crashed) {
      // A split whose two halves are durable and the old segment's record not yet
      // cleared: the halves hold its entries (Recover checks that, then frees it).
      shadowed->push_back(x);
      continue;
    }
    // An interrupted split (one half's record durable, not the other's) or merge (the
    // merged record durable, the buddy not yet freed): the deeper segment holds one
    // half, and this one keeps the other, whose entries it still has.
    const auto owns = [&](uint64_t a) {
      for (uint64_t i = a; i < a + range / 2; ++i) {
        if (owner[i] != xi) return false;
      }
      return true;
    };
    if (!crashed || owned[xi] * 2 != range) {
      return Status::Corruption("spash: " + where(x) + " overlaps deeper segments (damaged)");
    }
    const bool low = owns(first);
    if (!low && !owns(first + range / 2)) {
      return Status::Corruption("spash: " + where(x) + " overlaps deeper segments (damaged)");
    }
    x.depth += 1;
    x.prefix = x.prefix * 2 + (low ? 0 : 1);
    StoreRecord(pool().At<Segment>(x.offset), x.depth, x.prefix);
  }
  for (uint64_t i = 0; i < n;) {
    if (owner[i] != kNone) {
      ++i;
      continue;
    }
    // An interrupted merge whose buddy was freed before the merged record was durable:
    // the low segment already holds the buddy's entries and takes its range.
    SegmentRef* x = i == 0 ? nullptr : &(*live)[owner[i - 1]];
    const uint64_t range = x == nullptr ? 0 : uint64_t{1} << (g - x->depth);
    if (!crashed || x == nullptr || (x->prefix & 1) != 0 ||
        (x->prefix << (g - x->depth)) + range != i || x->depth <= floor_depth_) {
      return Status::Corruption("spash: no segment covers the hash prefix " + std::to_string(i) +
                                " at depth " + std::to_string(g) + " (damaged)");
    }
    for (uint64_t j = i; j < i + range; ++j) {
      if (owner[j] != kNone) {
        return Status::Corruption("spash: no segment covers part of the hash prefix " +
                                  std::to_string(i) + " (damaged)");
      }
      owner[j] = owner[i - 1];
    }
    x->depth -= 1;
    x->prefix >>= 1;
    StoreRecord(pool().At<Segment>(x->offset), x->depth, x->prefix);
    i += range;
  }
  PMHASH_RETURN_IF_ERROR(dir_.Reset(g, [&](uint64_t i) {
    const SegmentRef& x = (*live)[owner[i]];
    const bool primary = (x.prefix << (g - x.depth)) == i;
    return DirEntry::Make(x.offset >> 8, x.depth, primary ? kUnknownCount : 0, 0);
  }));
  std::erase_if(*live, [&](const SegmentRef& x) {
    return std::any_of(shadowed->begin(), shadowed->end(),
                       [&](const SegmentRef& y) { return y.offset == x.offset; });
  });
  return Status::OK();
}

Status Spash::CheckEntry(const Segment* s, int i, uint64_t prefix, unsigned depth,
                         uint64_t* hash) const {
  const uint64_t w = KeyWordOf(s, i) & ~KeyWord::kHint;
  const std::string where = "spash: slot " + std::to_string(i) + " of the segment at pool offset " +
                            std::to_string(pool().ToOffset(s));
  if (KeyWord::Form(w) == KeyWord::kFormMask) return Status::Corruption(where + " has no valid form");
  if (KeyWord::Form(w) == KeyWord::kRecord) {
    const uint64_t off = KeyWord::RecordOffset(w);
    bool plausible = false;
    if (KeyWord::Chunked(w)) {
      // Inside a chunk of a chunk block, within that chunk.
      const auto it = std::upper_bound(chunk_blocks_.begin(), chunk_blocks_.end(), off);
      if (it != chunk_blocks_.begin()) {
        const uint64_t block = *(it - 1);
        const uint64_t area = block + kSpashChunkArea;
        if (off >= area && off < area + kSpashChunksPerBlock * kSpashChunkBytes) {
          const uint64_t chunk_end = off - (off - area) % kSpashChunkBytes + kSpashChunkBytes;
          plausible = codec().PlausibleRecordAt(off, std::min(chunk_end - off, kSpashMaxChunked));
        }
      }
    } else {
      plausible = codec().Plausible(SlotForm::kRecord, KvWords{off, 0}) &&
                  codec().RecordBytesAt(off) > kSpashMaxChunked;
    }
    if (!plausible) return Status::Corruption(where + " points to a damaged record");
  }
  *hash = HashOfEntry(w, prefix, depth);
  if (KeyWord::LowHash(w) != (*hash & KeyWord::kFingerprintMask)) {
    return Status::Corruption(where + " has a fingerprint that does not match its key");
  }
  return Status::OK();
}

Status Spash::ScanSegments(const std::vector<SegmentRef>& live, bool repair, uint64_t* count) {
  pm::Persister& p = persister();
  Directory::Table* t = dir_.Current();
  std::vector<std::vector<uint64_t>> usage(chunk_blocks_.size(),
                                           std::vector<uint64_t>((spash::kChunkUnits + 63) / 64));
  uint64_t total = 0;
  for (const SegmentRef& x : live) {
    Segment* s = pool().At<Segment>(x.offset);
    uint64_t words[kSlots];
    unsigned n = 0;
    for (int i = 0; i < kSlots; ++i) {
      const uint64_t w = KeyWordOf(s, i) & ~KeyWord::kHint;
      words[i] = w;
      if (KeyWord::Empty(w)) {
        words[i] = 0;
        continue;
      }
      uint64_t hash = 0;
      PMHASH_RETURN_IF_ERROR(CheckEntry(s, i, x.prefix, x.depth, &hash));
      if ((hash >> (64 - x.depth)) != x.prefix) {
        // A copy an interrupted split or merge left behind (the split's new segment, or
        // the merge's buddy, holds the same word): dropped. Anything else is damage.
        if (repair && HeldElsewhere(w, hash)) {
          words[i] = 0;
          continue;
        }
        return Status::Corruption("spash: slot " + std::to_string(i) +
                                  " of the segment at pool offset " + std::to_string(x.offset) +
                                  " holds a key of another segment (damaged)");
      }
      ++n;
      MarkUsage(w, &usage);
    }
    if (repair) {
      // Hints rebuilt exactly: an insert's hint and entry are in different lines, so a
      // crash may have kept the entry without its hint, or a delete's stale hint.
      SetExactHints(words);
      bool changed = false;
      for (int i = 0; i < kSlots; ++i) {
        if (KeyWordOf(s, i) != words[i]) {
          p.Store(&KeyWordOf(s, i), words[i]);
          changed = true;
        }
      }
      if (changed) p.Flush(s, sizeof(Segment));
    }
    const uint64_t primary = x.prefix << (t->depth - x.depth);
    t->entries[primary].store(DirEntry::WithCount(t->entries[primary].load(), n));
    total += n;
  }
  for (size_t bi = 0; bi < chunk_blocks_.size(); ++bi) AdoptUsage(chunk_blocks_[bi], usage[bi].data());
  *count = total;
  return Status::OK();
}

bool Spash::HeldElsewhere(uint64_t w, uint64_t hash) const {
  const Segment* owner = SegmentAt(Directory::Load(dir_.Resolve(hash)));
  for (int i = 0; i < kSlots; ++i) {
    if ((KeyWordOf(owner, i) & ~KeyWord::kHint) == w) return true;
  }
  return false;
}

void Spash::MarkUsage(uint64_t w, std::vector<std::vector<uint64_t>>* usage) const {
  if (KeyWord::Form(w) != KeyWord::kRecord || !KeyWord::Chunked(w)) return;
  // The entry was checked (CheckEntry) or written by this engine: its chunk block exists.
  const uint64_t off = KeyWord::RecordOffset(w);
  const auto it = std::upper_bound(chunk_blocks_.begin(), chunk_blocks_.end(), off);
  const size_t bi = static_cast<size_t>(it - chunk_blocks_.begin()) - 1;
  const uint64_t unit = (off - chunk_blocks_[bi] - kSpashChunkArea) / 16;
  const uint64_t units = RecordUnits(codec().RecordBytesAt(off));
  for (uint64_t u = unit; u < unit + units; ++u) (*usage)[bi][u / 64] |= uint64_t{1} << (u % 64);
}

void Spash::AdoptUsage(uint64_t block, const uint64_t* bits) {
  // A chunk with no unit in use is free; the free runs of a partly used one go to the
  // free lists in pieces of at most 128 bytes ("partly used chunks rebuilt").
  const auto used = [&](uint64_t u) { return (bits[u / 64] >> (u % 64) & 1) != 0; };
  constexpr uint64_t kUnitsPerChunk = kSpashChunkBytes / 16;
  for (unsigned c = kSpashChunksPerBlock; c > 0; --c) {
    const uint64_t first = (c - 1) * kUnitsPerChunk;
    const uint64_t chunk = block + kSpashChunkArea + (c - 1) * kSpashChunkBytes;
    bool any = false;
    for (uint64_t u = first; u < first + kUnitsPerChunk; ++u) any = any || used(u);
    if (!any) {
      free_chunks_.push_back(chunk);
      continue;
    }
    for (uint64_t u = first; u < first + kUnitsPerChunk;) {
      if (used(u)) {
        ++u;
        continue;
      }
      uint64_t run = 0;
      while (u + run < first + kUnitsPerChunk && !used(u + run) && run < kSpashRecordClasses) {
        ++run;
      }
      free_units_[ClassOfUnits(run)].push_back(chunk + (u - first) * 16);
      orphans_.fetch_add(1, std::memory_order_relaxed);
      u += run;
    }
  }
}

namespace {
struct UsageArea {
  uint64_t check;
  uint8_t bits[spash::kChunkUnits / 8];
};
static_assert(sizeof(UsageArea) == 8 + spash::kChunkUnits / 8 &&
                  sizeof(spash::BlockHeader) + sizeof(UsageArea) <= kSpashChunkArea,
              "a chunk block's usage map: its check, then a bit per 16-byte unit");
}  // namespace

Status Spash::LoadUsage() {
  for (uint64_t block : chunk_blocks_) {
    const auto* a = pool().At<const UsageArea>(block + sizeof(spash::BlockHeader));
    if (a->check != Hash64(a->bits, sizeof(a->bits), block)) {
      return Status::Corruption("spash: the usage map of the chunk block at pool offset " +
                                std::to_string(block) + " fails its check (damaged)");
    }
    uint64_t bits[(spash::kChunkUnits + 63) / 64] = {};
    std::memcpy(bits, a->bits, sizeof(a->bits));
    AdoptUsage(block, bits);
  }
  usage_loaded_ = true;
  return Status::OK();
}

Status Spash::Shutdown() {
  dir_.epochs().Drain();  // no operation is in flight: every retired table goes
  if (chunk_blocks_.empty()) return Status::OK();
  // The chunk blocks' usage maps, so that a clean open need not read every segment.
  std::vector<std::vector<uint64_t>> usage(chunk_blocks_.size(),
                                           std::vector<uint64_t>((spash::kChunkUnits + 63) / 64));
  for (uint64_t block : blocks_) {
    const auto* h = pool().At<const spash::BlockHeader>(block);
    if (h->kind != spash::kSegmentBlock) continue;
    const auto* records = pool().At<const uint64_t>(block + sizeof(spash::BlockHeader));
    for (unsigned k = 0; k < kSpashSegmentsPerBlock; ++k) {
      if (records[k] == 0) continue;
      const auto* s = pool().At<const Segment>(block + kSpashSegmentArea + k * sizeof(Segment));
      for (int i = 0; i < kSlots; ++i) MarkUsage(KeyWordOf(s, i), &usage);
    }
  }
  pm::Persister& p = persister();
  for (size_t bi = 0; bi < chunk_blocks_.size(); ++bi) {
    auto* a = pool().At<UsageArea>(chunk_blocks_[bi] + sizeof(spash::BlockHeader));
    UsageArea image;
    std::memcpy(image.bits, usage[bi].data(), sizeof(image.bits));
    image.check = Hash64(image.bits, sizeof(image.bits), chunk_blocks_[bi]);
    p.Copy(a, &image, sizeof(image));
    p.Flush(a, sizeof(image));
  }
  p.Publish(&root_->usage_saved, SealFor(&root_->usage_saved, 1));
  return Status::OK();
}

void Spash::WaitForBackgroundWork() { dir_.epochs().Collect(); }

uint64_t Spash::HotKeyOracleSize() const { return hot_.oracle_capacity(); }

void Spash::SetHotKeyOracle(const std::vector<std::string>& keys) {
  std::vector<uint64_t> hashes;
  hashes.reserve(keys.size());
  for (const std::string& key : keys) hashes.push_back(KeyHash(key));
  hot_.SetOracle(hashes);
}

// ---- Stats and checks ------------------------------------------------------------------------

void Spash::FillStats(IndexStats* stats) const {
  stats->count = Count();
  stats->key_slots = live_segments_.load(std::memory_order_relaxed) * kSlots;
  uint64_t blocks = 0, chunk_blocks = 0, free_lists = 0;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    blocks = blocks_.size();
    chunk_blocks = chunk_blocks_.size();
    free_lists = free_segments_.capacity() + free_chunks_.capacity();
    for (const auto& f : free_units_) free_lists += f.capacity();
  }
  stats->dram_bytes = sizeof(*this) + dir_.MemoryBytes() + hot_.bytes() +
                      // (the per-thread free lists, which other threads may be growing,
                      // are not counted: 8 bytes per freed record held for reuse)
                      (pm::CounterTable::kMaxThreads + 1) * sizeof(ThreadState) +
                      (pool().heap_size() / kSpashBlockBytes + 1) * sizeof(uint64_t) +
                      free_lists * sizeof(uint64_t);
  auto& c = stats->engine_counters;
  c["global_depth"] = dir_.Current()->depth;
  c["segments"] = live_segments_.load();
  c["splits"] = splits_.load();
  c["merges"] = merges_.load();
  c["doublings"] = dir_.doublings();
  c["halvings"] = dir_.halvings();
  c["overflow_inserts"] = overflow_inserts_.load();
  c["hot_updates"] = hot_updates_.load();
  c["cold_updates"] = cold_updates_.load();
  c["in_place_updates"] = in_place_updates_.load();
  c["htm_commits"] = htm_commits_.load();
  c["htm_aborts"] = htm_aborts_.load();
  c["htm_fallbacks"] = htm_fallbacks_.load();
  c["blocks"] = blocks;
  c["chunk_blocks"] = chunk_blocks;
  c["directory_bytes"] = dir_.MemoryBytes();
  if (const Directory::Table* t = dir_.Current(); t->filter != nullptr) {
    // The share of absent keys the filter lets through, per mille: a byte with p bits
    // set passes a random key's two probes with probability (p / 8)^2.
    uint64_t squares = 0, unknown = 0;
    for (uint64_t i = 0; i < t->size; ++i) {
      const uint8_t f = Directory::FilterAt(t, i);
      squares += static_cast<uint64_t>(std::popcount(f) * std::popcount(f));
      unknown += f == EntryFilter::kUnknown;
    }
    c["filter_pass_permille"] = (squares * 1000 + t->size * 32) / (t->size * 64);
    c["filter_unknown_entries"] = unknown;
  }
}

Status Spash::CheckInvariants() const {
  Directory::Table* t = dir_.Current();
  if (t->next.load() != nullptr) return Status::Corruption("spash: a transition is under way");
  const unsigned g = t->depth;
  std::unordered_set<std::string> keys;
  std::unordered_set<uint64_t> seen;
  uint64_t total = 0;
  uint64_t depths[64] = {};
  for (uint64_t i = 0; i < t->size;) {
    const uint64_t e = t->entries[i].load();
    const unsigned d = DirEntry::Depth(e);
    const std::string at = "spash: directory entry " + std::to_string(i) + " (depth " +
                           std::to_string(g) + ")";
    if (DirEntry::Busy(e)) return Status::Corruption(at + " is held");
    if (d < kSpashMinDepth || d > g) return Status::Corruption(at + " has depth " + std::to_string(d));
    const uint64_t range = uint64_t{1} << (g - d);
    if (i % range != 0) return Status::Corruption(at + " starts a misaligned range");
    for (uint64_t j = i + 1; j < i + range; ++j) {
      const uint64_t f = t->entries[j].load();
      if (DirEntry::Busy(f) || DirEntry::Segment(f) != DirEntry::Segment(e) ||
          DirEntry::Depth(f) != d || DirEntry::Count(f) != 0) {
        return Status::Corruption(at + ": entry " + std::to_string(j) + " of its range differs");
      }
    }
    const uint64_t group = uint64_t{1} << Directory::kHintShift;
    for (uint64_t j = i; t->hint != nullptr && j < i + range; ++j) {
      if (j % group == 0 && Directory::Hint({t, j}) != DirEntry::Segment(e)) {
        return Status::Corruption(at + ": the segment hint of entry " + std::to_string(j) +
                                  " names another segment");
      }
    }
    const Segment* s = SegmentAt(e);
    if (!seen.insert(pool().ToOffset(s)).second) {
      return Status::Corruption(at + " names a segment another range names");
    }
    uint64_t payload = 0;
    PMHASH_RETURN_IF_ERROR(LoadSealed(RecordOf(s), "a segment's depth record", &payload));
    const uint64_t prefix = i >> (g - d);
    if (payload != RecordPayload(d, prefix)) {
      return Status::Corruption(at + ": its segment's record does not say depth " +
                                std::to_string(d) + ", prefix " + std::to_string(prefix));
    }
    uint64_t words[kSlots];
    unsigned n = 0;
    for (int k = 0; k < kSlots; ++k) {
      const uint64_t w = KeyWordOf(s, k);
      words[k] = w;
      if (KeyWord::Empty(w)) continue;
      uint64_t hash = 0;
      PMHASH_RETURN_IF_ERROR(CheckEntry(s, k, prefix, d, &hash));
      if ((hash >> (64 - d)) != prefix) {
        return Status::Corruption(at + ": slot " + std::to_string(k) +
                                  " holds a key of another segment");
      }
      if (t->filter != nullptr && !Directory::MayHold({t, hash >> (64 - g)}, hash)) {
        return Status::Corruption(at + ": slot " + std::to_string(k) +
                                  " holds a key its directory entry's filter byte misses");
      }
      std::string key, value;
      EntryKeyValue(w, s->bucket[k / 4].slot[k % 4].value, hash, &key, &value);
      if (!keys.insert(key).second) {
        return Status::Corruption(at + ": a key is stored twice (again in slot " +
                                  std::to_string(k) + ")");
      }
      ++n;
    }
    uint64_t exact[kSlots];
    std::copy(words, words + kSlots, exact);
    SetExactHints(exact);
    for (int k = 0; k < kSlots; ++k) {
      if ((exact[k] ^ words[k]) & KeyWord::kHint) {
        return Status::Corruption(at + ": the hint bit of slot " + std::to_string(k) +
                                  " does not match the entries (invariant 2)");
      }
    }
    if (DirEntry::Count(e) != kUnknownCount && DirEntry::Count(e) != n) {
      return Status::Corruption(at + " counts " + std::to_string(DirEntry::Count(e)) +
                                " entries, its segment holds " + std::to_string(n));
    }
    ++depths[d];
    total += n;
    i += range;
  }
  if (total != Count()) {
    return Status::Corruption("spash: Count() is " + std::to_string(Count()) + " but " +
                              std::to_string(total) + " slots are occupied");
  }
  uint64_t records = 0;
  for (uint64_t block : blocks_) {
    const auto* h = pool().At<const spash::BlockHeader>(block);
    if (h->kind != spash::kSegmentBlock) continue;
    const auto* r = pool().At<const uint64_t>(block + sizeof(spash::BlockHeader));
    for (unsigned k = 0; k < kSpashSegmentsPerBlock; ++k) records += r[k] != 0;
  }
  if (records != seen.size() || seen.size() != live_segments_.load()) {
    return Status::Corruption("spash: " + std::to_string(records) + " live depth records, " +
                              std::to_string(seen.size()) + " segments in the directory, " +
                              std::to_string(live_segments_.load()) + " counted");
  }
  for (unsigned d = 0; d < 64; ++d) {
    if (depths[d] != depth_count_[d].load()) {
      return Status::Corruption("spash: " + std::to_string(depths[d]) + " segments of depth " +
                                std::to_string(d) + ", but the count says " +
                                std::to_string(depth_count_[d].load()));
    }
  }
  return Status::OK();
}

void Spash::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  for (uint64_t block : blocks_) {
    mark(block, sizeof(spash::BlockHeader), pm::Region::kEngineMetadata, true);
    const auto* h = pool().At<const spash::BlockHeader>(block);
    if (h->kind == spash::kChunkBlock) {
      // Read (and checked) only by a clean open that loads it.
      mark(block + sizeof(spash::BlockHeader), sizeof(UsageArea), pm::Region::kEngineMetadata,
           usage_loaded_);
      continue;
    }
    // Depth records are sealed: every byte checks itself at open.
    mark(block + sizeof(spash::BlockHeader), kSpashSegmentsPerBlock * sizeof(uint64_t),
         pm::Region::kEngineMetadata, true);
    const auto* records = pool().At<const uint64_t>(block + sizeof(spash::BlockHeader));
    for (unsigned k = 0; k < kSpashSegmentsPerBlock; ++k) {
      if (records[k] == 0) continue;
      const uint64_t seg = block + kSpashSegmentArea + k * sizeof(Segment);
      mark(seg, sizeof(Segment), pm::Region::kSlots, false);
      const auto* s = pool().At<const Segment>(seg);
      for (int i = 0; i < kSlots; ++i) {
        const uint64_t w = KeyWordOf(s, i);
        if (KeyWord::Form(w) == KeyWord::kRecord) {
          codec().DescribeRecord(SlotForm::kRecord, KvWords{KeyWord::RecordOffset(w), 0}, mark);
        }
      }
    }
  }
}

// ---- Registration ----------------------------------------------------------------------------

void RegisterEngines_spash(EngineRegistry& registry) {
  EngineInfo info;
  info.options = {
      OptionSpec::Uint("initial_depth", std::nullopt, kSpashMinDepth, 30,
                       "2^initial_depth segments at creation, and the depth merges and "
                       "halving stop at (auto: initial_capacity / 16 rounded down to a power "
                       "of two, at least 2^3, at most a quarter of the pool)"),
      OptionSpec::Double("merge_fill", 0.5, 0, 0.75,
                         "a segment and its buddy of the same depth merge when they hold at "
                         "most merge_fill x 16 entries together (0: never)"),
      OptionSpec::Uint("hot_keys", 8192, 0, uint64_t{1} << 24,
                       "entries of the hot-key detector (the paper's 8K; 0: every key cold)"),
      OptionSpec::Uint("hot_per_partition", 2, 1, 16,
                       "hot keys per partition of the detector (the paper's 2)"),
      OptionSpec::Bool("hot_oracle", false,
                       "the paper's oracle detector (Fig. 12a) in place of the hot-key list: "
                       "hot are the hot_keys keys the workload says it will access most "
                       "(pmhash bench tells it; until then every key is cold)"),
      OptionSpec::Uint("update_flush", 0, 0, 2,
                       "eadr, an update's new data: 0 adaptive (Table I), 1 always written "
                       "back (in-place w/ flush), 2 never (in-place w/o flush)"),
      OptionSpec::Bool("compacted_flush", true,
                       "records <= 128 bytes appended to a per-thread 256-byte chunk (off: a "
                       "chunk per record)"),
      OptionSpec::Bool("chunk_write_back", true,
                       "eadr: write a full chunk back at once (the paper's active XPLine "
                       "flush; off: leave it to cache eviction)"),
      OptionSpec::Bool("htm_emulated", false,
                       "run commit phases in the crash simulator's atomic regions (an emulated "
                       "HTM transaction) with the fallback lock after htm_retries aborts (a "
                       "test mode: regions are serialized)"),
      OptionSpec::Bool("htm_rtm", false,
                       "eadr: run commit phases in real RTM transactions (Intel TSX, the "
                       "paper's HTM) with the fallback lock after htm_retries aborts; refused "
                       "where the CPU runs none"),
      OptionSpec::Uint("htm_retries", 4, 1, 1000, "aborts before the fallback lock"),
      OptionSpec::Double("htm_abort_rate", 0, 0, 1,
                         "htm_emulated, htm_rtm: the probability that a region aborts at its "
                         "start (and, emulated, at its end; injected)"),
      OptionSpec::Bool("nta_reads", false,
                       "searches ask for the bucket as non-temporal (prefetchnta), so buckets "
                       "do not evict the directory from the cache (not in the paper)"),
      OptionSpec::Bool("filter", false,
                       "a one-byte Bloom filter per directory entry, in DRAM beside the "
                       "directory: most searches of absent keys answer from it, reading "
                       "neither the entry nor the segment (not in the paper)"),
      OptionSpec::Bool("hint", false,
                       "a 4-byte segment hint per 4 directory entries, in DRAM beside the "
                       "directory: a search or write prefetches its bucket in the hinted "
                       "segment while its own entry is on its way (not in the paper)"),
      OptionSpec::Bool("group_commit", false,
                       "a write batch (Index::Write): commits that changed one segment are "
                       "neither flushed nor fenced, their ranges held, until the group's end "
                       "flushes them and fences once (the batch's end, 64 commits, or before "
                       "the thread would wait); a crash then leaves each key at a prefix of "
                       "its own ops (not in the paper)"),
      OptionSpec::Bool("prefetch_records", true,
                       "the pipelines (MultiGet, Write) prefetch the records the main "
                       "bucket's fingerprints point to, as the paper's step 4 (off: the "
                       "directory entry and the bucket only, for comparing within one run)"),
      OptionSpec::Bool("first_try", true,
                       "searches of 8-byte keys try a short path first (inline entries, no "
                       "call; not in the paper); off: every search takes the general one, "
                       "for comparing the two within one run"),
      OptionSpec::Bool("read_lock", false,
                       "searches lock the segment too (the paper's \"w/ write & read lock\" "
                       "variant; off: lock-free searches)")};
  info.capabilities = {.resize_switch = true,
                       .resize_when = "a full segment splits (and doubles the directory when "
                                      "it must); a sparse buddy pair merges",
                       .refuses_when_full = true,
                       .refuses_full_collisions = true,
                       .pipelined_multiget = true,
                       .pipelined_write = true,
                       .inline_keys_verbatim = false};
  // From 8 segments (initial_capacity 16): splits, doublings, merges and halvings within
  // the crash suite's short scripts.
  info.test = {.crash_options = {},
               .thread_crash_options = {},
               .growth_counters = {"splits", "doublings", "merges", "halvings"},
               .shared_arena_value_bytes = 200};
  info.description = {"spash",
                      "fine-grained extendible hashing: DRAM directory with versions and "
                      "locks over metadata-free 256-B segments; compound slots, overflow "
                      "hints, compacted flush, adaptive update; eADR native",
                      "002 Spash", /*crash_consistent=*/true};
  registry.Add<Spash>(std::move(info));
}

}  // namespace pmhash::engines
