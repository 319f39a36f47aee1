#include "pm/stats.h"

#include <mutex>
#include <vector>

namespace pmhash::pm {

MediaLineModel::MediaLineModel() {
  bucket_.fill(kNil);
  chain_.fill(kNil);
  prev_.fill(kNil);
  next_.fill(kNil);
  tag_.fill(~0ull);
}

void MediaLineModel::Unlink(uint8_t e) {
  if (prev_[e] != kNil) next_[prev_[e]] = next_[e]; else head_ = next_[e];
  if (next_[e] != kNil) prev_[next_[e]] = prev_[e]; else tail_ = prev_[e];
}

void MediaLineModel::PushFront(uint8_t e) {
  prev_[e] = kNil;
  next_[e] = head_;
  if (head_ != kNil) prev_[head_] = e; else tail_ = e;
  head_ = e;
}

void MediaLineModel::RemoveFromBucket(uint8_t e) {
  uint8_t* link = &bucket_[Bucket(tag_[e])];
  while (*link != e) link = &chain_[*link];
  *link = chain_[e];
}

bool MediaLineModel::Touch(uintptr_t address) {
  const uint64_t tag = address >> kLineShift;
  if (tag == last_tag_) return false;  // already at the front of the LRU list
  last_tag_ = tag;
  const size_t b = Bucket(tag);
  for (uint8_t e = bucket_[b]; e != kNil; e = chain_[e]) {
    if (tag_[e] == tag) {
      if (head_ != e) {
        Unlink(e);
        PushFront(e);
      }
      return false;
    }
  }
  uint8_t e;
  if (used_ < kEntries) {
    e = used_++;
  } else {
    e = tail_;
    Unlink(e);
    RemoveFromBucket(e);
  }
  tag_[e] = tag;
  chain_[e] = bucket_[b];
  bucket_[b] = e;
  PushFront(e);
  return true;
}

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
