// `bht`: Buffered Hash Table (paper 001, Zhong et al.): CCEH (engines/cceh/cceh_core.h,
// reused through that header alone) with a DRAM write buffer in front of segments and a
// PM write-ahead log, so that random 16-byte writes reach the media as whole segments
// (flips) and sequential log appends instead of scattered read-modify-writes of 256-byte
// media lines. Design notes, persist orders, deviations and figures:
// docs/engines/bht.md.
//
// ---- On-media layout ------------------------------------------------------------------
//
//   root area (Engine::root):
//   struct BhtRoot {
//     CcehRoot cceh;        // the kit's header (magic kBhtRootMagic) and CCEH's geometry
//     uint64 log_offset;    // fixed: the log block (allocator)
//     uint64 log_slots;     // fixed: its capacity in 32-byte slots
//     uint64 log_head;      // sealed word: the sequence number of the oldest live record
//   };
//   directory and segments: CCEH's (cceh_core.h), unchanged.
//
//   log block: a ring of 32-byte slots; slot sequence number s lives at (s mod log_slots).
//   A record takes ceil((16 + key + value) / 32) consecutive slots (one for 8-byte keys and
//   values); one that would pass the ring's end is preceded by a pad record to the end.
//   struct BhtLogRecord {
//     uint64 seq;           // its first slot's sequence number (stored last: a line's
//                           // stores persist in order, so seq implies the rest of the line)
//     uint64 meta;          // key length (17 bits) | value length (21) | kind (2: 1 put,
//                           // 2 tombstone, 3 pad) | check (24): Hash64 of seq, the lengths,
//                           // kind, key and value, seeded with the log's pool offset
//     bytes key, value;     // then zero padding to the slot boundary
//   };
//
// ---- DRAM (rebuilt at every open) ------------------------------------------------------
//
//   BhtBuffer, one per buffered segment (CcehSeg::attachment): buffer_size / 256 buckets
//   struct BhtBucket {       // 256 bytes, the paper's Fig. 2 bucket
//     uint8  tag[16];        // 1-byte tag per slot (13 used), matched 16 at a time
//     uint16 valid;          // bit i: slot i holds an entry (the paper's valid bit map)
//     uint16 tomb;           // bit i: a delete (tombstone)
//     uint16 logref;         // bit i: key and value are in the log (word0: its seq)
//     uint16 known, present; // bit i: whether the segment held the key when it was
//                            //   buffered is known, and whether it did (Count)
//     uint32 seq;            // seqlock: odd while a writer changes the bucket
//     KvWords slot[13];      // inline: key word, value word; logref: record seq, hash
//   };
//   Buffer bucket: hash bits 8..(8+b) (b = log2 buckets); tag: hash bits 16..23; both
//   independent of the directory's top bits and of CCEH's start bucket (the low 8 bits).
//
// ---- Invariants (when no mutation is in flight) ---------------------------------------
//
//  1. CCEH's invariants (cceh_core.h) hold for the segments.
//  2. A segment has a buffer iff its directory entries carry the mark (CCEH's entry bit
//     7). A buffered segment is never changed in place: its writes go to its buffer, and
//     a flip replaces it out of place. An unbuffered segment's halves are unbuffered, a
//     buffered one's both buffered: so a key's log records since the head all belong to
//     its segment's buffer (none to an unbuffered segment).
//  3. Each buffered entry has a log record at or after the head (its latest is the one
//     the buffer shows); a buffer's oldest record is its `oldest`; the head is at most the
//     oldest of all buffers. A buffer's entries lie in its segment's range, once each.
//  4. Count() = the segments' live keys + each buffer's entries' effect on them.
//
// ---- Persist order ---------------------------------------------------------------------
//
//  write (insert, update, put, delete; buffered segment): under the buffer's lock, the log
//    record is appended under the log lock: bytes, meta, then seq stored, flushed, fence
//    (appends persist one at a time, so a record is durable only after every earlier one:
//    recovery may stop at the first torn one). Then the buffer's DRAM slot is written
//    (logging first: a search never sees a value that is not durable).
//  flip: the buffer and the segment merged in DRAM, new segment(s) written out of place
//    and flushed (CCEH's replacement: BuildImages, ReplaceSegment), the directory range
//    switched (every entry but the first, fence, the first published): committed; then
//    the replaced records freed, the buffer cleared, its oldest mark dropped and the log
//    head advanced to the oldest of all buffers: stored (sealed), persisted (reclamation).
//  recovery: CCEH's; then the log replayed from the head (each record valid and in
//    sequence; a valid record after an invalid one is Corruption: only the last can be
//    torn) into the buffers the directory's marks give (the crashed session's), leaving
//    out what the segment already shows; the head stays.
//  Close: every buffer flipped, head = tail.
//
// ---- Concurrency ----------------------------------------------------------------------
//
// A buffer's lock (the paper's lock bit) excludes its writers and its flip. Writers to an
// unbuffered segment use CCEH's segment lock. Searches take no lock: within the segment's
// version (which a flip changes only around its directory switch, so searches go on during
// the merge and the writes) they read the buffer bucket under its seqlock, then the
// segment's window; the buffer is searched only when its empty bit is clear. A search
// that searched a non-empty buffer and missed increments its 1-byte read-miss counter; the
// search whose increment wraps it takes the buffer's lock and flips it. Lock order: buffer
// lock, log lock; buffer lock, segment lock, directory lock (CCEH's).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "common/match.h"
#include "engines/cceh/cceh_core.h"

