// Models of what lies between the engine's stores and an Optane-like device's media, so
// that media traffic (the figure the BHT and Spash papers count) is measurable on DRAM.
//
//   stores --(eadr)--> CacheModel --evictions, write-backs--+
//                       (persistent CPU cache: dirty lines)  |
//   flushes --(adr)-----------------------------------------+--> MediaModel
//                                                                (per-DIMM write-combining
//                                                                 buffers of 256-byte lines)
//
// MediaModel: the device. Addresses are interleaved across `dimms` emulated DIMMs in
// `interleave_bytes` chunks (the memory controller's interleave); each DIMM has a
// write-combining buffer of `buffer_bytes` / 256 entries of 256-byte media lines, least
// recently used evicted first (as measured on Optane: Yang et al., FAST '20). A 64-byte
// line that arrives at the device merges into its media line's entry if one is buffered;
// otherwise it takes an entry, which costs one 256-byte media write (counted when the entry
// is taken, so the figure is exact without draining). Each entry records which of its four
// 64-byte lines were written; an entry that leaves the buffer not fully written costs a
// read-modify-write: one media read (counted when it leaves, or at Drain).
//
// CacheModel: the persistent CPU cache of an eADR platform, for dirty lines only. Set
// associative (kWays ways, LRU within a set, sets chosen by a hash of the line address, as
// a real last-level cache's slice hash scatters consecutive lines), so that the lines of a
// multi-line write leave in the random order Spash observes, and a hot line rewritten many
// times costs one media write when it is finally evicted. A WriteBack (clwb) removes a
// dirty line at once and sends it to the device. Simplification, stated: the whole
// capacity holds the index's dirty lines (clean lines and other data do not compete), so
// it is the most the cache can absorb.
//
// Both are shared by every thread of a pool and thread-safe: a spin lock per DIMM and per
// stripe of cache sets, plus a lock-free check for the commonest case (the line is already
// the most recent one of its DIMM or set: nothing changes). In one thread they are
// deterministic for the same addresses. Addresses are virtual: the DIMM of a chunk
// depends on where the pool is mapped, which moves the figures only by chance alignment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::pm {

inline constexpr size_t kMediaLine = 256;  // Optane's XPLine: the media access unit

// The device and cache model's settings: pmhash::MediaOptions (include/pmhash/options.h
// documents each field, its default and its range).
struct MediaConfig : MediaOptions {
  MediaConfig() = default;
  explicit MediaConfig(const MediaOptions& options) : MediaOptions(options) {}
  // InvalidArgument naming the field for a value out of range: the one check of these
  // ranges (Open, the benchmark's flags and the micro-benchmarks all come here).
  Status Validate() const;
};

// A test-and-test-and-set lock: the models' critical sections are a few dozen
// instructions, shorter than a mutex's own cost.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// What one event sent to the device cost.
struct MediaCost {
  uint32_t media_writes = 0;  // buffer entries taken (each one 256-byte media write)
  uint32_t rmw_reads = 0;     // entries that left the buffer partly written
};

// One DIMM's write-combining buffer: an LRU of 256-byte media lines, each with a 4-bit
// mask of the 64-byte lines written. Not thread-safe (MediaModel locks it).
class DimmBuffer {
 public:
  explicit DimmBuffer(size_t entries);  // 1 .. 4096 entries

  // A write of 64-byte line `line` (0..3) of media line `tag` (address / 256). *mask is
  // the media line's coverage mask afterwards.
  MediaCost Write(uint64_t tag, unsigned line, unsigned* mask);
  // Empties the buffer; each partly written entry costs a read-modify-write.
  MediaCost Drain();
  // The mask of a buffered media line, 0 if it is not buffered (for tests).
  unsigned Mask(uint64_t tag) const;

