// Spash's directory: entries, locking and staged transitions (directory.h).
#include "engines/spash/directory.h"

#include <algorithm>

#include "common/locks.h"

namespace pmhash::engines::spash {

std::unique_ptr<Directory::Table> Directory::Table::Make(unsigned d, bool filter, bool hint) {
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                    std::atomic<uint64_t>::is_always_lock_free,
                "an entry is a plain 8-byte word in zeroed memory");
  auto t = std::make_unique<Table>();
  t->depth = d;
  t->size = uint64_t{1} << d;
  static_assert(sizeof(std::atomic<uint8_t>) == 1, "a filter byte is a plain byte");
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a hint is a plain word");
  // Entries, then hints (4-byte aligned after 8-byte entries), then filter bytes.
  const uint64_t entry_bytes = t->size * sizeof(uint64_t);
  const uint64_t hint_bytes =
      hint ? ((t->size + (uint64_t{1} << kHintShift) - 1) >> kHintShift) * sizeof(uint32_t) : 0;
  Result<DramBuffer> memory =
      DramBuffer::Allocate(entry_bytes + hint_bytes + (filter ? t->size : 0));  // zeroed
  if (!memory.ok()) return nullptr;
  t->memory = std::move(memory.value());
  char* base = static_cast<char*>(t->memory.data());
  t->entries = reinterpret_cast<std::atomic<uint64_t>*>(base);
  if (hint) t->hint = reinterpret_cast<std::atomic<uint32_t>*>(base + entry_bytes);
  if (filter) t->filter = reinterpret_cast<std::atomic<uint8_t>*>(base + entry_bytes + hint_bytes);
  return t;
}

void Directory::FillFilter(Table* t, uint8_t byte) {
  if (t->filter == nullptr) return;
  for (uint64_t i = 0; i < t->size; ++i) t->filter[i].store(byte, std::memory_order_relaxed);
}

void Directory::FillHints(Table* t) {
  if (t->hint == nullptr) return;
  for (uint64_t i = 0; i < t->size; i += uint64_t{1} << kHintShift) {
    NoteHint(t, i, t->entries[i].load(std::memory_order_relaxed));
  }
}

Status Directory::OutOfMemory(unsigned depth) {
  return Status::ResourceExhausted("spash: no DRAM for a directory of 2^" +
                                   std::to_string(depth) + " entries");
}

Directory::~Directory() {
  Free(current_.exchange(nullptr));
  // epochs_ frees what is still retired when it goes.
}

void Directory::Free(Table* t) { delete t; }

uint64_t Directory::MemoryBytes() const {
  const Table* t = Current();
  if (t == nullptr) return 0;
  uint64_t bytes = sizeof(Table) + t->memory.size();
  if (const Table* n = t->next.load(std::memory_order_acquire)) {
    bytes += sizeof(Table) + n->memory.size() + t->size / kPartition;
  }
  return bytes;
}

namespace {

// Whether entry i of `t` is frozen by a transition (its partition copied or being copied)
// rather than held by a writer.
bool Frozen(const Directory::Table* t, uint64_t i) {
  if (t->next.load(std::memory_order_acquire) == nullptr) return false;
  return t->stage[i / Directory::kPartition].load(std::memory_order_acquire) !=
         Directory::kPending;
}

}  // namespace