namespace pmhash::engines {

inline constexpr uint64_t kBhtRootMagic = 0x31544f4f52'5442ull;  // "BTROOT1"
inline constexpr uint32_t kBhtVersion = 1;
inline constexpr size_t kBhtBucketBytes = 256;
inline constexpr size_t kBhtBucketSlots = 13;  // the paper's Fig. 2
inline constexpr size_t kBhtLogSlot = 32;
inline constexpr uint64_t kBhtNoRecord = ~uint64_t{0};

struct BhtRoot {
  CcehRoot cceh;
  uint64_t log_offset;
  uint64_t log_slots;
  uint64_t log_head;
};
static_assert(offsetof(BhtRoot, log_offset) == sizeof(CcehRoot) &&
                  offsetof(BhtRoot, log_slots) == sizeof(CcehRoot) + 8 &&
                  offsetof(BhtRoot, log_head) == sizeof(CcehRoot) + 16,
              "the log's fixed fields follow CCEH's geometry (under the root's check); the "
              "head, a sealed word, after them");

struct alignas(64) BhtBucket {
  uint8_t tag[16];
  uint16_t valid;
  uint16_t tomb;
  uint16_t logref;
  uint16_t known;
  uint16_t present;
  uint16_t pad0;
  uint32_t seq;
  KvWords slot[kBhtBucketSlots];
  uint8_t pad1[16];
};
static_assert(sizeof(BhtBucket) == kBhtBucketBytes,
              "a buffer bucket is 256 bytes, the paper's (Fig. 2) and one media line");
static_assert(offsetof(BhtBucket, slot) == 32 && kBhtBucketSlots <= 16,
              "13 slots of 16 bytes after 32 bytes of tags, bit maps and seqlock; the "
              "tags fit one 16-byte SIMD compare");

struct BhtLogHeader {
  uint64_t seq;
  uint64_t meta;
};
static_assert(sizeof(BhtLogHeader) == 16 && pm::kCacheLine % kBhtLogSlot == 0,
              "a record's header is two words; an 8-byte key and value fill one slot, and "
              "slots never straddle a line");

// One segment's write buffer.
struct BhtBuffer {
  RwSpinLock mu;                        // writers and the flip (exclusive only)
  std::atomic<CcehSeg*> seg{nullptr};   // the segment it fronts (a flip moves it)
  std::atomic<bool> empty{true};        // the paper's status bit
  std::atomic<uint8_t> read_misses{0};  // the paper's 1-byte counter
  uint32_t entries = 0;                 // valid slots
  int64_t known_delta = 0;              // Count effect of the entries whose effect is known
  uint32_t unknown = 0;                 // entries whose effect is not (blind puts)
  uint64_t oldest = kBhtNoRecord;       // its oldest live log record (under the log lock)
  std::unique_ptr<BhtBucket[]> buckets;
};

class Bht : public CcehCore {
 public:
  Bht() = default;

