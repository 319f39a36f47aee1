// Undo log: lanes of old-byte entries in the pool's log area.
//
// On-media layout (offsets from pool.log_area(), L = pool.log_size()):
//
//   [0, 64)                            LogHeader (immutable after Format, checksummed)
//   [64 + i * lane_size, +lane_size)   lane i, for i < lane_count (lane_size % 64 == 0)
//
//   Lane:
//     [0, 8)      uint64_t state   SealWord(seq << 16 | count, salt = lane index)
//                                  (util/hash.h): the lane's transaction sequence
//                                  number seq (1 .. 2^32 - 1, then 1 again) and how many
//                                  entries of transaction seq are durable (count; 0 = none,
//                                  nothing to roll back). Written only with one
//                                  failure-atomic Store + persist.
//     [8, 64)     unused (the state has its cache line to itself)
//     [64, ...)   entries, back to back, each 8-byte aligned:
//                   uint64_t offset;     pool offset of the saved range
//                   uint64_t length;     bytes saved
//                   uint32_t seq;        the transaction the entry belongs to
//                   uint32_t index;      its position in that transaction
//                   uint64_t checksum;   Hash64(old, length, seed = Hash64 of the 24
//                                        bytes above, seeded with the lane index)
//                   uint8_t  old[length] padded to a multiple of 8
//
// Invariants:
//  * Entry k of transaction s is durable before the state says (s, k + 1) (Save: copy the
//    entry, persist = flush + fence, then Store the state and persist it). So every
//    counted entry is complete; an entry being written when a crash hit is not counted
//    and is never replayed.
//  * The caller modifies a saved range only after Save returned, and calls Commit only
//    after its changes are persisted. Commit (and a rollback, once the old bytes are
//    durable) stores (s + 1, 0): one atomic store retires every entry of s at once, and
//    the entries left in the lane all carry a sequence number other than the lane's.
//  * Recovery replays, per lane, only the one open transaction: the `count` entries the
//    state names, each of which must carry the state's seq, its own index and a good
//    checksum. Anything else (a state that fails its seal, a counted entry of an older
//    transaction, a bad checksum, a range outside the root area and heap) is Corruption
//    naming the lane, the entry and its pool offset, and every lane is validated before
//    anything is written, so a damaged log leaves the pool untouched. Then it restores old
//    bytes newest first, persists them and retires the lane as Commit does. Restoring the
//    same old bytes twice is harmless, so recovery is idempotent and a crash during it is
//    safe.
//  * Saved ranges lie in the root area or the heap: never the pool header or the log.
#include "pm/undo_log.h"

#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "util/hash.h"

namespace pmhash::pm {

namespace {

inline constexpr char kLogMagic[8] = {'P', 'M', 'H', 'U', 'N', 'D', 'O', 'L'};
inline constexpr uint32_t kLogVersion = 2;  // 2: sealed lane states, entries bound to a seq
inline constexpr uint32_t kLaneCount = 16;  // concurrent transactions
inline constexpr size_t kLogHeaderSize = 64;
inline constexpr size_t kLaneHeaderSize = 64;
inline constexpr uint64_t kMaxEntries = 0xffff;  // the state's 16-bit count

struct LogHeader {
  char magic[8];
  uint32_t version;
  uint32_t lane_count;
  uint64_t lane_size;
  uint64_t log_size;
  uint64_t reserved[3];
  uint64_t checksum;  // Hash64 of the bytes before it
};
static_assert(sizeof(LogHeader) == kLogHeaderSize && offsetof(LogHeader, version) == 8 &&
                  offsetof(LogHeader, lane_count) == 12 && offsetof(LogHeader, lane_size) == 16 &&
                  offsetof(LogHeader, log_size) == 24 && offsetof(LogHeader, checksum) == 56,
              "the log header is one cache line, laid out as above");

struct EntryHeader {
  uint64_t offset;
  uint64_t length;
  uint32_t seq;
  uint32_t index;
  uint64_t checksum;
};
static_assert(offsetof(EntryHeader, length) == 8 && offsetof(EntryHeader, seq) == 16 &&
                  offsetof(EntryHeader, index) == 20 && offsetof(EntryHeader, checksum) == 24 &&
                  sizeof(EntryHeader) == 32,
              "entries are laid out as above and stay 8-byte aligned");

constexpr uint64_t Align8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

uint64_t HeaderChecksum(const LogHeader& h) {
  return Hash64(&h, offsetof(LogHeader, checksum), 0x756e646f6c6f67ull);
}

// Binds the saved bytes to their lane, transaction, position and range.
uint64_t EntryChecksum(uint32_t lane, const EntryHeader& h, const void* old) {
  return Hash64(old, h.length, Hash64(&h, offsetof(EntryHeader, checksum), lane));
}

// A lane's state word: (seq, count) sealed with the lane index.
uint64_t LaneState(uint32_t lane, uint32_t seq, uint64_t count) {
  return SealWord(uint64_t{seq} << 16 | count, lane);
}
// The sequence number after `seq` (0 is never used: a zeroed lane is not a valid state).
uint32_t NextSeq(uint32_t seq) { return seq == UINT32_MAX ? 1 : seq + 1; }

// Lane geometry follows from the (checksummed) pool header alone.
uint64_t LaneSizeFor(uint64_t log_size) {
  if (log_size < kLogHeaderSize) return 0;
  return ((log_size - kLogHeaderSize) / kLaneCount) & ~uint64_t{63};
}

class LaneLog;

class LaneTx final : public UndoLog::Tx {
 public:
  LaneTx(LaneLog* log, uint32_t lane);
  ~LaneTx() override;
  Status Save(const void* addr, size_t len) override;
  void Commit() override;

