// Spash's hotspot detector (paper 002, Sec. III-B): a hot-key list in DRAM, hash
// partitioned by the highest p bits of the key's hash (its directory prefix), q keys per
// partition kept in LRU order. A key is hot if it is among the q keys of its partition
// most recently accessed before this access. The paper's setting: 8K entries, q = 2, so
// p = 12 (64 KiB of DRAM here, 8-byte hashes). Only Spash's updates consult and refresh it
// (docs/engines/spash.md says why not searches). Concurrent accesses race on a
// partition's words without locks: the list is a heuristic, a lost or doubled entry
// only misjudges one update's flush, never its correctness.
//
// The paper's comparison (Fig. 12a) replaces the detector with an oracle, which "gets the
// access probability from our workload generator": with `oracle`, a key is hot if its
// hash is among those SetOracle was given (the workload's hottest keys, as many as the
// list holds), looked up in an open-addressed set at most a quarter full, and the list is
// neither read nor written. Until SetOracle runs, every key is cold.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

namespace pmhash::engines::spash {

class HotKeys {
 public:
  // `entries` in all (0: off, every key cold), `per_partition` of them per partition;
  // entries / per_partition must be a power of two.
  void Reset(uint64_t entries, unsigned per_partition, bool oracle) {
    oracle_ = oracle;
    oracle_set_.clear();
    oracle_mask_ = 0;
    per_ = per_partition == 0 ? 1 : per_partition;
    const uint64_t partitions = entries / per_;
    bits_ = 0;
    while ((uint64_t{1} << bits_) < partitions) ++bits_;
    size_ = entries == 0 ? 0 : (uint64_t{1} << bits_) * per_;
    // An oracle takes the list's place: its words are never read.
    words_.reset(size_ == 0 || oracle ? nullptr : new std::atomic<uint64_t>[size_]);
    for (uint64_t i = 0; words_ != nullptr && i < size_; ++i) {
      words_[i].store(0, std::memory_order_relaxed);
    }
  }
  // The keys an oracle may name: the list's entries (0 without an oracle).
  uint64_t oracle_capacity() const { return oracle_ ? size_ : 0; }
  uint64_t bytes() const {
    return oracle_ ? oracle_set_.size() * sizeof(uint64_t) : size_ * sizeof(uint64_t);
  }

  // With an oracle: the hot keys' hashes from now on (at most oracle_capacity() of them
  // are kept; no Access may run meanwhile).
  void SetOracle(const std::vector<uint64_t>& hashes) {
    const uint64_t n = std::min<uint64_t>(hashes.size(), oracle_capacity());
    oracle_set_.assign(n == 0 ? 0 : std::bit_ceil(4 * n), 0);
    oracle_mask_ = oracle_set_.empty() ? 0 : oracle_set_.size() - 1;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t tag = hashes[i] | 1;
      uint64_t at = (tag >> 1) & oracle_mask_;
      while (oracle_set_[at] != 0 && oracle_set_[at] != tag) at = (at + 1) & oracle_mask_;
      oracle_set_[at] = tag;
    }
  }

  // Records an access of the key whose hash is h; returns whether it was hot.
  bool Access(uint64_t h) {
    if (oracle_) return OracleHas(h);
    if (size_ == 0) return false;
    const uint64_t tag = h | 1;  // 0 marks an empty entry
    std::atomic<uint64_t>* p = &words_[(bits_ == 0 ? 0 : h >> (64 - bits_)) * per_];
    unsigned at = per_;
    for (unsigned i = 0; i < per_; ++i) {
      if (p[i].load(std::memory_order_relaxed) == tag) {
        at = i;
        break;
      }
    }
    // Move to the front: the entries before it (or all, for a new key) shift back one.
    for (unsigned i = at == per_ ? per_ - 1 : at; i > 0; --i) {
      p[i].store(p[i - 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    p[0].store(tag, std::memory_order_relaxed);
    return at != per_;
  }

 private:
  bool OracleHas(uint64_t h) const {
    if (oracle_set_.empty()) return false;
    const uint64_t tag = h | 1;
    for (uint64_t at = (tag >> 1) & oracle_mask_;; at = (at + 1) & oracle_mask_) {
      if (oracle_set_[at] == tag) return true;
      if (oracle_set_[at] == 0) return false;
    }
  }

  bool oracle_ = false;
  std::vector<uint64_t> oracle_set_;  // tags (hash | 1), 0 for an empty place
  uint64_t oracle_mask_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
  uint64_t size_ = 0;
  unsigned bits_ = 0, per_ = 1;
};

}  // namespace pmhash::engines::spash
