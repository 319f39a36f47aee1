// Crash-safe PM allocator: chunk table in PM, fine-grained bitmaps in DRAM.
//
// On-media layout (pool offsets; H = pool.heap_offset(), E = H + pool.heap_size()):
//
//   [H, H+64)             AllocHeader   immutable after Format, checksummed
//   [H+64, H+128)         StateHeader   checksum of the clean-shutdown state
//   [T, T + 8n)           uint64_t table[n]       T = H + 4096; one entry per chunk
//   [S, S + 512n)         uint8_t bitmaps[n][512] S = align4096(T + 8n); written only by
//                                                 PersistState, for small chunks
//   [D, D + n * 64 KiB)   chunks                  D = align4096(S + 512n), D + n*64Ki <= E
//
//   struct AllocHeader {          // 64 bytes
//     char magic[8];              // "PMHALLOC"
//     uint32_t version;           // kAllocVersion; the size classes below are part of it
//     uint32_t chunk_shift;       // 16: 64 KiB chunks
//     uint64_t chunk_count;       // n
//     uint64_t table_offset, state_offset, data_offset, heap_end;
//     uint64_t checksum;          // Hash64 of the bytes before it
//   };
//   struct StateHeader { uint64_t checksum; uint64_t reserved[7]; };
//
//   Chunk table entry c (8 bytes, changed only by one failure-atomic Store): the sealed
//   word SealWord(kind << 40 | value, salt = c) (util/hash.h), so a damaged byte of an
//   entry is always detected, at Load and Rebuild alike, and an entry copied to another
//   chunk almost always:
//     kFree  << 40                          free (Format writes it into every entry)
//     kSmall << 40 | class                  units of kClassSizes[class], back to back
//                                           from the chunk start
//     kHead  << 40 | n                      first chunk of a run of n chunks
//     kCont  << 40 | d                      d-th chunk of a run (its head is d back)
//   Sealing within the entry keeps every update one 8-byte store: no separate check field
//   that a crash could leave out of step with its entry.
//
//   Bitmap of a small chunk: bit u (word u/64, bit u%64, little endian) = unit u in use;
//   bits past the class's unit count are zero.
//
// Invariants:
//  * A chunk's table entry is persisted (flush + fence) before any block in it is handed
//    out, so after a crash every block the engine reached is described by the table.
//    Entries of blocks never handed out may be stale (a run half written is a head
//    without all its continuations, or continuations without a head): Rebuild rewrites
//    them. No entry is ever torn (one 8-byte store each), so an entry that fails its seal
//    is damage: Corruption naming the chunk and the entry's pool offset, at Load and at
//    Rebuild.
//  * The state is checksummed over the table and the bitmaps of small chunks. Load (clean
//    shutdown only) trusts nothing it has not validated: a damaged pool gives Corruption.
//  * Verify (pmhash pool check) compares the allocated set with what the engine reaches.
//  * Rebuild keeps exactly the visited blocks: a small chunk without live units and a
//    run whose head is not visited become free.
//
// Concurrency: each size class is striped into `arenas` lists (AllocatorOptions; threads
// pick one round robin); a list has a mutex guarding its chunks' bitmaps and its chunks with free
// units. One more mutex guards chunk-level changes (free extents, table writes). Lock
// order: list, then chunk; at most one list lock is waited for. DRAM mirrors of the
// table and of each chunk's arena (atomics) let Free find a block's list without a
// lock; both are re-checked under the list lock, which guards their change.
#include "pm/alloc.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "util/hash.h"

