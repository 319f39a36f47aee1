// CCEH, the base of `cceh` and `bht`. Layout, invariants, persist orders and locking:
// cceh_core.h.
#include "engines/cceh/cceh_core.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engines/cceh/window.h"
#include "util/hash.h"

namespace pmhash::engines {
namespace {

constexpr size_t kDirHeaderBytes = sizeof(CcehDirHeader);
constexpr size_t kDirCheckedBytes = offsetof(CcehDirHeader, check);
constexpr uint64_t kDepthMask = kCcehEntryDepthMask | kCcehEntryMark;  // below the offset

uint64_t DirBytes(uint64_t entries) { return kDirHeaderBytes + entries * sizeof(uint64_t); }
bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }
uint32_t Log2(uint64_t x) { return 63 - static_cast<uint32_t>(__builtin_clzll(x)); }

static_assert(kCcehMinSegmentBytes % kCcehBucketBytes == 0 &&
                  kCcehProbeSlots % kCcehBucketSlots == 0 && kCcehBucketSlots == kWindowLineSlots,
              "a window is whole lines of window.h, and a line never wraps around its segment");
static_assert(kCcehMinSegmentBytes / sizeof(KvWords) >= kCcehProbeSlots,
              "every segment holds a whole window: the window is a constant");
static_assert(kCcehEmpty == ~uint64_t{0}, "window.h matches an empty slot as all ones");

}  // namespace

// ---- Options --------------------------------------------------------------------------

std::vector<OptionSpec> CcehCore::CcehOptions() {
  return {OptionSpec::Uint("segment_bytes", kCcehDefaultSegmentBytes, kCcehMinSegmentBytes,
                           kCcehMaxSegmentBytes,
                           "bytes per segment, a power of two: buckets of 4 16-byte slots (the "
                           "original's 16 KiB = 256 buckets); fixed when the pool is created"),
          OptionSpec::Uint("segments", std::nullopt, 1, uint64_t{1} << 30,
                           "segments of the first directory, a power of two (auto: enough for "
                           "initial_capacity keys at half their slots, else 64)"),
          OptionSpec::Bool("probe_to_empty", false,
                           "searches and duplicate checks stop at the first empty slot of the "
                           "window (an improvement; default off: every probe that misses reads "
                           "the whole window, as the original's searches do)"),
          OptionSpec::Bool("free_slots_first", false,
                           "an insert takes the window's first empty or deleted slot before "
                           "any copy a split left behind, hashing no stored key unless the "
                           "window has neither (an improvement; default off: the first usable "
                           "slot in probe order, each occupied slot's key hashed on the way, "
                           "as the original)"),
          OptionSpec::Bool("dram_directory", false,
                           "operations read the directory from a DRAM copy of 4-byte entries "
                           "on huge pages, rebuilt at open; the directory in PM stays the "
                           "persistent truth (an improvement; default off: every operation "
                           "reads the directory in PM, as the original)")};
}

Status CcehCore::ConfigureCore(EngineOptions& options, const RootLayout& layout) {
  segment_bytes_ = options.Uint("segment_bytes");
  window_avx2_ = CpuFeatures::Get().avx2;
  segment_bytes_given_ = options.Given("segment_bytes");
  initial_segments_ = options.Uint("segments");
  probe_to_empty_ = options.Bool("probe_to_empty");
  free_slots_first_ = options.Bool("free_slots_first");
  dram_directory_ = options.Bool("dram_directory");
  if (!IsPowerOfTwo(segment_bytes_)) {
    return Status::InvalidArgument(name() + ": segment_bytes must be a power of two, not " +
                                   std::to_string(segment_bytes_));
  }
  if (initial_segments_ != 0 && !IsPowerOfTwo(initial_segments_)) {
    return Status::InvalidArgument(name() + ": segments must be a power of two, not " +
                                   std::to_string(initial_segments_));
  }
  slots_ = segment_bytes_ / sizeof(KvWords);
  bucket_mask_ = slots_ / kCcehBucketSlots - 1;
  const auto* r = root<const CcehRoot>();
  if (segment_bytes_given_ && !pool().needs_creation() && r->header.magic == layout.magic &&
      r->segment_bytes != segment_bytes_) {
    return Status::InvalidArgument(name() + ": this pool's segments are " +
                                   std::to_string(r->segment_bytes) + " bytes, not " +
                                   std::to_string(segment_bytes_) +
                                   " (segment_bytes is fixed when a pool is created)");
  }
  return Status::OK();
}

// ---- Blocks -----------------------------------------------------------------------------

Status CcehCore::NewDirectory(uint32_t depth, uint64_t* offset) {
  const uint64_t entries = uint64_t{1} << depth;
  if (depth > kCcehMaxDepth || DirBytes(entries) > pool().size()) {
    return Status::PoolFull(name() + ": a directory of 2^" + std::to_string(depth) +
                            " entries does not fit the pool");
  }
  // Unreachable until the root links it: the caller flushes it with its entries.
  PMHASH_RETURN_IF_ERROR(NewTableBlock(DirBytes(entries),
                                       "a directory of " + std::to_string(entries) + " entries",
                                       kCcehDirMagic, entries, offset));
  auto* h = pool().At<CcehDirHeader>(*offset);
  persister().Store(&h->global_depth, uint64_t{depth});
  persister().Store(&h->check, MetadataCheck(h, kDirCheckedBytes));
  return Status::OK();
}

Status CcehCore::NewSegment(const CcehImage& image, uint64_t* offset) {
  PMHASH_RETURN_IF_ERROR(
      AllocateBlock(segment_bytes_, "a segment of " + std::to_string(segment_bytes_) + " bytes",
                    offset));
  if (*offset % 256 != 0) {  // alloc.h promises 256-byte alignment for blocks this size
    allocator().Free(*offset);
    return Status::Corruption(name() + ": the allocator gave a segment at offset " +
                              std::to_string(*offset) + ", not 256-byte aligned");
  }
  KvWords* slots = pool().At<KvWords>(*offset);
  persister().Copy(slots, image.data(), segment_bytes_);
  persister().Flush(slots, segment_bytes_);  // no fence: the caller fences before linking
  return Status::OK();
}

CcehSeg* CcehCore::BringUp(uint64_t offset, uint32_t depth, uint64_t pattern, bool marked) {
  CcehSeg* s = SegAt(offset);
  s->marked = marked;
  s->offset.store(offset, std::memory_order_relaxed);
  s->pattern.store(pattern, std::memory_order_relaxed);
  s->delta.store(0, std::memory_order_relaxed);
  s->attachment.store(nullptr, std::memory_order_relaxed);
  s->depth.store(depth, std::memory_order_release);  // last: from here it serves
  s->list_index = live_.size();
  live_.push_back(s);
  return s;
}

void CcehCore::Retire(CcehSeg* s) {
  s->depth.store(kCcehNoSegment, std::memory_order_release);
  base_count_ += s->delta.load(std::memory_order_relaxed);
  s->delta.store(0, std::memory_order_relaxed);
  s->attachment.store(nullptr, std::memory_order_relaxed);
  CcehSeg* last = live_.back();
  live_[s->list_index] = last;
  last->list_index = s->list_index;
  live_.pop_back();
}

uint64_t CcehCore::segments() const {
  std::lock_guard<std::mutex> g(dir_mu_);
  return live_.size();
}

uint64_t CcehCore::SegmentKeys() const {
  std::lock_guard<std::mutex> g(dir_mu_);
  int64_t c = base_count_;
  for (const CcehSeg* s : live_) c += s->delta.load(std::memory_order_relaxed);
  return c < 0 ? 0 : static_cast<uint64_t>(c);
}

void CcehCore::ShiftSegmentKeys(int64_t by) {
  std::lock_guard<std::mutex> g(dir_mu_);
  base_count_ += by;
}

// ---- Media attribution --------------------------------------------------------------------

// ---- Creation ----------------------------------------------------------------------------

Status CcehCore::MakeSideTable() {
  segment_shift_ = Log2(segment_bytes_);
  Result<DramArray<CcehSeg>> table = DramArray<CcehSeg>::Allocate(pool().size() >> segment_shift_);
  if (!table.ok()) return table.status();
  table_ = std::move(*table);
  return Status::OK();
}

