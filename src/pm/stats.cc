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

PersistCounters CountersMinus(const PersistCounters& a, const PersistCounters& b) {
  PersistCounters d;
  d.flushes = a.flushes - b.flushes;
  d.fences = a.fences - b.fences;
  d.bytes_stored = a.bytes_stored - b.bytes_stored;
  d.media_writes = a.media_writes - b.media_writes;
  d.lines_read = a.lines_read - b.lines_read;
  d.redundant_flushes = a.redundant_flushes - b.redundant_flushes;
  d.redundant_fences = a.redundant_fences - b.redundant_fences;
  d.write_backs = a.write_backs - b.write_backs;
  d.lines_written = a.lines_written - b.lines_written;
  d.media_reads = a.media_reads - b.media_reads;
  d.media_rmw_reads = a.media_rmw_reads - b.media_rmw_reads;
  d.user_bytes = a.user_bytes - b.user_bytes;
  d.ops = a.ops - b.ops;
  d.emulated_write_waits = a.emulated_write_waits - b.emulated_write_waits;
  d.emulated_read_waits = a.emulated_read_waits - b.emulated_read_waits;
  d.emulated_reads_hidden = a.emulated_reads_hidden - b.emulated_reads_hidden;
  return d;
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
  this_thread_id_ = holder.id;
  return holder.id;
}

}  // namespace pmhash::pm
