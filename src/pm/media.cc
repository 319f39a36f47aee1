#include "pm/media.h"

#include <bit>
#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "util/hash.h"

namespace pmhash::pm {

namespace {

constexpr unsigned kLinesPerMediaLine = kMediaLine / 64;
constexpr unsigned kFullMask = (1u << kLinesPerMediaLine) - 1;

}  // namespace

Status MediaConfig::Validate() const {
  if (dimms < 1 || dimms > 64) {
    return Status::InvalidArgument("media.dimms must be between 1 and 64, not " +
                                   std::to_string(dimms));
  }
  if (!std::has_single_bit(interleave_bytes) || interleave_bytes < kMediaLine ||
      interleave_bytes > (1u << 30)) {
    return Status::InvalidArgument(
        "media.interleave_bytes must be a power of two between 256 and 1 GiB, not " +
        std::to_string(interleave_bytes));
  }
  if (buffer_bytes < kMediaLine || buffer_bytes > (1u << 20) || buffer_bytes % kMediaLine != 0) {
    return Status::InvalidArgument(
        "media.buffer_bytes must be a multiple of 256 between 256 and 1 MiB, not " +
        std::to_string(buffer_bytes));
  }
  if (cache_bytes % CacheModel::kSetBytes != 0 || cache_bytes > (256ull << 20)) {
    return Status::InvalidArgument(
        "media.cache_bytes must be 0 or a multiple of 1 KiB up to 256 MiB, not " +
        std::to_string(cache_bytes));
  }
  return Status::OK();
}

// ---- DimmBuffer ---------------------------------------------------------------------------

DimmBuffer::DimmBuffer(size_t entries)
    : entries_(entries),
      bucket_shift_(64 - std::countr_zero(std::bit_ceil(2 * entries))),
      entry_(new Entry[entries]),
      bucket_(new uint16_t[std::bit_ceil(2 * entries)]) {
  std::fill_n(bucket_.get(), std::bit_ceil(2 * entries), kNil);
}

uint16_t DimmBuffer::Find(uint64_t tag) const {
  for (uint16_t e = bucket_[Bucket(tag)]; e != kNil; e = entry_[e].chain) {
    if (entry_[e].tag == tag) return e;
  }
  return kNil;
}

void DimmBuffer::Unlink(uint16_t e) {
  Entry& x = entry_[e];
  if (x.prev != kNil) entry_[x.prev].next = x.next; else head_ = x.next;
  if (x.next != kNil) entry_[x.next].prev = x.prev; else tail_ = x.prev;
}

void DimmBuffer::PushFront(uint16_t e) {
  entry_[e].prev = kNil;
  entry_[e].next = head_;
  if (head_ != kNil) entry_[head_].prev = e; else tail_ = e;
  head_ = e;
}

void DimmBuffer::RemoveFromBucket(uint16_t e) {
  uint16_t* link = &bucket_[Bucket(entry_[e].tag)];
  while (*link != e) link = &entry_[*link].chain;
  *link = entry_[e].chain;
}

MediaCost DimmBuffer::Write(uint64_t tag, unsigned line, unsigned* mask) {
  MediaCost cost;
  uint16_t e = Find(tag);
  if (e != kNil) {
    entry_[e].mask |= 1u << line;
    *mask = entry_[e].mask;
    if (head_ != e) {
      Unlink(e);
      PushFront(e);
    }
    return cost;
  }
  if (used_ < entries_) {
    e = used_++;
  } else {
    e = tail_;
    if (entry_[e].mask != kFullMask) cost.rmw_reads = 1;
    Unlink(e);
    RemoveFromBucket(e);
  }
  Entry& x = entry_[e];
  x.tag = tag;
  x.mask = static_cast<uint8_t>(1u << line);
  *mask = x.mask;
  const size_t b = Bucket(tag);
  x.chain = bucket_[b];
  bucket_[b] = e;
  PushFront(e);
  cost.media_writes = 1;
  return cost;
}

MediaCost DimmBuffer::Drain() {
  MediaCost cost;
  for (uint16_t e = head_; e != kNil; e = entry_[e].next) {
    if (entry_[e].mask != kFullMask) ++cost.rmw_reads;
  }
  std::fill_n(bucket_.get(), std::bit_ceil(2 * entries_), kNil);
  head_ = tail_ = kNil;
  used_ = 0;
  return cost;
}

unsigned DimmBuffer::Mask(uint64_t tag) const {
  const uint16_t e = Find(tag);
  return e == kNil ? 0 : entry_[e].mask;
}

// ---- MediaModel ---------------------------------------------------------------------------

MediaModel::MediaModel(const MediaConfig& config)
    : interleave_shift_(std::countr_zero(config.interleave_bytes)),
      modulo_magic_(~uint64_t{0} / config.dimms + 1) {
  for (uint32_t i = 0; i < config.dimms; ++i) {
    dimms_.push_back(std::make_unique<Shard>(config.buffer_bytes / kMediaLine));
  }
}

MediaCost MediaModel::WriteLine(uintptr_t line_address) {
  Shard& s = *dimms_[Dimm(line_address)];
  const uint64_t tag = line_address / kMediaLine;
  const unsigned line = (line_address / 64) % kLinesPerMediaLine;
  // Already the DIMM's most recent media line with this line written: nothing would change
  // (the check is a moment at which the write can be taken to have happened).
  const uint64_t recent = s.recent.load(std::memory_order_acquire);
  if ((recent >> 4) == tag && (recent & (1u << line)) != 0) return {};
  std::lock_guard<SpinLock> l(s.lock);
  unsigned mask;
  const MediaCost cost = s.buffer.Write(tag, line, &mask);
  s.recent.store(tag << 4 | mask, std::memory_order_release);
  return cost;
}

MediaCost MediaModel::Drain() {
  MediaCost total;
  for (auto& s : dimms_) {
    std::lock_guard<SpinLock> l(s->lock);
    total.rmw_reads += s->buffer.Drain().rmw_reads;
    s->recent.store(~0ull, std::memory_order_release);
  }
  return total;
}

unsigned MediaModel::Mask(uintptr_t address) {
  Shard& s = *dimms_[Dimm(address)];
  std::lock_guard<SpinLock> l(s.lock);
  return s.buffer.Mask(address / kMediaLine);
}

// ---- CacheModel ---------------------------------------------------------------------------

CacheModel::CacheModel(uint64_t bytes)
    : sets_(bytes / kSetBytes), tags_bytes_(sets_ * kWays * sizeof(uint64_t)),
      locks_(new SpinLock[kStripes]) {
  // Anonymous pages: zero, page-aligned (a set is two whole cache lines), and touched
  // only when used.
  void* p = mmap(nullptr, tags_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  tags_ = static_cast<uint64_t*>(p);
}

CacheModel::~CacheModel() { munmap(tags_, tags_bytes_); }

size_t CacheModel::Set(uintptr_t line_address) const {
  return Reduce((line_address / 64) * 0x9E3779B97F4A7C15ull, sets_);
}

uintptr_t CacheModel::Store(uintptr_t line_address) {
  const size_t set = Set(line_address);
  uint64_t* ways = Ways(set);
  if (__atomic_load_n(&ways[0], __ATOMIC_ACQUIRE) == line_address) return 0;  // already MRU
  std::lock_guard<SpinLock> l(locks_[set % kStripes]);
  size_t i = 0;
  while (i < kWays && ways[i] != line_address && ways[i] != 0) ++i;
  uintptr_t evicted = 0;
  if (i == kWays) {  // a miss in a full set: the least recently used line leaves
    i = kWays - 1;
    evicted = ways[i];
  }
  // Move ways [0, i) down one and put the line first (i is its old way, the first empty
  // way or the victim's).
  for (; i > 0; --i) ways[i] = ways[i - 1];
  __atomic_store_n(&ways[0], line_address, __ATOMIC_RELEASE);
  return evicted;
}

bool CacheModel::WriteBack(uintptr_t line_address) {
  const size_t set = Set(line_address);
  uint64_t* ways = Ways(set);
  std::lock_guard<SpinLock> l(locks_[set % kStripes]);
  size_t i = 0;
  while (i < kWays && ways[i] != line_address && ways[i] != 0) ++i;
  if (i == kWays || ways[i] == 0) return false;
  size_t used = i + 1;
  while (used < kWays && ways[used] != 0) ++used;
  // Close the gap: ways (i, used) move up one; way 0 only with an atomic store.
  for (; i + 1 < used; ++i) {
    if (i == 0) {
      __atomic_store_n(&ways[0], ways[1], __ATOMIC_RELEASE);
    } else {
      ways[i] = ways[i + 1];
    }
  }
  if (used == 1) {
    __atomic_store_n(&ways[0], uint64_t{0}, __ATOMIC_RELEASE);
  } else {
    ways[used - 1] = 0;
  }
  return true;
}

void CacheModel::Drain(const std::function<void(uintptr_t)>& emit) {
  for (size_t set = 0; set < sets_; ++set) {
    uint64_t* ways = Ways(set);
    std::lock_guard<SpinLock> l(locks_[set % kStripes]);
    if (__atomic_load_n(&ways[0], __ATOMIC_RELAXED) == 0) continue;
    for (size_t i = kWays - 1; i > 0; --i) {
      if (ways[i] != 0) emit(ways[i]);
      ways[i] = 0;
    }
    emit(ways[0]);
    __atomic_store_n(&ways[0], uint64_t{0}, __ATOMIC_RELEASE);
  }
}

size_t CacheModel::DirtyLines() const {
  size_t n = 0;
  for (size_t i = 0; i < sets_ * kWays; ++i) n += tags_[i] != 0;
  return n;
}

}  // namespace pmhash::pm