Status CcehCore::CreateCore(const RootLayout& layout) {
  PMHASH_RETURN_IF_ERROR(MakeSideTable());
  uint64_t n = initial_segments_;
  if (n == 0) {
    const uint64_t cap = initial_capacity();
    n = cap == 0 ? kCcehDefaultSegments : std::bit_ceil((2 * cap + slots_ - 1) / slots_);
  }
  const uint32_t depth = Log2(n);
  if (depth > kCcehMaxDepth || n > pool().size() / segment_bytes_) {
    return Status::PoolFull(name() + ": " + std::to_string(n) + " segments of " +
                            std::to_string(segment_bytes_) + " bytes do not fit the pool");
  }
  uint64_t dir = 0;
  PMHASH_RETURN_IF_ERROR(NewDirectory(depth, &dir));
  std::vector<uint64_t> made;
  auto release = [&] {
    for (uint64_t off : made) allocator().Free(off);
    allocator().Free(dir);
  };
  const CcehImage empty(slots_);
  uint64_t* entries = DirEntries(dir);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t seg = 0;
    if (Status s = NewSegment(empty, &seg); !s.ok()) {
      release();
      return s;
    }
    made.push_back(seg);
    persister().Store(&entries[i], SealFor(&entries[i], CcehEntry(seg, depth, InitialMark(i, n))));
  }
  std::unique_ptr<CcehDirCopy> copy;
  if (dram_directory_) {
    if (Status st = CopyDirectory(dir, depth, &copy); !st.ok()) {
      release();
      return st;
    }
  }
  auto* r = root<CcehRoot>();
  persister().Store(&r->segment_bytes, segment_bytes_);
  persister().Store(&r->probe_slots, uint64_t{kCcehProbeSlots});
  // CreateRoot persists the directory; its fence also makes the flushed segments durable
  // before the root's magic.
  CreateRoot(layout, dir, DirBytes(n));
  std::lock_guard<std::mutex> g(dir_mu_);
  for (uint64_t i = 0; i < n; ++i) BringUp(made[i], depth, i, InitialMark(i, n));
  if (copy) PublishDirectoryCopy(std::move(copy));
  dir_word_.store(dir | depth, std::memory_order_release);
  base_count_ = 0;
  return Status::OK();
}

// ---- Validation and recovery ---------------------------------------------------------------

Status CcehCore::ValidateDirectory(uint64_t dir, uint32_t* depth) const {
  uint64_t entries = 0;
  PMHASH_RETURN_IF_ERROR(ValidateTableBlock(dir, kCcehDirMagic, pool().size() / sizeof(uint64_t),
                                            DirBytes, &entries));
  const auto* h = pool().At<const CcehDirHeader>(dir);
  if (!IsPowerOfTwo(entries) || h->global_depth != Log2(entries) ||
      h->global_depth > kCcehMaxDepth) {
    return Status::Corruption(name() + ": the directory at pool offset " + std::to_string(dir) +
                              " has " + std::to_string(entries) + " entries and global depth " +
                              std::to_string(h->global_depth) + " (damaged)");
  }
  PMHASH_RETURN_IF_ERROR(VerifyMetadata(h, kDirCheckedBytes, h->check, "the directory header"));
  *depth = static_cast<uint32_t>(h->global_depth);
  return Status::OK();
}

Status CcehCore::WalkDirectory(
    uint64_t dir, uint32_t depth,
    const std::function<Status(uint64_t, uint64_t, uint64_t, uint32_t, bool)>& fn,
    const std::function<Status(uint64_t)>& mismatch) const {
  const uint64_t* e = DirEntries(dir);
  const uint64_t n = uint64_t{1} << depth;
  for (uint64_t i = 0; i < n;) {
    uint64_t payload = 0;
    PMHASH_RETURN_IF_ERROR(LoadSealed(&e[i], "directory entry", &payload));
    const auto local = static_cast<uint32_t>(payload & kCcehEntryDepthMask);
    const uint64_t seg = payload & ~kDepthMask;
    const std::string at = "directory entry " + std::to_string(i) + " (pool offset " +
                           std::to_string(pool().ToOffset(&e[i])) + ")";
    if (local > depth) {
      return Status::Corruption(name() + ": " + at + " has local depth " +
                                std::to_string(local) + " above the global depth " +
                                std::to_string(depth));
    }
    const uint64_t stride = uint64_t{1} << (depth - local);
    if (i % stride != 0) {
      return Status::Corruption(name() + ": " + at + " starts a range of " +
                                std::to_string(stride) + " entries at an unaligned index");
    }
    for (uint64_t j = i + 1; j < i + stride; ++j) {
      uint64_t other = 0;
      PMHASH_RETURN_IF_ERROR(LoadSealed(&e[j], "directory entry", &other));
      if (other != payload) PMHASH_RETURN_IF_ERROR(mismatch(j));
    }
    PMHASH_RETURN_IF_ERROR(fn(i, stride, seg, local, (payload & kCcehEntryMark) != 0));
    i += stride;
  }
  return Status::OK();
}

Status CcehCore::EnumerateCore(const RootLayout& layout,
                               const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t dir = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(layout, kDirHeaderBytes, &dir, &count));
  const auto* r = root<const CcehRoot>();
  const uint64_t bytes = r->segment_bytes;
  if (!IsPowerOfTwo(bytes) || bytes < kCcehMinSegmentBytes || bytes > kCcehMaxSegmentBytes) {
    return Status::Corruption(name() + ": the root's segment size " + std::to_string(bytes) +
                              " is not one this build makes");
  }
  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  visit(dir);
  {
    std::lock_guard<std::mutex> g(dir_mu_);
    for (const uint64_t old : retired_dirs_) visit(old);  // freed at Close
  }
  std::unordered_set<uint64_t> seen;
  const uint64_t slots = bytes / sizeof(KvWords);
  // Entries that differ from their range's first are an unfinished split or
  // replacement's: Recover sets them back, so what they point to is not reached.
  return WalkDirectory(
      dir, depth,
      [&](uint64_t i, uint64_t, uint64_t seg, uint32_t local, bool) -> Status {
        if (seg < pool().heap_offset() || !pool().Contains(seg, bytes)) {
          return Status::Corruption(name() + ": directory entry " + std::to_string(i) +
                                    " points outside the heap (offset " + std::to_string(seg) +
                                    ")");
        }
        if (!seen.insert(seg).second) {
          return Status::Corruption(name() + ": the segment at pool offset " +
                                    std::to_string(seg) + " is in two directory ranges");
        }
        visit(seg);
        const uint64_t pattern = i >> (depth - local);
        const KvWords* w = pool().At<const KvWords>(seg);
        for (uint64_t k = 0; k < slots; ++k) {
          if (CcehForm(w[k].word0) != SlotForm::kRecord) continue;
          // Live records only: a stale one belongs to the sibling a split copied it to.
          if (!LiveIn(w[k].word1, local, pattern)) continue;
          const KvWords cw = CcehCodecWords(w[k]);
          if (pool().Contains(cw.word0, 8)) visit(cw.word0);  // a wild one: Recover says so
        }
        return Status::OK();
      },
      [](uint64_t) { return Status::OK(); });
}

