#include "pm/crashsim.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

namespace pmhash::pm {

const char* CrashImageKindName(CrashSim::ImageKind kind) {
  switch (kind) {
    case CrashSim::ImageKind::kNone: return "none";
    case CrashSim::ImageKind::kAll: return "all";
    case CrashSim::ImageKind::kRandom: return "random";
  }
  return "?";
}

// Marks the pages of MakePool's buffer that a Persister stores to (from any thread).
class CrashSim::ImageTracker : public PersistObserver {
 public:
  ImageTracker(char* base, size_t size)
      : base_(base), size_(size), pages_((size + kPage - 1) / kPage),
        dirty_(new std::atomic<uint8_t>[pages_]) {
    Clear();
  }
  void Write(void* dst, const void* src, size_t len, bool scalar) override {
    WriteBytes(dst, src, len, scalar);
    OnStore(dst, len);
  }
  void OnStore(const void* addr, size_t len) override { Mark(static_cast<const char*>(addr), len); }
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {}

  void Mark(const char* p, size_t len) {
    if (len == 0 || p < base_ || p >= base_ + size_) return;
    const size_t first = (p - base_) / kPage;
    const size_t last = std::min((p - base_ + len - 1) / kPage, pages_ - 1);
    for (size_t i = first; i <= last; ++i) dirty_[i].store(1, std::memory_order_relaxed);
  }
  bool Dirty(size_t page) const { return dirty_[page].load(std::memory_order_relaxed) != 0; }
  void Clear() {
    for (size_t i = 0; i < pages_; ++i) dirty_[i].store(0, std::memory_order_relaxed);
  }

 private:
  char* const base_;
  const size_t size_;
  const size_t pages_;
  std::unique_ptr<std::atomic<uint8_t>[]> dirty_;
};

CrashSim::CrashSim(const void* base, size_t size, PersistMode mode)
    : base_(static_cast<const char*>(base)),
      size_(size),
      mode_(mode == PersistMode::kNone ? PersistMode::kEadr : mode),
      persisted_(static_cast<const char*>(base), static_cast<const char*>(base) + size),
      lines_((size + kCacheLine - 1) / kCacheLine),
      persisted_changed_((size + kPage - 1) / kPage, 0) {}

CrashSim::~CrashSim() {
  tracker_.reset();
  if (buffer_ != nullptr) munmap(buffer_, size_);
}

void CrashSim::SetHook(Hook hook, double store_rate, uint64_t seed) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  hook_ = std::move(hook);
  store_rate_ = store_rate;
  sample_rng_.seed(seed);
}

CrashSim::Counters CrashSim::counters() const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  return counters_;
}

size_t CrashSim::PendingLines() const { return PendingLineOffsets(SIZE_MAX).size(); }

std::vector<uint64_t> CrashSim::PendingLineOffsets(size_t max) const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  std::vector<uint64_t> out;
  if (!Adr()) {
    for (const Unit& u : sequence_) out.push_back(u.offset / kCacheLine * kCacheLine);
  } else {
    for (uint32_t i : dirty_) {
      if (!lines_[i].pending.empty()) out.push_back(uint64_t{i} * kCacheLine);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > max) out.resize(max);
  return out;
}

void CrashSim::LogUnit(const Unit& u) {
  ++pending_units_;
  if (!Adr()) {
    sequence_.push_back(u);
    return;
  }
  const uint32_t li = static_cast<uint32_t>(u.offset / kCacheLine);
  Line& line = lines_[li];
  line.pending.push_back(u);
  if (!line.dirty) {
    line.dirty = true;
    dirty_.push_back(li);
  }
}

const void* CrashSim::first_outside_store() const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  return first_outside_;
}

void CrashSim::Write(void* dst, const void* src, size_t len, bool scalar) {
  // The store and its log entry under one lock: another thread's store to the same line
  // cannot fall between them, so the log order is the order the stores took effect.
  std::lock_guard<std::recursive_mutex> l(mu_);
  WriteBytes(dst, src, len, scalar);
  OnStore(dst, len);
}

