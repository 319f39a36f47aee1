#include "common/epoch.h"

#include <algorithm>
#include <utility>

namespace pmhash {

EpochReclaimer::EpochReclaimer() : slots_(new Slot[pm::CounterTable::kMaxThreads + 1]) {}

void EpochReclaimer::Guard::EnterSlowly(EpochReclaimer& r, size_t id) {
  if (id >= pm::CounterTable::kMaxThreads) {
    slot_ = &r.slots_[pm::CounterTable::kMaxThreads];
    shared_ = true;
    slot_->value.fetch_add(1, std::memory_order_seq_cst);
    return;
  }
  slot_ = &r.slots_[id];
  slot_->value.store(r.epoch_.load(std::memory_order_acquire), std::memory_order_relaxed);
  LightFence();  // a full fence: membarrier is unavailable
}

EpochReclaimer::~EpochReclaimer() {
  for (Retired& r : retired_) r.free();
}

void EpochReclaimer::Retire(std::function<void()> free) {
  std::lock_guard<std::mutex> lock(mu_);
  // The tag is the epoch before the increment: a reader that entered at it or earlier may
  // hold what was unlinked; one that reads the incremented epoch cannot.
  const uint64_t tag = epoch_.fetch_add(1, std::memory_order_acq_rel);
  retired_.push_back({tag, std::move(free)});
  retired_count_.store(retired_.size(), std::memory_order_relaxed);
}

void EpochReclaimer::Collect() {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (retired_.empty()) return;
    HeavyFence();  // every reader's slot store before this is visible now
    uint64_t oldest = UINT64_MAX;  // the earliest epoch a reader is still inside
    for (size_t i = 0; i < pm::CounterTable::kMaxThreads; ++i) {
      const uint64_t e = slots_[i].value.load(std::memory_order_acquire);
      if (e != 0) oldest = std::min(oldest, e);
    }
    if (slots_[pm::CounterTable::kMaxThreads].value.load(std::memory_order_acquire) != 0) {
      oldest = 0;  // shared-slot readers: their epochs are unknown
    }
    auto keep = std::partition(retired_.begin(), retired_.end(),
                               [&](const Retired& r) { return r.tag >= oldest; });
    for (auto it = keep; it != retired_.end(); ++it) ready.push_back(std::move(it->free));
    retired_.erase(keep, retired_.end());
    retired_count_.store(retired_.size(), std::memory_order_relaxed);
  }
  for (auto& f : ready) f();  // outside the lock: a free may take its own locks
}

void EpochReclaimer::Drain() {
  for (int attempt = 0; HasRetired(); ++attempt) {
    Collect();
    if (HasRetired()) SpinBackoff(attempt);
  }
}

}  // namespace pmhash