namespace pmhash::pm {

namespace {

inline constexpr char kAllocMagic[8] = {'P', 'M', 'H', 'A', 'L', 'L', 'O', 'C'};
inline constexpr uint32_t kAllocVersion = 2;  // 2: sealed chunk-table entries
inline constexpr uint32_t kChunkShift = 16;
inline constexpr uint64_t kChunkSize = uint64_t{1} << kChunkShift;  // 64 KiB
inline constexpr uint64_t kMetaOffset = 4096;  // the table starts one page into the heap
inline constexpr uint64_t kPage = 4096;

// Size classes: part of the on-media format (do not change without a version bump).
// Classes of 64 B and more are multiples of 64, of 256 B and more multiples of 256, so
// units at k * size from a 4 KiB-aligned chunk meet the alignment alloc.h promises.
inline constexpr std::array<uint32_t, 20> kClassSizes = {
    16,   32,   48,   64,   128,  192,  256,   512,   768,   1024,
    1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
inline constexpr uint32_t kNumClasses = kClassSizes.size();
// Each class is striped into arenas (DRAM only): a thread allocates from its arena, so
// threads rarely share a lock; a chunk belongs to one arena while it serves a class.
// Lists exist for kMaxAllocArenas; an allocator uses the first `arenas_` of each class.
inline constexpr uint32_t kNumLists = kNumClasses * kMaxAllocArenas;
inline constexpr uint64_t kMaxSmall = kClassSizes.back();
inline constexpr uint32_t kMaxUnits = kChunkSize / kClassSizes.front();
inline constexpr uint64_t kBitmapBytes = kMaxUnits / 8;

constexpr bool ClassesAligned() {
  for (uint32_t i = 0; i < kNumClasses; ++i) {
    const uint32_t s = kClassSizes[i];
    if (s % 16 != 0 || (s >= 64 && s % 64 != 0) || (s >= 256 && s % 256 != 0)) return false;
    if (i > 0 && s <= kClassSizes[i - 1]) return false;
  }
  return true;
}
static_assert(ClassesAligned(), "size classes must be increasing and keep alloc.h's alignment");
static_assert(kMaxSmall * 2 <= kChunkSize, "a small chunk holds at least two units");
static_assert(kChunkSize % kPage == 0, "runs are 4 KiB aligned");
static_assert(kBitmapBytes % 64 == 0, "a chunk's bitmap slot is whole cache lines");

struct AllocHeader {
  char magic[8];
  uint32_t version;
  uint32_t chunk_shift;
  uint64_t chunk_count;
  uint64_t table_offset, state_offset, data_offset, heap_end;
  uint64_t checksum;
};
static_assert(sizeof(AllocHeader) == 64 && offsetof(AllocHeader, version) == 8 &&
                  offsetof(AllocHeader, chunk_shift) == 12 &&
                  offsetof(AllocHeader, chunk_count) == 16 &&
                  offsetof(AllocHeader, table_offset) == 24 &&
                  offsetof(AllocHeader, state_offset) == 32 &&
                  offsetof(AllocHeader, data_offset) == 40 &&
                  offsetof(AllocHeader, heap_end) == 48 && offsetof(AllocHeader, checksum) == 56,
              "the allocator header is one cache line, laid out as above");

struct StateHeader {
  uint64_t checksum;
  uint64_t reserved[7];
};
static_assert(sizeof(StateHeader) == 64 && offsetof(StateHeader, checksum) == 0,
              "the state header is one cache line, its checksum first");
static_assert(sizeof(AllocHeader) + sizeof(StateHeader) <= kMetaOffset,
              "headers fit before the table");

// ---- chunk table entries: the unsealed (logical) form, as the DRAM mirror holds it ----
enum Kind : uint64_t { kFree = 1, kSmall = 2, kHead = 3, kCont = 4 };  // 0: never valid
inline constexpr int kKindShift = 40;
inline constexpr uint64_t kPayloadMask = (uint64_t{1} << kKindShift) - 1;
static_assert(kKindShift + 8 <= kSealedPayloadBits, "an entry fits a sealed word");

constexpr uint64_t Entry(Kind kind, uint64_t payload) {
  return (uint64_t{kind} << kKindShift) | payload;
}
inline constexpr uint64_t kFreeEntry = Entry(kFree, 0);
// An invalid kind is reported as 0xff.
constexpr uint64_t KindOf(uint64_t e) {
  const uint64_t k = e >> kKindShift;
  return k >= kFree && k <= kCont ? k : 0xff;
}
constexpr uint64_t PayloadOf(uint64_t e) { return e & kPayloadMask; }

constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// size -> class, for sizes 1..kMaxSmall, indexed by (size + 15) / 16.
struct ClassLookup {
  std::array<uint8_t, kMaxSmall / 16 + 1> table{};
  constexpr ClassLookup() {
    uint32_t c = 0;
    for (uint64_t i = 0; i < table.size(); ++i) {
      while (kClassSizes[c] < i * 16) ++c;
      table[i] = static_cast<uint8_t>(c);
    }
  }
};
inline constexpr ClassLookup kClassLookup;

inline uint32_t ClassOf(size_t size) { return kClassLookup.table[(size + 15) >> 4]; }
inline uint32_t UnitsOf(uint32_t cls) { return kChunkSize / kClassSizes[cls]; }
inline uint32_t WordsOf(uint32_t cls) { return (UnitsOf(cls) + 63) / 64; }
// Bits of the last bitmap word that are past the last unit.
inline uint64_t TailMask(uint32_t cls) {
  const uint32_t r = UnitsOf(cls) % 64;
  return r == 0 ? 0 : ~uint64_t{0} << r;
}

struct Geometry {
  uint64_t chunk_count = 0, table_offset = 0, state_offset = 0, data_offset = 0, heap_end = 0;
};

uint64_t DataOffsetFor(uint64_t heap_offset, uint64_t n) {
  const uint64_t table = heap_offset + kMetaOffset;
  const uint64_t state = AlignUp(table + 8 * n, kPage);
  return AlignUp(state + kBitmapBytes * n, kPage);
}

// The layout follows from the pool header alone; Load checks the stored copy against it.
Geometry ComputeGeometry(const Pool& pool) {
  Geometry g;
  const uint64_t h = pool.heap_offset();
  g.heap_end = h + pool.heap_size();
  if (pool.heap_size() < kMetaOffset + 2 * kPage) return g;
  uint64_t n = (pool.heap_size() - kMetaOffset) / (kChunkSize + 8 + kBitmapBytes);
  while (n > 0 && DataOffsetFor(h, n) + n * kChunkSize > g.heap_end) --n;
  g.chunk_count = n;
  g.table_offset = h + kMetaOffset;
  g.state_offset = AlignUp(g.table_offset + 8 * n, kPage);
  g.data_offset = DataOffsetFor(h, n);
  return g;
}

uint64_t HeaderChecksum(const AllocHeader& h) {
  return Hash64(&h, offsetof(AllocHeader, checksum), 0x616c6c6f63ull);
}

// One extent of free chunks.
struct Extent {
  uint64_t start, len;
};

class HeapAllocator final : public Allocator {
 public:
  HeapAllocator(Pool& pool, Persister& persister, const Geometry& g, uint32_t arenas)
      : pool_(pool),
        persister_(persister),
        g_(g),
        arenas_(arenas),
        heap_size_(pool.heap_size()),
        table_(pool.At<uint64_t>(g.table_offset)),
        mirror_(new std::atomic<uint64_t>[g.chunk_count]),
        small_(g.chunk_count),
        arena_(new std::atomic<uint8_t>[g.chunk_count]) {
    for (uint64_t c = 0; c < g.chunk_count; ++c) {
      mirror_[c].store(kFreeEntry, std::memory_order_relaxed);
      arena_[c].store(0, std::memory_order_relaxed);
    }
  }

  // ---- setup (single-threaded) ----

  Status FormatHeap();
  Status LoadState();
  Status RebuildState(const LiveBlockEnumerator& enumerate);

  // ---- Allocator ----

  Result<uint64_t> Allocate(size_t size) override {
    if (size == 0) return Status::InvalidArgument("cannot allocate 0 bytes");
    if (size > heap_size_) {
      return Status::InvalidArgument("cannot allocate " + std::to_string(size) +
                                     " bytes: larger than the heap (" +
                                     std::to_string(heap_size_) + " bytes)");
    }
    if (InjectedFailure(size)) {
      return Status::PoolFull("pool full: injected failure of a " + std::to_string(size) +
                              "-byte allocation (AllocationFaults)");
    }
    if (size <= kMaxSmall) return AllocateSmall(ClassOf(size));
    return AllocateRun((size + kChunkSize - 1) >> kChunkShift);
  }

  void Free(uint64_t offset) override {
    uint64_t c;
    if (!ChunkOf(offset, &c)) return;  // not a heap block: ignore (Free has no Status)
    const uint64_t e = mirror_[c].load(std::memory_order_acquire);
    const uint64_t kind = KindOf(e);
    if (kind == kSmall) {
      FreeSmall(offset, c, static_cast<uint32_t>(PayloadOf(e)));
    } else if (kind == kHead && offset == ChunkOffset(c)) {
      FreeRun(c);
    }
  }

  size_t UsableSize(uint64_t offset) const override {
    uint64_t c;
    if (!ChunkOf(offset, &c)) return 0;
    const uint64_t e = mirror_[c].load(std::memory_order_acquire);
    const uint64_t kind = KindOf(e);
    if (kind == kSmall) {
      const auto cls = static_cast<uint32_t>(PayloadOf(e));
      const uint32_t a = arena_[c].load(std::memory_order_acquire);
      std::lock_guard<std::mutex> lock(List(cls, a).mu);
      if (!UnitInUse(offset, c, cls, a)) return 0;
      return kClassSizes[cls];
    }
    if (kind == kHead && offset == ChunkOffset(c)) {
      std::lock_guard<std::mutex> lock(chunk_mu_);
      const uint64_t e2 = mirror_[c].load(std::memory_order_relaxed);
      return KindOf(e2) == kHead ? PayloadOf(e2) * kChunkSize : 0;
    }
    return 0;
  }

  bool IsAllocated(uint64_t offset) const override { return UsableSize(offset) != 0; }

  uint64_t BytesInUse() const override {
    uint64_t sum = run_bytes_.load(std::memory_order_relaxed);
    for (const SizeClass& sc : lists_) sum += sc.bytes.load(std::memory_order_relaxed);
    return sum;
  }
  uint64_t Capacity() const override { return g_.chunk_count * kChunkSize; }

  Status PersistState() override;
  Result<uint64_t> Verify(const LiveBlockEnumerator& enumerate) const override;
  void DescribeLayout(const RegionVisitor& mark) const override;

 private:
  struct SmallChunk {
    explicit SmallChunk(uint32_t c)
        : cls(c), units(UnitsOf(c)), words(WordsOf(c)), free(units), bits(new uint64_t[words]) {
      std::memset(bits.get(), 0, words * 8);
      bits[words - 1] = TailMask(c);  // units past the end look used
    }
    uint32_t cls, units, words, free;
    uint32_t hint = 0;  // no free unit in words before this one
    bool in_partial = false;
    std::unique_ptr<uint64_t[]> bits;
  };

  struct alignas(64) SizeClass {
    mutable std::mutex mu;
    std::vector<uint32_t> partial;  // chunks of this class with a free unit
    // Usable bytes allocated from this class; written under mu (no shared hot counter).
    std::atomic<uint64_t> bytes{0};
    void AddBytes(int64_t delta) {
      bytes.store(bytes.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    }
  };

  uint64_t ChunkOffset(uint64_t c) const { return g_.data_offset + (c << kChunkShift); }
  bool ChunkOf(uint64_t offset, uint64_t* c) const {
    if (offset < g_.data_offset) return false;
    *c = (offset - g_.data_offset) >> kChunkShift;
    return *c < g_.chunk_count;
  }

  SizeClass& List(uint32_t cls, uint32_t arena) const {
    return lists_[cls * kMaxAllocArenas + arena];
  }
  // The calling thread's arena (threads are spread round robin).
  uint32_t ThreadArena() const {
    static std::atomic<uint32_t> next{0};
    thread_local const uint32_t ticket = next.fetch_add(1, std::memory_order_relaxed);
    return ticket % arenas_;
  }

  // Caller holds the lock of list (cls, a). Whether offset is the start of a used unit of
  // chunk c, which must still serve class cls in arena a (re-checked under that lock:
  // both change only under it).
  bool UnitInUse(uint64_t offset, uint64_t c, uint32_t cls, uint32_t a) const {
    if (mirror_[c].load(std::memory_order_acquire) != Entry(kSmall, cls) ||
        arena_[c].load(std::memory_order_relaxed) != a) {
      return false;
    }
    const uint64_t within = offset - ChunkOffset(c);
    const uint32_t size = kClassSizes[cls];
    if (within % size != 0 || within / size >= UnitsOf(cls)) return false;
    const uint64_t u = within / size;
    return (small_[c]->bits[u / 64] >> (u % 64)) & 1;
  }

  // Writes table entries [c, c+n) (already stored) back and fences.
  void PersistEntries(uint64_t c, uint64_t n) {
    persister_.Persist(&table_[c], n * sizeof(uint64_t));
  }
  uint64_t Mirror(uint64_t c) const { return mirror_[c].load(std::memory_order_relaxed); }
  void SetEntry(uint64_t c, uint64_t e) {
    persister_.Store(&table_[c], SealWord(e, c));
    mirror_[c].store(e, std::memory_order_release);
  }
  // Unseals every table entry into the mirror; Corruption naming the first damaged one.
  Status ReadTable();
  std::string EntryWhere(uint64_t c) const {
    return "allocator chunk " + std::to_string(c) + " (table entry at pool offset " +
           std::to_string(g_.table_offset + 8 * c) + ")";
  }

  std::string FullMessage(const std::string& what) const {
    return "pool full: no room for " + what + " (" + std::to_string(BytesInUse()) +
           " of " + std::to_string(Capacity()) + " heap bytes in use)";
  }

  Result<uint64_t> AllocateSmall(uint32_t cls);
  // With the list's lock held: a new chunk for it. False if the pool has none.
  bool AcquireChunk(SizeClass& sc, uint32_t cls, uint32_t arena);
  // With the list's lock held and a chunk in its partial list: one unit.
  uint64_t TakeUnit(SizeClass& sc, uint32_t cls);
  Result<uint64_t> AllocateRun(uint64_t n);
  void FreeSmall(uint64_t offset, uint64_t c, uint32_t cls);
  void FreeRun(uint64_t c);

  // Free extents (chunk_mu_ held).
  void AddFree(uint64_t start, uint64_t len);
  bool TakeFree(uint64_t n, uint64_t* start);
  void RemoveFromPartial(SizeClass& sc, uint32_t c);
  // Returns chunk c of class sc (no unit in use; class lock held) to the heap.
  void ReleaseChunk(SizeClass& sc, uint64_t c);
  // Returns the empty chunks each list keeps for reuse (the pool is full otherwise).
  // `held` is the list whose lock the caller holds (others are only tried, so two
  // lists reclaiming at once cannot deadlock), or kNumLists for none.
  bool ReclaimEmptyChunks(uint32_t held);

  // Rebuilds every DRAM structure from mirror_ (entries validated) and small_.
  void RebuildDram();
  uint64_t StateChecksum() const;

  Pool& pool_;
  Persister& persister_;
  const Geometry g_;
  const uint32_t arenas_;  // 1 .. kMaxAllocArenas
  const uint64_t heap_size_;
  uint64_t* const table_;
  std::unique_ptr<std::atomic<uint64_t>[]> mirror_;
  std::vector<std::unique_ptr<SmallChunk>> small_;  // guarded by the chunk's list lock
  std::unique_ptr<std::atomic<uint8_t>[]> arena_;    // the arena of a small chunk
  mutable std::array<SizeClass, kNumLists> lists_;
  mutable std::mutex chunk_mu_;
  std::map<uint64_t, uint64_t> free_by_start_;       // start -> len
  std::set<std::pair<uint64_t, uint64_t>> free_by_len_;  // (len, start)
  std::atomic<uint64_t> run_bytes_{0};  // bytes in runs; written under chunk_mu_
  bool loaded_ = false;                  // attached by Load (the saved state was checked)
};

// ---- chunk-level ----

void HeapAllocator::AddFree(uint64_t start, uint64_t len) {
  auto next = free_by_start_.lower_bound(start);
  if (next != free_by_start_.end() && next->first == start + len) {
    len += next->second;
    free_by_len_.erase({next->second, next->first});
    next = free_by_start_.erase(next);
  }
  if (next != free_by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_by_len_.erase({prev->second, prev->first});
      free_by_start_.erase(prev);
    }
  }
  free_by_start_[start] = len;
  free_by_len_.insert({len, start});
}

bool HeapAllocator::TakeFree(uint64_t n, uint64_t* start) {
  auto it = free_by_len_.lower_bound({n, 0});  // best fit, lowest address among equals
  if (it == free_by_len_.end()) return false;
  const auto [len, s] = *it;
  free_by_len_.erase(it);
  free_by_start_.erase(s);
  if (len > n) {
    free_by_start_[s + n] = len - n;
    free_by_len_.insert({len - n, s + n});
  }
  *start = s;
  return true;
}

void HeapAllocator::RemoveFromPartial(SizeClass& sc, uint32_t c) {
  auto it = std::find(sc.partial.begin(), sc.partial.end(), c);
  if (it != sc.partial.end()) {
    *it = sc.partial.back();
    sc.partial.pop_back();
  }
}

Result<uint64_t> HeapAllocator::AllocateSmall(uint32_t cls) {
  const uint32_t arena = ThreadArena();
  {
    SizeClass& sc = List(cls, arena);
    std::lock_guard<std::mutex> lock(sc.mu);
    if (!sc.partial.empty() || AcquireChunk(sc, cls, arena)) return TakeUnit(sc, cls);
  }
  // No chunk left in the pool: use room the other arenas of the class still have (one
  // list lock at a time).
  for (uint32_t i = 1; i < arenas_; ++i) {
    SizeClass& other = List(cls, (arena + i) % arenas_);
    std::lock_guard<std::mutex> lock(other.mu);
    if (!other.partial.empty()) return TakeUnit(other, cls);
  }
  return Status::PoolFull(
      FullMessage("a chunk of " + std::to_string(kClassSizes[cls]) + "-byte blocks"));
}

bool HeapAllocator::AcquireChunk(SizeClass& sc, uint32_t cls, uint32_t arena) {
  uint64_t c;
  for (bool retried = false;; retried = true) {
    std::unique_lock<std::mutex> chunk_lock(chunk_mu_);
    if (TakeFree(1, &c)) {
      arena_[c].store(static_cast<uint8_t>(arena), std::memory_order_relaxed);
      // The chunk's role is durable before any block of it is handed out.
      SetEntry(c, Entry(kSmall, cls));
      PersistEntries(c, 1);
      break;
    }
    chunk_lock.unlock();
    if (retried || !ReclaimEmptyChunks(static_cast<uint32_t>(&sc - lists_.data()))) {
      return false;
    }
  }
  small_[c] = std::make_unique<SmallChunk>(cls);
  small_[c]->in_partial = true;
  sc.partial.push_back(static_cast<uint32_t>(c));
  return true;
}

uint64_t HeapAllocator::TakeUnit(SizeClass& sc, uint32_t cls) {
  const uint32_t c = sc.partial.back();
  SmallChunk& ch = *small_[c];
  uint32_t w = ch.hint;
  while (ch.bits[w] == ~uint64_t{0}) ++w;  // free > 0, so a zero bit exists
  const uint32_t b = __builtin_ctzll(~ch.bits[w]);
  ch.bits[w] |= uint64_t{1} << b;
  ch.hint = w;
  if (--ch.free == 0) {
    ch.in_partial = false;
    sc.partial.pop_back();
  }
  sc.AddBytes(kClassSizes[cls]);
  return ChunkOffset(c) + uint64_t{w * 64 + b} * kClassSizes[cls];
}

void HeapAllocator::FreeSmall(uint64_t offset, uint64_t c, uint32_t cls) {
  const uint32_t a = arena_[c].load(std::memory_order_acquire);
  SizeClass& sc = List(cls, a);
  std::lock_guard<std::mutex> lock(sc.mu);
  if (!UnitInUse(offset, c, cls, a)) return;  // double or bogus free: ignore
  SmallChunk& ch = *small_[c];
  const uint64_t u = (offset - ChunkOffset(c)) / kClassSizes[cls];
  ch.bits[u / 64] &= ~(uint64_t{1} << (u % 64));
  ch.hint = std::min<uint32_t>(ch.hint, u / 64);
  ++ch.free;
  sc.AddBytes(-int64_t{kClassSizes[cls]});
  if (!ch.in_partial) {
    ch.in_partial = true;
    sc.partial.push_back(static_cast<uint32_t>(c));
  }
  // Return an empty chunk to the heap unless it is the list's only one with room (so a
  // class at the boundary does not rewrite the table on every allocate/free pair).
  if (ch.free == ch.units && sc.partial.size() > 1) ReleaseChunk(sc, c);
}

void HeapAllocator::ReleaseChunk(SizeClass& sc, uint64_t c) {
  RemoveFromPartial(sc, static_cast<uint32_t>(c));
  std::lock_guard<std::mutex> chunk_lock(chunk_mu_);
  SetEntry(c, kFreeEntry);
  PersistEntries(c, 1);
  AddFree(c, 1);
  small_[c].reset();
}

bool HeapAllocator::ReclaimEmptyChunks(uint32_t held) {
  bool any = false;
  for (uint32_t k = 0; k < kNumLists; ++k) {
    if (k == held) continue;
    SizeClass& sc = lists_[k];
    std::unique_lock<std::mutex> lock(sc.mu, std::defer_lock);
    if (held < kNumLists) {
      if (!lock.try_lock()) continue;
    } else {
      lock.lock();
    }
    for (size_t i = sc.partial.size(); i > 0; --i) {
      const uint32_t c = sc.partial[i - 1];
      if (small_[c]->free == small_[c]->units) {
        ReleaseChunk(sc, c);
        any = true;
      }
    }
  }
  return any;
}

Result<uint64_t> HeapAllocator::AllocateRun(uint64_t n) {
  std::unique_lock<std::mutex> lock(chunk_mu_);
  uint64_t c;
  if (!TakeFree(n, &c)) {
    lock.unlock();  // lock order: class locks before the chunk lock
    const bool reclaimed = ReclaimEmptyChunks(kNumLists);
    lock.lock();
    if (!reclaimed || !TakeFree(n, &c)) {
      return Status::PoolFull(
          FullMessage("a run of " + std::to_string(n) + " contiguous 64 KiB chunks"));
    }
  }
  for (uint64_t i = 1; i < n; ++i) SetEntry(c + i, Entry(kCont, i));
  SetEntry(c, Entry(kHead, n));
  PersistEntries(c, n);  // durable before the run is handed out
  run_bytes_.store(run_bytes_.load(std::memory_order_relaxed) + n * kChunkSize,
                   std::memory_order_relaxed);
  return ChunkOffset(c);
}

void HeapAllocator::FreeRun(uint64_t c) {
  std::lock_guard<std::mutex> lock(chunk_mu_);
  const uint64_t e = mirror_[c].load(std::memory_order_relaxed);
  if (KindOf(e) != kHead) return;  // freed meanwhile: ignore
  const uint64_t n = PayloadOf(e);
  SetEntry(c, kFreeEntry);  // head first: a torn run without a head is just free space
  for (uint64_t i = 1; i < n; ++i) SetEntry(c + i, kFreeEntry);
  PersistEntries(c, n);
  AddFree(c, n);
  run_bytes_.store(run_bytes_.load(std::memory_order_relaxed) - n * kChunkSize,
                   std::memory_order_relaxed);
}

// ---- setup ----

void HeapAllocator::RebuildDram() {
  free_by_start_.clear();
  free_by_len_.clear();
  for (SizeClass& sc : lists_) {
    sc.partial.clear();
    sc.bytes.store(0, std::memory_order_relaxed);
  }
  uint64_t run_bytes = 0;
  uint64_t free_start = 0, free_len = 0;
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const uint64_t e = mirror_[c].load(std::memory_order_relaxed);
    if (e == kFreeEntry) {
      if (free_len == 0) free_start = c;
      ++free_len;
      continue;
    }
    if (free_len > 0) AddFree(free_start, free_len);
    free_len = 0;
    if (KindOf(e) == kHead) run_bytes += PayloadOf(e) * kChunkSize;
    if (KindOf(e) == kSmall) {
      SmallChunk& ch = *small_[c];
      const uint32_t a = c % arenas_;
      arena_[c].store(static_cast<uint8_t>(a), std::memory_order_relaxed);
      SizeClass& sc = List(ch.cls, a);
      sc.AddBytes(int64_t{ch.units - ch.free} * kClassSizes[ch.cls]);
      if (ch.free > 0) {
        ch.in_partial = true;
        sc.partial.push_back(static_cast<uint32_t>(c));
      }
    }
  }
  if (free_len > 0) AddFree(free_start, free_len);
  run_bytes_.store(run_bytes, std::memory_order_relaxed);
}

Status HeapAllocator::FormatHeap() {
  uint64_t words[512];  // sealed free entries, written a batch at a time
  for (uint64_t c = 0; c < g_.chunk_count; c += std::size(words)) {
    const uint64_t n = std::min<uint64_t>(std::size(words), g_.chunk_count - c);
    for (uint64_t i = 0; i < n; ++i) {
      words[i] = SealWord(kFreeEntry, c + i);
      mirror_[c + i].store(kFreeEntry, std::memory_order_relaxed);
    }
    persister_.Copy(&table_[c], words, n * sizeof(uint64_t));
  }
  persister_.Flush(table_, g_.chunk_count * sizeof(uint64_t));
  auto* state = pool_.At<StateHeader>(pool_.heap_offset() + sizeof(AllocHeader));
  persister_.Zero(state, sizeof(*state));
  persister_.Flush(state, sizeof(*state));
  AllocHeader h{};
  std::memcpy(h.magic, kAllocMagic, sizeof(kAllocMagic));
  h.version = kAllocVersion;
  h.chunk_shift = kChunkShift;
  h.chunk_count = g_.chunk_count;
  h.table_offset = g_.table_offset;
  h.state_offset = g_.state_offset;
  h.data_offset = g_.data_offset;
  h.heap_end = g_.heap_end;
  h.checksum = HeaderChecksum(h);
  auto* dst = pool_.At<AllocHeader>(pool_.heap_offset());
  persister_.Copy(dst, &h, sizeof(h));
  persister_.Persist(dst, sizeof(h));
  RebuildDram();
  return Status::OK();
}

uint64_t HeapAllocator::StateChecksum() const {
  uint64_t h = Hash64(table_, g_.chunk_count * sizeof(uint64_t), 0x7374617465ull);
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const uint64_t e = mirror_[c].load(std::memory_order_relaxed);
    if (KindOf(e) != kSmall || PayloadOf(e) >= kNumClasses) continue;
    const char* bitmap = pool_.At<char>(g_.state_offset + c * kBitmapBytes);
    h = Hash64(bitmap, WordsOf(static_cast<uint32_t>(PayloadOf(e))) * 8, h ^ c);
  }
  return h;
}

Status HeapAllocator::PersistState() {
  uint64_t words[kBitmapBytes / 8];
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const SmallChunk* ch = small_[c].get();
    if (ch == nullptr) continue;
    std::memcpy(words, ch->bits.get(), ch->words * 8);
    words[ch->words - 1] &= ~TailMask(ch->cls);
    char* dst = pool_.At<char>(g_.state_offset + c * kBitmapBytes);
    persister_.Copy(dst, words, ch->words * 8);
    persister_.Flush(dst, ch->words * 8);
  }
  persister_.Fence();  // bitmaps durable before the checksum that vouches for them
  auto* state = pool_.At<StateHeader>(pool_.heap_offset() + sizeof(AllocHeader));
  persister_.Store(&state->checksum, StateChecksum());
  persister_.Persist(&state->checksum, sizeof(uint64_t));
  return Status::OK();
}