void CrashSim::OnStore(const void* addr, size_t len) {
  if (len == 0) return;
  const char* p = static_cast<const char*>(addr);
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (p < base_ || p >= base_ + size_ || len > static_cast<size_t>(base_ + size_ - p)) {
    ++counters_.outside_stores;
    if (first_outside_ == nullptr) first_outside_ = addr;
    return;
  }
  ++counters_.stores;
  stored_since_fence_ = true;
  std::vector<Unit>* region = nullptr;
  if (!regions_.empty()) {
    auto it = regions_.find(std::this_thread::get_id());
    if (it != regions_.end()) region = &it->second;
  }
  uint64_t off = p - base_;
  const uint64_t end = off + len;
  while (off < end) {
    const uint64_t word_end = (off & ~uint64_t{7}) + 8;
    const uint64_t n = std::min(word_end, end) - off;
    Unit u;
    u.offset = off;
    u.len = static_cast<uint8_t>(n);
    u.glued = false;
    std::memcpy(u.bytes, base_ + off, n);  // the bytes as stored (read back from the pool)
    ++counters_.units;
    if (region != nullptr) {
      region->push_back(u);
    } else {
      LogUnit(u);
    }
    off += n;
  }
  if (hook_ && !in_hook_ && store_rate_ > 0 &&
      std::uniform_real_distribution<double>(0, 1)(sample_rng_) < store_rate_) {
    CallHook(Event::kStore);
  }
}

void CrashSim::OnFlush(const void* addr, size_t len) {
  if (len == 0) return;
  const char* p = static_cast<const char*>(addr);
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (p < base_ || p >= base_ + size_) return;
  const uint64_t first = (p - base_) / kCacheLine;
  const uint64_t last = std::min<uint64_t>((p - base_ + len - 1) / kCacheLine, lines_.size() - 1);
  std::vector<FlushMark>& marks = flush_marks_[std::this_thread::get_id()];
  const bool in_region = regions_.count(std::this_thread::get_id()) != 0;
  for (uint64_t li = first; li <= last; ++li) {
    ++counters_.flushes;
    if (in_region) ++counters_.flushes_in_atomic;
    Line& line = lines_[li];
    const uint64_t seq_end = line.durable_seq + line.pending.size();
    if (seq_end <= line.flushed_seq) {
      // Nothing stored to this line since it was last flushed (or ever).
      ++counters_.redundant_flushes;
      if (report_to_ != nullptr) report_to_->NoteRedundantFlush();
      if (line.pending.empty()) continue;
    }
    line.flushed_seq = std::max(line.flushed_seq, seq_end);
    marks.push_back({static_cast<uint32_t>(li), seq_end});
  }
}

void CrashSim::FoldLine(uint32_t li, uint64_t seq_end) {
  Line& line = lines_[li];
  if (seq_end <= line.durable_seq) return;
  const size_t n = std::min<uint64_t>(seq_end - line.durable_seq, line.pending.size());
  if (n > 0) MarkPersistedChanged(uint64_t{li} * kCacheLine);
  for (size_t i = 0; i < n; ++i) ApplyUnit(line.pending[i], persisted_.data());
  line.pending.erase(line.pending.begin(), line.pending.begin() + n);
  line.durable_seq += n;
  pending_units_ -= n;
}

void CrashSim::FoldAllEadr() {
  for (const Unit& u : sequence_) {
    ApplyUnit(u, persisted_.data());
    MarkPersistedChanged(u.offset);
  }
  pending_units_ -= sequence_.size();
  sequence_.clear();
}

void CrashSim::CompactDirty() {
  size_t j = 0;
  for (uint32_t li : dirty_) {
    if (lines_[li].pending.empty()) {
      lines_[li].dirty = false;
    } else {
      dirty_[j++] = li;
    }
  }
  dirty_.resize(j);
}