 private:
  void RollBack();

  LaneLog* log_;
  uint32_t lane_;
  char* base_;          // the lane
  uint32_t seq_;        // the lane's open transaction (equals the PM state's seq)
  uint64_t count_ = 0;  // entries saved since the last Commit (equals the PM count)
  uint64_t used_ = kLaneHeaderSize;  // bytes of the lane in use
};

class LaneLog final : public UndoLog {
 public:
  LaneLog(Pool& pool, Persister& persister, uint64_t lane_size)
      : pool_(pool), persister_(persister), lane_size_(lane_size) {
    for (uint32_t i = kLaneCount; i > 0; --i) free_lanes_.push_back(i - 1);
  }

  // The sequence number of a lane's next (or open) transaction; the lane's owner sets it.
  uint32_t seq(uint32_t lane) const { return seq_[lane]; }
  void set_seq(uint32_t lane, uint32_t seq) { seq_[lane] = seq; }
  uint64_t* State(uint32_t lane) const { return reinterpret_cast<uint64_t*>(Lane(lane)); }

  std::unique_ptr<Tx> Begin() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !free_lanes_.empty(); });
    const uint32_t lane = free_lanes_.back();
    free_lanes_.pop_back();
    lock.unlock();
    return std::make_unique<LaneTx>(this, lane);
  }

  size_t LaneCapacity() const override {
    return lane_size_ - kLaneHeaderSize - sizeof(EntryHeader);
  }

  void DescribeLayout(const RegionVisitor& mark) const override {
    mark(pool_.ToOffset(pool_.log_area()), kLogHeaderSize, Region::kUndoLog, true);
    for (uint32_t i = 0; i < kLaneCount; ++i) {
      mark(pool_.ToOffset(State(i)), sizeof(uint64_t), Region::kUndoLog, true);
    }
  }

  void Release(uint32_t lane) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_lanes_.push_back(lane);
    }
    cv_.notify_one();
  }

  char* Lane(uint32_t i) const {
    return pool_.log_area() + kLogHeaderSize + static_cast<uint64_t>(i) * lane_size_;
  }
  Pool& pool() const { return pool_; }
  Persister& persister() const { return persister_; }
  uint64_t lane_size() const { return lane_size_; }

  // Whether [offset, +len) may be logged: inside the root area or the heap.
  bool Loggable(uint64_t offset, uint64_t len) const {
    const uint64_t root_end = kRootOffset + kRootSize;
    if (offset >= kRootOffset && offset <= root_end && len <= root_end - offset) return true;
    return offset >= pool_.heap_offset() && pool_.Contains(offset, len);
  }

 private:
  Pool& pool_;
  Persister& persister_;
  const uint64_t lane_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint32_t> free_lanes_;
  uint32_t seq_[kLaneCount] = {};  // each written only by the lane's holder (or setup)
};

LaneTx::LaneTx(LaneLog* log, uint32_t lane)
    : log_(log), lane_(lane), base_(log->Lane(lane)), seq_(log->seq(lane)) {}

LaneTx::~LaneTx() {
  if (count_ > 0) RollBack();
  log_->Release(lane_);
}