Status CcehCore::RecoverCore(const RootLayout& layout, bool clean, uint64_t* stored_count) {
  uint64_t dir = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(layout, kDirHeaderBytes, &dir, &count));
  const auto* r = root<const CcehRoot>();
  const uint64_t bytes = r->segment_bytes;
  if (!IsPowerOfTwo(bytes) || bytes < kCcehMinSegmentBytes || bytes > kCcehMaxSegmentBytes ||
      r->probe_slots != kCcehProbeSlots) {
    return Status::Corruption(name() + ": the root's geometry (segments of " +
                              std::to_string(bytes) + " bytes, probes of " +
                              std::to_string(r->probe_slots) + " slots) is not one this build "
                              "makes");
  }
  segment_bytes_ = bytes;
  PMHASH_RETURN_IF_ERROR(MakeSideTable());
  slots_ = bytes / sizeof(KvWords);
  bucket_mask_ = slots_ / kCcehBucketSlots - 1;

  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  PMHASH_RETURN_IF_ERROR(CheckTableBlock(dir, DirBytes(uint64_t{1} << depth)));
  struct Range {
    uint64_t first, stride, seg;
    uint32_t depth;
    bool marked;
  };
  std::vector<Range> ranges;
  std::vector<uint64_t> repairs;  // entries to set back to their range's first
  uint64_t repaired_range = ~uint64_t{0};
  PMHASH_RETURN_IF_ERROR(WalkDirectory(
      dir, depth,
      [&](uint64_t i, uint64_t stride, uint64_t seg, uint32_t local, bool marked) -> Status {
        ranges.push_back({i, stride, seg, local, marked});
        return Status::OK();
      },
      [&](uint64_t j) -> Status {
        if (clean) {
          return Status::Corruption(name() + ": directory entry " + std::to_string(j) +
                                    " differs from its range's first after a clean shutdown");
        }
        repairs.push_back(j);
        return Status::OK();
      }));
  // Repairs must all fall in one range: directory updates are serialized, so a crash
  // leaves at most one unfinished. More is damage, not a crash.
  for (uint64_t j : repairs) {
    const auto it = std::upper_bound(ranges.begin(), ranges.end(), j,
                                     [](uint64_t x, const Range& rg) { return x < rg.first; });
    const uint64_t first = std::prev(it)->first;
    if (repaired_range != ~uint64_t{0} && repaired_range != first) {
      return Status::Corruption(name() + ": directory ranges starting at entries " +
                                std::to_string(repaired_range) + " and " +
                                std::to_string(first) +
                                " both hold entries that differ from their first (damaged)");
    }
    repaired_range = first;
  }
  uint64_t* e = DirEntries(dir);
  if (!repairs.empty()) {
    uint64_t payload = 0;
    PMHASH_RETURN_IF_ERROR(LoadSealed(&e[repaired_range], "directory entry", &payload));
    for (uint64_t j : repairs) {
      persister().Store(&e[j], SealFor(&e[j], payload));
      persister().Flush(&e[j], sizeof(uint64_t));
    }
    persister().Fence();
  }
  repaired_entries_ = repairs.size();

  std::unordered_set<uint64_t> seen;
  std::lock_guard<std::mutex> g(dir_mu_);
  uint64_t live_total = 0;
  for (const Range& rg : ranges) {
    const std::string at = "the segment at pool offset " + std::to_string(rg.seg) +
                           " (directory entry " + std::to_string(rg.first) + ")";
    if (!seen.insert(rg.seg).second) {
      return Status::Corruption(name() + ": " + at + " is in two directory ranges");
    }
    if (!allocator().IsAllocated(rg.seg) || allocator().UsableSize(rg.seg) < segment_bytes_) {
      return Status::Corruption(name() + ": " + at + " is not an allocated block of " +
                                std::to_string(segment_bytes_) + " bytes");
    }
    const uint64_t pattern = rg.first >> (depth - rg.depth);
    BringUp(rg.seg, rg.depth, pattern, rg.marked);
    if (clean) continue;
    // After a crash: count the live slots, each validated.
    const KvWords* w = pool().At<const KvWords>(rg.seg);
    for (uint64_t k = 0; k < slots_; ++k) {
      const SlotForm f = CcehForm(w[k].word0);
      if (f == SlotForm::kEmpty) continue;
      const uint64_t h = SlotHash(w[k]);
      if (!LiveIn(h, rg.depth, pattern)) continue;
      if (!codec().Plausible(f, CcehCodecWords(w[k]))) {
        return Status::Corruption(name() + ": the slot at pool offset " +
                                  std::to_string(pool().ToOffset(&w[k])) +
                                  " points to no valid record (damaged pool)");
      }
      ++live_total;
    }
  }
  if (dram_directory_) {
    std::unique_ptr<CcehDirCopy> copy;
    PMHASH_RETURN_IF_ERROR(CopyDirectory(dir, depth, &copy));
    PublishDirectoryCopy(std::move(copy));
  }
  dir_word_.store(dir | depth, std::memory_order_release);
  if (!clean) {
    count = live_total;
    PersistRootCount(count);
  }
  base_count_ = static_cast<int64_t>(count);
  *stored_count = count;
  return Status::OK();
}

// ---- Probes ----------------------------------------------------------------------------------

uint64_t CcehCore::RangeEnd(uint32_t depth, uint64_t pattern) {
  if (depth == 0 || pattern + 1 == (uint64_t{1} << depth)) return 0;
  return (pattern + 1) << (64 - depth);
}

uint64_t CcehCore::SlotHash(const KvWords& w) const {
  if (CcehForm(w.word0) == SlotForm::kRecord) return w.word1;
  return KeyHash(std::string_view(reinterpret_cast<const char*>(&w.word0), 8));
}

CcehSeg* CcehCore::SegmentOf(uint64_t hash) const {
  const uint64_t off = EntryOffset(hash);
  return InTable(off) ? SegAt(off) : nullptr;
}

CcehSeg* CcehCore::LockSegment(uint64_t hash, LockMode mode) const {
  for (int attempt = 0;; ++attempt) {
    const uint64_t off = EntryOffset(hash);
    if (!InTable(off)) {  // a directory a doubling freed meanwhile
      SpinBackoff(attempt);
      continue;
    }
    // The window's lines load while the lock (a locked instruction, which later loads
    // wait for) is taken.
    PrefetchWindow(off, hash);
    CcehSeg* s = SegAt(off);
    if (mode == LockMode::kExclusive) {
      s->mu.lock();
    } else {
      s->mu.lock_shared();
    }
    if (s->Serves(hash)) return s;
    // A split moved the hash to a sibling between the directory read and the lock, or
    // its new segment is still coming up.
    if (mode == LockMode::kExclusive) {
      s->mu.unlock();
    } else {
      s->mu.unlock_shared();
    }
    SpinBackoff(attempt);
  }
}

// The window's first `examined` slots from `start`, noted as read: two runs if it wraps.
[[gnu::always_inline]] inline void CcehCore::NoteWindowRead(const KvWords* slots, size_t start,
                                                            size_t examined) const {
  pm::ReadRun run(persister());
  const size_t first_run = std::min(examined, slots_ - start);
  run.Add(&slots[start], first_run * sizeof(KvWords));
  if (examined > first_run) run.Add(&slots[0], (examined - first_run) * sizeof(KvWords));
}

template <class Window>
[[gnu::always_inline]] inline CcehCore::Probe CcehCore::FindWith(const CcehSeg* s,
                                                                 std::string_view key,
                                                                 uint64_t hash) const {
  Probe p;
  const KvWords* slots = SlotsOf(s);
  uint64_t key_word = 0;
  const bool inline_key = key.size() == 8;
  if (inline_key) std::memcpy(&key_word, key.data(), 8);
  const bool compare_inline = inline_key && !CcehEscapesInline(key_word);
  const size_t start = StartSlot(hash);
  // The key, among the window's candidates in probe order: a slot holding it has its key
  // word (inline) or its hash (a record); a slot holding the key is live, since the key's
  // hash picked this segment. `examined` ends past the key, or past the empty slot that
  // ends the window (probe_to_empty; invariant 2: the key is not beyond).
  // A key that is not inline matches no key word.
  const uint32_t wanted = compare_inline ? ~uint32_t{0} : ~kWindowKeyBits;
  const bool empties = probe_to_empty_;
  size_t examined = kCcehProbeSlots;
  for (size_t line = 0; line < kCcehProbeSlots && examined == kCcehProbeSlots;
       line += kCcehBucketSlots) {
    const KvWords* first = &slots[SlotAt(start, line)];
    for (uint32_t c = Window::Candidates(first, key_word, hash, empties) & wanted; c != 0;
         c &= c - 1) {
      const uint32_t bit = static_cast<uint32_t>(std::countr_zero(c));
      const size_t i = line + bit / kWindowBitsPerSlot;
      const KvWords& w = first[bit / kWindowBitsPerSlot];
      if ((uint32_t{1} << bit) & kWindowEmptyBits) {
        examined = i + 1;
        break;
      }
      const SlotForm f = CcehForm(w.word0);
      const bool match =
          f == SlotForm::kInline
              ? compare_inline && w.word0 == key_word
              : f == SlotForm::kRecord &&
                    codec().KeyEquals(SlotForm::kRecord, CcehCodecWords(w), key, hash);
      if (match) {
        p.found = static_cast<int>(SlotAt(start, i));
        examined = i + 1;
        break;
      }
    }
  }
  // What was read (two runs if the window wraps), and for an absent key the first free
  // slot of it: empty, deleted, or a copy a split left behind (lazy deletion: its hash is
  // not the segment's).
  NoteWindowRead(slots, start, examined);
  if (p.found >= 0) return p;
  if (free_slots_first_) {  // an empty or deleted slot, known without a hash
    for (size_t i = 0; i < examined; ++i) {
      const size_t k = SlotAt(start, i);
      if (CcehForm(slots[k].word0) == SlotForm::kEmpty) {
        p.free = static_cast<int>(k);
        return p;
      }
    }
  }
  const uint32_t depth = s->depth.load(std::memory_order_relaxed);
  const uint64_t pattern = s->pattern.load(std::memory_order_relaxed);
  for (size_t i = 0; i < examined; ++i) {
    const size_t k = SlotAt(start, i);
    const KvWords& w = slots[k];
    if (CcehForm(w.word0) == SlotForm::kEmpty || !LiveIn(SlotHash(w), depth, pattern)) {
      p.free = static_cast<int>(k);
      break;
    }
  }
  return p;
}

CcehCore::Probe CcehCore::FindSse2(const CcehSeg* s, std::string_view key, uint64_t hash) const {
  return FindWith<WindowSse2>(s, key, hash);
}

__attribute__((target("avx2"))) CcehCore::Probe CcehCore::FindAvx2(const CcehSeg* s,
                                                                   std::string_view key,
                                                                   uint64_t hash) const {
  return FindWith<WindowAvx2>(s, key, hash);
}