void CrashSim::OnFence() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  ++counters_.fences;
  // The crash point is before the fence takes effect: flushed stores may or may not
  // have reached the media yet.
  if (hook_ && !in_hook_) CallHook(Event::kFence);
  if (!Adr()) {
    if (!stored_since_fence_) {
      ++counters_.redundant_fences;
      if (report_to_ != nullptr) report_to_->NoteRedundantFence();
    }
    FoldAllEadr();
    stored_since_fence_ = false;
    return;
  }
  auto it = flush_marks_.find(std::this_thread::get_id());
  if (it == flush_marks_.end() || it->second.empty()) {
    ++counters_.redundant_fences;
    if (report_to_ != nullptr) report_to_->NoteRedundantFence();
    return;
  }
  for (const FlushMark& m : it->second) FoldLine(m.line, m.seq_end);
  it->second.clear();
  if (dirty_.size() > 64 && dirty_.size() > 2 * (pending_units_ + 1)) CompactDirty();
}

void CrashSim::CrashAtOpEnds(bool on) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  crash_at_op_ends_ = on;
}

void CrashSim::OnAtomicBegin() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  regions_[std::this_thread::get_id()].clear();
}

void CrashSim::OnAtomicEnd() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  auto it = regions_.find(std::this_thread::get_id());
  if (it == regions_.end()) return;
  ++counters_.atomic_commits;
  bool first = true;
  for (Unit& u : it->second) {
    u.glued = !Adr() && !first;  // eadr: one block, no prefix ends inside it
    first = false;
    LogUnit(u);
  }
  if (!it->second.empty()) stored_since_fence_ = true;
  regions_.erase(it);
}

void CrashSim::OnAtomicAbort() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  // The Persister has put the old bytes back: the pool is persisted image + log again.
  if (regions_.erase(std::this_thread::get_id()) != 0) ++counters_.atomic_aborts;
}

void CrashSim::OnOpBegin() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  ++ops_in_flight_;
}

void CrashSim::OnOpEnd() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (ops_in_flight_ > 0) --ops_in_flight_;
  if (hook_ && crash_at_op_ends_ && !in_hook_) CallHook(Event::kOpEnd);
  // eadr engines may never fence: fold here instead, where nothing is half done. Every
  // earlier crash point already offered the prefixes this removes.
  if (!Adr() && ops_in_flight_ == 0 && regions_.empty() && !sequence_.empty() && !in_hook_) {
    FoldAllEadr();
    ++counters_.op_folds;
  }
}

void CrashSim::CallHook(Event event) {
  ++counters_.hook_calls;
  in_hook_ = true;
  hook_(*this, event);
  in_hook_ = false;
}

void CrashSim::CrashNow() {
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (hook_ && !in_hook_) CallHook(Event::kManual);
}

void CrashSim::ApplyPending(ImageKind kind, std::mt19937_64& rng, char* image) const {
  if (kind == ImageKind::kNone) return;
  if (!Adr()) {
    size_t n = sequence_.size();
    if (kind == ImageKind::kRandom) {
      n = std::uniform_int_distribution<size_t>(0, n)(rng);
      while (n < sequence_.size() && sequence_[n].glued) --n;  // not inside a region
    }
    for (size_t i = 0; i < n; ++i) ApplyUnit(sequence_[i], image);
    return;
  }
  for (uint32_t li : dirty_) {
    const std::vector<Unit>& pending = lines_[li].pending;
    size_t n = pending.size();
    if (n == 0) continue;
    if (kind == ImageKind::kRandom) {
      // A third none, a third all, a third a uniform prefix: whole-line outcomes are where
      // ordering bugs show, torn prefixes where tearing bugs do.
      switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
        case 0: n = 0; break;
        case 1: break;
        default: n = std::uniform_int_distribution<size_t>(0, n)(rng); break;
      }
    }
    for (size_t i = 0; i < n; ++i) ApplyUnit(pending[i], image);
  }
}

void CrashSim::MakeImage(ImageKind kind, std::mt19937_64& rng, std::vector<char>* out) const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  out->assign(persisted_.begin(), persisted_.end());
  ApplyPending(kind, rng, out->data());
}