void HeapAllocator::DescribeLayout(const RegionVisitor& mark) const {
  const uint64_t h = pool_.heap_offset();
  mark(h, sizeof(AllocHeader), Region::kAllocator, true);
  mark(h + sizeof(AllocHeader), sizeof(uint64_t), Region::kAllocator, loaded_);
  mark(g_.table_offset, g_.chunk_count * sizeof(uint64_t), Region::kAllocator, true);
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const uint64_t e = Mirror(c);
    if (KindOf(e) != kSmall) continue;
    mark(g_.state_offset + c * kBitmapBytes, WordsOf(static_cast<uint32_t>(PayloadOf(e))) * 8,
         Region::kAllocator, loaded_);
  }
}

Status HeapAllocator::ReadTable() {
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    uint64_t e;
    if (!UnsealWord(Persister::Load(&table_[c]), c, &e) || KindOf(e) == 0xff) {
      return Status::Corruption(EntryWhere(c) + " fails its check (allocator metadata damaged)");
    }
    mirror_[c].store(e, std::memory_order_relaxed);
  }
  return Status::OK();
}

Status HeapAllocator::LoadState() {
  PMHASH_RETURN_IF_ERROR(ReadTable());
  const auto* state = pool_.At<StateHeader>(pool_.heap_offset() + sizeof(AllocHeader));
  if (StateChecksum() != state->checksum) {
    return Status::Corruption(
        "allocator state checksum mismatch (state not written at shutdown, or damaged)");
  }
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const uint64_t e = Mirror(c);
    const uint64_t kind = KindOf(e);
    if (e == kFreeEntry) continue;
    if (kind == kSmall) {
      const uint64_t cls = PayloadOf(e);
      if (cls >= kNumClasses) {
        return Status::Corruption(EntryWhere(c) + " has unknown size class " +
                                  std::to_string(cls));
      }
      auto ch = std::make_unique<SmallChunk>(static_cast<uint32_t>(cls));
      const auto* saved = pool_.At<uint64_t>(g_.state_offset + c * kBitmapBytes);
      uint32_t used = 0;
      for (uint32_t w = 0; w < ch->words; ++w) {
        uint64_t bits = saved[w];
        if (w == ch->words - 1) {
          if (bits & TailMask(ch->cls)) {
            return Status::Corruption(
                "allocator chunk " + std::to_string(c) + ": its saved bitmap at pool offset " +
                std::to_string(g_.state_offset + c * kBitmapBytes) + " marks units past the end");
          }
          bits |= TailMask(ch->cls);
        }
        ch->bits[w] = bits;
        used += __builtin_popcountll(saved[w]);
      }
      ch->free = ch->units - used;
      small_[c] = std::move(ch);
      continue;
    }
    if (kind == kHead) {
      const uint64_t n = PayloadOf(e);
      if (n == 0 || n > g_.chunk_count - c) {
        return Status::Corruption(EntryWhere(c) + " heads a run of " + std::to_string(n) +
                                  " chunks that does not fit the heap");
      }
      for (uint64_t i = 1; i < n; ++i) {
        if (Mirror(c + i) != Entry(kCont, i)) {
          return Status::Corruption(EntryWhere(c + i) + " should continue the run at chunk " +
                                    std::to_string(c));
        }
      }
      c += n - 1;
      continue;
    }
    return Status::Corruption(EntryWhere(c) + " has a malformed table entry");
  }
  RebuildDram();
  loaded_ = true;
  return Status::OK();
}