const CcehSeg* CcehCore::BeginRead(uint64_t hash, OptimisticRead* read,
                                   const KvWords** slots) const {
  const uint64_t offset = EntryOffset(hash);
  if (!InTable(offset)) return nullptr;  // a directory a doubling freed
  PrefetchWindow(offset, hash);  // loads with the state's line, not after it
  const CcehSeg* s = SegAt(offset);
  if (!read->Begin(s->mu)) return nullptr;
  // A split or replacement is moving the hash (or the entry was read half-changed).
  if (!s->Serves(hash) || s->offset.load(std::memory_order_acquire) != offset) return nullptr;
  *slots = pool().At<const KvWords>(offset);
  return s;
}

template <class Window>
[[gnu::always_inline]] inline Optimistic CcehCore::SearchWindowWith(const KvWords* slots,
                                                                    uint64_t hash,
                                                                    OptimisticRead* read) const {
  const bool compare_inline = read->inline_key && !CcehEscapesInline(read->key_word);
  const uint32_t wanted = compare_inline ? ~uint32_t{0} : ~kWindowKeyBits;
  const bool empties = probe_to_empty_;
  const size_t start = StartSlot(hash);
  Optimistic answer = Optimistic::kAbsent;
  size_t read_slots = kCcehProbeSlots;
  bool decided = false;
  for (size_t line = 0; line < kCcehProbeSlots && !decided; line += kCcehBucketSlots) {
    const KvWords* first = &slots[SlotAt(start, line)];
    for (uint32_t c = Window::Candidates(first, read->key_word, hash, empties) & wanted; c != 0;
         c &= c - 1) {
      const uint32_t bit = static_cast<uint32_t>(std::countr_zero(c));
      const KvWords* w = first + bit / kWindowBitsPerSlot;
      if ((uint32_t{1} << bit) & kWindowKeyBits) {
        read->value_word = __atomic_load_n(&w->word1, __ATOMIC_ACQUIRE);
        answer = Optimistic::kFound;
      } else if ((uint32_t{1} << bit) & kWindowEmptyBits) {
        // An empty slot ends the window (probe_to_empty): absent.
      } else if (CcehForm(__atomic_load_n(&w->word0, __ATOMIC_ACQUIRE)) == SlotForm::kRecord) {
        answer = Optimistic::kLocked;  // maybe the key: its record is read under the lock
      } else {
        continue;  // an inline value that equals the hash
      }
      read_slots = line + bit / kWindowBitsPerSlot + 1;
      decided = true;
      break;
    }
  }
  // The window's plain loads before the version's: x86 does not reorder loads with loads
  // (TSO), so a compiler barrier suffices (as dash's Validate).
  std::atomic_signal_fence(std::memory_order_acq_rel);
  // The window's lines, up to where the search stopped (two runs if it wraps).
  const size_t first_run = std::min(read_slots, slots_ - start);
  read->Note(&slots[start], first_run * sizeof(KvWords));
  if (read_slots > first_run) read->Note(&slots[0], (read_slots - first_run) * sizeof(KvWords));
  return answer;
}

Optimistic CcehCore::SearchWindowSse2(const KvWords* slots, uint64_t hash,
                                      OptimisticRead* read) const {
  return SearchWindowWith<WindowSse2>(slots, hash, read);
}

__attribute__((target("avx2"))) Optimistic CcehCore::SearchWindowAvx2(
    const KvWords* slots, uint64_t hash, OptimisticRead* read) const {
  return SearchWindowWith<WindowAvx2>(slots, hash, read);
}

Optimistic CcehCore::FindOptimistic(uint64_t hash, OptimisticRead* read) const {
  const OptimisticReadScope unchecked_by_tsan;  // validated by the version instead
  const KvWords* slots = nullptr;
  const CcehSeg* s = BeginRead(hash, read, &slots);
  if (s == nullptr) return Optimistic::kRetry;
  const Optimistic answer = SearchWindow(slots, hash, read);
  return read->Valid(s->mu) ? answer : Optimistic::kRetry;
}

Status CcehCore::GetFromSegments(std::string_view key, uint64_t hash, std::string* value) {
  const Optimistic answer = SearchOptimistically(
      persister(), key, value, [&](OptimisticRead* read) { return FindOptimistic(hash, read); });
  if (answer == Optimistic::kFound) return Status::OK();
  if (answer == Optimistic::kAbsent) return Status::NotFound();
  CcehSeg* s = LockSegment(hash, LockMode::kShared);
  HeldLock guard(s->mu, LockMode::kShared);
  return ReadValue(s, key, hash, value);
}

template <class Window>
[[gnu::always_inline]] inline CcehCore::InlineProbe CcehCore::ProbeInline(
    const KvWords* slots, size_t start, uint64_t k, uint64_t hash) const {
  // The window line by line (start and the segment's slots are multiples of a line, so a
  // line never wraps), in probe order; a line's candidates are checked one by one.
  InlineProbe p;
  const bool empties = probe_to_empty_;
  for (size_t line = 0; line < kCcehProbeSlots; line += kCcehBucketSlots) {
    const KvWords* first = &slots[SlotAt(start, line)];
    for (uint32_t c = Window::Candidates(first, k, hash, empties); c != 0; c &= c - 1) {
      const uint32_t bit = static_cast<uint32_t>(std::countr_zero(c));
      const size_t i = line + bit / kWindowBitsPerSlot;
      if ((uint32_t{1} << bit) & kWindowKeyBits) {
        p.hit = first + bit / kWindowBitsPerSlot;
        p.examined = i + 1;
        return p;
      }
      if ((uint32_t{1} << bit) & kWindowEmptyBits) {  // it ends the window (probe_to_empty)
        p.examined = i + 1;
        return p;
      }
      // word1 is the hash: maybe the key's record (or a value equal to the hash).
      const KvWords* candidate = first + bit / kWindowBitsPerSlot;
      if (CcehForm(__atomic_load_n(&candidate->word0, __ATOMIC_ACQUIRE)) == SlotForm::kRecord) {
        p.record = true;
        return p;
      }
    }
  }
  return p;
}

CcehCore::InlineProbe CcehCore::ProbeSse2(const KvWords* slots, size_t start, uint64_t k,
                                           uint64_t hash) const {
  return ProbeInline<WindowSse2>(slots, start, k, hash);
}

__attribute__((target("avx2"))) CcehCore::InlineProbe CcehCore::ProbeAvx2(
    const KvWords* slots, size_t start, uint64_t k, uint64_t hash) const {
  return ProbeInline<WindowAvx2>(slots, start, k, hash);
}

template <class Window>
[[gnu::always_inline]] inline CcehCore::InlineProbe CcehCore::ProbeOutOfLine(
    const KvWords* slots, size_t start, uint64_t k, uint64_t hash) const {
  if constexpr (std::is_same_v<Window, WindowAvx2>) return ProbeAvx2(slots, start, k, hash);
  return ProbeSse2(slots, start, k, hash);
}

template <class Window, bool kHooked>
[[gnu::always_inline]] inline QuickAnswer CcehCore::FirstTryWith(uint64_t k, uint64_t hash) const {
  constexpr QuickAnswer kRetry{0, Optimistic::kRetry};
  if (CcehEscapesInline(k)) return kRetry;
  const OptimisticReadScope unchecked_by_tsan;  // validated by the segment's version
  // EntryOffset, BeginRead, SearchWindow and FindOptimistic's check, inline.
  uint64_t offset;
  if (dram_directory_) {
    offset = CopiedEntryOffset(hash);
  } else {
    const uint64_t w = dir_word_.load(std::memory_order_acquire);
    const uint64_t* e = DirEntries(DirOffset(w)) + CcehTopBits(hash, DirDepth(w));
    offset = (__atomic_load_n(e, __ATOMIC_ACQUIRE) >> 16) & ~kDepthMask;
  }
  if constexpr (kHooked) first_try_hook_();
  if (!InTable(offset)) return kRetry;
  const KvWords* slots = pool().At<const KvWords>(offset);
  const size_t start = StartSlot(hash);
  // The window's lines, once (the acquire loads below would reload the segment's size).
  const KvWords* const lines[] = {&slots[start], &slots[SlotAt(start, kCcehBucketSlots)],
                                  &slots[SlotAt(start, 2 * kCcehBucketSlots)],
                                  &slots[SlotAt(start, 3 * kCcehBucketSlots)]};
  for (const KvWords* line : lines) __builtin_prefetch(line);
  const CcehSeg* s = SegAt(offset);
  const uint64_t version = s->mu.ReadBegin();
  if (version % 2 != 0 || !s->Serves(hash) || s->offset.load(std::memory_order_acquire) != offset) {
    return kRetry;
  }
  // The common cases in two branches, the rest out of line (so this path keeps few
  // registers): the key in the window's first line (a word0 equal to the key word is the
  // key: no record, free or empty word has its top bits, and a segment that serves the hash
  // holds one copy of it, so candidates before it change nothing), or no candidate in the
  // whole window (every negative search: the first line, then the other three at once).
  const uint32_t first = Window::Candidates(lines[0], k, hash, false);
  InlineProbe p;
  if ((first & kWindowKeyBits) != 0) {
    p.hit = lines[0] + std::countr_zero(first & kWindowKeyBits) / kWindowBitsPerSlot;
  } else if (first != 0 || Window::AnyCandidate(lines[1], lines[2], lines[3], k, hash)) {
    p = ProbeOutOfLine<Window>(slots, start, k, hash);
  }
  if (p.record) return kRetry;  // read under the lock
  const uint64_t v = p.hit != nullptr ? __atomic_load_n(&p.hit->word1, __ATOMIC_ACQUIRE) : 0;
  // The window's plain loads before the version's: x86 does not reorder loads with loads
  // (TSO), so a compiler barrier suffices (as dash's Validate).
  std::atomic_signal_fence(std::memory_order_acq_rel);
  if (!s->mu.ReadValidate(version)) return kRetry;
  return {v, p.hit != nullptr ? Optimistic::kFound : Optimistic::kAbsent};
}

