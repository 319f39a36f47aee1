#include "pm/persist.h"

#include <immintrin.h>
#include <x86intrin.h>

#include <chrono>
#include <thread>

namespace pmhash::pm {

namespace {

__attribute__((target("clwb"))) void FlushClwb(const void* p) {
  _mm_clwb(const_cast<void*>(p));
}
__attribute__((target("clflushopt"))) void FlushClflushopt(const void* p) {
  _mm_clflushopt(const_cast<void*>(p));
}
void FlushClflush(const void* p) { _mm_clflush(p); }

double MeasureTscCyclesPerNs() {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  uint64_t c0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t c1 = __rdtsc();
  auto t1 = Clock::now();
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  return static_cast<double>(c1 - c0) / ns;
}

}  // namespace

double TscCyclesPerNs() {
  static const double cycles_per_ns = MeasureTscCyclesPerNs();
  return cycles_per_ns;
}

Status Persister::Make(const PersistConfig& config, std::unique_ptr<Persister>* out) {
  return Make(config, CpuFeatures::Get(), out);
}

Status Persister::Make(const PersistConfig& config, const CpuFeatures& cpu,
                       std::unique_ptr<Persister>* out) {
  PersistConfig resolved = config;
  if (config.flush == FlushInstruction::kAuto) {
    resolved.flush = cpu.clwb         ? FlushInstruction::kClwb
                     : cpu.clflushopt ? FlushInstruction::kClflushopt
                                      : FlushInstruction::kClflush;
  } else if ((config.flush == FlushInstruction::kClwb && !cpu.clwb) ||
             (config.flush == FlushInstruction::kClflushopt && !cpu.clflushopt) ||
             (config.flush == FlushInstruction::kClflush && !cpu.clflush)) {
    return Status::InvalidArgument(std::string("this CPU does not support ") +
                                   FlushInstructionName(config.flush));
  }
  PMHASH_RETURN_IF_ERROR(config.Validate());
  out->reset(new Persister(resolved));
  return Status::OK();
}

Status PersistConfig::Validate() const {
  const std::string max = std::to_string(kMaxLatencyNs);
  if (write_latency_ns > kMaxLatencyNs) {
    return Status::InvalidArgument("write_latency_ns must be at most " + max +
                                   " (ns per media write), not " +
                                   std::to_string(write_latency_ns));
  }
  if (read_latency_ns > kMaxLatencyNs) {
    return Status::InvalidArgument("read_latency_ns must be at most " + max +
                                   " (ns per media read), not " +
                                   std::to_string(read_latency_ns));
  }
  if (mode == PersistMode::kNone && (write_latency_ns > 0 || read_latency_ns > 0)) {
    return Status::InvalidArgument(
        std::string(write_latency_ns > 0 ? "write_latency_ns" : "read_latency_ns") +
        ": persist mode none is volatile memory with no media model, so no emulated PM "
        "latency applies to it (use adr or eadr)");
  }
  if (write_latency_ns > 0 && !media_model) {
    return Status::InvalidArgument(
        "write_latency_ns needs the media model: the latency is charged per media write");
  }
  if (!(atomic_abort_rate >= 0 && atomic_abort_rate <= 1)) {
    return Status::InvalidArgument("atomic_abort_rate must be between 0 and 1");
  }
  if (media_model) PMHASH_RETURN_IF_ERROR(media.Validate());
  return Status::OK();
}

Persister::Persister(const PersistConfig& config)
    : config_(config), atomic_rng_(config.atomic_seed) {
  void (*instruction)(const void*) = nullptr;
  switch (config_.flush) {
    case FlushInstruction::kClwb: instruction = FlushClwb; break;
    case FlushInstruction::kClflushopt: instruction = FlushClflushopt; break;
    default: instruction = FlushClflush; break;
  }
  if (config_.mode == PersistMode::kAdr) flush_line_ = instruction;
  if (config_.mode == PersistMode::kEadr && config_.eadr_write_back_instruction) {
    write_back_line_ = instruction;
  }
  if (config_.write_latency_ns > 0) {
    write_latency_cycles_ = static_cast<uint64_t>(config_.write_latency_ns * TscCyclesPerNs());
  }
  if (config_.read_latency_ns > 0) {
    read_latency_cycles_ = static_cast<uint64_t>(config_.read_latency_ns * TscCyclesPerNs());
  }
  tracks_ops_ = config_.count || read_latency_cycles_ != 0 || config_.observer != nullptr;
  // Without counting or latency nothing would read the models: skip them (the counters-off
  // baseline of the micro-benchmark).
  if (config_.mode != PersistMode::kNone && config_.media_model &&
      (config_.count || write_latency_cycles_ != 0)) {
    media_ = std::make_unique<MediaModel>(config_.media);
    if (config_.mode == PersistMode::kEadr) {
      cache_lines_ = true;
      if (config_.media.cache_bytes > 0) {
        cache_ = std::make_unique<CacheModel>(config_.media.cache_bytes);
      }
    }
  }
  if (config_.mode == PersistMode::kAdr && !config_.count && config_.observer == nullptr &&
      media_ == nullptr) {
    switch (config_.flush) {
      case FlushInstruction::kClwb: plain_ = PlainFlush::kClwb; break;
      case FlushInstruction::kClflushopt: plain_ = PlainFlush::kClflushopt; break;
      default: plain_ = PlainFlush::kClflush; break;
    }
  }
}

Persister::~Persister() = default;

void Persister::Charge(CounterSlot* slot, const MediaCost& cost, uint64_t issued_tsc) {
  if (slot != nullptr) {
    CounterSlot::Add(slot->lines_written, 1);
    if (cost.media_writes != 0) CounterSlot::Add(slot->media_writes, cost.media_writes);
    if (cost.rmw_reads != 0) CounterSlot::Add(slot->media_rmw_reads, cost.rmw_reads);
  }
  if (cost.media_writes != 0 && write_latency_cycles_ != 0 && issued_tsc != 0) {
    if (slot != nullptr) CounterSlot::Add(slot->write_waits, 1);
    // The emulated device latency starts when the line was issued, so the bookkeeping
    // overlaps it (as CPU work overlaps a real device's write) instead of adding to it.
    const uint64_t until = issued_tsc + write_latency_cycles_ * cost.media_writes;
    while (__rdtsc() < until) _mm_pause();
  }
}

void Persister::DeviceWrite(CounterSlot* slot, uintptr_t line, bool charge) {
  const MediaCost cost = media_->WriteLine(line);
  Charge(slot, cost, charge && write_latency_cycles_ != 0 ? __rdtsc() : 0);
}

void Persister::FlushObserved(const void* addr, size_t len) {
  if (flush_line_ == nullptr || len == 0) return;
  CounterSlot* slot = Slot();
  ForEachLine(addr, len, [&](uintptr_t line) {
    // The model first: its lock is a locked instruction, which would wait for the
    // write-back to complete if it came after it (x86 orders clwb before locked
    // instructions), turning every flush synchronous.
    const MediaCost cost = media_ != nullptr ? media_->WriteLine(line) : MediaCost{};
    flush_line_(reinterpret_cast<const void*>(line));
    if (slot != nullptr) CounterSlot::Add(slot->flushes, 1);
    if (media_ != nullptr) Charge(slot, cost, write_latency_cycles_ != 0 ? __rdtsc() : 0);
  });
  if (config_.observer != nullptr) config_.observer->OnFlush(addr, len);
}

void Persister::WriteBack(const void* addr, size_t len) {
  if (len == 0 || config_.mode == PersistMode::kNone) return;
  uintptr_t line = reinterpret_cast<uintptr_t>(addr) & ~(kCacheLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  CounterSlot* slot = Slot();
  if (slot != nullptr) CounterSlot::Add(slot->write_backs, (end - line + kCacheLine - 1) / kCacheLine);
  if (config_.mode == PersistMode::kAdr) {
    Flush(addr, len);
    return;
  }
  if (cache_lines_) {  // the thread's stores so far must be in the cache model first
    CounterSlot* local = counters_.Local();
    if (local != nullptr && local->stored.size != 0) ApplyStored(local);
  }
  for (; line < end; line += kCacheLine) {
    if (write_back_line_ != nullptr) write_back_line_(reinterpret_cast<const void*>(line));
    // Without a cache model every stored line went to the device already.
    if (cache_ != nullptr && cache_->WriteBack(line)) DeviceWrite(slot, line, /*charge=*/true);
  }
}

void Persister::StoreLines(const void* dst, size_t len) {
  if (len == 0) return;
  CounterSlot* local = counters_.Local();
  if (local == nullptr || local->in_atomic) return;  // untracked; or fed at the commit
  StoredLines& batch = local->stored;
  uintptr_t line = reinterpret_cast<uintptr_t>(dst) & ~(kCacheLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(dst) + len;
  for (; line < end; line += kCacheLine) {
    if (batch.size != 0 && batch.line[batch.size - 1] == line) continue;  // the same again
    if (batch.size == StoredLines::kSize) ApplyStored(local);
    batch.line[batch.size++] = line;
  }
}

void Persister::ApplyStored(CounterSlot* local) {
  StoredLines& batch = local->stored;
  CounterSlot* slot = config_.count ? local : nullptr;
  if (cache_ != nullptr) {
    for (uint32_t i = 0; i < batch.size; ++i) cache_->Prefetch(batch.line[i]);
  }
  for (uint32_t i = 0; i < batch.size; ++i) {
    // Without a cache model every stored line goes to the device (write-through).
    const uintptr_t to_device = cache_ != nullptr ? cache_->Store(batch.line[i]) : batch.line[i];
    if (to_device != 0) DeviceWrite(slot, to_device, /*charge=*/true);
  }
  batch.size = 0;
}

void Persister::DrainMedia() {
  for (CounterSlot& thread : counters_) {  // every thread's noted reads, here
    if (thread.noted.size != 0) CountNotedReads(&thread);
  }
  if (media_ == nullptr) return;
  for (CounterSlot& thread : counters_) {  // every thread's batch, in the calling thread
    if (thread.stored.size != 0) ApplyStored(&thread);
  }
  CounterSlot* slot = Slot();
  if (cache_ != nullptr) {
    cache_->Drain([&](uintptr_t line) { DeviceWrite(slot, line, /*charge=*/false); });
  }
  const MediaCost cost = media_->Drain();
  if (slot != nullptr) CounterSlot::Add(slot->media_rmw_reads, cost.rmw_reads);
}

void Persister::NoteReadRange(const void* addr, size_t len, OpReads* op) {
  CounterSlot* local = counters_.Local();
  if (local == nullptr) return;
  constexpr uint64_t kLinesPerMedia = kMediaLine / kCacheLine;
  const uint64_t first = reinterpret_cast<uintptr_t>(addr) / kCacheLine;
  const uint64_t last = (reinterpret_cast<uintptr_t>(addr) + len - 1) / kCacheLine;
  OpReads& reads = op != nullptr ? *op : local->op_reads;
  if (read_latency_cycles_ == 0) {  // counting only: the range at once
    uint32_t new_media = 0;
    const unsigned lines = reads.AddRange(first, last, &new_media);
    CounterSlot::Add(local->lines_read, lines);
    CounterSlot::Add(local->media_reads, new_media);
    return;
  }
  uint64_t new_lines = 0;
  for (uint64_t tag = first / kLinesPerMedia; tag <= last / kLinesPerMedia; ++tag) {
    // The 64-byte lines of this media line that [first, last] covers.
    const unsigned lo = tag == first / kLinesPerMedia ? first % kLinesPerMedia : 0;
    const unsigned hi = tag == last / kLinesPerMedia ? last % kLinesPerMedia : kLinesPerMedia - 1;
    bool new_media = false;
    new_lines += reads.Add(tag, ((2u << hi) - 1) & ~((1u << lo) - 1), &new_media);
    if (!new_media) continue;
    if (config_.count) CounterSlot::Add(local->media_reads, 1);
    if (read_latency_cycles_ == 0) continue;
    const uint64_t now = __rdtsc();
    uint64_t until = now + read_latency_cycles_;
    PrefetchLog& log = local->prefetch;
    for (size_t i = 0; i < PrefetchLog::kSize; ++i) {
      if (log.tag[i] == tag + 1) {
        until = log.requested[i] + read_latency_cycles_;
        log.tag[i] = 0;
        break;
      }
    }
    if (config_.count) {
      CounterSlot::Add(local->read_waits, 1);
      if (until <= now) CounterSlot::Add(local->reads_hidden, 1);
    }
    while (__rdtsc() < until) _mm_pause();
  }
  if (config_.count && new_lines != 0) CounterSlot::Add(local->lines_read, new_lines);
}

void Persister::CountNotedReads(CounterSlot* slot) {
  NotedReads& n = slot->noted;
  uint64_t lines = 0, media = 0;
  for (uint32_t i = 0; i < n.size; ++i) {
    if (n.op[i] != n.counted_op) {  // the reads of another operation: a new set
      slot->op_reads.Reset();
      n.counted_op = n.op[i];
    }
    uint32_t new_media = 0;
    lines += slot->op_reads.AddRange(n.first[i], n.last[i], &new_media);
    media += new_media;
  }
  n.size = 0;
  if (config_.count) {
    CounterSlot::Add(slot->lines_read, lines);
    CounterSlot::Add(slot->media_reads, media);
  }
}

void Persister::NotePrefetch(const void* addr) {
  CounterSlot* local = counters_.Local();
  if (local == nullptr) return;
  PrefetchLog& log = local->prefetch;
  const uint64_t tag = reinterpret_cast<uintptr_t>(addr) / kMediaLine + 1;
  for (size_t i = 0; i < PrefetchLog::kSize; ++i) {
    if (log.tag[i] == tag) return;  // already on its way: the first request counts
  }
  const uint32_t i = log.next++ % PrefetchLog::kSize;
  log.tag[i] = tag;
  log.requested[i] = __rdtsc();
}

void Persister::StoreObserved(void* dst, const void* src, size_t len) {
  BeforeStore(dst, len);
  if (config_.observer != nullptr) {
    config_.observer->Write(dst, src, len, /*scalar=*/true);
  } else {
    PersistObserver::WriteBytes(dst, src, len, /*scalar=*/true);
  }
  AfterStore(dst, len);
}

// ---- Atomic regions ---------------------------------------------------------------------

AtomicOutcome Persister::BeginAtomic() {
  CounterSlot* s = counters_.Local();
  if (s == nullptr) return AtomicOutcome::kAborted;  // an uncounted thread cannot be tracked
  if (s->in_atomic) {  // nested: RTM may abort here too; we always do
    RollBack(s);
    return AtomicOutcome::kAborted;
  }
  atomic_mu_.lock();
  const double draw = std::uniform_real_distribution<double>(0, 1)(atomic_rng_);
  if (draw < config_.atomic_abort_rate / 2) {
    atomic_mu_.unlock();
    return AtomicOutcome::kAborted;
  }
  abort_at_end_ = draw < config_.atomic_abort_rate;
  s->in_atomic = true;
  undo_.clear();
  undo_bytes_.clear();
  atomic_open_.store(true, std::memory_order_relaxed);
  if (config_.observer != nullptr) config_.observer->OnAtomicBegin();
  return AtomicOutcome::kStarted;
}

AtomicOutcome Persister::EndAtomic() {
  CounterSlot* s = counters_.Local();
  if (s == nullptr || !s->in_atomic) return AtomicOutcome::kAborted;
  if (abort_at_end_) {
    RollBack(s);
    return AtomicOutcome::kAborted;
  }
  if (config_.observer != nullptr) config_.observer->OnAtomicEnd();
  s->in_atomic = false;
  // The region's lines become dirty in the cache model only now: an aborted region's
  // stores never leave the (real) L1.
  if (cache_lines_) {
    for (const Undo& u : undo_) StoreLines(u.addr, u.len);
  }
  LeaveAtomic(s);
  return AtomicOutcome::kCommitted;
}

void Persister::AbortAtomic() {
  CounterSlot* s = counters_.Local();
  if (s != nullptr && s->in_atomic) RollBack(s);
}

void Persister::SaveUndo(void* dst, size_t len) {
  CounterSlot* s = counters_.Local();
  if (s == nullptr || !s->in_atomic) return;  // another thread's region is open
  undo_.push_back({dst, len, undo_bytes_.size()});
  const char* p = static_cast<const char*>(dst);
  undo_bytes_.insert(undo_bytes_.end(), p, p + len);
}

void Persister::RollBack(CounterSlot* s) {
  for (size_t i = undo_.size(); i-- > 0;) {
    std::memcpy(undo_[i].addr, undo_bytes_.data() + undo_[i].at, undo_[i].len);
  }
  if (config_.observer != nullptr) config_.observer->OnAtomicAbort();
  LeaveAtomic(s);
}

void Persister::LeaveAtomic(CounterSlot* s) {
  s->in_atomic = false;
  undo_.clear();
  undo_bytes_.clear();
  atomic_open_.store(false, std::memory_order_relaxed);
  atomic_mu_.unlock();
}

void Persister::FenceObserved() {
  if (config_.mode == PersistMode::kNone) return;
  if (config_.mode == PersistMode::kAdr && config_.flush == FlushInstruction::kClflush) {
    _mm_mfence();
  } else {
    _mm_sfence();
  }
  if (CounterSlot* s = Slot()) CounterSlot::Add(s->fences, 1);
  if (config_.observer != nullptr) config_.observer->OnFence();
}

void ReadRun::Report() {
  persister_.NoteRead(reinterpret_cast<const void*>(begin_ * kCacheLine),
                      (end_ - begin_ + 1) * kCacheLine);
  end_ = 0;
}

}  // namespace pmhash::pm
