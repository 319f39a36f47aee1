#include "pm/crashsim.h"

#include <sys/mman.h>

#include <algorithm>
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

CrashSim::CrashSim(const void* base, size_t size, PersistMode mode)
    : base_(static_cast<const char*>(base)),
      size_(size),
      mode_(mode == PersistMode::kNone ? PersistMode::kEadr : mode),
      persisted_(static_cast<const char*>(base), static_cast<const char*>(base) + size),
      lines_((size + kCacheLine - 1) / kCacheLine) {}

CrashSim::~CrashSim() {
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

size_t CrashSim::PendingLines() const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (!Adr()) {
    std::vector<uint64_t> seen;
    for (const Unit& u : sequence_) seen.push_back(u.offset / kCacheLine);
    std::sort(seen.begin(), seen.end());
    return std::unique(seen.begin(), seen.end()) - seen.begin();
  }
  size_t n = 0;
  for (uint32_t i : dirty_) n += lines_[i].pending.empty() ? 0 : 1;
  return n;
}

void CrashSim::LogUnit(uint64_t offset, const char* src, size_t len) {
  Unit u;
  u.offset = offset;
  u.len = static_cast<uint8_t>(len);
  std::memcpy(u.bytes, src, len);
  ++counters_.units;
  ++pending_units_;
  if (!Adr()) {
    sequence_.push_back(u);
    return;
  }
  const uint32_t li = static_cast<uint32_t>(offset / kCacheLine);
  Line& line = lines_[li];
  line.pending.push_back(u);
  if (!line.dirty) {
    line.dirty = true;
    dirty_.push_back(li);
  }
}

void CrashSim::OnStore(const void* addr, size_t len) {
  if (len == 0) return;
  const char* p = static_cast<const char*>(addr);
  std::lock_guard<std::recursive_mutex> l(mu_);
  if (p < base_ || p >= base_ + size_ || len > static_cast<size_t>(base_ + size_ - p)) {
    ++counters_.outside_stores;
    return;
  }
  ++counters_.stores;
  stored_since_fence_ = true;
  uint64_t off = p - base_;
  const uint64_t end = off + len;
  while (off < end) {
    const uint64_t word_end = (off & ~uint64_t{7}) + 8;
    const uint64_t n = std::min(word_end, end) - off;
    LogUnit(off, base_ + off, n);  // the bytes as stored (read back from the pool)
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
  for (uint64_t li = first; li <= last; ++li) {
    ++counters_.flushes;
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
  for (size_t i = 0; i < n; ++i) ApplyUnit(line.pending[i], persisted_.data());
  line.pending.erase(line.pending.begin(), line.pending.begin() + n);
  line.durable_seq += n;
  pending_units_ -= n;
}

void CrashSim::FoldAllEadr() {
  for (const Unit& u : sequence_) ApplyUnit(u, persisted_.data());
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
    if (kind == ImageKind::kRandom) n = std::uniform_int_distribution<size_t>(0, n)(rng);
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
                          std::unique_ptr<Pool>* pool) const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  pool->reset();
  if (buffer_ == nullptr) {
    // One page-aligned buffer reused for every image: a fresh mapping per image would
    // cost more in page faults and zeroing than the copy itself.
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::ResourceExhausted("cannot map a crash-image buffer");
    madvise(p, size_, MADV_HUGEPAGE);
    buffer_ = static_cast<char*>(p);
  }
  std::memcpy(buffer_, persisted_.data(), size_);
  ApplyPending(kind, rng, buffer_);
  return Pool::Adopt(buffer_, size_, engine, pool);
}

Status CrashSim::FindBypass() const {
  std::lock_guard<std::recursive_mutex> l(mu_);
  std::vector<char> expect;
  std::mt19937_64 unused;
  MakeImage(ImageKind::kAll, unused, &expect);
  if (std::memcmp(expect.data(), base_, size_) == 0) return Status::OK();
  size_t i = 0;
  while (expect[i] == base_[i]) ++i;
  return Status::Corruption("a store bypassed the Persister: pool offset " + std::to_string(i) +
                            " holds bytes the store log does not explain");
}

}  // namespace pmhash::pm