Status CrashSim::MakePool(ImageKind kind, std::mt19937_64& rng, std::string_view engine,
                          std::unique_ptr<Pool>* pool, PersistObserver** tracker) const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  pool->reset();
  if (buffer_ == nullptr) {
    // One page-aligned buffer reused for every image: a fresh mapping per image would
    // cost more in page faults and zeroing than the copy itself.
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::ResourceExhausted("cannot map a crash-image buffer");
    madvise(p, size_, MADV_HUGEPAGE);
    buffer_ = static_cast<char*>(p);
    tracker_ = std::make_unique<ImageTracker>(buffer_, size_);
    restore_all_ = true;
  }
  // Back to the persisted image: all of it, or only the pages that may differ (written
  // through the tracker, pending units of the last image, or folded into since).
  int64_t bypass = -1;
  if (restore_all_) {
    std::memcpy(buffer_, persisted_.data(), size_);
  } else {
    const bool verify = ++restores_ % 16 == 0;
    for (size_t page = 0, i = 0; page < size_; page += kPage, ++i) {
      const size_t n = std::min(kPage, size_ - page);
      if (tracker_->Dirty(i) || persisted_changed_[i]) {
        std::memcpy(buffer_ + page, persisted_.data() + page, n);
      } else if (verify && std::memcmp(buffer_ + page, persisted_.data() + page, n) != 0) {
        if (bypass < 0) {
          size_t j = 0;
          while (buffer_[page + j] == persisted_[page + j]) ++j;
          bypass = static_cast<int64_t>(page + j);
        }
        std::memcpy(buffer_ + page, persisted_.data() + page, n);
      }
    }
  }
  tracker_->Clear();
  std::fill(persisted_changed_.begin(), persisted_changed_.end(), 0);
  ApplyPending(kind, rng, buffer_);
  // Whatever ApplyPending wrote differs from the persisted image next time.
  if (Adr()) {
    for (uint32_t li : dirty_) {
      if (!lines_[li].pending.empty()) tracker_->Mark(buffer_ + uint64_t{li} * kCacheLine, kCacheLine);
    }
  } else {
    for (const Unit& u : sequence_) tracker_->Mark(buffer_ + u.offset, u.len);
  }
  restore_all_ = tracker == nullptr;
  if (tracker != nullptr) *tracker = tracker_.get();
  if (bypass >= 0) {
    return Status::Corruption("a store into the previous crash image (its recovery or the "
                              "checks after it) bypassed the Persister: pool offset " +
                              std::to_string(bypass));
  }
  return Pool::Adopt(buffer_, size_, engine, pool);
}

Status CrashSim::FindBypass() const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  // The working pool must equal the persisted image + every logged unit. Compare in
  // pages against the persisted image alone; only a line that differs needs its pending
  // units applied (most of the pool has none), so no image is built.
  char expect[kCacheLine];
  for (size_t page = 0; page < size_; page += kPage) {
    const size_t page_len = std::min(kPage, size_ - page);
    if (std::memcmp(persisted_.data() + page, base_ + page, page_len) == 0) continue;
    for (size_t lo = page; lo < page + page_len; lo += kCacheLine) {
      const size_t n = std::min(kCacheLine, size_ - lo);
      if (std::memcmp(persisted_.data() + lo, base_ + lo, n) == 0) continue;
      std::memcpy(expect, persisted_.data() + lo, n);
      const uint64_t li = lo / kCacheLine;
      auto apply = [&](const Unit& u) { std::memcpy(expect + (u.offset - lo), u.bytes, u.len); };
      if (Adr()) {
        for (const Unit& u : lines_[li].pending) apply(u);
      } else {
        for (const Unit& u : sequence_) {
          if (u.offset / kCacheLine == li) apply(u);
        }
      }
      for (const auto& [thread, region] : regions_) {  // open regions' stores, held aside
        for (const Unit& u : region) {
          if (u.offset / kCacheLine == li) apply(u);
        }
      }
      for (size_t i = 0; i < n; ++i) {
        if (expect[i] != base_[lo + i]) {
          return Status::Corruption("a store bypassed the Persister: pool offset " +
                                    std::to_string(lo + i) +
                                    " holds bytes the store log does not explain");
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace pmhash::pm