Status HeapAllocator::RebuildState(const LiveBlockEnumerator& enumerate) {
  // Every entry must pass its seal (no entry is ever torn); beyond that, entries are
  // trusted only where a visited block needs them, and everything else is recomputed and
  // rewritten below.
  PMHASH_RETURN_IF_ERROR(ReadTable());
  std::vector<uint8_t> live_run(g_.chunk_count, 0);
  Status bad;
  auto visit = [&](uint64_t offset) {
    if (!bad.ok()) return;
    uint64_t c;
    if (!ChunkOf(offset, &c)) {
      bad = Status::Corruption("live block at offset " + std::to_string(offset) +
                               " is outside the allocator's chunks");
      return;
    }
    const uint64_t e = Mirror(c);
    const uint64_t kind = KindOf(e);
    const uint64_t within = offset - ChunkOffset(c);
    if (kind == kSmall && PayloadOf(e) < kNumClasses) {
      const auto cls = static_cast<uint32_t>(PayloadOf(e));
      const uint32_t size = kClassSizes[cls];
      if (within % size == 0 && within / size < UnitsOf(cls)) {
        if (small_[c] == nullptr) {
          small_[c] = std::make_unique<SmallChunk>(cls);
        }
        SmallChunk& ch = *small_[c];
        const uint64_t u = within / size;
        if (!((ch.bits[u / 64] >> (u % 64)) & 1)) {
          ch.bits[u / 64] |= uint64_t{1} << (u % 64);
          --ch.free;
        }
        return;
      }
    } else if (kind == kHead && within == 0) {
      const uint64_t n = PayloadOf(e);
      bool ok = n >= 1 && n <= g_.chunk_count - c;
      for (uint64_t i = 1; ok && i < n; ++i) ok = Mirror(c + i) == Entry(kCont, i);
      if (ok) {
        live_run[c] = 1;
        return;
      }
      bad = Status::Corruption("live block at offset " + std::to_string(offset) +
                               ": its run's chunk table entries are malformed");
      return;
    }
    bad = Status::Corruption("live block at offset " + std::to_string(offset) +
                             " is not the start of a block the chunk table knows (" +
                             EntryWhere(c) + ")");
  };
  PMHASH_RETURN_IF_ERROR(enumerate(visit));
  PMHASH_RETURN_IF_ERROR(bad);

  // Canonical table: live runs, small chunks with a live unit; the rest free.
  uint64_t changed_lo = g_.chunk_count, changed_hi = 0;
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    uint64_t want = kFreeEntry;
    uint64_t run = 1;
    if (live_run[c]) {
      run = PayloadOf(Mirror(c));
    } else if (small_[c] != nullptr && small_[c]->free < small_[c]->units) {
      want = Mirror(c);
    } else {
      small_[c].reset();
    }
    // A visited run's continuation entries were checked, so no visited block lies in
    // them: runs and small chunks cannot overlap here.
    for (uint64_t i = 0; i < run; ++i) {
      const uint64_t w = live_run[c] ? (i == 0 ? Mirror(c) : Entry(kCont, i)) : want;
      if (Mirror(c + i) != w) {
        SetEntry(c + i, w);
        changed_lo = std::min(changed_lo, c + i);
        changed_hi = std::max(changed_hi, c + i + 1);
      }
    }
    c += run - 1;
  }
  if (changed_lo < changed_hi) PersistEntries(changed_lo, changed_hi - changed_lo);
  RebuildDram();
  return Status::OK();
}

