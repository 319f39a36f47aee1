// The keys and the timed slices of `pmhash bench ab`, on the public API alone: the same
// code runs in the bench (an index in the bench's own process) and in `pmhash-slices`
// (src/tools/slices), which is built against any commit's library, so that two builds are
// measured with one slice loop and one set of keys.
//
// Operation x of a phase, for `records` keys and a seed:
//   insert    KeyAt(x)                      value = key
//   search    shuffled[x % records]         the value must equal the key
//   negative  KeyAt(records + x)            must be NotFound (KeyAt is one-to-one)
//   delete    shuffled[x]                   must succeed (each key once: x < records)
// A slice of `threads` threads splits [begin, end) into contiguous parts.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pmhash/index.h"
#include "pmhash/status.h"

namespace pmhash::bench::ab {

// The i-th key of the run: distinct for distinct i (an invertible mix of i and the seed).
inline uint64_t KeyAt(uint64_t i, uint64_t seed) {
  uint64_t x = i ^ (seed * 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Phase { kInsert, kSearch, kNegative, kDelete };

// false for a name other than insert, search, negative, delete.
inline bool ParsePhase(std::string_view name, Phase* phase) {
  static constexpr std::string_view kNames[] = {"insert", "search", "negative", "delete"};
  for (int i = 0; i < 4; ++i) {
    if (name == kNames[i]) {
      *phase = static_cast<Phase>(i);
      return true;
    }
  }
  return false;
}

// The run's keys: the inserted ones in insert order and in the searches' shuffled order.
struct Keys {
  Keys(uint64_t records, uint64_t seed) : seed(seed), inserted(records) {
    for (uint64_t i = 0; i < records; ++i) inserted[i] = KeyAt(i, seed);
    shuffled = inserted;
    for (uint64_t i = records; i > 1; --i) {
      std::swap(shuffled[i - 1], shuffled[KeyAt(i - 1, seed + 1) % i]);
    }
  }
  uint64_t At(Phase phase, uint64_t x) const {
    switch (phase) {
      case Phase::kInsert: return inserted[x];
      case Phase::kNegative: return KeyAt(inserted.size() + x, seed);
      default: return shuffled[x % shuffled.size()];
    }
  }
  uint64_t seed;
  std::vector<uint64_t> inserted, shuffled;
};

// Lookups through Index::Get (what `pmhash bench` calls by default) or Index::GetU64
// (`--lookups u64`; a build whose API has no GetU64 refuses it).
enum class Lookup { kGet, kU64 };

template <typename IndexT>
constexpr bool kHasGetU64 = requires(IndexT& i, uint64_t k, uint64_t* v) { i.GetU64(k, v); };

// One operation, checked.
template <typename IndexT>
Status RunOne(IndexT* index, Phase phase, Lookup lookup, uint64_t k, std::string* scratch) {
  const std::string_view key(reinterpret_cast<const char*>(&k), sizeof(k));
  switch (phase) {
    case Phase::kInsert: return index->Insert(key, key);
    case Phase::kDelete: return index->Delete(key);
    default: break;
  }
  Status s;
  bool right_value = true;
  if constexpr (kHasGetU64<IndexT>) {
    if (lookup == Lookup::kU64) {
      uint64_t v = 0;
      s = index->GetU64(k, &v);
      right_value = v == k;
    }
  }
  if (lookup == Lookup::kGet) {
    s = index->Get(key, scratch);
    right_value = *scratch == key;
  }
  if (phase == Phase::kNegative) {
    return s.IsNotFound() ? Status::OK()
                          : s.ok() ? Status::Corruption("ab: a negative search found a key") : s;
  }
  if (s.ok() && !right_value) return Status::Corruption("ab: a search read the wrong value");
  return s;
}

// Runs slices with `threads` threads, the caller one of them; the others wait at a
// barrier between slices, so a slice's time has no thread start in it.
template <typename IndexT>
class SliceRunner {
 public:
  SliceRunner(const Keys* keys, Lookup lookup, int threads)
      : keys_(keys), lookup_(lookup), threads_(threads), start_(threads), done_(threads),
        errors_(threads) {
    for (int t = 1; t < threads; ++t) helpers_.emplace_back([this, t] { HelperLoop(t); });
  }
  ~SliceRunner() {
    index_ = nullptr;  // the helpers' signal to leave
    start_.arrive_and_wait();
    for (std::thread& h : helpers_) h.join();
  }
  SliceRunner(const SliceRunner&) = delete;
  SliceRunner& operator=(const SliceRunner&) = delete;

  // Operations [begin, end) of `phase` on index; *seconds: the slice's wall time. The
  // first error of any thread.
  Status Run(IndexT* index, Phase phase, uint64_t begin, uint64_t end, double* seconds) {
    index_ = index;
    phase_ = phase;
    begin_ = begin;
    end_ = end;
    const auto t0 = std::chrono::steady_clock::now();
    start_.arrive_and_wait();
    RunPart(0);
    done_.arrive_and_wait();
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const Status& s : errors_) {
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

 private:
  void HelperLoop(int t) {
    for (;;) {
      start_.arrive_and_wait();
      if (index_ == nullptr) return;
      RunPart(t);
      done_.arrive_and_wait();
    }
  }
  void RunPart(int t) {
    const uint64_t n = end_ - begin_;
    const uint64_t from = begin_ + n * t / threads_, to = begin_ + n * (t + 1) / threads_;
    std::string scratch;
    Status s;
    for (uint64_t x = from; x < to && s.ok(); ++x) {
      s = RunOne(index_, phase_, lookup_, keys_->At(phase_, x), &scratch);
    }
    errors_[t] = s;
  }

  const Keys* keys_;
  const Lookup lookup_;
  const int threads_;
  // Set by the caller before the start barrier, read by the helpers after it.
  IndexT* index_ = nullptr;
  Phase phase_ = Phase::kInsert;
  uint64_t begin_ = 0, end_ = 0;
  std::barrier<> start_, done_;
  std::vector<Status> errors_;
  std::vector<std::thread> helpers_;
};

}  // namespace pmhash::bench::ab