Directory::LockResult Directory::Lock(const Place& place, Held* held, bool copy) {
  Table* t = place.table;
  const uint64_t e = t->entries[place.index].load(std::memory_order_acquire);
  if (DirEntry::Busy(e)) {
    if (Frozen(t, place.index)) {
      if (copy) CopyStages(t, place.index, 1);
      return LockResult::kMoved;
    }
    return LockResult::kBusy;
  }
  const unsigned d = DirEntry::Depth(e);
  if (d > t->depth) return LockResult::kBusy;  // a torn view of a table being filled
  const uint64_t count = uint64_t{1} << (t->depth - d);
  const uint64_t first = place.index & ~(count - 1);
  // A range in the next table of a transition: the stages it comes from must be copied
  // before its entries mean anything.
  if (Table* cur = Current(); cur != t && cur->next.load(std::memory_order_acquire) == t) {
    const uint64_t from = t->depth > cur->depth ? first >> 1 : first << 1;
    const uint64_t n = t->depth > cur->depth ? std::max<uint64_t>(count >> 1, 1) : count << 1;
    for (uint64_t p = from / kPartition; p <= (from + n - 1) / kPartition; ++p) {
      if (cur->stage[p].load(std::memory_order_acquire) != kDone) {
        if (copy) CopyStages(cur, from, n);
        return LockResult::kMoved;
      }
    }
  }
  // The primary first (writers are serialized by it), then the rest of the range.
  uint64_t locked = 0;
  bool frozen = false;
  for (uint64_t i = first; i < first + count; ++i) {
    uint64_t w = t->entries[i].load(std::memory_order_acquire);
    if (DirEntry::Busy(w) ||
        !t->entries[i].compare_exchange_strong(w, w | DirEntry::kBusy,
                                               std::memory_order_acq_rel)) {
      frozen = Frozen(t, i);
      break;
    }
    ++locked;
  }
  const uint64_t now = locked == count
                           ? t->entries[place.index].load(std::memory_order_acquire) &
                                 ~DirEntry::kBusy
                           : 0;
  if (locked != count || DirEntry::Segment(now) != DirEntry::Segment(e) ||
      DirEntry::Depth(now) != d) {
    // Give back what was taken, unchanged: nothing was stored while it was held.
    for (uint64_t i = first; i < first + locked; ++i) {
      t->entries[i].fetch_and(~DirEntry::kBusy, std::memory_order_release);
    }
    if (frozen) {
      if (copy) CopyStages(t, first, count);
      return LockResult::kMoved;
    }
    return LockResult::kBusy;
  }
  held->table = t;
  held->first = first;
  held->count = count;
  held->word = t->entries[first].load(std::memory_order_relaxed) & ~DirEntry::kBusy;
  return LockResult::kLocked;
}

bool Directory::Subscribe(const Place& place, Held* held) const {
  Table* t = place.table;
  const uint64_t e = t->entries[place.index].load(std::memory_order_acquire);
  const unsigned d = DirEntry::Depth(e);
  // A range of a transition's next table (its stages may still be copied) takes the
  // lock path, which copies them.
  if (DirEntry::Busy(e) || d > t->depth || Current() != t) return false;
  const uint64_t count = uint64_t{1} << (t->depth - d);
  const uint64_t first = place.index & ~(count - 1);
  for (uint64_t i = first; i < first + count; ++i) {
    if (DirEntry::Busy(t->entries[i].load(std::memory_order_acquire))) return false;
  }
  held->table = t;
  held->first = first;
  held->count = count;
  held->word = t->entries[first].load(std::memory_order_relaxed);
  return true;
}

bool Directory::TryLockRange(Table* t, uint64_t first, uint64_t count, Held* held) {
  if (!LockEntries(t, first, count, [](uint64_t) { return true; })) return false;
  held->table = t;
  held->first = first;
  held->count = count;
  held->word = t->entries[first].load(std::memory_order_relaxed) & ~DirEntry::kBusy;
  return true;
}

void Directory::CopyStages(Table* t, uint64_t first, uint64_t count) {
  if (t->next.load(std::memory_order_acquire) == nullptr) return;
  const uint64_t last = std::min(first + count, t->size) - 1;
  for (uint64_t p = first / kPartition; p <= last / kPartition; ++p) CopyStage(t, p);
}

