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
  if (config.write_latency_ns > 100000) {
    return Status::InvalidArgument("write_latency_ns must be at most 100000");
  }
  out->reset(new Persister(resolved));
  return Status::OK();
}

Persister::Persister(const PersistConfig& config) : config_(config) {
  if (config_.mode == PersistMode::kAdr) {
    switch (config_.flush) {
      case FlushInstruction::kClwb: flush_line_ = FlushClwb; break;
      case FlushInstruction::kClflushopt: flush_line_ = FlushClflushopt; break;
      default: flush_line_ = FlushClflush; break;
    }
    if (config_.write_latency_ns > 0) {
      latency_cycles_ = static_cast<uint64_t>(config_.write_latency_ns * TscCyclesPerNs());
    }
  }
}

void Persister::Flush(const void* addr, size_t len) {
  if (flush_line_ == nullptr || len == 0) return;
  uintptr_t line = reinterpret_cast<uintptr_t>(addr) & ~(kCacheLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  CounterSlot* slot = Slot();
  for (; line < end; line += kCacheLine) {
    flush_line_(reinterpret_cast<const void*>(line));
    // The emulated device latency starts when the line is issued, so the counting below
    // overlaps it (as CPU work overlaps a real device's write) instead of adding to it.
    const uint64_t until = latency_cycles_ != 0 ? __rdtsc() + latency_cycles_ : 0;
    if (slot != nullptr) {
      CounterSlot::Add(slot->flushes, 1);
      if (slot->media.Touch(line)) CounterSlot::Add(slot->media_writes, 1);
    }
    if (until != 0) {
      while (__rdtsc() < until) _mm_pause();
    }
  }
  if (config_.observer != nullptr) config_.observer->OnFlush(addr, len);
}

void Persister::Fence() {
  if (config_.mode == PersistMode::kNone) return;
  if (config_.mode == PersistMode::kAdr && config_.flush == FlushInstruction::kClflush) {
    _mm_mfence();
  } else {
    _mm_sfence();
  }
  if (CounterSlot* s = Slot()) CounterSlot::Add(s->fences, 1);
  if (config_.observer != nullptr) config_.observer->OnFence();
}

}  // namespace pmhash::pm