  // The Index contract (include/pmhash/index.h), and: Put is the paper's blind write
  // (it never reads the segment); Insert, Update and Delete read the segment when the
  // buffer cannot answer (counted: extra_lookups). ForEach visits one segment's range
  // at a time under its buffer's lock (or its shared lock), calling fn with no lock held;
  // a Scan page reads the same steps (BufferedStep) over its run of directory entries.
  // CheckInvariants checks CCEH's invariants, each buffer and the live log.
  PMHASH_ENGINE_KIT_OVERRIDES;
  void Prefetch(uint64_t hash) const override;

  uint64_t flips() const { return flips_.load(std::memory_order_relaxed); }
  uint64_t buffers() const;

 protected:
  Status Shutdown() override;

 private:
  enum class FlipReason : uint8_t { kFull, kReadMisses, kLog, kClose, kRecovery };
  enum class LogKind : uint8_t { kPut = 1, kTomb = 2, kPad = 3 };
  // What a buffered write found and left to do.
  enum class Next : uint8_t { kDone, kRetry, kLogFull };

  // The step of ForEach and Scan (CcehCore::Step): the segment serving *cursor with
  // what its buffer holds, the buffer winning (a buffered value replaces the segment's,
  // a buffered tombstone hides it), under the buffer's lock (unbuffered: the segment's
  // shared lock).
  void BufferedStep(uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) const;
  BhtBuffer* BufferOf(const CcehSeg* s) const {
    return static_cast<BhtBuffer*>(s->attachment.load(std::memory_order_acquire));
  }
  // A buffer for seg, filled by `fill` (if given) before seg names it.
  BhtBuffer* NewBuffer(CcehSeg* seg, const std::function<void(BhtBuffer*)>& fill = nullptr);
  // The directory's mark says which segments have a buffer: a buffer_ratio share of
  // the first ones, spread evenly; a split's halves keep their segment's mark.
  bool InitialMark(uint64_t i, uint64_t n) const override;
  // A buffer for every marked segment (creation, every open).
  void AssignBuffers();
  size_t BucketOf(uint64_t hash) const { return (hash >> 8) & (buckets_ - 1); }
  static uint8_t TagOf(uint64_t hash) { return static_cast<uint8_t>(hash >> 16); }
  // The slot of `key` in its bucket (buffer lock held), or -1.
  int FindInBucket(const BhtBucket& bk, std::string_view key, uint64_t hash) const;
  // The key and value of buffered slot i (views into the slot, or into its log record).
  std::pair<std::string_view, std::string_view> Buffered(const BhtBucket& bk, int i) const;
  // The hash of buffered slot i holding `key` (kept in the slot beside a log record's
  // sequence number; an inline key is hashed again).
  uint64_t BufferedHash(const BhtBucket& bk, int i, std::string_view key) const;
  // The value of segment s's live slot `slot`.
  std::string_view ValueAt(const CcehSeg* s, int slot) const;