Result<uint64_t> HeapAllocator::Verify(const LiveBlockEnumerator& enumerate) const {
  constexpr size_t kShown = 4;  // problems named in the message; the rest are counted
  std::vector<std::string> shown;
  uint64_t problems = 0;
  auto problem = [&](std::string what) {
    if (++problems <= kShown) shown.push_back(std::move(what));
  };
  auto block = [](uint64_t offset) { return "block at pool offset " + std::to_string(offset); };
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    uint64_t e;
    if (!UnsealWord(Persister::Load(&table_[c]), c, &e)) {
      problem(EntryWhere(c) + " fails its check");
    } else if (e != Mirror(c)) {
      problem(EntryWhere(c) + " disagrees with the allocator's state");
    }
  }
  // What the engine reaches: per small chunk a bitmap of units seen, per run a flag.
  std::vector<std::vector<uint64_t>> units_seen(g_.chunk_count);
  std::vector<uint8_t> run_seen(g_.chunk_count, 0);
  uint64_t reached = 0;
  auto visit = [&](uint64_t offset) {
    ++reached;
    uint64_t c;
    if (!ChunkOf(offset, &c)) {
      problem(block(offset) + " is outside the allocator's chunks");
      return;
    }
    const uint64_t e = Mirror(c);
    const uint64_t within = offset - ChunkOffset(c);
    if (KindOf(e) == kSmall && small_[c] != nullptr) {
      const uint32_t size = kClassSizes[PayloadOf(e)];
      const uint64_t u = within / size;
      if (within % size == 0 && u < UnitsOf(small_[c]->cls) &&
          ((small_[c]->bits[u / 64] >> (u % 64)) & 1)) {
        std::vector<uint64_t>& seen = units_seen[c];
        if (seen.empty()) seen.assign(small_[c]->words, 0);
        if ((seen[u / 64] >> (u % 64)) & 1) {
          problem(block(offset) + " is reached twice");
        }
        seen[u / 64] |= uint64_t{1} << (u % 64);
        return;
      }
    } else if (KindOf(e) == kHead && within == 0) {
      if (run_seen[c]) problem(block(offset) + " is reached twice");
      run_seen[c] = 1;
      return;
    }
    problem(block(offset) + " is reached but is not an allocated block");
  };
  PMHASH_RETURN_IF_ERROR(enumerate(visit));
  // Allocated but never reached: leaked.
  for (uint64_t c = 0; c < g_.chunk_count; ++c) {
    const uint64_t e = Mirror(c);
    if (KindOf(e) == kHead && !run_seen[c]) {
      problem(block(ChunkOffset(c)) + " (" + std::to_string(PayloadOf(e) * kChunkSize) +
              " bytes) is allocated but unreachable (leaked)");
    }
    if (KindOf(e) != kSmall || small_[c] == nullptr) continue;
    const SmallChunk& ch = *small_[c];
    for (uint32_t u = 0; u < ch.units; ++u) {
      const bool used = (ch.bits[u / 64] >> (u % 64)) & 1;
      const bool seen = !units_seen[c].empty() && ((units_seen[c][u / 64] >> (u % 64)) & 1);
      if (used && !seen) {
        problem(block(ChunkOffset(c) + uint64_t{u} * kClassSizes[ch.cls]) + " (" +
                std::to_string(kClassSizes[ch.cls]) +
                " bytes) is allocated but unreachable (leaked)");
      }
    }
  }
  if (problems == 0) return reached;
  std::string msg = "allocator: " + std::to_string(problems) +
                    (problems == 1 ? " problem: " : " problems: ");
  for (size_t i = 0; i < shown.size(); ++i) msg += (i == 0 ? "" : "; ") + shown[i];
  if (problems > shown.size()) msg += "; ...";
  return Status::Corruption(msg);
}