Status LaneTx::Save(const void* addr, size_t len) {
  if (len == 0) return Status::OK();
  Pool& pool = log_->pool();
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t b = reinterpret_cast<uintptr_t>(pool.base());
  if (a < b || !log_->Loggable(a - b, len)) {
    return Status::InvalidArgument("undo log: range of " + std::to_string(len) +
                                   " bytes is not inside the pool's root area or heap");
  }
  const uint64_t need = sizeof(EntryHeader) + Align8(len);
  if (need > log_->lane_size() - used_ || count_ == kMaxEntries) {
    return Status::ResourceExhausted(
        "undo log lane full: cannot save " + std::to_string(len) + " more bytes (" +
        std::to_string(log_->lane_size() - used_) + " bytes and " +
        std::to_string(kMaxEntries - count_) + " entries left in the lane)");
  }
  Persister& p = log_->persister();
  char* entry = base_ + used_;
  EntryHeader h{a - b, len, seq_, static_cast<uint32_t>(count_), 0};
  h.checksum = EntryChecksum(lane_, h, addr);
  p.Copy(entry, &h, sizeof(h));
  p.Copy(entry + sizeof(h), addr, len);
  p.Persist(entry, sizeof(h) + len);  // the entry is durable ...
  uint64_t* state = log_->State(lane_);
  p.Store(state, LaneState(lane_, seq_, count_ + 1));  // ... before it is counted
  p.Persist(state, sizeof(*state));
  ++count_;
  used_ += need;
  return Status::OK();
}

void LaneTx::Commit() {
  if (count_ > 0) {
    // One store retires every entry of seq_: the lane now names the next transaction.
    Persister& p = log_->persister();
    seq_ = NextSeq(seq_);
    uint64_t* state = log_->State(lane_);
    p.Store(state, LaneState(lane_, seq_, 0));
    p.Persist(state, sizeof(*state));
    log_->set_seq(lane_, seq_);
  }
  count_ = 0;
  used_ = kLaneHeaderSize;
}

void LaneTx::RollBack() {
  // Our own entries: well formed by construction. Walk them, restore newest first.
  std::vector<uint64_t> positions;
  positions.reserve(count_);
  uint64_t pos = kLaneHeaderSize;
  for (uint64_t i = 0; i < count_; ++i) {
    positions.push_back(pos);
    pos += sizeof(EntryHeader) + Align8(reinterpret_cast<const EntryHeader*>(base_ + pos)->length);
  }
  Persister& p = log_->persister();
  Pool& pool = log_->pool();
  for (auto it = positions.rbegin(); it != positions.rend(); ++it) {
    const auto* h = reinterpret_cast<const EntryHeader*>(base_ + *it);
    p.Copy(pool.At<char>(h->offset), base_ + *it + sizeof(EntryHeader), h->length);
    p.Flush(pool.At<char>(h->offset), h->length);
  }
  p.Fence();  // old bytes durable before the entries are retired
  Commit();
}

struct ParsedEntry {
  uint64_t offset, length;
  const char* old;
};

}  // namespace

Status UndoLog::Format(Pool& pool, Persister& persister, std::unique_ptr<UndoLog>* out) {
  const uint64_t lane_size = LaneSizeFor(pool.log_size());
  if (lane_size < kLaneHeaderSize + sizeof(EntryHeader) + 64) {
    return Status::InvalidArgument("undo log area of " + std::to_string(pool.log_size()) +
                                   " bytes is too small for " + std::to_string(kLaneCount) +
                                   " lanes");
  }
  auto log = std::make_unique<LaneLog>(pool, persister, lane_size);
  for (uint32_t i = 0; i < kLaneCount; ++i) {
    log->set_seq(i, 1);
    persister.Store(log->State(i), LaneState(i, 1, 0));
    persister.Flush(log->State(i), sizeof(uint64_t));
  }
  char* area = pool.log_area();
  LogHeader h{};
  std::memcpy(h.magic, kLogMagic, sizeof(kLogMagic));
  h.version = kLogVersion;
  h.lane_count = kLaneCount;
  h.lane_size = lane_size;
  h.log_size = pool.log_size();
  h.checksum = HeaderChecksum(h);
  persister.Copy(area, &h, sizeof(h));
  persister.Persist(area, sizeof(h));
  *out = std::move(log);
  return Status::OK();
}

