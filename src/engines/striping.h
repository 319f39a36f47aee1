// Lock striping, once for every striped engine: a table's homes (cells, buckets) are
// guarded by a power-of-two number of stripes, stripe s guarding every run of
// 2^area_shift consecutive homes whose run number is s modulo the stripe count. A key's
// home is Reduce(Engine::KeyHash(key), table size) (util/hash.h), so doubling the table sends
// home k to 2k or 2k+1, and a resize splits each home in place.
//
// The table size changes only while every stripe is held (AllHeld: a resize), so an
// operation reads the size, locks the stripe of its home and checks the size again
// (LockHome), retrying if a resize came in between. ForEach holds the resize mutex shared
// (IterationScope) and copies one area at a time under its stripe (VisitAreas).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/locks.h"
#include "pmhash/index.h"
#include "util/hash.h"

namespace pmhash::engines {

// The stripe of an engine whose searches take no lock: the version of its lock lets
// them validate what they read (common/locks.h).
struct alignas(64) VersionedStripe {
  VersionedRwLock mu;
};

// Stripe is the engine's stripe type (a cache line holding a lock `mu` with lock /
// unlock / lock_shared / unlock_shared, and whatever per-stripe counters it keeps).
template <typename Stripe>
class Stripes {
 public:
  // `count` stripes (a power of two), each guarding runs of 2^area_shift homes.
  void Reset(size_t count, unsigned area_shift) {
    stripes_.reset(new Stripe[count]);
    count_ = count;
    shift_ = area_shift;
  }
  void set_area_shift(unsigned area_shift) { shift_ = area_shift; }

  size_t size() const { return count_; }
  Stripe& operator[](size_t i) const { return stripes_[i]; }
  size_t IndexOf(const Stripe& s) const { return static_cast<size_t>(&s - stripes_.get()); }
  // The stripe guarding `home`.
  Stripe& Of(uint64_t home) const { return stripes_[(home >> shift_) & (count_ - 1)]; }

  // Takes, in `mode`, the stripe guarding the home of `hash` in the live table, whose size
  // in homes is `table_size`. Returns the stripe (its `mu` held; release it with a
  // HeldLock) and sets *home = Reduce(hash, size) and *size for the size it holds.
  Stripe& LockHome(const std::atomic<uint64_t>& table_size, uint64_t hash, LockMode mode,
                   uint64_t* home, uint64_t* size) const {
    for (;;) {
      const uint64_t n = table_size.load(std::memory_order_acquire);
      const uint64_t h = Reduce(hash, n);
      Stripe& s = Of(h);
      if (mode == LockMode::kExclusive) {
        s.mu.lock();
      } else {
        s.mu.lock_shared();
      }
      if (table_size.load(std::memory_order_acquire) == n) {
        *home = h;
        *size = n;
        return s;
      }
      if (mode == LockMode::kExclusive) {  // a resize came between the read and the lock
        s.mu.unlock();
      } else {
        s.mu.unlock_shared();
      }
    }
  }

  // Every stripe held exclusively while it lives (a resize): taken in order, so two
  // threads taking all of them cannot deadlock; released in reverse.
  class AllHeld {
   public:
    explicit AllHeld(const Stripes& stripes) : stripes_(stripes) {
      for (size_t i = 0; i < stripes_.size(); ++i) stripes_[i].mu.lock();
    }
    ~AllHeld() {
      for (size_t i = stripes_.size(); i > 0; --i) stripes_[i - 1].mu.unlock();
    }
    AllHeld(const AllHeld&) = delete;
    AllHeld& operator=(const AllHeld&) = delete;

   private:
    const Stripes& stripes_;
  };

 private:
  std::unique_ptr<Stripe[]> stripes_;
  size_t count_ = 0;
  unsigned shift_ = 0;
};

// A ForEach in progress on this thread: holds the table's resize mutex shared (no resize
// while iterating, so no key moves and none is seen twice), unless a ForEach of the same
// table on this thread (fn calling ForEach) already holds it. A resize that an insert
// from fn would start asks Active() and refuses or defers itself instead of waiting for
// the ForEach it runs in.
class IterationScope {
 public:
  IterationScope(const void* table, std::shared_mutex& resize_mu)
      : lock_(resize_mu, std::defer_lock) {
    if (!Active(table)) lock_.lock();
    Tables().push_back(table);
  }
  ~IterationScope() { Tables().pop_back(); }
  IterationScope(const IterationScope&) = delete;
  IterationScope& operator=(const IterationScope&) = delete;

  // Whether this thread is inside a ForEach of `table`.
  static bool Active(const void* table) {
    const std::vector<const void*>& t = Tables();
    return std::find(t.begin(), t.end(), table) != t.end();
  }

 private:
  static std::vector<const void*>& Tables() {  // innermost last
    thread_local std::vector<const void*> tables;
    return tables;
  }
  std::shared_lock<std::shared_mutex> lock_;
};

// ForEach over a striped table of `homes` homes, `area` homes at a time (an area lies in
// one stripe): `collect(first, last, &batch)` copies the entries of homes [first, last)
// while their stripe is held shared; fn runs with no stripe held, so it may call the
// index. The caller keeps the table from resizing (IterationScope).
using Entries = std::vector<std::pair<std::string, std::string>>;
template <typename Stripe, typename Collect>
Status VisitAreas(const Stripes<Stripe>& stripes, uint64_t homes, uint64_t area,
                  Collect&& collect, const Index::Visitor& fn) {
  Entries batch;
  for (uint64_t first = 0; first < homes; first += area) {
    batch.clear();
    {
      Stripe& s = stripes.Of(first);
      s.mu.lock_shared();
      HeldLock guard(s.mu, LockMode::kShared);
      collect(first, std::min(homes, first + area), &batch);
    }
    for (const auto& [key, value] : batch) {
      if (!fn(key, value)) return Status::OK();
    }
  }
  return Status::OK();
}

}  // namespace pmhash::engines