 private:
  static constexpr uint16_t kNil = 0xffff;
  struct Entry {
    uint64_t tag;
    uint16_t prev, next, chain;  // LRU list; hash chain
    uint8_t mask;
  };
  size_t Bucket(uint64_t tag) const { return (tag * 0x9E3779B97F4A7C15ull) >> bucket_shift_; }
  uint16_t Find(uint64_t tag) const;
  void Unlink(uint16_t e);
  void PushFront(uint16_t e);
  void RemoveFromBucket(uint16_t e);

  size_t entries_;
  unsigned bucket_shift_;
  std::unique_ptr<Entry[]> entry_;
  std::unique_ptr<uint16_t[]> bucket_;
  uint16_t head_ = kNil, tail_ = kNil, used_ = 0;
};

// The device: DIMM buffers sharded by interleave, each behind its own lock.
class MediaModel {
 public:
  explicit MediaModel(const MediaConfig& config);  // config must be Valid

  // The 64-byte line at `line_address` arrives at the device (a flush, an eviction or a
  // write-back). Thread-safe.
  MediaCost WriteLine(uintptr_t line_address);
  // Empties every buffer (counting the read-modify-writes still owed). Thread-safe.
  MediaCost Drain();

  // The DIMM of an address: its interleave chunk's index modulo the DIMM count (of the
  // index's low 32 bits: a fast exact modulo by multiplication, Lemire et al. 2019).
  size_t Dimm(uintptr_t address) const {
    const uint32_t chunk = static_cast<uint32_t>(address >> interleave_shift_);
    return static_cast<size_t>((static_cast<unsigned __int128>(modulo_magic_ * chunk) *
                                dimms_.size()) >> 64);
  }
  // For tests: the coverage mask of a buffered media line (0 if not buffered).
  unsigned Mask(uintptr_t address);

 private:
  struct alignas(64) Shard {
    explicit Shard(size_t entries) : buffer(entries) {}
    SpinLock lock;
    // The most recent media line written (tag << 4 | mask), readable without the lock.
    std::atomic<uint64_t> recent{~0ull};
    DimmBuffer buffer;
  };
  unsigned interleave_shift_;
  uint64_t modulo_magic_;  // 2^64 / dimms, rounded up
  std::vector<std::unique_ptr<Shard>> dimms_;
};

// The persistent CPU cache (eadr), dirty lines only. Thread-safe.
class CacheModel {
 public:
  static constexpr size_t kWays = 16;
  static constexpr size_t kSetBytes = kWays * 64;

  // `bytes`: a positive multiple of kSetBytes (MediaConfig::Validate checks it).
  explicit CacheModel(uint64_t bytes);
  ~CacheModel();
  CacheModel(const CacheModel&) = delete;
  CacheModel& operator=(const CacheModel&) = delete;

  // A store dirtied the line at `line_address` (64-byte aligned, not 0). Returns the
  // address of the dirty line this evicted (now on its way to the device), or 0.
  uintptr_t Store(uintptr_t line_address);
  // Starts loading the line's set (to overlap the misses of a batch of Stores).
  void Prefetch(uintptr_t line_address) {
    const uint64_t* ways = Ways(Set(line_address));
    __builtin_prefetch(ways, 1, 3);
    __builtin_prefetch(ways + 8, 1, 3);
  }
  // clwb: if the line is dirty, it is written back and leaves the model; returns whether
  // it was dirty (a clean line's write-back writes nothing).
  bool WriteBack(uintptr_t line_address);
  // Writes back every dirty line (per set, oldest first; sets in index order, which the
  // hash makes an order unrelated to addresses, like evictions) and empties the model.
  void Drain(const std::function<void(uintptr_t)>& emit);
  // Dirty lines held (for tests; not while others store).
  size_t DirtyLines() const;

 private:
  static constexpr size_t kStripes = 256;
  size_t Set(uintptr_t line_address) const;
  uint64_t* Ways(size_t set) { return &tags_[set * kWays]; }

  size_t sets_;
  // Per set, kWays tags (line addresses) in most- to least-recently used order, 0 = empty.
  // Way 0 is read without the lock (the lock-free check), so it is accessed with atomic
  // builtins.
  size_t tags_bytes_;
  uint64_t* tags_;
  std::unique_ptr<SpinLock[]> locks_;
};