QuickAnswer CcehCore::FirstTrySse2(uint64_t k, uint64_t hash) const {
  return FirstTryWith<WindowSse2, false>(k, hash);
}

__attribute__((target("avx2"))) QuickAnswer CcehCore::FirstTryAvx2(uint64_t k,
                                                                   uint64_t hash) const {
  return FirstTryWith<WindowAvx2, false>(k, hash);
}

// With the tests' hook, the SSE2 window (the race it opens is the same whichever way the
// lines are matched).
__attribute__((noinline)) QuickAnswer CcehCore::FirstTryHooked(uint64_t k, uint64_t hash) const {
  return FirstTryWith<WindowSse2, true>(k, hash);
}

Status CcehCore::ReadValue(const CcehSeg* s, std::string_view key, uint64_t hash,
                           std::string* value) const {
  const Probe p = Find(s, key, hash);
  if (p.found < 0) return Status::NotFound();
  const std::string_view v = SlotValue(SlotsOf(s)[p.found]);
  value->assign(v.data(), v.size());
  return Status::OK();
}

// ---- In-place writes ---------------------------------------------------------------------------

Status CcehCore::Encode(std::string_view key, std::string_view value, uint64_t hash,
                        KvWords* words, bool* record) {
  if (key.size() == 8 && value.size() == 8) {
    uint64_t k = 0, v = 0;
    std::memcpy(&k, key.data(), 8);
    std::memcpy(&v, value.data(), 8);
    if (!CcehEscapesInline(k)) {
      *words = {k, v};
      *record = false;
      return Status::OK();
    }
  }
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &offset));  // flushed, no fence
  *words = {kCcehRecordTag | offset, hash};
  *record = true;
  return Status::OK();
}

void CcehCore::StoreNew(CcehSeg* s, size_t slot, const KvWords& words, bool record) {
  pm::Persister& ps = persister();
  KvWords* w = &SlotsOf(s)[slot];
  if (record) ps.Fence();  // the record (flushed by Encode) is durable before it is linked
  {
    const MediaTally tally(*this, kMediaSlots);
    // A slot a split left behind is freed first: its word0 with the new word1 could
    // read as a live entry (a stale record's hash word replaced by a value that happens
    // to carry the segment's pattern). One line: no extra flush. Never emptied: a probe
    // would stop there (invariant 2).
    if (CcehForm(w->word0) != SlotForm::kEmpty) ps.Store(&w->word0, kCcehFree);
    // word1, then word0, the commit: one line, so word0 never persists without word1.
    ps.Store(&w->word1, words.word1);
    ps.Store(&w->word0, words.word0);
    ps.Persist(w, sizeof(KvWords));
  }
  s->delta.store(s->delta.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

Status CcehCore::UpdateAt(CcehSeg* s, size_t slot, std::string_view key, std::string_view value,
                          uint64_t hash) {
  pm::Persister& ps = persister();
  KvWords* w = &SlotsOf(s)[slot];
  const MediaTally tally(*this, kMediaSlots);
  if (CcehForm(w->word0) == SlotForm::kInline) {
    if (value.size() == 8) {  // one failure-atomic store
      uint64_t v = 0;
      std::memcpy(&v, value.data(), 8);
      ps.Store(&w->word1, v);
      ps.Persist(&w->word1, sizeof(v));
      return Status::OK();
    }
    // Inline -> record: both words change, so under the undo log.
    uint64_t offset = 0;
    PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &offset));
    std::unique_ptr<pm::UndoLog::Tx> tx = undo_log().Begin();
    if (Status st = tx->Save(w, sizeof(KvWords)); !st.ok()) {  // persisted: the record too
      tx.reset();
      codec().ReleaseRecord(offset);
      return st;
    }
    undo_txs_.fetch_add(1, std::memory_order_relaxed);
    ps.Store(&w->word1, hash);
    ps.Store(&w->word0, kCcehRecordTag | offset);
    ps.Persist(w, sizeof(KvWords));
    tx->Commit();
    return Status::OK();
  }
  // A record slot stays one (common/slot.h): a new record, published, the old one freed.
  const uint64_t old = w->word0 & kCcehOffsetMask;
  uint64_t offset = 0;
  PMHASH_RETURN_IF_ERROR(codec().EncodeRecord(key, value, &offset));
  ps.Publish(&w->word0, kCcehRecordTag | offset);
  codec().ReleaseRecord(old);
  return Status::OK();
}

