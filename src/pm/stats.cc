#include "pm/stats.h"

#include <mutex>
#include <vector>

namespace pmhash::pm {

CounterTable::CounterTable() : slots_(new CounterSlot[kMaxThreads]) {}

PersistCounters CounterTable::Sum() const {
  PersistCounters sum;
  for (size_t i = 0; i < kMaxThreads; ++i) {
    const CounterSlot& s = slots_[i];
    sum.flushes += s.flushes.load(std::memory_order_relaxed);
    sum.fences += s.fences.load(std::memory_order_relaxed);
    sum.bytes_stored += s.bytes_stored.load(std::memory_order_relaxed);
    sum.media_writes += s.media_writes.load(std::memory_order_relaxed);
    sum.lines_read += s.lines_read.load(std::memory_order_relaxed);
    sum.redundant_flushes += s.redundant_flushes.load(std::memory_order_relaxed);
    sum.redundant_fences += s.redundant_fences.load(std::memory_order_relaxed);
    sum.write_backs += s.write_backs.load(std::memory_order_relaxed);
    sum.lines_written += s.lines_written.load(std::memory_order_relaxed);
    sum.media_reads += s.media_reads.load(std::memory_order_relaxed);
    sum.media_rmw_reads += s.media_rmw_reads.load(std::memory_order_relaxed);
    sum.user_bytes += s.user_bytes.load(std::memory_order_relaxed);
    sum.ops += s.ops.load(std::memory_order_relaxed);
    sum.emulated_write_waits += s.write_waits.load(std::memory_order_relaxed);
    sum.emulated_read_waits += s.read_waits.load(std::memory_order_relaxed);
    sum.emulated_reads_hidden += s.reads_hidden.load(std::memory_order_relaxed);
  }
  return sum;
}

namespace {

// Thread ids are recycled so that a long-lived process that starts many short threads
// (the benchmark driver) keeps using the first slots.
struct ThreadIdRegistry {
  std::mutex mu;
  std::vector<size_t> free_ids;
  size_t next = 0;
};

ThreadIdRegistry& Registry() {
  static ThreadIdRegistry* registry = new ThreadIdRegistry;  // never destroyed: threads
  return *registry;                                            // may exit after main
}

struct ThreadIdHolder {
  size_t id;
  ThreadIdHolder() {
    ThreadIdRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.free_ids.empty()) {
      id = r.free_ids.back();
      r.free_ids.pop_back();
    } else {
      id = r.next++;
    }
  }
  ~ThreadIdHolder() {
    ThreadIdRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.free_ids.push_back(id);
  }
};

}  // namespace

size_t CounterTable::AcquireThreadId() {
  thread_local ThreadIdHolder holder;
  return holder.id;
}

}  // namespace pmhash::pm