  // Insert / update / put (tomb false) or delete (tomb true), as DoWrite's and DoDelete's
  // contracts: to the key's buffer, or in place for an unbuffered segment.
  Status Write(std::string_view key, std::string_view value, uint64_t hash, WriteMode mode,
               bool tomb);
  // A write to buffer b (its lock held). replay_seq: the record's sequence number when
  // recovery replays it (then no status checks and no append), else kBhtNoRecord.
  Status WriteBuffered(BhtBuffer* b, std::string_view key, std::string_view value,
                       uint64_t hash, WriteMode mode, bool tomb, uint64_t replay_seq,
                       Next* next);
  // A write a flip carries into the new segment(s) itself (no log record: the switch
  // commits it), for a key whose bucket is full even after a flip.
  struct FlipWrite {
    std::string_view key, value;
    uint64_t hash;
    bool tomb;
  };
  // Flips b (its lock held): see the header. Buffered keys that no split can place (more
  // than a probe window holds of one 41-bit hash prefix) stay in the buffer, logged anew
  // (in recovery: under their old records), in their half's buffer. `write`: see
  // FlipWrite; TableFull if it cannot be placed. PoolFull / TableFull with nothing changed.
  Status Flip(BhtBuffer* b, FlipReason reason, const FlipWrite* write = nullptr);
  // Flips the buffer holding the oldest live record while the log holds more than
  // `limit` slots (no lock held).
  Status RelieveLog(uint64_t limit);
  // Flips every non-empty buffer (Close) and sets head = tail.
  Status FlipAll(FlipReason reason);
  // Calls fn on every buffer, each under its lock in turn; stops at the first error.
  Status ForEachBuffer(const std::function<Status(BhtBuffer*)>& fn) const;
  // Calls fn(bucket index, bucket, slot) for every valid slot of b (its lock held).
  void ForEachBuffered(BhtBuffer* b,
                       const std::function<void(size_t, BhtBucket&, int)>& fn) const;

  // ---- The log ----------------------------------------------------------------------
  BhtLogHeader* LogSlot(uint64_t seq) const {
    return reinterpret_cast<BhtLogHeader*>(log_ + (seq % log_slots_) * kBhtLogSlot);
  }
  static uint64_t RecordSlots(size_t key, size_t value) {
    return (sizeof(BhtLogHeader) + key + value + kBhtLogSlot - 1) / kBhtLogSlot;
  }
  uint64_t Meta(uint64_t seq, LogKind kind, std::string_view key, std::string_view value) const;
  // Appends a record for b (b's lock held): *seq its sequence number. false: the log
  // has no room (nothing written).
  bool Append(BhtBuffer* b, LogKind kind, std::string_view key, std::string_view value,
              uint64_t* seq);
  // The record at `seq` if it is valid there: its kind, key and value (views into PM).
  bool ReadRecord(uint64_t seq, LogKind* kind, std::string_view* key, std::string_view* value,
                  uint64_t* slots) const;
  // Under log_mu_: replaces b's oldest mark by `oldest` (none: b holds nothing) and
  // persists the head if it moved.
  void ReleaseLog(BhtBuffer* b, uint64_t oldest = kBhtNoRecord);
  void PersistHead(uint64_t head);
  Status Replay(uint64_t head);

  // Options.
  uint64_t buffer_size_ = 8192;
  double buffer_ratio_ = 1.0;
  uint64_t log_bytes_opt_ = 0;  // 0: auto
  uint64_t buckets_ = 0;        // per buffer

  // Buffers (never freed before Close: a buffer lives as long as its range is buffered).
  mutable std::mutex buffers_mu_;
  std::vector<std::unique_ptr<BhtBuffer>> buffers_;
  const TagMatcher& matcher_ = TagMatcher::Best();

  // The log: head (durable), tail, and the buffers by their oldest live record. A spin
  // lock: every write appends under it (a few hundred ns, one persist), and a std::mutex
  // put the waiting writer to sleep in the kernel (futex wait and wake were 16% of a
  // 2-thread load's samples in perf; docs/engines/bht.md, "Logging first").
  mutable RwSpinLock log_mu_;
  char* log_ = nullptr;
  uint64_t log_offset_ = 0, log_slots_ = 0;
  uint64_t head_ = 0, tail_ = 0;  // under log_mu_
  std::set<std::pair<uint64_t, BhtBuffer*>> live_;  // (oldest, buffer), under log_mu_
  std::atomic<uint64_t> used_{0};                     // tail - head, for the writers' check

  // Engine counters.
  std::atomic<uint64_t> flips_{0}, flip_entries_{0}, flips_by_[5] = {};
  std::atomic<uint64_t> extra_lookups_{0}, read_misses_{0}, log_records_{0}, log_slots_used_{0},
      head_persists_{0}, replayed_{0}, flip_kept_{0};
};

}  // namespace pmhash::engines