// Inline: the delete's first try and DeleteInPlace share it.
[[gnu::always_inline]] inline void CcehCore::EraseAt(CcehSeg* s, size_t slot, bool inline_entry) {
  pm::Persister& ps = persister();
  KvWords* w = &SlotsOf(s)[slot];
  const KvWords old = *w;
  // The count first, so that nothing but the lock's release and the return follow the fence.
  s->delta.store(s->delta.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  {
    const MediaTally tally(*this, kMediaSlots);
    ps.Store(&w->word0, kCcehFree);  // the commit (free, not empty: invariant 2)
    ps.Persist(&w->word0, sizeof(uint64_t));
  }
  if (!inline_entry) Discard(old);  // durably unreachable since the store
}

Status CcehCore::WriteInPlace(std::string_view key, std::string_view value, uint64_t hash,
                              WriteMode mode, bool* diverted) {
  KvWords words;
  bool encoded = false, record = false;
  for (;;) {
    CcehSeg* s = LockSegment(hash, LockMode::kExclusive);
    HeldLock guard(s->mu, LockMode::kExclusive);
    if (s->attachment.load(std::memory_order_acquire) != nullptr) {  // bht: buffered
      if (encoded) Discard(words);
      *diverted = true;
      return Status::OK();
    }
    const Probe p = Find(s, key, hash);
    if (p.found >= 0) {
      if (encoded) Discard(words);
      if (mode == WriteMode::kInsert) return Status::AlreadyExists();
      return UpdateAt(s, static_cast<size_t>(p.found), key, value, hash);
    }
    if (mode == WriteMode::kUpdate) {
      if (encoded) Discard(words);
      return Status::NotFound();
    }
    if (!encoded) {
      PMHASH_RETURN_IF_ERROR(Encode(key, value, hash, &words, &record));
      encoded = true;
    }
    if (p.free >= 0) {
      StoreNew(s, static_cast<size_t>(p.free), words, record);
      return Status::OK();
    }
    // No free slot in the window: split, then try again (the original's retry).
    if (Status st = SplitInPlace(s, hash); !st.ok()) {
      Discard(words);
      return st;
    }
    record = false;  // the split's commit fenced: the record is durable, StoreNew need not
  }
}

Status CcehCore::DeleteInPlace(std::string_view key, uint64_t hash, bool* diverted) {
  CcehSeg* s = LockSegment(hash, LockMode::kExclusive);
  HeldLock guard(s->mu, LockMode::kExclusive);
  if (s->attachment.load(std::memory_order_acquire) != nullptr) {  // bht: buffered
    *diverted = true;
    return Status::OK();
  }
  const Probe p = Find(s, key, hash);
  if (p.found < 0) return Status::NotFound();
  EraseAt(s, static_cast<size_t>(p.found), /*inline_entry=*/false);
  return Status::OK();
}

template <class Window, bool kHooked>
[[gnu::always_inline]] inline Optimistic CcehCore::FirstDeleteWith(uint64_t k, uint64_t hash) {
  if (CcehEscapesInline(k)) return Optimistic::kRetry;
  // LockSegment's first round, inline, with a try-lock: a busy segment goes the general way.
  const uint64_t offset = EntryOffset(hash);
  if constexpr (kHooked) first_try_hook_();
  if (!InTable(offset)) return Optimistic::kRetry;
  PrefetchWindow(offset, hash);
  CcehSeg* s = SegAt(offset);
  if (!s->mu.try_lock()) return Optimistic::kRetry;
  const std::lock_guard<VersionedRwLock> guard(s->mu, std::adopt_lock);
  // A split may have moved the hash between the entry's read and the lock (its copy stays
  // here: lazy deletion); bht's buffered segments take the general path.
  if (!s->Serves(hash) || s->offset.load(std::memory_order_relaxed) != offset ||
      s->attachment.load(std::memory_order_acquire) != nullptr) {
    return Optimistic::kRetry;
  }
  const KvWords* slots = pool().At<const KvWords>(offset);
  const size_t start = StartSlot(hash);
  const InlineProbe p = ProbeInline<Window>(slots, start, k, hash);
  if (p.record) return Optimistic::kRetry;  // maybe the key's record: the general path
  NoteWindowRead(slots, start, p.examined);  // as FindWith notes it
  if (p.hit == nullptr) return Optimistic::kAbsent;
  // The key word matched and cannot be a record's (CcehEscapesInline): nothing to free.
  EraseAt(s, static_cast<size_t>(p.hit - slots), /*inline_entry=*/true);
  return Optimistic::kFound;
}

Optimistic CcehCore::FirstDeleteSse2(uint64_t k, uint64_t hash) {
  return FirstDeleteWith<WindowSse2, false>(k, hash);
}

__attribute__((target("avx2"))) Optimistic CcehCore::FirstDeleteAvx2(uint64_t k, uint64_t hash) {
  return FirstDeleteWith<WindowAvx2, false>(k, hash);
}

__attribute__((noinline)) Optimistic CcehCore::FirstDeleteHooked(uint64_t k, uint64_t hash) {
  return FirstDeleteWith<WindowSse2, true>(k, hash);
}

// ---- Splits, doublings, replacements --------------------------------------------------------

Status CcehCore::SplitInPlace(CcehSeg* s, uint64_t hash) {
  const uint32_t depth = s->depth.load(std::memory_order_relaxed);
  const uint64_t pattern = s->pattern.load(std::memory_order_relaxed);
  if (!resize_enabled()) {
    return Status::TableFull(name() + ": a probe window of " + std::to_string(kCcehProbeSlots) +
                             " slots is full and resizing is off");
  }
  // No split within the depth limit separates keys whose hashes share that many top
  // bits: refuse now rather than double the directory until the pool is full.
  uint64_t differ = 0;
  for (size_t i = 0; i < kCcehProbeSlots; ++i) {
    differ |= SlotHash(SlotsOf(s)[SlotAt(StartSlot(hash), i)]) ^ hash;
  }
  if (depth >= kCcehMaxDepth || differ >> (63 - kCcehMaxDepth) == 0) {
    return Status::TableFull(name() + ": more keys than a probe window holds share a hash "
                             "prefix of " + std::to_string(kCcehMaxDepth + 1) + " bits");
  }
  // The right half: live entries whose next hash bit is 1, at the same slots (so each
  // stays in its window). They stay in s too, to be overwritten later (lazy deletion).
  const KvWords* slots = SlotsOf(s);
  CcehImage right(slots_);
  std::vector<std::pair<size_t, size_t>> starts;  // (moved slot, its window's start)
  starts.reserve(slots_);
  for (size_t k = 0; k < slots_; ++k) {
    const KvWords& w = slots[k];
    if (CcehForm(w.word0) == SlotForm::kEmpty) continue;
    const uint64_t h = SlotHash(w);  // each slot hashed once: a split's main cost
    if (!LiveIn(h, depth, pattern) || ((h >> (63 - depth)) & 1) == 0) continue;
    right[k] = w;
    starts.emplace_back(k, StartSlot(h));
  }
  const int64_t moved = static_cast<int64_t>(starts.size());
  // Invariant 2 in the new segment: the slots between each entry's window start and
  // the entry hold a free word where the copy leaves them empty.
  for (const auto& [k, start] : starts) {
    for (size_t j = start; j != k; j = SlotAt(j, 1)) {
      if (right[j].word0 == kCcehEmpty) right[j].word0 = kCcehFree;
    }
  }
  persister().NoteRead(slots, segment_bytes_);
  uint64_t right_off = 0;
  {
    // Flushed only: the switch's first fence makes it durable before any entry is.
    const MediaTally tally(*this, kMediaSegments);
    PMHASH_RETURN_IF_ERROR(NewSegment(right, &right_off));
  }
  std::lock_guard<std::mutex> g(dir_mu_);
  if (depth == global_depth()) {
    if (Status st = DoubleDirectory(); !st.ok()) {
      allocator().Free(right_off);  // never linked
      return st;
    }
  }
  const uint32_t shift = global_depth() - depth;
  const uint64_t first = pattern << shift;
  const uint64_t n = uint64_t{1} << shift;
  const uint64_t left_off = s->offset.load(std::memory_order_relaxed);
  std::vector<uint64_t> entries(n);
  for (uint64_t j = 0; j < n; ++j) {
    entries[j] = CcehEntry(j < n / 2 ? left_off : right_off, depth + 1, s->marked);
  }
  SwitchRange(first, entries);  // committed
  // The right half comes up only now that its link is durable (no write could reach it
  // before), under its slot's lock: a stale search or writer may hold the slot still.
  CcehSeg* r = SegAt(right_off);
  {
    r->mu.lock();
    HeldLock held(r->mu, LockMode::kExclusive);
    BringUp(right_off, depth + 1, (pattern << 1) | 1, s->marked);
    r->delta.store(moved, std::memory_order_relaxed);
  }
  s->delta.store(s->delta.load(std::memory_order_relaxed) - moved, std::memory_order_relaxed);
  s->pattern.store(pattern << 1, std::memory_order_release);
  s->depth.store(depth + 1, std::memory_order_release);
  splits_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void CcehCore::FreeRetiredDirectories() {
  std::lock_guard<std::mutex> g(dir_mu_);
  for (const uint64_t old : retired_dirs_) allocator().Free(old);
  retired_dirs_.clear();
  if (dir_copies_.size() > 1) dir_copies_.erase(dir_copies_.begin(), dir_copies_.end() - 1);
}

Status CcehCore::DoubleDirectory() {
  const uint64_t w = dir_word_.load(std::memory_order_relaxed);
  const uint64_t old_dir = DirOffset(w);
  const uint32_t depth = DirDepth(w) + 1;
  uint64_t nd = 0;
  PMHASH_RETURN_IF_ERROR(NewDirectory(depth, &nd));
  const uint64_t* old = DirEntries(old_dir);
  uint64_t* e = DirEntries(nd);
  pm::Persister& ps = persister();
  const uint64_t n = uint64_t{1} << (depth - 1);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t payload = 0;
    if (Status st = LoadSealed(&old[i], "directory entry", &payload); !st.ok()) {
      allocator().Free(nd);
      return st;
    }
    ps.Store(&e[2 * i], SealFor(&e[2 * i], payload));
    ps.Store(&e[2 * i + 1], SealFor(&e[2 * i + 1], payload));
  }
  persister().NoteRead(old, n * sizeof(uint64_t));
  std::unique_ptr<CcehDirCopy> copy;
  if (dram_directory_) {  // made before the commit: a copy refused leaves nothing changed
    if (Status st = CopyDirectory(nd, depth, &copy); !st.ok()) {
      allocator().Free(nd);
      return st;
    }
  }
  {
    const MediaTally tally(*this, kMediaDirectory);
    ps.Flush(pool().At<char>(nd), DirBytes(2 * n));
    PublishRootTable(nd);  // the doubling's commit
  }
  if (copy) PublishDirectoryCopy(std::move(copy));
  dir_word_.store(nd | depth, std::memory_order_release);
  // Searches may still read the old one: it stays allocated until Close (the header,
  // Concurrency).
  retired_dirs_.push_back(old_dir);
  doublings_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void CcehCore::SwitchRange(uint64_t first, const std::vector<uint64_t>& entries) {
  pm::Persister& ps = persister();
  uint64_t* e = DirEntries(DirOffset(dir_word_.load(std::memory_order_relaxed)));
  const MediaTally tally(*this, kMediaDirectory);
  for (size_t j = 1; j < entries.size(); ++j) {
    ps.Store(&e[first + j], SealFor(&e[first + j], entries[j]));
  }
  if (entries.size() > 1) ps.Flush(&e[first + 1], (entries.size() - 1) * sizeof(uint64_t));
  // The range's first entry last: the commit (recovery sets the others back to it).
  ps.Publish(&e[first], SealFor(&e[first], entries[0]));
  if (dram_directory_) {  // then the copy, in the same order
    const CcehDirCopy* c = dir_copy_.load(std::memory_order_relaxed);
    for (size_t j = entries.size(); j-- > 0;) {
      const uint64_t offset = entries[j] & ~(kCcehEntryDepthMask | kCcehEntryMark);
      c->entries[first + j].store(static_cast<uint32_t>(offset >> kCcehCopyShift),
                                  std::memory_order_release);
    }
  }
}

Status CcehCore::CopyDirectory(uint64_t dir, uint32_t depth,
                               std::unique_ptr<CcehDirCopy>* out) const {
  const uint64_t n = uint64_t{1} << depth;
  Result<DramArray<std::atomic<uint32_t>>> entries = DramArray<std::atomic<uint32_t>>::Allocate(n);
  if (!entries.ok()) return entries.status();
  auto copy = std::make_unique<CcehDirCopy>();
  copy->depth = depth;
  copy->entries = std::move(*entries);
  const uint64_t* e = DirEntries(dir);
  for (uint64_t i = 0; i < n; ++i) {
    copy->entries[i].store(static_cast<uint32_t>(EntrySegment(e[i]) >> kCcehCopyShift),
                           std::memory_order_relaxed);
  }
  *out = std::move(copy);
  return Status::OK();
}

void CcehCore::PublishDirectoryCopy(std::unique_ptr<CcehDirCopy> copy) {
  dir_copy_.store(copy.get(), std::memory_order_release);
  dir_copies_.push_back(std::move(copy));
}

bool CcehCore::TEST_DirectoryCopyAgrees() const {
  if (!dram_directory_) return true;
  std::lock_guard<std::mutex> g(dir_mu_);
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  const CcehDirCopy* c = dir_copy_.load(std::memory_order_acquire);
  if (c == nullptr || c->depth != DirDepth(w)) return false;
  const uint64_t* e = DirEntries(DirOffset(w));
  for (uint64_t i = 0; i < (uint64_t{1} << c->depth); ++i) {
    if (uint64_t{c->entries[i].load(std::memory_order_relaxed)} << kCcehCopyShift !=
        EntrySegment(e[i])) {
      return false;
    }
  }
  return true;
}

bool CcehCore::SplitSeparates(uint32_t depth, const std::vector<LiveSlot>& entries,
                              const LiveSlot& e) const {
  // The keys whose windows overlap e's (start slots less than a window apart, around the
  // segment) are those that can fill it.
  uint64_t differ = 0;
  const size_t start = StartSlot(e.hash);
  for (const LiveSlot& x : entries) {
    const size_t d = (StartSlot(x.hash) - start) & (slots_ - 1);
    if (d < kCcehProbeSlots || slots_ - d < kCcehProbeSlots) differ |= x.hash ^ e.hash;
  }
  return depth < kCcehMaxDepth && differ >> (63 - kCcehMaxDepth) != 0;
}

bool CcehCore::Place(CcehImage* image, const KvWords& w, uint64_t hash) const {
  const size_t start = StartSlot(hash);
  for (size_t i = 0; i < kCcehProbeSlots; ++i) {
    KvWords& slot = (*image)[SlotAt(start, i)];
    if (slot.word0 == kCcehEmpty) {
      slot = w;
      return true;
    }
  }
  return false;
}

Status CcehCore::BuildImages(uint32_t depth, uint64_t pattern, bool marked,
                             const std::vector<LiveSlot>& entries,
                             std::vector<Replacement>* out,
                             std::vector<LiveSlot>* unplaced) const {
  CcehImage image(slots_);
  std::vector<LiveSlot> left_out;  // (with `unplaced`) keys no split can place
  bool fits = true;
  for (const LiveSlot& e : entries) {
    if (Place(&image, e.words, e.hash)) continue;
    if (unplaced != nullptr && !SplitSeparates(depth, entries, e)) {
      left_out.push_back(e);  // splitting for it would only double the directory
      continue;
    }
    fits = false;
    break;
  }
  if (fits) {
    if (unplaced != nullptr) unplaced->insert(unplaced->end(), left_out.begin(), left_out.end());
    out->push_back({std::move(image), depth, pattern, marked});
    return Status::OK();
  }
  if (!resize_enabled()) {
    return Status::TableFull(name() + ": a probe window of " + std::to_string(kCcehProbeSlots) +
                             " slots is full and resizing is off");
  }
  uint64_t differ = 0;
  for (const LiveSlot& e : entries) differ |= e.hash ^ entries.front().hash;
  if (depth >= kCcehMaxDepth || differ >> (63 - kCcehMaxDepth) == 0) {
    if (unplaced == nullptr) {
      return Status::TableFull(name() + ": more keys than a probe window holds share a hash "
                               "prefix of " + std::to_string(kCcehMaxDepth + 1) + " bits");
    }
    // No split separates them: the image holds what fits, in order.
    CcehImage partial(slots_);
    for (const LiveSlot& e : entries) {
      if (!Place(&partial, e.words, e.hash)) unplaced->push_back(e);
    }
    out->push_back({std::move(partial), depth, pattern, marked});
    return Status::OK();
  }
  std::vector<LiveSlot> halves[2];
  for (const LiveSlot& e : entries) halves[(e.hash >> (63 - depth)) & 1].push_back(e);
  PMHASH_RETURN_IF_ERROR(BuildImages(depth + 1, pattern << 1, marked, halves[0], out, unplaced));
  return BuildImages(depth + 1, (pattern << 1) | 1, marked, halves[1], out, unplaced);
}

Status CcehCore::ReplaceSegment(CcehSeg* s, std::vector<Replacement>* images,
                                const std::function<void(size_t, CcehSeg*)>& attach,
                                std::vector<CcehSeg*>* up) {
  std::vector<uint64_t> offs;
  {
    const MediaTally tally(*this, kMediaSegments);
    for (const Replacement& r : *images) {
      uint64_t off = 0;
      if (Status st = NewSegment(r.image, &off); !st.ok()) {
        for (uint64_t o : offs) allocator().Free(o);
        return st;
      }
      offs.push_back(off);
    }
    // Flushed only: the switch's first fence makes them durable before any entry is.
  }
  const uint32_t depth = s->depth.load(std::memory_order_relaxed);
  const uint64_t pattern = s->pattern.load(std::memory_order_relaxed);
  const uint64_t old_off = s->offset.load(std::memory_order_relaxed);
  uint32_t deepest = depth;
  for (const Replacement& r : *images) deepest = std::max(deepest, r.depth);
  s->mu.lock();  // searches of s retry from here to the switch's end
  HeldLock held(s->mu, LockMode::kExclusive);
  std::lock_guard<std::mutex> g(dir_mu_);
  while (global_depth() < deepest) {
    if (Status st = DoubleDirectory(); !st.ok()) {
      for (uint64_t o : offs) allocator().Free(o);  // never linked
      return st;
    }
  }
  const uint32_t g_depth = global_depth();
  const uint32_t shift = g_depth - depth;
  const uint64_t first = pattern << shift;
  const uint64_t n = uint64_t{1} << shift;
  // The image serving each entry of the range (they partition it).
  std::vector<uint64_t> entries(n);
  for (uint64_t j = 0; j < n; ++j) {
    size_t k = 0;
    while (((first + j) >> (g_depth - (*images)[k].depth)) != (*images)[k].pattern) ++k;
    entries[j] = CcehEntry(offs[k], (*images)[k].depth, (*images)[k].marked);
  }
  SwitchRange(first, entries);  // committed
  // The new segments come up only now that their links are durable, each under its
  // slot's lock (a stale search or writer may hold the slot still).
  for (size_t k = 0; k < images->size(); ++k) {
    CcehSeg* seg = SegAt(offs[k]);
    seg->mu.lock();
    HeldLock held_new(seg->mu, LockMode::kExclusive);
    BringUp(offs[k], (*images)[k].depth, (*images)[k].pattern, (*images)[k].marked);
    if (attach) attach(k, seg);
    up->push_back(seg);
  }
  Retire(s);
  if (images->size() > 1) splits_.fetch_add(images->size() - 1, std::memory_order_relaxed);
  replacements_.fetch_add(1, std::memory_order_relaxed);
  allocator().Free(old_off);  // durably unreachable since the switch
  return Status::OK();
}

void CcehCore::CollectLive(const CcehSeg* s, std::vector<LiveSlot>* out) const {
  const KvWords* slots = SlotsOf(s);
  const uint32_t depth = s->depth.load(std::memory_order_relaxed);
  const uint64_t pattern = s->pattern.load(std::memory_order_relaxed);
  for (size_t k = 0; k < slots_; ++k) {
    const KvWords& w = slots[k];
    if (CcehForm(w.word0) == SlotForm::kEmpty) continue;
    const uint64_t h = SlotHash(w);
    if (LiveIn(h, depth, pattern)) out->push_back({h, w});
  }
  persister().NoteRead(slots, segment_bytes_);
}

// ---- Iteration ----------------------------------------------------------------------------------

void CcehCore::AddEntries(const std::vector<LiveSlot>& live, uint64_t from,
                          std::vector<ScanEntry>* batch) const {
  for (const LiveSlot& l : live) {
    if (l.hash < from) continue;
    const SlotForm f = CcehForm(l.words.word0);
    const KvWords cw = CcehCodecWords(l.words);
    AddScanEntry(batch, l.hash, codec().Key(f, cw), codec().Value(f, cw));
  }
}

void CcehCore::CollectStep(uint64_t* cursor, bool* done, std::vector<ScanEntry>* batch) const {
  CcehSeg* s = LockSegment(*cursor, LockMode::kShared);
  HeldLock guard(s->mu, LockMode::kShared);
  std::vector<LiveSlot> live;
  CollectLive(s, &live);
  AddEntries(live, *cursor, batch);
  *cursor = RangeEnd(s->depth.load(std::memory_order_relaxed),
                     s->pattern.load(std::memory_order_relaxed));
  *done = *cursor == 0;
}

Status CcehCore::Iterate(const Index::Visitor& fn, const Step& step) {
  uint64_t cursor = 0;
  bool done = false;
  std::vector<ScanEntry> batch;
  while (!done) {
    batch.clear();
    step(&cursor, &done, &batch);
    for (const ScanEntry& e : batch) {
      if (!fn(e.key, e.value)) return Status::OK();
    }
  }
  return Status::OK();
}

Status CcehCore::ScanSteps(ScanPage* page, const Step& step) const {
  // Homes: the hash space in 2^(G + s) equal ranges, 2^s per directory entry, with 2^s
  // about a segment's slots (at most 2^40 homes: scan.h's cursor resolution), so that a
  // page ends within a segment near max_keys keys rather than after a whole segment.
  const uint32_t depth = global_depth();
  const uint32_t bits =
      depth + std::min<uint32_t>(std::bit_width(slots_) - 1, 40 - std::min<uint32_t>(depth, 40));
  const uint64_t homes = uint64_t{1} << bits;
  // A run of about one segment's range (2^(bits - L) homes), so that a collect reads
  // about one segment.
  const uint64_t area = std::bit_floor(std::max<uint64_t>(1, homes / segments()));
  const auto start_of = [bits](uint64_t home) { return bits == 0 ? 0 : home << (64 - bits); };
  page->CollectHomes(homes, area, [&](uint64_t first, uint64_t last, std::vector<ScanEntry>* out) {
    uint64_t cursor = start_of(first);
    const uint64_t end = last == homes ? 0 : start_of(last);  // 0: the end of the hash space
    bool done = false;
    while (!done && (end == 0 || cursor < end)) step(&cursor, &done, out);
  });
  return Status::OK();
}

// ---- Checks, layout, stats --------------------------------------------------------------------

std::string CcehCore::Where(const void* p) const {
  return "the slot at pool offset " + std::to_string(pool().ToOffset(p));
}

Status CcehCore::CheckCore(const RootLayout& layout, std::unordered_set<std::string>* keys,
                           uint64_t* live) const {
  uint64_t dir = 0, stored = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(layout, kDirHeaderBytes, &dir, &stored));
  uint32_t depth = 0;
  PMHASH_RETURN_IF_ERROR(ValidateDirectory(dir, &depth));
  std::lock_guard<std::mutex> g(dir_mu_);
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  if (dir != DirOffset(w) || depth != DirDepth(w)) {
    return Status::Corruption(name() + ": the root names the directory at pool offset " +
                              std::to_string(dir) + " of depth " + std::to_string(depth) +
                              ", not the live one at " + std::to_string(DirOffset(w)) +
                              " of depth " + std::to_string(DirDepth(w)));
  }
  uint64_t n_ranges = 0;
  *live = 0;
  PMHASH_RETURN_IF_ERROR(WalkDirectory(
      dir, depth,
      [&](uint64_t i, uint64_t, uint64_t seg, uint32_t local, bool marked) -> Status {
        ++n_ranges;
        const uint64_t pattern = i >> (depth - local);
        const CcehSeg* s = InTable(seg) ? SegAt(seg) : nullptr;
        if (s == nullptr || s->offset.load() != seg || s->depth.load() != local ||
            s->pattern.load() != pattern || s->marked != marked) {
          return Status::Corruption(name() + ": directory entry " + std::to_string(i) +
                                    " disagrees with the segment's DRAM state");
        }
        const KvWords* w = pool().At<const KvWords>(seg);
        for (uint64_t k = 0; k < slots_; ++k) {
          const SlotForm f = CcehForm(w[k].word0);
          if (f == SlotForm::kEmpty) continue;
          const uint64_t h = SlotHash(w[k]);
          if (!LiveIn(h, local, pattern)) continue;  // left behind by a split
          const KvWords cw = CcehCodecWords(w[k]);
          if (!codec().Plausible(f, cw)) {
            return Status::Corruption(name() + ": " + Where(&w[k]) + " is malformed");
          }
          const std::string key(codec().Key(f, cw));
          if (f == SlotForm::kRecord && KeyHash(key) != h) {
            return Status::Corruption(name() + ": " + Where(&w[k]) + " has a wrong hash word");
          }
          if (((k - StartSlot(h)) & (slots_ - 1)) >= kCcehProbeSlots) {
            return Status::Corruption(name() + ": " + Where(&w[k]) +
                                      " lies outside the probe window of its key");
          }
          for (size_t j = StartSlot(h); j != k; j = SlotAt(j, 1)) {
            if (w[j].word0 == kCcehEmpty) {
              return Status::Corruption(name() + ": " + Where(&w[k]) + " lies past an empty "
                                        "slot of its window (" + Where(&w[j]) + ")");
            }
          }
          if (!keys->insert(key).second) {
            return Status::Corruption(name() + ": a key is stored twice (again in " +
                                      Where(&w[k]) + ")");
          }
          ++*live;
        }
        return Status::OK();
      },
      [&](uint64_t j) -> Status {
        return Status::Corruption(name() + ": directory entry " + std::to_string(j) +
                                  " differs from its range's first");
      }));
  if (n_ranges != live_.size()) {
    return Status::Corruption(name() + ": the directory has " + std::to_string(n_ranges) +
                              " segments, the DRAM side table " + std::to_string(live_.size()));
  }
  return Status::OK();
}

void CcehCore::DescribeCore(const pm::RegionVisitor& mark) const {
  std::lock_guard<std::mutex> g(dir_mu_);
  const uint64_t w = dir_word_.load(std::memory_order_acquire);
  mark(DirOffset(w), kDirHeaderBytes, pm::Region::kEngineMetadata, true);
  // Sealed words: a damaged byte fails its entry's check at open.
  mark(DirOffset(w) + kDirHeaderBytes, (uint64_t{1} << DirDepth(w)) * sizeof(uint64_t),
       pm::Region::kEngineMetadata, true);
  for (const CcehSeg* s : live_) {
    const uint64_t off = s->offset.load(std::memory_order_acquire);
    mark(off, segment_bytes_, pm::Region::kSlots, false);
    const KvWords* w = pool().At<const KvWords>(off);
    const uint32_t depth = s->depth.load();
    const uint64_t pattern = s->pattern.load();
    for (uint64_t k = 0; k < slots_; ++k) {
      if (CcehForm(w[k].word0) != SlotForm::kRecord || !LiveIn(w[k].word1, depth, pattern)) {
        continue;
      }
      codec().DescribeRecord(SlotForm::kRecord, CcehCodecWords(w[k]), mark);
    }
  }
}

void CcehCore::FillCoreStats(IndexStats* stats) const {
  const uint64_t n = segments();
  const uint32_t depth = global_depth();
  stats->key_slots = n * slots_;
  // The side table (one slot per segment-sized piece of the pool) and the live list.
  stats->dram_bytes = sizeof(*this) + table_.size() * sizeof(CcehSeg) + n * sizeof(CcehSeg*);
  {
    std::lock_guard<std::mutex> g(dir_mu_);  // a doubling adds a copy
    for (const auto& c : dir_copies_) stats->dram_bytes += c->entries.size() * sizeof(uint32_t);
  }
  auto& c = stats->engine_counters;
  c["segments"] = n;
  c["global_depth"] = depth;
  c["splits"] = splits();
  c["doublings"] = doublings();
  c["replacements"] = replacements_.load(std::memory_order_relaxed);
  c["undo_txs"] = undo_txs_.load(std::memory_order_relaxed);
  c["recovery_repaired_entries"] = repaired_entries_;
  c["media_writes_slots"] = media_writes(kMediaSlots);
  c["media_writes_segments"] = media_writes(kMediaSegments);
  c["media_writes_directory"] = media_writes(kMediaDirectory);
}

}  // namespace pmhash::engines