void Directory::CopyStage(Table* from, uint64_t partition) {
  std::atomic<uint8_t>& stage = from->stage[partition];
  uint8_t expected = kPending;
  if (!stage.compare_exchange_strong(expected, kCopying, std::memory_order_acq_rel)) {
    for (int attempt = 0; stage.load(std::memory_order_acquire) != kDone; ++attempt) {
      SpinBackoff(attempt);
    }
    return;
  }
  Table* to = from->next.load(std::memory_order_acquire);
  const bool doubling = to->depth > from->depth;
  const uint64_t first = partition * kPartition;
  const uint64_t last = std::min(first + kPartition, from->size);
  for (uint64_t i = first; i < last; ++i) {
    // Freeze: wait out a writer that holds the entry (writers never wait while holding).
    uint64_t w = from->entries[i].load(std::memory_order_acquire);
    for (int attempt = 0;; ++attempt) {
      if (!DirEntry::Busy(w) &&
          from->entries[i].compare_exchange_weak(w, w | DirEntry::kBusy,
                                                 std::memory_order_acq_rel)) {
        break;
      }
      if (DirEntry::Busy(w)) {
        SpinBackoff(attempt);
        w = from->entries[i].load(std::memory_order_acquire);
      }
    }
    if (doubling) {
      to->entries[2 * i].store(w, std::memory_order_relaxed);
      to->entries[2 * i + 1].store(DirEntry::WithCount(w, 0), std::memory_order_relaxed);
      NoteHint(to, 2 * i, w);
    } else if (i % 2 == 0) {
      // Halving: entries 2k and 2k+1 name the same segment (every depth < G); 2k is the
      // primary if either is.
      to->entries[i / 2].store(w, std::memory_order_relaxed);
      NoteHint(to, i / 2, w);
    }
  }
  if (from->filter != nullptr) {
    // The entries are frozen: no writer changes their bytes now. Copied first, then the
    // old bytes unknown, both before the stage is done (directory.h, the filter).
    for (uint64_t i = first; i < last; ++i) {
      const uint8_t f = FilterAt(from, i);
      if (doubling) {
        StoreFilter(to, 2 * i, f);
        StoreFilter(to, 2 * i + 1, f);
      } else if (i % 2 == 1) {
        StoreFilter(to, i / 2, static_cast<uint8_t>(FilterAt(from, i - 1) | f));
      }
    }
    if (doubling && refine_ != nullptr) refine_(refine_ctx_, to, 2 * first, 2 * (last - first));
    for (uint64_t i = first; i < last; ++i) StoreFilter(from, i, EntryFilter::kUnknown);
  }
  stage.store(kDone, std::memory_order_release);  // publishes the copies
}

Directory::Table* Directory::BeginTransition(Table* from, unsigned to_depth) {
  std::unique_ptr<Table> next = Table::Make(to_depth, filter_, hint_);
  if (next == nullptr) return nullptr;
  const uint64_t partitions = (from->size + kPartition - 1) / kPartition;
  from->stage.reset(new std::atomic<uint8_t>[partitions]);
  for (uint64_t p = 0; p < partitions; ++p) from->stage[p].store(kPending, std::memory_order_relaxed);
  Table* n = next.release();
  from->next.store(n, std::memory_order_seq_cst);
  return n;
}

void Directory::RunTransition(Table* from, Table* to) {
  for (uint64_t p = 0; p < (from->size + kPartition - 1) / kPartition; ++p) CopyStage(from, p);
  current_.store(to, std::memory_order_release);
  (to->depth > from->depth ? doublings_ : halvings_).fetch_add(1, std::memory_order_relaxed);
  // Readers inside an epoch may still hold `from`: freed once they have all left.
  epochs_.Retire([from] { Free(from); });
}

bool Directory::Double(const Table* from) {
  std::lock_guard<std::mutex> lock(transition_mu_);
  Table* cur = Current();
  if (cur != from || cur->depth + 1 > kMaxDepth) return true;
  Table* next = BeginTransition(cur, cur->depth + 1);
  if (next == nullptr) return false;
  RunTransition(cur, next);
  return true;
}

void Directory::Halve(const Table* from, unsigned min_depth, bool (*allow)(void* ctx), void* ctx) {
  std::lock_guard<std::mutex> lock(transition_mu_);
  Table* cur = Current();
  if (cur != from || cur->depth <= min_depth) return;
  // Published before `allow` looks: a writer that makes a segment as deep as the halved
  // table cannot hold (counts it, then checks `next`, both seq_cst), so either it sees
  // this transition and backs off, or `allow` sees its segment (Dekker's pattern).
  Table* n = BeginTransition(cur, cur->depth - 1);
  if (n == nullptr) return;  // no DRAM: the table stays as it is
  if (!allow(ctx)) {
    // No stage has started, so nobody has used `n`: withdrawn.
    cur->next.store(nullptr, std::memory_order_seq_cst);
    epochs_.Retire([n] { Free(n); });
    return;
  }
  RunTransition(cur, n);
}
}  // namespace pmhash::engines::spash