Status UndoLog::Recover(Pool& pool, Persister& persister, std::unique_ptr<UndoLog>* out) {
  const uint64_t lane_size = LaneSizeFor(pool.log_size());
  LogHeader h;
  std::memcpy(&h, pool.log_area(), sizeof(h));
  if (std::memcmp(h.magic, kLogMagic, sizeof(kLogMagic)) != 0) {
    return Status::Corruption("undo log header damaged (bad magic)");
  }
  if (h.version != kLogVersion) {
    return Status::Corruption("undo log version " + std::to_string(h.version) +
                              "; this pmhash reads version " + std::to_string(kLogVersion));
  }
  if (HeaderChecksum(h) != h.checksum) {
    return Status::Corruption("undo log header checksum mismatch (header damaged)");
  }
  if (h.lane_count != kLaneCount || h.lane_size != lane_size ||
      h.log_size != pool.log_size()) {
    return Status::Corruption("undo log geometry does not match the pool header");
  }
  auto log = std::make_unique<LaneLog>(pool, persister, lane_size);

  // Validate everything first: a damaged log must leave the pool untouched.
  std::vector<std::vector<ParsedEntry>> lanes(kLaneCount);
  for (uint32_t i = 0; i < kLaneCount; ++i) {
    const char* lane = log->Lane(i);
    const uint64_t lane_offset = pool.ToOffset(lane);
    const std::string where = "undo log lane " + std::to_string(i);
    const uint64_t word = Persister::Load(log->State(i));
    uint64_t payload;
    if (!UnsealWord(word, i, &payload)) {
      return Status::Corruption(where + ": its state word at pool offset " +
                                std::to_string(lane_offset) + " fails its check (log damaged)");
    }
    const auto seq = static_cast<uint32_t>(payload >> 16);
    const uint64_t count = payload & 0xffff;
    if (seq == 0) {
      return Status::Corruption(where + ": its state word at pool offset " +
                                std::to_string(lane_offset) +
                                " names transaction 0, which the log never uses (log damaged)");
    }
    log->set_seq(i, seq);
    uint64_t pos = kLaneHeaderSize;
    for (uint64_t k = 0; k < count; ++k) {
      const std::string entry = where + " entry " + std::to_string(k) + " (pool offset " +
                                std::to_string(lane_offset + pos) + ")";
      if (lane_size - pos < sizeof(EntryHeader)) {
        return Status::Corruption(where + " claims " + std::to_string(count) +
                                  " entries; " + entry + " runs past the end of the lane");
      }
      EntryHeader e;
      std::memcpy(&e, lane + pos, sizeof(e));
      if (e.seq != seq || e.index != k) {
        return Status::Corruption(entry + " belongs to transaction " + std::to_string(e.seq) +
                                  " (entry " + std::to_string(e.index) +
                                  "), not to the lane's open transaction " +
                                  std::to_string(seq) + ": a stale or damaged entry");
      }
      if (e.length > lane_size - pos - sizeof(EntryHeader)) {
        return Status::Corruption(entry + " has length " + std::to_string(e.length) +
                                  ", past the end of the lane");
      }
      if (e.length == 0 || !log->Loggable(e.offset, e.length)) {
        return Status::Corruption(entry + " names range [" + std::to_string(e.offset) +
                                  ", +" + std::to_string(e.length) +
                                  ") outside the pool's root area and heap");
      }
      const char* old = lane + pos + sizeof(EntryHeader);
      if (EntryChecksum(i, e, old) != e.checksum) {
        return Status::Corruption(entry + " checksum mismatch (log damaged)");
      }
      lanes[i].push_back({e.offset, e.length, old});
      pos += sizeof(EntryHeader) + Align8(e.length);
    }
  }
  for (uint32_t i = 0; i < kLaneCount; ++i) {
    if (lanes[i].empty()) continue;
    for (auto it = lanes[i].rbegin(); it != lanes[i].rend(); ++it) {
      char* dst = pool.At<char>(it->offset);
      persister.Copy(dst, it->old, it->length);
      persister.Flush(dst, it->length);
    }
    persister.Fence();  // old bytes durable before the lane is retired
    const uint32_t next = NextSeq(log->seq(i));
    persister.Store(log->State(i), LaneState(i, next, 0));
    persister.Persist(log->State(i), sizeof(uint64_t));
    log->set_seq(i, next);
  }
  *out = std::move(log);
  return Status::OK();
}

}  // namespace pmhash::pm