// The lines one operation has read, so each 256-byte media line and each 64-byte line of
// it is counted once per operation however often the operation touches it. Small: after
// kCapacity distinct media lines the oldest is forgotten (an operation that reads more,
// such as a resize scanning a table, reads each line once anyway). A pipelined batch may
// keep one per operation in flight (Persister::NoteRead's `op` argument).
class OpReads {
 public:
  static constexpr size_t kCapacity = 16;
  void Reset() { size_ = 0; }
  // Adds the 64-byte lines `lines` (bit i: line i of the four) of media line `tag`.
  // Returns how many of them are new to this operation; *new_media: whether the media
  // line is.
  // Adds the 64-byte lines [first_line, last_line] (line numbers, address / 64), which
  // may span several media lines. Returns how many of them are new to this operation;
  // *new_media: how many of their media lines are. Remembers the range's last kCapacity
  // media lines (a long range, such as a resize's scan, is read once anyway).
  unsigned AddRange(uint64_t first_line, uint64_t last_line, uint32_t* new_media) {
    const uint64_t lo = first_line / kLines, hi = last_line / kLines;
    auto cover = [&](uint64_t tag) {  // the range's lines within media line `tag`
      const unsigned a = tag == lo ? first_line % kLines : 0;
      const unsigned b = tag == hi ? last_line % kLines : kLines - 1;
      return ((2u << b) - 1) & ~((1u << a) - 1);
    };
    unsigned lines = static_cast<unsigned>(last_line - first_line + 1);
    uint64_t media = hi - lo + 1;
    uint64_t seen = 0;  // bit t - lo: media line t was in the set (the first 64 of them)
    for (uint32_t i = 0; i < size_; ++i) {
      if (tags_[i] < lo || tags_[i] > hi) continue;
      const unsigned c = cover(tags_[i]);
      lines -= Bits(masks_[i] & c);
      masks_[i] = static_cast<uint8_t>(masks_[i] | c);
      --media;
      if (tags_[i] - lo < 64) seen |= uint64_t{1} << (tags_[i] - lo);
    }
    for (uint64_t t = hi >= lo + kCapacity ? hi - kCapacity + 1 : lo; t <= hi; ++t) {
      if (t - lo < 64 && (seen >> (t - lo) & 1) != 0) continue;
      const uint32_t i = size_ < kCapacity ? size_++ : next_++ % kCapacity;
      tags_[i] = t;
      masks_[i] = static_cast<uint8_t>(cover(t));
      last_ = i;
    }
    *new_media = static_cast<uint32_t>(media);
    return lines;
  }
  unsigned Add(uint64_t tag, unsigned lines, bool* new_media) {
    *new_media = false;
    if (size_ != 0 && tags_[last_] == tag) return Merge(last_, lines);  // the usual case
    for (uint32_t i = 0; i < size_; ++i) {
      if (tags_[i] == tag) return Merge(last_ = i, lines);
    }
    const uint32_t i = size_ < kCapacity ? size_++ : next_++ % kCapacity;
    tags_[i] = tag;
    masks_[i] = static_cast<uint8_t>(lines);
    last_ = i;
    *new_media = true;
    return Bits(lines);
  }

 private:
  static constexpr unsigned kLines = 4;  // 64-byte lines per media line
  // Set bits of a 4-bit mask (without a library call on CPUs the build does not assume
  // to have popcnt).
  static unsigned Bits(unsigned mask) { return (0x4332322132212110ull >> (4 * mask)) & 0xf; }
  unsigned Merge(uint32_t i, unsigned lines) {
    const unsigned fresh = lines & ~masks_[i];
    masks_[i] = static_cast<uint8_t>(masks_[i] | fresh);
    return Bits(fresh);
  }

  uint64_t tags_[kCapacity];
  uint8_t masks_[kCapacity];
  uint32_t size_ = 0, next_ = 0, last_ = 0;
};

}  // namespace pmhash::pm