// Validates the allocator header against the pool; Corruption on any mismatch.
Status CheckHeader(const Pool& pool, const Geometry& g) {
  if (g.chunk_count == 0) return Status::Corruption("allocator heap is too small");
  const auto& h = *pool.At<AllocHeader>(pool.heap_offset());
  if (std::memcmp(h.magic, kAllocMagic, sizeof(kAllocMagic)) != 0) {
    return Status::Corruption("allocator header damaged (bad magic)");
  }
  if (h.version != kAllocVersion) {
    return Status::Corruption("allocator format version " + std::to_string(h.version) +
                              "; this pmhash reads version " + std::to_string(kAllocVersion));
  }
  if (HeaderChecksum(h) != h.checksum) {
    return Status::Corruption("allocator header checksum mismatch (header damaged)");
  }
  if (h.chunk_shift != kChunkShift || h.chunk_count != g.chunk_count ||
      h.table_offset != g.table_offset || h.state_offset != g.state_offset ||
      h.data_offset != g.data_offset || h.heap_end != g.heap_end) {
    return Status::Corruption("allocator header does not match the pool's heap geometry");
  }
  return Status::OK();
}

Status CheckOptions(const AllocatorOptions& options) {
  if (options.arenas < 1 || options.arenas > kMaxAllocArenas) {
    return Status::InvalidArgument("allocator arenas must be 1.." +
                                   std::to_string(kMaxAllocArenas) + ", not " +
                                   std::to_string(options.arenas));
  }
  return Status::OK();
}

}  // namespace

Status Allocator::Format(Pool& pool, Persister& persister, std::unique_ptr<Allocator>* out,
                         const AllocatorOptions& options) {
  PMHASH_RETURN_IF_ERROR(CheckOptions(options));
  const Geometry g = ComputeGeometry(pool);
  if (g.chunk_count == 0) {
    return Status::InvalidArgument("heap of " + std::to_string(pool.heap_size()) +
                                   " bytes is too small for one 64 KiB chunk");
  }
  auto a = std::make_unique<HeapAllocator>(pool, persister, g, options.arenas);
  PMHASH_RETURN_IF_ERROR(a->FormatHeap());
  *out = std::move(a);
  return Status::OK();
}

Status Allocator::Load(Pool& pool, Persister& persister, std::unique_ptr<Allocator>* out,
                       const AllocatorOptions& options) {
  PMHASH_RETURN_IF_ERROR(CheckOptions(options));
  const Geometry g = ComputeGeometry(pool);
  PMHASH_RETURN_IF_ERROR(CheckHeader(pool, g));
  auto a = std::make_unique<HeapAllocator>(pool, persister, g, options.arenas);
  PMHASH_RETURN_IF_ERROR(a->LoadState());
  *out = std::move(a);
  return Status::OK();
}

Status Allocator::Rebuild(Pool& pool, Persister& persister, const LiveBlockEnumerator& enumerate,
                          std::unique_ptr<Allocator>* out, const AllocatorOptions& options) {
  PMHASH_RETURN_IF_ERROR(CheckOptions(options));
  const Geometry g = ComputeGeometry(pool);
  PMHASH_RETURN_IF_ERROR(CheckHeader(pool, g));
  auto a = std::make_unique<HeapAllocator>(pool, persister, g, options.arenas);
  PMHASH_RETURN_IF_ERROR(a->RebuildState(enumerate));
  *out = std::move(a);
  return Status::OK();
}

}  // namespace pmhash::pm
